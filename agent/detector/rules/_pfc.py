"""PFC analysis shared by ``pfc_storm``, ``pfc_deadlock`` and ``congestion``.

Per (port, priority) it classifies the last valid interval. The AND of conditions and the
device-clocked interval follow SONiC's PFC watchdog storm test (sonic-swss
``orchagent/pfc_detect_mellanox.lua``: occupancy > 0 and the queue's packet counter
unchanged and pause duration > 0.99 of the poll time):

* **paused**: the port's transmitter was held by its peer: rx pause fraction
  >= ``graph_pause_fraction``, or (no duration counter) pause frames at or above the
  keep-paused floor, or a watchdog storm event on it;
* **sends**: it holds its peer: tx pause fraction >= ``graph_pause_fraction`` (or frames
  above the floor);
* **stuck** (storm level, evidence ``signal: pause_time``): rx pause fraction >=
  ``storm_pause_fraction`` AND no transmit progress on that priority AND (queue occupancy
  > 0 or drops), on a link that stayed up. Without a duration counter (``signal:
  pause_frames``, the shape of SONiC's Broadcom test, sonic-swss
  ``pfc_detect_broadcom.lua``): pause frames received at >= the floor rate, no XOFF->XON
  transition, no progress, backlog.

The floor: one pause frame with the maximum quanta (65535 x 512 bit times, IEEE 802.1Qbb
clause 36) keeps a port
paused for 65535*512/bitrate seconds, so staying paused needs at least
bitrate/(512*65535) frames/s; ``s2b_floor_factor`` (0.5) leaves room for vendors that use
smaller quanta or refresh late. At 100G the floor is about 1490 frames/s.

Queue index = priority by default (the usual RoCE mapping: DSCP 26 -> priority 3 ->
traffic class 3); the config's ``fabric: priority_to_queue`` overrides it (read each pass
from the detector context, one layout for every rule).

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
downstream. The pauser is reported as the origin when it has telemetry of its own (a
monitored host NIC); otherwise the paused switch port facing it is (the switch side of an
unmonitored host, or a port whose peer is unknown while the fabric has a topology).
Candidates are ranked by the pauser's confirmed NIC storm events, then tx pause fraction
(or the paused side's rx fraction), then frame rate. Stormed ports are grouped under the
best-ranked sink they reach: one tree per origin.

**Coverage**: a reported tree covers every port with pause on its priority whose paused-by
path leads into it, at any grade (:meth:`PfcTracker._cover`); :func:`claimed_ports` hands
all of it to ``congestion`` as the storm's pause.

**Deadlock**: SCCs of size >= 2 in the sub-graph of stuck (or watchdog-fired) ports, and of
ports paused now with a backlog that were stuck or watchdog-fired within
``deadlock_window_s`` (a deadlock the watchdogs keep breaking re-forms). Storm trees exclude
deadlock members and the ports blocked only behind a deadlock.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from fabricmon.agent.detector import DEFAULT_FABRIC, DetectContext, RuleMetric, fabric_layout
from fabricmon.agent.detector.pausegraph import PausedBy, best_sinks, deadlock_cycles
from fabricmon.agent.detector.rules._common import RatioGauge, SeriesCache, SubIndex, frac, link_ok, speed_bytes, tx_progress
from fabricmon.agent.store import CounterStore, PortEntry, PortKey
from fabricmon.core.vocabulary import PriorityMap

PFC_DEFAULTS: dict[str, Any] = {
    # Paused this share of the interval = storm level. SONiC's Mellanox test uses 0.99 of the
    # poll time (sonic-swss pfc_detect_mellanox.lua); 0.95 leaves room for poll jitter.
    "storm_pause_fraction": 0.95,
    # A port paused at least half the interval is a graph node / a pause sender (a majority:
    # below it the port mostly transmits; an inferred value, no public standard).
    "graph_pause_fraction": 0.5,
    "progress_line_fraction": 0.01,  # "no progress" = below 1 % of line rate without a queue counter (see tx_progress)
    "s2b_floor_factor": 0.5,  # frames-only test: share of the keep-paused frame rate (see module doc)
    "backlog_unknown_ok": True,  # no occupancy gauge and no drop counter: do not veto
    # Watchdog events this close count as one episode (>= dt). Watchdogs act within 0.1-5 s
    # (SONiC pfcwd detection 100-5000 ms, sonic-utilities pfcwd/main.py), so 10 s covers one.
    "watchdog_window_s": 10.0,
    # Raise in 1 poll when the interval is this long: 10 s of continuous pause with nothing
    # sent is 50x SONiC's default 200 ms detection time; a second poll adds no certainty.
    "fast_raise_dt_s": 10.0,
    # A PFC deadlock that watchdogs keep breaking re-forms (the loop's routes are still
    # there): per poll its members are stuck, or paused with a backlog between watchdog
    # actions. A port paused now that was stuck or watchdog-fired within this window stays a
    # cycle member. SONiC's watchdog detects in 200 ms and restores after 200 ms by default
    # (sonic-utilities pfcwd/main.py), so one cycle is well under a poll; 60 s (6 polls at
    # 10 s) bridges polls that happen to land in a recovered phase.
    "deadlock_window_s": 60.0,
    # A storm victim's grade moves from poll to poll with the traffic that crosses it (the
    # other leaves' uplinks are paused 40-70 %: around the majority a victim needs), so a
    # port that was a victim within this window and is still reached by the storm stays one:
    # one finding per victim for the storm's life, not one per poll above the line.
    "victim_hold_s": 60.0,
}

PAUSE_NAMES = ("pfc_rx_pause_frames", "pfc_tx_pause_frames", "pfc_rx_pause_seconds", "pfc_tx_pause_seconds")
PFC_NAMES = (*PAUSE_NAMES, "pfc_watchdog_storms")
NIC_ERR = ("tx_pause_storm_error_events", ())
NIC_WARN = ("tx_pause_storm_warning_events", ())
MAX_QUANTA_BITS = 512 * 65535


@dataclass(slots=True)
class PfcState:
    pk: PortKey
    prio: int
    has_data: bool = True
    seen: float = 0.0  # poll time of the port's last data
    rx_frac: float | None = None
    tx_frac: float | None = None
    rx_fps: float | None = None
    tx_fps: float | None = None
    trans: float | None = None
    progress: bool | None = None
    backlog: bool | None = None
    wd: bool = False  # watchdog storm event this interval (or stormed state)
    wd_recent: bool = False
    link_ok: bool = True
    dt: float | None = None
    paused: bool = False
    sends: bool = False
    stuck: str | None = None  # "pause_time" | "pause_frames": which test found it stuck
    held: bool = False  # continuously paused with backlog, progress on the priority unknown
    inferred: bool = False
    self_paused: bool | None = None  # an inferred port's own receive counters: paused? (None: it has none)

    @property
    def stormed(self) -> bool:
        return self.wd or self.stuck is not None

    def evidence(self) -> dict[str, Any]:
        ev: dict[str, Any] = {}
        for k in ("rx_frac", "tx_frac", "rx_fps", "tx_fps"):
            v = getattr(self, k)
            if v is not None:
                ev[k.replace("frac", "pause_fraction").replace("fps", "pause_frames_per_s")] = round(v, 4)
        if self.progress is not None:
            ev["tx_progress"] = self.progress
        if self.backlog is not None:
            ev["backlog"] = self.backlog
        if self.wd:
            ev["watchdog"] = True
        if self.stuck:
            ev["signal"] = self.stuck
        if self.dt:
            ev["interval_s"] = round(self.dt, 3)
        return ev


def _active(entry: PortEntry, sub: tuple[int]) -> bool:
    for name in PAUSE_NAMES:
        se = entry.counter(name, sub)
        if se is not None and se.delta:
            return True
    wd = entry.counter("pfc_watchdog_storms", sub)
    if wd is not None and (wd.delta or wd.moved_in_history()):
        return True
    g = entry.gauge("pfc_watchdog_stormed", sub)
    return g is not None and g >= 1


def compute_state(pk: PortKey, entry: PortEntry, prio: int, p: dict[str, Any], qmap: dict[int, int]) -> PfcState:
    sub = (prio,)
    qs = (qmap.get(prio, prio),)
    rx_s = entry.counter("pfc_rx_pause_seconds", sub)
    tx_s = entry.counter("pfc_tx_pause_seconds", sub)
    rx_f = entry.counter("pfc_rx_pause_frames", sub)
    tx_f = entry.counter("pfc_tx_pause_frames", sub)
    tr = entry.counter("pfc_rx_pause_transitions", sub)
    wd_se = entry.counter("pfc_watchdog_storms", sub)
    st = PfcState(pk, prio, seen=entry.seen)
    st.rx_frac = frac(rx_s)
    st.tx_frac = frac(tx_s)
    st.rx_fps = rx_f.rate if rx_f is not None else None
    st.tx_fps = tx_f.rate if tx_f is not None else None
    st.trans = tr.delta if tr is not None else None
    st.dt = (rx_s or rx_f or tx_s or tx_f or wd_se).dt if (rx_s or rx_f or tx_s or tx_f or wd_se) else None
    g = entry.gauge("pfc_watchdog_stormed", sub)
    st.wd = bool(wd_se is not None and wd_se.delta) or (g is not None and g >= 1)
    recent = st.wd
    if not recent and wd_se is not None:
        w = wd_se.window(max(p["watchdog_window_s"], wd_se.dt or 0.0))
        recent = w is not None and w[0] > 0
    st.wd_recent = recent
    st.progress = prio_progress(entry, qs, st.rx_frac, p["progress_line_fraction"])
    occ = entry.gauge("queue_occupancy_bytes", qs)
    drops = [entry.counter("queue_drops", qs), entry.counter("queue_no_buffer_drops", qs), entry.counter("pfc_watchdog_drops", sub)]
    if (occ is not None and occ > 0) or any(d is not None and d.delta for d in drops):
        st.backlog = True
    elif occ is not None:
        st.backlog = False  # an empty queue; zero drops alone do not prove the queue empty

    st.link_ok = link_ok(entry)
    speed = speed_bytes(entry)
    floor = speed * 8 / MAX_QUANTA_BITS * p["s2b_floor_factor"] if speed else None
    theta = p["graph_pause_fraction"]
    rx_floor = rx_s is None and floor is not None and st.rx_fps is not None and st.rx_fps >= floor
    st.paused = (st.rx_frac is not None and st.rx_frac >= theta) or rx_floor or st.wd_recent
    st.sends = (st.tx_frac is not None and st.tx_frac >= theta) or (
        tx_s is None and floor is not None and st.tx_fps is not None and st.tx_fps >= floor
    )
    backlog_ok = st.backlog is True or (st.backlog is None and p["backlog_unknown_ok"])
    continuous = (st.rx_frac is not None and st.rx_frac >= p["storm_pause_fraction"]) or (rx_floor and not st.trans)
    if st.link_ok and backlog_ok and continuous:
        if st.progress is False:
            st.stuck = "pause_time" if st.rx_frac is not None else "pause_frames"
        elif st.progress is None:
            st.held = True
    return st


def prio_progress(entry: PortEntry, queue: tuple[Any, ...], rx_frac: float | None, min_line_fraction: float) -> bool | None:
    """Transmit progress of one priority in the last interval; None when it cannot be told.

    The queue's own counters decide when the port has them. Otherwise two bounds hold: a
    priority paused for a fraction f of the interval sent at most (1 - f) of line rate, so
    f > 1 - ``min_line_fraction`` proves no progress; and a port whose total TX is below the
    floor made none on any priority. A port TX above the floor says nothing about this
    priority (other, unpaused priorities share the port), so it is unknown, not progress.
    """
    for name in ("queue_tx_bytes", "queue_tx_packets"):
        se = entry.counter(name, queue)
        if se is not None and se.delta is not None:
            return tx_progress(entry, queue, min_line_fraction)
    if rx_frac is not None and 1.0 - rx_frac < min_line_fraction:
        return False
    return False if tx_progress(entry, None, min_line_fraction) is False else None


@dataclass(slots=True)
class Tree:
    prio: int | None
    origin: PortKey
    origin_peer: PortKey | None  # the port on the other end of the origin's cable
    origin_state: PfcState | None
    victims: list[PfcState] = field(default_factory=list)
    nic: str | None = None  # "error" | "warning": the origin NIC confirmed the storm
    peer_state: PfcState | None = None  # the origin's cable peer when it is stormed (the origin's own evidence)
    confirmed: bool = False  # a member is stuck or watchdog-fired, not only held
    # Ports the storm reaches that are no victim finding: partly paused, or not polled (a host
    # its switch port keeps pausing). Evidence of the origin, and the storm's pause.
    covered: list[PfcState] = field(default_factory=list)
    seen: list[float] = field(default_factory=list)  # poll times of the data the tree rests on
    dt: float | None = None

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
    blocked_behind: int = 0
    # Ports whose paused-by path leads into the cycle, at any grade, and endpoints the agent
    # does not poll that their switch port keeps pausing: the deadlock's pause, not congestion.
    covered: list[PfcState] = field(default_factory=list)


@dataclass(slots=True)
class Analysis:
    trees: list[Tree] = field(default_factory=list)
    unattributed: list[PfcState] = field(default_factory=list)
    deadlocks: list[Deadlock] = field(default_factory=list)


class PfcTracker:
    """Incremental per-(port, priority) PFC state, updated from each pass's updated ports."""

    def __init__(self, params: dict[str, Any], legacy: dict[str, Any] | None = None) -> None:
        self.p = params
        self.legacy = legacy or {}  # fabric keys given to the owning rule itself (before ``fabric:``)
        self.fabric: PriorityMap = DEFAULT_FABRIC  # the layout of the last pass (queue per priority)
        self.qmap: dict[int, int] = dict(self.fabric.priority_to_queue)
        self.index = SubIndex(PFC_NAMES)
        names = {*PFC_NAMES, NIC_ERR[0], NIC_WARN[0]}
        self.relevant = SeriesCache(lambda name, sub: name in names)
        self.states: dict[PortKey, dict[int, PfcState]] = {}
        self.nic: dict[PortKey, str] = {}  # port -> "error" | "warning" in its last interval
        self.blocked_t: dict[tuple[PortKey, int], float] = {}  # (port, priority) -> last time stuck or watchdog-fired
        self.victim_t: dict[tuple[PortKey, int], float] = {}  # (port, priority) -> last time a majority-paused victim
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
        # The pass last scanned. Kept by reference, not by id(): a freed context's id is
        # reused by the next one, and passes for several targets share one poll time.
        self._seen: DetectContext | None = None
        self._analysis: Analysis | None = None

    def update(self, ctx: DetectContext) -> None:
        if self._seen is ctx:
            return
        self._seen = ctx
        self._analysis = None
        self.fabric = fabric_layout(ctx, self.legacy)
        self.qmap = dict(self.fabric.priority_to_queue)
        store = ctx.store
        ports = store.ports
        index = self.index
        watch = self.watch
        ratios = self.pause_ratio.values
        states = self.pfc_state.values
        candidates = ctx.moved(*PFC_NAMES, "pfc_rx_pause_transitions", NIC_ERR[0], NIC_WARN[0])
        candidates.update(ctx.gauge_changed("pfc_watchdog_stormed"))
        candidates |= ctx.watched(watch)
        for pk in candidates:
            entry = ports.get(pk)
            watch.discard(pk)
            if entry is None or not self.relevant.get(pk, entry):
                continue  # no PFC or NIC pause-storm counters (an InfiniBand port)
            err = entry.counter(*NIC_ERR)
            warn = entry.counter(*NIC_WARN)
            if err is not None and err.delta:
                self.nic[pk] = "error"
            elif warn is not None and warn.delta:
                self.nic[pk] = "warning"
            else:
                self.nic.pop(pk, None)
            subs = index.subs(pk, entry)
            if pk in self.nic:
                watch.add(pk)
            if not subs:
                continue
            self.states.pop(pk, None)
            kept: dict[int, PfcState] = {}
            for prio in subs:
                sub = (prio,)
                rkey = (pk[0], pk[1], str(prio))
                if not _active(entry, sub):
                    self.pause_ratio.set(rkey, 0.0)
                    self.pfc_state.set(rkey, 0.0)
                    if rkey in ratios or rkey in states:
                        watch.add(pk)  # exported as 0 now, removed on the next update
                    continue
                watch.add(pk)
                st = compute_state(pk, entry, prio, self.p, self.qmap)
                self.pause_ratio.set(rkey, st.rx_frac)
                self.pfc_state.set(rkey, 2.0 if st.stormed else 1.0 if st.paused else 0.0)
                if st.paused or st.sends or st.wd_recent or st.rx_frac or st.tx_frac or st.rx_fps or st.tx_fps:
                    kept[prio] = st  # partial pause too: a storm may reach it (Tree.covered)
            if kept:
                self.states[pk] = kept
        for pk in [pk for pk in self.states if pk not in ports]:
            del self.states[pk]
        for pk in [pk for pk in self.nic if pk not in ports]:
            del self.nic[pk]
        if len(watch) > len(ports):
            watch.intersection_update(ports)
        index.forget_missing(ports)
        self.relevant.forget_missing(ports)

    def metrics(self) -> tuple[RuleMetric, RuleMetric]:
        return (self.pause_ratio.metric(), self.pfc_state.metric())

    # ------------------------------------------------------------------ analysis
    def analyze(self, ctx: DetectContext) -> Analysis:
        self.update(ctx)
        if self._analysis is None:
            self._analysis = self._analyze(ctx)
        return self._analysis

    def _nic_prio(self, pk: PortKey) -> int | None:
        best = None
        for prio, st in self.states.get(pk, {}).items():
            score = (st.tx_frac or 0.0, st.tx_fps or 0.0)
            if best is None or score > best[0]:
                best = (score, prio)
        if best is not None:
            return best[1]
        lossless = self.fabric.lossless
        return lossless[0] if len(lossless) == 1 else None

    def _analyze(self, ctx: DetectContext) -> Analysis:
        out = Analysis()
        topo = ctx.topology
        have_topo = len(topo) > 0
        prios = sorted({prio for by in self.states.values() for prio in by})
        rooted: set[PortKey] = set()
        for prio in prios:
            self._analyze_prio(ctx, prio, have_topo, out, rooted)
        for pk, level in sorted(self.nic.items()):
            if pk in rooted:
                continue
            prio = self._nic_prio(pk)
            peer = topo.peer(*pk)
            out.trees.append(Tree(prio, pk, peer, None, nic=level))
        for tree in out.trees:
            if tree.nic is None and tree.origin in self.nic:
                tree.nic = self.nic[tree.origin]
        return out

    def _analyze_prio(self, ctx: DetectContext, prio: int, have_topo: bool, out: Analysis, rooted: set[PortKey]) -> None:
        topo = ctx.topology
        store = ctx.store
        nodes: dict[PortKey, PfcState] = {}
        senders: list[PfcState] = []
        for by in self.states.values():
            st = by.get(prio)
            if st is None:
                continue
            if st.paused and not self._contradicted(st, topo, store, "pfc_tx_pause"):
                nodes[st.pk] = st
            if st.sends:
                senders.append(st)
        for s in senders:  # a port whose peer says it pauses it is paused, even without counters of its own
            peer = topo.peer(*s.pk)
            if peer is None or peer in nodes:
                continue
            entry = store.ports.get(peer)
            if entry is not None and self._contradicted(s, topo, store, "pfc_rx_pause"):
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
        if not nodes:
            return
        def blocking(pk: PortKey) -> bool:
            return self._blocks(nodes[pk])

        graph = PausedBy(nodes, (lambda pk: topo.peer(*pk)) if have_topo else (lambda _pk: None), blocking)
        succ = graph.successors

        # Deadlocks: cycles among stuck / watchdog-fired ports only (every member condition
        # holds) that cannot drain.
        t = ctx.t
        limit = t - self.p["deadlock_window_s"]
        for pk, st in nodes.items():
            if st.has_data and (st.stuck is not None or st.wd_recent):
                self.blocked_t[(pk, prio)] = t
        # A member is stuck now, or paused now with a backlog and stuck or watchdog-fired
        # within ``deadlock_window_s``: a deadlock the watchdogs keep breaking re-forms.
        dl_nodes = [pk for pk, st in nodes.items() if st.has_data and not st.inferred and (
            st.stuck is not None or st.wd_recent or (blocking(pk) and self.blocked_t.get((pk, prio), limit - 1) >= limit))]
        if len(self.blocked_t) > 4 * len(nodes) + 64:
            for key in [k for k, v in self.blocked_t.items() if v < limit]:
                del self.blocked_t[key]
        in_deadlock: set[PortKey] = set()
        deadlocks: list[Deadlock] = []
        if have_topo and len(dl_nodes) >= 2:
            for comp in deadlock_cycles(dl_nodes, lambda pk: graph.successors(pk, hairpin=True)):
                members = sorted((nodes[pk] for pk in comp), key=lambda s: s.pk)
                deadlocks.append(Deadlock(prio, members, watchdog=all(m.wd_recent for m in members),
                                          cycling=any(m.stuck is None and not m.wd_recent for m in members)))
                in_deadlock.update(comp)
        # Storm trees: the best sink each port drains to, and whether it waits behind a deadlock.
        best, blocked = best_sinks(list(nodes), succ, lambda pk: self._score(pk, prio, nodes, topo), in_deadlock)
        trees: dict[PortKey, Tree] = {}
        for pk, st in sorted(nodes.items()):
            if not (st.stormed or st.held) or not st.has_data or pk in in_deadlock:
                continue
            sink = best[pk] if have_topo else None
            if sink is None:
                if blocked[pk]:
                    for d in deadlocks:
                        d.blocked_behind += 1
                    continue
                if st.stormed:
                    out.unattributed.append(st)
                continue
            origin, origin_peer = self._origin(sink, topo, store)
            tree = trees.get(origin)
            if tree is None:
                ost = self.states.get(origin, {}).get(prio) or nodes.get(origin)
                tree = trees[origin] = Tree(prio, origin, origin_peer, ost)
                for end in (ost, nodes.get(sink)):
                    if end is not None and end.has_data:
                        tree.seen.append(end.seen)
            tree.seen.append(st.seen)
            tree.dt = tree.dt or st.dt
            if st.stormed:
                tree.confirmed = True
            if pk == origin_peer:
                tree.peer_state = st
            elif pk != origin:  # the origin's cable is the origin, not a victim
                tree.victims.append(st)
        # A port that is only "held" (continuously paused, progress on the priority not
        # measurable: no per-queue counter) joins a tree that another port confirms; a tree
        # of held ports alone is not reported.
        reported = [t for t in trees.values() if t.confirmed or t.origin in self.nic]
        self._cover(ctx, prio, reported, deadlocks, nodes, in_deadlock, have_topo)
        out.trees.extend(reported)
        out.deadlocks.extend(deadlocks)
        rooted.update(trees)

    def _cover(self, ctx: DetectContext, prio: int, trees: list[Tree], deadlocks: list[Deadlock],
               nodes: dict[PortKey, PfcState], in_deadlock: set[PortKey], have_topo: bool) -> None:
        """What each storm or deadlock reaches: every port with pause on ``prio`` whose
        paused-by path leads into the tree or the cycle, however partly paused it is.

        Storms spread in grades (a leaf pauses its uplinks most of the time, the other
        leaves' uplinks and the other hosts on the storming leaf part of it: Guo et al., "RDMA
        over Commodity Ethernet at Scale", SIGCOMM 2016, NIC PFC pause frame storm), so a
        pause threshold per port would cut the tree at an arbitrary grade. Here the tree
        covers whatever reaches it. A covered port paused for a majority of the interval
        (``graph_pause_fraction``, with data of its own) is a victim finding; the others,
        and endpoints the agent does not poll (a host its switch port keeps pausing), are
        listed in the origin's evidence. Everything covered is the storm's pause, not
        separate congestion (:func:`claimed_ports`). The same holds behind a PFC deadlock:
        the senders into the cycle are paused as long as it lasts, in grades as its watchdogs
        break and re-form it; that pause is the deadlock's (``Deadlock.covered``).
        """
        if not (trees or deadlocks) or not have_topo:
            return
        topo = ctx.topology
        light: dict[PortKey, PfcState] = dict(nodes)
        for by in self.states.values():
            st = by.get(prio)
            if st is not None and st.pk not in light and ((st.rx_frac or 0.0) > 0 or (st.rx_fps or 0.0) > 0):
                light[st.pk] = st
        for snd in self.states.values():  # ports paused by a peer that says so, without data of their own
            st = snd.get(prio)
            if st is None or not ((st.tx_frac or 0.0) > 0 or (st.tx_fps or 0.0) > 0):
                continue
            peer = topo.peer(*st.pk)
            if peer is not None and peer not in light and peer not in ctx.store.ports:
                light[peer] = PfcState(peer, prio, has_data=False, rx_frac=st.tx_frac, rx_fps=st.tx_fps, paused=True,
                                       inferred=True)
        graph = PausedBy(light, lambda pk: topo.peer(*pk), lambda pk: self._blocks(light[pk]))
        waiters: dict[PortKey, list[PortKey]] = {}
        for pk in light:
            for q in graph.successors(pk):
                waiters.setdefault(q, []).append(pk)
        owner: dict[PortKey, Tree | Deadlock] = {}
        for d in deadlocks:
            for m in d.members:
                owner.setdefault(m.pk, d)
        for tree in trees:
            for pk in (tree.origin, tree.origin_peer, *(v.pk for v in tree.victims)):
                if pk is not None:
                    owner.setdefault(pk, tree)
        hold = ctx.t - self.p["victim_hold_s"]
        if len(self.victim_t) > 4 * len(light) + 64:
            for key in [k for k, v in self.victim_t.items() if v < hold]:
                del self.victim_t[key]
        frontier = [pk for pk in owner if pk in light]
        while frontier:  # breadth-first against the edges: who waits on a covered port
            nxt: list[PortKey] = []
            for q in frontier:
                for pk in waiters.get(q, ()):
                    if pk in owner or pk in in_deadlock:
                        continue
                    tree = owner[pk] = owner[q]
                    st = light[pk]
                    nxt.append(pk)
                    if isinstance(tree, Deadlock):
                        tree.covered.append(st)
                        continue
                    # Paused by its own counters (a port whose own receive counters say it is
                    # not paused, whatever its peer reports sending, is not a victim).
                    own = st.paused and st.self_paused is not False
                    if st.has_data and (own or self.victim_t.get((pk, prio), hold - 1) >= hold):
                        tree.victims.append(st)
                        if own:
                            self.victim_t[(pk, prio)] = ctx.t
                    else:
                        tree.covered.append(st)
            frontier = nxt

    def _blocks(self, st: PfcState) -> bool:
        """Whether a paused port can be waited on: it holds a backlog (or a watchdog fired on
        it); an empty queue blocks nobody. Unknown backlog counts unless configured otherwise."""
        return st.backlog is True or st.wd_recent or (st.backlog is None and self.p["backlog_unknown_ok"])

    def _contradicted(self, st: PfcState, topo: Any, store: CounterStore, side: str) -> bool:
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
        peer = topo.peer(*st.pk)
        entry = store.ports.get(peer) if peer is not None else None
        if entry is None or entry.seen <= st.seen:
            return False
        sub = (st.prio,)
        if not any((se := entry.counter(f"{side}_{unit}", sub)) is not None and se.delta is not None
                   for unit in ("seconds", "frames")):
            return False  # the other end cannot tell (no counter, or no valid interval)
        other = self.states.get(peer, {}).get(st.prio)
        if other is None:
            return True  # no pause activity there: the other end says it stopped
        mine, theirs = (st.rx_frac, other.tx_frac) if side == "pfc_tx_pause" else (st.tx_frac, other.rx_frac)
        if mine is not None and theirs is not None:
            return theirs < 0.5 * mine
        if st.wd_recent:
            return False
        return not (other.sends if side == "pfc_tx_pause" else other.paused)

    def _score(self, sink: PortKey, prio: int, nodes: dict[PortKey, PfcState], topo: Any) -> tuple:
        pauser = topo.peer(*sink)
        ps = self.states.get(pauser, {}).get(prio) if pauser else None
        sk = nodes[sink]
        confirmed = pauser is not None and pauser in self.nic
        tx_frac = ps.tx_frac if ps is not None and ps.tx_frac is not None else (sk.rx_frac or 0.0)
        tx_fps = ps.tx_fps if ps is not None and ps.tx_fps is not None else (sk.rx_fps or 0.0)
        return (confirmed, tx_frac, tx_fps, sink)

    @staticmethod
    def _origin(sink: PortKey, topo: Any, store: CounterStore) -> tuple[PortKey, PortKey | None]:
        pauser = topo.peer(*sink)
        if pauser is not None and pauser in store.ports:
            return pauser, sink
        return sink, pauser


