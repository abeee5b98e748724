"""Detector framework: analyses compute the shared facts, rules observe, the detector decides.

A pass runs in two stages over what changed since the previous one (:class:`DetectContext`):

1. **Analyses** (``agent/detector/analyses/``, registered by name): the PFC state and pause
   trees (``pfc``), the InfiniBand waits and credit-loop incidents (``ib``), the fabric's layout
   and host classification (``fabric``). Each is updated once per pass whatever rules are on,
   and exports its own gauges.
2. **Rules** (``agent/detector/rules/``, registered by name): each declares the analyses it
   reads (``needs``) and reads only those and the store's read API, never another rule, and
   yields :class:`Observation`s: "this condition holds on this port now". The order of the
   rules does not matter: observations with the same key are merged by severity, then rule
   name.

The detector alone turns observations into findings, with hysteresis: a finding is raised
after ``raise_polls`` consecutive polls that observe it and cleared after ``clear_polls``
consecutive fresh polls that do not. A poll counts for a finding (as a hit or a miss) only
when it brought new data for the finding's device, so a fabric with many targets does not
count one device's state several times per interval. A rule that raises is counted
(``fabricmon_rule_failures_total{rule}``, :meth:`Detector.status`) and the others go on.

Findings use the vocabulary of recording-format.md (kind, severity, device, port,
priority, role, start, end) plus a one-sentence summary and the evidence numbers.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from fabricmon.agent.detector import families
from fabricmon.agent.detector.analyses import ANALYSES
from fabricmon.agent.detector.analyses import params as analysis_params
from fabricmon.agent.detector.base import (
    SEVERITY_RANK,
    Analysis,
    DetectContext,
    ExportedGauge,
    Observation,
    Params,
    Rule,
    RuleParams,
)
from fabricmon.agent.exporter.exposition import Family
from fabricmon.agent.store import PortKey
from fabricmon.core.model import Finding

__all__ = ["Analysis", "DetectContext", "Detector", "DetectorStatus", "ExportedGauge", "Observation", "Params", "Rule",
           "RuleParams"]


@dataclass(frozen=True, slots=True)
class DetectorStatus:
    """What the detector runs and whether it works: for /ready, the web view and replay's exit code."""

    rules: tuple[str, ...]
    analyses: tuple[str, ...]
    failures: Mapping[str, int]  # rule -> evaluations that failed since start
    last_failure: Mapping[str, str]  # rule -> why it last failed

    @property
    def failed_rules(self) -> tuple[str, ...]:
        return tuple(sorted(r for r, n in self.failures.items() if n))

    def problems(self) -> list[str]:
        """One line per failed rule: its name, how often, and the last error."""
        return [f"rule {r} failed {self.failures[r]} time(s); last: {self.last_failure.get(r, '?')}" for r in self.failed_rules]


@dataclass(slots=True)
class _Track:
    hits: int = 0
    misses: int = 0
    first_hit: float = 0.0
    first_miss: float | None = None
    finding: Finding | None = None
    rule: Rule | None = None


def _wins(ob: Observation, rule: Rule, prev: tuple[Observation, Rule]) -> bool:
    """Two rules observe the same key (link_flap and link_degraded both report kind
    link_degraded on a port): the higher severity wins, then the rule whose name sorts first,
    so the merge does not depend on the order the rules run in."""
    new, old = SEVERITY_RANK[ob.severity], SEVERITY_RANK[prev[0].severity]
    return new > old or (new == old and rule.name < prev[1].name)


def _order(key: tuple[Any, ...]) -> tuple[tuple[bool, str], ...]:
    return tuple((x is None, "" if x is None else str(x)) for x in key)


