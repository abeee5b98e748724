"""Score detector findings against scenario ground truth (``fabricmon eval``).

Matching rule: a finding matches a truth line when kind, device, port, priority (null matches
null only) and role are equal and their time spans overlap, each widened by ``tolerance``
polls. For a storm *origin* the two ends of the cable count as the same place: a truth line
may name the NIC in ``peer_device``/``peer_port`` (see tools/scenarios/catalog.py), and a
finding may name its peer the same way.

Per kind, and per kind and role (``pfc_storm/origin``, ``credit_deadlock/stalled``...):
precision (matched findings / findings), recall (matched truth / truth), time to detect in
polls and in seconds (first matching finding's start minus the truth start, clamped at 0;
median and worst), coverage (the share of each found truth line's span, start to end or the
recording's end, that its matching findings cover, each counted from one poll before it was
raised; median and worst: a lasting fault needs a finding for as long as it lasts), false
findings (findings matching no truth). Storm-origin top-1: for each truth origin, the earliest
pfc_storm origin finding overlapping it (critical before warning) is the truth's. Findings
that match an already matched truth line (duplicates) are not false, and count as matched for
precision.

Confusion: for every required truth line, what was found at its place (device and port; for a
storm origin either end of the cable) overlapping its time instead of it: the false findings
there by kind and role (with their priority when only that differs), or ``(nothing)``; false
findings where no truth line is count as ``(no truth)``. Every false finding is listed with its
recording, severity, rule and, when its evidence has one, ``attribution`` (why a loss was put
on a class); every miss with what was found there. ``format_report`` prints it all as text,
``EvalReport.to_json`` as one object (``fabricmon eval --json``).

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

import json
import statistics
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
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
    # A fault is reported for its duration, not one poll of it (issue 27: "degradation as a
    # lasting state ... for as long as it does"): matching findings must cover at least this
    # share of every found truth line's span, counted from one poll before each was raised.
    # A judgement call (no public figure): most of the span, leaving room for a finding that
    # clears a little early.
    "min_coverage": dict.fromkeys(KINDS, 0.8),
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
    """Counts and figures for one kind (or one kind and role, ``kind/role``)."""

    kind: str
    truths: int = 0  # required truth lines
    findings: int = 0
    matched_truths: int = 0
    optional_truths: int = 0
    matched_optional: int = 0
    matched_findings: int = 0
    delays: list[float] = field(default_factory=list)  # polls, per found required truth line
    delays_s: list[float] = field(default_factory=list)  # the same in seconds
    coverage: list[float] = field(default_factory=list)  # share of each found truth line's span a finding covered

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

    @property
    def delay_s_median(self) -> float | None:
        return statistics.median(self.delays_s) if self.delays_s else None

    @property
    def delay_s_max(self) -> float | None:
        return max(self.delays_s) if self.delays_s else None

    @property
    def coverage_median(self) -> float | None:
        return statistics.median(self.coverage) if self.coverage else None

    @property
    def coverage_min(self) -> float | None:
        return min(self.coverage) if self.coverage else None

    @property
    def active(self) -> bool:
        return bool(self.truths or self.findings or self.optional_truths)

    def to_json(self) -> dict[str, Any]:
        return {"truths": self.truths, "findings": self.findings, "matched_truths": self.matched_truths,
                "matched_findings": self.matched_findings, "false_findings": self.false_findings,
                "optional_truths": self.optional_truths, "matched_optional": self.matched_optional,
                "precision": self.precision, "recall": self.recall,
                "detect_polls": {"median": self.delay_median, "max": self.delay_max},
                "detect_seconds": {"median": self.delay_s_median, "max": self.delay_s_max},
                "coverage": {"median": self.coverage_median, "min": self.coverage_min}}


NOTHING = "(nothing)"  # confusion: no finding at the truth's place
NO_TRUTH = "(no truth)"  # confusion: a false finding where no truth line is


@dataclass
class EvalReport:
    kinds: dict[str, KindScore]
    roles: dict[str, KindScore] = field(default_factory=dict)  # "kind/role" for findings and truth with a role
    origin_truths: int = 0
    origin_hits: int = 0
    recordings: int = 0
    misses: list[str] = field(default_factory=list)  # "recording: truth label at start"
    false: list[str] = field(default_factory=list)  # "recording: finding label at start"
    # (truth label, what was found at its place and time) -> truth lines; diagonal = found right.
    confusion: Counter[tuple[str, str]] = field(default_factory=Counter)
    missed: list[dict[str, Any]] = field(default_factory=list)  # structured misses (with what was found there)
    false_findings: list[dict[str, Any]] = field(default_factory=list)  # structured false findings (rule, attribution)
    per_recording: dict[str, dict[str, int]] = field(default_factory=dict)
    # "recording: rule ... failed" for every detector rule or analysis that raised during a replay:
    # its findings may be missing, so the score means nothing and the run fails.
    rule_failures: list[str] = field(default_factory=list)

    @property
    def origin_top1(self) -> float | None:
        return self.origin_hits / self.origin_truths if self.origin_truths else None

    def failures(self, floors: Mapping[str, Any] | None = None) -> list[str]:
        """Every floor that is not met, as a sentence; empty when all pass."""
        fl = {**DEFAULT_FLOORS, **(floors or {})}
        out = []
        for k, s in self.kinds.items():
            if not s.active:
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
            cmin = (fl.get("min_coverage") or {}).get(k)
            if cmin is not None and s.coverage_min is not None and s.coverage_min < cmin:
                out.append(f"{k}: a finding covered {s.coverage_min:.2f} of a truth's span < {cmin}")
        top1 = self.origin_top1
        if top1 is not None and fl.get("origin_top1") is not None and top1 < fl["origin_top1"]:
            out.append(f"storm origin top-1 {top1:.2f} < {fl['origin_top1']}")
        if self.rule_failures:
            out.append(f"detector rules failed (a bug; their findings may be missing): {'; '.join(self.rule_failures)}")
        return out

    def to_json(self, floors: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """Everything the text report shows, for tools (``fabricmon eval --json``)."""
        fails = self.failures(floors)
        return {
            "recordings": self.recordings,
            "kinds": {k: s.to_json() for k, s in self.kinds.items()},
            "roles": {k: s.to_json() for k, s in sorted(self.roles.items())},
            "storm_origin_top1": {"hits": self.origin_hits, "truths": self.origin_truths, "ratio": self.origin_top1},
            "confusion": [{"truth": t, "found": f, "count": n} for (t, f), n in sorted(self.confusion.items())],
            "missed": self.missed,
            "false_findings": self.false_findings,
            "per_recording": self.per_recording,
            "failures": fails,
            "pass": not fails,
        }


def _stamp(t: float) -> str:
    """Recording time as UTC with milliseconds, to find the poll in the recording."""
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + f".{round(t % 1 * 1000) % 1000:03d}Z"


def _what(x: _F) -> str:
    """A finding's or truth line's kind and role (``credit_deadlock/stalled``; the check for misconfig)."""
    if x.kind == "misconfig":
        return f"misconfig/{x.check}" if x.check else "misconfig"
    return f"{x.kind}/{x.role}" if x.role else x.kind


def _overlap(f: _F, t: _F, tol_s: float) -> bool:
    return f.start <= (INF if t.end is None else t.end) + tol_s and (INF if f.end is None else f.end) >= t.start - tol_s


def _coverage(t: _F, hits: list[_F], interval: float, end: float) -> float:
    """Share of the truth line's span [start, end or the recording's end] that matching findings
    cover, each counted from one poll before it was raised (a rule needs a poll to see it)."""
    t_end = end if t.end is None else t.end
    if t_end <= t.start:
        return 1.0
    spans = sorted((max(t.start, f.start - interval), min(t_end, end if f.end is None else f.end)) for f in hits)
    covered, reach = 0.0, t.start
    for a, b in spans:
        a = max(a, reach)
        if b > a:
            covered += b - a
            reach = b
    return min(1.0, covered / (t_end - t.start))


def _attribution(raw: Any) -> str | None:
    evidence = _get(raw, "evidence")
    value = evidence.get("attribution") if isinstance(evidence, Mapping) else None
    return None if value is None else str(value)


def _score(table: dict[str, KindScore], key: str) -> KindScore:
    return table.setdefault(key, KindScore(key))


def evaluate(findings_by_recording: Mapping[str, Iterable[Finding | Mapping[str, Any]]],
             truth_by_recording: Mapping[str, Iterable[Mapping[str, Any]]],
             poll_interval: float | Mapping[str, float] = 10.0, tolerance_polls: float = 2.0,
             recording_end: Mapping[str, float] | None = None) -> EvalReport:
    """Score findings against truth, per recording, summed per kind and per kind/role (see
    module doc). ``recording_end``: each recording's last poll time (the end of truth lines
    and findings still open); without it, the latest time any line or finding names plus a
    poll interval."""
    report = EvalReport({k: KindScore(k) for k in KINDS})
    for rec in sorted(set(findings_by_recording) | set(truth_by_recording)):
        report.recordings += 1
        interval = poll_interval.get(rec, 10.0) if isinstance(poll_interval, Mapping) else float(poll_interval)
        findings = [_norm(f) for f in findings_by_recording.get(rec, ())]
        truths = [_norm(t) for t in truth_by_recording.get(rec, ())]
        end = (recording_end or {}).get(rec)
        if end is None:
            end = max([0.0, *(x.start for x in [*findings, *truths]), *(x.end for x in [*findings, *truths] if x.end)]) + interval
        _Recording(report, rec, findings, truths, interval, tolerance_polls * interval, end).score()
    return report


@dataclass
class _Recording:
    """One recording's findings and truth lines, scored into ``report``."""

    report: EvalReport
    rec: str
    findings: list[_F]
    truths: list[_F]
    interval: float
    tol: float
    end: float

    def score(self) -> None:
        row = {"truths": sum(not t.optional for t in self.truths), "findings": len(self.findings),
               "matched_truths": 0, "false_findings": 0, "missed": 0}
        self._count()
        false = self._false_findings(row)
        for t in self.truths:
            self._truth(t, false, row)
        self.report.per_recording[self.rec] = row

    def _scores(self, x: _F) -> list[KindScore]:
        """The per-kind score of a finding or truth line, and its kind/role score when it has a role."""
        r = self.report
        return [_score(r.kinds, x.kind), *([_score(r.roles, _what(x))] if x.role else [])]

    def _count(self) -> None:
        for f in self.findings:
            for ks in self._scores(f):
                ks.findings += 1
        for t in self.truths:
            for ks in self._scores(t):
                if t.optional:
                    ks.optional_truths += 1
                else:
                    ks.truths += 1

    def _false_findings(self, row: dict[str, int]) -> list[_F]:
        """Count matched findings; list the false ones with the rule and attribution that made them."""
        r, rec, tol = self.report, self.rec, self.tol
        false: list[_F] = []
        for f in self.findings:
            if any(matches(f, t, tol) for t in self.truths):
                for ks in self._scores(f):
                    ks.matched_findings += 1
                continue
            row["false_findings"] += 1
            false.append(f)
            r.false.append(f"{rec}: {f.label()} at {_stamp(f.start)}")
            r.false_findings.append({
                "recording": rec, "kind": f.kind, "role": f.role, "device": f.device, "port": f.port,
                "priority": f.priority, "start": f.start, "at": _stamp(f.start), "severity": f.severity,
                "rule": str(_get(f.raw, "rule") or ""), "attribution": _attribution(f.raw),
                "summary": str(_get(f.raw, "summary") or ""),
            })
            if not any(_same_place(f, t) and _overlap(f, t, tol) for t in self.truths if not t.optional):
                r.confusion[(NO_TRUTH, _what(f))] += 1
        return false

    def _truth(self, t: _F, false: list[_F], row: dict[str, int]) -> None:
        """One truth line: found (delay, coverage) or missed (and what was found there instead)."""
        r, tol = self.report, self.tol
        hits = [f for f in self.findings if matches(f, t, tol)]
        scores = self._scores(t)
        if t.optional:
            for ks in scores:
                ks.matched_optional += bool(hits)
            return
        if hits:
            row["matched_truths"] += 1
            r.confusion[(_what(t), _what(t))] += 1
            first = min(f.start for f in hits)
            for ks in scores:
                ks.matched_truths += 1
                ks.delays.append(max(0.0, round((first - t.start) / self.interval, 3)))
                ks.delays_s.append(max(0.0, round(first - t.start, 3)))
                ks.coverage.append(round(_coverage(t, hits, self.interval, self.end), 3))
        else:
            # what was found at the truth's place and time instead: false findings only (one that
            # matches another truth line there is right about that one)
            there = sorted({_what(f) + (f" (priority {f.priority})" if _what(f) == _what(t) and f.priority != t.priority else "")
                            for f in false if _same_place(f, t) and _overlap(f, t, tol)})
            row["missed"] += 1
            for found in there or [NOTHING]:
                r.confusion[(_what(t), found)] += 1
            r.misses.append(f"{self.rec}: {t.label()} at {_stamp(t.start)}")
            r.missed.append({"recording": self.rec, "kind": t.kind, "role": t.role, "check": t.check,
                             "device": t.device, "port": t.port, "priority": t.priority, "start": t.start,
                             "at": _stamp(t.start), "found_there": there})
        if t.kind == "pfc_storm" and t.role == "origin":
            r.origin_truths += 1
            r.origin_hits += _origin_found(self.findings, t, tol)


