"""The HTML of each page. Every name and field from a device, a recording or the state file is escaped."""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterable
from html import escape
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from fabricmon.agent.detector.analyses.fabric import FabricShape
from fabricmon.agent.jobs.links import jobs_section
from fabricmon.agent.store import CounterStore
from fabricmon.agent.web import pictures
from fabricmon.agent.web.ids import finding_id
from fabricmon.agent.web.svg import sparkline
from fabricmon.core.model import Finding

if TYPE_CHECKING:
    from fabricmon.agent.pipeline import Pipeline, TargetStatus

DEMO_BANNER = ("<p class='demo'><b>DEMO</b>: these targets and findings are replayed from a bundled recording of a "
               "made-up fabric (<code>fabricmon demo</code>), not from your network.</p>")
# Findings listed on / (most severe, then newest, first); the rest are counted and paged in /api/findings.
SUMMARY_ROWS = 200
RECENT_ENDED = 20
REFRESH_S = 10
STYLE = """body{font-family:sans-serif;margin:1.5em;color:#222}table{border-collapse:collapse;margin-bottom:1em}
td,th{border:1px solid #ccc;padding:3px 8px;text-align:left;vertical-align:top}nav a{margin-right:1em}
tr.down td,tr.critical td{background:#fdd}tr.warning td{background:#ffd}.demo{background:#fe9;padding:.5em}
svg.graph rect{fill:#eef5ee;stroke:#585}svg.graph rect.critical,svg.graph rect.origin{fill:#fcc;stroke:#c22}
svg.graph rect.warning{fill:#fec;stroke:#c80}svg.graph rect.member,svg.graph rect.subject,svg.graph rect.victim{fill:#fde;stroke:#b36}
svg.graph rect.hosts{fill:#eef}.muted{color:#777}"""


def href(f: Finding) -> str:
    return f"/findings/{finding_id(f)}"


def age(now: float, t: float | None) -> str:
    if t is None:
        return "never"
    s = max(0.0, now - t)
    return f"{s:.0f} s ago" if s < 120 else f"{s / 60:.0f} min ago" if s < 7200 else f"{s / 3600:.1f} h ago"


def when(t: float | None) -> str:
    return "—" if t is None else time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(t))


def page(title: str, body: str, demo: bool, refresh: int = REFRESH_S) -> str:
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{escape(title)} · fabricmon</title><style>{STYLE}</style></head>
<body data-refresh="{refresh}"><nav><a href="/"><b>fabricmon</b></a><a href="/fabric">fabric</a><a href="/metrics">/metrics</a>
<a href="/api/findings">/api/findings</a><a href="/api/targets">/api/targets</a><a href="/ready">/ready</a></nav>
{DEMO_BANNER if demo else ""}<main>{body}</main><script src="/static/refresh.js"></script></body></html>
"""


def _cell(v: Any) -> str:
    return "" if v is None else escape(str(v))


def finding_rows(findings: Iterable[Finding], now: float) -> str:
    rows = [f"<tr class='{escape(f.severity)}'><td><a href='{href(f)}'>{escape(f.kind)}</a></td><td>{escape(f.severity)}</td>"
            f"<td>{escape(f.device)}</td><td>{_cell(f.port)}</td><td>{_cell(f.priority)}</td><td>{_cell(f.role)}</td>"
            f"<td>{age(now, f.start)}</td><td>{'' if f.end is None else age(now, f.end)}</td><td>{escape(f.summary)}</td></tr>"
            for f in findings]
    return ("<table><tr><th>kind</th><th>severity</th><th>device</th><th>port</th><th>priority</th><th>role</th>"
            "<th>since</th><th>ended</th><th>summary</th></tr>" + "".join(rows) + "</table>")


def summary_page(p: Pipeline, findings: list[Finding], demo: bool) -> str:
    """``/``: targets up/down, findings by kind and severity, the most severe findings, recent ends."""
    now = p.now()
    states = {"up": 0, "down": 0, "waiting": 0}
    for s in p.targets.values():
        states["waiting" if s.up is None else "up" if s.up else "down"] += 1
    last = max((s.last_success_t for s in p.targets.values() if s.last_success_t is not None), default=None)
    counts: dict[tuple[str, str], int] = {}
    for f in findings:
        counts[(f.kind, f.severity)] = counts.get((f.kind, f.severity), 0) + 1
    by_kind = "".join(f"<tr class='{escape(sev)}'><td>{escape(kind)}</td><td>{escape(sev)}</td><td>{n}</td></tr>"
                      for (kind, sev), n in sorted(counts.items()))
    top = sorted(findings, key=lambda f: (-pictures.SEVERITY_RANK.get(f.severity, 0), -f.start))[:SUMMARY_ROWS]
    more = (f"<p class='muted'>{len(findings) - len(top)} more: see <a href='/api/findings'>/api/findings</a> (paged).</p>"
            if len(findings) > len(top) else "")
    kinds_table = ('<table><tr><th>kind</th><th>severity</th><th>count</th></tr>' + by_kind + '</table>' if by_kind
                   else '<p>No active findings.</p>')
    ended = list(reversed(p.ended[-RECENT_ENDED:]))
    trows = []
    for name in sorted(p.targets):
        s = p.targets[name]
        state = "waiting" if s.up is None else "up" if s.up else "DOWN"
        trows.append(f"<tr class='{state.lower()}'><td><a href='/targets/{escape(_url(name))}'>{escape(name)}</a></td>"
                     f"<td>{escape(s.source)}</td><td>{state}</td><td>{age(now, s.last_success_t)}</td>"
                     f"<td>{escape(s.last_error or '') if not s.up else ''}</td></tr>")
    body = f"""<h1>Fabric summary</h1>
