"""pfc: PFC state per port and priority, the paused-by graph, storm trees, deadlocks, coverage.

Read by ``pfc_storm`` (trees), ``pfc_deadlock`` (cycles) and ``congestion`` (which pause a
storm or deadlock accounts for). The per-port classification is :mod:`.pfc_state`; this
module relates the classified ports.

**Paused-by graph** (per priority; built by :mod:`fabricmon.agent.detector.pausegraph`,
the same code ``fabricmon correlate`` uses). Nodes are paused ports. A port
``e`` is paused by its cable peer ``peer(e)``; that ingress sends pause because some egress
of the same switch cannot drain, so ``e -> e2`` for every paused port ``e2`` on
``peer(e)``'s device (``e2 != peer(e)``: no hairpin) with a backlog (occupancy, drops or a
watchdog event). This over-approximates which egress blocks which ingress (per-ingress
buffer counters would refine it). A port is also inferred paused when its peer reports
sending pause. Only ports with pause activity enter the graph, and only ports whose PFC
counters moved (or that are still active) are looked at, so a quiet fabric costs nothing.

**Origin**: a sink of the graph, i.e. a paused port whose pauser is itself not blocked
downstream, and not paused itself: an origin pauses without being paused (a sink whose pauser is
a paused port waits on something further on, a deadlock forming or a storm elsewhere, and the
ports behind it count as blocked). The direction of the edge comes from both ends' counters:
the pauser's transmit side (pause sent) and the sink's receive side (pause received), with the
pauser's own transmit to say it still sends (``pfc_storm``'s ``pause_edge``). The pauser is
reported as the origin when it is polled (a monitored host NIC, or a switch port whose stuck
backpressure keeps its peer paused: then the egress it holds is a victim); otherwise the
paused switch port facing it is (the switch side of an unmonitored host, or a port whose peer
is unknown while the fabric has a topology). A host NIC is also an origin by its own counters
alone (:func:`.pfc_state.nic_stall`: pause sent all the time, next to nothing drained).
Candidates are ranked by the pauser's confirmed NIC storm events, then tx pause fraction
(or the paused side's rx fraction), then frame rate. Stormed ports are grouped under the
best-ranked sink they reach: one tree per origin. A tree is reported when a member is stuck
or the sink is held all the interval (frames only: no per-queue counter says more).

**Coverage**: a reported tree covers every port with pause on its priority whose paused-by
path leads into it, at any grade (:meth:`PfcAnalysis._cover`); without a topology, the
paused ports nobody knows a cable for, when one storm is in view on that priority
(:meth:`PfcAnalysis._cover_unplaced`). :meth:`PfcResult.claimed` hands all of it to
``congestion`` as the storm's pause.

**Deadlock**: judged once over every port paused in the pass, before any is called a storm:
SCCs of size >= 2 (hairpins count) of paused ports with a backlog, at least one stuck or
watchdog-fired now or within ``deadlock_window``, that cannot drain (:meth:`PfcAnalysis._phase`:
every member stuck; the others stuck within the window, a deadlock the watchdogs keep breaking
that re-forms; or the poll cycle it forms in). Storm trees exclude deadlock members and the
ports blocked only behind a deadlock.

**Watchdogs** (:mod:`.pfc_watchdog`): each switch PFC watchdog is cross-checked against its
port's own counters (``result.watchdogs``); an event the counters contradict is no storm
evidence.

Exports ``fabricmon_port_pause_ratio{device,port,priority}`` (the rx pause fraction of the
last interval, 0..1) and ``fabricmon_port_pfc_state{device,port,priority}`` (1 paused by its
peer, 2 stuck: storm level), whichever rules are on: ``fabricmon correlate`` joins the state
across shards, and it works for vendors that count pause frames only too.

On columns: :meth:`PfcAnalysis._refresh` screens each priority of the moved ports in
whole-array passes (:func:`.pfc_state.screen`); only a row that may be paused, send pause, be
stuck or held or concern a watchdog is classified one by one, and a partly paused row is kept
as a key whose state is computed when a storm's coverage asks for it. The graph stages below
start from the classified rows.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import compress
from typing import Any

import numpy as np

from fabricmon.agent.detector.analyses.fabric import FabricAnalysis, FabricShape
from fabricmon.agent.detector.analyses.pfc_state import (
    NIC_ERR,
    NIC_WARN,
    PFC_NAMES,
    NicStall,
    PfcParams,
    PfcState,
    Screen,
    compute_state,
    keep_rate,
    nic_stall,
    screen,
    truthy,
)
from fabricmon.agent.detector.analyses.pfc_watchdog import Verdict, WatchdogEpisodes, verdict
from fabricmon.agent.detector.base import Analysis, DetectContext, ExportedGauge
from fabricmon.agent.detector.common import RatioGauge, SubIndex
from fabricmon.agent.detector.pausegraph import PausedBy, best_sinks, deadlock_cycles
from fabricmon.agent.store import CounterStore, PortColumns, PortKey
from fabricmon.core.topology import Topology
from fabricmon.core.vocabulary import PriorityMap


@dataclass(slots=True)
class Tree:
    prio: int | None
    origin: PortKey
    origin_peer: PortKey | None  # the port on the other end of the origin's cable
    origin_state: PfcState | None
    victims: list[PfcState] = field(default_factory=list)
    nic: str | None = None  # "error" | "warning": the NIC's storm counters; "stalled": its own pause and drain
    peer_state: PfcState | None = None  # the origin's cable peer when it is stormed (the origin's own evidence)
    confirmed: bool = False  # a member is stuck or watchdog-fired, not only held
    # Ports the storm reaches that are no victim finding: partly paused, or not polled (a host
    # its switch port keeps pausing). Evidence of the origin, and the storm's pause.
    covered: list[PfcState] = field(default_factory=list)
    seen: list[float] = field(default_factory=list)  # poll times of the data the tree rests on
    dt: float | None = None
    pauser_polled: bool = False  # the device that sends the pause is polled (the origin is its port)
    stall: NicStall | None = None  # a NIC storm told by the NIC's own pause and drain counters

    @property
    def mixed(self) -> bool:
        """The tree rests on data from two poll cycles (targets are polled one after another:
        a neighbour's reading may still be from its previous poll). Its shape is then
        provisional until the next poll of each device confirms it."""
        return bool(self.seen) and self.dt is not None and max(self.seen) - min(self.seen) > 0.5 * self.dt


@dataclass(slots=True)
class Deadlock:
    prio: int
    members: list[PfcState]
    watchdog: bool  # every member's watchdog fired: the cycle was broken by it
    cycling: bool = False  # a member is in a recovered phase now (stuck within the window, paused now)
    forming: bool = False  # the cycle closed during this interval: members paused, not all of them stuck yet
    blocked_behind: int = 0
    # Ports whose paused-by path leads into the cycle, at any grade, and endpoints the agent
    # does not poll that their switch port keeps pausing: the deadlock's pause, not congestion.
    covered: list[PfcState] = field(default_factory=list)


@dataclass(slots=True)
class PfcResult:
    """What one pass found: storm trees, stormed ports no tree explains, deadlocks."""

    trees: list[Tree] = field(default_factory=list)
    unattributed: list[PfcState] = field(default_factory=list)
    deadlocks: list[Deadlock] = field(default_factory=list)
    watchdogs: list[Verdict] = field(default_factory=list)  # watchdogs their ports' counters contradict
    _claimed: set[tuple[PortKey, int | None]] | None = None

    def claimed(self) -> set[tuple[PortKey, int | None]]:
        """(port, priority) pairs a storm tree (origin, its cable peer, victims, covered ports)
        or a deadlock accounts for in this pass, so the same pause is not reported twice (a
        stuck port is not also "chronically paused")."""
        if self._claimed is None:
            out: set[tuple[PortKey, int | None]] = set()
            for t in self.trees:
                out.add((t.origin, t.prio))
                if t.origin_peer is not None:
                    out.add((t.origin_peer, t.prio))
                out.update((v.pk, v.prio) for v in t.victims)
                out.update((c.pk, c.prio) for c in t.covered)
            out.update((st.pk, st.prio) for st in self.unattributed)
            for d in self.deadlocks:
                out.update((m.pk, m.prio) for m in (*d.members, *d.covered))
            self._claimed = out
        return self._claimed


@dataclass(slots=True)
class _Pass:
    """One priority's graph in one pass: its paused ports and what the stages found."""

    prio: int
    nodes: dict[PortKey, PfcState]
    graph: PausedBy
    deadlocks: list[Deadlock] = field(default_factory=list)
    in_deadlock: set[PortKey] = field(default_factory=set)


class PfcAnalysis(Analysis):
    """Incremental per-(port, priority) PFC state, updated from each pass's updated ports, and
    the pass's trees and deadlocks (:attr:`result`)."""

    name = "pfc"
    Params = PfcParams
    needs = ("fabric",)

    def __init__(self, params: PfcParams | None = None) -> None:
        super().__init__(params)
        self.p: PfcParams = self.params  # type: ignore[assignment]
        self.fabric = PriorityMap()  # the layout of the last pass (queue per priority)
        self.qmap: dict[int, int] = {}
        self.index = SubIndex(PFC_NAMES)
        self.states: dict[PortKey, dict[int, PfcState]] = {}  # the rows classified one by one, with pause activity
        # Light rows (partly paused only, :func:`.pfc_state.screen`) as keys; their states are
        # computed when asked for (:meth:`_state`), once per pass.
        self.light: dict[Any, set[PortKey]] = {}  # priority -> its light ports
        self._lazy: dict[tuple[PortKey, Any], PfcState] = {}
        self._store = CounterStore()
        self._layout = -1
        self.nic: dict[PortKey, str] = {}  # port -> "error" | "warning" | "stalled" in its last interval
        self.stalls: dict[PortKey, NicStall] = {}  # the "stalled" NICs' numbers
        self.shape: FabricShape | None = None  # the fabric analysis's: hosts, cable peers by store names
        self.episodes = WatchdogEpisodes()
        self.frozen: set[tuple[PortKey, int]] = set()  # watchdogs holding a storm they never counted
        self._wd_prev: dict[PortKey, float | None] = {}
        self.blocked_t: dict[tuple[PortKey, int], float] = {}  # (port, priority) -> last time stuck or watchdog-fired
        self.victim_t: dict[tuple[PortKey, int], float] = {}  # (port, priority) -> last time a majority-paused victim
        self.forming: dict[frozenset[PortKey], float] = {}  # a cycle -> when it was first seen forming
        # Ports with PFC activity still in view (a state, a watchdog event within the history,
        # a non-zero ratio to bring to 0): visited on every update until they are quiet.
        self.watch: set[PortKey] = set()
        self.pause_ratio = RatioGauge(
            "fabricmon_port_pause_ratio", "Share of the last interval the port's transmitter was paused by PFC, per priority.",
            ("device", "port", "priority"),
        )
        # The classification itself, whatever counters the vendor has (pause time, or frames
        # only): what `fabricmon correlate` joins across shards.
        self.pfc_state = RatioGauge(
            "fabricmon_port_pfc_state",
            "PFC state of a port and priority in the last interval: 1 paused by its peer, 2 stuck (storm level: paused "
            "with no transmit progress, or a watchdog event).",
            ("device", "port", "priority"),
        )
        self.result = PfcResult()
        self._topo = Topology()

    def update(self, ctx: DetectContext) -> None:
        fabric = ctx.analysis(FabricAnalysis)
        self.fabric = fabric.layout
        self.shape = fabric.shape
        self.qmap = dict(self.fabric.priority_to_queue)
        self._topo = ctx.topology
        self._refresh(ctx)
        self.result = self._analyze(ctx)

    def peer(self, pk: PortKey) -> PortKey | None:
        """The cable peer of a port by the store's names (:meth:`FabricShape.peer`)."""
        return self.shape.peer(pk) if self.shape is not None else self._topo.peer(*pk)

    def _host_by_shape(self, device: str) -> bool:
        """The fabric analysis's one host rule (``FabricShape.is_host``), False before a shape is known."""
        return self.shape is not None and self.shape.is_host(device)

    def metrics(self) -> tuple[ExportedGauge, ExportedGauge]:
        return (self.pause_ratio.metric(), self.pfc_state.metric())

    # ------------------------------------------------------------------ per port and priority
    def _refresh(self, ctx: DetectContext) -> None:
        """Re-classify the ports whose PFC counters moved (or that are still watched): each
        priority screened in whole-array passes (:func:`.pfc_state.screen`), then one by one
        only the rows that may be paused, send pause, be stuck or held or concern a watchdog."""
        store = ctx.store
        ports = store.ports
        watch = self.watch
        candidates = ctx.moved(*PFC_NAMES, "pfc_rx_pause_transitions", NIC_ERR[0], NIC_WARN[0])
        self._wd_prev = ctx.gauge_changed("pfc_watchdog_stormed")
        candidates.update(self._wd_prev)
        candidates |= ctx.watched(watch)
        watch.difference_update(candidates)
        self._store, self._lazy = store, {}
        if candidates:
            cand = list(candidates)  # (a port that left the store reads as having no series)
            self._classify(store.columns(cand), cand)
        for pk in [pk for pk in self.states if pk not in ports]:
            del self.states[pk]
        if store.layout != self._layout:
            for prio, pks in self.light.items():
                self.light[prio] = {pk for pk in pks if pk in ports}
        self._layout = store.layout
        for pk in [pk for pk in self.nic if pk not in ports]:
            del self.nic[pk]
            self.stalls.pop(pk, None)
        live = {(pk, prio) for pk, by in self.states.items() for prio in by}
        self.episodes.forget(live)  # (a light row holds no stormed watchdog: none of its episodes is open)
        self.frozen &= live
        if len(watch) > len(ports):
            watch.intersection_update(ports)
        self.index.forget_missing(ports)

    def _classify(self, cols: PortColumns, cand: list[PortKey]) -> None:
        """Classify every PFC row of the ``cand`` ports: NIC levels, then each priority's rows."""
        n = len(cand)
        keep_fps = keep_rate(cols)
        wd_changed = np.fromiter((pk in self._wd_prev for pk in cand), bool, n) if self._wd_prev else np.zeros(n, bool)
        screens = [(prio, screen(cols, prio, self.p, keep_fps, wd_changed)) for prio in sorted(cols.subs(PFC_NAMES), key=str)]
        has_pfc = np.zeros(n, bool)
        for _, sc in screens:
            has_pfc |= sc.has
        self._nic_levels(cols, cand, has_pfc, screens)
        refreshed = list(compress(cand, has_pfc.tolist()))
        if self.states:
            for pk in refreshed:
                self.states.pop(pk, None)
        if self.light:
            gone = set(refreshed)
            for pks in self.light.values():
                pks -= gone
        self._quiet(cand, screens)
        self._one_by_one(cand, screens)
        for prio, sc in screens:
            self._light_rows(cand, prio, sc)

    def _nic_levels(self, cols: PortColumns, cand: list[PortKey], has_pfc: np.ndarray, screens: list[tuple[Any, Screen]]) -> None:
        """A host NIC's pause storm in its last interval: its storm counters' "error" or
        "warning" event, or "stalled" by its own pause and drain counters (:func:`nic_stall`,
        asked only where a priority sent pause at the storm level)."""
        err, warn = (cols.counter(*key) for key in (NIC_ERR, NIC_WARN))
        relevant = has_pfc | ~np.isnan(err.poll_t) | ~np.isnan(warn.poll_t)
        err_moved, warn_moved = truthy(err.delta), truthy(warn.delta)
        storm = np.zeros(len(cand), bool)
        with np.errstate(invalid="ignore"):
            for prio, sc in screens:
                if isinstance(prio, int):
                    storm |= sc.tx_bound >= self.p.storm_pause_fraction
        if self.nic or self.stalls:
            seen = set(compress(cand, relevant.tolist()))
            for got in (self.nic, self.stalls):
                for pk in [pk for pk in got if pk in seen]:
                    del got[pk]
        for i in np.flatnonzero(relevant & (err_moved | warn_moved | storm)).tolist():
            pk = cand[i]
            if err_moved[i]:
                self.nic[pk] = "error"
            elif warn_moved[i]:
                self.nic[pk] = "warning"
            elif self._host_by_shape(pk[0]) and (stall := self._stall(pk)) is not None:
                self.nic[pk] = "stalled"
                self.stalls[pk] = stall
            else:
                continue
            self.watch.add(pk)

    def _stall(self, pk: PortKey) -> NicStall | None:
        entry = self._store.ports[pk]
        return nic_stall(entry, self.index.subs(pk, entry), self.p)

    def _quiet(self, cand: list[PortKey], screens: list[tuple[Any, Screen]]) -> None:
        """Rows with PFC series and no activity: a ratio or state still exported is set to 0
        (exported as 0 once, removed on the next update, while the port stays watched)."""
        keys = {*self.pause_ratio.values, *self.pfc_state.values}
        if not keys:
            return
        at = dict(zip(cand, range(len(cand)), strict=True))
        quiet = {str(prio): sc.has & ~sc.active for prio, sc in screens}
        for key in keys:
            i = at.get((key[0], key[1]))
            q = quiet.get(key[2])
            if i is None or q is None or not q[i]:
                continue
            self.pause_ratio.set(key, 0.0)
            self.pfc_state.set(key, 0.0)
            if key in self.pause_ratio.values or key in self.pfc_state.values:
                self.watch.add((key[0], key[1]))

    def _one_by_one(self, cand: list[PortKey], screens: list[tuple[Any, Screen]]) -> None:
        """The active rows that are not light, classified by :func:`compute_state` port by port
        (priorities in order within a port, as the graph stages expect the states' order)."""
        ports = self._store.ports
        rows = sorted((i, k) for k, (_, sc) in enumerate(screens) for i in np.flatnonzero(sc.active & ~sc.light).tolist())
        for i, k in rows:
            pk, prio = cand[i], screens[k][0]
            self.watch.add(pk)
            st = compute_state(pk, ports[pk], prio, self.p, self.qmap)
            key = (pk, prio)
            if self.episodes.frozen(st, self._wd_prev.get(pk), pk in self._wd_prev):
                self.frozen.add(key)
            else:
                self.frozen.discard(key)
            rkey = (pk[0], pk[1], str(prio))
            self.pause_ratio.set(rkey, st.rx_frac)
            self.pfc_state.set(rkey, 2.0 if st.stormed else 1.0 if st.paused else 0.0)
            if st.active:
                self.states.setdefault(pk, {})[prio] = st  # partial pause too: a storm may reach it (Tree.covered)

    def _light_rows(self, cand: list[PortKey], prio: Any, sc: Screen) -> None:
        """One priority's light rows in bulk: exported (their rx pause fraction, state 0),
        watched, and kept as keys when partly paused."""
        rows = np.flatnonzero(sc.light)
        if not len(rows):
            return
        pks = [cand[i] for i in rows.tolist()]
        self.watch.update(pks)
        label = str(prio)
        rkeys = [(d, pt, label) for d, pt in pks]
        self.pause_ratio.set_many(rkeys, sc.rx_frac[rows])
        self.pfc_state.set_many(rkeys, np.zeros(len(rkeys)))
        self.light.setdefault(prio, set()).update(compress(pks, sc.kept[rows].tolist()))

    def _state(self, pk: PortKey, prio: Any) -> PfcState | None:
        """The kept state of a port and priority: a classified one, or a light row's, computed
        now from the store (which holds the data it was screened on until the port's next
        update, and that update screens it again)."""
        by = self.states.get(pk)
        st = by.get(prio) if by is not None else None
        if st is None and pk in self.light.get(prio, ()):
            st = self._lazy.get((pk, prio))
            if st is None:
                st = self._lazy[(pk, prio)] = compute_state(pk, self._store.ports[pk], prio, self.p, self.qmap)
        return st

    def _with_prio(self, prio: int) -> list[PfcState]:
        """Every kept state of ``prio``: the classified ones, then the light ones in port order."""
        out = [st for by in self.states.values() if (st := by.get(prio)) is not None]
        out += [self._state(pk, prio) for pk in sorted(self.light.get(prio, ()))]  # type: ignore[misc]
        return out

    # ------------------------------------------------------------------ the graph
    def _nic_prio(self, pk: PortKey) -> int | None:
        best = None
        entry = self._store.ports.get(pk)
        for prio in self.index.subs(pk, entry) if entry is not None else ():
            st = self._state(pk, prio)
            if st is None:
                continue
            score = (st.tx_frac or 0.0, st.tx_fps or 0.0)
            if best is None or score > best[0]:
                best = (score, prio)
        if best is not None:
            return best[1]
        lossless = self.fabric.lossless
        return lossless[0] if len(lossless) == 1 else None

    def _analyze(self, ctx: DetectContext) -> PfcResult:
        out = PfcResult()
        have_topo = len(ctx.topology) > 0
        prios = sorted({prio for by in self.states.values() for prio in by})
        rooted: set[PortKey] = set()
        for prio in prios:
            self._analyze_prio(ctx, prio, have_topo, out, rooted)
        for pk, level in sorted(self.nic.items()):
            if pk in rooted:
                continue
            stall = self.stalls.get(pk)
            prio = stall.prio if stall is not None else self._nic_prio(pk)
            own = self._state(pk, prio) if prio is not None else None
            out.trees.append(Tree(prio, pk, self.peer(pk), own, nic=level, pauser_polled=True, stall=stall))
        for tree in out.trees:
            if tree.nic is None and tree.origin in self.nic:
                tree.nic = self.nic[tree.origin]
                tree.stall = self.stalls.get(tree.origin)
        self._cover_unplaced(out)
        out.watchdogs = self._watchdogs(out)
        for tree in out.trees:  # evidence lists in port order, whatever the hash seed
            tree.victims.sort(key=lambda v: v.pk)
            tree.covered.sort(key=lambda c: c.pk)
        for d in out.deadlocks:
            d.covered.sort(key=lambda c: c.pk)
        return out

    def _cover_unplaced(self, out: PfcResult) -> None:
        """Ports paused on a storm's priority whose cable peer nobody knows (hosts polled
        without a switch, a fabric without LLDP): with one storm on that priority in view and
        no topology to follow, their pause is most likely its spread (a NIC storm pauses the
        hosts sending to it: Guo et al., SIGCOMM 2016, section 4.1), so it is the storm's pause
        (``also_paused``), not separate congestion; they are no victim finding (no path is known)."""
        by_prio: dict[int | None, list[Tree]] = {}
        for t in out.trees:
            by_prio.setdefault(t.prio, []).append(t)
        claimed = out.claimed()
        out._claimed = None
        for prio, trees in by_prio.items():
            if len(trees) != 1 or prio is None:
                continue
            for st in sorted(self._with_prio(prio), key=lambda s: s.pk):
                if (st.pk, prio) in claimed or self.peer(st.pk) is not None or not (st.rx_bound or 0.0) > 0:
                    continue
                trees[0].covered.append(st)

    def _watchdogs(self, out: PfcResult) -> list[Verdict]:
        """Every watchdog its port's counters contradict this pass (pfc_watchdog.py)."""
        members = {(m.pk, m.prio) for d in out.deadlocks for m in d.members}
        found = []
        for pk, by in sorted(self.states.items()):
            for prio, st in sorted(by.items()):
                v = verdict(st, self.p, (pk, prio) in members, (pk, prio) in self.frozen)
                if v is not None:
                    found.append(v)
        return found

    def _analyze_prio(self, ctx: DetectContext, prio: int, have_topo: bool, out: PfcResult, rooted: set[PortKey]) -> None:
        """One priority: its paused ports, their deadlocks, then storm trees and what they cover."""
        nodes = self._nodes(ctx, prio)
        if not nodes:
            return
        graph = PausedBy(nodes, self.peer if have_topo else (lambda _pk: None), lambda pk: self._blocks(nodes[pk]))
        ps = _Pass(prio, nodes, graph)
        self._deadlocks(ctx.t, ps, have_topo)
        trees = self._trees(ctx, ps, have_topo, out)
        # A port that is only "held" (continuously paused, progress on the priority not
        # measurable: no per-queue counter) joins a tree that another port confirms; a tree
        # of held ports alone is not reported.
        reported = [t for t in trees.values() if t.confirmed or t.origin in self.nic]
        if have_topo and (reported or ps.deadlocks):
            self._cover(ctx, ps, reported)
        out.trees.extend(reported)
        out.deadlocks.extend(ps.deadlocks)
        rooted.update(trees)

    def _nodes(self, ctx: DetectContext, prio: int) -> dict[PortKey, PfcState]:
        """The paused ports of ``prio``: by their own counters (unless the cable's other end,
        polled later, contradicts them), and the peers that a sender says it pauses."""
        store = ctx.store
        nodes: dict[PortKey, PfcState] = {}
        senders: list[PfcState] = []
        for by in self.states.values():
            st = by.get(prio)
            if st is None:
                continue
            if st.paused and not self._contradicted(st, store, "pfc_tx_pause"):
                nodes[st.pk] = st
            if st.sends:
                senders.append(st)
        for s in senders:  # a port whose peer says it pauses it is paused, even without counters of its own
            peer = self.peer(s.pk)
            if peer is None or peer in nodes:
                continue
            entry = store.ports.get(peer)
            if entry is not None and self._contradicted(s, store, "pfc_rx_pause"):
                continue
            if entry is not None:
                st = compute_state(peer, entry, prio, self.p, self.qmap)
            else:
                st = PfcState(peer, prio, has_data=False, link_ok=True)
            if st.rx_frac is not None or st.rx_fps is not None:
                st.self_paused = st.paused  # what its own receive counters say
            st.paused = st.inferred = True
            if st.rx_frac is None:
                st.rx_frac = s.tx_frac
            nodes[peer] = st
        return nodes

    def _deadlocks(self, t: float, ps: _Pass, have_topo: bool) -> None:
        """Cycles of paused ports that cannot drain, judged once over every port paused in this
        pass, before any of them is called a storm. A cycle counts when at least one member is
        stuck or watchdog-fired now or within ``deadlock_window`` and every member is paused
        now with a backlog (the others may still be closing: a cycle fills one egress after
        the other, so in the poll it forms its last members are paused only part of it; Hu et
        al., HotNets 2016). A watchdog that keeps breaking it lets it re-form: members then sit
        in a recovered phase. When each port was last stuck is kept without a topology too."""
        nodes, prio = ps.nodes, ps.prio
        limit = t - self.p.deadlock_window
        before = self._note_blocked(t, ps, limit)
        dl_nodes = [pk for pk, st in nodes.items() if st.has_data and not st.inferred and (
            st.stuck is not None or st.wd_recent or (st.paused and self._blocks(st)))]
        if not have_topo or len(dl_nodes) < 2:
            return
        for comp in deadlock_cycles(dl_nodes, lambda pk: ps.graph.successors(pk, hairpin=True)):
            members = sorted((nodes[pk] for pk in comp), key=lambda s: s.pk)
            phase = self._phase(members, before)
            if phase == "forming":
                # A cycle closes within one poll cycle: its devices report one after another, so
                # it may look half-formed for the rest of that cycle, no longer.
                first = self.forming.setdefault(frozenset(comp), t)
                if t - first > 0.5 * max((m.dt or 0.0) for m in members):
                    phase = None
            if phase is None:
                continue
            ps.deadlocks.append(Deadlock(prio, members, watchdog=all(m.wd_recent for m in members),
                                         cycling=phase == "cycling", forming=phase == "forming"))
            ps.in_deadlock.update(comp)

    def _note_blocked(self, t: float, ps: _Pass, limit: float) -> dict[PortKey, bool]:
        """Whether each node was stuck or watchdog-fired within the window before this pass;
        then note the ones that are now, and forget what is older than the window."""
        before = {pk: self.blocked_t.get((pk, ps.prio), limit - 1) >= limit for pk in ps.nodes}
        for pk, st in ps.nodes.items():
            if st.has_data and (st.stuck is not None or st.wd_recent):
                self.blocked_t[(pk, ps.prio)] = t
        if len(self.blocked_t) > 4 * len(ps.nodes) + 64:
            for key in [k for k, v in self.blocked_t.items() if v < limit]:
                del self.blocked_t[key]
        for cycle in [c for c, v in self.forming.items() if v < limit]:
            del self.forming[cycle]
        return before

    @staticmethod
    def _phase(members: list[PfcState], before: dict[PortKey, bool]) -> str | None:
        """Whether a cycle of paused ports is a deadlock, and in which phase: "stuck" (every
        member stuck or watchdog-fired), "cycling" (the others were stuck within the window: a
        deadlock the watchdogs broke, re-forming), "forming" (the cycle's first poll: one
        member stuck, the others filling). A cycle that keeps a member moving while others
        were already stuck is draining, no deadlock; nor is one with nothing stuck (load)."""
        waiting = [m for m in members if m.stuck is None and not m.wd_recent]
        if len(waiting) == len(members) and not any(before[m.pk] for m in members):
            return None
        if not waiting:
            return "stuck"
        if all(before[m.pk] for m in waiting):
            return "cycling"
        return "forming"

    def _trees(self, ctx: DetectContext, ps: _Pass, have_topo: bool, out: PfcResult) -> dict[PortKey, Tree]:
        """Storm trees: the best sink each stormed (or held) port drains to, grouped by origin.
        A sink whose pauser is itself paused is no origin (an origin pauses without being
        paused: a port held by a paused port waits on something further on, a deadlock
        forming or another storm). A port that waits only behind a deadlock counts for it; a
        stormed port with no sink and no topology is unattributed."""
        nodes = ps.nodes
        best, blocked = best_sinks(list(nodes), ps.graph.successors, lambda pk: self._score(pk, ps.prio, nodes),
                                   ps.in_deadlock, lambda pk: not self._pauser_paused(pk, nodes))
        trees: dict[PortKey, Tree] = {}
        for pk, st in sorted(nodes.items()):
            if not (st.stormed or st.held) or not st.has_data or pk in ps.in_deadlock:
                continue
            sink = best[pk] if have_topo else None
            if sink is None:
                if blocked[pk]:
                    for d in ps.deadlocks:
                        d.blocked_behind += 1
                elif st.stormed:
                    out.unattributed.append(st)
                continue
            self._join(trees, sink, st, ps, ctx.store)
        return trees

    def _pauser_paused(self, sink: PortKey, nodes: dict[PortKey, PfcState]) -> bool:
        pauser = self.peer(sink)
        st = nodes.get(pauser) if pauser is not None else None
        return st is not None and st.has_data and not st.inferred

    def _join(self, trees: dict[PortKey, Tree], sink: PortKey, st: PfcState, ps: _Pass, store: CounterStore) -> None:
        """Put a stormed port into the tree of the origin its sink stands for. The direction of
        the origin's edge comes from both ends: the pauser sends XOFF (its transmit side) and is
        not paused itself, the sink receives it (its receive side). When the pauser is a polled
        switch port, the egress it holds is a victim like the ports behind it (it is stuck, and
        its switch pauses its own feeders); a NIC's (or an unpolled pauser's) cable is the
        origin's own, reported once."""
        origin, origin_peer = self._origin(sink, store)
        tree = trees.get(origin)
        if tree is None:
            ost = self._state(origin, ps.prio) or ps.nodes.get(origin)
            tree = trees[origin] = Tree(ps.prio, origin, origin_peer, ost, pauser_polled=origin != sink)
            for end in (ost, ps.nodes.get(sink)):
                if end is not None and end.has_data:
                    tree.seen.append(end.seen)
            if tree.pauser_polled and ost is None:  # the pauser's counters showed no pause: when were they read?
                tree.seen.append(store.ports[origin].seen)
        tree.seen.append(st.seen)
        tree.dt = tree.dt or st.dt
        if st.stormed or (st.held and st.pk == sink):
            tree.confirmed = True  # stuck, or held all the interval by a pauser that is not paused itself
        if st.pk == origin_peer:
            tree.peer_state = st
            if tree.pauser_polled and not self._host_by_shape(origin[0]):
                tree.victims.append(st)
        elif st.pk != origin:  # the origin's cable is the origin, not a victim
            tree.victims.append(st)

    # ------------------------------------------------------------------ coverage
    def _cover(self, ctx: DetectContext, ps: _Pass, trees: list[Tree]) -> None:
        """What each storm or deadlock reaches: every port with pause on the priority whose
        paused-by path leads into the tree or the cycle, however partly paused it is.

        Storms spread in grades (a leaf pauses its uplinks most of the time, the other
        leaves' uplinks and the other hosts on the storming leaf part of it: Guo et al., "RDMA
        over Commodity Ethernet at Scale", SIGCOMM 2016, NIC PFC pause frame storm), so a
        pause threshold per port would cut the tree at an arbitrary grade. Here the tree
        covers whatever reaches it. A covered port paused for a majority of the interval
        (``graph_pause_fraction``, with data of its own) is a victim finding; the others,
        and endpoints the agent does not poll (a host its switch port keeps pausing), are
        listed in the origin's evidence. Everything covered is the storm's pause, not
        separate congestion (:meth:`PfcResult.claimed`). The same holds behind a PFC deadlock:
        the senders into the cycle are paused as long as it lasts, in grades as its watchdogs
        break and re-form it; that pause is the deadlock's (``Deadlock.covered``).
        """
        light = self._light(ctx, ps)
        graph = PausedBy(light, self.peer, lambda pk: self._blocks(light[pk]))
        waiters: dict[PortKey, list[PortKey]] = {}
        for pk in light:
            for q in graph.successors(pk):
                waiters.setdefault(q, []).append(pk)
        owner: dict[PortKey, Tree | Deadlock] = {}
        for d in ps.deadlocks:
            for m in d.members:
                owner.setdefault(m.pk, d)
        for tree in trees:
            for pk in (tree.origin, tree.origin_peer, *(v.pk for v in tree.victims)):
                if pk is not None:
                    owner.setdefault(pk, tree)
        hold = ctx.t - self.p.victim_hold
        if len(self.victim_t) > 4 * len(light) + 64:
            for key in [k for k, v in self.victim_t.items() if v < hold]:
                del self.victim_t[key]
        frontier = [pk for pk in owner if pk in light]
        while frontier:  # breadth-first against the edges: who waits on a covered port
            nxt: list[PortKey] = []
            for q in frontier:
                for pk in waiters.get(q, ()):
                    if pk in owner or pk in ps.in_deadlock:
                        continue
                    owner[pk] = owner[q]
                    nxt.append(pk)
                    self._reached(owner[pk], light[pk], ps.prio, ctx.t, hold)
            frontier = nxt

    def _light(self, ctx: DetectContext, ps: _Pass) -> dict[PortKey, PfcState]:
        """The graph's nodes plus every port with any pause on the priority, and the unpolled
        ports a peer says it pauses: coverage follows pause at any grade."""
        prio = ps.prio
        light: dict[PortKey, PfcState] = dict(ps.nodes)
        kept = self._with_prio(prio)
        for st in kept:
            if st.pk not in light and ((st.rx_frac or 0.0) > 0 or (st.rx_fps or 0.0) > 0):
                light[st.pk] = st
        for st in kept:  # ports paused by a peer that says so, without data of their own
            if not ((st.tx_frac or 0.0) > 0 or (st.tx_fps or 0.0) > 0):
                continue
            peer = self.peer(st.pk)
            if peer is not None and peer not in light and peer not in ctx.store.ports:
                light[peer] = PfcState(peer, prio, has_data=False, rx_frac=st.tx_frac, rx_fps=st.tx_fps, paused=True,
                                       inferred=True)
        return light

    def _reached(self, owner: Tree | Deadlock, st: PfcState, prio: int, t: float, hold: float) -> None:
        """A port the storm or deadlock reaches: a victim of the storm when it is paused by its
        own counters (or was a victim within ``victim_hold``), else covered. A port whose own
        receive counters say it is not paused, whatever its peer reports sending, is no victim."""
        if isinstance(owner, Deadlock):
            owner.covered.append(st)
            return
        own = st.paused and st.self_paused is not False
        if st.has_data and (own or self.victim_t.get((st.pk, prio), hold - 1) >= hold):
            owner.victims.append(st)
            if own:
                self.victim_t[(st.pk, prio)] = t
        else:
            owner.covered.append(st)

    # ------------------------------------------------------------------ helpers
    def _blocks(self, st: PfcState) -> bool:
        """Whether a paused port can be waited on: it holds a backlog (or a watchdog fired on
        it); an empty queue blocks nobody. Unknown backlog counts unless configured otherwise."""
        return st.backlog is True or st.wd_recent or (st.backlog is None and self.p.backlog_unknown_ok)

    def _contradicted(self, st: PfcState, store: CounterStore, side: str) -> bool:
        """Both ends of a cable see the same pause: one end's PAUSED (or SENDS) state is
        stale when the other end polled later, has counters for that direction (``side``
        pfc_tx_pause or pfc_rx_pause) and no longer shows it. Targets are polled one after
        another, so without this a pass mixes one device's new poll with its neighbours'
        previous one, and a storm or deadlock that just ended leaves a phantom sink (a
        false origin) on the first switch polled.

        Where both ends measure pause time, the later end contradicts the earlier one when
        it shows less than half the pause the earlier one claims (the same frames, counted at
        both ends of one cable: the pause fell away in between); a graded pause that goes on
        (a deadlock its watchdogs keep breaking, a partly paused victim) stays: it moves from
        poll to poll by less than that (a victim uplink's 40-70 % is a ratio of 0.57 at the
        extremes; watchdog cycling keeps near the detection time's share). Otherwise the
        later end must no longer show the state at all, and a port's own watchdog event is
        then not overruled."""
        peer = self.peer(st.pk)
        entry = store.ports.get(peer) if peer is not None else None
        if entry is None or entry.seen <= st.seen:
            return False
        sub = (st.prio,)
        if not any((se := entry.counter(f"{side}_{unit}", sub)) is not None and se.delta is not None
                   for unit in ("seconds", "frames")):
            return False  # the other end cannot tell (no counter, or no valid interval)
        other = self._state(peer, st.prio)  # type: ignore[arg-type]
        if other is None:
            return True  # no pause activity there: the other end says it stopped
        mine, theirs = (st.rx_frac, other.tx_frac) if side == "pfc_tx_pause" else (st.tx_frac, other.rx_frac)
        if mine is not None and theirs is not None:
            return theirs < 0.5 * mine
        if st.wd_recent:
            return False
        return not (other.sends if side == "pfc_tx_pause" else other.paused)

    def _score(self, sink: PortKey, prio: int, nodes: dict[PortKey, PfcState]) -> tuple:
        pauser = self.peer(sink)
        ps = self._state(pauser, prio) if pauser else None
        sk = nodes[sink]
        confirmed = pauser is not None and pauser in self.nic
        tx_frac = ps.tx_frac if ps is not None and ps.tx_frac is not None else (sk.rx_frac or 0.0)
        tx_fps = ps.tx_fps if ps is not None and ps.tx_fps is not None else (sk.rx_fps or 0.0)
        return (confirmed, tx_frac, tx_fps, sink)

    def _origin(self, sink: PortKey, store: CounterStore) -> tuple[PortKey, PortKey | None]:
        pauser = self.peer(sink)
        if pauser is not None and pauser in store.ports:
            return pauser, sink
        return sink, pauser
