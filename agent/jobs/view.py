"""The job view: where a job runs in the fabric, which findings touch it, and how its ports fare.

One builder (:func:`job_view`) serves ``fabricmon job ID`` (text or ``--json``), ``/api/jobs/<id>``
and the ``/jobs/<id>`` page. The health rates of the job's ports are taken over the store's
kept history (``global.history`` points per series), per poll interval:

* **pause ratio**: seconds of received PFC pause per second (``pfc_rx_pause_seconds``), the
  share of the interval the port's transmitter was held, on its most-paused priority; and
  the same for the pause it *sent* (``pfc_tx_pause_seconds``): on a switch port facing a host
  the agent does not poll, that is how long the host's NIC was held;
* **XmitWait ratio**: XmitWait / (XmitWait + data words sent), the tick-free ratio of
  Omni-Path's performance administration (cornelisnetworks/opa-fm ``pa_categories.c``), so no
  device tick is needed: 0 when the port never waited, near 1 when it waited and sent nothing;
* **loss**: packets per second of every ``drops`` counter of the vocabulary;
* **errors**: events per second of every ``errors`` counter.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from fabricmon.agent.jobs.impact import REACH_TEXT
from fabricmon.agent.jobs.inventory import Job
from fabricmon.agent.store import CounterStore
from fabricmon.agent.web.ids import finding_id
from fabricmon.core.model import Finding
from fabricmon.core.vocabulary import COUNTERS

if TYPE_CHECKING:
    from fabricmon.agent.pipeline import Pipeline

PortRef = tuple[str, str]
ENDED_KEPT = 500  # the pipeline keeps this many ended findings (Pipeline.detect)
MAX_PORTS = 512  # ports whose rates a view lists (the worst first); the rest are counted
SEVERITY = {"critical": 2, "warning": 1}


def _span(seconds: float) -> str:
    return f"{seconds / 3600:.3g} h" if seconds >= 3600 else f"{seconds / 60:.3g} min" if seconds >= 60 else f"{seconds:.0f} s"


def utc(t: float | None) -> str | None:
    return None if t is None else time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(t))


def _intervals(history: list[tuple[float, float]]) -> dict[float, tuple[float, float]]:
    """End time -> (increase, seconds) of each kept interval that did not go backwards."""
    return {t1: (v1 - v0, t1 - t0) for (t0, v0), (t1, v1) in itertools.pairwise(history) if t1 > t0 and v1 >= v0}


def port_rates(store: CounterStore, pk: PortRef) -> dict[str, list[tuple[float, float]]]:
    """The four health rates of a port, each a list of (interval end, value), oldest first."""
    entry = store.port(pk)
    if entry is None:
        return {}
    pause: dict[float, float] = {}
    sent_pause: dict[float, float] = {}
    loss: dict[float, float] = {}
    errors: dict[float, float] = {}
    wait: dict[float, tuple[float, float]] = {}
    sent: dict[float, tuple[float, float]] = {}
    for name, _sub, se in entry.counters():
        d = COUNTERS.get(name)
        if d is None:
            continue
        iv = _intervals(se.history)
        if name in ("pfc_rx_pause_seconds", "pfc_tx_pause_seconds"):
            into = pause if name == "pfc_rx_pause_seconds" else sent_pause
            for t, (inc, dt) in iv.items():
                into[t] = max(into.get(t, 0.0), min(1.0, inc / dt))
        elif name == "xmit_wait":
            wait = iv
        elif name == "tx_bytes":
            sent = iv
        if d.group == "drops":
            for t, (inc, dt) in iv.items():
                loss[t] = loss.get(t, 0.0) + inc / dt
        elif d.group == "errors":
            for t, (inc, dt) in iv.items():
                errors[t] = errors.get(t, 0.0) + inc / dt
    ratio = {}
    for t, (w, _) in wait.items():
        words = sent[t][0] / 4 if t in sent else None
        if words is not None and w + words > 0:
            ratio[t] = w / (w + words)
    out = {"pause_ratio": pause, "pause_sent_ratio": sent_pause, "xmit_wait_ratio": ratio, "loss_per_s": loss,
           "errors_per_s": errors}
    return {k: sorted(v.items()) for k, v in out.items() if v}


def _summary(points: list[tuple[float, float]]) -> dict[str, Any]:
    vs = [v for _, v in points]
    return {"last": round(vs[-1], 6), "max": round(max(vs), 6), "points": [[round(t, 3), round(v, 6)] for t, v in points]}


def _finding_row(f: Finding, hosts: Iterable[str], rule: str, now: float) -> dict[str, Any]:
    timeline = [[f.start, "started"]]
    if f.end is not None:
        timeline.append([f.end, "ended"])
    return {"id": finding_id(f), "kind": f.kind, "severity": f.severity, "device": f.device, "port": f.port,
            "priority": f.priority, "role": f.role, "start": f.start, "end": f.end, "active": f.end is None,
            "summary": f.summary, "reach": rule, "reach_text": REACH_TEXT[rule], "job_hosts": sorted(hosts),
            "timeline": timeline, "duration_s": round((f.end if f.end is not None else now) - f.start, 3)}


def _verdict(job: Job, rows: list[dict[str, Any]], since: float, now: float, window: float, unmatched: int) -> str:
    n = len(job.hosts)
    span = now - since
    scope = f"the last {_span(window)}" if span >= window - 1e-6 else f"the last {_span(span)} (as far back as this agent knows)"
    blind = f"; {unmatched} of its hosts are not placed in the fabric, so faults there cannot be joined to it" if unmatched else ""
    if not rows:
        return f"no fabric finding touches this job's {n} hosts in {scope}{blind}"
    first = rows[0]
    where = f"{first['device']} {first['port'] or ''}".strip()
    prio = f" priority {first['priority']}" if first["priority"] is not None else ""
    state = "still active" if first["active"] else f"ended {utc(first['end'])}"
    more = f"; {len(rows) - 1} more finding(s) below" if len(rows) > 1 else ""
    return (f"{first['kind']} ({first['severity']}) at {where}{prio} touches {len(first['job_hosts'])} of this job's {n} hosts "
            f"since {utc(first['start'])} ({state}){more}{blind}")


def _find(inv: Any, name: str) -> tuple[Any, str]:
    """(the job, "running" or "ended"), or (None, "") when no job source knows it."""
    job = inv.find(name)
    if job is not None:
        return job, "running"
    job = inv.gone.get(name) or next((j for j in inv.gone.values() if name in j.aliases), None)
    return job, "ended" if job is not None else ""


def _rows(p: Pipeline, job: Any, since: float, now: float) -> list[dict[str, Any]]:
    """The findings (active and recently ended, since ``since``) that touch the job's hosts."""
    stage = p.jobs
    hosts = set(job.hosts)
    rows = []
    for f in [*p.findings(), *p.ended]:
        imp = stage.impacts.get(stage.fid(f))
        if imp is None or (f.end is not None and f.end < since) or (job.start is not None and f.end is not None and f.end < job.start):
            continue
        hit = imp.hosts & hosts
        if hit or job.id in imp.jobs:
            rows.append(_finding_row(f, hit, imp.rule, now))
    # active first, then the most severe, the earliest, a storm's origin before its victims
    rows.sort(key=lambda r: (not r["active"], -SEVERITY.get(r["severity"], 0), r["start"], r["role"] != "origin", r["device"]))
    return rows


