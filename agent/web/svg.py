"""Inline SVG drawn on the server: node-and-arrow graphs, sparklines and heat cells.

Every element carries data attributes (``data-node``, ``data-from``/``data-to``) so a
browser test can check the picture's structure, and every text is HTML-escaped. Edge labels
are placed where they cross no box (:func:`place_labels`) and drawn last, on a white halo,
so a box never hides them; the pictures size their columns to the labels they carry.
Every SVG scales down to the page's width (``viewBox``; ``max-width: 100%`` in the style).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from html import escape

NODE_W, NODE_H = 150, 34
LABEL_FONT = 10
CHAR_W = 0.62 * LABEL_FONT  # average advance of a sans-serif character at LABEL_FONT px (a safe upper bound for labels)
SEVERITY_COLOUR = {"critical": "#d33", "warning": "#e90", None: "#6a6"}


@dataclass(slots=True)
class Node:
    id: str
    label: str
    x: float = 0.0
    y: float = 0.0
    cls: str = ""
    href: str | None = None
    sub: str = ""  # a second, smaller line (a count, a port)


@dataclass(slots=True)
class Edge:
    src: str
    dst: str
    label: str = ""
    cls: str = ""  # "paused" draws an arrow, "" a plain link
    href: str | None = None
    colour: str = "#999"


Box = tuple[float, float, float, float]  # x0, y0, x1, y1


def label_width(s: str) -> float:
    return len(s) * CHAR_W + 6


def gap_for(edges: list[Edge], least: float = 50.0) -> float:
    """The space between two columns that fits the widest edge label beside its arrow."""
    return max([least, *(label_width(e.label) + 24 for e in edges if e.label)])


def layered(nodes: dict[str, Node], layers: list[list[str]], dx: float = 200, dy: float = 90) -> tuple[float, float]:
    """Place ``layers`` (lists of node ids) as columns, left to right; returns the canvas size."""
    tallest = max((len(col) for col in layers), default=1)
    for i, col in enumerate(layers):
        off = (tallest - len(col)) * dy / 2
        for j, nid in enumerate(col):
            nodes[nid].x = 20 + i * dx
            nodes[nid].y = 20 + off + j * dy
    return 40 + max(len(layers) - 1, 0) * dx + NODE_W, 40 + (tallest - 1) * dy + NODE_H


def circle(nodes: dict[str, Node], order: list[str], least_gap: float = 40.0) -> tuple[float, float]:
    """Place ``order`` clockwise on a circle (a cycle reads round), wide enough that
    neighbours keep ``least_gap`` between their boxes; returns the canvas size."""
    n = max(len(order), 1)
    r = max(90.0, (NODE_W + least_gap) * n / (2 * math.pi), (NODE_H + least_gap) / (2 * math.sin(math.pi / n)) if n > 1 else 0)
    cx, cy = 20 + r + NODE_W / 2, 20 + r + NODE_H / 2
    for i, nid in enumerate(order):
        a = -math.pi / 2 + 2 * math.pi * i / n
        nodes[nid].x = cx + r * math.cos(a) - NODE_W / 2
        nodes[nid].y = cy + r * math.sin(a) - NODE_H / 2
    return 2 * cx, 2 * cy


def _end(a: Node, b: Node) -> tuple[float, float, float, float]:
    """The segment between the two boxes' borders (so arrow heads stay visible)."""
    ax, ay = a.x + NODE_W / 2, a.y + NODE_H / 2
    bx, by = b.x + NODE_W / 2, b.y + NODE_H / 2
    dx, dy = bx - ax, by - ay
    if dx == 0 and dy == 0:
        return ax, ay, bx, by
    # shrink each end to the box border: the smaller of the horizontal and vertical scale
    s = min((NODE_W / 2) / abs(dx) if dx else math.inf, (NODE_H / 2) / abs(dy) if dy else math.inf)
    return ax + dx * s, ay + dy * s, bx - dx * s, by - dy * s


def _overlaps(a: Box, b: Box) -> bool:
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


def label_box(x: float, y: float, s: str) -> Box:
    """The box a label centred at (x, y) (its baseline 3 px below y) covers."""
    w = label_width(s)
    return x - w / 2, y - LABEL_FONT + 2, x + w / 2, y + 4


def node_box(n: Node) -> Box:
    return n.x, n.y, n.x + NODE_W, n.y + NODE_H


def place_labels(nodes: dict[str, Node], edges: list[Edge]) -> dict[int, tuple[float, float]]:
    """Edge index -> where its label goes: the first point along the edge, from its middle
    outwards and then beside it, whose label box crosses no box and no label placed before."""
    taken = [node_box(n) for n in nodes.values()]
    out: dict[int, tuple[float, float]] = {}
    for i, e in enumerate(edges):
        a, b = nodes.get(e.src), nodes.get(e.dst)
        if not e.label or a is None or b is None:
            continue
        x1, y1, x2, y2 = _end(a, b)
        length = math.hypot(x2 - x1, y2 - y1) or 1.0
        nx, ny = -(y2 - y1) / length, (x2 - x1) / length  # the normal, for positions beside the line
        best = None
        for along in (0.5, 0.4, 0.6, 0.3, 0.7, 0.2, 0.8):
            for side in (-7.0, 9.0, -18.0, 20.0, -30.0, 32.0):
                x, y = x1 + (x2 - x1) * along + nx * side, y1 + (y2 - y1) * along + ny * side
                box = label_box(x, y, e.label)
                if not any(_overlaps(box, t) for t in taken):
                    best = (x, y, box)
                    break
            if best:
                break
        if best is None:  # no free place: the middle, still on a halo above everything
            x, y = (x1 + x2) / 2, (y1 + y2) / 2 - 4
            best = (x, y, label_box(x, y, e.label))
        out[i] = best[0], best[1]
        taken.append(best[2])
    return out


