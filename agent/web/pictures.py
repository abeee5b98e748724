"""What each picture shows: a storm's pause tree, a deadlock's cycle, a port and its peer, the fabric.

Pause direction: a port that *receives* pause frames is paused by its peer, so a paused
edge points from the peer (the side sending pause) to the finding's device; a port that
sends more pause than it receives (an origin NIC) points to its peer instead. That is how a
PFC storm spreads: from the origin (a NIC or port that keeps sending pause) hop by hop
towards the victims whose queues it stops (IEEE 802.1Qbb: PAUSE stops the receiver's
transmitter on that priority).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from fabricmon.agent.detector.analyses.fabric import FabricShape
from fabricmon.agent.web.svg import SEVERITY_COLOUR, Edge, Node, circle, graph, layered
from fabricmon.core.model import Finding
from fabricmon.core.topology import Topology

SEVERITY_RANK = {"critical": 2, "warning": 1}
Href = Callable[[Finding], str]


def _split(ref: str) -> tuple[str, str]:
    dev, _, port = ref.rpartition(":")
    return (dev, port) if dev else (ref, "")


def _peer(f: Finding, topo: Topology) -> tuple[str, str] | None:
    if f.port is not None:
        p = topo.peer(f.device, f.port)
        if p is not None:
            return p
    if f.peer_device:
        return f.peer_device, f.peer_port or ""
    return None


def _storm_origin(f: Finding) -> str | None:
    """The ``device:port`` a storm spreads from: a victim names it in evidence, the origin is it."""
    if f.role == "origin" and f.port is not None:
        return f"{f.device}:{f.port}"
    origin = f.evidence.get("origin")
    return str(origin) if origin else None


def storm_group(f: Finding, pool: Iterable[Finding]) -> list[Finding]:
    """The findings of one storm: same kind, priority and origin (else, with no origin named, the same start)."""
    origin = _storm_origin(f)
    return [g for g in pool if g.kind == f.kind and g.priority == f.priority
            and (_storm_origin(g) == origin if origin else g.start == f.start)]


def _sends_pause(f: Finding) -> bool:
    """True when the finding's port is the one sending pause (an origin NIC), not receiving it."""
    ev = f.evidence
    tx, rx = ev.get("tx_pause_frames_per_s"), ev.get("rx_pause_frames_per_s")
    return isinstance(tx, int | float) and isinstance(rx, int | float) and tx > rx


def storm_picture(f: Finding, pool: Iterable[Finding], topo: Topology, href: Href) -> str:
    """Devices of the storm, paused directions as arrows, other cables among them in grey."""
    nodes: dict[str, Node] = {}
    edges: list[Edge] = []
    succ: dict[str, list[str]] = {}
    for g in storm_group(f, pool):
        nodes.setdefault(g.device, Node(g.device, g.device, cls=g.role or ""))
        if g.role == "origin":
            nodes[g.device].cls = "origin"
        peer = _peer(g, topo)
        if peer is None:
            continue
        nodes.setdefault(peer[0], Node(peer[0], peer[0]))
        if _sends_pause(g):
            src, dst, label = g.device, peer[0], f"{g.port or ''} → {peer[1]}"
        else:
            src, dst, label = peer[0], g.device, f"{peer[1]} → {g.port or ''}"
        edges.append(Edge(src, dst, label, "paused", href(g)))
        succ.setdefault(src, []).append(dst)
    drawn = {frozenset((e.src, e.dst)) for e in edges}
    for (a, _), (b, _) in topo.items():  # the neighbourhood: cables among the drawn devices
        if a < b and a in nodes and b in nodes and frozenset((a, b)) not in drawn:
            edges.append(Edge(a, b))
            drawn.add(frozenset((a, b)))
    size = layered(nodes, _pause_columns(nodes, edges, succ))
    return graph(nodes, edges, size, f"PFC storm tree, priority {f.priority}")


