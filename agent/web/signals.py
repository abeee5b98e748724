"""What a finding page charts, and the history it charts it from.

**Which signals** (:data:`SIGNALS`): the ones that show the fault of that kind and role, not
one list for all: a storm origin *sends* pause (IEEE 802.1Qbb: the port whose receive buffer
cannot drain sends XOFF to its peer), so its page charts transmitted pause frames and the
share of time it holds its peer paused; a victim is *held* (received pause, queue transmit
stops); a PFC watchdog's page charts its storms, restores and drops beside the pause it
reacts to; a stalled or credit-looped InfiniBand port waits (XmitWait) while it sends nothing
and its peer receives nothing, and discards at the head-of-queue lifetime; a flapping link
counts LinkDowned, link retrains and symbol errors; congestion marks ECN and waits; loss
counts discards and drops. Each signal is read on the finding's port, or (``peer``) on the
other end of its cable.

**How much history** (:class:`PortHistory`): the store keeps ``global.history`` points per
series (8 by default: 80 s at 10 s polls), which a storm of ten minutes outlives. So after
every detection pass the web view copies the watched counters of every port a finding
involves (its port and its peer's) while the finding is active and for a margin after it
ended, starting from what the store still holds from before it began. Bounded: at most
:data:`MAX_PORTS` ports (the most severe findings first) and :data:`MAX_POINTS` points per
series (older points are thinned, never the span cut).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fabricmon.agent.web import text
from fabricmon.core.model import Finding

if TYPE_CHECKING:
    from fabricmon.agent.pipeline import Pipeline

Fmt = Callable[[float], str]


@dataclass(frozen=True, slots=True)
class Signal:
    label: str
    name: str  # a store counter (charted as its rate) or, with ``gauge``, a gauge (charted as is)
    per: str = ""  # "priority", "queue" (the finding's priority through the fabric's map), "all" (every row summed), "" (the port)
    fmt: Fmt = lambda v: text.si(v, "/s")
    scale: float = 1.0
    gauge: bool = False
    peer: bool = False  # on the other end of the finding's cable

    def rows(self, sub: tuple[Any, ...], priority: int | None, queue: int | None) -> bool:
        """Whether a row (its sub-labels) of :attr:`name` belongs to this signal."""
        if self.per == "all":
            return True
        if self.per == "priority":
            return priority is not None and sub[:1] == (priority,)
        if self.per == "queue":
            return queue is not None and sub[:1] == (queue,)
        return sub == ()


def _ratio(v: float) -> str:
    return text.percent(min(max(v, 0.0), 1.0))


BITS = Signal("transmitted", "tx_bytes", fmt=lambda v: text.si(v, "bit/s"), scale=8.0)
PAUSE_SENT_FRAMES = Signal("pause frames sent", "pfc_tx_pause_frames", "priority")
PAUSE_RX_FRAMES = Signal("pause frames received", "pfc_rx_pause_frames", "priority")
HOLDS_PEER = Signal("share of time it holds its peer paused", "pfc_tx_pause_seconds", "priority", _ratio)
HELD = Signal("share of time it is held (paused)", "pfc_rx_pause_seconds", "priority", _ratio)
QUEUE_TX = Signal("packets sent from the queue", "queue_tx_packets", "queue")
XMIT_WAIT = Signal("XmitWait (waiting for credits)", "xmit_wait", fmt=lambda v: text.si(v, "ticks/s"))
TX_DISCARDS = Signal("transmit discards", "tx_discards")
WATCHDOG = (Signal("watchdog storms", "pfc_watchdog_storms", "priority"),
            Signal("watchdog restores", "pfc_watchdog_restores", "priority"),
            Signal("watchdog drops", "pfc_watchdog_drops", "priority", fmt=lambda v: text.si(v, "packets/s")),
            Signal("watchdog state (1 = stormed)", "pfc_watchdog_stormed", "priority", fmt=text.number, gauge=True))
LOSS = (TX_DISCARDS, Signal("receive discards", "rx_discards"),
        Signal("no-buffer drops (queue)", "queue_no_buffer_drops", "queue"), Signal("queue drops", "queue_drops", "queue"),
        Signal("WRED drops", "wred_drops", "queue"), Signal("no-buffer drops (ingress PG)", "pg_no_buffer_drops", "all"),
        Signal("shared-buffer drops (ingress PG)", "pg_shared_buffer_drops", "all"),
        Signal("ingress queue drops", "ingress_queue_drops", "all"), Signal("ingress buffer overflow", "ingress_buffer_overflow_drops"),
        Signal("WJH drops", "wjh_drops", "all"), Signal("NIC port buffer drops (rx_discards_phy)", "rx_discards_phy"),
        Signal("NIC receive out of buffer", "rx_out_of_buffer"), Signal("out-of-sequence packets", "out_of_sequence"),
        Signal("sequence-error NAKs", "packet_seq_err"), Signal("local ACK timeouts", "local_ack_timeout_err"),
        Signal("buffer overrun errors", "excessive_buffer_overrun_errors"))
LINK = (Signal("link state (1 = up)", "link_up", fmt=text.number, gauge=True),
        Signal("link downed", "link_downed"), Signal("link retrains", "link_error_recovery"),
        Signal("symbol errors", "symbol_errors"), Signal("receive errors", "rx_errors"),
        Signal("active width (lanes)", "link_width_lanes", fmt=text.number, gauge=True))
STALL = (XMIT_WAIT, BITS, TX_DISCARDS, Signal("its peer received", "rx_bytes", fmt=lambda v: text.si(v, "bit/s"), scale=8.0, peer=True))

# (kind, role) -> signals; (kind, None) is the kind's default for any role not listed.
SIGNALS: dict[tuple[str, str | None], tuple[Signal, ...]] = {
    ("pfc_storm", "origin"): (PAUSE_SENT_FRAMES, HOLDS_PEER, PAUSE_RX_FRAMES, BITS,
                              Signal("NIC pause storm errors", "tx_pause_storm_error_events"),
                              Signal("pause frames sent (its peer)", "pfc_tx_pause_frames", "priority", peer=True)),
    ("pfc_storm", "watchdog"): (*WATCHDOG, PAUSE_RX_FRAMES, HELD, PAUSE_SENT_FRAMES, QUEUE_TX),
    ("pfc_storm", None): (HELD, PAUSE_RX_FRAMES, QUEUE_TX, BITS, *WATCHDOG[:3]),
    ("pfc_deadlock", None): (HELD, HOLDS_PEER, PAUSE_RX_FRAMES, QUEUE_TX, BITS),
    ("credit_deadlock", None): STALL,
    ("congestion", None): (Signal("ECN-marked packets", "ecn_marked_packets", "queue"), QUEUE_TX, HELD, XMIT_WAIT, BITS),
    ("packet_loss", None): (*LOSS, BITS),
    ("link_degraded", None): LINK,
    ("misconfig", None): (PAUSE_RX_FRAMES, PAUSE_SENT_FRAMES, *LOSS[:6], BITS),
}


def signals_for(f: Finding) -> tuple[Signal, ...]:
    if text.stalled(f):  # however the detector files it (issue 31: credit_deadlock, role stalled)
        return STALL
    return SIGNALS.get((f.kind, f.role)) or SIGNALS.get((f.kind, None), (BITS,))


WATCHED = frozenset(s.name for group in SIGNALS.values() for s in group if not s.gauge)
WATCHED_GAUGES = frozenset(s.name for group in SIGNALS.values() for s in group if s.gauge)
MAX_PORTS = 2000  # ports whose history is kept beyond the store's (the most severe findings' first)
MAX_POINTS = 1440  # per series: 4 h at 10 s polls before thinning halves the density
MARGIN_MIN_S = 120.0  # kept after a finding ended: at least this long ...
MARGIN_SHARE = 0.25  # ... or this share of its life, whichever is longer
MARGIN_MAX_S = 3600.0

PortKey = tuple[str, str]


def involved(f: Finding) -> list[PortKey]:
    """The finding's own port, the other end of its cable, and the ports of its cycle."""
    out: list[PortKey] = []
    if f.port is not None:
        out.append((f.device, f.port))
    if f.peer_device and f.peer_port:
        out.append((f.peer_device, f.peer_port))
    for ref in f.evidence.get("cycle") or []:
        dev, _, port = str(ref).rpartition(":")
        if dev:
            out.append((dev, port))
    return list(dict.fromkeys(out))


