"""Pure parsing of a UFM REST poll: ports, links, systems (+ an optional counters call).

Payload: ``{"responses": [{"method", "path", "status", "body"}, ...]}``; each response is
recognised by its path (``.../resources/ports``, ``.../resources/links``,
``.../resources/systems``, and the configured ``pm_counters_path``), so the URL prefix
(``/ufmRest`` or ``/ufmRestV3``) does not matter. Shapes differ across UFM versions
(6.10-6.19 vs 6.20+), so every field is read defensively: a list or ``{"data": [...]}``,
``number`` as int or string, ``active_width`` as ``4x`` or ``IB_4x``, ``active_speed`` null
on a down port.

Device naming (must equal perfquery's, which uses the IB NodeDescription from
ibnetdiscover): a port object's ``node_description`` holds the NodeDescription followed by
``:<port>`` ("mtlx-cai-ubuntu mlx5_0:1" for NodeDescription "mtlx-cai-ubuntu mlx5_0"), so
the trailing ``:<port number>`` (or ``:<dname>``) is removed (inferred from the samples in
Mellanox/ufm_sdk_3.0, not verified on hardware). ``system_name`` is *not*
used by default: for a managed switch UFM shortens it to the host name ("r-ufm-sw95", where
the NodeDescription is "MF0;r-ufm-sw95:MQM8700/U1"). Option ``device_name: system_name``
switches to it; a port with neither falls back to its ``0x`` GUID.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any, Literal

from fabricmon.collectors.base import BadValues, ParseError, ParseOptions
from fabricmon.collectors.infiniband import lane_gbps
from fabricmon.collectors.ufm.names import add_readings, to_int
from fabricmon.core.guid import norm_guid
from fabricmon.core.model import DeviceInfo, Gauge, Link, ParseResult, PortInfo, TargetSpec

_WIDTH = re.compile(r"^(?:IB_)?(\d{1,2})X$", re.IGNORECASE)
_PORT_NAME = re.compile(r"^(?:0x)?([0-9a-fA-F]{1,16})_(\d{1,4})$")
_KNOWN_ROWS = ("ports", "links", "systems")

# identity keys tried, in order, on a counters entry
_NAME_KEYS = ("port_name", "name", "port")
_GUID_KEYS = ("port_guid", "guid", "node_guid", "system_guid")
_NUM_KEYS = ("port_num", "port_number", "number", "port")


def classify(path: str, counters_path: str | None) -> str | None:
    """Which call a recorded response was: ports, links, systems, counters, or None."""
    bare = path.split("?", 1)[0].rstrip("/")
    if counters_path:
        want = counters_path.split("?", 1)[0].strip("/")
        if want and bare.endswith("/" + want):
            return "counters"
    for kind in _KNOWN_ROWS:
        if bare.endswith("/resources/" + kind):
            return kind
    return None


def rows_of(body: Any, what: str) -> list[dict[str, Any]]:
    """The list of objects in a body: a JSON list, or ``{"data": [...]}``; dict keyed by name accepted."""
    if isinstance(body, dict):
        for key in ("data", "result", "results", what):
            if isinstance(body.get(key), list):
                body = body[key]
                break
        else:
            if body and all(isinstance(v, dict) for v in body.values()):
                return [{"name": k, **v} for k, v in body.items()]
            raise ParseError(f"{what}: expected a JSON list of objects, got an object with keys {sorted(body)[:6]}")
    if not isinstance(body, list):
        raise ParseError(f"{what}: expected a JSON list of objects, got {type(body).__name__}")
    return [r for r in body if isinstance(r, dict)]


def _str(v: Any) -> str:
    if v is None or isinstance(v, (dict, list)):
        return ""
    return str(v).strip()


def port_number(obj: dict[str, Any]) -> str:
    """The IB port number as a string: ``number`` (int or string), else from ``<guid>_<num>``."""
    n = to_int(obj.get("number"))
    if n is not None:
        return str(n)
    m = _PORT_NAME.match(_str(obj.get("name")))
    return str(int(m.group(2))) if m else ""


def node_description(obj: dict[str, Any], port: str) -> str:
    """The IB NodeDescription from a port object's ``node_description`` minus a ``:<port>`` suffix."""
    desc = _str(obj.get("node_description"))
    if not desc:
        return ""
    head, sep, tail = desc.rpartition(":")
    if sep and head and tail.strip() in {port, _str(obj.get("dname"))}:
        return head.rstrip()
    return desc