def _placement(p: Pipeline, job: Any) -> tuple[list[dict[str, Any]], dict[PortRef, dict[str, Any]]]:
    """(where each host sits: its NIC ports and their switch ports, every such port once)."""
    placement = []
    ports: dict[PortRef, dict[str, Any]] = {}
    for h in job.hosts:
        pl = p.jobs.places.get(h)
        nics = pl.nics if pl is not None else []
        placement.append({"host": h, "placed": bool(pl and pl.placed), "nics": [
            {"device": n.device, "port": n.port, "switch_device": n.switch[0] if n.switch else None,
             "switch_port": n.switch[1] if n.switch else None, "via": n.via} for n in nics]})
        for n in nics:
            if n.port:
                ports.setdefault((n.device, n.port), {"device": n.device, "port": n.port, "side": "nic", "host": h})
            if n.switch is not None:
                ports.setdefault(n.switch, {"device": n.switch[0], "port": n.switch[1], "side": "switch", "host": h})
    return placement, ports


def _rated(p: Pipeline, ports: dict[PortRef, dict[str, Any]]) -> list[dict[str, Any]]:
    """The ports' health rates over the kept history, the most paused or lossy first."""
    rated = []
    for pk, row in ports.items():
        rates = port_rates(p.store, pk)
        rated.append({**row, "polled": p.store.port(pk) is not None, **{k: _summary(v) for k, v in rates.items()}})
    rated.sort(key=lambda r: (-max((r[k]["max"] for k in ("pause_ratio", "pause_sent_ratio", "xmit_wait_ratio") if k in r), default=0.0),
                              -(r["loss_per_s"]["max"] if "loss_per_s" in r else 0.0), r["device"], r["port"]))
    return rated


