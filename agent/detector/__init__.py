"""Detector framework: rules observe, the detector decides.

A rule is a plugin (a :class:`Rule` subclass listed in ``agent/detector/rules/__init__.py``)
that looks at the store and the topology after a poll and yields :class:`Observation`s:
"this condition holds on this port now". The detector alone turns observations into
findings, with hysteresis: a finding is raised after ``raise_polls`` consecutive polls that
observe it and cleared after ``clear_polls`` consecutive fresh polls that do not. A poll
counts for a finding (as a hit or a miss) only when it brought new data for the finding's
device, so a fabric with many targets does not count one device's state several times
per interval.

Findings use the vocabulary of recording-format.md (kind, severity, device, port,
priority, role, start, end) plus a one-sentence summary and the evidence numbers.
"""

from __future__ import annotations

import abc
import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, ClassVar

from fabricmon.agent.store import Changes, CounterStore, PortKey
from fabricmon.core.model import Finding
from fabricmon.core.topology import Topology
from fabricmon.core.vocabulary import PriorityMap

SEVERITY_RANK = {"warning": 1, "critical": 2}
# DetectContext.cache key under which the pipeline puts the config's ``fabric:`` section (a
# PriorityMap; fabricmon.agent.pipeline.FABRIC_CACHE_KEY is the same key).
FABRIC_CACHE_KEY = "fabric"
# The fabric layout keys: set once under ``fabric:``. A rule still given one (the layout before
# ``fabric:`` existed) takes it as its own map, which the config has checked against ``fabric:``.
FABRIC_KEYS = ("lossless_priorities", "priority_to_queue", "priority_to_pg")
DEFAULT_FABRIC = PriorityMap()


def _legacy_fabric(params: dict[str, Any]) -> dict[str, Any]:
    """Fabric keys given to one rule, popped from ``params`` and normalised as PriorityMap fields."""
    out: dict[str, Any] = {}
    if "lossless_priorities" in params:
        out["lossless"] = tuple(sorted({int(x) for x in params.pop("lossless_priorities") or ()}))
    for key in ("priority_to_queue", "priority_to_pg"):
        if key in params:
            out[key] = {int(a): int(b) for a, b in (params.pop(key) or {}).items()}
    return out


def fabric_layout(ctx: DetectContext, legacy: dict[str, Any]) -> PriorityMap:
    """The pass's fabric layout (the config's ``fabric:``), with the keys a rule was given itself
    in their place (the config has checked that they agree with ``fabric:``)."""
    base = ctx.cache.get(FABRIC_CACHE_KEY) or DEFAULT_FABRIC
    return dataclasses.replace(base, **legacy) if legacy else base


@dataclass(slots=True)
class Observation:
    kind: str
    severity: str
    device: str
    port: str | None
    priority: int | None = None
    role: str | None = None
    summary: str = ""
    evidence: dict[str, Any] = field(default_factory=dict)
    # Polls needed to raise; None = the rule's default. Device-confirmed events use 1.
    raise_polls: int | None = None

    @property
    def key(self) -> tuple[str, str, str | None, int | None, str | None]:
        return (self.kind, self.device, self.port, self.priority, self.role)


