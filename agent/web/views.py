"""The HTML of each page. Every name and field from a device, a recording or the state file is escaped.

Pages are pure functions of the pipeline's state at one pass (they read, never change it), so
they can be rendered off the event loop. Links are relative to a ``<base>`` that is the path of
the agent's external URL (``web.external_url``), so the pages work behind a reverse proxy that
serves them under a prefix.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from html import escape
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlsplit

from fabricmon.agent.jobs.links import jobs_section
from fabricmon.agent.web import pictures, runbooks, signals, text
from fabricmon.agent.web.ids import finding_id, finding_path
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
STYLE = """*{box-sizing:border-box}body{font-family:sans-serif;margin:1em;color:#222;max-width:100%}
main p,main li,main h1,main h2,main td,main code{overflow-wrap:anywhere}
table{border-collapse:collapse;margin-bottom:1em}td,th{border:1px solid #ccc;padding:3px 8px;text-align:left;vertical-align:top}
th[scope=row]{font-weight:normal;color:#555;white-space:nowrap}table.kv table{margin:0}
.scroll{overflow-x:auto;max-width:100%}nav{display:flex;flex-wrap:wrap;gap:.3em 1em;align-items:center}
nav form{margin:0}nav input{width:14em;max-width:60vw}
tr.down td,tr.critical td{background:#fdd}tr.warning td{background:#ffd}tr.ended td{background:#f2f2f2;color:#555}
.demo{background:#fe9;padding:.5em}.alert{background:#fdd;border:1px solid #c22;padding:.5em}
svg{max-width:100%;height:auto}figure{margin:0;overflow-x:auto}
svg.graph rect{fill:#eef5ee;stroke:#585}svg.graph rect.critical,svg.graph rect.origin{fill:#fcc;stroke:#c22}
svg.graph rect.warning{fill:#fec;stroke:#c80}svg.graph rect.member,svg.graph rect.subject,svg.graph rect.victim,svg.graph rect.stalled,
svg.graph rect.watchdog{fill:#fde;stroke:#b36}svg.graph rect.ended{fill:#eee;stroke:#999}
svg.graph rect.hosts{fill:#eef}.muted{color:#777}.sev-critical{color:#b00}.sev-warning{color:#a60}
.tiles{display:flex;flex-wrap:wrap;gap:6px}.tile{display:block;border:1px solid #bbb;border-radius:4px;padding:4px 6px;width:13em;
text-decoration:none;color:#222;background:#fff}.tile b{display:block;font-size:13px;overflow-wrap:anywhere}
.tile.critical{border:2px solid #c22}.tile.warning{border:2px solid #e90}.heat{display:flex;gap:2px;margin-top:3px}
.heat span{flex:1;font-size:10px;text-align:center;padding:1px 0;border-radius:2px}
.h0{background:#eef5ee}.h1{background:#fff3c4}.h2{background:#ffd591}.h3{background:#ff9c6e}.h4{background:#f5222d;color:#fff}
ul.because{margin:0;padding-left:1.2em}"""


def root(p: Pipeline) -> str:
    """The path the pages are served under (the external URL's path), ending in ``/``."""
    path = urlsplit(p.external_url).path if p.external_url else ""
    return (path.rstrip("/") or "") + "/"


def href(f: Finding) -> str:
    """The finding page's link, relative to the page's ``<base>``."""
    return finding_path(f).lstrip("/")


def device_href(device: str) -> str:
    return "devices/" + quote(device, safe="")


def age(now: float, t: float | None) -> str:
    if t is None:
        return "never"
    s = max(0.0, now - t)
    return f"{s:.0f} s ago" if s < 120 else f"{s / 60:.0f} min ago" if s < 7200 else f"{s / 3600:.1f} h ago"


def when(t: float | None) -> str:
    return "—" if t is None else time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(t))


def page(title: str, body: str, demo: bool, refresh: int = REFRESH_S, base: str = "/") -> str:
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<base href="{escape(base)}"><title>{escape(title)} · fabricmon</title><style>{STYLE}</style></head>
<body data-refresh="{refresh}"><nav><a href="./"><b>fabricmon</b></a><a href="fabric">fabric</a><a href="runbooks">runbooks</a>
<a href="metrics">/metrics</a><a href="api/findings">/api/findings</a><a href="api/targets">/api/targets</a><a href="ready">/ready</a>
<form action="search" method="get" role="search"><input name="q" type="search" placeholder="device, port, GUID or host"
aria-label="search the fabric"></form></nav>
{DEMO_BANNER if demo else ""}<main>{body}</main><script src="static/refresh.js"></script></body></html>
"""


def _cell(v: Any) -> str:
    return "" if v is None else escape(str(v))


def scroll(table: str) -> str:
    """A wide table in a box that scrolls sideways, so a narrow screen keeps the page's width."""
    return f"<div class='scroll'>{table}</div>"


def finding_rows(findings: Iterable[Finding], now: float) -> str:
    """Findings as table rows: active ones coloured by severity, ended ones grey."""
    rows = [f"<tr class='{'ended' if f.end is not None else escape(f.severity)}'><td><a href='{href(f)}'>{escape(f.kind)}</a></td>"
            f"<td>{escape(f.severity)}</td><td><a href='{device_href(f.device)}'>{escape(f.device)}</a></td><td>{_cell(f.port)}</td>"
            f"<td>{_cell(f.priority)}</td><td>{_cell(f.role)}</td>"
            f"<td>{age(now, f.start)}</td><td>{'' if f.end is None else age(now, f.end)}</td><td>{escape(f.summary)}</td></tr>"
            for f in findings]
    return scroll("<table><tr><th>kind</th><th>severity</th><th>device</th><th>port</th><th>priority</th><th>role</th>"
                  "<th>since</th><th>ended</th><th>summary</th></tr>" + "".join(rows) + "</table>")


def reload_section(reload_error: tuple[float, str] | None, now: float) -> str:
    """A failed configuration reload: the agent runs on the previous config, which the log
    and a metric say, and so does the landing page."""
    if reload_error is None:
        return ""
    t, why = reload_error
    return (f"<p class='alert' id='reload'><b>The last configuration reload failed</b> ({age(now, t)}): the agent keeps "
            f"running with the previous configuration. {escape(why)}</p>")


def summary_page(p: Pipeline, findings: list[Finding], demo: bool, reload_error: tuple[float, str] | None = None) -> str:
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
    more = (f"<p class='muted'>{len(findings) - len(top)} more: see <a href='api/findings'>/api/findings</a> (paged).</p>"
            if len(findings) > len(top) else "")
    kinds_table = ('<table><tr><th>kind</th><th>severity</th><th>count</th></tr>' + by_kind + '</table>' if by_kind
                   else '<p>No active findings.</p>')
    ended = list(reversed(p.ended[-RECENT_ENDED:]))
    trows = []
    for name in sorted(p.targets):
        s = p.targets[name]
        state = "waiting" if s.up is None else "up" if s.up else "DOWN"
        trows.append(f"<tr class='{state.lower()}'><td><a href='targets/{escape(_url(name))}'>{escape(name)}</a></td>"
                     f"<td>{escape(s.source)}</td><td>{state}</td><td>{age(now, s.last_success_t)}</td>"
                     f"<td>{escape(s.last_error or '') if not s.up else ''}</td></tr>")
    body = f"""<h1>Fabric summary</h1>{reload_section(reload_error, now)}
<p>Targets: <b>{states['up']}</b> up, <b>{states['down']}</b> down, {states['waiting']} waiting · last poll {age(now, last)} ·
active findings: <b>{len(findings)}</b> · rendered {when(now)}</p>
<h2>Active findings by kind</h2>{kinds_table}
{'<h2>Most severe active findings</h2>' + finding_rows(top, now) + more if top else ''}
{detector_section(p)}{checklist_section(p)}
<h2>Recently ended ({len(ended)})</h2>{finding_rows(ended, now) if ended else '<p>None.</p>'}
<h2>Targets ({len(trows)})</h2>
{scroll(TARGETS_HEAD + ''.join(trows) + '</table>')}"""
    return page("summary", body, demo, base=root(p))


TARGETS_HEAD = "<table><tr><th>target</th><th>source</th><th>state</th><th>last success</th><th>last error</th></tr>"


def detector_section(p: Pipeline) -> str:
    """Rules that failed (:meth:`Detector.status`): their findings may be missing, so the landing
    page says which and why; nothing when every rule runs."""
    problems = p.detector.status().problems()
    if not problems:
        return ""
    items = "".join(f"<li>{escape(line)}</li>" for line in problems)
    return (f"<h2 id='detector'>Detector</h2><p class='alert'><b>{len(problems)} rule(s) failed</b>: their findings may be "
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
    unknown = sum(n["unknown"] for n in counts.values())
    total = sum(sum(n.values()) for n in counts.values())
    note = (f"<p class='muted'>{unknown} of {total} checks are <b>unknown</b>: no source shows that setting, so they are "
            "not verified (not passed).</p>" if unknown else "")
    bad = "".join(f"<tr class='warning'><td>{escape(r.check)}</td><td>{escape(r.device)}</td><td>{escape(r.port)}</td>"
                  f"<td>{_cell(r.priority)}</td><td>{escape(r.peer_device or '')} {escape(r.peer_port or '')}</td>"
                  f"<td>{escape(r.summary)}</td></tr>" for r in failing[:CHECKLIST_ROWS])
    more = (f"<p class='muted'>{len(failing) - CHECKLIST_ROWS} more: run <code>fabricmon audit</code>.</p>"
            if len(failing) > CHECKLIST_ROWS else "")
    fails = (f"<h3>Failing ({len(failing)})</h3>" + scroll("<table><tr><th>check</th><th>device</th><th>port</th><th>priority</th>"
             f"<th>other end</th><th>summary</th></tr>{bad}</table>") + more) if failing else "<p>No check fails.</p>"
    return (f"<h2 id='checklist'>Lossless checklist</h2><table><tr><th>check</th><th>pass</th><th>fail</th><th>unknown</th></tr>"
            f"{rows}</table>{note}{fails}")


def _url(name: str) -> str:
    return quote(name, safe="")


MAX_SPARK_PORTS = 8


def sparks(p: Pipeline, f: Finding, pool: list[Finding], history: signals.PortHistory) -> str:
    """The finding's signals (:data:`~fabricmon.agent.web.signals.SIGNALS`, by kind and role)
    on its port and its peer's, then those of the other ports of its storm or cycle (by their
    own findings' roles), over the finding's life and a margin around it."""
    now = p.now()
    lo, hi = f.start - signals.margin(f), (f.end + signals.margin(f)) if f.end is not None else now
    own = signals.involved(f)
    by_port = {(g.device, g.port): g for g in pool if g.port is not None}
    others = [(g.device, g.port) for g in pictures.storm_group(f, pool) if g.port is not None] if f.kind == "pfc_storm" else []
    rows = []
    for i, (dev, port) in enumerate(list(dict.fromkeys([*own, *others]))[:MAX_SPARK_PORTS]):
        subject = f if i < len(own) else by_port.get((dev, port), f)
        peer_side = i > 0 and i < len(own) and (dev, port) == (f.peer_device, f.peer_port)
        for s in signals.signals_for(subject):
            if s.peer != peer_side and subject is f:
                continue
            pts = [(t, v) for t, v in signals.chart_points(p, history, dev, port, s, f.priority) if lo <= t <= hi]
            svg = sparkline(pts, span=(f.start, f.end))
            if svg:
                vs = [v for _, v in pts]
                rows.append(f"<tr><td><a href='{device_href(dev)}'>{escape(dev)}</a></td><td>{escape(port)}</td><td>{escape(s.label)}"
                            f"</td><td>{svg}</td><td>{escape(s.fmt(vs[-1]))}</td><td>{escape(s.fmt(min(vs)))} to "
                            f"{escape(s.fmt(max(vs)))}</td></tr>")
    if not rows:
        return "<p class='muted'>No kept history for the involved ports yet.</p>"
    return ("<p class='muted'>Shaded: while the finding was active.</p>" +
            scroll("<table id='signals'><tr><th>device</th><th>port</th><th>signal</th><th>history</th><th>last</th><th>range</th></tr>"
                   + "".join(rows) + "</table>"))


def related(f: Finding, pool: list[Finding]) -> list[Finding]:
    """Findings of the same incident: the same ``incident`` id (a credit loop or stall and the
    loss it causes), the same storm (origin), the same cycle, or the same priority and start
    (the members of one deadlock); whatever their kind."""
    ev = f.evidence
    inc = ev.get("incident")
    me = f"{f.device}:{f.port}"
    mine = {me, *(str(x) for x in ev.get("cycle") or [])}
    out = []
    for g in pool:
        if g is f:
            continue
        gev = g.evidence
        if inc is not None or gev.get("incident") is not None:  # both name their incident: it decides
            same = inc is not None and gev.get("incident") == inc
        else:
            same = bool((f.kind == g.kind == "pfc_storm" and pictures.storm_group(f, [g]))
                        or (gev.get("cycle") and me in {str(x) for x in gev["cycle"]})
                        or (ev.get("cycle") and f"{g.device}:{g.port}" in mine)
                        or (g.kind == f.kind and g.priority == f.priority and g.start == f.start and g.role == f.role == "member"))
        if same:
            out.append(g)
    return out


def _timeline(f: Finding, rel: list[Finding], now: float) -> str:
    timeline = [(f.start, f"started on {f.device} {f.port or ''}" + (f" ({f.role})" if f.role else ""))]
    timeline += [(g.start, f"{g.kind} on {g.device} {g.port or ''}" + (f" ({g.role})" if g.role else "") + " started")
                 for g in rel if g.start != f.start]
    timeline += [(g.end, f"{g.kind} on {g.device} {g.port or ''} ended") for g in rel if g.end is not None]
    if f.end is not None:
        timeline.append((f.end, "ended"))
    return "".join(f"<tr><td>{when(t)}</td><td>{age(now, t)}</td><td>{escape(what)}</td></tr>" for t, what in sorted(timeline))


def runbook_section(f: Finding) -> str:
    alert = runbooks.alert_of(f.kind, f.role)
    body = runbooks.section_html(alert)
    if not body:
        return ""
    return (f"<section id='runbook'><h2>Runbook: {escape(alert)}</h2><p class='muted'>Also at "
            f"<a href='runbooks#{runbooks.anchor(alert)}'>runbooks#{runbooks.anchor(alert)}</a>.</p>{body}</section>")


def finding_page(p: Pipeline, f: Finding, pool: list[Finding], demo: bool, history: signals.PortHistory | None = None) -> str:
    """``/findings/<id>``: evidence in words and numbers, timeline, picture, the signals of its
    kind and role, the findings of its incident, its runbook."""
    now = p.now()
    rel = related(f, pool)
    state = "active" if f.end is None else f"ended {age(now, f.end)}"
    ident = text.fields([("device", f.device), ("port", f.port), ("priority", f.priority), ("role", f.role),
                         ("peer", " ".join(x for x in (f.peer_device, f.peer_port) if x)), ("rule", f.rule)])
    body = f"""<h1>{escape(f.kind)} <span class='{'muted' if f.end is not None else 'sev-' + escape(f.severity)}'>({escape(f.severity)},
{escape(state)})</span></h1>
<p><b>{escape(f.summary)}</b></p>
<p>{ident} · id <code>{finding_id(f)}</code> · <a href='{device_href(f.device)}'>device page</a> · <a href='#runbook'>runbook</a></p>
<h2>Picture</h2><figure id="picture">{pictures.finding_picture(f, pool, p.topology, href)}</figure>
<h2>Evidence</h2>{scroll(text.table(f.evidence)) if f.evidence else '<p class="muted">None recorded.</p>'}
{jobs_section(f.evidence)}
<h2>Timeline</h2>{scroll('<table><tr><th>time</th><th>age</th><th>event</th></tr>' + _timeline(f, rel, now) + '</table>')}
<h2>Signals of this {escape(f.kind.replace('_', ' '))}{(' ' + escape(f.role)) if f.role else ''}</h2>
{sparks(p, f, pool, history or signals.PortHistory())}
<h2>Related findings: the same incident ({len(rel)})</h2>{finding_rows(rel, now) if rel else '<p>None.</p>'}
{runbook_section(f)}"""
    return page(f"{f.kind} {f.device}", body, demo, base=root(p))


def runbooks_page(p: Pipeline, demo: bool) -> str:
    return page("runbooks", runbooks.page_body(), demo, refresh=0, base=root(p))


MAX_TARGET_PORTS = 500
PORTS_HEAD = "<table><tr><th>device</th><th>port</th><th>worst active finding</th></tr>"


def target_page(p: Pipeline, s: TargetStatus, durations: list[tuple[float, float]], demo: bool) -> str:
    """``/targets/<name>``: state, errors with reasons, poll durations, its ports."""
    now = p.now()
    state = "waiting for the first poll" if s.up is None else "up" if s.up else "DOWN"
    errs = "".join(f"<tr><td>{escape(str(r))}</td><td>{n}</td></tr>" for r, n in sorted(s.errors.items()))
    warns = "".join(f"<li>{escape(w)}</li>" for w in s.warnings)
    info = "".join(f"<tr><td>{escape(str(k))}</td><td>{escape(str(v))}</td></tr>" for k, v in sorted(s.info.items()))
    ports = sorted(pk for pk, e in p.store.ports.items() if e.target == s.name)
    worst = pictures.worst_by_port(p.findings())
    prow = "".join(f"<tr class='{escape(worst[pk].severity) if pk in worst else ''}'><td><a href='{device_href(pk[0])}'>"
                   f"{escape(pk[0])}</a></td><td>{escape(pk[1])}</td>"
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
<h2>Ports ({len(ports)})</h2>{scroll(PORTS_HEAD + prow + '</table>')}{more}"""
    return page(f"target {s.name}", body, demo, base=root(p))


def _link(f: Finding) -> str:
    return f"<a href='{href(f)}'>{escape(f.kind)}</a>"
