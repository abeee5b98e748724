"""Inline SVG drawn on the server: node-and-arrow graphs and sparklines.

Every element carries data attributes (``data-node``, ``data-from``/``data-to``) so a
browser test can check the picture's structure, and every text is HTML-escaped.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from html import escape

NODE_W, NODE_H = 150, 34
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


def layered(nodes: dict[str, Node], layers: list[list[str]], dx: float = 200, dy: float = 90) -> tuple[float, float]:
    """Place ``layers`` (lists of node ids) as columns, left to right; returns the canvas size."""
    tallest = max((len(col) for col in layers), default=1)
    for i, col in enumerate(layers):
        off = (tallest - len(col)) * dy / 2
        for j, nid in enumerate(col):
            nodes[nid].x = 20 + i * dx
            nodes[nid].y = 20 + off + j * dy
    return 40 + max(len(layers) - 1, 0) * dx + NODE_W, 40 + (tallest - 1) * dy + NODE_H


def circle(nodes: dict[str, Node], order: list[str]) -> tuple[float, float]:
    """Place ``order`` clockwise on a circle (a cycle reads round); returns the canvas size."""
    r = max(90.0, 60.0 * len(order) / math.pi)
    cx, cy = 20 + r + NODE_W / 2, 20 + r + NODE_H / 2
    for i, nid in enumerate(order):
        a = -math.pi / 2 + 2 * math.pi * i / max(len(order), 1)
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


def graph(nodes: dict[str, Node], edges: list[Edge], size: tuple[float, float], title: str) -> str:
    """An SVG of boxes and lines; paused edges are arrows from the pausing to the paused side."""
    w, h = size
    out = [f'<svg class="graph" xmlns="http://www.w3.org/2000/svg" width="{w:.0f}" height="{h:.0f}" '
           f'viewBox="0 0 {w:.0f} {h:.0f}" role="img" aria-label="{escape(title)}">',
           '<defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7" markerHeight="7" '
           'orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" fill="#c22"/></marker></defs>']
    for e in edges:
        a, b = nodes.get(e.src), nodes.get(e.dst)
        if a is None or b is None:
            continue
        x1, y1, x2, y2 = _end(a, b)
        paused = "paused" in e.cls.split()
        style = 'stroke="#c22" stroke-width="2.5" marker-end="url(#arrow)"' if paused else f'stroke="{e.colour}" stroke-width="1.5"'
        line = (f'<g class="edge {escape(e.cls)}" data-from="{escape(e.src)}" data-to="{escape(e.dst)}">'
                f'<line x1="{x1:.1f}" y1="{y1:.1f}" x2="{x2:.1f}" y2="{y2:.1f}" {style}/>')
        if e.label:
            line += (f'<text x="{(x1 + x2) / 2:.1f}" y="{(y1 + y2) / 2 - 4:.1f}" font-size="10" text-anchor="middle" '
                     f'fill="#333">{escape(e.label)}</text>')
        line += "</g>"
        out.append(f'<a href="{escape(e.href)}">{line}</a>' if e.href else line)
    for n in nodes.values():
        box = (f'<g class="node {escape(n.cls)}" data-node="{escape(n.id)}">'
               f'<rect x="{n.x:.1f}" y="{n.y:.1f}" width="{NODE_W}" height="{NODE_H}" rx="5" class="{escape(n.cls)}"/>'
               f'<text x="{n.x + NODE_W / 2:.1f}" y="{n.y + (14 if n.sub else 21):.1f}" text-anchor="middle" font-size="12">'
               f'{escape(_short(n.label))}</text>')
        if n.sub:
            box += f'<text x="{n.x + NODE_W / 2:.1f}" y="{n.y + 28:.1f}" text-anchor="middle" font-size="10">{escape(_short(n.sub))}</text>'
        box += f"<title>{escape(n.label)}</title></g>"
        out.append(f'<a href="{escape(n.href)}">{box}</a>' if n.href else box)
    out.append("</svg>")
    return "".join(out)


def _short(s: str, n: int = 22) -> str:
    return s if len(s) <= n else s[: n - 1] + "…"


def sparkline(points: list[tuple[float, float]], w: int = 180, h: int = 32) -> str:
    """A polyline of (t, value) points scaled to the box; the empty string with fewer than two."""
    if len(points) < 2:
        return ""
    t0, t1 = points[0][0], points[-1][0]
    vs = [v for _, v in points]
    lo, hi = min(vs), max(vs)
    span_t = (t1 - t0) or 1.0
    span_v = (hi - lo) or 1.0
    pts = " ".join(f"{(t - t0) / span_t * (w - 2) + 1:.1f},{h - 1 - (v - lo) / span_v * (h - 2):.1f}" for t, v in points)
    return (f'<svg class="spark" xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}">'
            f'<polyline fill="none" stroke="#36c" stroke-width="1.5" points="{pts}"/></svg>')