@dataclass(slots=True)
class DetectContext:
    """One detection pass: the store, the topology, and what changed since the last pass.

    ``changes`` (taken from the store when not given) says which counters moved and which
    state gauges changed on which ports: rules start from those sets and from the ports
    they already watch, so a quiet port costs nothing. ``cache`` holds values computed once
    per pass and shared by several rules (the InfiniBand XmitWait fractions, the PFC graph).
    """

    store: CounterStore
    topology: Topology
    t: float  # recording/poll time of this pass
    updated: set[PortKey]  # ports that received data since the previous pass
    updated_devices: set[str]
    changes: Changes | None = None
    cache: dict[Any, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.changes is None:
            self.changes = self.store.take_changes()

    def moved(self, *names: str) -> set[PortKey]:
        """Updated ports where any of the counters ``names`` increased in the last interval."""
        return self.changes.ports(names)  # type: ignore[union-attr]

    def gauge_changed(self, name: str) -> dict[PortKey, float | None]:
        """Port -> previous value, for ports whose state gauge ``name`` changed (None: new)."""
        return self.changes.gauges.get(name, {})  # type: ignore[union-attr]

    def watched(self, *sets: Iterable[PortKey]) -> set[PortKey]:
        """The union of ``sets`` restricted to ports updated in this pass (for ports a rule
        keeps watching: open windows, active states)."""
        upd = self.updated
        out: set[PortKey] = set()
        for s in sets:
            out.update(pk for pk in s if pk in upd)
        return out


@dataclass(slots=True)
class RuleMetric:
    """A gauge a rule exports (a ratio or a state), so alert rules stay thin."""

    name: str  # full metric name, fabricmon_...
    help: str
    labels: tuple[str, ...]
    values: list[tuple[tuple[str, ...], float]]


class Rule(abc.ABC):
    name: ClassVar[str]
    kinds: ClassVar[tuple[str, ...]]
    defaults: ClassVar[dict[str, Any]] = {}
    raise_polls: ClassVar[int] = 2
    clear_polls: ClassVar[int] = 2
    # How the rule uses the detector's per-pass PFC analysis (``rules/_pfc.py``), handed to it
    # as ``self.pfc`` by the detector: "owner" (the PFC rules: their parameters configure it)
    # or "reader" (uses the owners' analysis when one runs, else one with its own parameters).
    pfc_use: ClassVar[str | None] = None

    def __init__(self, params: dict[str, Any] | None = None) -> None:
        params = dict(params or {})
        self.raise_polls = int(params.pop("raise_polls", type(self).raise_polls))
        self.clear_polls = int(params.pop("clear_polls", type(self).clear_polls))
        self.legacy_fabric = _legacy_fabric(params)
        unknown = set(params) - set(self.defaults)
        if unknown:
            raise ValueError(f"rule {self.name}: unknown parameter(s) {', '.join(sorted(unknown))}")
        self.params = {**self.defaults, **params}
        self.pfc: Any = None  # the PFC tracker, set by the Detector for rules with ``pfc_use``

    def fabric(self, ctx: DetectContext) -> PriorityMap:
        """The fabric's lossless priorities and priority -> queue / PG maps for this pass."""
        return fabric_layout(ctx, self.legacy_fabric)

    @abc.abstractmethod
    def evaluate(self, ctx: DetectContext) -> Iterable[Observation]:
        """Observations for this pass. Must not raise on odd data: skip what is missing."""

    def metrics(self) -> Iterable[RuleMetric]:
        return ()


@dataclass(slots=True)
class _Track:
    hits: int = 0
    misses: int = 0
    first_hit: float = 0.0
    first_miss: float | None = None
    finding: Finding | None = None
    rule: Rule | None = None


class Detector:
    """Runs the rules and owns what they share: the PFC analysis, one per PFC parameter set,
    and the PFC state export (``fabricmon_port_pfc_state``, read by ``fabricmon correlate``)
    which stays whichever rules are switched off."""

    def __init__(self, rules: list[Rule]) -> None:
        self._pfc_trackers: dict[tuple, Any] = {}
        self.pfc: Any = None  # the tracker whose states are exported
        self.rules = rules
        self._tracks: dict[tuple, _Track] = {}
        self.finished: list[Finding] = []  # ended findings not yet taken by take_finished()
        self.raised_total: dict[tuple[str, str], int] = {}  # (kind, severity) -> count
        self.errors: dict[str, int] = {}  # rule name -> evaluation failures
        self.last_errors: list[str] = []

    @property
    def rules(self) -> list[Rule]:
        return self._rules

    @rules.setter
    def rules(self, rules: list[Rule]) -> None:
        """Install the rules (start-up and reload) and hand the PFC analysis to those that use it.
        A tracker whose parameters did not change is kept across a reload, with its state."""
        # Imported here: the rule modules import this one.
        from fabricmon.agent.detector.rules._pfc import PfcTracker, pfc_key

        self._rules = list(rules)
        kept: dict[tuple, Any] = {}

        def tracker(rule: Rule | None) -> Any:
            key, params = pfc_key(rule.params if rule is not None else {})
            legacy = rule.legacy_fabric if rule is not None else {}
            key = (*key, repr(legacy))
            tr = kept.get(key) or self._pfc_trackers.get(key) or PfcTracker(params, legacy)
            kept[key] = tr
            return tr

        owners = [r for r in self._rules if r.pfc_use == "owner"]
        for r in owners:
            r.pfc = tracker(r)
        for r in self._rules:
            if r.pfc_use == "reader":
                r.pfc = owners[0].pfc if owners else tracker(r)
        first = next((r.pfc for r in self._rules if r.pfc is not None), None)
        self.pfc = first if first is not None else tracker(None)
        self._pfc_trackers = kept

    def metrics(self) -> Iterable[RuleMetric]:
        """Gauges the detector itself exports (the PFC pause ratio and state)."""
        return self.pfc.metrics()

    @property
    def active(self) -> list[Finding]:
        return [tr.finding for tr in self._tracks.values() if tr.finding is not None]

    def run(self, ctx: DetectContext) -> None:
        seen: dict[tuple, tuple[Observation, Rule]] = {}
        self.last_errors = []
        for rule in self.rules:
            try:
                for ob in rule.evaluate(ctx):
                    prev = seen.get(ob.key)
                    if prev is None or SEVERITY_RANK[ob.severity] > SEVERITY_RANK[prev[0].severity]:
                        seen[ob.key] = (ob, rule)
            except Exception as exc:  # a rule bug must not stop detection or the agent
                self.errors[rule.name] = self.errors.get(rule.name, 0) + 1
                self.last_errors.append(f"rule {rule.name} failed: {type(exc).__name__}: {exc}")
        self.pfc.update(ctx)  # exported PFC state, also when no rule asked for the analysis
        for key, (ob, rule) in seen.items():
            tr = self._tracks.get(key)
            fresh = ob.device in ctx.updated_devices
            if tr is None:
                if not fresh:
                    continue  # counted when a poll brings data for that device
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
                self.raised_total[(ob.kind, ob.severity)] = self.raised_total.get((ob.kind, ob.severity), 0) + 1
            if f is not None:
                if SEVERITY_RANK[ob.severity] > SEVERITY_RANK[f.severity]:
                    f.severity = ob.severity
                    self.raised_total[(ob.kind, ob.severity)] = self.raised_total.get((ob.kind, ob.severity), 0) + 1
                f.summary = ob.summary
                f.evidence = ob.evidence
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

    def take_finished(self) -> list[Finding]:
        """Findings that ended since the last call, in ``Finding.sort_key`` order."""
        out, self.finished = sorted(self.finished, key=lambda f: f.sort_key), []
        return out

    def close_all(self) -> list[Finding]:
        """At the end of a recording: every active finding, still open (end None), in ``Finding.sort_key`` order."""
        return sorted((tr.finding for tr in self._tracks.values() if tr.finding is not None), key=lambda f: f.sort_key)

    def restore(self, findings: Iterable[Finding]) -> None:
        """Re-seed active findings (persisted state) so a restart keeps their start time."""
        by_name = {r.name: r for r in self.rules}
        for f in findings:
            rule = by_name.get(f.rule)
            self._tracks[f.key] = _Track(hits=rule.raise_polls if rule else 1, first_hit=f.start, finding=f, rule=rule)
