"""``/jobs/<id>``: the job view as a page, with a picture of where the job sits and what touches it.

The picture: the job's hosts (grouped when they share their switches, as ``/fabric`` does)
cabled to the switches their NICs reach; a group or switch is coloured by the worst finding
on the job's path that touches it, and links to that finding's page.
"""

from __future__ import annotations

from html import escape
from typing import Any

from fabricmon.agent.web.svg import SEVERITY_COLOUR, Edge, Node, graph, sparkline
from fabricmon.agent.web.views import age, page, when

RANK = {"critical": 2, "warning": 1}
RATES = (("pause_ratio", "pause ratio (held)"), ("pause_sent_ratio", "pause ratio (holding its peer)"),
         ("xmit_wait_ratio", "XmitWait ratio"), ("loss_per_s", "loss /s"), ("errors_per_s", "errors /s"))
PICTURE_SWITCHES = 40  # switches drawn; a bigger job's picture shows the most affected ones


def _worse(a: dict[str, Any] | None, b: dict[str, Any]) -> dict[str, Any]:
    return b if a is None or RANK.get(b["severity"], 0) > RANK.get(a["severity"], 0) else a


def _worst(v: dict[str, Any]) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]]]:
    """(host -> its worst finding, switch -> its worst finding) of the job view."""
    worst_host: dict[str, dict[str, Any]] = {}
    worst_switch: dict[str, dict[str, Any]] = {}
    for r in v["findings"]:
        for h in r["job_hosts"]:
            worst_host[h] = _worse(worst_host.get(h), r)
        worst_switch[r["device"]] = _worse(worst_switch.get(r["device"]), r)
    return worst_host, worst_switch


def _host_node(gid: str, members: list[str], placed: bool, bad: list[dict[str, Any]]) -> tuple[Node, dict[str, Any] | None]:
    """One box for the hosts cabled to the same switches, coloured by their worst finding."""
    f = max(bad, key=lambda r: RANK.get(r["severity"], 0)) if bad else None
    label = members[0] if len(members) == 1 else f"{members[0]} …"
    if len(members) > 1:
        sub = f"{len(members)} hosts" + (f", {len(bad)} hit" if bad else "")
    else:
        sub = "hit" if bad else ""
    if not placed:
        sub = (sub + " " if sub else "") + "(not placed)"
    node = Node(gid, label, sub=sub, cls=f"hosts {f['severity'] if f else 'ok'}", href=f"/findings/{f['id']}" if f else None)
    return node, f


def picture(v: dict[str, Any]) -> str:
    worst_host, worst_switch = _worst(v)
    groups: dict[frozenset[str], list[str]] = {}
    for h in v["placement"]:
        sw = frozenset(n["switch_device"] for n in h["nics"] if n["switch_device"])
        groups.setdefault(sw, []).append(h["host"])
    switches = sorted({s for g in groups for s in g}, key=lambda s: (-RANK.get(worst_switch.get(s, {}).get("severity", ""), 0), s))
    nodes: dict[str, Node] = {}
    for s in switches[:PICTURE_SWITCHES]:
        f = worst_switch.get(s)
        nodes["sw:" + s] = Node("sw:" + s, s, cls=f"switch {f['severity'] if f else 'ok'}", href=f"/findings/{f['id']}" if f else None)
    edges: list[Edge] = []
    for sw, members in sorted(groups.items(), key=lambda kv: kv[1][0]):
        gid = "hosts:" + members[0]
        nodes[gid], f = _host_node(gid, members, bool(sw), [worst_host[h] for h in members if h in worst_host])
        colour = SEVERITY_COLOUR.get(f["severity"] if f else None, "#999")
        edges += [Edge(gid, "sw:" + s, colour=colour) for s in sorted(sw) if "sw:" + s in nodes]
    size = _two_rows(nodes, [n for n in nodes if n.startswith("sw:")], _by_first_switch(nodes, edges))
    return graph(nodes, edges, size, f"job {v['job']}: hosts and the switches they are cabled to")


def _by_first_switch(nodes: dict[str, Node], edges: list[Edge]) -> list[str]:
    """Host groups in the order of the first switch they hang from, so few cables cross."""
    order = {n: i for i, n in enumerate(x for x in nodes if x.startswith("sw:"))}
    first: dict[str, int] = {}
    for e in edges:
        first[e.src] = min(first.get(e.src, 1 << 30), order.get(e.dst, 1 << 30))
    return sorted((n for n in nodes if n.startswith("hosts:")), key=lambda n: (first.get(n, 1 << 30), n))


