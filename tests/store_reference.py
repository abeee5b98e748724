"""The object-per-series counter store that agent/store.py replaced: the reference oracle of
tests/test_store_equivalence.py.

Kept verbatim (only this docstring differs) so the randomized equivalence test compares the
columnar store with exactly the semantics it replaced. Nothing in the product imports it.

Counter store: raw counter readings in, correct deltas and rates out.

Per (device, port, counter, sub) it keeps the last reading and a short history of the
accumulated value, and gives the last interval's delta and rate. The rules, in order:

* **Device clock.** When the payload carried the device's own clock (SNMP sysUpTime, a
  UFM Telemetry timestamp), the interval is measured on it; otherwise on the poll clock.
  A device clock that does not advance (reboot, uptime wrap) makes the interval invalid.
* **Saturation.** Counters that stop at all-ones (InfiniBand PortCounters) give no rate
  once at the cap: the true increase is unknown. A later value below the cap means the
  counter was cleared: a reset.
* **Wrap or reset.** A wrapping counter (Counter32, or any width up to 32 bits) that went
  down is taken as one wrap when the implied increase is under half its range and the
  device clock advanced normally; otherwise it is a reset. Counters wider than 32 bits
  (Counter64, IB extended) never wrap in practice, so a decrease is always a reset.
* **Reset.** The interval is skipped: no rate, no negative value, no spike; the next
  interval is measured from the new value.
* **Width or scale change** (a source switching from the 32-bit to the 64-bit counter) is
  treated as a reset.

Each series also carries ``total``: the first value seen plus every valid delta, in base
units. It is what the exporter publishes as the counter, so Prometheus sees a monotonic
counter across wraps, resets and saturation, and never a false reset of its own.

Memory is proportional to the number of series: one slotted object each, with a history
of at most ``history`` (time, total) pairs. Series not updated for ``stale_after``
seconds are dropped by :meth:`CounterStore.expire`.

**Changes.** While it updates, the store notes which ports had a counter increase (every
counter except the traffic counters in :data:`DENSE`, which move on every port of a busy
fabric) and which ports had a state gauge change (:data:`TRACKED_GAUGES`), and hands them
out with :meth:`CounterStore.take_changes`. The detector's rules start from these sets
instead of visiting every port: on a 100,000-port fabric an error counter moves on a
handful of ports per poll, and a rule that looked at all of them would cost seconds.

**The read API** is what the rules and the state file use, and all they use (a layout test
checks that nothing else touches the store's private names): per port
:meth:`PortEntry.counter` (a :class:`Series`: ``delta``, ``rate``, ``window()``,
``moved_in_history()``, ``increases()``), :meth:`PortEntry.gauge`, :meth:`PortEntry.counters`;
in bulk :meth:`Changes.moved_series` (every port where a counter moved, in one mapping) and
:meth:`Changes.ports`; :meth:`CounterStore.port`; and :meth:`CounterStore.save` /
:meth:`CounterStore.restore` for persistence. A columnar store can replace what is behind
these signatures.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any

from fabricmon.core.model import DeviceInfo, Gauge, PortInfo, Sample

# Why the last interval has (or has no) delta.
OK = "ok"
FIRST = "first"
WRAP = "wrap"
RESET = "reset"
SATURATED = "saturated"
CLOCK = "clock"  # the clock did not advance: interval invalid

PortKey = tuple[str, str]
SeriesKey = tuple[str, tuple[Any, ...]]
_KEYS: dict[SeriesKey, SeriesKey] = {}

# Traffic counters: they move on every port that carries traffic, so "it moved" says
# nothing and noting it for 100,000 ports per poll would cost more than it saves.
DENSE = frozenset({"rx_bytes", "tx_bytes", "rx_packets", "tx_packets", "queue_tx_packets", "queue_tx_bytes"})
# State gauges whose changes the rules act on (a link going down, a speed drop, a watchdog
# entering storm state). Occupancy and temperature change on every poll and are read directly.
TRACKED_GAUGES = frozenset({"link_up", "link_speed_bytes", "link_width_lanes", "pfc_watchdog_stormed"})


@dataclass(slots=True)
class Changes:
    """What changed since the last :meth:`CounterStore.take_changes`.

    ``moved``: counter name -> port -> a series of that counter on the port that increased
    (its accumulated total went up: a valid delta, or a rise to a saturating cap); for a
    counter with sub-labels (priorities, queues), the last one that did.
    ``gauges``: gauge name -> port -> the gauge's previous value (None when it is new).
    """

    moved: dict[str, dict[PortKey, Series]] = field(default_factory=dict)
    gauges: dict[str, dict[PortKey, float | None]] = field(default_factory=dict)

    def ports(self, names: Iterable[str]) -> set[PortKey]:
        """Ports where any of the counters ``names`` moved."""
        out: set[PortKey] = set()
        for name in names:
            got = self.moved.get(name)
            if got:
                out.update(got)
        return out

    def moved_series(self, name: str) -> dict[PortKey, Series]:
        """Port -> the series of counter ``name`` that increased there (bulk read: one dict for
        every port where it moved, no per-port lookup)."""
        return self.moved.get(name, {})

    def gauge_ports(self, names: Iterable[str]) -> set[PortKey]:
        out: set[PortKey] = set()
        for name in names:
            got = self.gauges.get(name)
            if got:
                out.update(got)
        return out


class Series:
    """One counter series. ``delta``/``rate`` are None when the last interval was invalid."""

    __slots__ = ("_hist", "bits", "delta", "device_t", "dt", "poll_t", "saturating", "scale", "status", "total", "value")

    def __init__(self, sample: Sample, poll_t: float, device_t: float | None) -> None:
        self.value = sample.value
        self.bits = sample.bits
        self.saturating = sample.saturating
        self.scale = sample.scale
        self.poll_t = poll_t
        self.device_t = device_t
        self.total = float(sample.value) * sample.scale
        self.delta: float | None = None
        self.dt: float | None = None
        self.status = SATURATED if self.at_cap(sample.value) else FIRST
        # History as one flat array of doubles (t0, total0, t1, total1, ...): ~200 bytes for
        # 8 points instead of ~1 KB as a list of tuples, which matters at millions of series.
        self._hist = array("d", (poll_t, self.total))

    @property
    def history(self) -> list[tuple[float, float]]:
        """(poll time, total) pairs, oldest first."""
        h = self._hist
        return list(zip(h[0::2], h[1::2], strict=True))

    @history.setter
    def history(self, points: Iterable[tuple[float, float]]) -> None:
        self._hist = array("d", [x for pt in points for x in pt])

    def moved_in_history(self) -> bool:
        """Any increase within the kept history (includes the last interval)."""
        return self.total != self._hist[1]

    def increases(self, intervals: int) -> int:
        """How many of the last ``intervals`` kept intervals saw an increase."""
        totals = self._hist[1::2][-(intervals + 1):]
        return sum(1 for a, b in pairwise(totals) if b > a)

    @property
    def rate(self) -> float | None:
        """Base units per second over the last interval (computed: one float less per series)."""
        d = self.delta
        return None if d is None or not self.dt else d / self.dt

    def at_cap(self, value: int | float) -> bool:
        return self.saturating and value >= (1 << self.bits) - 1

    def window(self, seconds: float) -> tuple[float, float] | None:
        """(increase in base units, elapsed poll seconds) over roughly the last ``seconds``.

        Uses the oldest history point no older than ``seconds``; None with fewer than two
        points. The increase includes only valid intervals (totals skip resets).
        """
        h = self._hist
        if len(h) < 4:
            return None
        t_now, total_now = h[-2], h[-1]
        for i in range(0, len(h), 2):
            t, total = h[i], h[i + 1]
            if t_now - t <= seconds + 1e-9:
                if t == t_now:
                    return None
                return total_now - total, t_now - t
        return None


@dataclass(slots=True)
class GaugeValue:
    value: float
    t: float


@dataclass(slots=True)
class PortEntry:
    """Everything the store holds for one port."""

    series: dict[SeriesKey, Series] = field(default_factory=dict)
    gauges: dict[SeriesKey, GaugeValue] = field(default_factory=dict)
    info: PortInfo | None = None
    seen: float = 0.0
    target: str = ""

    # The read API the rules use (a columnar store keeps these signatures).
    def counter(self, name: str, sub: tuple[Any, ...] = ()) -> Series | None:
        """The series of counter ``name`` with sub-labels ``sub`` (priority, queue, ...), or None."""
        return self.series.get((name, sub))

    def gauge(self, name: str, sub: tuple[Any, ...] = ()) -> float | None:
        g = self.gauges.get((name, sub))
        return g.value if g is not None else None

    def counters(self) -> Iterator[tuple[str, tuple[Any, ...], Series]]:
        """Every counter series of the port as (name, sub, series)."""
        for (name, sub), se in self.series.items():
            yield name, sub, se

    def series_count(self) -> int:
        return len(self.series)


# Bounds on what readings can create, so a hostile device or recording cannot grow the store
# without limit. A port carries about 20 base counters plus per-priority (8), per-queue (8-16)
# and per-reason (WJH) series: a few hundred at most on every device seen; 1,024 leaves 3x
# headroom. 1,000,000 ports is 10x the largest fabric one agent is sized for (docs/scaling.md).
MAX_PORTS = 1_000_000
MAX_SERIES_PER_PORT = 1024


class CounterStore:
    def __init__(self, history: int = 8, stale_after: float = 600.0, max_ports: int = MAX_PORTS,
                 max_series_per_port: int = MAX_SERIES_PER_PORT) -> None:
        if history < 2:
            raise ValueError("history must keep at least 2 points")
        self.history = history
        self.stale_after = stale_after
        self.max_ports = max_ports
        self.max_series_per_port = max_series_per_port
        # Readings refused by those bounds ("port": a new port, "series": a new series of a
        # full port), exported as fabricmon_store_refused_total{what}.
        self.refused: dict[str, int] = {"port": 0, "series": 0}
        self.ports: dict[PortKey, PortEntry] = {}
        self.devices: dict[str, DeviceInfo] = {}
        self.device_target: dict[str, str] = {}
        self.device_seen: dict[str, float] = {}
        self._device_clock: dict[str, tuple[float, float]] = {}  # device -> (device clock, poll t)
        self.layout = 0  # bumped when a port is added or dropped: renderers cache the sorted port list
        self._changes = Changes()

    def take_changes(self) -> Changes:
        """The counters that moved and the state gauges that changed since the last call."""
        out, self._changes = self._changes, Changes()
        return out

    # ----------------------------------------------------------------- updates
    def update(
        self,
        samples: Iterable[Sample],
        poll_t: float,
        clocks: dict[str, float] | None = None,
        gauges: Iterable[Gauge] = (),
        target: str = "",
    ) -> set[PortKey]:
        """Feed one poll's readings. Returns the ports that were updated."""
        clocks = clocks or {}
        clock_reset: set[str] = set()
        for device, dev_t in clocks.items():
            prev = self._device_clock.get(device)
            if prev is not None and dev_t <= prev[0]:
                clock_reset.add(device)  # rebooted or uptime wrapped: every interval is invalid
            self._device_clock[device] = (dev_t, poll_t)
        touched: set[PortKey] = set()
        pk: PortKey | None = None
        entry: PortEntry | None = None
        moved = self._changes.moved
        for s in samples:
            if pk is None or s.device != pk[0] or s.port != pk[1]:  # parsers emit a port's samples together
                pk = (s.device, s.port)
                entry = self._touch(pk, target, poll_t, touched)
            if entry is None:
                continue  # a new port over max_ports: refused and counted
            key = (s.counter, s.sub)
            dev_t = clocks.get(s.device)
            series = entry.series.get(key)
            if series is None:
                if len(entry.series) >= self.max_series_per_port:
                    self.refused["series"] += 1
                    continue
                key = _KEYS.setdefault(key, key)  # one key tuple per (counter, sub), shared by all ports
                entry.series[key] = Series(s, poll_t, dev_t)
            else:
                before = series.total
                self._advance(series, s, poll_t, dev_t, s.device in clock_reset)
                if series.total != before and s.counter not in DENSE:
                    got = moved.get(s.counter)
                    if got is None:
                        got = moved[s.counter] = {}
                    got[pk] = series
        changed = self._changes.gauges
        for g in gauges:
            pk = (g.device, g.port)
            entry = self._touch(pk, target, poll_t, touched)
            if entry is None:
                continue
            key = (g.name, g.sub)
            value = float(g.value)
            old = entry.gauges.get(key)
            if old is None:
                if len(entry.gauges) >= self.max_series_per_port:
                    self.refused["series"] += 1
                    continue
                entry.gauges[key] = GaugeValue(value, poll_t)
                prev: float | None = None
            else:
                prev, old.value, old.t = old.value, value, poll_t
            if g.name in TRACKED_GAUGES and prev != value:
                changed.setdefault(g.name, {}).setdefault(pk, prev)
        for device, _ in touched:
            self.device_seen[device] = poll_t
            if target:
                self.device_target[device] = target
        return touched

    def _touch(self, pk: PortKey, target: str, poll_t: float, touched: set[PortKey]) -> PortEntry | None:
        """The port's entry (created on first sight), marked as updated by this poll; None for a
        new port the store has no room for (counted in ``refused``)."""
        entry = self.ports.get(pk)
        if entry is None:
            if len(self.ports) >= self.max_ports:
                self.refused["port"] += 1
                return None
            entry = self.ports[pk] = PortEntry(target=target)
            self.layout += 1
        if pk not in touched:
            touched.add(pk)
            entry.seen = poll_t
            if target:
                entry.target = target
        return entry

    def _advance(self, se: Series, s: Sample, poll_t: float, dev_t: float | None, clock_reset: bool) -> None:
        value = s.value
        # The interval: device clock when both readings have it, else the poll clock.
        if dev_t is not None and se.device_t is not None:
            dt = dev_t - se.device_t
        else:
            dt = poll_t - se.poll_t
        prev = se.value
        delta: float | None
        if s.bits != se.bits or s.scale != se.scale or s.saturating != se.saturating:
            status, delta = RESET, None
            se.bits, se.scale, se.saturating = s.bits, s.scale, s.saturating
        elif clock_reset or dt <= 0:
            status, delta = CLOCK, None
        elif se.at_cap(value):
            status, delta = SATURATED, None
            if not se.at_cap(prev) and value > prev:
                # It rose to the cap: the true increase is at least this much, the rate unknown.
                se.total += (value - prev) * se.scale
        elif value >= prev:
            status, delta = OK, value - prev
        elif se.at_cap(prev):
            status, delta = RESET, None  # was stuck at the cap and went down: cleared
        elif not se.saturating and se.bits <= 32:
            wrapped = value + (1 << se.bits) - prev
            if wrapped < (1 << (se.bits - 1)):
                status, delta = WRAP, wrapped
            else:
                status, delta = RESET, None
        else:
            status, delta = RESET, None
        se.value = value
        se.poll_t = poll_t
        se.device_t = dev_t
        se.status = status
        se.dt = dt if dt > 0 else None
        if delta is not None and dt > 0:
            d = delta * se.scale
            se.delta = d
            se.total += d
        else:
            se.delta = None
        hist = se._hist
        hist.append(poll_t)
        hist.append(se.total)
        if len(hist) > 2 * self.history:
            del hist[0:2]

    def set_devices(self, devices: Iterable[DeviceInfo], target: str = "") -> None:
        for d in devices:
            self.devices[d.name] = d
            if target:
                self.device_target.setdefault(d.name, target)

    def set_port_info(self, infos: Iterable[PortInfo], poll_t: float) -> None:
        for info in infos:
            entry = self.ports.get((info.device, info.port))
            if entry is None:
                entry = self.ports[(info.device, info.port)] = PortEntry(seen=poll_t)
                self.layout += 1
            entry.info = info

    def expire(self, now: float) -> int:
        """Drop ports not updated for ``stale_after`` seconds; returns how many."""
        limit = now - self.stale_after
        stale = [pk for pk, e in self.ports.items() if e.seen < limit]
        for pk in stale:
            del self.ports[pk]
        if stale:
            self.layout += 1
        for device in [d for d, seen in self.device_seen.items() if seen < limit]:
            del self.device_seen[device]
            self._device_clock.pop(device, None)
            self.devices.pop(device, None)
            self.device_target.pop(device, None)
        return len(stale)

    # ----------------------------------------------------------------- persistence
    def save(self) -> dict[str, Any]:
        """A JSON-able copy of every series and device clock (see :meth:`restore`)."""
        ports = []
        for (device, port), entry in self.ports.items():
            series = [
                [counter, list(sub), se.value, se.bits, se.saturating, se.scale, se.total, se.poll_t, se.device_t,
                 [list(h) for h in se.history]]
                for (counter, sub), se in entry.series.items()
            ]
            if series:
                ports.append([device, port, entry.target, entry.seen, series])
        return {"device_clocks": {d: list(v) for d, v in self._device_clock.items()}, "ports": ports}

    def restore(self, data: dict[str, Any], now: float) -> int:
        """Put what :meth:`save` returned into this (empty) store; returns the series restored.

        Series not updated within ``stale_after`` of ``now`` are left out (a running store
        would have expired them). Each restored series has no delta until its next reading.
        Raises ValueError naming the first malformed item; the store is only touched once
        everything was read.
        """
        limit = now - self.stale_after
        entries: dict[PortKey, PortEntry] = {}
        ports = data.get("ports", [])
        clocks_in = data.get("device_clocks") or {}
        if not isinstance(ports, list) or not isinstance(clocks_in, dict):
            raise ValueError("ports must be a list and device_clocks an object")
        for i, rec in enumerate(ports):
            if not isinstance(rec, list) or len(rec) != 5 or not isinstance(rec[4], list):
                raise ValueError(f"ports[{i}]: not [device, port, target, seen, series]")
            device, port, target, seen, series = rec
            entry = PortEntry(target=valid_text(target, f"ports[{i}] target"), seen=_number(seen, f"ports[{i}] seen"))
            pk = (valid_text(device, f"ports[{i}] device"), valid_text(port, f"ports[{i}] port"))
            for j, srec in enumerate(series):
                key, se = self._restored_series(srec, f"ports[{i}] series[{j}]")
                if se.poll_t >= limit:
                    entry.series[_KEYS.setdefault(key, key)] = se
            if entry.series:
                entries[pk] = entry
        clocks: dict[str, tuple[float, float]] = {}
        for device, v in clocks_in.items():
            if not isinstance(v, list) or len(v) != 2:
                raise ValueError(f"device_clocks[{device!r}]: not [device clock, poll time]")
            pair = (_number(v[0], "device clock"), _number(v[1], "device clock poll time"))
            if pair[1] >= limit:
                clocks[valid_text(device, "device_clocks key")] = pair
        self.ports.update(entries)
        self.layout += 1
        self._device_clock.update(clocks)
        for (device, _port), entry in entries.items():
            self.device_seen[device] = max(self.device_seen.get(device, 0.0), entry.seen)
            if entry.target:
                self.device_target.setdefault(device, entry.target)
        return sum(len(e.series) for e in entries.values())

    def _restored_series(self, rec: Any, where: str) -> tuple[SeriesKey, Series]:
        if not isinstance(rec, list) or len(rec) != 10:
            raise ValueError(f"{where}: not a 10-item series record")
        counter, sub, value, bits, saturating, scale, total, poll_t, device_t, hist = rec
        if not isinstance(sub, list) or not all(x is None or (isinstance(x, str | int) and not isinstance(x, bool)) for x in sub):
            raise ValueError(f"{where}: sub-labels must be a list of strings, integers or null")
        for x in sub:
            if isinstance(x, str):
                valid_text(x, f"{where} sub-label")
        if not isinstance(bits, int) or isinstance(bits, bool) or not 1 <= bits <= 64:
            raise ValueError(f"{where}: bits must be an integer 1..64")
        if not isinstance(saturating, bool):
            raise ValueError(f"{where}: saturating must be true or false")
        if not isinstance(value, int | float) or isinstance(value, bool) or not 0 <= value < 2**64:
            raise ValueError(f"{where}: value must be a number 0..2^64")
        if not isinstance(hist, list) or not all(isinstance(h, list) and len(h) == 2 for h in hist):
            raise ValueError(f"{where}: history must be a list of [time, total] pairs")
        sample = Sample("", "", valid_text(counter, f"{where} counter"), value, tuple(sub), bits, saturating,
                        _number(scale, f"{where} scale"))
        se = Series(sample, _number(poll_t, f"{where} poll time"),
                    None if device_t is None else _number(device_t, f"{where} device time"))
        se.total = _number(total, f"{where} total")
        se.status = FIRST  # the restored reading is the "previous" one: no delta until the next
        points = [(_number(t, f"{where} history"), _number(v, f"{where} history")) for t, v in hist][-self.history:]
        se.history = points or [(se.poll_t, se.total)]
        return (sample.counter, sample.sub), se

    # ----------------------------------------------------------------- queries
    def port(self, pk: PortKey) -> PortEntry | None:
        return self.ports.get(pk)

    def get(self, device: str, port: str, counter: str, sub: tuple[Any, ...] = ()) -> Series | None:
        entry = self.ports.get((device, port))
        return entry.series.get((counter, sub)) if entry else None

    def rate(self, device: str, port: str, counter: str, sub: tuple[Any, ...] = ()) -> float | None:
        se = self.get(device, port, counter, sub)
        return se.rate if se else None

    def delta(self, device: str, port: str, counter: str, sub: tuple[Any, ...] = ()) -> float | None:
        se = self.get(device, port, counter, sub)
        return se.delta if se else None

    def gauge(self, device: str, port: str, name: str, sub: tuple[Any, ...] = ()) -> float | None:
        entry = self.ports.get((device, port))
        if entry is None:
            return None
        g = entry.gauges.get((name, sub))
        return g.value if g else None

    def iter_series(self) -> Iterator[tuple[PortKey, SeriesKey, Series]]:
        for pk, entry in self.ports.items():
            for sk, se in entry.series.items():
                yield pk, sk, se

    def series_count(self) -> int:
        return sum(len(e.series) for e in self.ports.values())


def valid_text(v: Any, what: str) -> str:
    """A restored string: str, and encodable as UTF-8 (JSON can carry lone surrogates, which
    would make every later render of the name fail)."""
    if not isinstance(v, str):
        raise ValueError(f"{what} must be a string, not {type(v).__name__}")
    try:
        v.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError(f"{what} {v[:40]!r} is not valid Unicode (lone surrogate)") from None
    return v


def _number(v: Any, what: str) -> float:
    if not isinstance(v, int | float) or isinstance(v, bool) or v != v or v in (float("inf"), float("-inf")):
        raise ValueError(f"{what} must be a finite number, not {v!r:.40}")
    return float(v)
