"""One device, one name, whichever source saw it: GUID-labelled readings joined to named devices.

InfiniBand names a node by its NodeDescription (ibnetdiscover, UFM REST), but not every
source carries it: UFM Telemetry rows and the default Prometheus output carry only GUIDs
(``node_guid``, ``port_guid``, ``port_num``: fabric-reference 1.6), and a UFM REST port
without a description falls back to its GUID too. Such a parser labels the device with the
GUID itself, ``0x`` + 16 lower-case hex digits (:func:`fabricmon.core.guid.norm_guid`), and
stays a pure function of its payload: it cannot know what another source calls the node.

The join happens here, once, before a parse result reaches the store: every source that names
a device and gives its GUIDs (ibnetdiscover's ``caguid``/``switchguid`` and port GUIDs, UFM
REST's port ``guid`` and system GUID) binds them (:meth:`Identity.learn`); every GUID-labelled
device of a result is then renamed to the bound name (:meth:`Identity.resolve`), so counters
from UFM Telemetry, topology and link rates from UFM REST, and counters from perfquery land on
one port of the store. The keys, most exact first:

* (port GUID, port number): a port's own identity (IBTA: a port GUID is an EUI-64, unique in
  the fabric; switch ports share the switch's port GUID and differ by number);
* the node GUID (or system GUID) a source gave for the named device, when no other name is
  bound to it (a host's several HCAs may share one system image GUID: ambiguous, unused).

A device named by GUID that nothing binds keeps its GUID label, and is joined as soon as a
naming source reports it (:meth:`Identity.learn` says when a binding is new; the pipeline then
drops what the store holds under labels that now have a name, so the next poll lands on the
named port: one interval of that source's counters is lost, once).
"""

from __future__ import annotations

from dataclasses import replace
from operator import attrgetter, itemgetter
from typing import Any

from fabricmon.core.guid import norm_guid
from fabricmon.core.model import Gauge, Link, ParseResult

_AMBIGUOUS = ""


def is_guid_label(device: str) -> bool:
    """True when a device is labelled by its GUID (no source named it)."""
    return len(device) == 18 and device.startswith("0x") and norm_guid(device) == device


class Identity:
    """GUID -> name bindings learned from the sources that report both."""

    def __init__(self) -> None:
        self.by_port: dict[tuple[str, str], str] = {}  # (port GUID, port number) -> device name
        self.by_guid: dict[str, str] = {}  # node or system GUID -> device name ("" when ambiguous)
        self._version = 0  # bumped when a binding changes
        # What was learned last from the same lists (a collector hands the same device and
        # port objects over every poll while its topology holds): (the lists' copies, version).
        self._learned: dict[tuple[int, int, int], tuple[list[Any], list[Any], int]] = {}

    def __len__(self) -> int:
        return len(self.by_port) + len(self.by_guid)

    def learn(self, result: ParseResult) -> bool:
        """Bind the GUIDs of the named devices and ports of ``result``; True when a binding is
        new or changed (GUID-labelled ports the store already holds may have a name now).

        Learning is a function of the bindings and the input, so the same devices and ports
        again, with no binding changed since they were learned, change nothing: that is told
        by comparing the lists (their elements by identity first: C-level), not by normalising
        100,000 GUIDs again every poll."""
        key = (len(result.devices), len(result.ports), id(result.ports[0]) if result.ports else 0)  # (content compared below)
        last = self._learned.get(key)
        if last is not None and last[2] == self._version and last[0] == result.devices and last[1] == result.ports:
            return False
        changed = self._learn(result)
        if len(self._learned) >= 64:  # sources come and go: keep the recent ones
            self._learned.clear()
        self._learned[key] = (list(result.devices), list(result.ports), self._version)
        return changed

    def _learn(self, result: ParseResult) -> bool:
        changed = False
        seen: dict[str, str] = {}
        for d in result.devices:
            g = norm_guid(d.guid) if d.guid and not is_guid_label(d.name) else ""
            if g:
                seen[g] = d.name if seen.get(g, d.name) == d.name else _AMBIGUOUS
        for p in result.ports:
            g = norm_guid(p.guid) if p.guid and not is_guid_label(p.device) else ""
            if g and self.by_port.get((g, p.port)) != p.device:
                self.by_port[(g, p.port)] = p.device
                changed = True
        for g, name in seen.items():
            now = name if self.by_guid.get(g, name) == name else _AMBIGUOUS
            if self.by_guid.get(g) != now:
                self.by_guid[g] = now
                changed = True
        self._version += changed
        return changed

    def name(self, label: str, port_guids: dict[str, str]) -> str | None:
        """The bound name of GUID label ``label`` whose ports (number -> port GUID, "" when the
        result gave none) a result lists: by each port's GUID and number, then by the label as
        a port GUID (a ConnectX's first port GUID often is its node GUID), then by the label as a
        node or system GUID."""
        for num, pg in port_guids.items():
            hit = (self.by_port.get((pg, num)) if pg else None) or self.by_port.get((label, num))
            if hit:
                return hit
        return self.by_guid.get(label) or None

    def resolve(self, result: ParseResult) -> dict[str, str]:
        """Rename the GUID-labelled devices of ``result`` in place to their bound names; the
        renames made (label -> name). Port numbers stay: an InfiniBand port number is the same
        in every source."""
        if not len(self):
            return {}
        devices = set(map(itemgetter(0), result.counters.ports))  # each device once, not each port
        devices.update(map(attrgetter("device"), result.gauges))
        devices.update(map(attrgetter("device"), result.ports))
        devices.update(result.clocks)
        labels = {d for d in devices if is_guid_label(d)}
        if not labels:
            return {}
        port_guids: dict[str, dict[str, str]] = {}
        for d, port in result.counters.ports:
            if d in labels:
                port_guids.setdefault(d, {}).setdefault(port, "")
        for p in result.ports:
            if p.device in labels:
                port_guids.setdefault(p.device, {})[p.port] = norm_guid(p.guid) if p.guid else ""
        rename = {lb: n for lb in labels if (n := self.name(lb, port_guids.get(lb, {}))) is not None}
        if rename:
            _rename(result, rename)
        return rename


def _rename(result: ParseResult, rename: dict[str, str]) -> None:
    get = rename.get
    result.counters.relabel(port=lambda d, p: (get(d, d), p))
    result.gauges = [g if g.device not in rename else Gauge(rename[g.device], g.port, g.name, g.value, g.sub)
                     for g in result.gauges]
    result.ports = [p if p.device not in rename else replace(p, device=rename[p.device]) for p in result.ports]
    result.devices = [d if d.name not in rename else replace(d, name=rename[d.name]) for d in result.devices]
    result.clocks = {get(d, d): t for d, t in result.clocks.items()}
    if result.links is not None:
        result.links = [Link(get(ln.device, ln.device), ln.port, get(ln.peer_device, ln.peer_device), ln.peer_port)
                        for ln in result.links]

