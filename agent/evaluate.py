"""Score detector findings against scenario ground truth (``fabricmon eval``).

Matching rule: a finding matches a truth line when kind, device, port, priority (null matches
null only) and role are equal and their time spans overlap, each widened by ``tolerance``
polls. For a storm *origin* the two ends of the cable count as the same place: a truth line
may name the NIC in ``peer_device``/``peer_port`` (see tools/scenarios/catalog.py), and a
finding may name its peer the same way.

Per kind: precision (matched findings / findings), recall (matched truth / truth), detection
delay in polls (first matching finding's start minus the truth start, clamped at 0; median and
max), false findings (findings matching no truth). Storm-origin top-1: for each truth origin,
the earliest pfc_storm origin finding overlapping it (critical before warning) is the truth's.
Findings that match an already matched truth line (duplicates) are not false, and count as
matched for precision.

``misconfig`` (the lossless-fabric checklist) is matched on its check instead of a role: the
truth line's ``check`` must equal the finding's ``evidence.check``; the two ends of a link count
as the same place (a link check names the end to fix first, which a truth line may name the
other way round); and a priority given on one side only matches any (a truth line may leave a
link-wide check's priority null).

A truth line with ``"optional": true`` names what a correct detector may report but need not
(a partially paused storm victim, the loss on a credit-loop member that the loop finding
explains): a finding matching it is correct (not false), and no finding for it is not a miss.
Optional lines count neither in recall nor in delays nor in storm-origin top-1; the table
shows how many of them were found.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fabricmon.core.model import KINDS, Finding

INF = float("inf")

# Defaults from the detector issue's targets: P/R >= 0.95 for every kind, no false deadlocks,
# storms and deadlocks within 2 polls, hardware-counted loss within 1 poll, origin top-1 >= 90 %.
DEFAULT_FLOORS: dict[str, Any] = {
    "precision": 0.95,
    "recall": 0.95,
    "origin_top1": 0.90,
    "max_false": {"pfc_deadlock": 0, "credit_deadlock": 0},
    "max_delay_polls": {"pfc_storm": 2, "pfc_deadlock": 2, "credit_deadlock": 2, "packet_loss": 1},
}


@dataclass(slots=True)
class _F:
    """A finding or truth line, normalised."""

    kind: str
    device: str
    port: str | None
    priority: int | None
    role: str | None
    start: float
    end: float | None
    severity: str = ""
    peer: tuple[str, str | None] | None = None
    optional: bool = False
    check: str | None = None  # misconfig: the checklist item (truth ``check``, finding ``evidence.check``)
    raw: Any = None

    def label(self) -> str:
        prio = "" if self.priority is None else f" prio {self.priority}"
        role = f" {self.role}" if self.role else ""
        check = f" {self.check}" if self.check else ""
        return f"{self.kind}{role}{check} {self.device} {self.port}{prio}"


def _get(obj: Any, name: str, default: Any = None) -> Any:
    if isinstance(obj, Mapping):
        return obj.get(name, default)
    return getattr(obj, name, default)


def _norm(obj: Any) -> _F:
    peer_dev = _get(obj, "peer_device")
    prio = _get(obj, "priority")
    end = _get(obj, "end")
    port = _get(obj, "port")
    evidence = _get(obj, "evidence")
    check = _get(obj, "check") or (evidence.get("check") if isinstance(evidence, Mapping) else None)
    return _F(
        kind=str(_get(obj, "kind")), device=str(_get(obj, "device")), port=None if port is None else str(port),
        priority=None if prio is None else int(prio), role=_get(obj, "role"), start=float(_get(obj, "start")),
        end=None if end is None else float(end), severity=str(_get(obj, "severity") or ""),
        peer=(str(peer_dev), _get(obj, "peer_port")) if peer_dev is not None else None,
        optional=_get(obj, "optional") is True, check=None if check is None else str(check), raw=obj,
    )


def _same_place(f: _F, t: _F) -> bool:
    if (f.device, f.port) == (t.device, t.port):
        return True
    if t.role != "origin" and t.kind != "misconfig":
        return False
    return (t.peer is not None and (f.device, f.port) == t.peer) or (f.peer is not None and f.peer == (t.device, t.port))


def _same_what(f: _F, t: _F) -> bool:
    if f.kind != t.kind:
        return False
    if f.kind == "misconfig":
        return f.check == t.check and (f.priority is None or t.priority is None or f.priority == t.priority)
    return (f.priority, f.role) == (t.priority, t.role)


def matches(f: _F, t: _F, tol_s: float) -> bool:
    if not _same_what(f, t) or not _same_place(f, t):
        return False
    t_end = INF if t.end is None else t.end
    f_end = INF if f.end is None else f.end
    return f.start <= t_end + tol_s and f_end >= t.start - tol_s


@dataclass
class KindScore:
    kind: str
    truths: int = 0  # required truth lines
    findings: int = 0
    matched_truths: int = 0
    optional_truths: int = 0
    matched_optional: int = 0
    matched_findings: int = 0
    delays: list[float] = field(default_factory=list)

    @property
    def false_findings(self) -> int:
        return self.findings - self.matched_findings

    @property
    def precision(self) -> float | None:
        return self.matched_findings / self.findings if self.findings else None

    @property
    def recall(self) -> float | None:
        return self.matched_truths / self.truths if self.truths else None

    @property
    def delay_median(self) -> float | None:
        return statistics.median(self.delays) if self.delays else None

    @property
    def delay_max(self) -> float | None:
        return max(self.delays) if self.delays else None


@dataclass
class EvalReport:
    kinds: dict[str, KindScore]
    origin_truths: int = 0
    origin_hits: int = 0
    recordings: int = 0
    misses: list[str] = field(default_factory=list)  # "recording: truth label @start"
    false: list[str] = field(default_factory=list)  # "recording: finding label @start"

    @property
    def origin_top1(self) -> float | None:
        return self.origin_hits / self.origin_truths if self.origin_truths else None

    def failures(self, floors: Mapping[str, Any] | None = None) -> list[str]:
        """Every floor that is not met, as a sentence; empty when all pass."""
        fl = {**DEFAULT_FLOORS, **(floors or {})}
        out = []
        for k, s in self.kinds.items():
            if not s.truths and not s.findings and not s.optional_truths:
                continue
            if s.precision is not None and fl.get("precision") is not None and s.precision < fl["precision"]:
                out.append(f"{k}: precision {s.precision:.2f} < {fl['precision']}")
            if s.recall is not None and fl.get("recall") is not None and s.recall < fl["recall"]:
                out.append(f"{k}: recall {s.recall:.2f} < {fl['recall']}")
            limit = (fl.get("max_false") or {}).get(k)
            if limit is not None and s.false_findings > limit:
                out.append(f"{k}: {s.false_findings} false finding(s) > {limit}")
            dmax = (fl.get("max_delay_polls") or {}).get(k)
            if dmax is not None and s.delay_max is not None and s.delay_max > dmax:
                out.append(f"{k}: max detection delay {s.delay_max:g} polls > {dmax}")
        top1 = self.origin_top1
        if top1 is not None and fl.get("origin_top1") is not None and top1 < fl["origin_top1"]:
            out.append(f"storm origin top-1 {top1:.2f} < {fl['origin_top1']}")
        return out


def _stamp(t: float) -> str:
    """Recording time as UTC with milliseconds, to find the poll in the recording."""
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + f".{round(t % 1 * 1000) % 1000:03d}Z"


def evaluate(findings_by_recording: Mapping[str, Iterable[Finding | Mapping[str, Any]]],
             truth_by_recording: Mapping[str, Iterable[Mapping[str, Any]]],
             poll_interval: float | Mapping[str, float] = 10.0, tolerance_polls: float = 2.0) -> EvalReport:
    """Score findings against truth, per recording, summed per kind (see module doc)."""
    kinds = {k: KindScore(k) for k in KINDS}
    report = EvalReport(kinds)
    names = sorted(set(findings_by_recording) | set(truth_by_recording))
    for rec in names:
        report.recordings += 1
        interval = poll_interval.get(rec, 10.0) if isinstance(poll_interval, Mapping) else float(poll_interval)
        tol = tolerance_polls * interval
        findings = [_norm(f) for f in findings_by_recording.get(rec, ())]
        truths = [_norm(t) for t in truth_by_recording.get(rec, ())]
        for f in findings:
            kinds.setdefault(f.kind, KindScore(f.kind)).findings += 1
        for t in truths:
            ks = kinds.setdefault(t.kind, KindScore(t.kind))
            if t.optional:
                ks.optional_truths += 1
            else:
                ks.truths += 1
        for f in findings:
            if any(matches(f, t, tol) for t in truths):
                kinds[f.kind].matched_findings += 1
            else:
                report.false.append(f"{rec}: {f.label()} at {_stamp(f.start)}")
        for t in truths:
            hits = [f for f in findings if matches(f, t, tol)]
            if t.optional:
                kinds[t.kind].matched_optional += bool(hits)
                continue
            if hits:
                ks = kinds[t.kind]
                ks.matched_truths += 1
                first = min(f.start for f in hits)
                ks.delays.append(max(0.0, round((first - t.start) / interval, 3)))
            else:
                report.misses.append(f"{rec}: {t.label()} at {_stamp(t.start)}")
            if t.kind == "pfc_storm" and t.role == "origin":
                report.origin_truths += 1
                t_end = INF if t.end is None else t.end
                cands = [f for f in findings if f.kind == "pfc_storm" and f.role == "origin"
                         and f.start <= t_end + tol and (INF if f.end is None else f.end) >= t.start - tol]
                if cands:
                    best = min(cands, key=lambda f: (f.start, 0 if f.severity == "critical" else 1, f.device, f.port or ""))
                    if matches(best, t, tol):
                        report.origin_hits += 1
    return report


def _fmt(v: float | None, spec: str = ".2f") -> str:
    return "-" if v is None else format(v, spec)


def format_report(report: EvalReport, floors: Mapping[str, Any] | None = None, details: int = 20) -> str:
    """A plain-text table, the origin accuracy, misses/false findings and the floor verdict."""
    head = f"{'kind':<16}{'truth':>6}{'found':>7}{'match':>7}{'false':>7}{'precision':>11}{'recall':>8}{'delay med':>11}{'delay max':>11}"
    lines = [f"{report.recordings} recording(s)", head, "-" * len(head)]
    for k, s in report.kinds.items():
        lines.append(f"{k:<16}{s.truths:>6}{s.findings:>7}{s.matched_truths:>7}{s.false_findings:>7}"
                     f"{_fmt(s.precision):>11}{_fmt(s.recall):>8}{_fmt(s.delay_median, 'g'):>11}{_fmt(s.delay_max, 'g'):>11}")
    optional = [f"{k} {s.matched_optional}/{s.optional_truths}" for k, s in report.kinds.items() if s.optional_truths]
    if optional:
        lines.append("optional truth found: " + ", ".join(optional))
    top1 = report.origin_top1
    lines.append(f"storm origin top-1: {report.origin_hits}/{report.origin_truths}" + ("" if top1 is None else f" = {top1:.2f}"))
    for title, items in (("missed", report.misses), ("false", report.false)):
        if items:
            lines.append(f"{title} ({len(items)}):")
            lines.extend(f"  {x}" for x in items[:details])
            if len(items) > details:
                lines.append(f"  ... {len(items) - details} more")
    fails = report.failures(floors)
    lines.append("PASS" if not fails else "FAIL: " + "; ".join(fails))
    return "\n".join(lines) + "\n"


def recording_paths(paths: Iterable[str | Path]) -> list[Path]:
    """Files as given; directories expanded to their ``*.jsonl`` and ``*.jsonl.gz`` files, sorted."""
    out: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            out.extend(sorted([*p.glob("*.jsonl"), *p.glob("*.jsonl.gz")]))
        else:
            out.append(p)
    return out


def config_beside(recording: Path) -> Path:
    """Where the config of the fabric a recording was taken on sits, if it has one: ``X.yml``
    beside ``X.jsonl`` / ``X.jsonl.gz``. A recording holds what the devices sent, not how the
    operator configured the agent (the ``fabric:`` layout, a non-identity priority map); a
    scenario that needs one states it there, as an operator's config file would."""
    return recording.with_name(recording.name.removesuffix(".gz").removesuffix(".jsonl") + ".yml")


