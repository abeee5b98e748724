"""``/fabric`` at any size, its groups, the device pages and the search.

A fabric of 10 ports and one of 100,000 are drawn the same way: its tiers (core, spine, leaf:
hops from the hosts) and the hosts, each tier as tiles, one per group of switches or hosts
(pods, planes, sets of hosts on the same leaves: :meth:`FabricShape.layout`, the fabric
analysis's, not this module's). A tile is a heat map of its group: the worst active finding,
the highest pause ratio (``fabricmon_port_pause_ratio``), the highest XmitWait ratio
(``fabricmon_port_xmit_wait_ratio``) and the errors per second summed over its ports. A tile
opens its group (``/fabric/groups/<id>``: its switches or hosts), a switch or host its device
page (``/devices/<name>``: its ports, their peers, rates and findings), a finding its page: a
finding is three clicks from ``/fabric``. A small fabric also gets the cable picture.

Everything here is built once per detection pass (:class:`FabricIndex`), from the pipeline's
state at that pass, and only read by the pages.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from html import escape
from typing import TYPE_CHECKING
from urllib.parse import quote

import numpy as np

from fabricmon.agent.detector.analyses.fabric import FabricShape, Group, Layout
from fabricmon.agent.web import pictures, text
from fabricmon.agent.web.svg import heat_level
from fabricmon.agent.web.views import device_href, finding_rows, href, page, root, scroll
from fabricmon.core.guid import norm_guid
from fabricmon.core.model import Finding
from fabricmon.core.vocabulary import COUNTERS

if TYPE_CHECKING:
    from fabricmon.agent.pipeline import Pipeline

ERRORS = tuple(n for n, c in COUNTERS.items() if c.group == "errors")
DROPS = tuple(n for n, c in COUNTERS.items() if c.group == "drops")
PAUSE, WAIT = "fabricmon_port_pause_ratio", "fabricmon_port_xmit_wait_ratio"
# Heat steps (four thresholds: colour levels 1-4). Pause and XmitWait: the share of time a
# port could not send; a few percent is a busy fabric's normal (DCQCN keeps queues near their
# marking threshold), half the time is a port stuck behind a storm or a loop. Errors per second
# on a group: one is a cable to watch (IBTA's default symbol-error threshold is 10 per 15 min per
# port, ~0.01/s), a thousand is a link failing.
RATIO_STEPS = (0.01, 0.05, 0.2, 0.5)
ERROR_STEPS = (0.01, 1.0, 100.0, 1000.0)
SMALL_PICTURE = 60  # boxes up to which /fabric also draws every device and cable
MAX_SEARCH = 200
MAX_DEVICE_PORTS = 400


@dataclass(slots=True)
class Heat:
    """What a tile shows: the worst finding and the highest or summed port figures."""

    worst: Finding | None = None
    findings: int = 0
    pause: float | None = None
    wait: float | None = None
    errors: float = 0.0
    ports: int = 0

    def add_finding(self, f: Finding) -> None:
        self.findings += 1
        if pictures._worse(f, self.worst):
            self.worst = f

    def add(self, other: Heat) -> None:
        if other.worst is not None and pictures._worse(other.worst, self.worst):
            self.worst = other.worst
        self.findings += other.findings
        self.pause = _max(self.pause, other.pause)
        self.wait = _max(self.wait, other.wait)
        self.errors += other.errors
        self.ports += other.ports


def _max(a: float | None, b: float | None) -> float | None:
    return b if a is None else a if b is None else max(a, b)


@dataclass
class FabricIndex:
    """The fabric at one pass: layout, per-port and per-device heat, search keys."""

    shape: FabricShape
    layout: Layout
    groups: dict[str, Group]
    port_heat: dict[tuple[str, str], Heat]
    device_heat: dict[str, Heat]
    device_findings: dict[str, list[Finding]]
    labels: dict[str, str] = field(default_factory=dict)

    @classmethod
    def build(cls, p: Pipeline, findings: list[Finding]) -> FabricIndex:
        shape = FabricShape(p.store, p.topology)
        devices = set(p.store.devices) | set(shape.peers()) | {d for d, _ in p.store.ports}
        layout = shape.layout(devices, p.names)
        groups = {g.id: g for _, _, gs in layout.tiers for g in gs} | {g.id: g for g in layout.hosts}
        port_heat = _port_heat(p)
        device_findings: dict[str, list[Finding]] = {}
        for f in findings:
            device_findings.setdefault(f.device, []).append(f)
            if f.port is not None:
                port_heat.setdefault((f.device, f.port), Heat()).add_finding(f)
        device_heat: dict[str, Heat] = {}
        for (d, _), h in port_heat.items():
            device_heat.setdefault(d, Heat()).add(h)
        for d, fs in device_findings.items():  # device-level findings (no port)
            for f in fs:
                if f.port is None:
                    device_heat.setdefault(d, Heat()).add_finding(f)
        labels = {d: shape.label(d, p.names) for d in devices}
        return cls(shape, layout, groups, port_heat, device_heat, device_findings, labels)

    def members(self, g: Group) -> list[str]:
        """The devices of a group: its switches, or its hosts' adapters (and the hosts)."""
        if g.tier >= 0:
            inside = [d for d, gid in self.layout.group_of.items() if gid == g.id and d not in g.members]
            return [*g.members, *inside]
        hosts = set(g.members)
        return [d for d, h in self.layout.host_of.items() if h in hosts]

    def group_heat(self, g: Group) -> Heat:
        h = Heat()
        for d in self.members(g):
            if d in self.device_heat:
                h.add(self.device_heat[d])
        return h

    def group_of(self, device: str) -> Group | None:
        gid = self.layout.group_of.get(device)
        return self.groups.get(gid) if gid else None