class Detector:
    """Runs the analyses, then the rules, and keeps the findings."""

    def __init__(self, rules: list[Rule], analyses: Mapping[str, Any] | None = None) -> None:
        self._analyses: dict[str, Analysis] = {}
        self._rules: list[Rule] = []
        self._tracks: dict[tuple, _Track] = {}
        self.finished: list[Finding] = []  # ended findings not yet taken by take_finished()
        self.raised_total: dict[tuple[str, str], int] = {}  # (kind, severity) -> count
        self.failures: dict[str, int] = {}  # rule name -> evaluations that failed
        self.last_failure: dict[str, str] = {}
        self.last_errors: list[str] = []  # this pass's failures, for the log
        self.configure(rules, analyses)

    def configure(self, rules: list[Rule], analyses: Mapping[str, Any] | None = None) -> None:
        """Install the rules and the analyses' parameters (``{name: params}``, the config's
        ``detector:`` analyses; None: defaults), at start-up and on reload. An analysis whose
        parameters did not change keeps its state. Raises ValueError, changing nothing, on a
        bad parameter or a rule that needs an unknown analysis."""
        params = analysis_params(analyses)
        for r in rules:
            unknown = [n for n in r.needs if n not in ANALYSES]
            if unknown:
                raise ValueError(f"rule {r.name} needs unknown analysis {unknown[0]!r}; known: {', '.join(ANALYSES)}")
        kept: dict[str, Analysis] = {}
        for name, cls in ANALYSES.items():
            old = self._analyses.get(name)
            kept[name] = old if old is not None and old.params == params[name] else cls(params[name])
        self._analyses = kept
        self._rules = list(rules)

    @property
    def rules(self) -> list[Rule]:
        return self._rules

    @rules.setter
    def rules(self, rules: list[Rule]) -> None:
        """New rules, the analyses' parameters unchanged."""
        self.configure(rules, {name: a.params for name, a in self._analyses.items()})

    def analysis(self, name: str) -> Analysis:
        return self._analyses[name]

    def metrics(self) -> list[ExportedGauge]:
        """Every gauge of the analyses (whichever rules are on) and of the rules."""
        return [*(m for a in self._analyses.values() for m in a.metrics()), *(m for r in self._rules for m in r.metrics())]

    def families(self, port_labels: Mapping[PortKey, str] | None = None,
                 block_cache: dict[tuple[str, tuple[str, ...]], tuple[list, list[str]]] | None = None,
                 base_url: str = "") -> list[Family]:
        """The detector's metric families: active findings (their ``url`` under ``base_url``),
        findings raised, rule failures, then every analysis's and rule's gauges by name (see
        :mod:`.families`; the two caches are the exporter's, see :func:`.families.gauge_families`)."""
        active = sorted(self.active, key=lambda f: f.sort_key)
        return [*families.finding_families(active, self.raised_total, base_url),
                families.failure_family((r.name for r in self._rules), self.failures),
                *families.gauge_families(self.metrics(), port_labels, block_cache)]

    def status(self) -> DetectorStatus:
        return DetectorStatus(tuple(r.name for r in self._rules), tuple(self._analyses), dict(self.failures),
                              dict(self.last_failure))

    @property
    def active(self) -> list[Finding]:
        return [tr.finding for tr in self._tracks.values() if tr.finding is not None]

    # ------------------------------------------------------------------ one pass
    def run(self, ctx: DetectContext) -> None:
        self.last_errors = []
        failed = self._update_analyses(ctx)
        seen = self._observe(ctx, failed)
        for key in sorted(seen, key=_order):
            self._hit(ctx, key, *seen[key])
        self._misses(ctx, seen)

    def _view(self, ctx: DetectContext, needs: Iterable[str]) -> DetectContext:
        """The pass as one analysis or rule sees it: with the analyses it declared."""
        return dataclasses.replace(ctx, analyses={n: self._analyses[n] for n in needs})

    def _update_analyses(self, ctx: DetectContext) -> dict[str, str]:
        """Bring every analysis up to date, in registry order; returns those that failed, with why."""
        failed: dict[str, str] = {}
        for name, a in self._analyses.items():
            broken = [n for n in a.needs if n in failed]
            try:
                if broken:
                    raise RuntimeError(f"it needs analysis {broken[0]}, which failed")
                a.update(self._view(ctx, a.needs))
            except Exception as exc:  # an analysis bug must not stop detection or the agent
                failed[name] = f"{type(exc).__name__}: {exc}"
                self.last_errors.append(f"analysis {name} failed: {failed[name]}")
        return failed

    def _observe(self, ctx: DetectContext, failed: Mapping[str, str]) -> dict[tuple, tuple[Observation, Rule]]:
        """Every rule's observations, merged by key (:func:`_wins`). A rule that raises, or whose
        analysis failed, is counted as a failure and contributes nothing this pass."""
        seen: dict[tuple, tuple[Observation, Rule]] = {}
        for rule in self._rules:
            broken = [n for n in rule.needs if n in failed]
            try:
                if broken:
                    raise RuntimeError(f"analysis {broken[0]} failed: {failed[broken[0]]}")
                found = list(rule.evaluate(self._view(ctx, rule.needs)))
            except Exception as exc:  # a rule bug must not stop detection or the agent
                why = f"{type(exc).__name__}: {exc}"
                self.failures[rule.name] = self.failures.get(rule.name, 0) + 1
                self.last_failure[rule.name] = why
                self.last_errors.append(f"rule {rule.name} failed: {why}")
                continue
            for ob in found:
                prev = seen.get(ob.key)
                if prev is None or _wins(ob, rule, prev):
                    seen[ob.key] = (ob, rule)
        return seen

    def _hit(self, ctx: DetectContext, key: tuple, ob: Observation, rule: Rule) -> None:
        """One observation: count the hit on a fresh poll, raise after ``raise_polls``, escalate."""
        tr = self._tracks.get(key)
        fresh = ob.device in ctx.updated_devices
        if tr is None:
            if not fresh:
                return  # counted when a poll brings data for that device
            tr = self._tracks[key] = _Track(rule=rule)
        elif rule.clear_polls > (tr.rule.clear_polls if tr.rule else 0):
            tr.rule = rule  # two rules report the same finding: the slower to clear wins
        if fresh:
            if tr.hits == 0:
                tr.first_hit = ctx.t
            tr.hits += 1
            tr.misses = 0
            tr.first_miss = None
        need = ob.raise_polls or rule.raise_polls
        f = tr.finding
        if f is None and tr.hits >= need:
            peer = ctx.topology.peer(ob.device, ob.port) if ob.port is not None else None
            f = tr.finding = Finding(
                kind=ob.kind, severity=ob.severity, device=ob.device, port=ob.port, priority=ob.priority,
                role=ob.role, start=tr.first_hit, rule=rule.name,
                peer_device=peer[0] if peer else None, peer_port=peer[1] if peer else None,
            )
            self._count(ob.kind, ob.severity)
        if f is not None:
            if SEVERITY_RANK[ob.severity] > SEVERITY_RANK[f.severity]:
                f.severity = ob.severity
                self._count(ob.kind, ob.severity)
            f.summary = ob.summary
            f.evidence = ob.evidence

    def _count(self, kind: str, severity: str) -> None:
        self.raised_total[(kind, severity)] = self.raised_total.get((kind, severity), 0) + 1

    def _misses(self, ctx: DetectContext, seen: Mapping[tuple, Any]) -> None:
        """Tracks not observed this pass: a miss on a fresh poll; cleared after ``clear_polls``."""
        for key in [k for k in self._tracks if k not in seen]:
            tr = self._tracks[key]
            if key[1] not in ctx.updated_devices:
                continue  # no fresh data for that device: neither a hit nor a miss
            tr.hits = 0
            if tr.finding is None:
                del self._tracks[key]
                continue
            if tr.first_miss is None:
                tr.first_miss = ctx.t
            tr.misses += 1
            if tr.misses >= (tr.rule.clear_polls if tr.rule else 2):
                tr.finding.end = tr.first_miss
                self.finished.append(tr.finding)
                del self._tracks[key]

    # ------------------------------------------------------------------ findings out
    def take_finished(self) -> list[Finding]:
        """Findings that ended since the last call, in ``Finding.sort_key`` order."""
        out, self.finished = sorted(self.finished, key=lambda f: f.sort_key), []
        return out

    def close_all(self) -> list[Finding]:
        """At the end of a recording: every active finding, still open (end None), in ``Finding.sort_key`` order."""
        return sorted((tr.finding for tr in self._tracks.values() if tr.finding is not None), key=lambda f: f.sort_key)

    def restore(self, findings: Iterable[Finding]) -> None:
        """Re-seed active findings (persisted state) so a restart keeps their start time."""
        by_name = {r.name: r for r in self._rules}
        for f in findings:
            rule = by_name.get(f.rule)
            self._tracks[f.key] = _Track(hits=rule.raise_polls if rule else 1, first_hit=f.start, finding=f, rule=rule)
