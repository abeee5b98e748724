"""Data passed between the stages: collector parse -> store -> detector -> exporter.

These types are the contract every collector's ``parse`` produces. Nothing downstream of a
parser knows which source a value came from: it sees device, port, an internal counter name
from :mod:`fabricmon.core.vocabulary`, and the raw value with the facts needed to turn it into a rate
(bit width, whether it saturates instead of wrapping, and the scale to base units).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from itertools import repeat
from typing import Any


@dataclass(slots=True)
class Sample:
    """One raw reading of a monotonic counter, as an object: what iterating :class:`Counters`
    (where parsers write readings as columns) yields, and what tests and tools hand the store.

    ``value`` is the device's own integer, in the device's own unit; ``scale`` converts a
    delta of it to the vocabulary's base unit (4 for InfiniBand data words -> bytes, 0.001
    for a pause duration in ms -> seconds). ``bits`` is the counter width (32 or 64 for
    SNMP and extended IB counters; 4, 8, 16 or 32 for basic IB counters). ``saturating``
    counters stop at all-ones instead of wrapping (InfiniBand PortCounters).
    ``sub`` holds the values of the counter's extra labels (see ``CounterDef.labels``),
    for example ``(3,)`` for priority 3 or ``("buffer", "503")`` for a WJH reason. Priority and
    queue values are ints when numeric (the pipeline normalises ``"3"`` to ``3``).
    """

    device: str
    port: str
    counter: str
    value: int | float
    sub: tuple[Any, ...] = ()
    bits: int = 64
    saturating: bool = False
    scale: float = 1.0


@dataclass(slots=True)
class Gauge:
    """One reading of a value that is not monotonic (state, speed, occupancy)."""

    device: str
    port: str
    name: str
    value: float
    sub: tuple[Any, ...] = ()


def series_key(counter: str, sub: tuple[Any, ...] = ()) -> tuple[str, tuple[Any, ...]]:
    """The one shared ``(counter, sub)`` tuple of a series key. Every poll's columns hold the
    same tuple objects, so the store sees that a poll has the series of the last one by
    comparing key lists, which is then a comparison of references."""
    k = (counter, sub)
    return _SERIES_KEYS.setdefault(k, k)


# One (counter, sub) tuple per distinct series key, shared by every poll's columns.
_SERIES_KEYS: dict[tuple[str, tuple[Any, ...]], tuple[str, tuple[Any, ...]]] = {}


@dataclass(frozen=True, slots=True)
class PortLayout:
    """The counters of one port's readings, in order: what :meth:`Counters.add_port` fills.

    A parser builds one per shape of port it meets (its payload format has a few: every port of
    a perfquery ``-x`` poll has the same 18 counters), through :meth:`of`, and then hands over
    only the values, port by port.
    """

    keys: tuple[tuple[str, tuple[Any, ...]], ...]
    bits: tuple[int, ...]
    saturating: tuple[bool, ...]
    scale: tuple[float, ...]

    @classmethod
    def of(cls, fields: Iterable[tuple[str, tuple[Any, ...], int, bool, float]]) -> PortLayout:
        """A layout of ``(counter, sub, bits, saturating, scale)`` readings."""
        rows = [(series_key(c, sub), b, s, sc) for c, sub, b, s, sc in fields]
        keys, bits, sat, scale = (tuple(col) for col in zip(*rows, strict=True)) if rows else ((), (), (), ())
        return cls(keys, bits, sat, scale)


class KeyColumn(Sequence[tuple[str, tuple[Any, ...]]]):
    """Each reading's series key as a small integer code into ``table``, the keys of the poll:
    2 bytes a reading (a numpy ``uint16`` array or ``array("H")``) where a list holds an 8-byte
    reference to a tuple. A 100,000-port perfquery poll has 1.8 million readings of 18 keys,
    and the parser keeps its column from poll to poll (14 MB as a list). A sequence of the
    keys for every reader; ``table`` may name a key twice (after :meth:`relabeled`)."""

    __slots__ = ("codes", "table")

    def __init__(self, table: tuple[tuple[str, tuple[Any, ...]], ...], codes: Sequence[int]) -> None:
        self.table = table
        self.codes = codes

    def __len__(self) -> int:
        return len(self.codes)

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return KeyColumn(self.table, self.codes[i])
        return self.table[self.codes[i]]

    def __iter__(self) -> Iterator[tuple[str, tuple[Any, ...]]]:
        return map(self.table.__getitem__, _items(self.codes))

    def __eq__(self, other: object) -> bool:
        if other is self:  # (a parser hands the same column every poll)
            return True
        if isinstance(other, KeyColumn) and other.table == self.table:
            return _items(self.codes) == _items(other.codes)
        if isinstance(other, Sequence):
            return len(self) == len(other) and list(self) == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def relabeled(self, mapped: dict[tuple[str, tuple[Any, ...]], tuple[str, tuple[Any, ...]]]) -> KeyColumn:
        """The column with every key replaced by ``mapped[key]``: the table, not the codes."""
        return KeyColumn(tuple(map(mapped.__getitem__, self.table)), self.codes)


class Counters:
    """One poll's counter readings as the parser writes them: columns, not objects.

    Row ``i`` of ``keys``, ``values``, ``bits``, ``saturating`` and ``scale`` is one reading:
    the device's raw integer ``values[i]`` of series ``keys[i]`` (a :func:`series_key`), its
    width, whether it saturates instead of wrapping, and its scale to base units (see
    :class:`Sample`, the same facts as one object). ``port_of[i]`` indexes ``ports``, the
    ``(device, port)`` groups in the order the rows come: consecutive readings of one port are
    one group, and a port may come in more than one group. Readings go in one at a time
    (:meth:`add`) or a port at a time (:meth:`add_port`, the fast path). Iterating yields
    :class:`Sample` objects: a view for tests and tools; the pipeline hands the columns to the
    store as they are (:meth:`columns`). A parser that reads a whole poll at once hands over
    its columns as numpy arrays instead (:meth:`bulk`).
    """

    __slots__ = ("_distinct", "bits", "keys", "port_of", "ports", "saturating", "scale", "values")

    def __init__(self) -> None:
        self.ports: list[tuple[str, str]] = []
        self.port_of: Sequence[int] = []
        self.keys: list[tuple[str, tuple[Any, ...]]] | KeyColumn = []  # a KeyColumn only from bulk
        self.values: Sequence[int | float] = []
        self.bits: Sequence[int] = []
        self.saturating: Sequence[bool] = []
        self.scale: Sequence[float] = []
        self._distinct: tuple[tuple[str, tuple[Any, ...]], ...] | None = None

    @classmethod
    def bulk(cls, ports: list[tuple[str, str]], port_of: Sequence[int], keys: list[tuple[str, tuple[Any, ...]]] | KeyColumn,
             values: Sequence[int | float], bits: Sequence[int], saturating: Sequence[bool], scale: Sequence[float],
             distinct: tuple[tuple[str, tuple[Any, ...]], ...] | None = None) -> Counters:
        """A whole poll's columns as they are (numpy arrays or lists; not copied, so a parser
        may hand the same ``ports``, ``port_of`` and ``keys`` every poll and the store reuses its
        row plan). ``distinct``: the distinct ``keys``, when the parser knows them. Complete:
        nothing is added to it."""
        out = cls()
        out.ports, out.port_of, out.keys, out.values = ports, port_of, keys, values
        out.bits, out.saturating, out.scale = bits, saturating, scale
        out._distinct = distinct
        return out

    @classmethod
    def of(cls, samples: Iterable[Sample]) -> Counters:
        """The columns of :class:`Sample` objects (tests, tools, the store's object API)."""
        out = cls()
        for s in samples:
            out.add(s.device, s.port, s.counter, s.value, s.sub, s.bits, s.saturating, s.scale)
        return out

    def _group(self, device: str, port: str) -> int:
        ports = self.ports
        if not ports or ports[-1] != (device, port):
            ports.append((device, port))
        return len(ports) - 1

    def add(self, device: str, port: str, counter: str, value: int | float, sub: tuple[Any, ...] = (),
            bits: int = 64, saturating: bool = False, scale: float = 1.0) -> None:
        """One reading."""
        self._distinct = None
        self.port_of.append(self._group(device, port))
        self.keys.append(series_key(counter, sub))
        self.values.append(value)
        self.bits.append(bits)
        self.saturating.append(saturating)
        self.scale.append(scale)

    def add_port(self, device: str, port: str, layout: PortLayout, values: Sequence[int | float]) -> None:
        """One port's readings: ``values[j]`` is the reading of ``layout.keys[j]``. A port
        without readings adds nothing (no empty group: the store would create the port)."""
        if len(values) != len(layout.keys):
            raise ValueError(f"{len(values)} values for a layout of {len(layout.keys)} counters")
        if not values:
            return
        self._distinct = None
        self.port_of.extend(repeat(self._group(device, port), len(values)))
        self.keys.extend(layout.keys)
        self.values.extend(values)
        self.bits.extend(layout.bits)
        self.saturating.extend(layout.saturating)
        self.scale.extend(layout.scale)

    def __len__(self) -> int:
        return len(self.keys)

    def __iter__(self) -> Iterator[Sample]:
        ports = self.ports
        for g, (counter, sub), v, b, sat, sc in zip(*map(_items, (self.port_of, self.keys, self.values, self.bits,
                                                                   self.saturating, self.scale)), strict=True):
            device, port = ports[g]
            yield Sample(device, port, counter, v, sub, b, sat, sc)

    def distinct_keys(self) -> Iterable[tuple[str, tuple[Any, ...]]]:
        """The distinct series keys (a poll has far fewer than readings)."""
        return self._distinct if self._distinct is not None else set(self.keys)

    def relabel(self, port: Callable[[str, str], tuple[str, str]] | None = None,
                key: Callable[[str, tuple[Any, ...]], tuple[str, tuple[Any, ...]]] | None = None) -> None:
        """Rewrite the port groups and the series keys in place through ``port(device, port)`` and
        ``key(counter, sub)``; each distinct key is mapped once (a poll has far fewer distinct
        keys than readings), and the key list is rebuilt only when a key changed."""
        if port is not None:
            self.ports = [port(d, p) for d, p in self.ports]
        if key is not None:
            mapped = {k: series_key(*key(*k)) for k in self.distinct_keys()}
            if any(v is not k for k, v in mapped.items()):
                self.keys = self.keys.relabeled(mapped) if isinstance(self.keys, KeyColumn) \
                    else list(map(mapped.__getitem__, self.keys))
                if self._distinct is not None:
                    self._distinct = tuple(dict.fromkeys(mapped.values()))

    def columns(self, target: str = "", clocks: dict[str, float] | None = None, gauges: Sequence[Gauge] = (),
                layout: Hashable | None = None) -> CounterColumns:
        """These readings as the store's input for ``target`` (the lists are shared, not copied)."""
        return CounterColumns(target, self.ports, self.port_of, self.keys, self.values, self.bits, self.saturating,
                              self.scale, dict(clocks or {}), gauges, layout)


def _items(col: Sequence[Any]) -> Sequence[Any]:
    """A column's items as Python objects (a numpy array's as ints, floats and bools)."""
    tolist = getattr(col, "tolist", None)
    return tolist() if tolist is not None else col


@dataclass(slots=True)
class CounterColumns:
    """One poll's counter readings of one target as the counter store takes them: the columns
    of :class:`Counters` (lists or numpy arrays; this module does not need numpy) with the
    target they belong to, its device clocks (as in :class:`ParseResult`) and its gauges.
    ``layout`` is the producer's token for exactly these ``ports``, ``port_of`` and ``keys``: a
    producer that gives a target the same token again promises the same keys, and the store
    then maps keys to its rows once, not on every poll (None: the store compares the lists).
    """

    target: str
    ports: Sequence[tuple[str, str]]
    port_of: Sequence[int]
    keys: Sequence[tuple[str, tuple[Any, ...]]]
    values: Sequence[int | float]
    bits: Sequence[int]
    saturating: Sequence[bool]
    scale: Sequence[float]
    clocks: dict[str, float] = field(default_factory=dict)
    gauges: Sequence[Gauge] = ()
    layout: Hashable | None = None


@dataclass(slots=True)
class DeviceInfo:
    """A node of the fabric: a switch, an HCA, a host. ``name`` is the ``device`` label."""

    name: str
    kind: str = "switch"  # switch | ca | host | router
    guid: str = ""
    description: str = ""
    model: str = ""


@dataclass(slots=True)
class PortInfo:
    """Descriptive facts about a port, exported once as ``fabricmon_port_info``."""

    device: str
    port: str
    guid: str = ""
    lid: str = ""
    alias: str = ""
    label: str = ""  # e.g. a Quantum-2 split label "1/3/1"


@dataclass(slots=True, frozen=True)
class Link:
    """A cable: ``(device, port)`` is connected to ``(peer_device, peer_port)``."""

    device: str
    port: str
    peer_device: str
    peer_port: str


@dataclass(slots=True, frozen=True)
class JobInfo:
    """A running job as a job source (a scheduler, a file) reports it: its id, the hosts it runs
    on (host lists expanded), when it started (Unix seconds, None when the source does not say),
    other ids it answers to (a Slurm array task's ``48213_7``), and only the labels the operator
    enabled (user, partition, namespace, name: job names can be personal data)."""

    id: str
    hosts: tuple[str, ...]
    start: float | None = None
    aliases: tuple[str, ...] = ()
    labels: tuple[tuple[str, str], ...] = ()


@dataclass(slots=True)
class ParseResult:
    """What one payload says. ``links`` is None when the payload carries no topology;
    ``inventory`` is None unless the payload is a job source's (then the running jobs, maybe none)."""

    counters: Counters = field(default_factory=Counters)
    gauges: list[Gauge] = field(default_factory=list)
    devices: list[DeviceInfo] = field(default_factory=list)
    ports: list[PortInfo] = field(default_factory=list)
    links: list[Link] | None = None
    clocks: dict[str, float] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    # Facts about the target itself (the SNMP vendor profile and what chose it), exported
    # as fabricmon_target_info labels.
    target_info: dict[str, str] = field(default_factory=dict)
    inventory: list[JobInfo] | None = None


@dataclass(slots=True)
class TargetSpec:
    """What a parser may know about its target: the recording header's target entry.

    ``options`` holds only parse-relevant, non-secret options (an SNMP vendor profile, a
    node-name map); credentials never reach a parser or a recording.
    """

    name: str
    source: str
    options: dict[str, Any] = field(default_factory=dict)

    def to_header(self) -> dict[str, Any]:
        return {"name": self.name, "source": self.source, **self.options}

    @classmethod
    def from_header(cls, entry: dict[str, Any]) -> TargetSpec:
        options = {k: v for k, v in entry.items() if k not in ("name", "source")}
        return cls(name=str(entry["name"]), source=str(entry["source"]), options=options)


@dataclass(slots=True)
class Poll:
    """One finished poll of one target: exactly a recording ``poll`` line."""

    target: str
    source: str
    t: float
    duration_s: float
    ok: bool
    payload: dict[str, Any] | None = None
    error: str | None = None
    reason: str | None = None  # error class for metrics: timeout, connection, http, auth, ...

    def to_line(self) -> dict[str, Any]:
        line: dict[str, Any] = {
            "type": "poll",
            "target": self.target,
            "source": self.source,
            "t": round(self.t, 6),
            "duration_s": round(self.duration_s, 6),
            "ok": self.ok,
        }
        if self.ok:
            line["payload"] = self.payload
        else:
            line["error"] = self.error or "unknown error"
            if self.reason:
                line["reason"] = self.reason
        return line


KINDS = ("pfc_storm", "pfc_deadlock", "credit_deadlock", "congestion", "packet_loss", "link_degraded", "misconfig")
# "stalled": an InfiniBand port stalled alone (kind credit_deadlock), not part of a loop;
# "watchdog": a switch PFC watchdog that disagrees with the port's own counters (kind
# pfc_storm). Both are fabricmon additions to the shared vocabulary (docs/recording-format.md).
ROLES = ("origin", "victim", "member", "stalled", "watchdog")


@dataclass(slots=True)
class Finding:
    """A detector finding in the vocabulary of recording-format.md."""

    kind: str
    severity: str
    device: str
    port: str | None
    priority: int | None
    role: str | None
    start: float
    end: float | None = None
    summary: str = ""
    evidence: dict[str, Any] = field(default_factory=dict)
    peer_device: str | None = None
    peer_port: str | None = None
    rule: str = ""

    @property
    def key(self) -> tuple[str, str, str | None, int | None, str | None]:
        """The finding's identity. A misconfig finding has no role; its check (``evidence.check``)
        takes that place, since one port can fail several checks on one priority."""
        last = self.evidence.get("check") if self.kind == "misconfig" else self.role
        return (self.kind, self.device, self.port, self.priority, last)

    @property
    def sort_key(self) -> tuple[float, str, str, str, int, str, str, str]:
        """Output order (findings files, /api/findings): start time, then kind, device, port,
        priority, role, peer. Total, so output never depends on set or dict iteration order."""
        return (self.start, self.kind, self.device, self.port or "", -1 if self.priority is None else self.priority,
                self.role or "", self.peer_device or "", self.peer_port or "")

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "kind": self.kind,
            "severity": self.severity,
            "device": self.device,
            "port": self.port,
            "priority": self.priority,
            "role": self.role,
            "start": self.start,
            "end": self.end,
            "summary": self.summary,
            "evidence": self.evidence,
        }
        if self.peer_device is not None:
            out["peer_device"] = self.peer_device
            out["peer_port"] = self.peer_port
        if self.rule:
            out["rule"] = self.rule
        return out