def _origin_found(findings: list[_F], t: _F, tol: float) -> bool:
    """Storm-origin top-1: the earliest pfc_storm origin finding overlapping truth origin ``t``
    (critical before warning) is at the truth's place."""
    t_end = INF if t.end is None else t.end
    cands = [f for f in findings if f.kind == "pfc_storm" and f.role == "origin"
             and f.start <= t_end + tol and (INF if f.end is None else f.end) >= t.start - tol]
    if not cands:
        return False
    best = min(cands, key=lambda f: (f.start, 0 if f.severity == "critical" else 1, f.device, f.port or ""))
    return matches(best, t, tol)


def _fmt(v: float | None, spec: str = ".2f") -> str:
    return "-" if v is None else format(v, spec)


def _table(title: str, scores: Iterable[KindScore]) -> list[str]:
    head = (f"{title:<26}{'truth':>6}{'found':>6}{'match':>6}{'false':>6}{'precision':>10}{'recall':>7}"
            f"{'polls med/max':>15}{'seconds med/max':>17}{'coverage med/min':>18}")
    lines = [head, "-" * len(head)]
    for s in scores:
        lines.append(f"{s.kind:<26}{s.truths:>6}{s.findings:>6}{s.matched_truths:>6}{s.false_findings:>6}"
                     f"{_fmt(s.precision):>10}{_fmt(s.recall):>7}"
                     f"{_fmt(s.delay_median, 'g') + '/' + _fmt(s.delay_max, 'g'):>15}"
                     f"{_fmt(s.delay_s_median, '.0f') + '/' + _fmt(s.delay_s_max, '.0f'):>17}"
                     f"{_fmt(s.coverage_median) + '/' + _fmt(s.coverage_min):>18}")
    return lines