def _port_heat(p: Pipeline) -> dict[tuple[str, str], Heat]:
    """Per port: its pause and XmitWait ratios (the detector's gauges of this pass) and its
    errors per second (the store's rates of every error counter)."""
    out: dict[tuple[str, str], Heat] = {}
    for m in p.detector.metrics():
        if m.name not in (PAUSE, WAIT):
            continue
        for values, v in m.values:
            if not math.isfinite(v) or v <= 0:
                continue
            h = out.setdefault((values[0], values[1]), Heat())
            if m.name == PAUSE:
                h.pause = _max(h.pause, v)
            else:
                h.wait = _max(h.wait, v)
    rows = p.store.family_rows()
    rates = p.store.rates()
    for name in ERRORS:
        fr = rows.get(name)
        if fr is None:
            continue
        r = rates[fr.rows]
        for i in np.flatnonzero(r > 0).tolist():
            pk = fr.keys[i][0]
            out.setdefault(pk, Heat()).errors += float(r[i])
    for pk in p.store.ports:
        out.setdefault(pk, Heat()).ports = 1
    return out


def _tile(gid: str, name: str, count: str, h: Heat, why: str) -> str:
    sev = h.worst.severity if h.worst is not None else "ok"
    cells = [("finding", f"{h.findings} {h.worst.kind}" if h.worst is not None else "none",
              4 if sev == "critical" else 2 if sev == "warning" else 0),
             ("pause", text.percent(h.pause) if h.pause is not None else "—", heat_level(h.pause, RATIO_STEPS)),
             ("XmitWait", text.percent(h.wait) if h.wait is not None else "—", heat_level(h.wait, RATIO_STEPS)),
             ("errors", f"{text.number(h.errors, 2)}/s" if h.errors else "0", heat_level(h.errors, ERROR_STEPS))]
    heat = "".join(f"<span class='h{lvl}' title='{escape(k)}: {escape(v)}'>{escape(v)}</span>" for k, v, lvl in cells)
    return (f"<a class='tile {escape(sev)}' data-group='{escape(gid)}' href='fabric/groups/{quote(gid, safe='')}' "
            f"title='{escape(name)} ({escape(why)})'><b>{escape(name)}</b><span class='muted'>{escape(count)}</span>"
            f"<div class='heat'>{heat}</div></a>")


LEGEND = ("<p class='muted'>Each tile is a group of switches or hosts; its cells: the worst active finding (and how many), "
          "the highest pause ratio and XmitWait ratio of its ports, their errors per second. Darker is worse. "
          "Open a tile for its devices, a device for its ports and findings.</p>")


