"""Helpers shared by the analyses and the rules: validity guards, fractions, per-port indexes, ratio gauges.

False-positive controls live here so every analysis and rule applies them the same way:

* an interval is used only when the store marked it valid (``Series.delta`` is not None:
  no reset, restart, saturation or clock problem), on the store's device-clocked ``dt``;
* derived tests skip a port whose link is down (``link_up`` gauge 0) or that went down or
  retrained during the interval (``link_downed`` / ``link_error_recovery`` delta > 0): a
  flap stalls transmission and pauses, which must not read as a storm or a stall.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from itertools import compress
from typing import Any

import numpy as np

from fabricmon.agent.detector.base import ExportedGauge
from fabricmon.agent.store import PortEntry, PortKey, Series
from fabricmon.core.slicing import sorted_in_slices

LINK_UP = ("link_up", ())
LINK_SPEED = ("link_speed_bytes", ())
LINK_DOWNED = ("link_downed", ())
LINK_RECOVERY = ("link_error_recovery", ())
TX_BYTES = ("tx_bytes", ())
RX_BYTES = ("rx_bytes", ())


def link_ok(entry: PortEntry) -> bool:
    """False while the link is down or when it flapped or retrained during the last interval."""
    g = entry.gauge(*LINK_UP)
    if g is not None and g <= 0:
        return False
    for key in (LINK_DOWNED, LINK_RECOVERY):
        se = entry.counter(*key)
        if se is not None and se.delta:
            return False
    return True


def speed_bytes(entry: PortEntry | None) -> float | None:
    if entry is None:
        return None
    g = entry.gauge(*LINK_SPEED)
    return g if g is not None and g > 0 else None


def frac(se: Series | None) -> float | None:
    """Share of the last valid interval covered by a seconds counter (pause duration), 0..1."""
    if se is None or se.delta is None or not se.dt:
        return None
    return min(max(se.delta / se.dt, 0.0), 1.0)


def window_frac(se: Series | None, seconds: float) -> tuple[float, float] | None:
    """(fraction of time, elapsed) of a seconds counter over the rolling window."""
    if se is None:
        return None
    w = se.window(seconds)
    if w is None or w[1] <= 0:
        return None
    return min(max(w[0] / w[1], 0.0), 1.0), w[1]


def tx_progress(entry: PortEntry, queue: tuple[Any, ...] | None, min_line_fraction: float) -> bool | None:
    """Did the port (or its queue) make transmit progress in the last interval? None when unknown.

    Progress means sending at least ``min_line_fraction`` of line rate (1 %: SONiC's storm
    test asks for an unchanged queue packet counter, sonic-swss ``pfc_detect_mellanox.lua``;
    without a queue counter a port paused 99.7 % of the time still sends a
    little in the gaps between pause refreshes, and that is no progress). In order of
    preference: the queue's byte counter; its packet counter times the port's average
    packet size; the port's byte counter (other priorities share it). Without a link speed
    any transmitted packet counts as progress.
    """
    speed = speed_bytes(entry)
    floor = min_line_fraction * speed if speed else None
    if queue is not None:
        qb = entry.counter("queue_tx_bytes", queue)
        if qb is not None and qb.rate is not None and floor is not None:
            return qb.rate >= floor
        qp = entry.counter("queue_tx_packets", queue)
        if qp is not None and qp.delta is not None:
            if floor is not None and qp.rate is not None:
                tb, tp = entry.counter(*TX_BYTES), entry.counter("tx_packets", ())
                if tb is not None and tp is not None and tb.delta is not None and tp.delta:
                    return qp.rate * (tb.delta / tp.delta) >= floor
            return qp.delta > 0
    tx = entry.counter(*TX_BYTES)
    if tx is None or tx.rate is None:
        return None
    if floor is None:
        return tx.delta > 0 if tx.delta is not None else None
    return tx.rate >= floor


class SubIndex:
    """Which sub-label values (priorities, queues) a port has for some counters, cached.

    Scanning every series of every updated port each pass would cost too much on a
    100,000-port fabric; the set of series of a port rarely changes, so it is cached and
    rebuilt only when the entry object or its series count changes.
    """

    __slots__ = ("_cache", "names")

    _EMPTY: tuple[Any, ...] = ()

    def __init__(self, names: Iterable[str]) -> None:
        self.names = frozenset(names)
        self._cache: dict[PortKey, tuple[int, int, tuple[Any, ...]]] = {}

    def subs(self, pk: PortKey, entry: PortEntry) -> tuple[Any, ...]:
        c = self._cache.get(pk)
        n = entry.series_count()
        if c is not None and c[0] == id(entry) and c[1] == n:
            return c[2]
        names = self.names
        found = sorted({sub[0] for name, sub, _ in entry.counters() if name in names and len(sub) == 1}, key=str)
        subs = tuple(found) if found else self._EMPTY
        self._cache[pk] = (id(entry), n, subs)
        return subs

    def forget_missing(self, live: dict[PortKey, PortEntry]) -> None:
        if len(live) < len(self._cache):
            for pk in [pk for pk in self._cache if pk not in live]:
                del self._cache[pk]


class SeriesCache:
    """The series of a port a rule cares about, cached like :class:`SubIndex`, so a quiet
    port costs one lookup and a scan of a few objects instead of many dict probes."""

    __slots__ = ("_cache", "select")

    def __init__(self, select: Callable[[str, tuple[Any, ...]], bool]) -> None:
        self.select = select
        self._cache: dict[PortKey, tuple[int, int, tuple[Series, ...]]] = {}

    def get(self, pk: PortKey, entry: PortEntry) -> tuple[Series, ...]:
        c = self._cache.get(pk)
        n = entry.series_count()
        if c is not None and c[0] == id(entry) and c[1] == n:
            return c[2]
        select = self.select
        found = tuple(se for name, sub, se in entry.counters() if select(name, sub))
        self._cache[pk] = (id(entry), n, found)
        return found

    def forget_missing(self, live: dict[PortKey, PortEntry]) -> None:
        if len(live) < len(self._cache):
            for pk in [pk for pk in self._cache if pk not in live]:
                del self._cache[pk]


def moved(series: tuple[Series, ...]) -> bool:
    """Any increase within the kept history (includes the last interval)."""
    return any(se.moved_in_history() for se in series)


class RatioGauge:
    """Last values of one exported ratio. A series that drops to 0 is exported as 0 once
    (so dashboards see it end) and then removed, which bounds the cardinality to the ports
    that are, or just were, non-zero."""

    __slots__ = ("help", "labels", "name", "values")

    def __init__(self, name: str, help: str, labels: tuple[str, ...]) -> None:
        self.name = name
        self.help = help
        self.labels = labels
        self.values: dict[tuple[str, ...], float] = {}

    def set(self, key: tuple[str, ...], value: float | None) -> None:
        if value is None:
            return
        if value > 0:
            self.values[key] = value
            return
        prev = self.values.get(key)
        if prev is None:
            return
        if prev == 0:
            del self.values[key]
        else:
            self.values[key] = 0.0

    def set_many(self, keys: list[tuple[str, ...]], values: np.ndarray) -> None:
        """:meth:`set` for many keys at once (NaN stands for None): the positive values in one
        C-level update, the others (0 once, then removed) only where a key is present."""
        pos = values > 0
        self.values.update(zip(compress(keys, pos.tolist()), values[pos].tolist(), strict=True))
        present = self.values
        for key in compress(keys, (values <= 0).tolist()):
            if key in present:
                self.set(key, 0.0)

    def metric(self) -> ExportedGauge:
        return ExportedGauge(self.name, self.help, self.labels, sorted_in_slices(self.values.items()))  # a value per port

