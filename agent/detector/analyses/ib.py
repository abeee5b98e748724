"""ib: InfiniBand wait fractions, the tick self-check, held-data and stall tests, credit-loop and stall incidents.

Read by ``credit_deadlock`` (loops and stalls), ``congestion`` (waits, and which ports an
incident already explains) and ``packet_loss`` (the incident a port's discards belong to).
The XmitWait arithmetic (ticks per device generation, f_wait, r_wait) is :mod:`.ib_wait`.

InfiniBand is lossless by credit-based link flow control (IBTA specification vol. 1, link
layer): a port sends only while its peer advertises buffer credits, so a receiver that
stops draining stalls its senders, and a cycle of such waits is a credit loop.

A port is **stalled** (blocked for the interval) when, on a link that stayed up, it held
data (XmitWait counting at >= ``min_wait_ticks_per_s``, or the 32-bit counter rising to its
cap) AND sent below ``progress_line_fraction`` (1 %) of line rate (any byte when the speed
is unknown). That needs no tick. It must be corroborated by one signal more: f_wait >=
``stall_wait_fraction`` (0.95) with a tick known for the device generation, the cable peer
receiving ~nothing, rising PortXmitDiscards, or XmitWait saturating. Evidence lists which
(``blocked_because``), in plain words. A computed f_wait above 1 means the tick is wrong for
the device: ``fabricmon_port_xmit_wait_tick_suspect`` says so and the tick-free test decides.

A 32-bit XmitWait that already sits at its cap (old firmware without the 64-bit counters:
IBA counters stop at all-ones) says nothing; then rising PortXmitDiscards with nothing sent
show the port held data (only a port that cannot send lets packets outlive the head-of-queue
lifetime), and the cable peer's silent receive side corroborates.

**Leaky loops.** A loop broken by head-of-queue lifetime is not frozen: per poll its members
wait 70-100 %, send a trickle and discard in bursts (OpenSM's switch HOQ lifetime is about
1.07 s, opensm.conf ``head_of_queue_lifetime 0x12``). Graph membership therefore uses a
looser per-poll test than a stall (``loop_wait_fraction`` 0.5 and ``loop_line_fraction`` 5 %,
corroborated the same way), and a port that still holds data and was blocked or discarding
within ``leaky_window`` (60 s) stays in the graph: the loop is found on its first polls and
is one incident over its whole life, not one per burst. Alone, a port at the loop level is no
incident; only a cycle is.

**Credit graph.** Port ``e`` on switch X waits for credits from its peer ``peer(e)`` on Y.
Y's receive buffer for that link drains only through Y's egress ports, so ``e`` depends on
every blocked egress ``e2`` of Y other than ``peer(e)`` (no hairpin). Which egress holds
which ingress buffer is not counted, so this over-approximates; only blocked ports enter
the graph, which keeps heavy but moving traffic out of it. The graph walk is
:func:`fabricmon.agent.detector.graph.tarjan_scc` (iterative).

* A strongly connected component of >= 2 blocked ports is a **credit loop**, unless it is a
  **congestion tree** (:meth:`IbAnalysis._tree_roots`): it reaches stalled ports that face
  hosts and none of its members discarded at its own head within ``leaky_window``. A dead
  receiver's waits spread upstream and, on a fat tree's cables both ways, form cycles too; but a
  loop's members hold each other's buffers and leak only through their own head-of-queue
  discards (or are frozen), while a tree drains into its roots' discards and its members keep
  moving. A tree's ports are the congestion rule's, as victims.
* A stalled port alone whose receiver has no blocked egress is a **stall**: the root of what
  waits behind it. A stalled port whose receiver has blocked egresses waits behind them.
* :meth:`IbAnalysis.behind` walks the tree back from each stall and loop: the congestion rule
  names the roots a waiting port is behind (``waiting_behind``) and carries their incident.

Each loop and stall is one incident with an id on every port it holds: the per-port loss on
those ports joins it (``packet_loss`` evidence ``incident``) and ``congestion`` leaves their
XmitWait alone: one fault, one incident.

**The fabric's normal** (:class:`.ib_wait.FabricNormal`, ``normal_window``): the median wait
over the fabric's ports per pass, and over the window. Congestion is judged above it.

Exports ``fabricmon_port_xmit_wait_ratio{device,port}`` (f_wait of the last interval, 0..1),
``fabricmon_port_xmit_wait_tick_suspect{device,port}``,
``fabricmon_port_incident{device,port,incident}`` (1 while the port is held by that loop or
stall) and ``fabricmon_fabric_xmit_wait_normal_ratio{measure}``.

**On columns.** XmitWait moves on most ports of a busy fabric, so the per-port arithmetic
runs as whole-array passes over the moved ports (:meth:`CounterStore.columns`): f_wait and
r_wait (:meth:`IbAnalysis._wait_fractions`, ticks per port from :func:`.ib_wait.ticks`), the
tick self-check, the fabric's normal, and the first halves of both stall tests
(:meth:`IbAnalysis._holding`: held data, and sending at least the larger line fraction).
Only the ports those leave (held data and sent little, or XmitWait at its cap) are judged
one by one, with their evidence, and only they enter the graph walks.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from itertools import compress
from operator import itemgetter
from typing import Any, NamedTuple

import numpy as np

from fabricmon.agent.detector.analyses.fabric import FabricAnalysis, FabricShape
from fabricmon.agent.detector.analyses.ib_wait import (
    LINK_WIDTH,
    MAX_PLAUSIBLE_F_WAIT,
    REPORTED_TICK,
    XMIT_WAIT,
    FabricNormal,
    IbParams,
    generation,
    tick_origin,
    tick_s,
    ticks,
    wait_last,
)
from fabricmon.agent.detector.base import Analysis, DetectContext, ExportedGauge
from fabricmon.agent.detector.common import LINK_SPEED, RX_BYTES, TX_BYTES, RatioGauge, link_ok, speed_bytes, tx_progress
from fabricmon.agent.detector.graph import tarjan_scc
from fabricmon.agent.store import SATURATED, CounterColumn, CounterStore, PortColumns, PortEntry, PortKey, Series
from fabricmon.core.topology import Topology

Held = tuple[Series, bool, bool, Series | None]  # XmitWait, saturated, rose to its cap, tx_discards


class _Waits(NamedTuple):
    """One pass's XmitWait arithmetic over the ports whose XmitWait moved, as arrays in ``keys`` order."""

    keys: list[PortKey]
    cols: PortColumns
    xw: CounterColumn
    tx: CounterColumn  # tx bytes
    speed: np.ndarray  # link speed gauge, bytes/s (NaN: none)
    tick: np.ndarray  # seconds per XmitWait tick, NaN where unknown
    f: np.ndarray  # f_wait, NaN where unknown, invalid or suspect
    r: np.ndarray  # r_wait, NaN where the interval is invalid or no tx bytes were counted
    suspect: np.ndarray  # bool: the tick failed the self-check


