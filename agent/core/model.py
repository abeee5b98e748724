"""Data passed between the stages: collector parse -> store -> detector -> exporter.

These types are the contract every collector's ``parse`` produces. Nothing downstream of a
parser knows which source a value came from: it sees device, port, an internal counter name
from :mod:`fabricmon.core.vocabulary`, and the raw value with the facts needed to turn it into a rate
(bit width, whether it saturates instead of wrapping, and the scale to base units).
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass, field
from itertools import accumulate, compress
from operator import attrgetter, ne
from typing import Any


@dataclass(slots=True)
class Sample:
    """One raw reading of a monotonic counter.

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


@dataclass(slots=True)
class CounterColumns:
    """One poll's counter readings of one target as columns: what the counter store takes.

    Row ``i`` of ``keys``, ``values``, ``bits``, ``saturating`` and ``scale`` is one reading
    (the fields of :class:`Sample`); ``keys[i]`` is ``(counter, sub)`` and ``port_of[i]`` the
    index into ``ports`` of its ``(device, port)``. ``ports`` lists port groups in the order
    the rows come (a port may come twice). Columns may be lists or numpy arrays (this module
    does not need numpy). ``layout`` is the producer's token for exactly these ``ports``,
    ``port_of`` and ``keys``: a producer that gives a target the same token again promises
    the same keys, and the store then maps keys to its rows once, not on every poll (None:
    map every time). ``clocks`` is the device clock per device, as in :class:`ParseResult`.
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

    @classmethod
    def from_samples(cls, samples: Iterable[Sample], gauges: Sequence[Gauge] = (),
                     clocks: dict[str, float] | None = None, target: str = "") -> CounterColumns:
        """The columns of a list of :class:`Sample` (the one conversion from the object form).

        Keys are interned (one tuple per distinct (counter, sub)), so the store can see that a
        poll has the same series as the last one by comparing key lists, which is then a
        comparison of references.
        """
        samples = samples if isinstance(samples, list) else list(samples)
        pks = list(map(_PORT_OF, samples))
        # A new port group wherever (device, port) differs from the reading before (parsers emit
        # a port's samples together).
        starts = [True, *map(ne, pks[1:], pks[:-1])] if pks else []
        ports = list(compress(pks, starts))
        port_of = [g - 1 for g in accumulate(starts)]
        ks = list(map(_KEY_OF, samples))
        keys = list(map(_SERIES_KEYS.setdefault, ks, ks))
        return cls(target, ports, port_of, keys, list(map(_VALUE, samples)), list(map(_BITS, samples)),
                   list(map(_SAT, samples)), list(map(_SCALE, samples)), dict(clocks or {}), gauges)


_PORT_OF, _KEY_OF = attrgetter("device", "port"), attrgetter("counter", "sub")
_VALUE, _BITS, _SAT, _SCALE = attrgetter("value"), attrgetter("bits"), attrgetter("saturating"), attrgetter("scale")
# One (counter, sub) tuple per distinct series key, shared by every poll's columns.
_SERIES_KEYS: dict[tuple[str, tuple[Any, ...]], tuple[str, tuple[Any, ...]]] = {}


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


@dataclass(slots=True)
class ParseResult:
    """What one payload says. ``links`` is None when the payload carries no topology."""

    samples: list[Sample] = field(default_factory=list)
    gauges: list[Gauge] = field(default_factory=list)
    devices: list[DeviceInfo] = field(default_factory=list)
    ports: list[PortInfo] = field(default_factory=list)
    links: list[Link] | None = None
    clocks: dict[str, float] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    # Facts about the target itself (the SNMP vendor profile and what chose it), exported
    # as fabricmon_target_info labels.
    target_info: dict[str, str] = field(default_factory=dict)


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
ROLES = ("origin", "victim", "member")


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
