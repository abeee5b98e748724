"""A perfquery poll's counters as columns: built port by port, then kept as the poll's layout.

:class:`PollColumns` is what :func:`~fabricmon.collectors.perfquery.parse.port_counters`
writes a poll into when the whole poll is parsed: per port only its layout and its values go
into packed arrays, and the columns are numpy arrays at the end, so a 100,000-port poll
(1.8 million readings) costs no Python object per reading, even when read line by line.

:class:`CounterLayout` is what such a poll gave apart from its values: the next poll whose
texts have the same lines (a fabric's do while its topology holds) is read in bulk
(:class:`~fabricmon.collectors.textlayout.TextLayout`) straight into the same columns.
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from dataclasses import dataclass, replace
from itertools import chain, repeat
from operator import attrgetter
from typing import TYPE_CHECKING, Any

import numpy as np

from fabricmon.collectors.textlayout import CounterShape, TextLayout, fields_equal
from fabricmon.core.model import Counters, KeyColumn, PortInfo, PortLayout
from fabricmon.core.slicing import group_index

if TYPE_CHECKING:
    from fabricmon.collectors.perfquery.parse import Topology

_KEYS = attrgetter("keys")


class PollColumns:
    """A poll's counters, a port at a time (``add_port``, as :class:`Counters` has it), with the
    (text, line) each value was read from; :meth:`counters` gives the columns."""

    __slots__ = ("_index", "counts", "groups", "layout_of", "layouts", "lines", "ports", "texts", "values")

    def __init__(self) -> None:
        self.ports: list[tuple[str, str]] = []
        self.groups = array("q")  # per add_port: its port group (consecutive readings of one port are one group)
        self.layout_of = array("q")  # per add_port: its layout
        self.counts = array("q")
        self.layouts: list[PortLayout] = []
        self._index: dict[int, int] = {}  # id(layout) -> its place in ``layouts`` (held there: ids stay valid)
        self.values = array("Q")
        self.texts = array("q")  # per reading: the text it was read from (-1: unknown)
        self.lines = array("q")  # per reading: its line in that text (-1: not a plain decimal ending a line)

    def add_port(self, device: str, port: str, layout: PortLayout, values: Sequence[int],
                 texts: Sequence[int] | None = None, lines: Sequence[int] | None = None) -> None:
        """One port's readings (see :meth:`Counters.add_port`), read from ``lines`` of ``texts``."""
        n = len(values)
        if n != len(layout.keys):
            raise ValueError(f"{n} values for a layout of {len(layout.keys)} counters")
        if not n:
            return
        li = self._index.get(id(layout))
        if li is None:
            li = self._index[id(layout)] = len(self.layouts)
            self.layouts.append(layout)
        if not self.ports or self.ports[-1] != (device, port):
            self.ports.append((device, port))
        self.groups.append(len(self.ports) - 1)
        self.layout_of.append(li)
        self.counts.append(n)
        self.values.extend(values)
        self.texts.extend(texts if texts is not None else repeat(-1, n))
        self.lines.extend(lines if lines is not None else repeat(-1, n))

    def counters(self) -> Counters:
        """The columns: numpy arrays, the keys a :class:`KeyColumn` of the layouts' shared key tuples."""
        counts = np.frombuffer(self.counts, np.int64) if self.counts else np.zeros(0, np.int64)
        layout_of = np.frombuffer(self.layout_of, np.int64) if self.layout_of else np.zeros(0, np.int64)
        groups = np.frombuffer(self.groups, np.int64) if self.groups else np.zeros(0, np.int64)
        # Each reading's row in the table of every layout's fields: its layout's first row + its place in the port.
        sizes = np.array([len(lay.keys) for lay in self.layouts], np.int64)
        first = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64) if len(sizes) else sizes
        text_at = group_index(counts)  # each reading's text
        n = len(text_at)
        starts = np.cumsum(counts) - counts
        row = (first[layout_of] - starts)[text_at] + np.arange(n)
        table = [(lay.bits, lay.saturating, lay.scale) for lay in self.layouts]
        bits = np.array([b for t in table for b in t[0]], np.int16)[row]
        sat = np.array([s for t in table for s in t[1]], bool)[row]
        scale = np.array([s for t in table for s in t[2]], np.float64)[row]
        distinct = tuple(dict.fromkeys(chain.from_iterable(map(_KEYS, self.layouts))))
        code_of = {k: i for i, k in enumerate(distinct)}
        codes = np.array([code_of[k] for lay in self.layouts for k in lay.keys], np.int64)[row]
        keys = KeyColumn(distinct, codes.astype(np.uint16 if len(distinct) <= 1 << 16 else np.uint32))
        values = np.frombuffer(self.values, np.uint64) if self.values else np.zeros(0, np.uint64)
        return Counters.bulk(self.ports, groups.astype(np.int32)[text_at], keys, values, bits, sat, scale,
                             distinct)


@dataclass(frozen=True, slots=True, eq=False)
class CounterLayout:
    """What a poll's perfquery texts gave apart from their counter values: the same for every
    poll whose texts have the same lines, whose values are then read in bulk into these columns.
    Built from the line-by-line parse, so a bulk read gives exactly its result."""

    numbers: TextLayout
    topology: Topology | None
    names: tuple[tuple[int, str | None], ...]  # each LID read -> its device in that topology (None: not in it)
    columns: CounterShape
    warnings: tuple[str, ...]
    ports_named_by_lid: tuple[PortInfo, ...]

    __eq__ = fields_equal  # by content: parse states are compared (a parse never changes the one it is given)

    @classmethod
    def of(cls, texts: Sequence[str], cols: PollColumns, counters: Counters, marks: Sequence[Any], topo: Topology | None,
           names: dict[int, str | None], warnings: Sequence[str], ports: Sequence[PortInfo]) -> CounterLayout | None:
        """The layout of a poll read line by line into ``cols`` (giving ``counters``), or None
        when its texts cannot be read in bulk."""
        lines = np.frombuffer(cols.lines, np.int64) if cols.lines else np.zeros(0, np.int64)
        if (lines < 0).any():
            return None
        numbers = TextLayout.build(texts, marks, cols.texts, cols.lines)
        if numbers is None:
            return None
        return cls(numbers, topo, tuple(names.items()), CounterShape.of(counters), tuple(warnings), tuple(ports))

    def fit(self, topo: Topology | None) -> CounterLayout | None:
        """This layout for ``topo`` (a refreshed topology that names every LID read the same
        way keeps it), or None."""
        if topo is self.topology:
            return self
        if topo is None or self.topology is None:
            return None
        by_lid = topo.by_lid
        for lid, name in self.names:
            entry = by_lid.get(lid)
            if (None if entry is None else entry[0].name) != name:
                return None
        return replace(self, topology=topo)
