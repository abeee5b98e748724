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
traffic class 3); ``priority_to_queue`` overrides it.

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

**Deadlock**: SCCs of size >= 2 in the sub-graph of stuck (or watchdog-fired) ports. Storm
trees exclude deadlock members and the ports blocked only behind a deadlock.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from fabricmon.agent.detector import DetectContext, RuleMetric
from fabricmon.agent.detector.pausegraph import PausedBy, best_sinks, deadlock_cycles
from fabricmon.agent.detector.rules._common import RatioGauge, SeriesCache, SubIndex, frac, int_map, link_ok, speed_bytes, tx_progress
from fabricmon.agent.store import CounterStore, PortEntry, PortKey

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
    "priority_to_queue": None,  # {priority: queue}; None = identity
    "lossless_priorities": [3],  # priority given to a NIC storm event without per-priority data
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
    blocked_behind: int = 0


@dataclass(slots=True)
class Analysis:
    trees: list[Tree] = field(default_factory=list)
    unattributed: list[PfcState] = field(default_factory=list)
    deadlocks: list[Deadlock] = field(default_factory=list)


class PfcTracker:
    """Incremental per-(port, priority) PFC state, updated from each pass's updated ports."""

    def __init__(self, params: dict[str, Any]) -> None:
        self.p = params
        self.qmap = int_map(params["priority_to_queue"])
        self.index = SubIndex(PFC_NAMES)
        names = {*PFC_NAMES, NIC_ERR[0], NIC_WARN[0]}
        self.relevant = SeriesCache(lambda name, sub: name in names)
        self.states: dict[PortKey, dict[int, PfcState]] = {}
        self.nic: dict[PortKey, str] = {}  # port -> "error" | "warning" in its last interval
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
                if st.paused or st.sends or st.wd_recent:
                    kept[prio] = st
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
        lossless = list(self.p["lossless_priorities"] or [])
        return int(lossless[0]) if len(lossless) == 1 else None

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
            st.paused = st.inferred = True
            if st.rx_frac is None:
                st.rx_frac = s.tx_frac
            nodes[peer] = st
        if not nodes:
            return
        allow_unknown = self.p["backlog_unknown_ok"]

        def blocking(pk: PortKey) -> bool:
            st = nodes[pk]
            return st.backlog is True or st.wd_recent or (st.backlog is None and allow_unknown)

        graph = PausedBy(nodes, (lambda pk: topo.peer(*pk)) if have_topo else (lambda _pk: None), blocking)
        succ = graph.successors

        # Deadlocks: cycles among stuck / watchdog-fired ports only (every member condition
        # holds) that cannot drain.
        dl_nodes = [pk for pk, st in nodes.items() if (st.stuck is not None or st.wd_recent) and st.has_data]
        in_deadlock: set[PortKey] = set()
        deadlocks: list[Deadlock] = []
        if have_topo and len(dl_nodes) >= 2:
            for comp in deadlock_cycles(dl_nodes, lambda pk: graph.successors(pk, hairpin=True)):
                members = sorted((nodes[pk] for pk in comp), key=lambda s: s.pk)
                deadlocks.append(Deadlock(prio, members, watchdog=all(m.wd_recent for m in members)))
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
        out.trees.extend(t for t in trees.values() if t.confirmed or t.origin in self.nic)
        out.deadlocks.extend(deadlocks)
        rooted.update(trees)

    def _contradicted(self, st: PfcState, topo: Any, store: CounterStore, side: str) -> bool:
        """Both ends of a cable see the same pause: one end's PAUSED (or SENDS) state is
        stale when the other end polled later, has counters for that direction (``side``
        pfc_tx_pause or pfc_rx_pause) and no longer shows it. Targets are polled one after
        another, so without this a pass mixes one device's new poll with its neighbours'
        previous one, and a storm that just ended leaves a phantom sink (a false origin)
        on the first switch polled. A port's own watchdog event is never overruled."""
        if st.wd_recent:
            return False
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
    out.update((st.pk, st.prio) for st in a.unattributed)
    for d in a.deadlocks:
        out.update((m.pk, m.prio) for m in d.members)
    return out