def _pause_columns(nodes: dict[str, Node], edges: list[Edge], succ: dict[str, list[str]]) -> list[list[str]]:
    """Columns by hops along the pause arrows from the devices nothing pauses (the origin side);
    devices the arrows do not reach come last."""
    targets = {e.dst for e in edges if "paused" in e.cls}
    roots = sorted(n for n in nodes if n not in targets) or sorted(nodes)[:1]
    depth = {r: 0 for r in roots}
    queue = list(roots)
    while queue:
        n = queue.pop(0)
        for m in sorted(succ.get(n, [])):
            if m not in depth:
                depth[m] = depth[n] + 1
                queue.append(m)
    last = max(depth.values(), default=0)
    layers: list[list[str]] = [[] for _ in range(last + 2)]
    for n in sorted(nodes):
        layers[depth.get(n, last + 1)].append(n)
    return [col for col in layers if col]


def cycle_picture(f: Finding, pool: Iterable[Finding], href: Href) -> str:
    """The deadlock's ports on a circle, each waiting on the next (``evidence.cycle`` order)."""
    cycle = [str(x) for x in f.evidence.get("cycle") or []]
    if not cycle:  # members of the same cycle share kind, priority and start
        cycle = [f"{g.device}:{g.port}" for g in sorted(pool, key=lambda g: g.sort_key)
                 if g.kind == f.kind and g.priority == f.priority and g.start == f.start]
    links = {f"{g.device}:{g.port}": href(g) for g in pool if g.kind == f.kind and g.priority == f.priority}
    nodes = {}
    for ref in cycle:
        dev, port = _split(ref)
        nodes[ref] = Node(ref, dev, sub=port, cls="member", href=links.get(ref))
    edges = [Edge(a, b, "waits on", "paused") for a, b in zip(cycle, cycle[1:] + cycle[:1], strict=True) if a != b]
    return graph(nodes, edges, circle(nodes, cycle), f"{f.kind} cycle of {len(cycle)} ports")


def port_picture(f: Finding, topo: Topology) -> str:
    """The port's device and the device at the other end of its cable."""
    nodes = {f.device: Node(f.device, f.device, sub=f.port or "", cls="subject")}
    edges = []
    peer = _peer(f, topo)
    if peer is not None and peer[0] != f.device:
        nodes[peer[0]] = Node(peer[0], peer[0], sub=peer[1])
        edges.append(Edge(f.device, peer[0], f"{f.port or ''} — {peer[1]}", colour=SEVERITY_COLOUR.get(f.severity, "#999")))
    return graph(nodes, edges, layered(nodes, [[n] for n in nodes]), f"{f.kind} on {f.device} {f.port or ''}")


def finding_picture(f: Finding, pool: list[Finding], topo: Topology, href: Href) -> str:
    if f.kind == "pfc_storm":
        return storm_picture(f, pool, topo, href)
    if f.kind in ("pfc_deadlock", "credit_deadlock") and f.role != "stalled":  # a stalled port is alone: its cable
        return cycle_picture(f, pool, href)
    return port_picture(f, topo)


def worst_by_port(findings: Iterable[Finding]) -> dict[tuple[str, str], Finding]:
    """Per (device, port), the most severe active finding (earliest first among equals)."""
    out: dict[tuple[str, str], Finding] = {}
    for f in findings:
        if f.port is None:
            continue
        k = (f.device, f.port)
        old = out.get(k)
        if old is None or SEVERITY_RANK.get(f.severity, 0) > SEVERITY_RANK.get(old.severity, 0):
            out[k] = f
    return out


def _worse(f: Finding | None, than: Finding | None) -> bool:
    return f is not None and (than is None or SEVERITY_RANK.get(f.severity, 0) > SEVERITY_RANK.get(than.severity, 0))