def margin(f: Finding) -> float:
    life = (f.end or f.start) - f.start
    return min(MARGIN_MAX_S, max(MARGIN_MIN_S, MARGIN_SHARE * life))


class PortHistory:
    """Points of the watched counters (totals) and gauges of the ports findings involve."""

    def __init__(self) -> None:
        self.until: dict[PortKey, float | None] = {}  # None while a finding on it is active
        self.points: dict[PortKey, dict[tuple[str, tuple[Any, ...]], list[tuple[float, float]]]] = {}  # port -> series -> points
        self._seen: dict[PortKey, float] = {}  # the port's last update sampled: a port not updated since is skipped
        self._watched: dict[int, tuple[object, list[tuple[int, str, tuple[Any, ...]]]]] = {}  # per schema: its watched rows

    def observe(self, p: Pipeline, t: float) -> None:
        """After a detection pass: which ports to follow, then one point per watched series."""
        want: dict[PortKey, float | None] = {}
        ranked = sorted(p.detector.active, key=lambda f: (f.severity != "critical", -f.start))
        for f in ranked:
            for pk in involved(f):
                want[pk] = None
            if len(want) >= MAX_PORTS:
                break
        for f in p.ended:
            if f.end is not None and t <= f.end + margin(f):
                for pk in involved(f):
                    if len(want) < MAX_PORTS and want.get(pk, 0.0) is not None:
                        want[pk] = max(want.get(pk) or 0.0, f.end + margin(f))
        for pk in [k for k in self.until if k not in want]:
            del self.until[pk]
            self._seen.pop(pk, None)
            self.points.pop(pk, None)
        for pk, until in want.items():
            self._sample(p, pk, t, first=pk not in self.until)
            self.until[pk] = until

    def _rows(self, schema: Any) -> list[tuple[int, str, tuple[Any, ...]]]:
        """The watched (offset, name, sub) of a port schema (ports of one kind share a schema)."""
        hit = self._watched.get(id(schema))
        if hit is None or hit[0] is not schema:
            hit = self._watched[id(schema)] = (schema, [(off, n, sub) for off, (n, sub) in enumerate(schema.keys) if n in WATCHED])
        return hit[1]

    def _sample(self, p: Pipeline, pk: PortKey, t: float, first: bool) -> None:
        entry = p.store.port(pk)
        if entry is None or (not first and self._seen.get(pk) == entry.seen):
            return
        self._seen[pk] = entry.seen
        mine = self.points.setdefault(pk, {})
        for off, name, sub in self._rows(entry.schema):
            se = entry.view(off)
            pts = mine.setdefault((name, sub), [])
            if first and not pts:
                pts.extend(se.history)  # the store's kept points: the time before the finding
            elif not pts or se.poll_t > pts[-1][0]:
                pts.append((se.poll_t, se.total))
            _thin(pts)
        for (name, sub), g in entry.gauges.items():
            if name in WATCHED_GAUGES:
                pts = mine.setdefault((name, sub), [])
                if not pts or t > pts[-1][0]:
                    pts.append((t, float(g.value)))
                    _thin(pts)

    def series(self, device: str, port: str, name: str) -> Iterable[tuple[tuple[Any, ...], list[tuple[float, float]]]]:
        for (n, sub), pts in self.points.get((device, port), {}).items():
            if n == name:
                yield sub, pts