def fabric_page(p: Pipeline, findings: list[Finding], idx: FabricIndex, demo: bool) -> str:
    """``/fabric``: every tier and group as tiles; the cable picture too on a small fabric."""
    sections = []
    for _, name, groups in idx.layout.tiers:
        n = sum(len(g.members) for g in groups)
        tiles = "".join(_tile(g.id, g.name, _n(len(g.members), SWITCH_WORD), idx.group_heat(g), g.why) for g in groups)
        sections.append(f"<section class='tier' data-tier='{escape(name)}'><h2>{escape(name)} ({_n(n, 'switch')}, "
                        f"{_n(len(groups), 'group')})</h2><div class='tiles'>{tiles}</div></section>")
    if idx.layout.hosts:
        n = sum(len(g.members) for g in idx.layout.hosts)
        tiles = "".join(_tile(g.id, g.name, _n(len(g.members), HOST_WORD), idx.group_heat(g), g.why) for g in idx.layout.hosts)
        sections.append(f"<section class='tier' data-tier='hosts'><h2>hosts ({n}, {_n(len(idx.layout.hosts), 'group')})</h2>"
                        f"<div class='tiles'>{tiles}</div></section>")
    boxes = len(idx.layout.group_of)
    picture = ""
    if boxes <= SMALL_PICTURE:
        shape = idx.shape
        picture = (f"<h2>Devices and cables</h2><figure id='fabric'>"
                   f"{pictures.fabric_picture(shape, findings, href, p.names)}</figure>")
    body = (f"<h1>Fabric</h1><p>{len(p.topology.links())} cables, {len(p.store.devices)} described devices, "
            f"{len(findings)} active findings.</p>{LEGEND}{''.join(sections)}{picture}")
    return page("fabric", body, demo, refresh=30, base=root(p))


SWITCH_WORD, HOST_WORD = ("switch", "host")  # the device kinds a tile counts, as words


def _n(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "es" if word.endswith("ch") else "s")


def _device_rows(p: Pipeline, idx: FabricIndex, devices: list[str]) -> str:
    rows = []
    order = sorted(devices, key=lambda d: (-pictures.SEVERITY_RANK.get(_sev(idx, d), 0), d))
    for d in order:
        h = idx.device_heat.get(d, Heat())
        info = p.store.devices.get(d)
        f = h.worst
        rows.append(f"<tr class='{escape(f.severity) if f else ''}'><td><a href='{device_href(d)}'>{escape(idx.labels.get(d, d))}</a>"
                    f"{'' if idx.labels.get(d, d) == d else ' <span class=muted>' + escape(d) + '</span>'}</td>"
                    f"<td>{escape(info.kind if info else 'unknown')}</td><td>{h.ports}</td>"
                    f"<td>{_finding_link(f, h.findings)}</td>"
                    f"<td>{text.percent(h.pause) if h.pause is not None else ''}</td>"
                    f"<td>{text.percent(h.wait) if h.wait is not None else ''}</td>"
                    f"<td>{text.number(h.errors, 3) + '/s' if h.errors else ''}</td></tr>")
    return scroll("<table id='devices'><tr><th>device</th><th>kind</th><th>ports</th><th>worst finding</th><th>pause</th>"
                  "<th>XmitWait</th><th>errors</th></tr>" + "".join(rows) + "</table>")


def _sev(idx: FabricIndex, d: str) -> str:
    h = idx.device_heat.get(d)
    return h.worst.severity if h is not None and h.worst is not None else ""


def _finding_link(f: Finding | None, n: int) -> str:
    if f is None:
        return ""
    return f"<a href='{href(f)}'>{escape(f.kind)}</a> <span class='sev-{escape(f.severity)}'>{escape(f.severity)}</span>" + (
        f" <span class='muted'>(+{n - 1})</span>" if n > 1 else "")


def group_page(p: Pipeline, idx: FabricIndex, gid: str, demo: bool) -> str | None:
    """``/fabric/groups/<id>``: a group's switches (or hosts and their adapters), worst first."""
    g = idx.groups.get(gid)
    if g is None:
        return None
    if g.tier >= 0:
        rows = _device_rows(p, idx, idx.members(g))
        what = f"{len(g.members)} switches"
    else:
        host_rows = []
        by_host: dict[str, list[str]] = {}
        for d, h in idx.layout.host_of.items():
            if h in g.members:
                by_host.setdefault(h, []).append(d)
        for h in sorted(g.members):
            adapters = sorted(by_host.get(h, []))
            heat = Heat()
            for d in adapters:
                heat.add(idx.device_heat.get(d, Heat()))
            links = ", ".join(f"<a href='{device_href(d)}'>{escape(idx.labels.get(d, d))}</a>" for d in adapters)
            host_rows.append(f"<tr class='{escape(heat.worst.severity) if heat.worst else ''}'><td>{escape(h)}</td><td>{links}</td>"
                             f"<td>{_finding_link(heat.worst, heat.findings)}</td></tr>")
        rows = scroll("<table id='devices'><tr><th>host</th><th>adapters</th><th>worst finding</th></tr>" + "".join(host_rows)
                      + "</table>")
        what = f"{len(g.members)} hosts"
    body = (f"<p><a href='fabric'>fabric</a> &gt; {escape(g.name)}</p><h1>{escape(g.name)}</h1>"
            f"<p>{what} · grouped by {escape(g.why)}</p>{rows}")
    return page(g.name, body, demo, refresh=30, base=root(p))