def _by_recording(items: list[dict[str, Any]], line: Callable[[dict[str, Any]], str]) -> list[str]:
    out: list[str] = []
    last = None
    for item in items:
        if item["recording"] != last:
            last = item["recording"]
            out.append(f"  {last}:")
        out.append(f"    {line(item)}")
    return out


def _false_line(f: dict[str, Any]) -> str:
    prio = "" if f["priority"] is None else f" prio {f['priority']}"
    role = f" {f['role']}" if f["role"] else ""
    why = f", attribution: {f['attribution']}" if f.get("attribution") else ""
    return f"{f['kind']}{role} {f['device']} {f['port']}{prio} at {f['at']} ({f['severity'] or '?'}, rule {f['rule'] or '?'}{why})"


def _miss_line(m: dict[str, Any]) -> str:
    prio = "" if m["priority"] is None else f" prio {m['priority']}"
    role = f" {m['role']}" if m["role"] else ""
    check = f" {m['check']}" if m.get("check") else ""
    found = "; found there: " + ", ".join(m["found_there"]) if m["found_there"] else ""
    return f"{m['kind']}{role}{check} {m['device']} {m['port']}{prio} at {m['at']}{found}"


def format_report(report: EvalReport, floors: Mapping[str, Any] | None = None, details: int | None = None) -> str:
    """Plain text: per kind and per role precision, recall, time to detect (polls and seconds,
    median/worst) and coverage (median/worst), the storm-origin accuracy, the confusion between
    kinds, every miss and false finding by recording (``details`` caps each list), the verdict."""
    lines = [f"{report.recordings} recording(s)", *_table("kind", report.kinds.values())]
    roles = [s for s in sorted(report.roles.values(), key=lambda s: s.kind) if s.active]
    if roles:
        lines += ["", *_table("kind/role", roles)]
    optional = [f"{k} {s.matched_optional}/{s.optional_truths}" for k, s in report.kinds.items() if s.optional_truths]
    if optional:
        lines.append("optional truth found: " + ", ".join(optional))
    top1 = report.origin_top1
    lines.append(f"storm origin top-1: {report.origin_hits}/{report.origin_truths}" + ("" if top1 is None else f" = {top1:.2f}"))
    off = sorted(((t, f), n) for (t, f), n in report.confusion.items() if t != f)
    if off:
        lines.append("confusion (truth -> found at its place and time instead; (nothing): no finding there):")
        lines.extend(f"  {t} -> {f}: {n}" for (t, f), n in off)
    for title, items, fmt in (("missed", report.missed, _miss_line), ("false", report.false_findings, _false_line)):
        if items:
            shown = items if details is None else items[:details]
            lines.append(f"{title} ({len(items)}):")
            lines.extend(_by_recording(shown, fmt))
            if len(items) > len(shown):
                lines.append(f"  ... {len(items) - len(shown)} more")
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


