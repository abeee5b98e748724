"""The one path every poll takes, live or replayed: record -> parse -> store -> detect.

The scheduler (live) and the replayer (recordings) both hand finished :class:`Poll`s to
:meth:`Pipeline.ingest`; neither knows anything else. A payload that cannot be parsed is
a failed poll of that target, with its reason and message, never an agent crash; the
target's last good data stays in the store, with its age, until it goes stale.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from fabricmon import collectors
from fabricmon.agent.config import DetectorConfig, GlobalConfig, JobsConfig
from fabricmon.agent.detector import DetectContext, Detector, Rule
from fabricmon.agent.exporter.exposition import Family, labels
from fabricmon.agent.gcpause import gc_paused
from fabricmon.agent.identity import Identity, is_guid_label
from fabricmon.agent.jobs.stage import JobStage
from fabricmon.agent.recording import RecordingWriter
from fabricmon.agent.store import CounterStore, PortKey
from fabricmon.core import secrets
from fabricmon.core.guid import norm_guid
from fabricmon.core.model import Counters, Finding, Gauge, Link, ParseResult, Poll, TargetSpec
from fabricmon.core.names import Names
from fabricmon.core.topology import Topology
from fabricmon.core.vocabulary import COUNTERS, GAUGES, NAMESPACE, PriorityMap

if TYPE_CHECKING:
    from fabricmon.agent.exporter.metrics import ExpositionPolicy

log = logging.getLogger(__name__)
# A pipeline built without a config (tests) gets the config model's defaults, as one built from
# an empty config does (agent/assemble.py): the defaults live in the config model only.
_GLOBAL, _DETECTOR = GlobalConfig(), DetectorConfig()


@dataclass
class TargetStatus:
    """What the exporter, /api/targets and the web pages show per target."""

    name: str
    source: str
    polls: int = 0
    up: bool | None = None  # None until the first poll finished
    last_success_t: float | None = None
    last_duration_s: float = 0.0
    errors: dict[str, int] = field(default_factory=dict)  # reason -> count
    last_error: str | None = None
    warnings: list[str] = field(default_factory=list)
    info: dict[str, str] = field(default_factory=dict)  # ParseResult.target_info of the last parse

    def to_json(self, now: float) -> dict[str, Any]:
        """The target as /api/targets shows it; ``age_s`` is the age of its last good data at ``now``."""
        return {"target": self.name, "source": self.source, "up": self.up, "polls": self.polls,
                "last_success": self.last_success_t,
                "age_s": None if self.last_success_t is None else round(now - self.last_success_t, 3),
                "last_error": self.last_error, "errors": self.errors, "warnings": self.warnings}


class TargetStatuses(dict[str, TargetStatus]):
    """Target name -> its :class:`TargetStatus`; yields the per-target metric families."""

    def families(self) -> list[Family]:
        n = NAMESPACE
        up = Family(f"{n}_target_up", "gauge", "1 when the target's last poll succeeded and parsed, 0 when it failed. "
                    "fabricmon polls on its own timer; values are from the last poll.")
        dur = Family(f"{n}_target_poll_duration_seconds", "gauge", "Duration of the target's last poll.")
        last = Family(f"{n}_target_last_success_timestamp_seconds", "gauge", "Start time of the target's last successful poll.")
        polls = Family(f"{n}_target_polls_total", "counter", "Polls of the target that finished (successful or not).")
        errs = Family(f"{n}_target_poll_errors_total", "counter",
                      "Failed polls by reason: timeout, connection, http, auth, tls, command, protocol, size, parse.")
        info = Family(f"{n}_target_info", "info",
                      "Facts the target's last parse reported: the SNMP vendor profile and the match that chose it.")
        for name in sorted(self):
            s = self[name]
            lb = labels((("target", s.name), ("source", s.source)))
            up.add(lb, 1 if s.up else 0)
            dur.add(lb, s.last_duration_s)
            polls.add(lb, s.polls)
            if s.last_success_t is not None:
                last.add(lb, s.last_success_t)
            for reason in sorted(s.errors):
                errs.add(labels((("target", s.name), ("source", s.source), ("reason", reason))), s.errors[reason])
            if s.info:
                info.add(labels((("target", s.name), ("source", s.source), *sorted(s.info.items()))), 1)
        return [up, dur, last, polls, errs, info]


def classify_error(message: str) -> str:
    """Error reason for a failed poll line that did not record one."""
    m = message.lower()
    for reason, words in (("timeout", ("timeout", "timed out")), ("auth", ("401", "403", "auth")),
                          ("tls", ("certificate", "ssl", "tls")), ("connection", ("refused", "reset", "unreachable", "connect")),
                          ("http", ("http",))):
        if any(w in m for w in words):
            return reason
    return "protocol"


class Pipeline:
    """Built by :func:`fabricmon.agent.assemble.build_pipeline` (from a config) everywhere but in tests."""

    def __init__(
        self,
        specs: Iterable[TargetSpec],
        rules: list[Rule],
        *,
        history: int = _GLOBAL.history,
        stale_after: float = _GLOBAL.stale_after,
        static_links: Iterable[Link] = (),
        detect_min_interval: float = _DETECTOR.min_interval,
        recorder: RecordingWriter | None = None,
        on_finding_end: Callable[[Finding], None] | None = None,
        wall_clock: bool = False,
        max_targets: int = 100_000,
        fabric: PriorityMap | None = None,
        exposition_policy: ExpositionPolicy | None = None,
        analyses: Mapping[str, Any] | None = None,
        jobs: JobsConfig | None = None,
        names: Names | None = None,
    ) -> None:
        self.store = CounterStore(history=history, stale_after=stale_after)
        self.identity = Identity()  # GUID -> name, so one device seen through two sources is one device
        self.topology = Topology()
        self.detector = Detector(rules, analyses)  # analyses: the config's detector: {pfc:, ib:} parameters
        self.jobs = JobStage(jobs)  # job inventories and which jobs each finding touches (agent/jobs)
        self._configure(fabric, static_links, detect_min_interval, exposition_policy, names)
        self.specs: dict[str, TargetSpec] = {}
        self.targets = TargetStatuses()
        self.parse_state: dict[str, Any] = {}  # target -> its collector's parse state (Collector.new_state)
        self.set_targets(specs)
        self.recorder = recorder
        self.on_finding_end = on_finding_end
        self.wall_clock = wall_clock  # live: ages against time.time(); replay: against the recording clock
        # Distinct target names polls may create (a recording can name millions; each keeps its
        # status for ever): polls of new targets beyond it are refused and counted.
        self.max_targets = max_targets
        self.refused_targets = 0
        self.clock = 0.0  # latest poll time seen
        self.generation = 0  # bumped by every ingest: the exporter renders when it changes
        self.ended: list[Finding] = []  # recently ended findings, newest last (bounded)
        # Called after every detection pass with (pipeline, t): the web view's history of the
        # ports findings involve (agent/web/signals.py) keeps their whole life from here.
        self.after_detect: list[Callable[[Pipeline, float], None]] = []
        # The agent's external URL (agent/web/ids.external_url): finding URLs in /metrics, the API
        # and the pages are built on it. Set by whoever serves the pipeline; "" builds paths.
        self.external_url = ""
        self._last_detect: float | None = None
        self._pending_ports: set[PortKey] = set()
        self._pending_devices: set[str] = set()
        self._last_expire = 0.0

    def reconfigure(self, rules: list[Rule], *, fabric: PriorityMap | None, static_links: Iterable[Link],
                    detect_min_interval: float, exposition_policy: ExpositionPolicy | None,
                    analyses: Mapping[str, Any] | None = None, jobs: JobsConfig | None = None,
                    names: Names | None = None) -> None:
        """What a config sets (at start, and again on reload): the rules and the analyses'
        parameters, the fabric layout, static links, detection coalescing, the export policy and
        the job view's settings."""
        self.detector.configure(rules, analyses)
        self.jobs.configure(jobs)
        self._configure(fabric, static_links, detect_min_interval, exposition_policy, names)

    def _configure(self, fabric: PriorityMap | None, static_links: Iterable[Link], detect_min_interval: float,
                   exposition_policy: ExpositionPolicy | None, names: Names | None) -> None:
        self.names = names or Names()  # config ``names:``: node names and places no source gives (the fabric view)
        self.fabric = fabric or PriorityMap()  # config ``fabric:``: lossless priorities and maps
        self.topology.set_static(static_links)
        self.detect_min_interval = detect_min_interval
        # Export levels and shard (the live agent sets it from the config, and again on reload);
        # None: everything in full, no shard info (replay, tests).
        self.exposition_policy = exposition_policy

    def families(self) -> list[Family]:
        """The pipeline's own counter: polls it refused by its target limit."""
        refused = Family(f"{NAMESPACE}_refused_targets_total", "counter",
                         "Polls refused because a new target would exceed the pipeline's target limit.")
        refused.add("", self.refused_targets)
        return [refused]

    # ------------------------------------------------------------------ targets
    def set_targets(self, specs: Iterable[TargetSpec]) -> None:
        """Install the target list (start-up and reload). Known targets keep their status."""
        new = {s.name: s for s in specs}
        for name in list(self.targets):
            if name not in new:
                del self.targets[name]
                self.parse_state.pop(name, None)  # a target's parse state goes with it
                self.topology.drop_target(name)
                self.jobs.drop_target(name)
        for name, spec in new.items():
            old = self.specs.get(name)
            if old is None or old.source != spec.source:
                self.targets[name] = TargetStatus(name=name, source=spec.source)
                self.parse_state.pop(name, None)  # another source's state does not fit
        self.specs = new

    def now(self) -> float:
        return time.time() if self.wall_clock else self.clock

    @property
    def ready(self) -> bool:
        """One poll cycle done: every target finished at least one poll."""
        return bool(self.targets) and all(s.polls > 0 for s in self.targets.values())

    # ------------------------------------------------------------------ ingest
    def ingest(self, poll: Poll) -> bool:
        """Take one finished poll; True when its data reached the store."""
        if self.recorder is not None:
            try:
                self.recorder.write_poll(poll)
            except OSError as exc:
                log.error("recording: cannot write poll of %s: %s", poll.target, exc)
        spec = self.specs.get(poll.target)
        if spec is None:
            if len(self.specs) >= self.max_targets:
                self.refused_targets += 1
                if self.refused_targets == 1:
                    log.warning("refusing polls of new targets beyond the limit of %d (first: %.80r)", self.max_targets, poll.target)
                return False
            spec = self.specs[poll.target] = TargetSpec(name=poll.target, source=poll.source)
        status = self.targets.get(poll.target)
        if status is None:
            status = self.targets[poll.target] = TargetStatus(name=poll.target, source=poll.source)
        status.polls += 1
        status.last_duration_s = poll.duration_s
        self.clock = max(self.clock, poll.t)
        if poll.ok:
            self._parse_into_store(poll, spec, status)
        else:
            self._fail(status, poll.reason or classify_error(poll.error or ""), poll.error or "unknown error")
        self.generation += 1
        self._maybe_detect(poll.t)
        if poll.t - self._last_expire >= max(self.store.stale_after / 4, 1.0):
            self._last_expire = poll.t
            self.store.expire(poll.t)
        return status.up is True

    def _fail(self, status: TargetStatus, reason: str, message: str) -> None:
        status.up = False
        status.errors[reason] = status.errors.get(reason, 0) + 1
        status.last_error = message = secrets.redact(message)  # an echoed credential never reaches the API or /
        log.warning("target %s (%s): %s", status.name, status.source, message)

    def _parse_into_store(self, poll: Poll, spec: TargetSpec, status: TargetStatus) -> None:
        try:
            cls = collectors.get(spec.source)
        except collectors.UnknownSource:
            self._fail(status, collectors.ErrorReason.PARSE, f"no collector for source {spec.source!r} in this installation")
            return
        except Exception as exc:  # a broken collector module must not take the agent down
            self._fail(status, collectors.ErrorReason.PARSE, f"the {spec.source} collector cannot be loaded: {type(exc).__name__}: {exc}")
            return
        with gc_paused():  # no cycles built here: see agent/gcpause.py
            self._parse_and_store(cls, poll, spec, status)

    def _parse_and_store(self, cls: Any, poll: Poll, spec: TargetSpec, status: TargetStatus) -> None:
        try:
            state = self.parse_state[poll.target] if poll.target in self.parse_state else cls.new_state()
            result, self.parse_state[poll.target] = cls.parse_poll(poll.payload or {}, spec, state)
        except collectors.ParseError as exc:
            self._fail(status, collectors.ErrorReason.PARSE, f"cannot parse {spec.source} payload: {exc}")
            return
        except Exception as exc:  # a parser bug: report it like bad input, never crash the agent
            log.exception("parser for %s crashed on target %s", spec.source, poll.target)
            self._fail(status, collectors.ErrorReason.PARSE, f"internal error in the {spec.source} parser: {type(exc).__name__}: {exc}")
            return
        self.store_result(poll.target, poll.t, result)
        status.up = True
        status.last_success_t = poll.t
        new = [w for w in result.warnings[:20] if w not in status.warnings]
        for w in new[:5]:  # log a warning when it first appears, not on every poll
            log.info("target %s: %s", poll.target, w)
        status.warnings = result.warnings[:20]
        status.info = dict(result.target_info)

    def store_result(self, target: str, t: float, result: ParseResult) -> None:
        """One parsed poll of ``target`` into the store and the topology; its ports and devices
        are then pending for the next detection pass."""
        _normalize_sub(result.counters, result.gauges)
        self._join_guids(result)
        store = self.store
        store.set_devices(result.devices, target=target)
        store.set_port_info(result.ports, t, target)
        touched = store.update_columns(result.counters.columns(target, result.clocks, result.gauges), t)
        if result.links is not None:
            self.topology.set_links(target, result.links)
        if result.inventory is not None:
            self.jobs.set_inventory(target, t, result.inventory)
        self._pending_ports |= touched
        self._pending_devices.update(self._fresh_devices(result, touched))

    def _fresh_devices(self, result: ParseResult, touched: set[PortKey]) -> set[str]:
        """The devices this result brings fresh evidence for (the detector's hysteresis counts a
        hit or a miss only on those): counter readings or a device clock. A device the result
        touched only with gauges or port facts (UFM REST's states and link rates, while UFM
        Telemetry reads its counters) is fresh only when no source reads counters on it: else a
        gauge poll between two counter polls would count the same counter interval twice. A
        change of a state gauge makes its device fresh at detection (:meth:`detect`)."""
        fresh = {d for d, _ in result.counters.ports}
        fresh.update(result.clocks)
        ports = self.store.ports
        with_counters = {d for d, p in touched if d not in fresh and (e := ports.get((d, p))) is not None and e.series_count()}
        fresh.update(d for d, _ in touched if d not in with_counters)
        return fresh

    def _join_guids(self, result: ParseResult) -> None:
        """GUID-labelled devices of ``result`` renamed to the names other sources bound to their
        GUIDs (agent/identity.py). A new binding also renames what the store holds under a GUID
        label: those ports are dropped (their readings go on under the name; one interval lost)."""
        if self.identity.learn(result):
            store = self.store
            labels: dict[str, dict[str, str]] = {}
            for (d, p), e in store.ports.items():
                if is_guid_label(d):
                    labels.setdefault(d, {})[p] = norm_guid(e.info.guid) if e.info is not None and e.info.guid else ""
            joined = [d for d, ports in labels.items() if self.identity.name(d, ports) is not None]
            if joined:
                store.forget(joined)
                log.info("joined %d device(s) labelled by GUID to their names", len(joined))
        renamed = self.identity.resolve(result)
        if renamed and result.ports:
            # A port the naming source already described keeps that description (LID, split label).
            ports = self.store.ports
            result.ports = [p for p in result.ports if not (p.device in renamed.values() and (e := ports.get((p.device, p.port)))
                                                             is not None and e.info is not None)]

    def _maybe_detect(self, t: float) -> None:
        if self._last_detect is not None and t - self._last_detect < self.detect_min_interval:
            return
        self.detect(t)

    def detect(self, t: float) -> None:
        """One detection pass over what changed since the previous pass."""
        self._last_detect = t
        changes = self.store.take_changes()
        self._pending_devices.update(d for by_port in changes.gauges.values() for d, _ in by_port)  # a state changed
        ctx = DetectContext(store=self.store, topology=self.topology, t=t, updated=self._pending_ports,
                            updated_devices=self._pending_devices, changes=changes, fabric=self.fabric)  # the one fabric layout
        self._pending_ports = set()
        self._pending_devices = set()
        self.detector.run(ctx)
        for err in self.detector.last_errors:
            log.error("%s", err)
        for f in self.detector.take_finished():
            self.ended.append(f)
            if self.on_finding_end is not None:
                self.on_finding_end(f)
        if len(self.ended) > 500:
            del self.ended[: len(self.ended) - 500]
        self.jobs.annotate(self.detector.active, self.ended, self.store, self.topology, t, lambda: self.ready)
        for observe in self.after_detect:
            observe(self, t)

    def findings(self) -> list[Finding]:
        """Active findings in ``Finding.sort_key`` order (start time, kind, device, port, priority)."""
        return sorted(self.detector.active, key=lambda f: f.sort_key)


_NUMERIC_LABELS = frozenset({"priority", "queue", "pg"})
_NUMERIC_POS = {name: tuple(i for i, lb in enumerate(d.labels) if lb in _NUMERIC_LABELS)
                for name, d in [*COUNTERS.items(), *GAUGES.items()]}


def _normalize_sub(counters: Counters, gauges: list[Gauge]) -> None:
    """Priority and queue label values are ints whenever they are numeric, whichever
    collector produced them ("3" from an SNMP index or a JSON key, 3 from a table), so the
    detector finds a queue's counters under one key."""
    counters.relabel(key=lambda name, sub: (name, _numeric_sub(name, sub)))
    for g in gauges:
        if g.sub:
            g.sub = _numeric_sub(g.name, g.sub)


def _numeric_sub(name: str, sub: tuple[Any, ...]) -> tuple[Any, ...]:
    pos = _NUMERIC_POS.get(name) if sub else None
    if not pos:
        return sub
    out = list(sub)
    for i in pos:
        v = out[i] if i < len(out) else None
        if isinstance(v, str) and v.isascii() and v.isdigit():
            out[i] = int(v)
    return tuple(out)