@dataclass(slots=True)
class CreditLoop:
    """A cycle of ports each waiting for credits from the next."""

    members: list[PortKey]  # in the graph walk's order
    names: list[str]  # "device:port", sorted
    incident: str
    discards: float  # head-of-queue discards of all members this interval
    numbers: dict[str, dict[str, Any]]  # per member: its wait, what it sent, its discards
    evidence: dict[PortKey, dict[str, Any]]  # per member: its stall evidence


@dataclass(slots=True)
class CongestionTree:
    """A cycle of waiting ports that drains into stalled ports facing hosts: congestion spread
    from a dead or slow receiver, not a credit loop (:meth:`IbAnalysis._tree_roots`)."""

    cycle: list[PortKey]
    roots: list[PortKey]


@dataclass(slots=True)
class Stall:
    """A port that holds data and sends nothing, outside any cycle."""

    port: PortKey
    incident: str
    evidence: dict[str, Any]


def _at_cap(entry: PortEntry | None) -> bool:
    xw = entry.counter(*XMIT_WAIT) if entry is not None else None
    return xw is not None and xw.status == SATURATED


def _member(ev: dict[str, Any], entry: PortEntry | None) -> dict[str, Any]:
    """One loop member's numbers for the evidence: its wait, what it sent (share of line
    rate when the speed is known) and its head-of-queue discards."""
    out: dict[str, Any] = {k: ev[k] for k in ("xmit_wait_fraction", "sent_bytes_per_s", "tx_discards") if k in ev}
    speed = speed_bytes(entry) if entry is not None else None
    if speed and "sent_bytes_per_s" in ev:
        out["sent_line_fraction"] = round(ev["sent_bytes_per_s"] / speed, 5)
    return out