def evaluate_recordings(paths: Iterable[str | Path], config: Any = None, tolerance_polls: float = 2.0) -> EvalReport:
    """Replay each recording (fabricmon.agent.replay.replay_recording) with its own config
    (:func:`config_beside`) or ``config``, and score it."""
    from fabricmon.agent.replay import replay_recording  # the replay pipeline is only needed here

    findings: dict[str, list[Any]] = {}
    truth: dict[str, list[Any]] = {}
    intervals: dict[str, float] = {}
    ends: dict[str, float] = {}
    broken: list[str] = []
    for path in recording_paths(paths):
        res = replay_recording(path, _config_for(path, config))
        findings[str(path)] = list(res.findings)
        truth[str(path)] = list(res.truth)
        intervals[str(path)] = float(res.poll_interval or 10.0)
        ends[str(path)] = res.pipeline.clock
        broken += [f"{path}: {line}" for line in res.pipeline.detector.status().problems()]
    report = evaluate(findings, truth, intervals, tolerance_polls, ends)
    report.rule_failures = broken
    return report


def run_eval(paths: Iterable[str | Path], floors: Mapping[str, Any] | None = None, config: Any = None,
             tolerance_polls: float = 2.0, as_json: bool = False) -> tuple[str, bool]:
    """Score the recordings (:func:`evaluate_recordings`); (report text or JSON, ok)."""
    report = evaluate_recordings(paths, config, tolerance_polls)
    fails = report.failures(floors)
    if as_json:
        return json.dumps(report.to_json(floors), indent=1, sort_keys=False) + "\n", not fails
    return format_report(report, floors), not fails