def width_lanes(value: Any) -> int | None:
    m = _WIDTH.match(_str(value))
    return int(m.group(1)) if m else None


class _Index:
    """Port objects by ``<guid>_<num>`` and by GUID, with the device label each resolves to."""

    def __init__(self, ports: list[dict[str, Any]], naming: str) -> None:
        self.by_key: dict[tuple[str, str], tuple[str, dict[str, Any]]] = {}  # (guid, port) -> (device, obj)
        self.device_of_guid: dict[str, str] = {}
        self.device_of_system: dict[str, set[str]] = {}
        self.unnamed = 0
        for obj in ports:
            port = port_number(obj)
            guid = norm_guid(obj.get("guid"))
            if not guid:
                m = _PORT_NAME.match(_str(obj.get("name")))
                guid = norm_guid(m.group(1)) if m else ""
            if not port or not guid:
                continue
            device = self._device(obj, port, guid, naming)
            self.by_key[(guid, port)] = (device, obj)
            self.device_of_guid.setdefault(guid, device)
            sysid = norm_guid(obj.get("systemID") or obj.get("system_guid"))
            if sysid:
                self.device_of_system.setdefault(sysid, set()).add(device)

    def _device(self, obj: dict[str, Any], port: str, guid: str, naming: str) -> str:
        first, second = node_description(obj, port), _str(obj.get("system_name"))
        if naming == "system_name":
            first, second = second, first
        name = first or second
        if not name:
            self.unnamed += 1
            return guid
        return name

    def resolve(self, guid: Any, port: Any) -> tuple[str, str] | None:
        g = norm_guid(guid)
        n = to_int(port)
        if not g or n is None:
            return None
        hit = self.by_key.get((g, str(n)))
        if hit is not None:
            return hit[0], str(n)
        dev = self.device_of_guid.get(g)
        return (dev, str(n)) if dev else None


DeviceNaming = Literal["node_description", "system_name"]


class UfmParseOptions(ParseOptions):
    """What a UFM parse reads from the target's options (``UfmOptions`` has the same fields)."""

    pm_counters_path: str | None = None  # the counters call's path; None or "": no counters call
    device_name: DeviceNaming = "node_description"


def parse_payload(payload: dict[str, Any], spec: TargetSpec) -> ParseResult:
    opts = UfmParseOptions.from_spec(spec)
    if not isinstance(payload, dict) or not isinstance(payload.get("responses"), list):
        raise ParseError("ufm payload must be an object with a 'responses' list")
    naming = opts.device_name
    counters_path = opts.pm_counters_path or None
    bodies: dict[str, Any] = {}
    result = ParseResult()
    for resp in payload["responses"]:
        if not isinstance(resp, dict):
            raise ParseError("ufm payload: each response must be an object")
        path = _str(resp.get("path"))
        kind = classify(path, counters_path)
        if kind is None:
            continue
        status = to_int(resp.get("status"))
        if status is None or not 200 <= status < 300:
            result.warnings.append(f"{path}: HTTP {resp.get('status')}, ignored")
            continue
        bodies[kind] = resp.get("body")
    if "ports" not in bodies:
        raise ParseError("ufm payload has no successful resources/ports response")

    ports = rows_of(bodies["ports"], "resources/ports")
    idx = _Index(ports, naming)
    if idx.unnamed:
        result.warnings.append(f"{idx.unnamed} port(s) without node_description or system_name: labelled by GUID")
    _ports_and_gauges(idx, result)
    if "links" in bodies:
        result.links = _links(rows_of(bodies["links"], "resources/links"), idx, result)
    if "systems" in bodies:
        result.devices = _systems(rows_of(bodies["systems"], "resources/systems"), idx)
    if "counters" in bodies:
        _counters(bodies["counters"], idx, result)
    return result


