"""snmp payload -> ParseResult. Pure: no I/O beyond reading the profile files once and
logging the profile choice and a name collision once per target (:class:`SnmpState` holds what
was last logged); the result depends on the payload alone.

The payload is ``{"snmprec": TEXT}`` (recording-format.md). What is read here:

- system group: sysUpTime (TimeTicks, 1/100 s) -> ``clocks[target]``, so rates use the
  device's clock; sysObjectID / sysDescr select the vendor profile;
- IF-MIB ifName (else ifDescr, else ``ifIndex<N>``) -> the ``port`` label of every sample,
  unique per device even when an agent reports one name twice (``interfaces.py``);
- the base profile ``if-mib`` and the selected vendor profile -> samples and gauges;
- LLDP-MIB remote table -> ``links`` (None when the payload has no LLDP rows at all), local
  ports through BRIDGE-MIB dot1dBasePortIfIndex where the LLDP port number is a bridge port;
- what chose the vendor profile -> ``target_info`` (``fabricmon_target_info``).
"""

from __future__ import annotations

import bisect
import logging
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

from pydantic import Field

from fabricmon.collectors.base import ParseError, ParseOptions, ResultBuilder
from fabricmon.collectors.snmp import interfaces
from fabricmon.collectors.snmp import profiles as prof
from fabricmon.collectors.snmp.layout import GaugeSource, SnmpLayout
from fabricmon.collectors.snmp.snmprec import (
    COUNTER32,
    COUNTER64,
    EXCEPTION_TAGS,
    GAUGE32,
    INTEGER,
    NUMERIC_TAGS,
    TIMETICKS,
    Oid,
    Value,
    Varbinds,
    parse_snmprec,
)
from fabricmon.core.model import DeviceInfo, Link, ParseResult, PortInfo, TargetSpec
from fabricmon.core.vocabulary import COUNTERS, GAUGES

log = logging.getLogger(__name__)

SYS_DESCR: Oid = (1, 3, 6, 1, 2, 1, 1, 1, 0)
SYS_OBJECT_ID: Oid = (1, 3, 6, 1, 2, 1, 1, 2, 0)
SYS_UPTIME: Oid = (1, 3, 6, 1, 2, 1, 1, 3, 0)
SCALARS: tuple[Oid, ...] = (SYS_DESCR, SYS_OBJECT_ID, SYS_UPTIME)
IF_DESCR: Oid = (1, 3, 6, 1, 2, 1, 2, 2, 1, 2)
IF_NAME: Oid = (1, 3, 6, 1, 2, 1, 31, 1, 1, 1, 1)
IF_ALIAS: Oid = (1, 3, 6, 1, 2, 1, 31, 1, 1, 1, 18)
IF_ADMIN_STATUS: Oid = (1, 3, 6, 1, 2, 1, 2, 2, 1, 7)  # picks which of two same-named ifIndexes keeps the name
DOT1D_BASE_PORT_IFINDEX: Oid = (1, 3, 6, 1, 2, 1, 17, 1, 4, 1, 2)  # BRIDGE-MIB: LLDP port number -> ifIndex
LLDP_ROOT: Oid = (1, 0, 8802, 1, 1, 2, 1)
LLDP_LOC_PORT: Oid = (1, 0, 8802, 1, 1, 2, 1, 3, 7, 1)  # index lldpLocPortNum; .3 PortId, .4 PortDesc
LLDP_REM: Oid = (1, 0, 8802, 1, 1, 2, 1, 4, 1, 1)  # index TimeMark, LocalPortNum, RemIndex
REM_CHASSIS, REM_PORT_SUBTYPE, REM_PORT_ID, REM_PORT_DESC, REM_SYS_NAME = 5, 6, 7, 8, 9
# Subtrees every poll walks, whatever the profile: port names and the LLDP neighbours.
STRUCTURE_WALKS: tuple[Oid, ...] = (
    IF_NAME, IF_DESCR, IF_ALIAS, IF_ADMIN_STATUS, DOT1D_BASE_PORT_IFINDEX,
    (*LLDP_LOC_PORT, 3), (*LLDP_LOC_PORT, 4),
    *((*LLDP_REM, c) for c in (REM_CHASSIS, REM_PORT_SUBTYPE, REM_PORT_ID, REM_PORT_DESC, REM_SYS_NAME)),
)


