"""The PFC state of one port and priority in the last valid interval, and the pfc analysis's parameters.

The AND of conditions and the device-clocked interval follow SONiC's PFC watchdog storm test
(sonic-swss ``orchagent/pfc_detect_mellanox.lua``: occupancy > 0 and the queue's packet counter
unchanged and pause duration > 0.99 of the poll time):

* **paused**: the port's transmitter was held by its peer: rx pause fraction
  >= ``graph_pause_fraction``, or (no duration counter) pause frames that can have held it
  that long (below), or a watchdog storm event on it;
* **sends**: it holds its peer: tx pause fraction >= ``graph_pause_fraction`` (or frames
  that can have held the peer that long);
* **stuck** (storm level, evidence ``signal: pause_time``): rx pause fraction >=
  ``storm_pause_fraction`` AND no transmit progress on that priority AND (queue occupancy
  > 0 or drops), on a link that stayed up. Without a duration counter (``signal:
  pause_frames``, the shape of SONiC's Broadcom test, sonic-swss
  ``pfc_detect_broadcom.lua``): pause frames that can have held it ``storm_pause_fraction``
  of the interval, no XOFF->XON transition, no progress, backlog;
* **held**: the same continuous pause with a backlog, where progress on the priority cannot
  be measured (no per-queue counter): a storm when its tree confirms it.

Frames only: one pause frame holds a port at most the maximum quanta, 65535 x 512 bit times
(IEEE 802.1Qbb), so a port receiving ``fps`` frames/s was paused at most
``fps / keep_fps`` of the interval, where ``keep_fps = bitrate / (512 x 65535)`` is the rate
that keeps it paused all the time (about 1490 frames/s at 100G, 23,840 at 800G;
:attr:`PfcState.rx_bound`). XON frames and early refreshes only lower the real share, so the
bound grades frames-only ports from above: under ``graph_pause_fraction`` a port cannot have
been held most of the interval; at ``storm_pause_fraction`` it can have been held all of it.

Queue index = priority by default (the usual RoCE mapping: DSCP 26 -> priority 3 -> traffic
class 3); the config's ``fabric: priority_to_queue`` overrides it (the ``fabric`` analysis's
layout, one for every rule).

**On columns** (:func:`screen`): the pfc analysis reads every moved port's PFC counters of one
priority as whole arrays (:meth:`CounterStore.columns`) and computes :func:`pause_active`, the
fractions and their frame bounds there. Only a row that may be paused, send pause, be stuck or
held, or concern a watchdog is classified one by one (:func:`compute_state`, the per-port
reference); a row that is only partly paused (a fabric where pause moves everywhere, below
the graph's threshold) is exported and kept as a key, its :class:`PfcState` computed when a
storm's coverage asks for it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from fabricmon.agent.detector.base import Fraction, Params, Seconds
from fabricmon.agent.detector.common import RX_BYTES, TX_BYTES, frac, link_ok, speed_bytes, tx_progress
from fabricmon.agent.store import CounterColumn, PortColumns, PortEntry, PortKey, Series

# Paused this share of the interval = storm level. SONiC's Mellanox test uses 0.99 of the poll
# time (sonic-swss pfc_detect_mellanox.lua); 0.95 leaves room for poll jitter. Also the
# checklist's storm level (a port that keeps its peer paused this long is a storm, not late ECN).
STORM_PAUSE_FRACTION = 0.95


class PfcParams(Params):
    """``detector: {pfc: ...}``: how ports and priorities are classified and related."""

    storm_pause_fraction: Fraction = STORM_PAUSE_FRACTION
    # A port paused at least half the interval is a graph node / a pause sender (a majority:
    # below it the port mostly transmits; an inferred value, no public standard).
    graph_pause_fraction: Fraction = 0.5
    # "No progress" = below 1 % of line rate without a queue counter (see common.tx_progress).
    progress_line_fraction: Fraction = 0.01
    backlog_unknown_ok: bool = True  # no occupancy gauge and no drop counter: do not veto
    # Watchdog events this close count as one episode (>= dt). Watchdogs act within 0.1-5 s
    # (SONiC pfcwd detection 100-5000 ms, sonic-utilities pfcwd/main.py), so 10 s covers one.
    watchdog_window: Seconds = 10.0
    # A PFC deadlock that watchdogs keep breaking re-forms (the loop's routes are still
    # there): per poll its members are stuck, or paused with a backlog between watchdog
    # actions. A port paused now that was stuck or watchdog-fired within this window stays a
    # cycle member. SONiC's watchdog detects in 200 ms and restores after 200 ms by default
    # (sonic-utilities pfcwd/main.py), so one cycle is well under a poll; 60 s (6 polls at
    # 10 s) bridges polls that happen to land in a recovered phase.
    deadlock_window: Seconds = 60.0
    # A storm victim's grade moves from poll to poll with the traffic that crosses it (the
    # other leaves' uplinks are paused 40-70 %: around the majority a victim needs), so a
    # port that was a victim within this window and is still reached by the storm stays one:
    # one finding per victim for the storm's life, not one per poll above the line.
    victim_hold: Seconds = 60.0


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
    keep_fps: float | None = None  # pause frames/s that keep this port paused all the time (module doc)
    tx_rate: float | None = None  # the port's transmit, bytes/s, all priorities
    # The switch PFC watchdog of this queue, as the port reports it (None: not reported): storm
    # events, restorations and packets dropped in the interval, the state gauge (1 stormed) and
    # whether it is configured on. Read by the watchdog cross-check (pfc_watchdog.py).
    wd_storms: float | None = None
    wd_restores: float | None = None
    wd_drops: float | None = None
    wd_state: float | None = None
    wd_enabled: float | None = None

    @property
    def rx_bound(self) -> float | None:
        """The most of the interval the port can have been paused: its pause time when it
        counts one, else what its pause frames can have held (module doc)."""
        return self.rx_frac if self.rx_frac is not None else self.rx_frames_bound

    @property
    def rx_frames_bound(self) -> float | None:
        """What the pause frames alone can have held, even where pause time is counted."""
        if self.rx_fps is None or not self.keep_fps:
            return None
        return min(1.0, self.rx_fps / self.keep_fps)

    @property
    def tx_bound(self) -> float | None:
        """The same for the pause it sent (how long it can have held its peer)."""
        if self.tx_frac is not None:
            return self.tx_frac
        if self.tx_fps is None or not self.keep_fps:
            return None
        return min(1.0, self.tx_fps / self.keep_fps)

    @property
    def stormed(self) -> bool:
        return self.wd or self.stuck is not None

    @property
    def active(self) -> bool:
        """Any pause activity: paused, sending pause, a recent watchdog event or partial pause
        (a storm may reach a partly paused port: ``Tree.covered``)."""
        return bool(self.paused or self.sends or self.wd_recent or self.rx_frac or self.tx_frac or self.rx_fps or self.tx_fps)

    def evidence(self) -> dict[str, Any]:
        ev: dict[str, Any] = {}
        for k in ("rx_frac", "tx_frac", "rx_fps", "tx_fps"):
            v = getattr(self, k)
            if v is not None:
                ev[k.replace("frac", "pause_fraction").replace("fps", "pause_frames_per_s")] = round(v, 4)
        if self.rx_frac is None and (b := self.rx_bound) is not None:
            ev["paused_at_most"] = round(b, 4)  # frames only: what its pause frames can have held
        if self.tx_rate is not None:
            ev["transmit_bytes_per_s"] = round(self.tx_rate)
        if self.progress is not None:
            ev["tx_progress"] = self.progress
        if self.backlog is not None:
            ev["backlog"] = self.backlog
        if self.stuck:
            ev["signal"] = self.stuck
        if self.dt:
            ev["interval_s"] = round(self.dt, 3)
        return ev


def pause_active(entry: PortEntry, sub: tuple[int]) -> bool:
    """Pause counters moved on the priority, or its watchdog fired within the history or holds it stormed."""
    for name in PAUSE_NAMES:
        se = entry.counter(name, sub)
        if se is not None and se.delta:
            return True
    wd = entry.counter("pfc_watchdog_storms", sub)
    if wd is not None and (wd.delta or wd.moved_in_history()):
        return True
    g = entry.gauge("pfc_watchdog_stormed", sub)
    return g is not None and g >= 1


class Screen(NamedTuple):
    """One priority over a list of ports, from whole-array reads (:func:`screen`)."""

    has: np.ndarray  # the port has PFC series of the priority (it is among its subs)
    active: np.ndarray  # :func:`pause_active`
    light: np.ndarray  # active, and certainly not paused, sending pause, stuck, held or a watchdog's concern
    kept: np.ndarray  # light rows with some pause (:attr:`PfcState.active`): a storm may cover them
    rx_frac: np.ndarray  # :attr:`PfcState.rx_frac` (NaN: None), exported for every active row
    tx_bound: np.ndarray  # :attr:`PfcState.tx_bound` (NaN: None)


def truthy(x: np.ndarray) -> np.ndarray:
    """Truthy as a Python value would be, with NaN standing for None: neither None nor 0."""
    return ~np.isnan(x) & (x != 0)


def _frac(c: CounterColumn) -> np.ndarray:
    """:func:`frac` on every port (NaN: None)."""
    with np.errstate(all="ignore"):
        return np.where(~np.isnan(c.delta) & truthy(c.dt), np.clip(c.delta / c.dt, 0.0, 1.0), np.nan)


def _bound(fraction: np.ndarray, fps: np.ndarray, keep_fps: np.ndarray) -> np.ndarray:
    """:attr:`PfcState.rx_bound` / ``tx_bound``: the fraction where counted, else what the frames can hold."""
    with np.errstate(all="ignore"):
        return np.where(np.isnan(fraction), np.minimum(1.0, fps / keep_fps), fraction)


def keep_rate(cols: PortColumns) -> np.ndarray:
    """:attr:`PfcState.keep_fps` on every port: pause frames/s that keep it paused all the time (NaN: no speed)."""
    speed = cols.gauge("link_speed_bytes")
    return np.where(speed > 0, speed * 8 / MAX_QUANTA_BITS, np.nan)


def screen(cols: PortColumns, prio: Any, p: PfcParams, keep_fps: np.ndarray, wd_changed: np.ndarray) -> Screen:
    """:func:`pause_active` and the part of :func:`compute_state` that decides whether a row
    needs it, for one priority on every port of ``cols``. A row is light when its pause bound
    (pause time, or what its frames can hold) is under both ``graph_pause_fraction`` and
    ``storm_pause_fraction``, the pause it sent is under ``graph_pause_fraction``, and its
    watchdog counted nothing within the history, holds no stormed state and did not change
    state (``wd_changed``): then :func:`_classify` can find it neither paused nor sending,
    stuck nor held, and no watchdog check applies (pfc_watchdog.py needs a storm event, the
    stormed state or a stuck port)."""
    sub = (prio,)
    rx_f, tx_f, rx_s, tx_s = (cols.counter(name, sub) for name in PAUSE_NAMES)
    wd = cols.counter("pfc_watchdog_storms", sub)
    has = np.zeros(len(cols), bool)
    moved = np.zeros(len(cols), bool)
    for c in (rx_f, tx_f, rx_s, tx_s, wd):
        has |= ~np.isnan(c.poll_t)
    for c in (rx_f, tx_f, rx_s, tx_s):
        moved |= truthy(c.delta)
    watchdog = truthy(wd.delta) | cols.moved_in_history("pfc_watchdog_storms", sub) | \
        (cols.gauge("pfc_watchdog_stormed", sub) >= 1)
    active = has & (moved | watchdog)
    rx_frac, tx_frac, rx_fps, tx_fps = _frac(rx_s), _frac(tx_s), rx_f.rate, tx_f.rate
    tx_bound = _bound(tx_frac, tx_fps, keep_fps)
    with np.errstate(invalid="ignore"):
        strong = (_bound(rx_frac, rx_fps, keep_fps) >= min(p.graph_pause_fraction, p.storm_pause_fraction)) | \
            (tx_bound >= p.graph_pause_fraction) | watchdog | wd_changed
    light = active & ~strong
    kept = light & (truthy(rx_frac) | truthy(tx_frac) | truthy(rx_fps) | truthy(tx_fps))
    return Screen(has, active, light, kept, rx_frac, tx_bound)


@dataclass(slots=True)
class _Readings:
    """The PFC series of one port and priority."""

    rx_s: Series | None
    tx_s: Series | None
    rx_f: Series | None
    tx_f: Series | None
    wd: Series | None

    @classmethod
    def of(cls, entry: PortEntry, sub: tuple[int]) -> _Readings:
        return cls(entry.counter("pfc_rx_pause_seconds", sub), entry.counter("pfc_tx_pause_seconds", sub),
                   entry.counter("pfc_rx_pause_frames", sub), entry.counter("pfc_tx_pause_frames", sub),
                   entry.counter("pfc_watchdog_storms", sub))


def compute_state(pk: PortKey, entry: PortEntry, prio: int, p: PfcParams, qmap: dict[int, int]) -> PfcState:
    """Classify one port and priority over its last valid interval (see the module doc)."""
    sub = (prio,)
    qs = (qmap.get(prio, prio),)
    r = _Readings.of(entry, sub)
    st = PfcState(pk, prio, seen=entry.seen)
    st.rx_frac = frac(r.rx_s)
    st.tx_frac = frac(r.tx_s)
    st.rx_fps = r.rx_f.rate if r.rx_f is not None else None
    st.tx_fps = r.tx_f.rate if r.tx_f is not None else None
    tr = entry.counter("pfc_rx_pause_transitions", sub)
    st.trans = tr.delta if tr is not None else None
    first = r.rx_s or r.rx_f or r.tx_s or r.tx_f or r.wd
    st.dt = first.dt if first else None
    _watchdog(st, entry, sub, r.wd, p.watchdog_window)
    tx = entry.counter(*TX_BYTES)
    st.tx_rate = tx.rate if tx is not None else None
    st.progress = prio_progress(entry, qs, st.rx_frac, p.progress_line_fraction)
    st.backlog = _backlog(entry, qs, sub)
    st.link_ok = link_ok(entry)
    _classify(st, entry, p)
    return st


def _watchdog(st: PfcState, entry: PortEntry, sub: tuple[int], wd_se: Series | None, window_s: float) -> None:
    """A watchdog storm event this interval (or the stormed state), and one within the window;
    the watchdog's own numbers of the interval for the cross-check."""
    g = entry.gauge("pfc_watchdog_stormed", sub)
    st.wd_state = g
    st.wd_enabled = entry.gauge("pfc_watchdog_enabled", sub)
    st.wd_storms = wd_se.delta if wd_se is not None else None
    for attr, name in (("wd_restores", "pfc_watchdog_restores"), ("wd_drops", "pfc_watchdog_drops")):
        se = entry.counter(name, sub)
        setattr(st, attr, se.delta if se is not None else None)
    st.wd = bool(wd_se is not None and wd_se.delta) or (g is not None and g >= 1)
    recent = st.wd
    if not recent and wd_se is not None:
        w = wd_se.window(max(window_s, wd_se.dt or 0.0))
        recent = w is not None and w[0] > 0
    st.wd_recent = recent