def pfc_key(params: dict[str, Any]) -> tuple[tuple, dict[str, Any]]:
    """(identity, parameters) of the PFC tracker for a rule's parameters: the PFC ones it
    sets over :data:`PFC_DEFAULTS`. Rules with the same identity share one tracker."""
    p = {k: params.get(k, v) for k, v in PFC_DEFAULTS.items()}
    return tuple(sorted((k, repr(v)) for k, v in p.items())), p


def claimed_ports(tracker: PfcTracker, ctx: DetectContext) -> set[tuple[PortKey, int | None]]:
    """(port, priority) pairs that a storm tree (origin, its cable peer, victims) or a
    deadlock accounts for in this pass. Other rules use it so the same pause is not reported
    twice (a stuck port is not also "chronically paused")."""
    a = tracker.analyze(ctx)
    out: set[tuple[PortKey, int | None]] = set()
    for t in a.trees:
        out.add((t.origin, t.prio))
        if t.origin_peer is not None:
            out.add((t.origin_peer, t.prio))
        out.update((v.pk, v.prio) for v in t.victims)
        out.update((c.pk, c.prio) for c in t.covered)
    out.update((st.pk, st.prio) for st in a.unattributed)
    for d in a.deadlocks:
        out.update((m.pk, m.prio) for m in (*d.members, *d.covered))
    return out