def _thin(pts: list[tuple[float, float]]) -> None:
    """Halve the density of the older half when a series is full: the span is kept."""
    if len(pts) > MAX_POINTS:
        half = len(pts) // 2
        pts[:half] = pts[:half:2]


def rates(points: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """(t, per-second rate) between consecutive totals; an interval where the total fell
    (a counter reset the store restarted from) is left out."""
    return [(t1, (v1 - v0) / (t1 - t0)) for (t0, v0), (t1, v1) in itertools.pairwise(points) if t1 > t0 and v1 >= v0]


def chart_points(p: Pipeline, history: PortHistory, dev: str, port: str, s: Signal, priority: int | None) -> list[tuple[float, float]]:
    """The signal's points on one port: the recorded history where there is one, else the
    store's kept points; rows it spans (every traffic class of a WJH record) summed."""
    queue = p.fabric.queue(priority) if priority is not None else None
    if s.gauge:
        return [(t, v) for sub, pts in history.series(dev, port, s.name) if s.rows(sub, priority, queue) for t, v in pts]
    summed: dict[float, float] = {}
    rows = [pts for sub, pts in history.series(dev, port, s.name) if s.rows(sub, priority, queue)]
    if not rows:
        entry = p.store.port((dev, port))
        rows = [se.history for name, sub, se in (entry.counters() if entry else ()) if name == s.name and s.rows(sub, priority, queue)]
    for pts in rows:
        for t, r in rates(pts):
            summed[t] = summed.get(t, 0.0) + r * s.scale
    return sorted(summed.items())