def text(value: Value) -> str:
    """An OCTET STRING as display text (DisplayString is ASCII/UTF-8; stray bytes kept visible)."""
    if isinstance(value, bytes):
        return value.decode("utf-8", "backslashreplace").strip("\x00").strip()
    return "" if value is None else str(value).strip()


def _mac_or_text(value: Value) -> str:
    """LLDP chassis/port ids: printable text as is, 6 raw bytes as a MAC, else hex."""
    if isinstance(value, bytes):
        try:
            decoded = value.decode("utf-8")
            if decoded and decoded.isprintable():
                return decoded.strip()
        except UnicodeDecodeError:
            pass
        if len(value) == 6:
            return ":".join(f"{b:02x}" for b in value)
        return value.hex()
    return text(value)


class _Index:
    """Sorted OIDs for fast subtree scans (a poll can carry tens of thousands of varbinds)."""

    def __init__(self, vb: Varbinds) -> None:
        self.vb = vb
        # noSuchObject & co. are an agent saying "no value": no row for any table
        self.oids = sorted(oid for oid, (tag, _value) in vb.table.items() if tag not in EXCEPTION_TAGS)

    def subtree(self, prefix: Oid) -> Iterator[tuple[Oid, str, Value]]:
        n = len(prefix)
        i = bisect.bisect_left(self.oids, prefix)
        while i < len(self.oids) and self.oids[i][:n] == prefix:
            oid = self.oids[i]
            tag, value = self.vb.table[oid]
            yield oid[n:], tag, value
            i += 1


def _int_column(ix: _Index, column: Oid) -> dict[int, int]:
    return {rest[0]: value for rest, _tag, value in ix.subtree(column) if len(rest) == 1 and isinstance(value, int)}


def port_names(ix: _Index) -> interfaces.PortNames:
    """Unique port labels: ifName, else ifDescr; same-named ifIndexes as in interfaces.py."""
    names: dict[int, str] = {}
    for column in (IF_DESCR, IF_NAME):  # ifName overrides ifDescr
        for rest, _tag, value in ix.subtree(column):
            if len(rest) == 1 and text(value):
                names[rest[0]] = text(value)
    bridge_ports = set(_int_column(ix, DOT1D_BASE_PORT_IFINDEX).values())
    return interfaces.port_names(names, _int_column(ix, IF_ADMIN_STATUS), bridge_ports)


def _decode_index(rest: Oid, parts: tuple[prof.IndexPart, ...]) -> dict[str, Any] | None:
    """Split a row index into role values; None when the row is not of this table's shape."""
    labels: dict[str, Any] = {}
    pos = 0
    for part in parts:
        if part.kind == "implied":
            pos = len(rest)
            continue
        if part.kind == "string":
            if pos >= len(rest) or pos + 1 + rest[pos] > len(rest):
                return None
            pos += 1 + rest[pos]
            continue
        if pos >= len(rest):
            return None
        raw = rest[pos]
        pos += 1
        if part.values is not None and raw not in part.values:
            return None
        if (part.lo is not None and raw < part.lo) or (part.hi is not None and raw > part.hi):
            return None
        if part.role in ("priority", "queue", "pg") and raw + part.offset < 0:
            return None  # a 1-based numbering (offset -1) has no class for 0
        if part.role == "ifIndex":
            labels["ifIndex"] = raw
        elif part.role == "priority":
            labels["priority"] = raw + part.offset
        elif part.role == "queue":
            labels["queue"] = part.fmt.format(raw + part.offset)
        elif part.role == "pg":
            labels["pg"] = raw + part.offset
        elif part.role == "dscp":
            labels["dscp"] = raw
        elif part.role == "selector":
            labels["selector"] = raw
    return labels if pos == len(rest) else None


