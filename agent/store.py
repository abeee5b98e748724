"""Counter store: raw counter readings in, correct deltas and rates out, in numpy columns.

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

**Columns.** Every series is one row of one table of numpy arrays (:class:`_Table`): last raw
value, width, saturation, scale, poll and device clock, total, delta, interval, status and a
ring of ``history`` (time, total) points. Poll times are kept once, in a table of the times
the store has seen (:class:`_Times`): a row's poll time and its history's times are uint16
indices into it (uint32 once more than 65,536 times are in use), so every series of one
poll refers to one time (about 130 bytes a series in all, the headroom included). A
port's series are one contiguous block of rows; the port's *schema* (its series keys in
order, key -> offset) is shared by every port with the same series, so a 100,000-port fabric
of a few device kinds holds a few schemas, not millions of dict entries. A block moves only
when its port's set of series changes. Gauges are columns the same way (a value and a time
per gauge, a block of rows and a shared schema per port), and so is each port's last update
time. One poll is applied as whole-array operations (:meth:`CounterStore.update_columns`),
with the rules above exactly as the object-per-series store had them (tests/store_reference.py
is that store, and tests/test_store_equivalence.py checks both agree on random runs over
every edge case). A target whose readings come in the same layout as its last poll reuses
that poll's plan (rows, ports, devices), so a poll costs no Python step per port or series.
Raw values are uint64; a reading that is not an integer in [0, 2^64) (NVUE can report larger
integers, a restored state may hold floats) is kept as a Python number and goes through the
same array code on object arrays, so its arithmetic is exact.

Series not updated for ``stale_after`` seconds are dropped by :meth:`CounterStore.expire`.

**Changes.** While it updates, the store notes which ports had a counter increase (every
counter except the traffic counters in :data:`DENSE`, which move on every port of a busy
fabric) and which ports had a state gauge change (:data:`TRACKED_GAUGES`), and hands them
out with :meth:`CounterStore.take_changes`. The increases come out of the same array pass
(total after != total before); the detector's rules start from these sets instead of
visiting every port.

**The read API** is what the rules and the state file use, and all they use (a layout test
checks that nothing else touches the store's private names): per port
:meth:`PortEntry.counter` (a :class:`Series` view: ``delta``, ``rate``, ``window()``,
``moved_in_history()``, ``increases()``), :meth:`PortEntry.gauge`, :meth:`PortEntry.counters`;
in bulk :meth:`Changes.moved_series` and :meth:`Changes.ports`; :meth:`CounterStore.port`;
:meth:`CounterStore.save` / :meth:`CounterStore.restore` for persistence. A :class:`Series`
is a view of one row (two references), created when asked for and kept by its port, so
the same series is the same object while its port lives.

**Whole-array reads** for the analyses: :meth:`CounterStore.columns` gives one counter's last
interval or one gauge's value on each of a list of ports as numpy arrays (NaN where a port
lacks it), through every port's block kept as arrays until rows move or the layout changes.

**Bulk reads** for a columnar renderer: :meth:`CounterStore.family_rows` gives, per counter
name, the series in exposition order as arrays (each one's place in :meth:`CounterStore.port_order`,
its sub-labels, its row; cached until the set of series changes, see ``series_layout``);
:meth:`CounterStore.totals` and :meth:`CounterStore.rates` give the arrays those rows index;
:meth:`CounterStore.gauge_rows` and :meth:`CounterStore.gauge_values` do the same for gauges.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import pairwise, repeat
from operator import attrgetter
from typing import Any, NamedTuple

import numpy as np

from fabricmon.agent.exporter.exposition import Family, labels
from fabricmon.core.model import CounterColumns, Counters, DeviceInfo, Gauge, PortInfo, Sample
from fabricmon.core.slicing import group_index, sorted_in_slices
from fabricmon.core.vocabulary import CONFIG_GAUGES, NAMESPACE

# Why the last interval has (or has no) delta.
OK = "ok"
FIRST = "first"
WRAP = "wrap"
RESET = "reset"
SATURATED = "saturated"
CLOCK = "clock"  # the clock did not advance: interval invalid
_STATUS = (OK, FIRST, WRAP, RESET, SATURATED, CLOCK)  # status code (the table's int8) -> name
_S_OK, _S_FIRST, _S_WRAP, _S_RESET, _S_SAT, _S_CLOCK = range(6)

PortKey = tuple[str, str]
SeriesKey = tuple[str, tuple[Any, ...]]
_KEYS: dict[SeriesKey, SeriesKey] = {}

# Traffic counters: they move on every port that carries traffic, so "it moved" says
# nothing and noting it for 100,000 ports per poll would cost more than it saves.
DENSE = frozenset({"rx_bytes", "tx_bytes", "rx_packets", "tx_packets", "queue_tx_packets", "queue_tx_bytes"})
# State gauges whose changes the rules act on (a link going down, a speed drop, a watchdog
# entering storm state), and the configuration gauges (the misconfig checklist re-checks a port
# whose configuration changed). Occupancy and temperature change on every poll and are read directly.
TRACKED_GAUGES = frozenset({"link_up", "link_speed_bytes", "link_width_lanes", "link_width_rated_lanes", "link_speed_rated_bytes",
                            "pfc_watchdog_stormed", *CONFIG_GAUGES})

# Widths a reading may declare: 1..64 are the counters that exist (4, 8, 16, 32, 64 bits);
# wider is accepted (it never wraps and no uint64 reaches its cap). Anything else is refused
# as a series, since no rule can apply to a counter of width 0 or below.
_MAX_BITS = 1024
_CAP = np.array([(1 << b) - 1 for b in range(65)], dtype=np.uint64)  # all-ones of each width
_MOD = np.array([1 << b for b in range(33)], dtype=np.uint64)  # wrap modulus (widths up to 32)
_HALF = np.array([1 << b >> 1 for b in range(33)], dtype=np.uint64)  # half of it


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
        return _ports_of(self.moved, names)

    def moved_series(self, name: str) -> dict[PortKey, Series]:
        """Port -> the series of counter ``name`` that increased there (bulk read: one dict for
        every port where it moved, no per-port lookup)."""
        return self.moved.get(name, {})

    def gauge_ports(self, names: Iterable[str]) -> set[PortKey]:
        """Ports where any of the gauges ``names`` changed."""
        return _ports_of(self.gauges, names)


def _ports_of(by_name: Mapping[str, Mapping[PortKey, object]], names: Iterable[str]) -> set[PortKey]:
    """The union of the ports listed under each of ``names``."""
    out: set[PortKey] = set()
    for name in names:
        out.update(by_name.get(name, ()))
    return out


# ---------------------------------------------------------------------------- the columns
_COLS: dict[str, Any] = {
    "value": np.uint64, "bits": np.int16, "sat": np.bool_, "dense": np.bool_, "scale": np.float64,
    "total": np.float64,
    "delta": np.float64, "delta_ok": np.bool_, "dt": np.float64, "dt_ok": np.bool_, "status": np.int8,
    "head": np.uint16, "npts": np.uint16,
}


# The device clock of each series' last reading (``has_dev``: it had one). Only some sources
# carry one (UFM Telemetry, gNMI); perfquery and SNMP do not, so these columns exist only once
# a series has been read with a device time: 9 B a series (17 MB at 100,000 perfquery ports).
_CLOCK_COLS: dict[str, Any] = {"dev_t": np.float64, "has_dev": np.bool_}


class _Table:
    """One row per series. A series keeps its last ``history`` (poll time, total) points
    (``npts`` of them so far): the newest is its own ``poll_i`` and ``total``, the others are
    the ring ``hist_i``/``hist_v`` of ``history - 1`` slots (the newest is not kept twice: 10 B
    a series), the time as an index into ``times`` (like ``poll_i``), ``head`` the next ring
    slot to write (:meth:`points` reads them in order). ``big`` holds, by row, the raw values that
    are not integers in [0, 2^64) (the ``value`` column then reads 0). ``dev_t``/``has_dev``
    are None until a series has a device time (:meth:`set_clock`, :meth:`clock`)."""

    __slots__ = (*_COLS, *_CLOCK_COLS, "big", "hist_i", "hist_v", "poll_i", "times")

    def __init__(self, history: int, cap: int, times: np.ndarray, index: Any = np.uint16) -> None:
        for name, dtype in _COLS.items():
            setattr(self, name, np.zeros(cap, dtype))
        self.dev_t: np.ndarray | None = None
        self.has_dev: np.ndarray | None = None
        self.poll_i = np.zeros(cap, index)
        self.hist_i = np.zeros((cap, history - 1), index)
        self.hist_v = np.zeros((cap, history - 1))
        self.big: dict[int, Any] = {}
        self.times = times  # the store's table of poll times (a table of held views keeps the one of its time)

    def __len__(self) -> int:
        return len(self.total)

    @property
    def _arrays(self) -> tuple[str, ...]:
        return (*_COLS, *(_CLOCK_COLS if self.dev_t is not None else ()), "poll_i", "hist_i", "hist_v")

    def set_clock(self, rows: np.ndarray | slice, dev_t: np.ndarray, has_dev: np.ndarray) -> None:
        """Write the device times of ``rows``; the columns are made on the first one there is."""
        if self.dev_t is None:
            if not np.any(has_dev):
                return
            self.dev_t, self.has_dev = np.zeros(len(self)), np.zeros(len(self), bool)
        self.dev_t[rows], self.has_dev[rows] = dev_t, has_dev  # type: ignore[index]

    def clock(self, rows: np.ndarray | slice) -> tuple[np.ndarray, np.ndarray]:
        """(device time, has one) of ``rows``."""
        if self.dev_t is None or self.has_dev is None:
            n = len(range(len(self))[rows]) if isinstance(rows, slice) else len(rows)
            return np.zeros(n), np.zeros(n, bool)
        return self.dev_t[rows], self.has_dev[rows]

    def resize(self, cap: int) -> None:
        n = min(cap, len(self))
        for name in self._arrays:
            old = getattr(self, name)
            new = np.zeros((cap, *old.shape[1:]), old.dtype)
            new[:n] = old[:n]
            setattr(self, name, new)

    def widen(self) -> None:
        """Time indices as uint32: more than 65,536 poll times are in use."""
        self.poll_i = self.poll_i.astype(np.uint32)
        self.hist_i = self.hist_i.astype(np.uint32)

    def move_rows(self, src: np.ndarray, dst: np.ndarray, into: _Table) -> None:
        """Copy rows ``src`` to rows ``dst`` of ``into`` (may be self; same times); big values move."""
        if self.dev_t is not None:
            into.set_clock(dst, *self.clock(src))
        for name in (*_COLS, "poll_i", "hist_i", "hist_v"):
            getattr(into, name)[dst] = getattr(self, name)[src]
        if self.big:
            for s, d in zip(src.tolist(), dst.tolist(), strict=True):
                if s in self.big:
                    into.big[d] = self.big.pop(s)

    def nbytes(self) -> int:
        return sum(getattr(self, name).nbytes for name in self._arrays)

    def points(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per row, its points oldest first in ``history`` columns, the newest last: (time
        indices, totals, how many); the first ``history - npts`` columns are not points."""
        slots = self._slots(rows)
        return (self._in_order(self.hist_i, self.poll_i, rows, slots), self._in_order(self.hist_v, self.total, rows, slots),
                self.npts[rows].astype(np.intp))

    def totals(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`points` without the times: (totals, how many)."""
        return self._in_order(self.hist_v, self.total, rows, self._slots(rows)), self.npts[rows].astype(np.intp)

    def _slots(self, rows: np.ndarray) -> np.ndarray:
        r = self.hist_i.shape[1]
        return (self.head[rows].astype(np.intp)[:, None] + np.arange(r)) % r

    @staticmethod
    def _in_order(ring: np.ndarray, newest: np.ndarray, rows: np.ndarray, slots: np.ndarray) -> np.ndarray:
        return np.concatenate([np.take_along_axis(ring[rows], slots, 1), newest[rows][:, None]], 1)


class _GaugeTable:
    """One row per gauge: its last value and when it was read."""

    __slots__ = ("t", "value")

    def __init__(self, cap: int) -> None:
        self.value = np.zeros(cap)
        self.t = np.zeros(cap)

    def __len__(self) -> int:
        return len(self.value)

    def resize(self, cap: int) -> None:
        n = min(cap, len(self))
        for name in self.__slots__:
            old = getattr(self, name)
            new = np.zeros(cap, old.dtype)
            new[:n] = old[:n]
            setattr(self, name, new)

    def move_rows(self, src: np.ndarray, dst: np.ndarray, into: _GaugeTable) -> None:
        for name in self.__slots__:
            getattr(into, name)[dst] = getattr(self, name)[src]

    def nbytes(self) -> int:
        return self.value.nbytes + self.t.nbytes


class _Rows:
    """Blocks of rows in a table: a block per port, reused by size when freed, the table grown
    (by an eighth: a fabric's first poll creates every series at once) when none is free."""

    __slots__ = ("end", "free", "free_rows", "table")

    def __init__(self, table: Any) -> None:
        self.table = table
        self.end = 0  # rows in use or freed; rows from here on were never used
        self.free: dict[int, list[int]] = {}  # block size -> bases of freed blocks
        self.free_rows = 0

    def reserve(self, n: int) -> None:
        """Room for ``n`` more rows: exactly, plus 1/32 for the growth still to come (a few
        ports gaining series; rows are most of the store's bytes)."""
        need = self.end + n
        if need > len(self.table):
            self.table.resize(need + need // 32)

    def alloc(self, n: int) -> int:
        """The base of a free block of ``n`` rows."""
        free = self.free.get(n)
        if free:
            self.free_rows -= n
            return free.pop()
        base = self.end
        self.end += n
        if self.end > len(self.table):
            self.table.resize(max(self.end, len(self.table) * 9 // 8))
        return base

    def release(self, base: int, n: int) -> None:
        if n:
            self.free.setdefault(n, []).append(base)
            self.free_rows += n


_NARROW_TIMES = 1 << 16  # poll times uint16 indices can name


class _Times:
    """The poll times the store has seen, each once; rows refer to them by index.

    A poll adds its time once, so the table grows by one per target and poll: when it has
    doubled since it was last compacted, it keeps only the times some series still refers to
    (a few per target: at most ``history`` polls back). The array is replaced, never changed in
    place, so a table that still refers to an older array (the copy of an expired port whose
    views are held) reads its times there."""

    __slots__ = ("array", "index", "limit", "n")
    FLOOR = 65536  # times kept before the first compaction, and at least after each

    def __init__(self) -> None:
        self.array = np.zeros(1024)
        self.n = 0
        self.index: dict[float, int] = {}
        self.limit = self.FLOOR

    def of(self, t: float) -> int:
        """The index of time ``t`` (added if new; the caller compacts when :attr:`full`)."""
        i = self.index.get(t)
        if i is None:
            if self.n == len(self.array):
                grown = np.zeros(2 * self.n)
                grown[:self.n] = self.array
                self.array = grown
            i = self.index[t] = self.n
            self.array[i] = t
            self.n += 1
        return i

    @property
    def full(self) -> bool:
        return self.n >= self.limit

    def keep(self, used: np.ndarray) -> np.ndarray:
        """Keep only the times ``used`` (indices); returns old index -> new index."""
        used = np.unique(used)
        remap = np.zeros(max(self.n, 1), np.uint32)
        remap[used] = np.arange(len(used), dtype=np.uint32)  # (cast to the tables' index type by the caller)
        kept = self.array[used]
        self.array = np.zeros(max(1024, 2 * len(used)))
        self.array[:len(used)] = kept
        self.n = len(used)
        self.index = dict(zip(kept.tolist(), range(len(used)), strict=True))
        self.limit = max(self.FLOOR, 2 * len(used))
        return remap


class _Schema:
    """The series keys of a port in creation order, and key -> offset in the port's block.
    Interned: every port with the same keys shares one."""

    __slots__ = ("__weakref__", "index", "keys")

    def __init__(self, keys: tuple[SeriesKey, ...]) -> None:
        self.keys = keys
        self.index = {k: i for i, k in enumerate(keys)}


_SCHEMAS: weakref.WeakValueDictionary[tuple[SeriesKey, ...], _Schema] = weakref.WeakValueDictionary()


def _schema(keys: tuple[SeriesKey, ...]) -> _Schema:
    s = _SCHEMAS.get(keys)
    if s is None:
        s = _SCHEMAS[keys] = _Schema(keys)
    return s


_NO_SERIES = _schema(())


# ---------------------------------------------------------------------------- the read API
class Series:
    """A view of one counter series. ``delta``/``rate`` are None when the last interval was invalid."""

    __slots__ = ("_entry", "_off")

    def __init__(self, entry: PortEntry, off: int) -> None:
        self._entry = entry
        self._off = off

    def _at(self) -> tuple[_Table, int]:
        e = self._entry
        return e.table, e.base + self._off

    @property
    def value(self) -> int | float:
        t, i = self._at()
        return t.big[i] if t.big and i in t.big else t.value.item(i)

    @property
    def bits(self) -> int:
        t, i = self._at()
        return t.bits.item(i)

    @property
    def saturating(self) -> bool:
        t, i = self._at()
        return t.sat.item(i)

    @property
    def scale(self) -> float:
        t, i = self._at()
        return t.scale.item(i)

    @property
    def total(self) -> float:
        e = self._entry  # (inlined _at: the exporter reads this once per series per render)
        return e.table.total.item(e.base + self._off)

    @property
    def poll_t(self) -> float:
        t, i = self._at()
        return t.times.item(t.poll_i.item(i))

    @property
    def device_t(self) -> float | None:
        t, i = self._at()
        return t.dev_t.item(i) if t.has_dev is not None and t.dev_t is not None and t.has_dev.item(i) else None

    @property
    def delta(self) -> float | None:
        e = self._entry
        t, i = e.table, e.base + self._off
        return t.delta.item(i) if t.delta_ok.item(i) else None

    @property
    def dt(self) -> float | None:
        t, i = self._at()
        return t.dt.item(i) if t.dt_ok.item(i) else None

    @property
    def status(self) -> str:
        t, i = self._at()
        return _STATUS[t.status.item(i)]

    @property
    def rate(self) -> float | None:
        """Base units per second over the last interval."""
        t, i = self._at()
        if not t.delta_ok.item(i):
            return None
        dt = t.dt.item(i)
        return t.delta.item(i) / dt if dt else None

    def _slots(self) -> tuple[_Table, int, list[int]]:
        """The ring slots of the kept points but the newest, oldest first."""
        t, i = self._at()
        r = t.hist_i.shape[1]
        head, n = t.head.item(i), t.npts.item(i)
        return t, i, [(head + k) % r for k in range(r - n + 1, r)]

    @property
    def history(self) -> list[tuple[float, float]]:
        """(poll time, total) pairs, oldest first."""
        t, i, idx = self._slots()
        ts, vs = t.times[t.hist_i[i]].tolist(), t.hist_v[i].tolist()
        newest = [(t.times.item(t.poll_i.item(i)), t.total.item(i))] if t.npts.item(i) else []
        return [(ts[j], vs[j]) for j in idx] + newest

    def _totals(self) -> list[float]:
        t, i, idx = self._slots()
        vs = t.hist_v[i].tolist()
        return [vs[j] for j in idx] + ([t.total.item(i)] if t.npts.item(i) else [])

    def moved_in_history(self) -> bool:
        """Any increase within the kept history (includes the last interval)."""
        totals = self._totals()
        return self.total != totals[0]

    def increases(self, intervals: int) -> int:
        """How many of the last ``intervals`` kept intervals saw an increase."""
        totals = self._totals()[-(intervals + 1):]
        return sum(1 for a, b in pairwise(totals) if b > a)

    def at_cap(self, value: int | float) -> bool:
        return self.saturating and value >= (1 << self.bits) - 1

    def window(self, seconds: float) -> tuple[float, float] | None:
        """(increase in base units, elapsed poll seconds) over roughly the last ``seconds``.

        Uses the oldest history point no older than ``seconds``; None with fewer than two
        points. The increase includes only valid intervals (totals skip resets).
        """
        h = self.history
        if len(h) < 2:
            return None
        t_now, total_now = h[-1]
        for t, total in h:
            if t_now - t <= seconds + 1e-9:
                if t == t_now:
                    return None
                return total_now - total, t_now - t
        return None


@dataclass(slots=True)
class GaugeValue:
    """A gauge's last reading and when it was read."""

    value: float
    t: float


class _SeriesMap(Mapping[SeriesKey, Series]):
    """``PortEntry.series``: the port's series as a read-only mapping of views (for the
    exporter's per-series loop; views made here are not kept, so a full render does not
    leave one object per series behind)."""

    __slots__ = ("_entry",)

    def __init__(self, entry: PortEntry) -> None:
        self._entry = entry

    def __getitem__(self, key: SeriesKey) -> Series:
        e = self._entry
        off = e.schema.index[key]
        return e.kept_view(off) or Series(e, off)

    def __iter__(self) -> Iterator[SeriesKey]:
        return iter(self._entry.schema.keys)

    def __len__(self) -> int:
        return len(self._entry.schema.keys)


class _GaugeMap(Mapping[SeriesKey, GaugeValue]):
    """``PortEntry.gauges``: the port's gauges as a read-only mapping of (value, time) copies
    (tests and tools; the rules use :meth:`PortEntry.gauge`, a renderer the bulk reads)."""

    __slots__ = ("_entry",)

    def __init__(self, entry: PortEntry) -> None:
        self._entry = entry

    def __getitem__(self, key: SeriesKey) -> GaugeValue:
        e = self._entry
        i = e.gbase + e.gschema.index[key]
        return GaugeValue(e.gtable.value.item(i), e.gtable.t.item(i))

    def __iter__(self) -> Iterator[SeriesKey]:
        return iter(self._entry.gschema.keys)

    def __len__(self) -> int:
        return len(self._entry.gschema.keys)


class _PortColumns:
    """Per port (by ``PortEntry.pi``): when it was last updated. A column, so a poll marks its
    ports in one numpy assignment."""

    __slots__ = ("free", "n", "seen")

    def __init__(self) -> None:
        self.seen = np.zeros(1024)
        self.n = 0
        self.free: list[int] = []

    def add(self, seen: float) -> int:
        if self.free:
            i = self.free.pop()
        else:
            i = self.n
            self.n += 1
            if i == len(self.seen):
                grown = np.zeros(2 * i)
                grown[:i] = self.seen
                self.seen = grown
        self.seen[i] = seen
        return i


class PortEntry:
    """Everything the store holds for one port: its schema and block of rows in ``table``,
    its gauges (schema and block in ``gtable``), its descriptive info, when it was last updated
    (a column of the store's, by ``pi``) and by which target."""

    __slots__ = ("_cols", "_seen", "base", "gbase", "gschema", "gtable", "info", "pi", "schema", "table", "target",
                 "views")

    def __init__(self, table: _Table, gtable: _GaugeTable, cols: _PortColumns, target: str = "", seen: float = 0.0) -> None:
        self.table = table
        self.schema = _NO_SERIES
        self.base = 0
        # The views handed out (see :meth:`view`): None, the one view, or a dict of them by offset.
        self.views: Series | dict[int, Series] | None = None
        self.gtable = gtable
        self.gschema = _NO_SERIES
        self.gbase = 0
        self.info: PortInfo | None = None
        self._cols = cols
        self.pi = cols.add(seen)
        self._seen = seen  # when the port has left the store (pi -1): its last update
        self.target = target

    @property
    def seen(self) -> float:
        return self._cols.seen.item(self.pi) if self.pi >= 0 else self._seen

    @seen.setter
    def seen(self, t: float) -> None:
        if self.pi >= 0:
            self._cols.seen[self.pi] = t
        else:
            self._seen = t

    def view(self, off: int) -> Series:
        """The view of the series at ``off``, the same object every time. Most ports have their
        views asked for one series (the one non-dense counter that moves), so that one is kept
        alone: a dict per port was 232 B (23 MB at 100,000 ports)."""
        se = self.kept_view(off)
        if se is None:
            se = Series(self, off)
            views = self.views
            if views is None:
                self.views = se
            elif isinstance(views, Series):
                self.views = {views._off: views, off: se}
            else:
                views[off] = se
        return se

    def kept_view(self, off: int) -> Series | None:
        """The view :meth:`view` handed out for ``off``, if any."""
        views = self.views
        if isinstance(views, Series):
            return views if views._off == off else None
        return views.get(off) if views else None

    @property
    def series(self) -> Mapping[SeriesKey, Series]:
        return _SeriesMap(self)

    @property
    def gauges(self) -> Mapping[SeriesKey, GaugeValue]:
        return _GaugeMap(self)

    # The read API the rules use.
    def counter(self, name: str, sub: tuple[Any, ...] = ()) -> Series | None:
        """The series of counter ``name`` with sub-labels ``sub`` (priority, queue, ...), or None."""
        off = self.schema.index.get((name, sub))
        return None if off is None else self.view(off)

    def gauge(self, name: str, sub: tuple[Any, ...] = ()) -> float | None:
        off = self.gschema.index.get((name, sub))
        return None if off is None else self.gtable.value.item(self.gbase + off)

    def counters(self) -> Iterator[tuple[str, tuple[Any, ...], Series]]:
        """Every counter series of the port as (name, sub, series)."""
        for off, (name, sub) in enumerate(self.schema.keys):
            yield name, sub, self.view(off)

    def series_count(self) -> int:
        return len(self.schema.keys)

    @property
    def shape(self) -> tuple[object, object]:
        """A token that changes whenever the port's set of counter series or of gauges changes
        (ports with the same series or gauges share one schema), for readers that cache what
        they derive from which series a port has."""
        return (self.schema, self.gschema)


class _Keys(Sequence[tuple[PortKey, tuple[Any, ...]]]):
    """:attr:`FamilyRows.keys`: the (port, sub) of each row, made when read (the family holds
    two index arrays, not a tuple per series)."""

    __slots__ = ("_port_at", "_ports", "_sub_at", "_subs")

    def __init__(self, ports: Sequence[PortKey], port_at: np.ndarray, subs: Sequence[tuple[Any, ...]], sub_at: np.ndarray) -> None:
        self._ports, self._port_at, self._subs, self._sub_at = ports, port_at, subs, sub_at

    def __len__(self) -> int:
        return len(self._port_at)

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        return (self._ports[self._port_at[i]], self._subs[self._sub_at[i]])

    def __iter__(self) -> Iterator[tuple[PortKey, tuple[Any, ...]]]:
        return zip(map(self._ports.__getitem__, self._port_at.tolist()), map(self._subs.__getitem__, self._sub_at.tolist()),
                   strict=True)


class FamilyRows(NamedTuple):
    """One counter's (or gauge's) series for a bulk reader, in exposition order (ports sorted,
    then sub-labels by their text): series ``i`` is port ``port_at[i]`` of
    :meth:`CounterStore.port_order` with sub-labels ``subs[sub_at[i]]``, in row ``rows[i]`` of
    :meth:`CounterStore.totals` / :meth:`CounterStore.rates` (gauges:
    :meth:`CounterStore.gauge_values`). ``keys[i]`` is the same as one (port, sub) tuple."""

    keys: Sequence[tuple[PortKey, tuple[Any, ...]]]
    rows: np.ndarray
    port_at: np.ndarray
    subs: tuple[tuple[Any, ...], ...]
    sub_at: np.ndarray


class _Plan(NamedTuple):
    """How one target's columns map to rows, kept per target while its layout holds."""

    token: Any  # the producer's layout token (None: ports, port_of and keys below are compared)
    ports: Sequence[PortKey]
    port_of: np.ndarray
    keys: Sequence[SeriesKey]
    gen: int
    entries: list[PortEntry | None]
    rows: np.ndarray  # per input row; -1 where refused
    chunks: list[_Chunk]  # the readings in chunks of at most _CHUNK, each in its passes
    new: np.ndarray | None  # first readings of new series (None: none; never cached)
    refused_ports: int
    refused_series: int
    marks: _Marks  # the ports it updates, for the next poll with the same layout


class _Chunk(NamedTuple):
    """Readings ``start`` to ``stop`` of a poll: applied together, one pass per repeat of a
    series (so a series read twice is advanced twice, in order)."""

    start: int
    stop: int
    passes: list[np.ndarray | None]  # positions in the chunk per pass (None: every reading, once each)
    index: list[slice | np.ndarray]  # per pass, its rows (a slice when they are contiguous)


# Readings applied at once: the arrays of one chunk are tens of MB (a 100,000-port poll is
# 1.8 million readings; its temporaries all at once were 235 MB above the store's own).
_CHUNK = 1 << 16


def _port_groups(port_of: np.ndarray) -> Iterable[tuple[int, int]]:
    """(start, stop) of each run of readings of one port group; one reading at a time when the
    groups are not in order (a group may then come back later)."""
    n = len(port_of)
    if n == 0:
        return []
    steps = np.diff(port_of)
    if not bool((steps >= 0).all()):
        return ((i, i + 1) for i in range(n))
    bounds = (np.flatnonzero(steps) + 1).tolist()
    return zip([0, *bounds], [*bounds, n], strict=True)


def _chunks(rows: np.ndarray, end: int) -> list[_Chunk]:
    out = []
    for a in range(0, len(rows), _CHUNK):
        r = rows[a:a + _CHUNK]
        passes = _passes(r, end)
        out.append(_Chunk(a, a + len(r), passes, [_index(r if pos is None else r[pos]) for pos in passes]))
    return out


class _Marks(NamedTuple):
    """What a poll with a cached plan marks as updated: its ports (the set returned, their
    ``pi``), their devices, and the store's target generation when the targets were set."""

    ports: frozenset[PortKey]
    pi: np.ndarray
    devices: tuple[str, ...]
    entries: tuple[PortEntry, ...]
    targets: int


class _GaugePlan(NamedTuple):
    """How one target's gauges map to gauge rows, kept while the same gauges come in the same
    order (the same objects, or the same keys) and no gauge row moved."""

    gen: int
    objs: list[Gauge]  # the last poll's gauges (their keys are compared when they are other objects)
    rows: np.ndarray
    tracked: np.ndarray  # per gauge: a state gauge whose changes the rules act on
    port_of: list[PortKey]  # per gauge
    marks: _Marks


_GAUGE_KEY = attrgetter("device", "port", "name", "sub")
_GAUGE_VALUE = attrgetter("value")


# Bounds on what readings can create, so a hostile device or recording cannot grow the store
# without limit. A port carries about 20 base counters plus per-priority (8), per-queue (8-16)
# and per-reason (WJH) series: a few hundred at most on every device seen; 1,024 leaves 3x
# headroom. 1,000,000 ports is 10x the largest fabric one agent is sized for (docs/scaling.md).
# The columns of a StoreImage, with their dtypes: one row per series. hist_t/hist_v: the ring of
# (time, total) points of each series as the store keeps it, ``head`` the next slot to write,
# ``npts`` the points in it (the ``npts`` slots before ``head``, cyclically). Copied as they are:
# putting them in order took 2 of the 2.5 s of a 1.8 M-series snapshot; the restore does it.
IMAGE_COLUMNS: dict[str, Any] = {
    "value": np.uint64, "bits": np.int16, "sat": np.bool_, "scale": np.float64, "total": np.float64,
    "poll_t": np.float64, "dev_t": np.float64, "has_dev": np.bool_, "head": np.uint16, "npts": np.uint16,
    "hist_t": np.float64, "hist_v": np.float64,
}


@dataclass
class StoreImage:
    """The persistent content of a store as columns (:meth:`CounterStore.image`)."""

    keys: list[list[Any]]  # distinct series keys, as [counter, [sub-labels]]
    schemas: list[list[int]]  # per distinct port layout, its key indices in row order
    ports: list[list[Any]]  # [device, port, target, seen, schema index]; their rows follow one another
    device_clocks: dict[str, list[float]]
    columns: dict[str, np.ndarray]  # IMAGE_COLUMNS
    big: dict[int, Any]  # row -> a raw value that is not an integer in [0, 2^64) ("value" reads 0)


class _CheckedImage(NamedTuple):
    """A :class:`StoreImage` checked by :meth:`CounterStore._checked_image`, ready to be written."""

    keys: list[SeriesKey]
    schemas: list[np.ndarray]
    sids: np.ndarray  # per port: its schema index
    sizes: np.ndarray  # per port: its number of series
    cols: dict[str, np.ndarray]
    hist_t: np.ndarray  # history rings in order, oldest point first
    hist_v: np.ndarray
    big: dict[int, Any]  # row -> value beyond float precision
    clocks: dict[str, tuple[float, float]]  # fresh device clocks


def _checked_columns(raw: dict[str, Any], n: int) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray]:
    """The image's columns checked, and its history rings in order (the first h - npts points of a
    row are not points)."""
    cols = _image_columns(raw, n)
    for name in ("scale", "total", "poll_t", "dev_t"):
        if not np.isfinite(cols[name]).all():
            raise ValueError(f"column {name} holds a value that is not a finite number")
    if ((cols["bits"] < 1) | (cols["bits"] > 64)).any():
        raise ValueError("column bits holds a width outside 1..64")
    h_img = cols["hist_t"].shape[1]
    if (cols["npts"] > h_img).any() or (cols["head"] >= h_img).any():
        raise ValueError("columns head/npts point outside the history")
    order = (cols["head"].astype(np.intp)[:, None] + np.arange(h_img)) % h_img
    hist_t, hist_v = np.take_along_axis(cols["hist_t"], order, 1), np.take_along_axis(cols["hist_v"], order, 1)
    del order
    pad = np.arange(h_img)[None, :] >= (h_img - cols["npts"].astype(np.int64))[:, None]  # the valid points
    if not (np.isfinite(hist_t) | ~pad).all() or not (np.isfinite(hist_v) | ~pad).all():
        raise ValueError("the history holds a value that is not a finite number")
    return cols, hist_t, hist_v


def _checked_big(raw: dict[Any, Any], n: int) -> dict[int, Any]:
    big: dict[int, Any] = {}
    for row, v in raw.items():
        if type(row) is not int or not 0 <= row < n or not isinstance(v, int | float) or isinstance(v, bool) or not 0 <= v < 2**64:
            raise ValueError(f"big value of row {row!r:.20}: not a number 0..2^64 of a series row")
        big[row] = v
    return big


def _checked_clocks(raw: dict[Any, Any], limit: float) -> dict[str, tuple[float, float]]:
    """The device clocks of the image polled at ``limit`` or later."""
    clocks: dict[str, tuple[float, float]] = {}
    for device, v in raw.items():
        if not isinstance(v, list) or len(v) != 2:
            raise ValueError(f"device_clocks[{device!r:.40}]: not [device clock, poll time]")
        pair = (_number(v[0], "device clock"), _number(v[1], "device clock poll time"))
        if pair[1] >= limit:
            clocks[valid_text(device, "device_clocks key")] = pair
    return clocks


def _image_columns(cols: dict[str, Any], n: int) -> dict[str, np.ndarray]:
    """The image's columns, checked: every column present, of its dtype, ``n`` rows."""
    out = {}
    for name, dtype in IMAGE_COLUMNS.items():
        a = cols.get(name)
        if not isinstance(a, np.ndarray) or a.dtype != np.dtype(dtype) or len(a) != n:
            raise ValueError(f"column {name}: expected {n} rows of {np.dtype(dtype).name}")
        if name.startswith("hist_") and (a.ndim != 2 or a.shape[1] < 1):
            raise ValueError(f"column {name}: expected one history row per series")
        out[name] = a
    if out["hist_t"].shape != out["hist_v"].shape:
        raise ValueError("columns hist_t and hist_v differ in shape")
    return out


MAX_PORTS = 1_000_000
MAX_SERIES_PER_PORT = 1024


class _GroupClocks(NamedTuple):
    """Per port group of a poll's columns: its device's clock (when the device has one) and
    whether that clock failed to advance (None: no group has either)."""

    has: np.ndarray | None
    t: np.ndarray | None
    bad: np.ndarray | None

    @classmethod
    def of(cls, cols: CounterColumns, clock_bad: set[str]) -> _GroupClocks:
        has = t = None
        if cols.clocks:
            g_dev = [cols.clocks.get(d) for d, _ in cols.ports]
            has = np.array([x is not None for x in g_dev], dtype=bool)
            t = np.array([0.0 if x is None else x for x in g_dev], dtype=np.float64)
        bad = np.array([d in clock_bad for d, _ in cols.ports], dtype=bool) if clock_bad else None
        return cls(has, t, bad)


class _Readings(NamedTuple):
    """Readings ``a`` to ``b`` of a poll as arrays (per reading) for :meth:`CounterStore._apply`."""

    values: np.ndarray
    exotic: np.ndarray | None  # readings that are not an integer in [0, 2^64) (kept as Python numbers)
    bits: np.ndarray
    sat: np.ndarray
    scale: np.ndarray
    dev_t: np.ndarray  # the device clock of the reading's device (0 without one)
    has_dev: np.ndarray
    bad: np.ndarray  # the device's clock did not advance

    @classmethod
    def of(cls, cols: CounterColumns, a: int, b: int, port_of: np.ndarray, g: _GroupClocks) -> _Readings:
        n = b - a
        values, exotic = _values(cols.values[a:b], n)
        bits = _array(cols.bits[a:b], np.int64).reshape(n).clip(0, _MAX_BITS).astype(np.int16)
        sat = _array(cols.saturating[a:b], bool).reshape(n)
        scale = _array(cols.scale[a:b], np.float64).reshape(n)
        has_dev, dev_t = (g.has[port_of], g.t[port_of]) if g.has is not None and g.t is not None else (np.zeros(n, bool), np.zeros(n))
        bad = g.bad[port_of] if g.bad is not None else np.zeros(n, bool)
        return cls(values, exotic, bits, sat, scale, dev_t, has_dev, bad)


@dataclass(frozen=True, slots=True)
class StoreStatus:
    """What :meth:`CounterStore.status` reports."""

    series: int  # counter series held
    refused_ports: int  # readings of new ports refused at max_ports
    refused_series: int  # readings of new series refused at max_series_per_port


class CounterStore:
    def __init__(self, history: int = 8, stale_after: float = 600.0, max_ports: int = MAX_PORTS,
                 max_series_per_port: int = MAX_SERIES_PER_PORT) -> None:
        if not 2 <= history <= 65535:
            raise ValueError("history must keep at least 2 points (and at most 65535)")
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
        self.series_layout = 0  # bumped when the set of series changes: family_rows() is rebuilt
        self.gauge_layout = 0  # bumped when a port gains a gauge (gauges are never removed)
        self._changes = Changes()
        self._times = _Times()
        self._t = _Table(history, 1024, self._times.array)
        self._rows = _Rows(self._t)
        self._gt = _GaugeTable(1024)
        self._grows = _Rows(self._gt)
        self._pcols = _PortColumns()
        self._gen = 0  # bumped whenever rows move or are freed: cached plans are then stale
        self._ggen = 0  # the same for gauge rows
        self._targets = 0  # bumped whenever a port's target changes: cached marks set targets again
        self._plans: dict[str, _Plan] = {}
        self._gplans: dict[str, _GaugePlan] = {}
        self._infos: dict[str, tuple[tuple[int, int], list[PortInfo]]] = {}  # target -> (stamp, the port infos it set)
        self._info_writes = 0  # set_port_info calls that wrote (a stamp of the entries' infos)
        self._families: tuple[tuple[int, ...], dict[str, FamilyRows]] | None = None
        self._gauge_families: tuple[tuple[int, ...], dict[str, FamilyRows]] | None = None
        self._order: tuple[int, list[PortKey]] | None = None
        self._columns: _WholeColumns | None = None  # see columns()
        self.device_writes = 0  # bumped when a device is first described or its description changes

    @property
    def info_stamp(self) -> tuple[int, int]:
        """Changes whenever a port comes or goes or a port's info is set: readers that derive
        something from every port's info cache it under this."""
        return (self.layout, self._info_writes)

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
        """Feed one poll's readings as objects. Returns the ports that were updated."""
        return self.update_columns(Counters.of(samples).columns(target, clocks, list(gauges)), poll_t)

    def update_columns(self, cols: CounterColumns, poll_t: float) -> set[PortKey]:
        """Feed one poll's readings as columns. Returns the ports that were updated."""
        clock_bad = self._clocks(cols.clocks, poll_t)
        touched: set[PortKey] = set()
        devices: set[str] = set()
        plan = self._plan(cols, poll_t, touched, devices)
        self.refused["port"] += plan.refused_ports
        self.refused["series"] += plan.refused_series
        if len(plan.rows):
            self._apply(cols, plan, poll_t, clock_bad)
        self._gauges(cols.gauges, cols.target, poll_t, touched, devices)
        self.device_seen.update(dict.fromkeys(devices, poll_t))
        if cols.target:
            self.device_target.update(dict.fromkeys(devices, cols.target))
        return touched

    def _clocks(self, clocks: dict[str, float], poll_t: float) -> set[str]:
        """Record the device clocks; the devices whose clock did not advance (rebooted or
        uptime wrapped: every interval of theirs is invalid)."""
        bad: set[str] = set()
        for device, dev_t in clocks.items():
            prev = self._device_clock.get(device)
            if prev is not None and dev_t <= prev[0]:
                bad.add(device)
            self._device_clock[device] = (dev_t, poll_t)
        return bad

    def _entry(self, pk: PortKey, target: str = "", seen: float = 0.0) -> PortEntry:
        """A new port (the caller bumps ``layout``)."""
        entry = self.ports[pk] = PortEntry(self._t, self._gt, self._pcols, target=target, seen=seen)
        return entry

    def _touch(self, pk: PortKey, target: str, poll_t: float, touched: set[PortKey], devices: set[str]) -> PortEntry | None:
        """The port's entry (created on first sight), marked as updated by this poll; None for a
        new port the store has no room for (counted by the caller)."""
        entry = self.ports.get(pk)
        if entry is None:
            if len(self.ports) >= self.max_ports:
                return None
            entry = self._entry(pk, target)
            self.layout += 1
        if pk not in touched:
            touched.add(pk)
            devices.add(pk[0])
            entry.seen = poll_t
            if target and entry.target != target:
                entry.target = target
                self._targets += 1
        return entry

    def _marks(self, pks: Iterable[PortKey], entries: Iterable[PortEntry | None]) -> _Marks:
        pairs = [(pk, e) for pk, e in zip(pks, entries, strict=True) if e is not None]
        got = dict(pairs)  # a port may come in several groups
        return _Marks(frozenset(got), np.array([e.pi for e in got.values()], np.int64),
                      tuple(dict.fromkeys(pk[0] for pk in got)), tuple(got.values()), self._targets)

    def _mark(self, marks: _Marks, target: str, poll_t: float, touched: set[PortKey], devices: set[str]) -> None:
        """Mark a cached plan's ports as updated: one numpy assignment, the sets in C."""
        touched |= marks.ports
        devices.update(marks.devices)
        self._pcols.seen[marks.pi] = poll_t
        if target and marks.targets != self._targets:  # some port's target changed since: set them again
            for e in marks.entries:
                if e.target != target:
                    e.target = target
                    self._targets += 1

    def _plan(self, cols: CounterColumns, poll_t: float, touched: set[PortKey], devices: set[str]) -> _Plan:
        """Rows of this poll's readings. The target's last plan is reused while its layout holds
        (the producer's token is the same, or without one the same ports and keys as the poll
        that made it); otherwise rows are found by key, series created and blocks of ports
        that grew moved."""
        target = cols.target
        cached = self._plans.get(target)
        if cached is not None and cached.gen == self._gen and _same_layout(cached, cols):
            # The plan's entries are still the store's (no port was dropped or moved since:
            # that bumps the generation); a refused port (None) is refused again.
            self._mark(cached.marks, target, poll_t, touched, devices)
            if cached.marks.targets != self._targets:
                self._plans[target] = cached._replace(marks=cached.marks._replace(targets=self._targets))
            return cached
        entries = [self._touch(pk, target, poll_t, touched, devices) for pk in cols.ports]
        n = len(cols.keys)
        bits = _array(cols.bits, np.int64).reshape(n)
        bad_bits = set(np.flatnonzero((bits < 1) | (bits > _MAX_BITS)).tolist()) if n else set()
        port_of = _array(cols.port_of, np.int32).reshape(n)
        offs, new, refused_series = self._offsets(cols.keys, port_of, entries, bad_bits)
        base = np.array([e.base if e is not None else 0 for e in entries], dtype=np.int64)
        rows = base[port_of] + offs
        rows[offs < 0] = -1
        if len(rows) and rows.max() < 1 << 31:
            rows = rows.astype(np.int32)  # kept in the plan: half the bytes
        plan = _Plan(cols.layout, cols.ports, port_of, cols.keys, self._gen, entries, rows, _chunks(rows, self._rows.end),
                     new, entries.count(None), refused_series, self._marks(cols.ports, entries))
        if bad_bits:
            self._plans.pop(target, None)
        else:
            self._plans[target] = plan._replace(new=None)
        return plan

    def _offsets(self, keys: Sequence[SeriesKey], port_of: np.ndarray, entries: list[PortEntry | None],
                 bad_bits: set[int]) -> tuple[np.ndarray, np.ndarray | None, int]:
        """Each reading's offset in its port's block (-1: refused), which readings start a new
        series, and how many were refused; ports that gain series get their larger blocks.

        Readings come in port groups; a group whose keys and port schema were seen before (on
        a fabric, nearly every port is one of a few shapes) takes its offsets from that,
        without a step per reading. A group of a port already growing in this poll, one with
        a refused reading or a width out of range is read reading by reading."""
        n = len(keys)
        offs = np.full(n, -1, np.int64)
        new = np.zeros(n, bool)
        refused = 0
        limit = self.max_series_per_port
        grown: dict[PortEntry, dict[SeriesKey, int]] = {}
        shapes: dict[tuple[Any, tuple[SeriesKey, ...]], tuple[np.ndarray, np.ndarray, tuple[SeriesKey, ...]] | None] = {}
        for a, b in _port_groups(port_of):
            e = entries[port_of[a]]
            if e is None:
                continue
            if e not in grown and not (bad_bits and any(i in bad_bits for i in range(a, b))):
                ks = tuple(keys[a:b])
                shape = shapes.get((e.schema, ks), False)
                if shape is False:
                    shape = shapes[(e.schema, ks)] = _shape(e.schema, ks, limit)
                if shape is not None:
                    o, first, added = shape
                    offs[a:b] = o
                    if added:
                        new[a:b] = first
                        grown[e] = {k: len(e.schema.keys) + j for j, k in enumerate(added)}
                    continue
            refused += self._offsets_one_by_one(keys, range(a, b), e, bad_bits, grown, offs, new)
        if grown:
            self._reserve(sum(len(e.schema.keys) + len(pend) for e, pend in grown.items()))
        for e, pend in grown.items():
            self._grow(e, pend)
        return offs, (new if new.any() else None), refused

    def _offsets_one_by_one(self, keys: Sequence[SeriesKey], at: range, e: PortEntry, bad_bits: set[int],
                            grown: dict[PortEntry, dict[SeriesKey, int]], offs: np.ndarray, new: np.ndarray) -> int:
        """:meth:`_offsets` for the readings ``at`` of port ``e``, reading by reading; returns how
        many were refused (a width out of range, or a new series at ``max_series_per_port``)."""
        refused = 0
        for i in at:
            if bad_bits and i in bad_bits:
                refused += 1
                continue
            key = keys[i]
            off = e.schema.index.get(key)
            if off is None:
                pend = grown.get(e)
                if pend is None:
                    pend = grown[e] = {}
                off = pend.get(key)
                if off is None:
                    size = len(e.schema.keys) + len(pend)
                    if size >= self.max_series_per_port:
                        refused += 1
                        continue
                    off = pend[_KEYS.setdefault(key, key)] = size
                    new[i] = True
            offs[i] = off
        return refused

    def _apply(self, cols: CounterColumns, plan: _Plan, poll_t: float, clock_bad: set[str]) -> None:
        """Whole-array passes over the readings, chunk by chunk (one pass per repeat of a series)."""
        t = self._t
        clocks = _GroupClocks.of(cols, clock_bad)
        big_rows = np.fromiter(t.big, np.int64, len(t.big)) if t.big else None
        ti = self._time(poll_t)
        for ch in plan.chunks:
            a, b = ch.start, ch.stop
            rd = _Readings.of(cols, a, b, plan.port_of[a:b], clocks)
            moved = np.zeros(b - a, bool)
            rows = plan.rows[a:b]
            new_all = None if plan.new is None else plan.new[a:b]
            for pos, idx in zip(ch.passes, ch.index, strict=True):
                pick = (lambda x: x) if pos is None else (lambda x, pos=pos: x[pos])
                r = pick(rows)
                big = None if rd.exotic is None else pick(rd.exotic)
                if big_rows is not None:
                    in_big = np.isin(r, big_rows)
                    big = in_big if big is None else big | in_big
                new = None if new_all is None else pick(new_all)
                if (big is None or not big.any()) and (new is None or not new.any()):  # the steady state
                    mv = self._advance(idx, pick(rd.values), pick(rd.bits), pick(rd.sat), pick(rd.scale), pick(rd.dev_t),
                                       pick(rd.has_dev), pick(rd.bad), poll_t, ti, False)
                    moved[slice(None) if pos is None else pos] = mv & ~t.dense[idx]
                    continue
                p_all = np.arange(b - a) if pos is None else pos
                self._apply_mixed(cols, rd, a, p_all, r, np.zeros(len(r), bool) if big is None else big,
                                  np.zeros(len(r), bool) if new is None else new, (poll_t, ti), moved)
            if moved.any():
                self._note_moved(cols, plan, a + np.flatnonzero(moved))

    def _apply_mixed(self, cols: CounterColumns, rd: _Readings, a: int, p_all: np.ndarray, r: np.ndarray, big: np.ndarray,
                     new: np.ndarray, when: tuple[float, int], moved: np.ndarray) -> None:
        """A pass with first readings or values beyond uint64: each of the four kinds (new or
        not, exotic or not) on its own; ``moved`` (positions in the chunk that starts at reading
        ``a``) is set where a total changed. ``when``: the poll time and its index."""
        poll_t, ti = when
        for obj in (False, True):
            for first in (True, False):
                m = (big if obj else ~big) & (new if first else ~new)
                if not m.any():
                    continue
                p, rr = p_all[m], r[m]
                v = _object_values(cols.values, p + a) if obj else rd.values[p]
                if first:
                    self._first(rr, v, rd.bits[p], rd.sat[p], rd.scale[p], rd.dev_t[p], rd.has_dev[p], ti,
                                [cols.keys[i][0] in DENSE for i in (p + a).tolist()], obj)
                else:
                    mv = self._advance(rr, v, rd.bits[p], rd.sat[p], rd.scale[p], rd.dev_t[p], rd.has_dev[p], rd.bad[p],
                                       poll_t, ti, obj)
                    moved[p] = mv & ~self._t.dense[rr]

    def _note_moved(self, cols: CounterColumns, plan: _Plan, at: np.ndarray) -> None:
        """The moved series into the change sets (counter name -> port -> its view)."""
        got_by_name = self._changes.moved
        entries, keys, ports = plan.entries, cols.keys, cols.ports
        for i, g, row in zip(at.tolist(), plan.port_of[at].tolist(), plan.rows[at].tolist(), strict=True):
            name = keys[i][0]
            got = got_by_name.get(name)
            if got is None:
                got = got_by_name[name] = {}
            e = entries[g]
            got[ports[g]] = e.view(row - e.base)  # type: ignore[union-attr]

    def _time(self, poll_t: float) -> int:
        """The index of ``poll_t`` in the table of poll times."""
        return self._time_indices([poll_t])[0]

    def _time_indices(self, times: Sequence[float]) -> list[int]:
        """The indices of ``times`` in the table of poll times, added where new: the table is
        compacted first when they may not fit, and the rows' indices widened to uint32 when
        more than 65,536 times are in use."""
        k = len(set(times))
        if self._times.n + k > self._times.limit:
            self._compact_times()
        if self._t.hist_i.dtype == np.uint16 and self._times.n + k > _NARROW_TIMES:
            self._t.widen()
        out = [self._times.of(x) for x in times]
        self._t.times = self._times.array
        return out

    def _compact_times(self) -> None:
        """Keep only the poll times a series still refers to (its last poll, its kept history)."""
        t = self._t
        live = self._live_rows()
        h = self.history
        hist, _, npts = t.points(live)
        kept = np.arange(h) >= h - npts[:, None]
        remap = self._times.keep(np.concatenate([hist[kept], t.poll_i[live]]))
        if t.hist_i.dtype == np.uint16 and self._times.n > _NARROW_TIMES:
            t.widen()
        t.hist_i[live] = remap[t.hist_i[live]]
        t.poll_i[live] = remap[t.poll_i[live]]
        t.times = self._times.array

    def _live_rows(self) -> np.ndarray:
        live = [e for e in self.ports.values() if e.schema.keys]
        return np.concatenate([np.arange(e.base, e.base + len(e.schema.keys)) for e in live]) if live \
            else np.zeros(0, np.int64)

    def _first(self, rows: np.ndarray, value: np.ndarray, bits: np.ndarray, sat: np.ndarray, scale: np.ndarray,
               dev_t: np.ndarray, has_dev: np.ndarray, ti: int, dense: list[bool], obj: bool) -> None:
        """A new series: total starts at the value; no delta until the next reading."""
        t = self._t
        self._store_values(rows, value, obj)
        t.bits[rows], t.sat[rows], t.scale[rows], t.dense[rows] = bits, sat, scale, dense
        t.poll_i[rows] = ti
        t.set_clock(rows, dev_t, has_dev)
        total = _float(value, obj) * scale
        t.total[rows] = total
        t.delta_ok[rows] = t.dt_ok[rows] = False
        t.delta[rows] = t.dt[rows] = 0.0
        t.status[rows] = np.where(_capped(value, bits, sat, obj), _S_SAT, _S_FIRST)
        t.head[rows] = 0
        t.npts[rows] = 1  # the reading itself: the ring holds none yet

    def _advance(self, rows: slice | np.ndarray, value: np.ndarray, bits: np.ndarray, sat: np.ndarray, scale: np.ndarray,
                 dev_t: np.ndarray, has_dev: np.ndarray, clock_bad: np.ndarray, poll_t: float, ti: int,
                 obj: bool) -> np.ndarray:
        """The rules of the module docstring on whole arrays; True where the total changed."""
        t = self._t
        prev_i = t.poll_i[rows].copy()  # the newest point until now: it goes into the ring
        with np.errstate(all="ignore"):
            prev = _object_prev(t, rows) if obj else t.value[rows]
            # The interval: device clock when both readings have it, else the poll clock.
            prev_t, prev_has = t.clock(rows)
            dt = np.where(has_dev & prev_has, dev_t - prev_t, poll_t - t.times[prev_i])
            changed = (bits != t.bits[rows]) | (scale != t.scale[rows]) | (sat != t.sat[rows])
            clock = ~changed & (clock_bad | (dt <= 0))
            rest = ~(changed | clock)
            cap_v = _capped(value, bits, sat, obj)
            cap_p = _capped(prev, bits, sat, obj)
            up = _bool(value >= prev)
            saturated = rest & cap_v
            rise = saturated & ~cap_p & _bool(value > prev)  # rose to the cap: at least this much
            ok = rest & ~cap_v & up
            down = rest & ~cap_v & ~up & ~cap_p & ~sat & (bits <= 32)  # may be one wrap
            small = np.minimum(bits, 32)
            mod, half = (_MOD[small], _HALF[small]) if not obj else (_obj_pow(small), _obj_pow(small - 1))
            wrapped = mod - (prev - value)
            wrap = down & _bool(wrapped < half)
            status = np.full(len(value), _S_RESET, np.int8)  # changed width/scale, cleared, or too far down
            status[ok], status[wrap], status[saturated], status[clock] = _S_OK, _S_WRAP, _S_SAT, _S_CLOCK
            dt_ok = dt > 0
            has_delta = (ok | wrap) & dt_ok
            raw = np.where(ok, value - prev, np.where(wrap, wrapped, 0))
            d = _float(raw, obj) * scale
            before = t.total[rows].copy()  # (a view when rows is a slice)
            total = np.where(has_delta, before + d, before)
            if rise.any():
                total[rise] += _float((value - prev)[rise], obj) * scale[rise]
            moved = total != before
        self._store_values(rows, value, obj)
        t.bits[rows], t.sat[rows], t.scale[rows] = bits, sat, scale
        t.poll_i[rows] = ti
        t.set_clock(rows, dev_t, has_dev)
        t.status[rows] = status
        t.dt[rows], t.dt_ok[rows] = dt, dt_ok
        t.delta[rows], t.delta_ok[rows] = d, has_delta
        t.total[rows] = total
        head = t.head[rows].astype(np.intp)
        pairs = np.arange(rows.start, rows.stop) if isinstance(rows, slice) else rows
        t.hist_i[pairs, head] = prev_i
        t.hist_v[pairs, head] = before
        t.head[rows] = (head + 1) % t.hist_i.shape[1]
        t.npts[rows] = np.minimum(t.npts[rows] + 1, self.history)
        return moved

    def _store_values(self, rows: np.ndarray, value: np.ndarray, obj: bool) -> None:
        t = self._t
        if not obj:
            t.value[rows] = value
            return
        for r, v in zip(rows.tolist(), value.tolist(), strict=True):
            if type(v) is int and 0 <= v < 1 << 64:
                t.value[r] = v
                t.big.pop(r, None)
            else:
                t.value[r] = 0
                t.big[r] = v

    # ----------------------------------------------------------------- gauges
    def _gauges(self, gauges: Sequence[Gauge], target: str, poll_t: float, touched: set[PortKey], devices: set[str]) -> None:
        """One poll's gauges: values in one array pass when they come as the target's last
        poll's did (the same gauge objects, or the same keys, in the same order); otherwise
        one by one, which also builds that plan."""
        if not gauges:
            return
        if not isinstance(gauges, list):
            gauges = list(gauges)
        plan = self._gplans.get(target)
        if not (plan is not None and plan.gen == self._ggen and len(plan.objs) == len(gauges)
                and (plan.objs == gauges or list(map(_GAUGE_KEY, plan.objs)) == list(map(_GAUGE_KEY, gauges)))):
            plan = self._gauges_one_by_one(gauges, target, poll_t, touched, devices)
            if plan is not None:
                self._gplans[target] = plan
            else:
                self._gplans.pop(target, None)
            return
        self._mark(plan.marks, target, poll_t, touched, devices)
        gt, rows = self._gt, plan.rows
        value = np.fromiter(map(_GAUGE_VALUE, gauges), np.float64, len(gauges))
        prev = gt.value[rows]
        gt.value[rows] = value
        gt.t[rows] = poll_t
        changed = plan.tracked & (prev != value)
        if changed.any():
            by_name = self._changes.gauges
            for i in np.flatnonzero(changed).tolist():
                by_name.setdefault(gauges[i].name, {}).setdefault(plan.port_of[i], prev.item(i))

    def _gauges_one_by_one(self, gauges: Sequence[Gauge], target: str, poll_t: float, touched: set[PortKey],
                           devices: set[str]) -> _GaugePlan | None:
        """The gauges one at a time, in order (new gauges, refusals, a gauge read twice); the
        plan for the next poll, or None when this poll's gauges cannot make one."""
        changed = self._changes.gauges
        pk: PortKey | None = None
        entry: PortEntry | None = None
        gt = self._gt
        rows: list[int] = []
        pks: list[PortKey] = []
        entries: list[PortEntry | None] = []
        clean = True  # every gauge has its own row and nothing was refused: a plan can repeat this
        for g in gauges:
            if pk is None or g.device != pk[0] or g.port != pk[1]:  # parsers list a port's gauges together
                pk = (g.device, g.port)
                entry = self._touch(pk, target, poll_t, touched, devices)
            pks.append(pk)
            entries.append(entry)
            if entry is None:
                self.refused["port"] += 1
                clean = False
                continue
            key = (g.name, g.sub)
            value = float(g.value)
            off = entry.gschema.index.get(key)
            if off is None:
                if len(entry.gschema.keys) >= self.max_series_per_port:
                    self.refused["series"] += 1
                    clean = False
                    continue
                self._grow_gauges(entry, key)
                off = len(entry.gschema.keys) - 1
                gt = self._gt
                row = entry.gbase + off
                gt.value[row], gt.t[row] = value, poll_t
                self.gauge_layout += 1
                prev: float | None = None
            else:
                row = entry.gbase + off
                prev = gt.value.item(row)
                gt.value[row], gt.t[row] = value, poll_t
            rows.append(row)
            if g.name in TRACKED_GAUGES and prev != value:
                changed.setdefault(g.name, {}).setdefault(pk, prev)
        if not clean:
            return None
        # Rows of ports that grew later in this poll moved: read them again from the entries.
        rows_a = np.array([e.gbase + e.gschema.index[(g.name, g.sub)] for g, e in zip(gauges, entries, strict=True)],  # type: ignore[union-attr]
                          np.int64)
        if len(np.unique(rows_a)) != len(rows_a):
            return None  # a gauge read twice: one by one, in order
        return _GaugePlan(self._ggen, list(gauges), rows_a,
                          np.fromiter((g.name in TRACKED_GAUGES for g in gauges), bool, len(gauges)), pks,
                          self._marks(pks, entries))

    def _grow_gauges(self, e: PortEntry, key: SeriesKey) -> None:
        """Give a port one more gauge: a block for the larger gauge schema, the old rows copied in."""
        n_old = len(e.gschema.keys)
        schema = _schema((*e.gschema.keys, key))
        base = self._grows.alloc(n_old + 1)
        if n_old:
            self._gt.move_rows(np.arange(e.gbase, e.gbase + n_old), np.arange(base, base + n_old), self._gt)
            self._grows.release(e.gbase, n_old)
        e.gbase, e.gschema = base, schema
        self._ggen += 1

    # ----------------------------------------------------------------- rows
    def _reserve(self, n: int) -> None:
        self._rows.reserve(n)

    def _alloc(self, n: int) -> int:
        base = self._rows.alloc(n)
        if self._t is not self._rows.table:
            raise AssertionError("the series table was replaced behind its allocator")
        return base

    def _release(self, base: int, n: int) -> None:
        if n:
            self._rows.release(base, n)
            if self._t.big:
                for r in range(base, base + n):
                    self._t.big.pop(r, None)
        self._gen += 1

    def _grow(self, e: PortEntry, new_keys: dict[SeriesKey, int]) -> None:
        """Give a port its new series: a block for the larger schema, the old rows copied in."""
        n_old = len(e.schema.keys)
        schema = _schema(e.schema.keys + tuple(new_keys))
        base = self._alloc(len(schema.keys))
        if n_old:
            self._t.move_rows(np.arange(e.base, e.base + n_old), np.arange(base, base + n_old), self._t)
            self._release(e.base, n_old)
        e.base, e.schema = base, schema
        self._gen += 1
        self.series_layout += 1

    def _drop(self, e: PortEntry) -> None:
        """Free a port's rows (series and gauges) and its place in the port columns; views
        somebody still holds keep its last values (a copy)."""
        n = len(e.schema.keys)
        if e.views is not None and n:
            own = _Table(self.history, n, self._t.times, self._t.hist_i.dtype)
            self._t.move_rows(np.arange(e.base, e.base + n), np.arange(n), own)
            self._release(e.base, n)
            e.table, e.base = own, 0
        else:
            self._release(e.base, n)
        if n:
            self.series_layout += 1
        g = len(e.gschema.keys)
        if g:
            own_g = _GaugeTable(g)
            self._gt.move_rows(np.arange(e.gbase, e.gbase + g), np.arange(g), own_g)
            self._grows.release(e.gbase, g)
            e.gtable, e.gbase = own_g, 0
            self._ggen += 1
        if e.pi >= 0:
            e._seen = e.seen
            self._pcols.free.append(e.pi)
            e.pi = -1

    def _compact(self) -> None:
        """Move every block to the front of a new table once more than half the rows are free."""
        rows = self._rows
        if rows.free_rows <= max(4096, rows.end // 2):
            return
        live = [e for e in self.ports.values() if e.schema.keys]
        sizes = [len(e.schema.keys) for e in live]
        n = sum(sizes)
        src = np.concatenate([np.arange(e.base, e.base + k) for e, k in zip(live, sizes, strict=True)]) if live \
            else np.zeros(0, np.int64)
        table = _Table(self.history, max(1024, n * 5 // 4), self._t.times, self._t.hist_i.dtype)
        self._t.move_rows(src, np.arange(n), table)
        base = 0
        for e, k in zip(live, sizes, strict=True):
            e.table, e.base = table, base
            base += k
        for e in self.ports.values():
            e.table = table
        self._t, self._rows = table, _Rows(table)
        self._rows.end = n
        self._gen += 1

    def set_devices(self, devices: Iterable[DeviceInfo], target: str = "") -> None:
        for d in devices:
            if self.devices.get(d.name) != d:
                self.device_writes += 1
            self.devices[d.name] = d
            if target:
                self.device_target.setdefault(d.name, target)

    def set_port_info(self, infos: Sequence[PortInfo], poll_t: float, target: str = "") -> None:
        """Each port's descriptive info (a port not in the store yet is added). A target that
        gives the same info objects again, while no port came or went, changes nothing."""
        last = self._infos.get(target)
        stamp = (self.layout, self._info_writes)
        if last is not None and last[0] == stamp and len(last[1]) == len(infos) and last[1] == infos:
            return
        for info in infos:
            entry = self.ports.get((info.device, info.port))
            if entry is None:
                entry = self._entry((info.device, info.port), seen=poll_t)
                self.layout += 1
            entry.info = info
        self._info_writes += 1
        self._infos[target] = ((self.layout, self._info_writes), list(infos))

    def expire(self, now: float) -> int:
        """Drop ports not updated for ``stale_after`` seconds; returns how many."""
        limit = now - self.stale_after
        pi = np.fromiter((e.pi for e in self.ports.values()), np.int64, len(self.ports))
        old = (self._pcols.seen[pi] < limit).tolist() if len(pi) else []
        stale = [pk for pk, o in zip(self.ports, old, strict=True) if o]
        self._drop_ports(stale)
        self._drop_devices([d for d, seen in self.device_seen.items() if seen < limit])
        return len(stale)

    def forget(self, devices: Iterable[str]) -> int:
        """Drop every port and fact of ``devices`` (a GUID-labelled device that now has a name:
        agent/identity.py; its readings go on under the name); returns the ports dropped."""
        gone = set(devices)
        ports = [pk for pk in self.ports if pk[0] in gone]
        self._drop_ports(ports)
        self._drop_devices([d for d in gone if d in self.device_seen or d in self.devices or d in self._device_clock])
        return len(ports)

    def _drop_ports(self, pks: list[PortKey]) -> None:
        for pk in pks:
            self._drop(self.ports.pop(pk))
        if pks:
            self.layout += 1
            self._plans.clear()  # their rows are stale now; a target gone from the config keeps none
            self._gplans.clear()
            self._infos.clear()
            self._compact()

    def _drop_devices(self, devices: list[str]) -> None:
        for device in devices:
            self.device_seen.pop(device, None)
            self._device_clock.pop(device, None)
            self.devices.pop(device, None)
            self.device_target.pop(device, None)

    # ----------------------------------------------------------------- persistence
    def save(self) -> dict[str, Any]:
        """A JSON-able copy of every series and device clock (see :meth:`restore`)."""
        live = [(pk, e) for pk, e in self.ports.items() if e.schema.keys]
        t = self._t
        rows = np.concatenate([np.arange(e.base, e.base + len(e.schema.keys)) for _, e in live]) if live \
            else np.zeros(0, np.int64)
        cols = {name: getattr(t, name)[rows].tolist() for name in ("value", "bits", "sat", "scale", "total")}
        cols["dev_t"], cols["has_dev"] = (c.tolist() for c in t.clock(rows))
        cols["poll_t"] = t.times[t.poll_i[rows]].tolist()
        ti, tv, npts = t.points(rows)
        hist_t, hist_v = t.times[ti].tolist(), tv.tolist()
        h = self.history
        npts_l = npts.tolist()
        big = t.big
        rows_l = rows.tolist()
        ports = []
        i = 0
        for (device, port), entry in live:
            series = []
            for counter, sub in entry.schema.keys:
                k = npts_l[i]
                series.append([counter, list(sub), big[rows_l[i]] if big and rows_l[i] in big else cols["value"][i],
                               cols["bits"][i], cols["sat"][i], cols["scale"][i], cols["total"][i], cols["poll_t"][i],
                               cols["dev_t"][i] if cols["has_dev"][i] else None,
                               [[a, b] for a, b in zip(hist_t[i][h - k:], hist_v[i][h - k:], strict=True)]])
                i += 1
            ports.append([device, port, entry.target, entry.seen, series])
        return {"device_clocks": {d: list(v) for d, v in self._device_clock.items()}, "ports": ports}

    def image(self, history: int | None = None) -> StoreImage:
        """What :meth:`save` holds, as whole columns (for the state file, agent/state.py): a few
        array copies and one small list per port, no Python object per series, so taking it at
        100,000 ports costs a fraction of a second. :meth:`restore_image` is its inverse.
        ``history``: keep only the last that many points of each series (a save that must be quick)."""
        live = [(pk, e) for pk, e in self.ports.items() if e.schema.keys]
        schema_ids: dict[int, int] = {}
        key_ids: dict[SeriesKey, int] = {}
        schemas: list[list[int]] = []
        ports: list[list[Any]] = []
        for (device, port), e in live:
            sid = schema_ids.get(id(e.schema))
            if sid is None:
                sid = schema_ids[id(e.schema)] = len(schemas)
                schemas.append([key_ids.setdefault(k, len(key_ids)) for k in e.schema.keys])
            ports.append([device, port, e.target, e.seen, sid])
        keys = [[counter, list(sub)] for counter, sub in key_ids]
        sizes = np.fromiter((len(e.schema.keys) for _, e in live), np.int64, len(live))
        bases = np.fromiter((e.base for _, e in live), np.int64, len(live))
        starts = np.cumsum(sizes) - sizes
        at = group_index(sizes)
        rows = (bases - starts)[at] + np.arange(len(at), dtype=np.int64)
        t = self._t
        h = self.history
        # The table holds poll times as indices into the store's table of times; the image holds the times.
        cols = {name: getattr(t, name)[rows] for name in IMAGE_COLUMNS if name not in ("poll_t", "hist_t", "hist_v", *_CLOCK_COLS)}
        cols["dev_t"], cols["has_dev"] = t.clock(rows)
        cols["poll_t"] = t.times[t.poll_i[rows]]
        # The last ``keep`` points, oldest first, right-aligned: a ring whose head is slot 0.
        keep = h if history is None else min(history, h)
        ti, tv, npts = t.points(rows)
        cols["hist_t"], cols["hist_v"] = t.times[ti[:, h - keep:]], tv[:, h - keep:]
        cols["npts"] = np.minimum(npts, keep).astype(np.uint16)
        cols["head"] = np.zeros(len(rows), np.uint16)
        big: dict[int, Any] = {}
        if t.big:
            where = {r: i for i, r in enumerate(rows.tolist()) if r in t.big}
            big = {i: t.big[r] for r, i in where.items()}
        return StoreImage(keys, schemas, ports, {d: list(v) for d, v in self._device_clock.items()}, cols, big)

    def restore_image(self, img: StoreImage, now: float) -> int:
        """Put a :meth:`image` into this (empty) store, with the rules of :meth:`restore`: series
        not updated within ``stale_after`` of ``now`` are left out, each restored series has no
        delta until its next reading. Everything is checked before the store is touched
        (ValueError naming the first problem); the columns are written in bulk."""
        limit = now - self.stale_after
        chk = self._checked_image(img, limit)
        n = int(chk.sizes.sum())
        # Which rows are fresh, which ports keep any; a port with only some fresh series gets the subset.
        fresh = chk.cols["poll_t"] >= limit
        key_of_row = np.concatenate([chk.schemas[s] for s in chk.sids.tolist()]) if n else np.zeros(0, np.int64)
        starts = np.cumsum(chk.sizes) - chk.sizes
        kept_per_port = np.add.reduceat(fresh.astype(np.int64), starts) if n else np.zeros(0, np.int64)
        kept_per_port[chk.sizes == 0] = 0
        src = np.flatnonzero(fresh)
        restored = len(src)
        if restored:
            base0 = self._restore_rows(chk, src, key_of_row, n)
            self._restore_ports(img, chk, fresh, key_of_row, starts, kept_per_port, base0)
            self._gen += 1
            self.series_layout += 1
        self.layout += 1
        self._device_clock.update(chk.clocks)
        return restored

    def _checked_image(self, img: StoreImage, limit: float) -> _CheckedImage:
        """The image's keys, schemas, port table, columns (history rings in order), big values and
        fresh device clocks, each checked (ValueError naming the first problem)."""
        keys = [self._restored_key(k, f"keys[{i}]") for i, k in enumerate(img.keys)]
        schemas = []
        for i, sch in enumerate(img.schemas):
            if not isinstance(sch, list) or not all(type(k) is int and 0 <= k < len(keys) for k in sch) or len(set(sch)) != len(sch):
                raise ValueError(f"schemas[{i}]: not a list of distinct key indices")
            schemas.append(np.array(sch, dtype=np.int64))
        if len(img.ports) > self.max_ports:
            raise ValueError(f"{len(img.ports)} ports, more than the store's limit of {self.max_ports}")
        sizes = np.zeros(len(img.ports), np.int64)
        sids = np.zeros(len(img.ports), np.int64)
        for i, rec in enumerate(img.ports):
            if not isinstance(rec, list) or len(rec) != 5 or type(rec[4]) is not int or not 0 <= rec[4] < len(schemas):
                raise ValueError(f"ports[{i}]: not [device, port, target, seen, schema index]")
            valid_text(rec[0], f"ports[{i}] device"), valid_text(rec[1], f"ports[{i}] port"), valid_text(rec[2], f"ports[{i}] target")
            _number(rec[3], f"ports[{i}] seen")
            sids[i], sizes[i] = rec[4], len(schemas[rec[4]])
        n = int(sizes.sum())
        cols, hist_t, hist_v = _checked_columns(img.columns, n)
        return _CheckedImage(keys, schemas, sids, sizes, cols, hist_t, hist_v, _checked_big(img.big, n),
                             _checked_clocks(img.device_clocks, limit))

    def _restore_rows(self, chk: _CheckedImage, src: np.ndarray, key_of_row: np.ndarray, n: int) -> int:
        """The fresh rows ``src`` of the image written in bulk into new rows of the table; their first row."""
        cols, total = chk.cols, len(src)
        h, h_img = self.history, chk.hist_t.shape[1]
        npts = np.maximum(np.minimum(cols["npts"][src].astype(np.int64), h), 1)
        first_only = cols["npts"][src] == 0  # a record without points: its last reading is the one point
        idx = np.clip(h_img - npts[:, None] + np.arange(h)[None, :], 0, h_img - 1)
        poll_t = cols["poll_t"][src]
        hist_t = np.take_along_axis(chk.hist_t[src], idx, 1)
        hist_v = np.take_along_axis(chk.hist_v[src], idx, 1)
        if first_only.any():
            hist_t[first_only] = poll_t[first_only][:, None]
            hist_v[first_only] = cols["total"][src][first_only][:, None]
        # Times -> indices into the store's table of times: a few distinct times (one per target
        # and poll), mapped once each; before rows are taken (the table may be compacted or widened).
        uniq, inv = np.unique(np.concatenate([poll_t, hist_t.ravel()]), return_inverse=True)
        at = np.array(self._time_indices(uniq.tolist()), np.int64)[inv.reshape(-1)]
        del hist_t, inv
        self._reserve(total)
        base0 = self._alloc(total)
        t = self._t
        dst = base0 + np.arange(total, dtype=np.int64)
        for name in ("value", "bits", "sat", "scale", "total"):
            getattr(t, name)[dst] = cols[name][src]
        t.set_clock(dst, cols["dev_t"][src], cols["has_dev"][src])
        t.poll_i[dst] = at[:total]
        dense_key = np.array([k[0] in DENSE for k in chk.keys], dtype=bool)
        t.dense[dst] = dense_key[key_of_row[src]]
        t.status[dst] = _S_FIRST
        t.delta_ok[dst] = t.dt_ok[dst] = False
        t.delta[dst] = t.dt[dst] = 0.0
        # Points are left-aligned here, the newest at npts - 1: it is the row's own reading
        # (poll_t, total), the ones before it go into the ring from slot 0.
        t.hist_i[dst] = at[total:].reshape(total, h)[:, :h - 1]
        t.hist_v[dst] = hist_v[:, :h - 1]
        t.npts[dst] = npts
        t.head[dst] = (npts - 1) % (h - 1)
        new_row = np.full(n, -1, np.int64)
        new_row[src] = dst
        for row, v in chk.big.items():
            if new_row[row] >= 0:
                t.big[int(new_row[row])] = v
        return base0

    def _restore_ports(self, img: StoreImage, chk: _CheckedImage, fresh: np.ndarray, key_of_row: np.ndarray,
                       starts: np.ndarray, kept_per_port: np.ndarray, base0: int) -> None:
        """A port entry for every port of the image that keeps a fresh series, its rows from ``base0`` on."""
        keys = chk.keys
        offset = 0
        full: dict[int, _Schema] = {}  # schema index -> the store's schema, for ports that keep every series
        for i, rec in enumerate(img.ports):
            k = int(kept_per_port[i])
            if not k:
                continue
            device, port, target, seen = rec[0], rec[1], rec[2], float(rec[3])
            lo, hi = int(starts[i]), int(starts[i] + chk.sizes[i])
            if k == hi - lo:
                sch = full.get(rec[4])
                if sch is None:
                    sch = full[rec[4]] = _schema(tuple(keys[j] for j in key_of_row[lo:hi].tolist()))
            else:
                sch = _schema(tuple(keys[j] for j in key_of_row[lo:hi][fresh[lo:hi]].tolist()))
            pk = (device, port)
            old = self.ports.pop(pk, None)
            if old is not None:
                self._drop(old)
            entry = self._entry(pk, target, seen)
            entry.schema = sch
            entry.base = base0 + offset
            offset += k
            self.device_seen[device] = max(self.device_seen.get(device, 0.0), seen)
            if target:
                self.device_target.setdefault(device, target)

    def _restored_key(self, rec: Any, where: str) -> SeriesKey:
        if not isinstance(rec, list) or len(rec) != 2 or not isinstance(rec[1], list):
            raise ValueError(f"{where}: not [counter, sub-labels]")
        counter, sub = rec
        if not all(x is None or (isinstance(x, str | int) and not isinstance(x, bool)) for x in sub):
            raise ValueError(f"{where}: sub-labels must be a list of strings, integers or null")
        for x in sub:
            if isinstance(x, str):
                valid_text(x, f"{where} sub-label")
        key = (valid_text(counter, f"{where} counter"), tuple(sub))
        return _KEYS.setdefault(key, key)

    def restore(self, data: dict[str, Any], now: float) -> int:
        """Put what :meth:`save` returned into this (empty) store; returns the series restored.

        Series not updated within ``stale_after`` of ``now`` are left out (a running store
        would have expired them). Each restored series has no delta until its next reading.
        Raises ValueError naming the first malformed item; the store is only touched once
        everything was read.
        """
        limit = now - self.stale_after
        read: dict[PortKey, tuple[str, float, dict[SeriesKey, tuple]]] = {}
        ports = data.get("ports", [])
        clocks_in = data.get("device_clocks") or {}
        if not isinstance(ports, list) or not isinstance(clocks_in, dict):
            raise ValueError("ports must be a list and device_clocks an object")
        for i, rec in enumerate(ports):
            if not isinstance(rec, list) or len(rec) != 5 or not isinstance(rec[4], list):
                raise ValueError(f"ports[{i}]: not [device, port, target, seen, series]")
            device, port, target, seen, series = rec
            target, seen = valid_text(target, f"ports[{i}] target"), _number(seen, f"ports[{i}] seen")
            pk = (valid_text(device, f"ports[{i}] device"), valid_text(port, f"ports[{i}] port"))
            got: dict[SeriesKey, tuple] = {}
            for j, srec in enumerate(series):
                key, fields = self._restored_series(srec, f"ports[{i}] series[{j}]")
                if fields[5] >= limit:
                    got[_KEYS.setdefault(key, key)] = fields
            if got:
                read[pk] = (target, seen, got)
        clocks: dict[str, tuple[float, float]] = {}
        for device, v in clocks_in.items():
            if not isinstance(v, list) or len(v) != 2:
                raise ValueError(f"device_clocks[{device!r}]: not [device clock, poll time]")
            pair = (_number(v[0], "device clock"), _number(v[1], "device clock poll time"))
            if pair[1] >= limit:
                clocks[valid_text(device, "device_clocks key")] = pair
        restored = 0
        self._reserve(sum(len(got) for _, _, got in read.values()))
        for pk, (target, seen, got) in read.items():
            old = self.ports.pop(pk, None)
            if old is not None:
                self._drop(old)
            entry = self._entry(pk, target, seen)
            self._grow(entry, {k: i for i, k in enumerate(got)})
            self._put_restored(entry, list(got.values()))
            restored += len(got)
        self.layout += 1
        self._device_clock.update(clocks)
        for (device, _port), (target, seen, _) in read.items():
            self.device_seen[device] = max(self.device_seen.get(device, 0.0), seen)
            if target:
                self.device_target.setdefault(device, target)
        return restored

    def _put_restored(self, entry: PortEntry, fields: list[tuple]) -> None:
        """Write restored series into the entry's rows: the restored reading is the
        "previous" one, so the status is FIRST and there is no delta until the next."""
        t = self._t
        rows = np.arange(entry.base, entry.base + len(fields))
        values, bits, sat, scale, total, poll_t, dev_t, hist = zip(*fields, strict=True)
        u = [v if type(v) is int else 0 for v in values]
        t.value[rows] = np.array(u, dtype=np.uint64)
        for r, v in zip(rows.tolist(), values, strict=True):
            if type(v) is not int:
                t.big[r] = v
        t.bits[rows], t.sat[rows], t.scale[rows], t.total[rows] = bits, sat, scale, total
        t.poll_i[rows] = self._time_indices(poll_t)
        t.dense[rows] = [k[0] in DENSE for k in entry.schema.keys]
        t.set_clock(rows, np.array([0.0 if d is None else d for d in dev_t]), np.array([d is not None for d in dev_t], bool))
        t.status[rows] = _S_FIRST
        t.delta_ok[rows] = t.dt_ok[rows] = False
        at = iter(self._time_indices([p[0] for points in hist for p in points]))
        t = self._t  # (times widened: the same table, its index arrays replaced)
        for r, points in zip(rows.tolist(), hist, strict=True):
            n = len(points)  # the newest is the reading itself (poll_t, total); the others go into the ring
            older = [next(at) for _ in points][:-1]
            t.hist_i[r, :len(older)] = older
            t.hist_v[r, :len(older)] = [p[1] for p in points[:-1]]
            t.npts[r] = n
            t.head[r] = len(older) % (self.history - 1)

    def _restored_series(self, rec: Any, where: str) -> tuple[SeriesKey, tuple]:
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
        counter = valid_text(counter, f"{where} counter")
        scale = _number(scale, f"{where} scale")
        poll_t = _number(poll_t, f"{where} poll time")
        device_t = None if device_t is None else _number(device_t, f"{where} device time")
        total = _number(total, f"{where} total")
        points = [(_number(t, f"{where} history"), _number(v, f"{where} history")) for t, v in hist][-self.history:]
        return (counter, tuple(sub)), (value, bits, saturating, scale, total, poll_t, device_t,
                                       points or [(poll_t, total)])

    # ----------------------------------------------------------------- queries
    def port(self, pk: PortKey) -> PortEntry | None:
        return self.ports.get(pk)

    def get(self, device: str, port: str, counter: str, sub: tuple[Any, ...] = ()) -> Series | None:
        entry = self.ports.get((device, port))
        return entry.counter(counter, sub) if entry else None

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
            series = entry.series
            for sk in entry.schema.keys:
                yield pk, sk, series[sk]

    def series_count(self) -> int:
        return sum(len(e.schema.keys) for e in self.ports.values())

    def status(self) -> StoreStatus:
        """How full the store is and what its bounds refused."""
        return StoreStatus(self.series_count(), self.refused["port"], self.refused["series"])

    def families(self) -> list[Family]:
        """The store's own metric families (the counters themselves are the exporter's)."""
        s = self.status()
        series = Family(f"{NAMESPACE}_store_series", "gauge", "Counter series held in the store.")
        series.add("", s.series)
        refused = Family(f"{NAMESPACE}_store_refused_total", "counter", "Readings the store refused by its bounds: "
                         "a new port over max_ports, a new series of a port at max_series_per_port.")
        refused.add(labels((("what", "port"),)), s.refused_ports)
        refused.add(labels((("what", "series"),)), s.refused_series)
        return [series, refused]

    # ----------------------------------------------------------------- bulk reads
    def port_order(self) -> list[PortKey]:
        """The ports, sorted: the exposition's order, which :class:`FamilyRows` index. Cached
        until a port comes or goes (``layout``)."""
        if self._order is None or self._order[0] != self.layout:
            self._order = (self.layout, sorted_in_slices(self.ports))  # 100,000 ports in one C call held the GIL 0.2 s
        return self._order[1]

    def family_rows(self) -> dict[str, FamilyRows]:
        """Counter name -> its series in exposition order (ports sorted, then sub-labels by
        text). Cached until ``series_layout`` or ``layout`` changes; the rows index
        :meth:`totals` and :meth:`rates` of the same moment."""
        stamp = (self.series_layout, self.layout, self._gen)
        if self._families is None or self._families[0] != stamp:
            self._families = (stamp, self._families_of(lambda e: (e.schema, e.base)))
        return self._families[1]

    def gauge_rows(self) -> dict[str, FamilyRows]:
        """Gauge name -> its gauges in exposition order, as :meth:`family_rows` (rows index
        :meth:`gauge_values`). Cached until a port gains a gauge or a port comes or goes."""
        stamp = (self.gauge_layout, self.layout, self._ggen)
        if self._gauge_families is None or self._gauge_families[0] != stamp:
            self._gauge_families = (stamp, self._families_of(lambda e: (e.gschema, e.gbase)))
        return self._gauge_families[1]

    def gauge_values(self) -> np.ndarray:
        """The last value of every gauge row (index with :meth:`gauge_rows`); read-only."""
        v = self._gt.value.view()
        v.setflags(write=False)
        return v

    def _families_of(self, block: Callable[[PortEntry], tuple[_Schema, int]]) -> dict[str, FamilyRows]:
        """Series (or gauges) by name in exposition order, from each port's ``block``: (schema,
        base row). Built on whole arrays: a step per port and per distinct schema, none per series."""
        order = self.port_order()
        ports = self.ports
        schemas: dict[_Schema, int] = {}
        sid = np.fromiter((schemas.setdefault(block(ports[pk])[0], len(schemas)) for pk in order), np.int64, len(order))
        base = np.fromiter((block(ports[pk])[1] for pk in order), np.int64, len(order))
        names: dict[str, int] = {}
        subs: dict[tuple[Any, ...], int] = {}
        fam_of, sub_of, size = [], [], []
        for sc in schemas:
            fam_of.extend(names.setdefault(name, len(names)) for name, _ in sc.keys)
            sub_of.extend(subs.setdefault(sub, len(subs)) for _, sub in sc.keys)
            size.append(len(sc.keys))
        sizes = np.array(size, np.int64)
        first = np.cumsum(sizes) - sizes
        count = sizes[sid] if len(sid) else np.zeros(0, np.int64)
        n = int(count.sum())
        start = np.cumsum(count) - count
        port_at = group_index(count)
        offset = np.arange(n) - start[port_at]
        at = first[sid][port_at] + offset  # each series' place in the schemas' keys
        rows = base[port_at] + offset
        fam = np.array(fam_of, np.int64)[at] if n else np.zeros(0, np.int64)
        sub = np.array(sub_of, np.int64)[at] if n else np.zeros(0, np.int64)
        # Exposition order: family by name, then port, then sub-labels by their text (equal
        # texts in the order they came: the last key of the sort is the series' place).
        name_list, sub_list = list(names), list(subs)
        name_rank = np.argsort(np.argsort(np.array(name_list, dtype=object), kind="stable"), kind="stable")
        texts = [tuple(str(x) for x in s) for s in sub_list]
        by_text = sorted(range(len(texts)), key=texts.__getitem__)
        sub_rank = np.zeros(len(texts), np.int64)
        rank = -1
        for j, k in enumerate(by_text):
            rank += j == 0 or texts[k] != texts[by_text[j - 1]]
            sub_rank[k] = rank
        sort = np.lexsort((np.arange(n), sub_rank[sub], port_at, name_rank[fam])) if n else np.zeros(0, np.int64)
        fam, sub, port_at, rows = fam[sort], sub[sort], port_at[sort], rows[sort]
        cuts = np.flatnonzero(np.diff(fam)) + 1
        subs_t = tuple(sub_list)
        out: dict[str, FamilyRows] = {}
        row_type = np.int32 if rows.max(initial=0) < 1 << 31 else np.int64
        sub_type = np.int16 if len(subs_t) < 1 << 15 else np.int32
        for lo, hi in zip([0, *cuts.tolist()], [*cuts.tolist(), n], strict=True):
            if lo == hi:
                continue
            pa, sa = port_at[lo:hi].astype(np.int32), sub[lo:hi].astype(sub_type)
            out[name_list[fam[lo]]] = FamilyRows(_Keys(order, pa, subs_t, sa), rows[lo:hi].astype(row_type), pa, subs_t, sa)
        return out

    def columns(self, ports: Sequence[PortKey]) -> PortColumns:
        """Whole-array reads of counters and gauges over ``ports`` (see :class:`PortColumns`):
        every port's block is kept as arrays until a row moves or a port, series or gauge comes
        or goes, so a pass pays one dict lookup per port asked for, whichever they are."""
        w = self._whole()
        absent = len(w.order)
        at = np.fromiter(map(w.index.get, ports, repeat(absent, len(ports))), np.int64, len(ports))
        return PortColumns(self, ports, np.where(at == absent, -1, at), w.series_at.take(at), w.gauge_at.take(at))

    def column_order(self) -> list[PortKey]:
        """The ports in the order :attr:`PortColumns.at` refers to; the same list object until
        it changes (a port, series or gauge came or went, or rows moved)."""
        return self._whole().order

    def _whole(self) -> _WholeColumns:
        stamp = (self._gen, self._ggen, self.layout, self.series_layout, self.gauge_layout)
        w = self._columns
        if w is None or w.stamp != stamp:
            order = list(self.ports)
            entries = [*self.ports.values(), _ABSENT]
            w = self._columns = _WholeColumns(stamp, order, dict(zip(order, range(len(order)), strict=True)),
                                              _Blocks.of(entries, attrgetter("schema"), attrgetter("base")),
                                              _Blocks.of(entries, attrgetter("gschema"), attrgetter("gbase")))
        return w

    def totals(self) -> np.ndarray:
        """The accumulated totals of every row (index with :meth:`family_rows`); read-only."""
        v = self._t.total.view()
        v.setflags(write=False)
        return v

    def rates(self) -> np.ndarray:
        """Base units per second of every row over its last interval; NaN where it has none."""
        t = self._t
        with np.errstate(all="ignore"):
            return np.where(t.delta_ok & (t.dt != 0), t.delta / t.dt, np.nan)


class CounterColumn(NamedTuple):
    """One counter's last interval on each port of a :class:`PortColumns`, as arrays in its port
    order. ``delta`` and ``dt`` are NaN where the port has no such series or its last interval
    is invalid (what :attr:`Series.delta` and :attr:`Series.dt` give as None)."""

    delta: np.ndarray
    dt: np.ndarray
    saturated: np.ndarray  # bool: the series sits at its saturating cap (status SATURATED)
    poll_t: np.ndarray  # the poll time of its last reading (NaN: no such series)

    @property
    def rate(self) -> np.ndarray:
        """Base units per second over the last interval (NaN where :attr:`Series.rate` is None)."""
        with np.errstate(all="ignore"):
            return np.where(self.dt != 0, self.delta / self.dt, np.nan)


class PortColumns:
    """Whole-array reads over a list of ports (:meth:`CounterStore.columns`): one counter or
    gauge on every one of them in a few numpy passes, for the analyses that test every moved
    port of a 100,000-port fabric. Reads the store's values when asked, so it serves for the
    detection pass that made it (rows move as the store changes). A port not in the store
    reads as having no series and no gauges. ``at``: each port's place in
    :meth:`CounterStore.column_order` (-1 if absent), for readers that keep something per port
    of that order across passes."""

    __slots__ = ("_gauge_at", "_series_at", "_store", "at", "ports")

    def __init__(self, store: CounterStore, ports: Sequence[PortKey], at: np.ndarray, series_at: _Blocks,
                 gauge_at: _Blocks) -> None:
        self._store = store
        self.ports = ports
        self.at = at
        self._series_at = series_at
        self._gauge_at = gauge_at

    def __len__(self) -> int:
        return len(self.ports)

    def _present(self, name: str, sub: tuple[Any, ...]) -> tuple[np.ndarray, np.ndarray]:
        """(positions of the ports that have the series, its row on each of them): reads then
        gather only those rows (a key most ports lack costs next to nothing)."""
        rows, has = self._series_at.rows((name, sub))
        at = np.flatnonzero(has)
        return at, rows[at]

    def counter(self, name: str, sub: tuple[Any, ...] = ()) -> CounterColumn:
        """The counter's last interval on each port (see :class:`CounterColumn`)."""
        n = len(self.ports)
        delta, dt, poll_t, saturated = np.full(n, np.nan), np.full(n, np.nan), np.full(n, np.nan), np.zeros(n, bool)
        at, r = self._present(name, sub)
        if len(at):
            t = self._store._t
            delta[at] = np.where(t.delta_ok[r], t.delta[r], np.nan)
            dt[at] = np.where(t.dt_ok[r], t.dt[r], np.nan)
            saturated[at] = t.status[r] == _S_SAT
            poll_t[at] = t.times[t.poll_i[r]]
        return CounterColumn(delta, dt, saturated, poll_t)

    def gauge(self, name: str, sub: tuple[Any, ...] = ()) -> np.ndarray:
        """The gauge's last value on each port; NaN where the port has no such gauge."""
        rows, has = self._gauge_at.rows((name, sub))
        return np.where(has, self._store._gt.value[rows], np.nan)

    def subs(self, names: Iterable[str]) -> list[Any]:
        """The single sub-label values (priorities, queues) of the counters ``names`` that any
        port of these columns may have (read from the distinct series layouts, not per port)."""
        names = frozenset(names)
        return list({key[1][0]: None for sch in self._series_at.schemas for key in sch.keys
                     if key[0] in names and len(key[1]) == 1})

    def increases(self, name: str, sub: tuple[Any, ...], intervals: int) -> np.ndarray:
        """How many of the last ``intervals`` kept intervals saw an increase, on each port
        (:meth:`Series.increases`); 0 where the port has no such series."""
        out = np.zeros(len(self.ports), np.int64)
        t = self._store._t
        h = self._store.history
        k = min(intervals, h - 1)
        at, r = self._present(name, sub)
        if k <= 0 or not len(at):
            return out
        # Points oldest first (Table.points): the last k intervals span columns h-k-1 .. h-1, of
        # which the points kept are those >= h - npts.
        v, npts = t.totals(r)
        v = v[:, h - k - 1:]
        first = np.arange(h - k - 1, h - 1)
        out[at] = ((v[:, 1:] > v[:, :-1]) & (first[None, :] >= (h - npts)[:, None])).sum(axis=1)
        return out

    def moved_in_history(self, name: str, sub: tuple[Any, ...] = ()) -> np.ndarray:
        """Whether the counter increased within the kept history, on each port
        (:meth:`Series.moved_in_history`: its total differs from the oldest point kept);
        False where the port has no such series."""
        out = np.zeros(len(self.ports), bool)
        at, r = self._present(name, sub)
        if len(at):
            t = self._store._t
            ring = t.hist_v.shape[1]
            older = t.npts[r].astype(np.intp) - 1  # points in the ring (the newest is the total itself)
            oldest = (t.head[r].astype(np.intp) + ring - older) % ring
            out[at] = (older > 0) & (t.total[r] != t.hist_v[r, oldest])
        return out


class _Blocks:
    """Per port its block's base row and schema, as arrays: a key's row on every port is then
    one lookup per distinct schema and one numpy gather."""

    __slots__ = ("base", "schema_at", "schemas")

    def __init__(self, base: np.ndarray, schema_at: np.ndarray, schemas: list[_Schema]) -> None:
        self.base, self.schema_at, self.schemas = base, schema_at, schemas

    @classmethod
    def of(cls, entries: list[Any], schema: Callable[[Any], _Schema], base: Callable[[Any], int]) -> _Blocks:
        n = len(entries)
        of_port = list(map(schema, entries))
        by_id = dict(zip(map(id, of_port), of_port, strict=True))  # (C-level passes: no Python step per port)
        ids, schema_at = np.unique(np.fromiter(map(id, of_port), np.int64, n), return_inverse=True)
        base_at = np.fromiter(map(base, entries), np.int64, n)
        small = np.int32 if base_at.max(initial=0) < 1 << 31 else np.int64  # (kept for every port: half the bytes)
        return cls(base_at.astype(small), schema_at.astype(np.int32), [by_id[i] for i in ids.tolist()])

    def take(self, pos: np.ndarray) -> _Blocks:
        return _Blocks(self.base[pos], self.schema_at[pos], self.schemas)

    def rows(self, key: SeriesKey) -> tuple[np.ndarray, np.ndarray]:
        """(row, has the key) per port; the row is 0 where the port lacks it."""
        off = np.array([s.index.get(key, -1) for s in self.schemas], np.int64)[self.schema_at] if self.schemas \
            else np.zeros(0, np.int64)
        has = off >= 0
        return np.where(has, self.base.astype(np.int64) + off, 0), has


class _WholeColumns(NamedTuple):
    """Every port's blocks in :meth:`CounterStore.column_order`, then one absent port."""

    stamp: tuple[int, ...]
    order: list[PortKey]
    index: dict[PortKey, int]
    series_at: _Blocks
    gauge_at: _Blocks


class _Absent(NamedTuple):
    """A port not in the store, for :class:`PortColumns`: no series, no gauges."""

    schema: _Schema
    base: int
    gschema: _Schema
    gbase: int


_ABSENT = _Absent(_NO_SERIES, 0, _NO_SERIES, 0)


# ---------------------------------------------------------------------------- array helpers
def _shape(schema: _Schema, keys: tuple[SeriesKey, ...], limit: int) -> tuple[np.ndarray, np.ndarray, tuple[SeriesKey, ...]] | None:
    """A port group's plan when its port has ``schema`` and the group reads ``keys``: each
    reading's offset, which readings start a new series, and the new keys in order; None when
    the port would go past ``limit`` series (the group is then read reading by reading)."""
    pend: dict[SeriesKey, int] = {}
    offs: list[int] = []
    first: list[bool] = []
    n = len(schema.keys)
    for key in keys:
        off = schema.index.get(key)
        fresh = False
        if off is None:
            off = pend.get(key)
            if off is None:
                if n + len(pend) >= limit:
                    return None
                off = pend[_KEYS.setdefault(key, key)] = n + len(pend)
                fresh = True
        offs.append(off)
        first.append(fresh)
    return np.array(offs, np.int64), np.array(first, bool), tuple(pend)


# A Python list converted to an array in one call holds the GIL for all of it (0.3 s for the
# 2 million values of a 100,000-port poll): on the pipeline worker that is a stall of the event
# loop (agent/worker.py). Long lists are converted in slices, with a chance to switch between.
_SLICE = 1 << 16


def _array(col: Any, dtype: Any) -> np.ndarray:
    """``np.asarray(col, dtype)``; a long list in slices (``dtype`` None: numpy's choice, the same for every slice)."""
    if isinstance(col, np.ndarray) or len(col) <= _SLICE:
        return np.asarray(col, dtype=dtype)
    if dtype is None:
        dtype = np.asarray(col[:_SLICE]).dtype
        if dtype.kind in "ui":  # a later slice may not fit (a big or negative value): let numpy decide for the whole
            parts = [np.asarray(col[i:i + _SLICE]) for i in range(0, len(col), _SLICE)]
            return np.concatenate(parts) if all(p.dtype == dtype for p in parts) else np.asarray(col)
    return np.concatenate([np.asarray(col[i:i + _SLICE], dtype=dtype) for i in range(0, len(col), _SLICE)])


def _values(values: Any, n: int) -> tuple[np.ndarray, np.ndarray | None]:
    """The values as uint64, and which of them are not integers in [0, 2^64) (None: all are)."""
    a = _array(values, None) if n else np.zeros(0, np.uint64)
    if a.dtype.kind == "u" or (a.dtype.kind == "i" and (not n or a.min() >= 0)):
        return a.astype(np.uint64).reshape(n), None
    items = values.tolist() if isinstance(values, np.ndarray) else list(values)
    exotic = np.array([not (type(v) is int and 0 <= v < 1 << 64) for v in items], dtype=bool)
    return np.array([0 if x else v for v, x in zip(items, exotic.tolist(), strict=True)], dtype=np.uint64), exotic


def _object_values(raw: Any, pos: np.ndarray) -> np.ndarray:
    """The readings at ``pos`` as Python numbers (exact arithmetic on object arrays)."""
    items = raw.tolist() if isinstance(raw, np.ndarray) else raw
    out = np.empty(len(pos), dtype=object)
    out[:] = [items[i] for i in pos.tolist()]
    return out


def _object_prev(t: _Table, rows: np.ndarray) -> np.ndarray:
    out = np.empty(len(rows), dtype=object)
    big = t.big
    out[:] = [big[r] if r in big else t.value.item(r) for r in rows.tolist()]
    return out


def _obj_pow(bits: np.ndarray) -> np.ndarray:
    out = np.empty(len(bits), dtype=object)
    out[:] = [1 << b if b >= 0 else 0 for b in bits.tolist()]
    return out


def _capped(value: np.ndarray, bits: np.ndarray, sat: np.ndarray, obj: bool) -> np.ndarray:
    """Saturating and at all-ones of its width."""
    if obj:
        cap = np.empty(len(bits), dtype=object)
        cap[:] = [(1 << b) - 1 for b in bits.tolist()]
        return sat & _bool(value >= cap)
    return sat & (bits <= 64) & (value >= _CAP[np.minimum(bits, 64)])


def _bool(a: Any) -> np.ndarray:
    return np.asarray(a, dtype=bool)


def _float(a: np.ndarray, obj: bool) -> np.ndarray:
    """As float64, each value rounded once (as Python's float() of an int)."""
    if obj:
        return np.array([float(x) for x in a.tolist()], dtype=np.float64)
    return a.astype(np.float64)


def _passes(rows: np.ndarray, end: int) -> list[np.ndarray | None]:
    """Positions of the valid readings, split so no row appears twice in one pass (a series
    read twice in one poll is advanced twice, in order, as one reading after the other).
    ``[None]`` when every reading is valid and each series comes once: the common case."""
    valid = rows >= 0
    pos = np.flatnonzero(valid)
    r = rows[pos]
    seen = np.zeros(end, bool)
    seen[r] = True
    if np.count_nonzero(seen) == len(r):
        return [None] if len(pos) == len(rows) else [pos]
    order = np.argsort(r, kind="stable")
    sr = r[order]
    start = np.r_[True, sr[1:] != sr[:-1]]
    group_start = np.maximum.accumulate(np.where(start, np.arange(len(sr)), 0))
    rank = np.empty(len(sr), np.int64)
    rank[order] = np.arange(len(sr)) - group_start
    return [pos[rank == k] for k in range(int(rank.max()) + 1)]


def _index(rows: np.ndarray) -> slice | np.ndarray:
    """The rows as a slice when they are one contiguous ascending run (reads and writes are
    then views, not gathers), else as they are."""
    if len(rows) and rows[-1] - rows[0] == len(rows) - 1 and (len(rows) == 1 or bool(np.all(np.diff(rows) == 1))):
        return slice(int(rows[0]), int(rows[-1]) + 1)
    return rows


def _same_layout(plan: _Plan, cols: CounterColumns) -> bool:
    if cols.layout is not None or plan.token is not None:
        return plan.token == cols.layout
    return _same(plan.keys, cols.keys) and _same(plan.port_of, cols.port_of) and _same(plan.ports, cols.ports)


def _same(a: Any, b: Any) -> bool:
    if a is b:
        return True
    if len(a) != len(b):
        return False
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return bool(np.array_equal(a, b))
    return bool(a == b)


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