class IbAnalysis(Analysis):
    """Per pass: f_wait of every port whose XmitWait moved (:attr:`fractions`), the ports whose
    tick failed the self-check (:attr:`suspect`), and the credit loops and stalls
    (:attr:`loops`, :attr:`stalls`, :meth:`incident`)."""

    name = "ib"
    Params = IbParams
    needs = ("fabric",)  # which device is a host: a stalled port facing one roots a congestion tree

    def __init__(self, params: IbParams | None = None) -> None:
        super().__init__(params)
        self.p: IbParams = self.params  # type: ignore[assignment]
        self.fractions: dict[PortKey, float | None] = {}
        self.suspect: set[PortKey] = set()
        self.loops: list[CreditLoop] = []
        self.stalls: list[Stall] = []
        self.incidents: dict[PortKey, tuple[str, str]] = {}  # port -> (incident id, what it is in words)
        self.stalled: dict[PortKey, dict[str, Any]] = {}  # kept until the port's XmitWait is read again
        self.judged_t: dict[PortKey, float] = {}  # stalled port -> poll time of the XmitWait reading judged
        self.blocked_t: dict[PortKey, float] = {}  # port -> last time it was stalled or discarded while holding data
        self.discard_t: dict[PortKey, float] = {}  # port -> last time it discarded at its own head while holding data
        self.trees: list[CongestionTree] = []  # cycles of waits that drain into stalled host-facing ports: no loop
        self.normal = {"f_wait": FabricNormal(), "r_wait": FabricNormal()}  # the fabric's usual wait
        self._last_t: float | None = None  # the last pass that read XmitWait: what was read since is this pass's
        self._shape: FabricShape | None = None
        self._topology: Topology | None = None
        self._store: CounterStore | None = None
        self._gens: tuple[list[PortKey], int, tuple[np.ndarray, np.ndarray]] | None = None  # see _generations
        self._ticks: tuple[list[PortKey], np.ndarray] | None = None  # the pass's moved ports and their ticks (for tick)
        self._tick_of: dict[PortKey, float] | None = None  # the same by port, made when tick() is first asked
        self.tick_suspect = RatioGauge(
            "fabricmon_port_xmit_wait_tick_suspect",
            "1 when the port's XmitWait implied waiting longer than the interval with the tick assumed for its device "
            "generation (the tick is wrong; the tick-free stall test decides for it).",
            ("device", "port"),
        )
        self.wait_ratio = RatioGauge(
            "fabricmon_port_xmit_wait_ratio",
            "Share of the last interval an InfiniBand port had data to send but no credits (f_wait).",
            ("device", "port"),
        )
        # One fault, one incident: the loop's (or stall's) id on every port it holds, so the
        # per-port loss on those ports (packet_loss evidence ``incident``) joins it in PromQL.
        self.incident_gauge = RatioGauge(
            "fabricmon_port_incident",
            "1 while the port is part of an InfiniBand credit-loop or stall incident (incident: its id, also in the "
            "evidence of the credit_deadlock, congestion and packet_loss findings on these ports).",
            ("device", "port", "incident"),
        )
        self.normal_gauge = RatioGauge(
            "fabricmon_fabric_xmit_wait_normal_ratio",
            "The fabric's usual InfiniBand wait, which congestion is judged above: the median over its ports of f_wait "
            "or r_wait (measure), then over the ib analysis's normal_window.",
            ("measure",),
        )

    def update(self, ctx: DetectContext) -> None:
        self._store, self._topology = ctx.store, ctx.topology
        self._shape = ctx.analysis(FabricAnalysis).shape
        w = self._wait_fractions(ctx)
        self._ticks, self._tick_of = (w.keys, w.tick), None  # (not the pass's other columns: memory)
        self.fractions = dict(zip(w.keys, np.where(np.isnan(w.f), None, w.f).tolist(), strict=True))
        self.suspect = set(compress(w.keys, w.suspect.tolist()))
        self._export_waits(ctx, w)
        self._update_normal(ctx, w)
        stalled, leaky = self._blocked(ctx, w)
        self.loops, self.stalls, self.incidents = self._incidents(ctx, stalled, leaky)
        self._export_incidents()

    def metrics(self) -> Iterable[ExportedGauge]:
        return (self.wait_ratio.metric(), self.tick_suspect.metric(), self.incident_gauge.metric(), self.normal_gauge.metric())

    # ------------------------------------------------------------------ what rules ask
    def tick(self, pk: PortKey, entry: PortEntry) -> float | None:
        """The port's tick, None when unknown or when the self-check found it wrong this pass."""
        if pk in self.suspect:
            return None
        if self._ticks is not None:  # the pass's ticks of the moved ports, by port (made when first asked)
            if self._tick_of is None:
                keys, tick = self._ticks
                self._tick_of = dict(zip(keys, tick.tolist(), strict=True))
            t = self._tick_of.get(pk)
            if t is not None:
                return None if math.isnan(t) else t
        return tick_s(entry, self.p, self._model(pk[0]))

    def incident(self, pk: PortKey) -> tuple[str, str] | None:
        """(incident id, what it is in words) when the port is in a credit loop or stalled this pass."""
        return self.incidents.get(pk)

    def normal_wait(self, measure: str = "f_wait") -> float:
        """The fabric's usual wait for ``measure`` (``f_wait`` or ``r_wait``); 0 before any pass saw one."""
        return self.normal[measure].value or 0.0

    def behind(self, waiting: Iterable[PortKey]) -> dict[PortKey, list[PortKey]]:
        """For each of ``waiting`` (ports whose waits a rule judged congested) that waits behind a
        stalled port or a credit loop of this pass, the nearest of those ports (the roots), sorted.

        Credit flow control spreads a stall upstream (IBTA vol. 1 link layer: a sender waits for
        its receiver's credits): a port waits behind a root when its cable peer's switch is the
        root's switch (what it sends there queues for the root's egress), or is a switch with a
        port that waits behind it, and so on: walked backwards from each root through
        ``waiting``. That is a congestion tree: its root and the victims behind it (Liu et al.,
        "The dynamic nature of congestion in InfiniBand", IEMCON 2015, after the IBTA congestion
        control annex's root and victim of congestion). Which egress a port's packets go to is not
        counted, so the tree is what the waits allow, not proof of each path: only the nearest
        roots are named (a longer way round would go down a fat tree and up again, which its
        routing does not do).
        """
        roots = [st.port for st in self.stalls] + [pk for loop in self.loops for pk in loop.members]
        topo = self._topology
        if not roots or topo is None:
            return {}
        by_peer_device: dict[str, list[PortKey]] = {}
        for pk in sorted(set(waiting) - set(roots)):
            pe = topo.peer(*pk)
            if pe is not None:
                by_peer_device.setdefault(pe[0], []).append(pk)
        found: dict[PortKey, tuple[int, list[PortKey]]] = {}  # port -> (hops to its nearest roots, those roots)
        for root in roots:
            frontier, seen, hops = [root], {root}, 0
            while frontier:
                hops += 1
                nxt = []
                for r in frontier:
                    for e in by_peer_device.get(r[0], ()):
                        if e not in seen and topo.peer(*e) != r:
                            seen.add(e)
                            nxt.append(e)
                            best = found.get(e)
                            if best is None or hops < best[0]:
                                found[e] = (hops, [root])
                            elif hops == best[0]:
                                best[1].append(root)
                frontier = nxt
        return {e: sorted(rs) for e, (_, rs) in found.items()}

    def _model(self, device: str) -> str:
        d = self._store.devices.get(device) if self._store is not None else None
        return d.model if d is not None else ""

    # ------------------------------------------------------------------ waits
    def _wait_fractions(self, ctx: DetectContext) -> _Waits:
        """f_wait and r_wait of the last interval for every port whose XmitWait moved in this
        pass, as whole arrays (XmitWait moves on most ports of a busy fabric: one numpy pass,
        not a Python visit per port); the dict :attr:`fractions` is made from them.

        f_wait is NaN (None in :attr:`fractions`) where the tick is unknown (no link speed and no
        configured tick: r_wait serves), the interval is invalid, or the self-check failed (f_wait
        above :data:`.ib_wait.MAX_PLAUSIBLE_F_WAIT`: those ports are :attr:`suspect`). Ports whose
        XmitWait did not move have f_wait 0 and are not listed.
        """
        keys = list(ctx.changes.moved_series(XMIT_WAIT[0]))  # type: ignore[union-attr]
        cols = ctx.store.columns(keys)
        xw, tx = cols.counter(*XMIT_WAIT), cols.counter(*TX_BYTES)
        speed = cols.gauge(*LINK_SPEED)
        tick = ticks(speed, cols.gauge(*REPORTED_TICK), cols.gauge(*LINK_WIDTH), *self._generations(cols, ctx.store), self.p)
        with np.errstate(invalid="ignore", divide="ignore"):
            f = xw.delta * tick / xw.dt
            suspect = f > MAX_PLAUSIBLE_F_WAIT
            f = np.where(suspect, np.nan, np.minimum(f, 1.0))
            den = xw.delta + tx.delta / 4  # r_wait: XmitWait against data words (tx bytes / 4)
            known = ~(np.isnan(xw.delta) | np.isnan(xw.dt) | np.isnan(tx.delta))  # as ib_wait.wait_last
            r = np.where(known, np.where(den > 0, xw.delta / den, 0.0), np.nan)
        return _Waits(keys, cols, xw, tx, speed, tick, f, r, suspect)

    def _generations(self, cols: PortColumns, store: CounterStore) -> tuple[np.ndarray, np.ndarray]:
        """Per port of ``cols``, its device generation's (bytes per tick, per lane)
        (:func:`.ib_wait.generation`): kept for every port of the store's column order while
        that order and the devices' models are the same."""
        order = store.column_order()
        if self._gens is None or self._gens[0] is not order or self._gens[1] != store.device_writes:
            gb, gl = self._generations_of([*order, ("", "")])  # the last: a port not in the store
            self._gens = (order, store.device_writes, (gb, gl))
        gb, gl = self._gens[2]
        return gb[cols.at], gl[cols.at]

    def _generations_of(self, keys: list[PortKey]) -> tuple[np.ndarray, np.ndarray]:
        devices = list(map(itemgetter(0), keys))
        distinct = list(dict.fromkeys(devices))
        at = dict(zip(distinct, range(len(distinct)), strict=True))
        gens = list(map(generation, map(self._model, distinct)))
        idx = np.fromiter(map(at.__getitem__, devices), np.int64, len(devices))
        return (np.array([g[0] for g in gens], np.float64)[idx] if gens else np.zeros(0),
                np.array([g[1] for g in gens], np.bool_)[idx] if gens else np.zeros(0, bool))

    def _export_waits(self, ctx: DetectContext, w: _Waits) -> None:
        """f_wait where XmitWait moved, 0 on updated ports where it did not; the tick suspects."""
        fracs, updated, ports = self.fractions, ctx.updated, ctx.store.ports
        values = self.wait_ratio.values
        waited = w.f > 0
        values.update(zip(compress(w.keys, waited.tolist()), w.f[waited].tolist(), strict=True))
        for pk in [pk for pk in values.keys() - fracs.keys() if pk in updated]:
            entry = ports.get(pk)  # type: ignore[arg-type]
            xw = entry.counter(*XMIT_WAIT) if entry is not None else None
            self.wait_ratio.set(pk, 0.0 if xw is not None and xw.delta == 0 else None)
            if xw is None:
                del values[pk]
        for key in [k for k in self.tick_suspect.values if k in updated and k not in self.suspect]:
            self.tick_suspect.set(key, 0.0)
        for pk in self.suspect:
            self.tick_suspect.set(pk, 1.0)

    def _update_normal(self, ctx: DetectContext, w: _Waits) -> None:
        """Feed the fabric's normal (:class:`.ib_wait.FabricNormal`) with this pass's waits: f_wait
        where the tick is known, r_wait where it is not, and 0 for every port whose XmitWait was
        read since the last pass and did not move. A port a known fault holds (an incident of
        the last pass) is not the fabric's normal."""
        keep = np.ones(len(w.keys), bool)
        if self.incidents:
            at = dict(zip(w.keys, range(len(w.keys)), strict=True))
            keep[[at[pk] for pk in self.incidents if pk in at]] = False
        has_f = ~np.isnan(w.f)
        f_waits = w.f[keep & has_f]
        r_waits = w.r[keep & ~has_f & ~w.suspect & ~np.isnan(w.r)]
        since = self._last_t if self._last_t is not None else -1.0
        idle = 0
        ports = ctx.store.ports
        for pk in ctx.updated.difference(self.fractions):
            entry = ports.get(pk)
            xw = entry.counter(*XMIT_WAIT) if entry is not None else None
            if xw is not None and xw.delta == 0 and xw.poll_t > since:
                idle += 1
        if len(f_waits) or len(r_waits) or idle:
            self._last_t = ctx.t  # a pass that read XmitWait (not one that brought only states)
        window = self.p.normal_window
        self.normal["f_wait"].add(ctx.t, f_waits, idle if len(f_waits) else 0, window)
        self.normal["r_wait"].add(ctx.t, r_waits, idle if len(r_waits) else 0, window)
        for measure, normal in self.normal.items():
            if normal.value is not None:
                self.normal_gauge.values[(measure,)] = normal.value

    # ------------------------------------------------------------------ blocked ports
    def _blocked(self, ctx: DetectContext, w: _Waits) -> tuple[dict[PortKey, dict[str, Any]], dict[PortKey, dict[str, Any]]]:
        """(stalled ports, loop-level ports) with their evidence. Stalled ports are kept for ports
        not updated in this pass and recomputed for the others; a port whose XmitWait did not move
        is not stalled, and most that moved send plenty."""
        ports, updated = ctx.store.ports, ctx.updated
        # A verdict holds until the port's XmitWait is read again: a poll of another source that
        # brings only its state or link rate (UFM REST beside UFM Telemetry) judges nothing.
        stalled = {pk: ev for pk, ev in self.stalled.items() if pk in ports and not self._read_again(pk, ports[pk], updated)}
        blocked_now: dict[PortKey, dict[str, Any]] = {}  # leaking-loop level, not stalled
        discarding = ctx.moved("tx_discards")
        holding, judge = self._holding(ctx, w, discarding)
        for pk, f in judge:
            entry = ports.get(pk)
            held = None if entry is None else self._held(entry)
            if entry is None or held is None:
                continue
            holding.add(pk)
            if tx_progress(entry, None, max(self.p.progress_line_fraction, self.p.loop_line_fraction)) is not False:
                continue
            ev = self._stall(ctx, pk, entry, f, held)
            if ev is not None:
                stalled[pk] = ev
            elif (ev := self._stall(ctx, pk, entry, f, held, leaky=True)) is not None:
                blocked_now[pk] = ev
        for pk in discarding & holding:
            disc = ports[pk].counter("tx_discards")
            if disc is not None and disc.delta:
                self.discard_t[pk] = ctx.t  # discarded at its own head while holding data
        self.stalled = stalled
        self._note_judged({*stalled, *blocked_now}, ports)
        leaky = self._leaky(ctx, {**stalled, **blocked_now}, holding, w.keys, discarding)
        leaky.update(blocked_now)
        return stalled, leaky

    def _holding(self, ctx: DetectContext, w: _Waits, discarding: set[PortKey]) -> tuple[set[PortKey], list[tuple[PortKey, float | None]]]:
        """Whole-array first halves of both stall tests over the moved ports: (the ports known to
        hold data, the ports to judge one by one with their f_wait).

        Held data without a cap is XmitWait counting at >= ``min_wait_ticks_per_s``; a port that
        did not hold data, or that sent at least the larger line fraction of both stall tests,
        passes neither (most ports of a fabric), so it is settled here. Left to judge: held
        ports that sent less or whose progress is unknown, every port whose XmitWait sits at
        its cap (:meth:`_held` decides those), and the ports whose XmitWait is at its cap and did
        not move but whose discards rose (they held data: the discards bring them in)."""
        p, fracs, ports = self.p, self.fractions, ctx.store.ports
        with np.errstate(invalid="ignore"):
            held = ~w.xw.saturated & (w.xw.rate >= p.min_wait_ticks_per_s)
            sending = (w.speed > 0) & (w.tx.rate >= max(p.progress_line_fraction, p.loop_line_fraction) * w.speed)
        holding = set(compress(w.keys, held.tolist()))
        f = w.f.tolist()
        judge = [(w.keys[i], None if math.isnan(f[i]) else f[i])
                 for i in np.flatnonzero((held & ~sending) | w.xw.saturated).tolist()]
        judge += [(pk, None) for pk in discarding if pk not in fracs and _at_cap(ports.get(pk))]
        return holding, judge

    def _read_again(self, pk: PortKey, entry: PortEntry, updated: set[PortKey]) -> bool:
        """True when the port's XmitWait has a reading newer than the one its verdict judged."""
        if pk not in updated:
            return False
        xw = entry.counter(*XMIT_WAIT)
        return xw is None or xw.poll_t != self.judged_t.get(pk)

    def _note_judged(self, pks: Iterable[PortKey], ports: dict[PortKey, PortEntry]) -> None:
        judged = {}
        for pk in pks:
            xw = ports[pk].counter(*XMIT_WAIT) if pk in ports else None
            if xw is not None:
                judged[pk] = xw.poll_t
        self.judged_t = judged

    def _held(self, entry: PortEntry) -> Held | None:
        """(XmitWait, saturated, rose to its cap, tx_discards) when the port held data in the
        interval (the first half of both stall tests), else None.

        Saturated: the 32-bit counter rose to its cap this interval (it held data), or it sat
        at the cap already and says nothing now (IBA counters stop at the cap). Then the
        head-of-queue discards show the port held data: packets waited at the head longer
        than the lifetime (IBTA vol. 1, HOQLife), which only a port that cannot send does.
        """
        xw = entry.counter(*XMIT_WAIT)
        if xw is None:
            return None
        saturated = xw.status == SATURATED
        rose = saturated and xw.increases(1) > 0
        disc = entry.counter("tx_discards")
        if saturated and not rose:
            if disc is None or not disc.delta:
                return None
        elif not saturated:
            rate = xw.rate
            if rate is None or rate < self.p.min_wait_ticks_per_s:
                return None
        return xw, saturated, rose, disc

    def _stall(self, ctx: DetectContext, pk: PortKey, entry: PortEntry, f: float | None, held: Held,
               leaky: bool = False) -> dict[str, Any] | None:
        """Evidence when the port was blocked for the interval, else None. ``held``: what
        :meth:`_held` found (the port held data).

        Blocked = it held data (XmitWait counting at >= ``min_wait_ticks_per_s``, or the
        32-bit counter rising to its cap) AND it sent below ``progress_line_fraction`` of
        line rate, on a link that stayed up. No tick is needed for that. It must be
        corroborated by at least one signal that does not come from this port's XmitWait
        rate: its f_wait >= ``stall_wait_fraction`` with a tick known for the device, the cable
        peer receiving below ``peer_rx_line_fraction`` of line rate (PortRcvData ~0), rising
        PortXmitDiscards (the head-of-queue lifetime dropping what it could not send: IBTA
        vol. 1, HOQLife), or the 32-bit XmitWait saturating.

        ``leaky``: the test for a member of a loop that leaks through head-of-queue discards
        (``loop_line_fraction``, ``loop_wait_fraction`` instead of the stall levels). It
        only ever puts a port into the credit graph: alone, such a port is no incident.
        """
        p = self.p
        line = p.loop_line_fraction if leaky else p.progress_line_fraction
        if tx_progress(entry, None, line) is not False or not link_ok(entry):
            return None
        wait_level = p.loop_wait_fraction if leaky else p.stall_wait_fraction
        ev: dict[str, Any] = {"stalled": True}
        why = self._own_signals(pk, entry, f, held, wait_level, ev)
        why += self._peer_silent(ctx, pk, entry, p.loop_line_fraction if leaky else p.peer_rx_line_fraction, ev)
        why += self._discard_signals(held, ev)
        if not why:
            return None
        # At the loop level the port may send up to 5 % of line rate, so a quiet link's receive
        # side is no proof of blocking: the wait itself (f_wait with the device's tick), head-of-
        # queue discards or XmitWait rising to its cap must show it.
        _, _, rose, disc = held
        discarding = disc is not None and bool(disc.delta)
        if leaky and not ((f is not None and f >= wait_level) or discarding or rose):
            return None
        ev["blocked_because"] = why
        if leaky:
            ev["leaky"] = True
        return ev

    def _own_signals(self, pk: PortKey, entry: PortEntry, f: float | None, held: Held, wait_level: float,
                     ev: dict[str, Any]) -> list[str]:
        """The port's own numbers for the evidence, and its f_wait as a signal when it reaches ``wait_level``."""
        why: list[str] = []
        rate = held[0].rate
        if rate is not None:
            ev["xmit_wait_ticks_per_s"] = round(rate)
        tx = entry.counter(*TX_BYTES)
        if tx is not None and tx.rate is not None:
            ev["sent_bytes_per_s"] = round(tx.rate)
        if f is not None:
            ev["xmit_wait_fraction"] = round(f, 4)
            ev["xmit_wait_tick_from"] = tick_origin(entry, self.p, self._model(pk[0]))
            if f >= wait_level:
                why.append(f"waited {f:.0%} of the interval")
        _, r = wait_last(entry, None)
        if r is not None:
            ev["xmit_wait_ratio"] = round(r, 4)
        return why

    @staticmethod
    def _peer_silent(ctx: DetectContext, pk: PortKey, entry: PortEntry, peer_line: float, ev: dict[str, Any]) -> list[str]:
        """The cable peer received below ``peer_line`` of line rate (nothing, without a speed)."""
        speed = speed_bytes(entry)
        peer = ctx.topology.peer(*pk)
        pe = ctx.store.port(peer) if peer is not None else None
        prx = pe.counter(*RX_BYTES) if pe is not None else None
        if prx is None or prx.rate is None or prx.delta is None:
            return []
        ev["peer_received_bytes_per_s"] = round(prx.rate)
        if (prx.rate < peer_line * speed) if speed else prx.delta == 0:
            share = f"{prx.rate / speed:.2%} of line rate" if speed else "nothing"
            return [f"its cable peer {peer[0]} {peer[1]} received {share}"]  # type: ignore[index]
        return []

    @staticmethod
    def _discard_signals(held: Held, ev: dict[str, Any]) -> list[str]:
        """Head-of-queue discards and XmitWait rising to its cap, as signals and evidence."""
        _, saturated, rose, disc = held
        why: list[str] = []
        discarding = disc is not None and bool(disc.delta)
        if discarding and not (saturated and not rose):  # else the discards are the held-data signal itself
            ev["tx_discards"] = disc.delta  # type: ignore[union-attr]
            why.append(f"{int(disc.delta)} packets discarded at the head of the queue")  # type: ignore[union-attr]
        elif discarding:
            ev["tx_discards"] = disc.delta  # type: ignore[union-attr]
            ev["xmit_wait_at_cap"] = True  # held data shown by the discards, not by XmitWait
            n = int(disc.delta)  # type: ignore[union-attr]
            ev["held_data_because"] = (f"XmitWait sits at its 32-bit cap and says nothing; {n} packets "
                                       f"discarded at the head of the queue show the port held data")
        if rose:
            ev["xmit_wait_saturated"] = True
            why.append("the 32-bit XmitWait counter rose to its cap")
        return why

    def _leaky(self, ctx: DetectContext, stalled: dict[PortKey, dict[str, Any]], holding: set[PortKey],
               order: list[PortKey], discarding: set[PortKey]) -> dict[PortKey, dict[str, Any]]:
        """Ports holding data now that were stalled, or discarded while holding data, within
        ``leaky_window``: members of a loop that leaks (see the parameter). ``holding``: the
        ports that held data (every port this finds is among them); ``order``: the moved ports;
        ``discarding``: the ports whose tx_discards rose."""
        t = ctx.t
        fracs = self.fractions
        blocked = self.blocked_t
        for pk in stalled:
            if pk in fracs:
                blocked[pk] = t
        out: dict[PortKey, dict[str, Any]] = {}
        limit = t - self.p.leaky_window
        # Only a port blocked within the window, or discarding now, can pass (in the moved order).
        can = (holding & (blocked.keys() | discarding)).intersection(fracs).difference(stalled)
        for pk in [pk for pk in order if pk in can] if can else ():
            f = fracs[pk]
            entry = ctx.store.port(pk)
            xw = entry.counter(*XMIT_WAIT) if entry is not None else None
            if xw is None or (xw.rate or 0.0) < self.p.min_wait_ticks_per_s or not link_ok(entry):  # type: ignore[arg-type]
                continue
            disc = entry.counter("tx_discards")  # type: ignore[union-attr]
            if disc is not None and disc.delta:
                blocked[pk] = t
            if blocked.get(pk, limit - 1) < limit:
                continue
            ev: dict[str, Any] = {"stalled": True, "leaky": True, "xmit_wait_ticks_per_s": round(xw.rate or 0.0),
                                  "last_blocked_s_ago": round(t - blocked[pk], 3)}
            if f is not None:
                ev["xmit_wait_fraction"] = round(f, 4)
            if disc is not None and disc.delta:
                ev["tx_discards"] = disc.delta
            ev["blocked_because"] = [f"blocked or discarding {t - blocked[pk]:.0f} s ago and still holding data"]
            out[pk] = ev
        for times in (blocked, self.discard_t):
            if len(times) > 2 * len(fracs) + 64:
                for pk in [k for k, v in times.items() if v < limit]:
                    del times[pk]
        return out

    # ------------------------------------------------------------------ incidents
    def _incidents(self, ctx: DetectContext, stalled: dict[PortKey, dict[str, Any]], leaky: dict[PortKey, dict[str, Any]],
                   ) -> tuple[list[CreditLoop], list[Stall], dict[PortKey, tuple[str, str]]]:
        """Credit loops, stalls and congestion trees on the credit graph (see the module doc).

        * A strongly connected component of >= 2 blocked ports is a **credit loop**, unless it is
          a congestion tree (:meth:`_tree_roots`): then its ports wait behind the tree's roots
          and are the congestion rule's to judge, with the roots named (:meth:`behind`).
        * A stalled port alone is a **stall** (a root) when its receiver has no blocked egress to
          wait for: the receiver itself does not drain (a dead or slow HCA, a hung switch). A
          stalled port whose receiver has blocked egresses waits behind them: it is a victim.
        * A port at the loop level alone is neither.

        A loop's leaking members are kept with the stalled ports (``self.stalled``) for the
        passes that do not read them again."""
        self.trees = []
        if not stalled and not leaky:
            return [], [], {}
        topo = ctx.topology
        by_device: dict[str, list[PortKey]] = {}
        for pk in [*stalled, *leaky]:
            by_device.setdefault(pk[0], []).append(pk)

        def succ(pk: PortKey) -> list[PortKey]:
            pe = topo.peer(*pk)
            return [] if pe is None else [q for q in by_device.get(pe[0], ()) if q != pe]

        loops: list[CreditLoop] = []
        stalls: list[Stall] = []
        for comp in tarjan_scc(sorted({*stalled, *leaky}), succ):
            if len(comp) < 2:
                pk = comp[0]
                if pk in stalled and not stalled[pk].get("leaky") and not succ(pk):
                    stalls.append(Stall(pk, f"stall:{pk[0]}:{pk[1]}", stalled[pk]))
                continue  # leaking alone, or blocked behind another blocked port: congestion's to judge
            roots = self._tree_roots(comp, succ, stalled, ctx.t)
            if roots:
                self.trees.append(CongestionTree(sorted(comp), roots))
                continue
            stalled.update((pk, leaky[pk]) for pk in comp if pk in leaky)
            loops.append(self._loop(comp, stalled, ctx.store.ports))
        incidents: dict[PortKey, tuple[str, str]] = {}
        for st in stalls:
            incidents[st.port] = (st.incident, f"the stalled port {st.port[0]} {st.port[1]}")
        for loop in loops:
            for pk in loop.members:
                incidents[pk] = (loop.incident, f"the credit loop {', '.join(loop.names)}")
        return loops, stalls, incidents

    @staticmethod
    def _loop(comp: list[PortKey], stalled: dict[PortKey, dict[str, Any]], ports: dict[PortKey, PortEntry]) -> CreditLoop:
        names = sorted(f"{d}:{p}" for d, p in comp)
        return CreditLoop(comp, names, f"credit_loop:{names[0]}", sum(stalled[pk].get("tx_discards", 0) for pk in comp),
                          {f"{d}:{p}": _member(stalled[(d, p)], ports.get((d, p))) for d, p in sorted(comp)},
                          {pk: stalled[pk] for pk in comp})

    def _tree_roots(self, comp: list[PortKey], succ: Any, stalled: dict[PortKey, dict[str, Any]], t: float) -> list[PortKey]:
        """The roots when the cycle ``comp`` is a congestion tree, not a credit loop; else [].

        In a credit loop the members hold each other's buffers: nothing drains but by the
        head-of-queue lifetime expiring at the members' own heads (IBTA vol. 1, HOQLife;
        OpenSM ``head_of_queue_lifetime`` 0x12, about 1.07 s between switches), so a loop that
        moves at all discards on its members, and one that does not is frozen. Behind a dead
        receiver the waits spread upstream through credit flow control (congestion spreading,
        tree saturation: Mizero et al., "A Dynamic Congestion Management System for InfiniBand
        Networks", Supercomputing Frontiers and Innovations 2017; Gran et al., CCGrid 2011) and,
        on a fat tree's cables both ways, form cycles in the topology too; but those buffers drain
        into the stalled ports toward the receiver, whose shorter lifetime (OpenSM
        ``leaf_head_of_queue_lifetime`` 0x10, about 0.27 s, and ``leaf_vl_stall_count``, for
        switch ports facing CAs: UFM Enterprise User Manual, "Appendix: UFM Subnet Manager
        Default Properties") expires first and discards there: the members wait partly, keep
        sending, and never reach their own lifetime. So a cycle is a tree when it reaches
        stalled ports that face hosts (its roots) and none of its members discarded at its own
        head within ``leaky_window``. (With an infinite lifetime, HOQLife >= 0x14, a frozen loop
        that also reaches a stalled host port reads as a tree: its fully stalled members are
        then reported as waiting behind that port.)"""
        since = t - self.p.leaky_window
        if any(self.discard_t.get(pk, since - 1) >= since for pk in comp):
            return []  # discards at the members' own heads: a loop leaking through its lifetime
        shape, topo = self._shape, self._topology
        members, seen, roots = set(comp), set(comp), []
        frontier = list(comp)
        while frontier:
            nxt = []
            for pk in frontier:
                for q in succ(pk):
                    if q in seen:
                        continue
                    seen.add(q)
                    nxt.append(q)
                    pe = topo.peer(*q) if topo is not None else None
                    if q in stalled and not stalled[q].get("leaky") and pe is not None and shape is not None \
                            and shape.is_host(pe[0]) and q not in members:
                        roots.append(q)
            frontier = nxt
        return sorted(roots)

    def _export_incidents(self) -> None:
        now = {(pk[0], pk[1], inc[0]) for pk, inc in self.incidents.items()}
        for key in [k for k in self.incident_gauge.values if k not in now]:
            self.incident_gauge.set(key, 0.0)
        for key in now:
            self.incident_gauge.set(key, 1.0)
