"""``fabricmon audit``: the lossless-fabric checklist once, as a table or JSON.

The input is either one poll of every configured target (``--config.file``) or a recording
replayed through the same pipeline as ``fabricmon replay``; the checklist
(:mod:`fabricmon.agent.detector.checklist`) then runs over the store and topology that
produced. One live poll gives configuration state but no counter deltas, so the behaviour
half of ``pfc_on_lossy_priority`` and ``ecn_after_pfc`` needs a recording (or ``fabricmon
run``, whose ``misconfig`` rule runs the same checklist on every poll).

Exit codes: 0 every check passed or is unknown, 1 at least one check failed, 2 the input
could not be read, or no target delivered anything (every target down: nothing could be
verified) (``AUDIT_EXIT_CODES`` in :mod:`fabricmon.agent.cli`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fabricmon.agent.config import LoadedConfig
from fabricmon.agent.detector import checklist as cl
from fabricmon.agent.pipeline import Pipeline

EVIDENCE_WIDTH = 110  # characters of evidence per table row; --json has all of it


@dataclass
class Audit:
    """One audit: what was read, the checklist, and what the input lacked."""

    source: str
    lossless: tuple[int, ...]
    results: list[cl.Result]
    ports: int
    links: int
    polls: int
    notes: list[str] = field(default_factory=list)  # targets that failed, data errors skipped
    read: bool = True  # some target delivered data (a successful poll); False: nothing could be verified

    @property
    def failed(self) -> bool:
        return any(r.status == cl.FAIL for r in self.results)

    def to_json(self) -> dict[str, Any]:
        return {"source": self.source, "lossless_priorities": list(self.lossless), "polls": self.polls,
                "ports": self.ports, "links": self.links, "summary": cl.counts(self.results),
                "to_fix": [r.to_json() for r in cl.failing(self.results)],
                "results": [r.to_json() for r in self.results], "notes": self.notes, "read": self.read}


def _audit(pipeline: Pipeline, source: str, polls: int, notes: list[str]) -> Audit:
    view = cl.FabricView(pipeline.store, pipeline.topology, pipeline.fabric)
    ports, links = cl.audit_ports(view)
    for name, s in sorted(pipeline.targets.items()):
        if s.up is False:
            notes.append(f"target {name} ({s.source}) failed: {s.last_error}")
    read = any(s.last_success_t is not None for s in pipeline.targets.values())
    return Audit(source, pipeline.fabric.lossless, cl.run(view, ports, links), len(ports), len(links), polls, notes, read)


def audit_recording(path: str | Path, config: LoadedConfig | None = None) -> Audit:
    """Replay ``path`` (raises RecordingError when it cannot be read at all) and audit the end state."""
    from fabricmon.agent.replay import replay_recording

    res = replay_recording(path, config)
    notes = [f"{res.skipped} data error(s) skipped; the first: {res.skipped_examples[0]}"] if res.skipped else []
    return _audit(res.pipeline, str(path), res.polls, notes)


async def audit_live(loaded: LoadedConfig) -> Audit:
    """One poll of every configured target (this shard's), through the live agent's pipeline."""
    from fabricmon.agent.assemble import build_pipeline, plan_targets
    from fabricmon.agent.scheduler import Scheduler

    cfg = loaded.config
    targets = []
    notes = []
    for t in plan_targets(loaded):
        try:
            targets.append(t.scheduled())
        except Exception as exc:  # a collector that cannot be set up is that target's failure, not the audit's
            notes.append(f"target {t.config.name} ({t.config.source}) not polled: {type(exc).__name__}: {exc}")
    pipeline = build_pipeline(cfg, [t.collector.spec() for t in targets], wall_clock=True)
    scheduler = Scheduler(pipeline.ingest, cfg.global_.max_concurrency)
    try:
        polls = await asyncio.gather(*(scheduler.poll_once(t) for t in targets))
    finally:
        for t in targets:
            with contextlib.suppress(Exception):  # a collector that fails to close must not hide the audit
                await t.collector.close()
    for poll in polls:
        pipeline.ingest(poll)
    return _audit(pipeline, str(loaded.path), len(polls), notes)


# ---------------------------------------------------------------------- text
def _ev(r: cl.Result) -> str:
    items = []
    for k, v in sorted(r.evidence.items(), key=lambda kv: kv[0] != "missing"):  # what is missing first
        if k == "check":
            continue
        items.append(f"{k}={json.dumps(v, separators=(',', ':'), sort_keys=True) if isinstance(v, dict | list) else v}")
    if r.covered_by:
        items.insert(0, f"explained by {r.covered_by}")
    text = "; ".join(items)
    return text if len(text) <= EVIDENCE_WIDTH else text[:EVIDENCE_WIDTH - 1] + "…"


def _rows(results: list[cl.Result]) -> list[str]:
    w = max(len(c) for c in cl.CHECKS)
    out = []
    for r in results:
        prio = "-" if r.priority is None else str(r.priority)
        out.append(f"    {r.check:<{w}}  {prio:>4}  {r.status.upper() if r.status == cl.FAIL else r.status:<7}  {_ev(r)}")
    return out


def format_text(a: Audit) -> str:
    """Per device and port, then per link: check, priority, status, evidence; the summary per
    check; the failures to fix first."""
    w = max(len(c) for c in cl.CHECKS)
    lines = [f"fabricmon audit of {a.source}: {a.polls} poll(s), {a.ports} port(s), {a.links} link(s); "
             f"lossless priorities {list(a.lossless)}", ""]
    ports: dict[str, dict[str, list[cl.Result]]] = {}
    links: dict[tuple[tuple[str, str], tuple[str, str]], list[cl.Result]] = {}
    for r in a.results:
        if cl.CHECKS[r.check].scope == "link" and r.peer_device is not None:
            ends = sorted([(r.device, r.port), (r.peer_device, r.peer_port or "")])
            links.setdefault((ends[0], ends[1]), []).append(r)
        else:
            ports.setdefault(r.device, {}).setdefault(r.port, []).append(r)
    head = f"    {'check':<{w}}  {'prio':>4}  {'status':<7}  evidence"
    for device in sorted(ports):
        lines.append(f"device {device}")
        for port in sorted(ports[device]):
            rs = ports[device][port]
            peer = next((f" (cable to {r.peer_device} {r.peer_port})" for r in rs if r.peer_device), "")
            lines += [f"  port {port}{peer}", head, *_rows(rs)]
        lines.append("")
    for (x, y), rs in sorted(links.items()):
        lines += [f"link {x[0]} {x[1]} <-> {y[0]} {y[1]}", head, *_rows(rs), ""]
    lines.append(f"{'summary':<{w}}  {'pass':>6}  {'fail':>6}  {'unknown':>7}")
    for check, n in cl.counts(a.results).items():
        lines.append(f"{check:<{w}}  {n[cl.PASS]:>6}  {n[cl.FAIL]:>6}  {n[cl.UNKNOWN]:>7}")
    bad = list(cl.failing(a.results))
    lines.append("")
    if bad:
        lines.append(f"to fix ({len(bad)}):")
        lines += [f"  {r.check}" + ("" if r.priority is None else f" priority {r.priority}") + f": {r.summary}" for r in bad]
    else:
        lines.append("no check failed" + ("" if any(r.status == cl.PASS for r in a.results) else " (nothing could be verified)"))
    if not a.read:
        lines.append("no target delivered data: every target failed, so nothing could be verified")
    lines += [f"note: {n}" for n in a.notes]
    return "\n".join(lines) + "\n"