class _Emitter(ResultBuilder):
    """Collects samples and gauges, first writer wins per (port, name, labels); with
    ``lines`` (the payload's OID -> line), also where each came from, for a layout."""

    def __init__(self, device: str, names: interfaces.PortNames, result: ParseResult, lines: dict[Oid, int] | None) -> None:
        super().__init__(device, result)
        self.names = names
        self.problems: dict[str, int] = {}
        self.lines = lines
        self.counter_lines: list[int] = []
        self.gauge_sources: list[tuple[int, GaugeSource]] = []
        self.ignored: list[tuple[int, frozenset[int]]] = []  # (counter's place, its column's ignored numbers)
        self.read: dict[int, bool] = {}  # lines the profile looked at -> their value decides nothing

    def _note(self, what: str) -> None:
        self.problems[what] = self.problems.get(what, 0) + 1

    def table(self, profile: prof.Profile, table: prof.Table, ix: _Index) -> None:
        lines = self.lines
        for number, cols in table.column_groups():
            column = (*table.entry, number)
            for rest, tag, value in ix.subtree(column):
                labels = _decode_index(rest, table.index)
                if labels is None:
                    continue
                col = cols.get(labels.pop("selector", None))
                if col is not None:  # None: a counter id the profile does not read
                    line = lines.get((*column, *rest), -1) if lines is not None else -1
                    self._row(profile, table, col, labels, tag, value, line)

    def _row(self, profile: prof.Profile, table: prof.Table, col: prof.Column, labels: dict[str, Any],
             tag: str, value: Value, line: int = -1) -> None:
        defn = COUNTERS[col.name] if col.kind == "counter" else GAUGES[col.name]
        labels.update(col.fixed)
        port = self.names.label(labels["ifIndex"])
        sub = tuple(labels[name] for name in defn.labels)
        if self.has(port, col.name, sub) if col.kind == "counter" else self.has_gauge(port, col.name, sub):
            if not col.fallback:
                self._note(f"{self._where(profile, table, col)}: duplicate value for a key already set, ignored")
            self.read.setdefault(line, True)  # taken before: any valid number gives the same result
            return
        self.read[line] = False
        if tag not in NUMERIC_TAGS or not isinstance(value, int):
            self._note(f"{self._where(profile, table, col)}: non-numeric value of type {tag}, ignored")
            return
        if value in col.ignore:
            return
        if col.kind == "counter":
            if self._counter(port, col, sub, tag, value):
                if col.ignore:
                    self.ignored.append((len(self.counter_lines), col.ignore))
                self.counter_lines.append(line)
        elif self._gauge(port, col, sub, value):
            self.gauge_sources.append((line, GaugeSource(port, col.name, sub, dict(col.value_map) if col.value_map is not None
                                                         else None, col.default, col.scale)))

    @staticmethod
    def _where(profile: prof.Profile, table: prof.Table, col: prof.Column) -> str:
        sel = f" select {col.select}" if col.select is not None else ""
        return f"{profile.name}/{table.name} column {col.number}{sel} ({col.name})"

    def _counter(self, port: str, col: prof.Column, sub: tuple[Any, ...], tag: str, value: int) -> bool:
        bits = 64 if tag == COUNTER64 else 32
        if tag == INTEGER:  # an Integer32 "count" wraps through negative values
            value &= 0xFFFFFFFF
        return self.sample(port, col.name, value, sub, bits=bits, scale=col.scale)

    def _gauge(self, port: str, col: prof.Column, sub: tuple[Any, ...], value: int) -> bool:
        reading: float | None = float(value)
        if col.value_map is not None:
            reading = dict(col.value_map).get(value, col.default)
        return reading is not None and self.gauge(port, col.name, reading * col.scale, sub)