def fabric_picture(shape: FabricShape, findings: Iterable[Finding], href: Href) -> str:
    """Switch tiers (hops from the hosts: leaves, then spines) above host groups collapsed with counts.

    Which device is a host, the tiers and the planes are the ``fabric`` analysis's
    (:class:`~fabricmon.agent.detector.analyses.fabric.FabricShape`), the same the detector and
    the audit use. Each cable is coloured by the worst active finding on either end and links to
    it; each device box is coloured by its worst finding. Hosts with the same set of switches form
    one box ("12 hosts"), which keeps a thousand-GPU fabric readable. Within a tier, switches are
    grouped by plane.
    """
    worst = worst_by_port(findings)
    store = shape.store
    names = set(store.devices) | set(shape.peers()) | {d for d, _ in store.ports} | {d for d, _ in worst}
    hosts = {n for n in names if shape.is_host(n)}
    switches = names - hosts
    dev_worst: dict[str, Finding] = {}
    for (d, _), f in worst.items():
        if _worse(f, dev_worst.get(d)):
            dev_worst[d] = f
    nodes: dict[str, Node] = {}
    for s in switches:
        f = dev_worst.get(s)
        nodes[s] = Node(s, s, cls=f"switch {f.severity if f else 'ok'}", href=href(f) if f else None)
    group_of = _host_groups(shape, hosts, switches, dev_worst, nodes, href)
    edges = _cables(shape.topology, nodes, group_of, worst, href)
    tier, plane = shape.tiers(switches, hosts), shape.planes(switches)
    top = max(tier.values(), default=0)
    rows = [sorted((s for s in switches if tier[s] == t), key=lambda s: (plane[s], s)) for t in range(top, -1, -1)]
    rows.append(sorted(n for n in nodes if n not in switches))
    size = _rows(nodes, [r for r in rows if r])
    return graph(nodes, edges, size, "fabric topology")


def _host_groups(shape: FabricShape, hosts: set[str], switches: set[str], dev_worst: dict[str, Finding],
                 nodes: dict[str, Node], href: Href) -> dict[str, str]:
    """One box per set of hosts cabled to the same switches (coloured by their worst finding);
    returns host -> its box."""
    peers = shape.peers()
    groups: dict[frozenset[str], list[str]] = {}
    for h in sorted(hosts):
        groups.setdefault(frozenset(peers.get(h, set()) & switches), []).append(h)
    group_of: dict[str, str] = {}
    for members in sorted(groups.values(), key=lambda m: m[0]):
        gid = members[0] if len(members) == 1 else f"hosts:{members[0]}"
        bad = [dev_worst[h] for h in members if h in dev_worst]
        worst_f = max(bad, key=lambda f: SEVERITY_RANK.get(f.severity, 0)) if bad else None
        sub = f"{len(members)} hosts" if len(members) > 1 else ""
        nodes[gid] = Node(gid, members[0] if len(members) == 1 else f"{members[0]} …", sub=sub,
                          cls=f"hosts {worst_f.severity if worst_f else 'ok'}", href=href(worst_f) if worst_f else None)
        for h in members:
            group_of[h] = gid
    return group_of


def _cables(topo: Topology, nodes: dict[str, Node], group_of: dict[str, str], worst: dict[tuple[str, str], Finding],
            href: Href) -> list[Edge]:
    """One edge per pair of boxes, coloured by the worst finding on either end of any of its cables."""
    edges: dict[tuple[str, str], Edge] = {}
    for (a, pa), (b, pb) in topo.items():
        na, nb = group_of.get(a, a), group_of.get(b, b)
        if na == nb or na not in nodes or nb not in nodes:
            continue
        key = (min(na, nb), max(na, nb))
        f = max((x for x in (worst.get((a, pa)), worst.get((b, pb))) if x is not None),
                key=lambda x: SEVERITY_RANK.get(x.severity, 0), default=None)
        e = edges.get(key)
        if e is None:
            e = edges[key] = Edge(key[0], key[1], cls="link ok")
        if f is not None and (e.cls == "link ok" or SEVERITY_RANK.get(f.severity, 0) > SEVERITY_RANK.get(e.cls.split()[-1], 0)):
            e.cls, e.colour, e.href, e.label = f"link {f.severity}", SEVERITY_COLOUR[f.severity], href(f), f"{a} {pa}"
    return list(edges.values())


def _rows(nodes: dict[str, Node], rows: list[list[str]], dx: float = 175, dy: float = 110) -> tuple[float, float]:
    """Tiers as horizontal rows, top to bottom, each centred."""
    widest = max((len(r) for r in rows), default=1)
    for i, row in enumerate(rows):
        off = (widest - len(row)) * dx / 2
        for j, nid in enumerate(row):
            nodes[nid].x = 20 + off + j * dx
            nodes[nid].y = 20 + i * dy
    return 40 + (widest - 1) * dx + 150, 40 + (len(rows) - 1) * dy + 34