def _backlog(entry: PortEntry, qs: tuple[int], sub: tuple[int]) -> bool | None:
    """True: the queue holds data or dropped; False: an empty queue; None: cannot tell (zero
    drops alone do not prove the queue empty)."""
    occ = entry.gauge("queue_occupancy_bytes", qs)
    drops = [entry.counter("queue_drops", qs), entry.counter("queue_no_buffer_drops", qs), entry.counter("pfc_watchdog_drops", sub)]
    if (occ is not None and occ > 0) or any(d is not None and d.delta for d in drops):
        return True
    return False if occ is not None else None


def watchdog_trusted(st: PfcState, p: PfcParams) -> bool:
    """Whether the port's watchdog event or stormed state counts as storm evidence: not when the
    port's own counters show it paused under ``graph_pause_fraction`` of the interval, by its
    pause time and by what its pause frames can hold, and still transmitting on the priority
    (the cross-check, pfc_watchdog.py, names such a watchdog). The frames count too: a watchdog
    in ``forward`` mode ignores the pause of a real storm, so the pause time stays low while the
    frames keep arriving."""
    bounds = [b for b in (st.rx_bound, st.rx_frames_bound) if b is not None]
    return not (st.progress is True and bounds and max(bounds) < p.graph_pause_fraction)


def _classify(st: PfcState, entry: PortEntry, p: PfcParams) -> None:
    """paused / sends / stuck / held from the fractions (or their frame bounds), progress and backlog."""
    speed = speed_bytes(entry)
    st.keep_fps = speed * 8 / MAX_QUANTA_BITS if speed else None
    if st.wd_recent and not watchdog_trusted(st, p):
        st.wd = st.wd_recent = False  # the port's counters contradict its watchdog: no storm evidence
    theta = p.graph_pause_fraction
    rx, tx = st.rx_bound, st.tx_bound
    st.paused = (rx is not None and rx >= theta) or st.wd_recent
    st.sends = tx is not None and tx >= theta
    backlog_ok = st.backlog is True or (st.backlog is None and p.backlog_unknown_ok)
    frames_only = st.rx_frac is None
    continuous = rx is not None and rx >= p.storm_pause_fraction and not (frames_only and st.trans)
    if st.link_ok and backlog_ok and continuous:
        if st.progress is False:
            st.stuck = "pause_frames" if frames_only else "pause_time"
        elif st.progress is None:
            st.held = True


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