def _lldp_local_texts(ix: _Index) -> dict[int, list[str]]:
    """lldpLocPortNum -> its lldpLocPortId and lldpLocPortDesc texts, in that order."""
    local: dict[int, list[str]] = {}
    for column in (3, 4):
        for rest, _tag, value in ix.subtree((*LLDP_LOC_PORT, column)):
            if len(rest) == 1 and text(value):
                local.setdefault(rest[0], []).append(text(value))
    return local


def lldp_links(ix: _Index, device: str, names: interfaces.PortNames) -> list[Link] | None:
    if next(ix.subtree(LLDP_ROOT), None) is None:
        return None
    local = _lldp_local_texts(ix)
    bridge = _int_column(ix, DOT1D_BASE_PORT_IFINDEX)
    rows: dict[tuple[int, ...], dict[int, Value]] = {}
    for column in (REM_CHASSIS, REM_PORT_SUBTYPE, REM_PORT_ID, REM_PORT_DESC, REM_SYS_NAME):
        for rest, _tag, value in ix.subtree((*LLDP_REM, column)):
            if len(rest) == 3:
                rows.setdefault(rest, {})[column] = value
    links: set[Link] = set()
    for (_mark, local_num, _rem), row in rows.items():
        peer_device = text(row.get(REM_SYS_NAME)) or _mac_or_text(row.get(REM_CHASSIS))
        subtype = row.get(REM_PORT_SUBTYPE)
        port_id = _mac_or_text(row.get(REM_PORT_ID))
        port_desc = text(row.get(REM_PORT_DESC))
        # interfaceName(5) and local(7) ids are port names; for a MAC (3), network address (4)
        # or alias (1) id the description is the better name when the peer sent one.
        peer_port = port_id if subtype in (5, 7) else (port_desc or port_id)
        if not peer_device or not peer_port:
            continue
        port = interfaces.lldp_local_port(local_num, local.get(local_num, []), bridge, names)
        links.add(Link(device=device, port=port, peer_device=peer_device, peer_port=peer_port))
    return sorted(links, key=lambda ln: (ln.port, ln.peer_device, ln.peer_port))


class SnmpParseOptions(ParseOptions):
    """What an SNMP parse reads from the target's options (``SnmpOptions`` has the same fields).
    ``profile_dirs`` too: a user profile is needed to read the payload again on replay."""

    profile: str | None = None  # vendor profile name; default: chosen by sysObjectID/sysDescr
    profile_dirs: list[str] = Field(default_factory=list)


@dataclass(frozen=True, slots=True)
class SnmpState:
    """The messages last logged for a target (profile choice, name collision), so a fact that
    holds on every poll is logged once, and again only when it changes; and the layout of the
    last payload (:class:`SnmpLayout`), so the next one with the same lines is read in bulk.
    Nothing in it changes a parse result."""

    profile: str = ""
    name_collision: str = ""
    layout: SnmpLayout | None = None


def _log_once(last: str, level: int, message: str) -> str:
    """Log ``message`` unless it is ``last`` (the one logged before); returns it."""
    if message != last:
        log.log(level, "%s", message)
    return message