<p>Targets: <b>{states['up']}</b> up, <b>{states['down']}</b> down, {states['waiting']} waiting · last poll {age(now, last)} ·
active findings: <b>{len(findings)}</b> · rendered {when(now)}</p>
<h2>Active findings by kind</h2>{kinds_table}
{'<h2>Most severe active findings</h2>' + finding_rows(top, now) + more if top else ''}
{detector_section(p)}{checklist_section(p)}
<h2>Recently ended ({len(ended)})</h2>{finding_rows(ended, now) if ended else '<p>None.</p>'}
<h2>Targets ({len(trows)})</h2>
<table><tr><th>target</th><th>source</th><th>state</th><th>last success</th><th>last error</th></tr>{''.join(trows)}</table>"""
    return page("summary", body, demo)


def detector_section(p: Pipeline) -> str:
    """Rules that failed (:meth:`Detector.status`): their findings may be missing, so the landing
    page says which and why; nothing when every rule runs."""
    problems = p.detector.status().problems()
    if not problems:
        return ""
    items = "".join(f"<li>{escape(line)}</li>" for line in problems)
    return (f"<h2 id='detector'>Detector</h2><p class='down'><b>{len(problems)} rule(s) failed</b>: their findings may be "
            f"missing (a bug: the agent log has each error).</p><ul>{items}</ul>")


CHECKLIST_ROWS = 50  # failing ports listed on /; `fabricmon audit` and /api/findings have all of them


def checklist_section(p: Pipeline) -> str:
    """The lossless-fabric checklist (the misconfig rule's last run): pass / fail / unknown per
    check, so an operator sees how much was verified, and the ports that fail."""
    rule = next((r for r in p.detector.rules if r.name == "misconfig"), None)
    if rule is None:
        return "<h2 id='checklist'>Lossless checklist</h2><p class='muted'>The misconfig rule is switched off.</p>"
    counts, failing = rule.summary()
    rows = "".join(f"<tr class='{'warning' if n['fail'] else ''}'><td>{escape(check)}</td><td>{n['pass']}</td><td>{n['fail']}</td>"
                   f"<td>{n['unknown']}</td></tr>" for check, n in counts.items())
    if not any(sum(n.values()) for n in counts.values()):
        return ("<h2 id='checklist'>Lossless checklist</h2><p class='muted'>No port shows lossless-Ethernet configuration "
                "or PFC counters yet.</p>")
    bad = "".join(f"<tr class='warning'><td>{escape(r.check)}</td><td>{escape(r.device)}</td><td>{escape(r.port)}</td>"
                  f"<td>{_cell(r.priority)}</td><td>{escape(r.peer_device or '')} {escape(r.peer_port or '')}</td>"
                  f"<td>{escape(r.summary)}</td></tr>" for r in failing[:CHECKLIST_ROWS])
    more = (f"<p class='muted'>{len(failing) - CHECKLIST_ROWS} more: run <code>fabricmon audit</code>.</p>"
            if len(failing) > CHECKLIST_ROWS else "")
    fails = (f"<h3>Failing ({len(failing)})</h3><table><tr><th>check</th><th>device</th><th>port</th><th>priority</th>"
             f"<th>other end</th><th>summary</th></tr>{bad}</table>{more}") if failing else "<p>No check fails.</p>"
    return (f"<h2 id='checklist'>Lossless checklist</h2><table><tr><th>check</th><th>pass</th><th>fail</th><th>unknown</th></tr>"
            f"{rows}</table>{fails}")


def _url(name: str) -> str:
    return quote(name, safe="")


# Key rates per involved port: (label, counter, per priority?, scale to the shown unit).
# pfc_rx_pause_seconds per second is the fraction of time the port's transmitter was paused
# (a ratio 0..1); XmitWait is in device ticks per second (tick length is device-defined, so no
# ratio without it); bytes x 8 = bits per second.
SPARKS = (("pause ratio (rx)", "pfc_rx_pause_seconds", True, 1.0),
          ("pause frames/s (rx)", "pfc_rx_pause_frames", True, 1.0),
          ("XmitWait ticks/s", "xmit_wait", False, 1.0),
          ("transmit discards/s", "tx_discards", False, 1.0),
          ("receive discards/s", "rx_discards", False, 1.0),
          ("throughput tx (bit/s)", "tx_bytes", False, 8.0))
MAX_SPARK_PORTS = 8


def rate_history(store: CounterStore, device: str, port: str, counter: str, sub: tuple = ()) -> list[tuple[float, float]]:
    """Adapter over the store's public ``get``: (t, rate) per interval of the series' kept history."""
    se = store.get(device, port, counter, sub)
    if se is None:
        return []
    h = se.history
    return [(t1, (v1 - v0) / (t1 - t0)) for (t0, v0), (t1, v1) in itertools.pairwise(h) if t1 > t0 and v1 >= v0]


def _fmt(v: float) -> str:
    return f"{v:.3g}"


def sparks(p: Pipeline, ports: list[tuple[str, str]], priority: int | None) -> str:
    rows = []
    for dev, port in ports[:MAX_SPARK_PORTS]:
        for label, counter, per_prio, scale in SPARKS:
            if per_prio and priority is None:
                continue
            pts = [(t, v * scale) for t, v in rate_history(p.store, dev, port, counter, (priority,) if per_prio else ())]
            svg = sparkline(pts)
            if svg:
                vs = [v for _, v in pts]
                rows.append(f"<tr><td>{escape(dev)}</td><td>{escape(port)}</td><td>{escape(label)}</td><td>{svg}</td>"
                            f"<td>{_fmt(vs[-1])}</td><td>{_fmt(min(vs))} to {_fmt(max(vs))}</td></tr>")
    if not rows:
        return "<p class='muted'>No kept history for the involved ports yet.</p>"
    return ("<table><tr><th>device</th><th>port</th><th>rate</th><th>history</th><th>last</th><th>range</th></tr>"
            + "".join(rows) + "</table>")


def _link(f: Finding) -> str:
    return f"<a href='{href(f)}'>{escape(f.kind)}</a>"


def _evidence(ev: dict[str, Any]) -> str:
    rows = "".join(f"<tr><td>{escape(str(k))}</td><td>{escape(', '.join(map(str, v)) if isinstance(v, list) else str(v))}</td></tr>"
                   for k, v in ev.items())
    return f"<table><tr><th>evidence</th><th>value</th></tr>{rows}</table>" if rows else ""


def involved_ports(f: Finding, pool: list[Finding]) -> list[tuple[str, str]]:
    """The finding's own port first, its peer, then the other ports of its storm or cycle."""
    out: list[tuple[str, str]] = []
    if f.port is not None:
        out.append((f.device, f.port))
    if f.peer_device and f.peer_port:
        out.append((f.peer_device, f.peer_port))
    if f.kind == "pfc_storm":
        out += [(g.device, g.port) for g in pictures.storm_group(f, pool) if g.port is not None]
    for ref in f.evidence.get("cycle") or []:
        dev, _, port = str(ref).rpartition(":")
        out.append((dev, port))
    return list(dict.fromkeys(out))


def finding_page(p: Pipeline, f: Finding, pool: list[Finding], demo: bool) -> str:
    """``/findings/<id>``: evidence in words and numbers, timeline, picture, sparklines."""
    now = p.now()
    related = [g for g in pool if g is not f and g.kind == f.kind and g.priority == f.priority
               and (g.start == f.start or (f.evidence.get("origin") and g.evidence.get("origin") == f.evidence.get("origin")))]
    timeline = [(f.start, f"started on {f.device} {f.port or ''} ({f.role or 'no role'})")]
    timeline += [(g.start, f"{g.device} {g.port or ''} ({g.role or 'no role'}) started") for g in related if g.start != f.start]
    timeline += [(g.end, f"{g.device} {g.port or ''} ended") for g in related if g.end is not None]
    if f.end is not None:
        timeline.append((f.end, "ended"))
    tl = "".join(f"<tr><td>{when(t)}</td><td>{age(now, t)}</td><td>{escape(what)}</td></tr>" for t, what in sorted(timeline))
    state = "active" if f.end is None else f"ended {age(now, f.end)}"
    peer = f" · peer {escape(f.peer_device)} {_cell(f.peer_port)}" if f.peer_device else ""
    body = f"""<h1>{escape(f.kind)} <span class='muted'>({escape(f.severity)}, {escape(state)})</span></h1>
<p><b>{escape(f.summary)}</b></p>
<p>device <b>{escape(f.device)}</b> · port <b>{_cell(f.port)}</b> · priority {_cell(f.priority)} · role {_cell(f.role)}{peer}
· rule {escape(f.rule)} · id <code>{finding_id(f)}</code></p>
<h2>Picture</h2><figure id="picture">{pictures.finding_picture(f, pool, p.topology, href)}</figure>
<h2>Evidence</h2>{_evidence(f.evidence)}
{jobs_section(f.evidence)}
<h2>Timeline</h2><table><tr><th>time</th><th>age</th><th>event</th></tr>{tl}</table>
<h2>Involved ports: key rates over the kept history</h2>{sparks(p, involved_ports(f, pool), f.priority)}
<h2>Related findings ({len(related)})</h2>{finding_rows(related, now) if related else '<p>None.</p>'}"""
    return page(f"{f.kind} {f.device}", body, demo)


def fabric_page(p: Pipeline, findings: list[Finding], demo: bool) -> str:
    """``/fabric``: the topology with tiers and host groups, coloured by the worst finding."""
    shape = FabricShape(p.store, p.topology)
    svg = pictures.fabric_picture(shape, findings, href)
    body = (f"<h1>Fabric</h1><p>{len(p.topology.links())} cables, {len(p.store.devices)} described devices, "
            f"{len(findings)} active findings. Red: critical, orange: warning, green: none; click a cable or box to open its finding.</p>"
            f"<figure id='fabric'>{svg}</figure>")
    return page("fabric", body, demo, refresh=30)


MAX_TARGET_PORTS = 500


def target_page(p: Pipeline, s: TargetStatus, durations: list[tuple[float, float]], demo: bool) -> str:
    """``/targets/<name>``: state, errors with reasons, poll durations, its ports."""
    now = p.now()
    state = "waiting for the first poll" if s.up is None else "up" if s.up else "DOWN"
    errs = "".join(f"<tr><td>{escape(str(r))}</td><td>{n}</td></tr>" for r, n in sorted(s.errors.items()))
    warns = "".join(f"<li>{escape(w)}</li>" for w in s.warnings)
    info = "".join(f"<tr><td>{escape(str(k))}</td><td>{escape(str(v))}</td></tr>" for k, v in sorted(s.info.items()))
    ports = sorted(pk for pk, e in p.store.ports.items() if e.target == s.name)
    worst = pictures.worst_by_port(p.findings())
    prow = "".join(f"<tr class='{escape(worst[pk].severity) if pk in worst else ''}'><td>{escape(pk[0])}</td><td>{escape(pk[1])}</td>"
                   f"<td>{_link(worst[pk]) if pk in worst else ''}</td></tr>"
                   for pk in ports[:MAX_TARGET_PORTS])
    more = f"<p class='muted'>{len(ports) - MAX_TARGET_PORTS} more ports not listed.</p>" if len(ports) > MAX_TARGET_PORTS else ""
    dsvg = sparkline(durations)
    last_ok = f"{age(now, s.last_success_t)} ({when(s.last_success_t)})"
    spread = (f"(range {min(d for _, d in durations):.3f} to {max(d for _, d in durations):.3f} s over the last "
              f"{len(durations)} polls)" if durations else "")
    body = f"""<h1>Target {escape(s.name)}</h1>
<p>source {escape(s.source)} · <b>{state}</b> · {s.polls} polls · last success {last_ok}</p>
<h2>Last error</h2><p>{escape(s.last_error) if s.last_error else 'none'}</p>
<h2>Errors by reason</h2>{'<table><tr><th>reason</th><th>count</th></tr>' + errs + '</table>' if errs else '<p>None.</p>'}
<h2>Poll durations</h2><p>last {s.last_duration_s:.3f} s {dsvg}
{spread}</p>
{'<h2>Warnings</h2><ul>' + warns + '</ul>' if warns else ''}{'<h2>Reported</h2><table>' + info + '</table>' if info else ''}
<h2>Ports ({len(ports)})</h2><table><tr><th>device</th><th>port</th><th>worst active finding</th></tr>{prow}</table>{more}"""
    return page(f"target {s.name}", body, demo)