def unattributed_loss(p: Pipeline, device: str, ports: list[str]) -> dict[str, str]:
    """Port -> HTML of the loss on it that no evidence places on a class (INTERFACES 4: a drop
    counter that does not name its class, on a port carrying lossy traffic too): not a finding,
    shown on the port's row, per stage with its count since the agent started, its last rate,
    and (as the cell's title) why the class is unknown and which counter would tell.

    The ``loss`` analysis of the issue 27 detector work (branch det-eth,
    ``LossAnalysis.unattributed_at``) provides it; on a detector without that analysis the
    column stays hidden."""
    try:
        analysis = p.detector.analysis("loss")
    except KeyError:
        return {}
    at = getattr(analysis, "unattributed_at", None)
    if at is None:
        return {}
    out: dict[str, str] = {}
    for port in ports:
        parts = []
        for u in at(device, port):
            rate = f", {text.number(u.rate, 3)}/s last" if u.rate else ""
            title = f"{u.why}; {u.would_tell} would tell ({', '.join(u.counters)})"
            parts.append(f"<span title='{escape(title)}'>{text.number(u.total, 4)} packets{rate} · {escape(u.stage_words)}</span>")
        if parts:
            out[port] = "<br>".join(parts)
    return out


def _port_row(p: Pipeline, idx: FabricIndex, dev: str, port: str, loss: dict[str, str]) -> str:
    """One port's row of a device page (the loss column only when some port has such loss)."""
    e = p.store.ports[(dev, port)]
    h = idx.port_heat.get((dev, port), Heat())
    up = e.gauges.get(("link_up", ()))
    tx, rx = p.store.rate(dev, port, "tx_bytes"), p.store.rate(dev, port, "rx_bytes")
    drops = sum(r for n in DROPS if (r := p.store.rate(dev, port, n)))
    return (f"<tr class='{escape(h.worst.severity) if h.worst else ''}'><td>{escape(port)}</td>"
            f"<td>{_peer_link(p.topology.peer(dev, port), idx)}</td><td>{'' if up is None else 'up' if up.value else 'DOWN'}</td>"
            f"<td>{text.bits_per_s(tx) if tx is not None else ''}</td><td>{text.bits_per_s(rx) if rx is not None else ''}</td>"
            f"<td>{text.percent(h.pause) if h.pause is not None else ''}</td>"
            f"<td>{text.percent(h.wait) if h.wait is not None else ''}</td>"
            f"<td>{text.number(h.errors, 3) + '/s' if h.errors else ''}</td>"
            f"<td>{text.number(drops, 3) + '/s' if drops else ''}</td>"
            + (f"<td>{loss.get(port, '')}</td>" if loss else "")
            + f"<td>{_finding_link(h.worst, h.findings)}</td></tr>")


def device_page(p: Pipeline, idx: FabricIndex, device: str, demo: bool) -> str | None:
    """``/devices/<name>``: what the device is, its group, its findings, its ports with their
    peers, state, rates and worst finding."""
    info = p.store.devices.get(device)
    ports = sorted((pk for pk in p.store.ports if pk[0] == device), key=lambda pk: _port_order(pk[1]))
    if info is None and not ports and device not in idx.layout.group_of:
        return None
    g = idx.group_of(device)
    crumbs = "<a href='fabric'>fabric</a>" + (f" &gt; <a href='fabric/groups/{quote(g.id, safe='')}'>{escape(g.name)}</a>" if g else "")
    label = idx.labels.get(device, device)
    facts = text.fields([("kind", info.kind if info else ""), ("GUID", info.guid if info else ""),
                         ("description", info.description if info else ""), ("model", info.model if info else ""),
                         ("on host", idx.layout.host_of.get(device, "") if idx.layout.host_of.get(device) != device else ""),
                         ("part of", idx.shape.inside(device) or ""), ("target", p.store.device_target.get(device, ""))])
    now = p.now()
    fs = sorted(idx.device_findings.get(device, []), key=lambda f: (-pictures.SEVERITY_RANK.get(f.severity, 0), f.start))
    loss = unattributed_loss(p, device, [port for _, port in ports[:MAX_DEVICE_PORTS]])
    rows = [_port_row(p, idx, dev, port, loss) for dev, port in ports[:MAX_DEVICE_PORTS]]
    more = f"<p class='muted'>{len(ports) - MAX_DEVICE_PORTS} more ports not listed.</p>" if len(ports) > MAX_DEVICE_PORTS else ""
    loss_head = "<th>loss not placed on a class</th>" if loss else ""
    table = scroll("<table id='ports'><tr><th>port</th><th>cabled to</th><th>link</th><th>transmit</th><th>receive</th><th>pause</th>"
                   f"<th>XmitWait</th><th>errors</th><th>discards and drops</th>{loss_head}<th>worst finding</th></tr>"
                   + "".join(rows) + "</table>") + more if rows else "<p class='muted'>No port of this device is polled.</p>"
    body = (f"<p>{crumbs}</p><h1>{escape(label)}</h1>" + (f"<p class='muted'>{escape(device)}</p>" if label != device else "")
            + f"<p>{facts}</p><h2>Findings ({len(fs)})</h2>{finding_rows(fs, now) if fs else '<p>None active.</p>'}"
            + f"<h2>Ports ({len(ports)})</h2>{table}")
    return page(label, body, demo, refresh=30, base=root(p))