def parse_payload(payload: dict[str, Any], spec: TargetSpec, state: SnmpState) -> tuple[ParseResult, SnmpState]:
    """(ParseResult, next state); ``state`` only decides whether the profile choice and a name
    collision are logged (the result itself depends on the payload alone)."""
    opts = SnmpParseOptions.from_spec(spec)
    if not isinstance(payload, dict) or not isinstance(payload.get("snmprec"), str):
        raise ParseError("snmp payload must be an object with an 'snmprec' text")
    options = (spec.name, opts.profile, tuple(opts.profile_dirs))
    if state.layout is not None:
        fast = state.layout.read(payload["snmprec"], options)
        if fast is not None:
            return fast, state
    vb = parse_snmprec(payload["snmprec"])
    result = ParseResult(warnings=list(vb.warnings))
    ix = _Index(vb)
    device = spec.name

    try:
        profiles = prof.load_profiles(tuple(opts.profile_dirs))
    except prof.ProfileError as exc:
        raise ParseError(f"SNMP profiles: {exc}") from None

    oid_value = vb.get(SYS_OBJECT_ID)
    sys_oid: Oid | None = None
    if isinstance(oid_value, str):
        sys_oid = tuple(int(c) for c in oid_value.split("."))
    descr = text(vb.get(SYS_DESCR))
    try:
        vendor, match, warning = prof.select_profile(profiles, sys_oid, descr, opts.profile or None)
    except KeyError:
        raise ParseError(f"unknown SNMP profile {opts.profile!r}; known: {', '.join(sorted(profiles))}") from None
    if warning:
        result.warnings.append(warning)
    result.target_info.update(profile=vendor.name, match=match)
    logged_profile = _log_once(state.profile, logging.INFO, f"target {device}: SNMP profile {vendor.name} ({match})")
    logged_collision = state.name_collision

    uptime = vb.table.get(SYS_UPTIME)
    if uptime is not None and isinstance(uptime[1], int) and uptime[1] >= 0:
        result.clocks[device] = uptime[1] / 100.0

    names = port_names(ix)
    collision = names.warning()
    if collision:
        result.warnings.append(collision)
        logged_collision = _log_once(state.name_collision, logging.WARNING, f"target {device}: {collision}")
    emitter = _Emitter(device, names, result, vb.lines)
    for profile in (profiles[prof.BASE_PROFILE], vendor):
        for table in profile.tables:
            emitter.table(profile, table, ix)
    result.warnings.extend(f"{what} ({n} rows)" for what, n in sorted(emitter.problems.items()))

    result.devices.append(DeviceInfo(name=device, kind="switch", description=descr))
    aliases = {rest[0]: text(v) for rest, _t, v in ix.subtree(IF_ALIAS) if len(rest) == 1}
    for if_index, label in names.labels.items():
        result.ports.append(PortInfo(device=device, port=label, alias=aliases.get(if_index, "")))
    result.links = lldp_links(ix, device, names)
    layout = _layout(payload["snmprec"], options, device, vb, emitter, result)
    if (logged_profile, logged_collision, layout) != (state.profile, state.name_collision, state.layout):
        state = replace(state, profile=logged_profile, name_collision=logged_collision, layout=layout)
    return result, state


# Below these, a number of each type is valid (snmprec.py _RANGES); 0: any 64-bit number.
_LIMITS = {INTEGER: 1 << 31, COUNTER32: 1 << 32, GAUGE32: 1 << 32, TIMETICKS: 1 << 32, COUNTER64: 0}


def _layout(text: str, options: tuple[Any, ...], device: str, vb: Varbinds, emitter: _Emitter,
            result: ParseResult) -> SnmpLayout | None:
    """The payload's layout for the next poll, or None when it cannot be read in bulk.

    Every counter, gauge and the clock must come from a line of its own; lines under the
    walks that name ports and cables (and the system scalars but sysUpTime) decide by their
    value and stay fixed; the values read and a number the profile engine never looked at,
    or looked at only to find its key already taken, need only stay valid for their type."""
    lines = vb.lines
    if lines is None or -1 in emitter.counter_lines or any(line < 0 for line, _ in emitter.gauge_sources):
        return None
    clock = lines.get(SYS_UPTIME) if device in result.clocks else None
    structural = {line for oid, line in lines.items() if oid in SCALARS or any(oid[:len(w)] == w for w in STRUCTURE_WALKS)}
    used = {*emitter.counter_lines, *(line for line, _ in emitter.gauge_sources)}
    if used & structural or len(used) != len(emitter.counter_lines) + len(emitter.gauge_sources):
        return None
    checked = [(line, _LIMITS[tag]) for oid, (tag, _v) in vb.table.items()
               if tag in _LIMITS and ((line := lines[oid]) in used or line == clock
                                      or (line not in structural and emitter.read.get(line, True)))]
    return SnmpLayout.of(text, options, device, result, emitter.counter_lines, emitter.gauge_sources, clock,
                         emitter.ignored, checked)