def _two_rows(nodes: dict[str, Node], top: list[str], bottom: list[str], dx: float = 175, dy: float = 110) -> tuple[float, float]:
    """Switches in a row above the host groups, each row centred."""
    rows = [r for r in (top, bottom) if r]
    widest = max((len(r) for r in rows), default=1)
    for i, row in enumerate(rows):
        off = (widest - len(row)) * dx / 2
        for j, nid in enumerate(row):
            nodes[nid].x, nodes[nid].y = 20 + off + j * dx, 20 + i * dy
    return 40 + (widest - 1) * dx + 150, 40 + (len(rows) - 1) * dy + 34


def _findings_table(v: dict[str, Any]) -> str:
    if not v["findings"]:
        return "<p>None.</p>"
    rows = []
    for r in v["findings"]:
        span = f"{when(r['start'])} → {when(r['end']) if r['end'] is not None else 'now'}"
        hosts = ", ".join(r["job_hosts"][:12]) + (" …" if len(r["job_hosts"]) > 12 else "")
        rows.append(f"<tr class='{escape(r['severity'])}'><td><a href='/findings/{escape(r['id'])}'>{escape(r['kind'])}</a></td>"
                    f"<td>{escape(r['severity'])}</td><td>{escape(r['device'])}</td><td>{escape(r['port'] or '')}</td>"
                    f"<td>{'' if r['priority'] is None else r['priority']}</td><td>{escape(r['role'] or '')}</td>"
                    f"<td>{escape(span)}</td><td>{'active' if r['active'] else 'ended'}</td><td>{escape(hosts)}</td>"
                    f"<td title='{escape(r['reach_text'])}'>{escape(r['reach'])}</td></tr>")
    return ("<table id='job-findings'><tr><th>kind</th><th>severity</th><th>device</th><th>port</th><th>priority</th>"
            "<th>role</th><th>time line</th><th>state</th><th>this job's hosts</th><th>rule of reach</th></tr>"
            + "".join(rows) + "</table>")


def _placement_table(v: dict[str, Any]) -> str:
    rows = []
    for h in v["placement"]:
        if not h["nics"]:
            rows.append(f"<tr class='warning'><td>{escape(h['host'])}</td><td colspan='3'>not placed in the fabric (unmatched: "
                        f"no source names it)</td></tr>")
        for n in h["nics"]:
            sw = f"{n['switch_device']} {n['switch_port']}" if n["switch_device"] else "no cable known"
            rows.append(f"<tr><td>{escape(h['host'])}</td><td>{escape(n['device'])} {escape(n['port'])}</td>"
                        f"<td>{escape(sw)}</td><td class='muted'>{escape(n['via'])}</td></tr>")
    return ("<table id='job-hosts'><tr><th>host</th><th>NIC port</th><th>switch port</th><th>placed by</th></tr>"
            + "".join(rows) + "</table>")


def _rates_table(v: dict[str, Any]) -> str:
    rows = []
    for r in v["ports"]:
        cells = []
        for key, _ in RATES:
            s = r.get(key)
            cells.append(f"<td>{sparkline([(t, x) for t, x in s['points']])} last {s['last']:.3g}, max {s['max']:.3g}</td>"
                         if s else "<td class='muted'>—</td>")
        rows.append(f"<tr><td>{escape(r['side'])}</td><td>{escape(r['device'])}</td><td>{escape(r['port'])}</td>"
                    f"<td>{escape(r['host'])}</td>{''.join(cells)}</tr>")
    more = (f"<p class='muted'>{v['ports_total'] - len(v['ports'])} more ports not listed (the worst are).</p>"
            if v["ports_total"] > len(v["ports"]) else "")
    head = "".join(f"<th>{escape(label)}</th>" for _, label in RATES)
    return (f"<table id='job-ports'><tr><th>side</th><th>device</th><th>port</th><th>host</th>{head}</tr>" + "".join(rows)
            + "</table>" + more)


def job_page(v: dict[str, Any], demo: bool) -> str:
    labels = " · ".join(f"{escape(k)} {escape(str(val))}" for k, val in v["labels"].items())
    started = f" · started {when(v['start'])} ({age(v['now'], v['start'])})" if v["start"] else ""
    body = f"""<h1>Job {escape(v['job'])} <span class='muted'>({escape(v['state'])})</span></h1>
<p id='verdict'><b>{escape(v['verdict'])}</b></p>
<p>{v['hosts']} hosts · from {escape(', '.join(v['targets']))}{started} · inventory {v['inventory_age_s']:.0f} s old
{(' · ' + labels) if labels else ''}{(' · also ' + escape(', '.join(v['aliases']))) if v['aliases'] else ''}</p>
<h2>Picture</h2><figure id="picture">{picture(v)}</figure>
<h2>Findings on this job's path since {when(v['since'])} ({len(v['findings'])})</h2>{_findings_table(v)}
<h2>Hosts, NIC ports and switch ports</h2>{_placement_table(v)}
<h2>Port health over the kept history ({v['ports_total']} ports, worst first)</h2>{_rates_table(v)}"""
    return page(f"job {v['job']}", body, demo)