def job_view(p: Pipeline, name: str, window: float | None = None) -> dict[str, Any] | None:
    """The job's view, or None when no job source knows it (running or recently ended)."""
    stage = p.jobs
    job, state = _find(stage.inventory, name)
    if job is None:
        return None
    now = p.now()
    window = stage.window if window is None else window
    since = max(now - window, stage.first_t if stage.first_t is not None else now)
    if len(p.ended) >= ENDED_KEPT and p.ended[0].end is not None:  # older ended findings were let go: say so
        since = max(since, p.ended[0].end)
    rows = _rows(p, job, since, now)
    placement, ports = _placement(p, job)
    unmatched = [h for h in job.hosts if h in stage.unmatched or h not in stage.places]
    rated = _rated(p, ports)
    verdict = _verdict(job, rows, since, now, window, len(unmatched))
    if state != "running":
        verdict = f"not running: it left the job inventory (last reported {utc(job.seen)}); {verdict}"
    return {
        "job": job.id, "state": state, "aliases": list(job.aliases), "labels": dict(job.labels), "targets": list(job.targets),
        "start": job.start, "hosts": len(job.hosts), "inventory_age_s": round(now - job.seen, 3), "now": now,
        "window_s": window, "since": since, "verdict": verdict,
        "findings": rows, "placement": placement, "unmatched": unmatched,
        "ports": rated[:MAX_PORTS], "ports_total": len(rated),
    }


def format_text(v: dict[str, Any]) -> str:
    """The view for a terminal."""
    labels = " ".join(f"{k}={val}" for k, val in v["labels"].items())
    lines = [f"job {v['job']} ({v['state']}; {v['hosts']} hosts; from {', '.join(v['targets'])}"
             + (f"; started {utc(v['start'])}" if v["start"] else "") + (f"; {labels}" if labels else "") + ")",
             f"verdict: {v['verdict']}", ""]
    lines.append(f"findings on this job's path since {utc(v['since'])}:" if v["findings"] else "findings on this job's path: none")
    for r in v["findings"]:
        when = f"{utc(r['start'])} .. {utc(r['end']) if r['end'] is not None else 'now'}"
        lines.append(f"  {r['kind']:<16} {r['severity']:<8} {r['device']} {r['port'] or ''} prio {r['priority']} role {r['role']}"
                     f"  {when}  hosts: {', '.join(r['job_hosts'][:8])}{' ...' if len(r['job_hosts']) > 8 else ''}"
                     f"  [reach: {r['reach']}]  /findings/{r['id']}")
    lines += ["", "hosts, NIC ports and switch ports:"]
    for h in v["placement"]:
        if not h["nics"]:
            lines.append(f"  {h['host']}: not placed in the fabric (unmatched)")
        for n in h["nics"]:
            sw = f"{n['switch_device']} {n['switch_port']}" if n["switch_device"] else "(no cable known)"
            lines.append(f"  {h['host']}: {n['device']} {n['port']} -> {sw}   via {n['via']}")
    lines += ["", f"port health over the kept history ({v['ports_total']} ports; worst first):"]
    for r in v["ports"]:
        parts = []
        for key, label in (("pause_ratio", "paused"), ("pause_sent_ratio", "pausing peer"), ("xmit_wait_ratio", "xmitwait"),
                           ("loss_per_s", "loss/s"), ("errors_per_s", "errors/s")):
            if key in r:
                parts.append(f"{label} last {r[key]['last']:.3g} max {r[key]['max']:.3g}")
        lines.append(f"  {r['side']:<6} {r['device']} {r['port']}: " + ("; ".join(parts) or (
            "no kept history" if r["polled"] else "not polled (known from its peer's cabling)")))
    return "\n".join(lines) + "\n"