def _ports_and_gauges(idx: _Index, result: ParseResult) -> None:
    for (guid, port), (device, obj) in idx.by_key.items():
        dname = _str(obj.get("dname"))
        lid = to_int(obj.get("lid"))
        result.ports.append(PortInfo(
            device=device, port=port, guid=guid, lid="" if lid is None else str(lid),
            label=dname if dname and dname != port else "",
        ))
        up = link_up(obj)
        if up is not None:
            result.gauges.append(Gauge(device, port, "link_up", float(up)))
        width = width_lanes(obj.get("active_width"))
        if width is not None:
            result.gauges.append(Gauge(device, port, "link_width_lanes", float(width)))
        rate = lane_gbps(obj.get("active_speed"))
        if rate is not None and width is not None and up:
            result.gauges.append(Gauge(device, port, "link_speed_bytes", rate * width * 1e9 / 8))
        result.gauges.extend(rated_gauges(device, port, obj))


def _names(value: Any) -> list[str]:
    """A list of width or speed names: a JSON list, or one string of names (``"1x, 4x"``)."""
    if isinstance(value, list):
        return [_str(v) for v in value if _str(v)]
    return [x for x in re.split(r"[\s,;/|]+", _str(value)) if x]


def _best(supported: Any, enabled: Any, measure: Any) -> float | None:
    """The highest value both lists allow (one list when the other is empty), by ``measure``."""
    sup = {v for v in map(measure, _names(supported)) if v is not None}
    ena = {v for v in map(measure, _names(enabled)) if v is not None}
    both = sup & ena if sup and ena else sup or ena
    return max(both) if both else None


def rated_gauges(device: str, port: str, obj: dict[str, Any]) -> list[Gauge]:
    """What the port can train to: ``link_width_rated_lanes`` and ``link_speed_rated_bytes`` from
    ``supported_width``/``enabled_width`` and ``supported_speed``/``enabled_speed`` (field names
    verified: UFM Enterprise REST API Guide v6.22.1, "Ports REST API", whose down-port example has
    them as empty lists; that an active port lists width and speed names spelled like
    ``active_width``/``active_speed`` is inferred). Both lists given: the highest in both (a port
    trains to what it supports and has enabled); empty lists: nothing."""
    out = []
    width = _best(obj.get("supported_width"), obj.get("enabled_width"), width_lanes)
    if width is not None:
        out.append(Gauge(device, port, "link_width_rated_lanes", float(width)))
        lane = _best(obj.get("supported_speed"), obj.get("enabled_speed"), lane_gbps)
        if lane is not None:
            out.append(Gauge(device, port, "link_speed_rated_bytes", lane * width * 1e9 / 8))
    return out


def link_up(obj: dict[str, Any]) -> int | None:
    """1 when the port carries traffic: logical Active; with logical N/A, physical Link Up."""
    logical = _str(obj.get("logical_state")).lower()
    physical = _str(obj.get("physical_state")).lower()
    if logical == "active":
        return 1
    if logical in ("down", "init", "initialize", "armed", "inactive"):
        return 0
    if physical:
        return 1 if physical.replace(" ", "") == "linkup" else 0
    return None


def _links(rows: list[dict[str, Any]], idx: _Index, result: ParseResult) -> list[Link]:
    links: set[Link] = set()
    unresolved = 0
    for row in rows:
        a = _endpoint(row, "source", idx)
        b = _endpoint(row, "destination", idx)
        if a is None or b is None:
            unresolved += 1
            continue
        links.add(Link(a[0], a[1], b[0], b[1]))
        links.add(Link(b[0], b[1], a[0], a[1]))
    if unresolved:
        result.warnings.append(f"{unresolved} link(s) whose ends are not among the ports: skipped")
    return sorted(links, key=lambda ln: (ln.device, ln.port, ln.peer_device, ln.peer_port))