def _port_order(port: str) -> tuple:
    """Ports in their natural order: Ethernet2 before Ethernet10, 2 before 10."""
    return tuple(int(x) if x.isdigit() else x for x in re.split(r"(\d+)", port))


def _peer_link(peer: tuple[str, str] | None, idx: FabricIndex) -> str:
    if peer is None:
        return ""
    d, port = peer
    return f"<a href='{device_href(d)}'>{escape(idx.labels.get(d, d))}</a> {escape(port)}"


def search(p: Pipeline, idx: FabricIndex, q: str) -> list[tuple[str, str, str]]:
    """(what matched, device, port or "") for a device name, label or host name (substring, any
    case), a ``device:port`` or ``device port``, or a GUID (node or port), best first."""
    q = q.strip()
    if not q:
        return []
    low = q.lower()
    guid = norm_guid(q) if any(c.isdigit() for c in q) else ""
    out = _by_guid(p, guid) if guid else []
    dev, sep, port = q.rpartition(":") if ":" in q else q.rpartition(" ")
    if sep and (dev, port) in p.store.ports:
        out.append(("port", dev, port))
    exact = [d for d in idx.labels if d.lower() == low or idx.labels[d].lower() == low or idx.layout.host_of.get(d, "").lower() == low]
    out += [("device", d, "") for d in sorted(exact)]
    for d in sorted(idx.labels):
        if len(out) >= MAX_SEARCH:
            break
        host = idx.layout.host_of.get(d, "")
        if d not in exact and (low in d.lower() or low in idx.labels[d].lower() or low in host.lower()):
            out.append(("host name" if low in host.lower() and low not in d.lower() else "device", d, ""))
    return list(dict.fromkeys(out))[:MAX_SEARCH]


def _by_guid(p: Pipeline, guid: str) -> list[tuple[str, str, str]]:
    """The ports, then the devices, whose GUID is ``guid``."""
    out = [("port GUID", pk[0], pk[1]) for pk, e in p.store.ports.items() if e.info is not None and e.info.guid == guid]
    return out + [("GUID", d, "") for d, info in p.store.devices.items() if info.guid == guid]


def search_page(p: Pipeline, idx: FabricIndex, q: str, demo: bool) -> str:
    hits = search(p, idx, q)
    rows = []
    for what, d, port in hits:
        h = idx.port_heat.get((d, port)) if port else idx.device_heat.get(d)
        g = idx.group_of(d)
        rows.append(f"<tr class='{escape(h.worst.severity) if h and h.worst else ''}'><td>{escape(what)}</td>"
                    f"<td><a href='{device_href(d)}'>{escape(idx.labels.get(d, d))}</a></td><td>{escape(port)}</td>"
                    f"<td>{escape(g.name) if g else ''}</td><td>{_finding_link(h.worst, h.findings) if h else ''}</td></tr>")
    more = f"<p class='muted'>The first {MAX_SEARCH} matches.</p>" if len(hits) >= MAX_SEARCH else ""
    table = scroll("<table id='results'><tr><th>match</th><th>device</th><th>port</th><th>group</th><th>worst finding</th></tr>"
                   + "".join(rows) + "</table>") if rows else "<p>No device, port, GUID or host matches.</p>"
    body = f"<h1>Search: {escape(q)}</h1><p>{len(hits)} match(es).</p>{table}{more}"
    return page(f"search {q}", body, demo, refresh=0, base=root(p))
