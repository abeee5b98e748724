"""The detector's building blocks: observations, the pass context, analyses, rules, parameters.

A detection pass has two stages. **Analyses** (``agent/detector/analyses/``) compute the
facts several rules share, once per pass, from the store's change set: the PFC state and
pause trees, the InfiniBand waits and credit-loop incidents, the fabric's layout. **Rules**
(``agent/detector/rules/``) read the analyses they declare in ``needs`` and the store's read
API, never another rule, and yield :class:`Observation`s. The detector
(:class:`fabricmon.agent.detector.Detector`) runs both stages and turns observations into
findings.

Parameters are pydantic models (:class:`Params`): typed, with ranges and units; durations take
``10s``/``5m`` like the rest of the config. A rule's live under ``rules: {<name>: ...}``, an
analysis's under ``detector: {<name>: ...}``.
"""

from __future__ import annotations

import abc
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any, ClassVar, TypeVar

from pydantic import BaseModel, ConfigDict, Field

from fabricmon.agent.store import Changes, CounterStore, PortKey
from fabricmon.core.durations import bounded
from fabricmon.core.topology import Topology
from fabricmon.core.vocabulary import PriorityMap

SEVERITY_RANK = {"warning": 1, "critical": 2}
DAY = 86400.0
# A share of time or of line rate, 0..1.
Fraction = Annotated[float, Field(ge=0.0, le=1.0, allow_inf_nan=False)]
# Seconds, written as the rest of the config writes durations (10s, 5m, 250ms): the one duration
# type (fabricmon.core.durations); a window longer than a day is not a detection window.
Seconds = bounded(0.0, DAY, "a detection window longer than a day is not a detection window")


class Params(BaseModel):
    """Parameters of an analysis or a rule: unknown keys are errors, values are typed."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class RuleParams(Params):
    """What every rule takes besides its thresholds. ``raise_polls``/``clear_polls``: None is
    the rule's own default (its class attributes)."""

    enabled: bool = True
    raise_polls: int | None = Field(None, ge=1, le=1000)
    clear_polls: int | None = Field(None, ge=1, le=1000)


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


A = TypeVar("A", bound="Analysis")


@dataclass(slots=True)
class DetectContext:
    """One detection pass: the store, the topology, and what changed since the last pass.

    ``changes`` (taken from the store when not given) says which counters moved and which
    state gauges changed on which ports: analyses and rules start from those sets and from the
    ports they already watch, so a quiet port costs nothing. ``fabric`` is the config's
    ``fabric:`` layout (lossless priorities, queue and PG maps): rules read it through the
    ``fabric`` analysis. ``analyses`` holds the pass's analyses a rule declared in ``needs``
    (the detector fills it); :meth:`analysis` hands one out by class.
    """

    store: CounterStore
    topology: Topology
    t: float  # recording/poll time of this pass
    updated: set[PortKey]  # ports that received data since the previous pass
    updated_devices: set[str]
    changes: Changes | None = None
    fabric: PriorityMap = field(default_factory=PriorityMap)
    analyses: Mapping[str, Analysis] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.changes is None:
            self.changes = self.store.take_changes()

    def analysis(self, kind: type[A]) -> A:
        """This pass's analysis of class ``kind``; a rule gets only those it names in ``needs``."""
        got = self.analyses.get(kind.name)
        if not isinstance(got, kind):
            raise LookupError(f"analysis {kind.name!r} is not available here: name it in the rule's needs")
        return got

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
            out |= upd.intersection(s)
        return out


@dataclass(slots=True)
class ExportedGauge:
    """A family an analysis or a rule exports (a ratio or a state; or a counter it keeps, such
    as the drops no evidence placed), so alert rules stay thin."""

    name: str  # full metric name, fabricmon_... (a counter's ends in _total)
    help: str
    labels: tuple[str, ...]
    values: list[tuple[tuple[str, ...], float]]
    type: str = "gauge"  # gauge | counter


class Analysis(abc.ABC):
    """A named fact computed once per pass, before the rules, from the store's change set.

    ``update`` runs every pass whatever rules are on, so an analysis's state (windows, what it
    last saw) never depends on which rules read it or in which order. ``needs``: analyses it
    reads (listed before it in the registry). It exports its own gauges (:meth:`metrics`).
    """

    name: ClassVar[str]
    Params: ClassVar[type[Params]] = Params
    needs: ClassVar[tuple[str, ...]] = ()

    def __init__(self, params: Params | None = None) -> None:
        self.params = params if params is not None else type(self).Params()

    @abc.abstractmethod
    def update(self, ctx: DetectContext) -> None:
        """Bring the analysis up to date with this pass. Must not raise on odd data."""

    def metrics(self) -> Iterable[ExportedGauge]:
        return ()


class Rule(abc.ABC):
    """A plugin that turns analyses and the store into observations.

    A rule declares the analyses it reads (``needs``, names from the analyses registry) and its
    parameters (``Params``, a :class:`RuleParams` model); it gets ``self.params`` typed.
    """

    name: ClassVar[str]
    kinds: ClassVar[tuple[str, ...]]
    needs: ClassVar[tuple[str, ...]] = ()
    Params: ClassVar[type[RuleParams]] = RuleParams
    raise_polls: ClassVar[int] = 2
    clear_polls: ClassVar[int] = 2

    def __init__(self, params: RuleParams | Mapping[str, Any] | None = None) -> None:
        cls = type(self)
        p = params if isinstance(params, cls.Params) else cls.Params.model_validate(dict(params or {}))
        self.params: Any = p  # the rule's own Params subclass
        self.raise_polls = p.raise_polls or cls.raise_polls  # type: ignore[misc]
        self.clear_polls = p.clear_polls or cls.clear_polls  # type: ignore[misc]

    @abc.abstractmethod
    def evaluate(self, ctx: DetectContext) -> Iterable[Observation]:
        """Observations for this pass. Must not raise on odd data: skip what is missing."""

    def metrics(self) -> Iterable[ExportedGauge]:
        return ()