def _config_for(recording: Path, default: Any) -> Any:
    """The recording's own config (:func:`config_beside`) when present, else ``default``."""
    from fabricmon.agent.config import ConfigError, load

    own = config_beside(recording)
    if not own.is_file():
        return default
    try:
        return load(own)
    except ConfigError as exc:  # the CLI reports ValueError as a clear error, not a traceback
        raise ValueError("; ".join(exc.problems)) from None


def run_eval(paths: Iterable[str | Path], floors: Mapping[str, Any] | None = None, config: Any = None,
             tolerance_polls: float = 2.0) -> tuple[str, bool]:
    """Replay each recording (fabricmon.agent.replay.replay_recording) with its own config
    (:func:`config_beside`) or ``config``, and score it; (report text, ok)."""
    from fabricmon.agent.replay import replay_recording  # the replay pipeline is only needed here

    findings: dict[str, list[Any]] = {}
    truth: dict[str, list[Any]] = {}
    intervals: dict[str, float] = {}
    broken: list[str] = []  # a rule that failed makes the score meaningless: the run fails
    for path in recording_paths(paths):
        res = replay_recording(path, _config_for(path, config))
        findings[str(path)] = list(res.findings)
        truth[str(path)] = list(res.truth)
        intervals[str(path)] = float(res.poll_interval or 10.0)
        broken += [f"{path}: {line}" for line in res.pipeline.detector.status().problems()]
    report = evaluate(findings, truth, intervals, tolerance_polls)
    text = format_report(report, floors)
    if broken:
        text = (text.removesuffix("PASS\n") + "FAIL: detector rules failed (a bug; their findings may be missing):\n"
                + "".join(f"  {b}\n" for b in broken))
    return text, not report.failures(floors) and not broken
