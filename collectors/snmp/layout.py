"""An SNMP target's poll read in bulk: what its snmprec payload gave apart from its values.

A switch answers the same OIDs with the same types poll after poll; only its counters,
gauges and sysUpTime change. The profile engine (parse.py) reads a payload once, varbind by
varbind, and says which line each of its counters, gauges and the clock came from, and which
lines decided anything by their value (an ``ignore`` value, a gauge ``map``, ifAdminStatus
choosing a port name...). :class:`SnmpLayout` keeps the rest of that result; the next poll's
snmprec is read with :class:`~fabricmon.collectors.textlayout.TextLayout` (every line's
OID and type checked, the values read in numpy) and the same result is made with the new
values: no OID text becomes a tuple, no varbind a Python step, but the few gauges.

The payload stays the snmprec text of the recording format: what is read in bulk is the text
the line-by-line parse would read, so a replay and a live poll give the same result.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from fabricmon.collectors.textlayout import CHECKED, CounterShape, Marks, TextLayout, fields_equal
from fabricmon.core.model import DeviceInfo, Gauge, Link, ParseResult, PortInfo


@dataclass(frozen=True, slots=True, eq=False)
class GaugeSource:
    """How a gauge's value comes from its varbind's number: through ``value_map`` (its
    ``default`` for other numbers) or as it is, then times ``scale``."""

    port: str
    name: str
    sub: tuple[Any, ...]
    value_map: dict[int, float] | None
    default: float | None
    scale: float

    def reading(self, raw: int) -> float | None:
        if self.value_map is None:
            return float(raw) * self.scale
        got = self.value_map.get(raw, self.default)
        return None if got is None else got * self.scale


@dataclass(frozen=True, slots=True, eq=False)
class SnmpLayout:
    """One target's parse result but for its values, and where the values are in its snmprec.

    ``numbers`` returns the counters' numbers, then the gauges', then sysUpTime's (when the
    clock was read). A counter whose column ignores some numbers (``ignore``) must not read
    one of them, and a gauge whose ``map`` has no default must read a mapped number: either
    would change which series the payload has, so such a poll is read line by line.
    """

    numbers: TextLayout
    built_with: tuple[Any, ...]  # the parse options it was built with (profile, profile_dirs)
    device: str
    columns: CounterShape
    ignored: tuple[tuple[int, frozenset[int]], ...]  # (counter's place, numbers its column ignores)
    gauges: tuple[GaugeSource, ...]
    clock: bool
    facts: tuple[tuple[DeviceInfo, ...], tuple[PortInfo, ...], tuple[Link, ...] | None, tuple[str, ...], tuple[tuple[str, str], ...]]

    __eq__ = fields_equal  # by content: parse states are compared (a parse never changes the one it is given)

    def read(self, text: str, options: tuple[Any, ...]) -> ParseResult | None:
        """The result of ``text`` (a payload with this layout's lines), or None when it must
        be read line by line."""
        if options != self.built_with:
            return None
        values = self.numbers.read([text])
        if values is None:
            return None
        nc, ng = len(self.columns.keys), len(self.gauges)
        counts = values[:nc]
        for at, ignore in self.ignored:
            if int(counts[at]) in ignore:
                return None
        gauges = []
        for src, raw in zip(self.gauges, values[nc:nc + ng].tolist(), strict=True):
            reading = src.reading(raw)
            if reading is None:
                return None
            gauges.append(Gauge(self.device, src.port, src.name, reading, src.sub))
        devices, ports, links, warnings, info = self.facts
        result = ParseResult(self.columns.counters(counts), gauges, list(devices), list(ports),
                             None if links is None else list(links), warnings=list(warnings), target_info=dict(info))
        if self.clock:
            result.clocks[self.device] = int(values[nc + ng]) / 100.0
        return result

    @classmethod
    def of(cls, text: str, options: tuple[Any, ...], device: str, result: ParseResult, counter_lines: Sequence[int],
           gauges: Sequence[tuple[int, GaugeSource]], clock_line: int | None, ignored: Sequence[tuple[int, frozenset[int]]],
           checked: Sequence[tuple[int, int]]) -> SnmpLayout | None:
        """The layout of a payload read line by line into ``result``: ``counter_lines`` the line
        of each counter reading (in order), ``gauges`` the line and source of each gauge,
        ``checked`` the (line, limit) of the numbers that need only be valid for their type
        (the ones read among them; the rest is fixed). None when the payload cannot be read
        in bulk."""
        counters = result.counters
        if len(counter_lines) != len(counters) or len(gauges) != len(result.gauges):
            return None
        out = [*counter_lines, *(line for line, _ in gauges), *([clock_line] if clock_line is not None else [])]
        marks = Marks()
        marks.extend([line for line, _ in checked], CHECKED, [limit for _, limit in checked])
        numbers = TextLayout.build([text], [marks], [0] * len(out), out, before=b"|")
        if numbers is None:
            return None
        facts = (tuple(result.devices), tuple(result.ports), None if result.links is None else tuple(result.links),
                 tuple(result.warnings), tuple(result.target_info.items()))
        return cls(numbers, options, device, CounterShape.of(counters), tuple(ignored), tuple(src for _, src in gauges),
                   clock_line is not None, facts)