STYLE = ('<style>text.elabel{paint-order:stroke;stroke:#fff;stroke-width:3px;stroke-linejoin:round;font-size:10px;fill:#222}'
         '</style>')


def graph(nodes: dict[str, Node], edges: list[Edge], size: tuple[float, float], title: str) -> str:
    """An SVG of boxes and lines; paused edges are arrows from the pausing to the paused side.
    Lines first, boxes over them, edge labels last (placed clear of every box)."""
    w, h = size
    out = [f'<svg class="graph" xmlns="http://www.w3.org/2000/svg" width="{w:.0f}" height="{h:.0f}" '
           f'viewBox="0 0 {w:.0f} {h:.0f}" role="img" aria-label="{escape(title)}">', STYLE,
           '<defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7" markerHeight="7" '
           'orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" fill="#c22"/></marker></defs>']
    spots = place_labels(nodes, edges)
    labels = []
    for i, e in enumerate(edges):
        a, b = nodes.get(e.src), nodes.get(e.dst)
        if a is None or b is None:
            continue
        x1, y1, x2, y2 = _end(a, b)
        paused = "paused" in e.cls.split()
        style = 'stroke="#c22" stroke-width="2.5" marker-end="url(#arrow)"' if paused else f'stroke="{e.colour}" stroke-width="1.5"'
        line = (f'<g class="edge {escape(e.cls)}" data-from="{escape(e.src)}" data-to="{escape(e.dst)}">'
                f'<line x1="{x1:.1f}" y1="{y1:.1f}" x2="{x2:.1f}" y2="{y2:.1f}" {style}/></g>')
        out.append(f'<a href="{escape(e.href)}">{line}</a>' if e.href else line)
        if i in spots:
            x, y = spots[i]
            t = (f'<text class="elabel" data-edge="{escape(e.src)}|{escape(e.dst)}" x="{x:.1f}" y="{y:.1f}" '
                 f'text-anchor="middle">{escape(e.label)}</text>')
            labels.append(f'<a href="{escape(e.href)}">{t}</a>' if e.href else t)
    for n in nodes.values():
        box = (f'<g class="node {escape(n.cls)}" data-node="{escape(n.id)}">'
               f'<rect x="{n.x:.1f}" y="{n.y:.1f}" width="{NODE_W}" height="{NODE_H}" rx="5" class="{escape(n.cls)}"/>'
               f'<text x="{n.x + NODE_W / 2:.1f}" y="{n.y + (14 if n.sub else 21):.1f}" text-anchor="middle" font-size="12">'
               f'{escape(_short(n.label))}</text>')
        if n.sub:
            box += f'<text x="{n.x + NODE_W / 2:.1f}" y="{n.y + 28:.1f}" text-anchor="middle" font-size="10">{escape(_short(n.sub))}</text>'
        box += f"<title>{escape(n.label)}{(' — ' + escape(n.sub)) if n.sub else ''}</title></g>"
        out.append(f'<a href="{escape(n.href)}">{box}</a>' if n.href else box)
    out.extend(labels)
    out.append("</svg>")
    return "".join(out)


def _short(s: str, n: int = 22) -> str:
    return s if len(s) <= n else s[: n - 1] + "…"


def flat(values: list[float]) -> bool:
    """True when the values differ by no more than float noise (a range of 0.998 to 0.998)."""
    lo, hi = min(values), max(values)
    return hi - lo <= 1e-9 * max(abs(lo), abs(hi), 1e-12)


def sparkline(points: list[tuple[float, float]], w: int = 180, h: int = 32, span: tuple[float, float | None] | None = None) -> str:
    """A polyline of (t, value) points scaled to the box; the empty string with fewer than two.

    A flat series is drawn as a flat line at mid height (its value is printed beside it), not
    stretched into a zig-zag of float noise. ``span``: (start, end or None) of a finding,
    shaded so the chart shows what happened before, during and after it."""
    if len(points) < 2:
        return ""
    t0, t1 = points[0][0], points[-1][0]
    vs = [v for _, v in points]
    lo, hi = min(vs), max(vs)
    span_t = (t1 - t0) or 1.0

    def x(t: float) -> float:
        return (t - t0) / span_t * (w - 2) + 1

    if flat(vs):
        pts = f"{x(t0):.1f},{h / 2:.1f} {x(t1):.1f},{h / 2:.1f}"
    else:
        span_v = hi - lo
        pts = " ".join(f"{x(t):.1f},{h - 1 - (v - lo) / span_v * (h - 2):.1f}" for t, v in points)
    band = ""
    if span is not None:
        a = max(t0, span[0])
        b = t1 if span[1] is None else min(t1, span[1])
        if b > a:
            band = f'<rect class="active" x="{x(a):.1f}" y="0" width="{max(1.0, x(b) - x(a)):.1f}" height="{h}" fill="#fdd"/>'
    return (f'<svg class="spark" xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}">{band}'
            f'<polyline fill="none" stroke="#36c" stroke-width="1.5" points="{pts}"/></svg>')


def heat_level(v: float | None, steps: tuple[float, ...]) -> int:
    """0..4: how far ``v`` climbs the ``steps`` (four thresholds, ascending); the page's CSS
    classes ``h0`` (none) .. ``h4`` (worst) colour it (views.STYLE)."""
    if v is None or v != v or v <= 0:
        return 0
    return 1 + sum(v >= s for s in steps[1:]) if v >= steps[0] else 0