def _endpoint(row: dict[str, Any], side: str, idx: _Index) -> tuple[str, str] | None:
    hit = idx.resolve(row.get(f"{side}_guid"), row.get(f"{side}_port"))
    if hit is None:
        # Fallback: the link name "<guid>_<port>:<guid>_<port>"
        parts = _str(row.get("name")).split(":")
        if len(parts) == 2:
            m = _PORT_NAME.match(parts[0 if side == "source" else 1])
            if m:
                hit = idx.resolve(m.group(1), m.group(2))
    return hit


_KIND = {"switch": "switch", "host": "ca", "computer": "ca", "server": "ca", "gateway": "router", "router": "router"}


def _systems(rows: list[dict[str, Any]], idx: _Index) -> list[DeviceInfo]:
    out: dict[str, DeviceInfo] = {}
    for row in rows:
        sysguid = norm_guid(row.get("system_guid") or row.get("guid") or row.get("name"))
        names = set(idx.device_of_system.get(sysguid, ()))
        member_ports = row.get("ports")
        for pname in member_ports if isinstance(member_ports, list) else ():
            m = _PORT_NAME.match(_str(pname))
            if m:
                hit = idx.resolve(m.group(1), m.group(2))
                if hit:
                    names.add(hit[0])
        if not names and sysguid in idx.device_of_guid:
            names.add(idx.device_of_guid[sysguid])
        if not names:
            continue  # a system with no port in this poll carries no samples to describe
        kind = _KIND.get(_str(row.get("type")).lower(), "ca" if _str(row.get("type")) else "switch")
        for name in sorted(names):
            out[name] = DeviceInfo(
                name=name, kind=kind, guid=sysguid,
                description=_str(row.get("description")) or _str(row.get("system_name")),
                model=_str(row.get("model")),
            )
    return [out[k] for k in sorted(out)]


def _counters(body: Any, idx: _Index, result: ParseResult) -> None:
    """Counters from the configured counters call, into ``result.counters``. Shape unverified
    (UFM does not publish it): see README (a list of per-port objects)."""
    try:
        rows = rows_of(body, "counters")
    except ParseError as exc:
        result.warnings.append(f"counters response not understood: {exc}")
        return
    seen: set[tuple[str, str, str]] = set()  # first reading of a series wins
    unmatched = 0
    bad = BadValues()
    for row in rows:
        where = _counter_row_port(row, idx)
        if where is None:
            unmatched += 1
            continue
        device, port = where
        add_readings(result.counters, seen, bad, device, port, _counter_items(row))
    result.warnings.extend(bad.warnings())
    if unmatched:
        result.warnings.append(f"{unmatched} counters entr(y/ies) not matched to a port: skipped")


def _counter_row_port(row: dict[str, Any], idx: _Index) -> tuple[str, str] | None:
    for key in _NAME_KEYS:
        m = _PORT_NAME.match(_str(row.get(key)))
        if m:
            hit = idx.resolve(m.group(1), m.group(2))
            if hit:
                return hit
    for gkey in _GUID_KEYS:
        if not norm_guid(row.get(gkey)):
            continue
        for nkey in _NUM_KEYS:
            if to_int(row.get(nkey)) is not None:
                hit = idx.resolve(row.get(gkey), row.get(nkey))
                if hit:
                    return hit
    return None


def _counter_items(row: dict[str, Any]) -> Iterable[tuple[str, Any]]:
    for k, v in row.items():
        if isinstance(v, dict) and k in ("counters", "pm_counters", "values"):
            yield from ((str(k2), v2) for k2, v2 in v.items())
        else:
            yield str(k), v