@dataclass(frozen=True, slots=True)
class NicStall:
    """A host NIC that keeps its peer paused and drains next to nothing on that priority."""

    prio: int
    sent: float  # share of the interval it sent pause (by pause time, or what its frames can hold)
    drained: float  # what it received on the priority, share of line rate
    by: str  # which counters said so, in words


def nic_stall(entry: PortEntry, subs: tuple[Any, ...], p: PfcParams) -> NicStall | None:
    """A NIC storm from the NIC's own counters (no storm counter needed): it sent pause at the
    storm level (``tx_prio<p>_pause_duration``, microseconds of pause it sent; or
    ``tx_prio<p>_pause`` frames that can hold its peer that long, one 65535-quanta frame per
    quanta time at its line rate: kernel mlx5 counters.rst, fabric-reference.md 2.5) while it
    received less than ``progress_line_fraction`` of line rate on that priority
    (``rx_prio<p>_bytes``; the port's ``rx_bytes`` when the NIC has no per-priority counter):
    its receive pipeline is stalled and it holds the switch for good (Guo et al., "RDMA over
    Commodity Ethernet at Scale", SIGCOMM 2016, section 4.1). A NIC still draining is a slow
    receiver (congestion), not a storm."""
    speed = speed_bytes(entry)
    if not speed:
        return None
    keep = speed * 8 / MAX_QUANTA_BITS
    for prio in subs:
        if not isinstance(prio, int):
            continue
        sent_s, sent_f = frac(entry.counter("pfc_tx_pause_seconds", (prio,))), entry.counter("pfc_tx_pause_frames", (prio,))
        sent = sent_s if sent_s is not None else (min(1.0, sent_f.rate / keep) if sent_f is not None and sent_f.rate is not None
                                                   else None)
        if sent is None or sent < p.storm_pause_fraction:
            continue
        rx = entry.counter("prio_rx_bytes", (prio,))
        by = f"rx_prio{prio}_bytes"
        if rx is None or rx.rate is None:
            rx, by = entry.counter(*RX_BYTES), "rx_bytes (all priorities)"
        if rx is None or rx.rate is None or rx.rate >= p.progress_line_fraction * speed:
            continue
        pause = f"tx_prio{prio}_pause_duration" if sent_s is not None else f"tx_prio{prio}_pause frames"
        return NicStall(prio, sent, rx.rate / speed, f"{pause} and {by}")
    return None
