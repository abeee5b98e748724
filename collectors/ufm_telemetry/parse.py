"""Pure parsing of UFM Telemetry endpoint responses: CSV, Prometheus text, or JSON rows.

Payload: ``{"responses": [{"method", "path", "status", "body"}, ...]}``, one response per
shard. Each row (CSV line, Prometheus label set, JSON object) is one port: switch ports
share a ``port_guid`` and differ by ``port_num``, so a port is keyed by (node, port_num).

Device label = the node description (CSV column ``node_description``, Prometheus label
``node_desc`` or ``node_description``), which UFM Telemetry reads from the fabric like
ibnetdiscover does, so it matches perfquery's device label. When absent (the default
Prometheus output carries only GUIDs) the ``node_names`` option (GUID -> name) is used,
else the node GUID as ``0x`` + 16 hex digits, with the port GUID in the port's info: the agent
joins such a device to the name UFM REST or ibnetdiscover gives that port GUID
(agent/identity.py), so this parser needs nothing but its payload.

The ``timestamp`` column (or the Prometheus sample timestamp) is the device clock; its unit
is detected from its magnitude (s, ms, us, ns), because UFM versions differ.
"""

from __future__ import annotations

import csv
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

from fabricmon.collectors.base import BadValues, ParseError, ParseOptions
from fabricmon.collectors.ufm.names import lookup, to_int
from fabricmon.core import boundedjson
from fabricmon.core.boundedjson import MAX_VALUES
from fabricmon.core.guid import norm_guid
from fabricmon.core.model import ParseResult, PortInfo, TargetSpec

NODE_GUID_KEYS = ("node_guid", "Node_GUID")
PORT_GUID_KEYS = ("port_guid",)
PORT_NUM_KEYS = ("port_num", "Port_Number", "port")
DESC_KEYS = ("node_description", "node_desc")
LABEL_KEYS = ("port_label",)
TIME_KEYS = ("timestamp",)

_PROM_LINE = re.compile(
    r"^([A-Za-z_:][A-Za-z0-9_:]*)"          # metric name
    r"(?:\{(.*)\})?"                         # labels
    r"[ \t]+(\S+)"                           # value
    r"(?:[ \t]+(-?\d+))?[ \t]*$"             # optional timestamp (ms)
)
_PROM_LABEL = re.compile(r'\s*([A-Za-z_][A-Za-z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*,?')
_PROM_START = re.compile(r"^[A-Za-z_:][A-Za-z0-9_:]*(\{|[ \t]+[-+0-9.NnIi])")


@dataclass(slots=True)
class Row:
    """One port's reading: identity fields, then (counter name, raw value) pairs."""

    ident: dict[str, str]
    values: list[tuple[str, Any]] = field(default_factory=list)
    ts: float | None = None


def to_seconds(ts: Any) -> float | None:
    """A device timestamp in seconds; the unit (s, ms, us, ns) is inferred from the magnitude."""
    try:
        t = float(ts)
    except (TypeError, ValueError, OverflowError):
        return None
    if math.isnan(t) or t <= 0 or math.isinf(t):
        return None
    for limit, div in ((1e17, 1e9), (1e14, 1e6), (1e11, 1e3)):
        if t >= limit:
            t /= div
            break
    return t if t < 1e11 else None


def detect_format(path: str, body: Any, forced: str) -> str:
    if forced in ("csv", "prometheus", "json"):
        return forced
    if not isinstance(body, str):
        return "json"
    bare = path.split("?", 1)[0]
    if "/csv/" in bare + "/":
        return "csv"
    if "/json/" in bare + "/":
        return "json"
    for line in body.splitlines():
        s = line.strip()
        if not s:
            continue
        if s.startswith("#") or _PROM_START.match(s):
            return "prometheus"
        if "," in s:
            return "csv"
        break
    raise ParseError(f"{path}: body is neither CSV nor Prometheus text: {body.strip()[:60]!r}")


def csv_rows(text: str, path: str, warnings: list[str]) -> Iterator[Row]:
    header: list[str] | None = None
    bad = 0
    for rec in _safe_csv(text, path):
        if not rec or all(not c.strip() for c in rec):
            continue  # the trailing empty row
        if header is None:
            header = [c.strip() for c in rec]
            if not any(k in header for k in PORT_NUM_KEYS) or not any(k in header for k in NODE_GUID_KEYS + PORT_GUID_KEYS):
                raise ParseError(f"{path}: CSV header has no port identity columns (node_guid/port_guid and port_num): {header[:6]}")
            continue
        if len(rec) != len(header):
            bad += 1  # a torn or malformed line
            continue
        yield _row_from_items(zip(header, rec, strict=True))
    if header is None:
        warnings.append(f"{path}: empty CSV body")
    if bad:
        warnings.append(f"{path}: {bad} CSV row(s) with the wrong number of columns skipped")


def _safe_csv(text: str, path: str) -> Iterator[list[str]]:
    reader = csv.reader(text.splitlines())
    while True:
        try:
            rec = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:
            raise ParseError(f"{path}: unreadable CSV at line {reader.line_num}: {exc}") from None
        yield rec


def json_rows(body: Any, path: str) -> Iterator[Row]:
    if isinstance(body, str):
        try:
            body = boundedjson.loads(body, what=f"{path}: body")
        except boundedjson.JsonRefused as exc:
            raise ParseError(str(exc)) from None
        except ValueError:
            raise ParseError(f"{path}: body is not JSON") from None
    if isinstance(body, dict):
        for key in ("values", "data", "ports"):
            if isinstance(body.get(key), list):
                body = body[key]
                break
    if not isinstance(body, list):
        raise ParseError(f"{path}: JSON body is not a list of port rows")
    for obj in body:
        if isinstance(obj, dict):
            yield _row_from_items((str(k), v) for k, v in obj.items())


_IDENT = frozenset(NODE_GUID_KEYS + PORT_GUID_KEYS + PORT_NUM_KEYS + DESC_KEYS + LABEL_KEYS)


def _row_from_items(items: Any) -> Row:
    row = Row({})
    for k, v in items:
        if k in TIME_KEYS:
            row.ts = to_seconds(v)
        elif k in _IDENT:
            row.ident[k] = "" if v is None else str(v).strip()
        else:
            row.values.append((k, v))
    return row


def prom_rows(text: str, path: str, warnings: list[str]) -> Iterator[Row]:
    """Prometheus text exposition: one Row per distinct identity label set."""
    rows: dict[tuple[tuple[str, str], ...], Row] = {}
    bad = good = 0
    for line in text.splitlines():
        s = line.strip()
        if not s or s.startswith("#"):
            continue
        m = _PROM_LINE.match(s)
        if not m:
            bad += 1
            continue
        name, label_text, value, ts = m.groups()
        labels = dict(_PROM_LABEL.findall(label_text or ""))
        ident = {k: _unescape(v) for k, v in labels.items() if k in _IDENT}
        key = tuple(sorted(ident.items()))
        row = rows.get(key)
        if row is None:
            row = rows[key] = Row(ident)
        row.values.append((name, value))
        good += 1
        if ts is not None:
            t = to_seconds(int(ts))
            if t is not None and (row.ts is None or t > row.ts):
                row.ts = t
    if bad and not good:
        raise ParseError(f"{path}: no valid Prometheus sample lines ({bad} unreadable)")
    if bad:
        warnings.append(f"{path}: {bad} unreadable Prometheus line(s) skipped")
    yield from rows.values()


def _unescape(v: str) -> str:
    return v.replace('\\"', '"').replace("\\n", "\n").replace("\\\\", "\\")


def _first(ident: dict[str, str], keys: tuple[str, ...]) -> str:
    for k in keys:
        if ident.get(k):
            return ident[k]
    return ""


BodyFormat = Literal["auto", "csv", "prometheus", "json"]


class UfmTelemetryParseOptions(ParseOptions):
    """What a UFM Telemetry parse reads from the target's options (``UfmTelemetryOptions`` has
    the same fields)."""

    format: BodyFormat = "auto"  # "auto": told apart per response (detect_format)
    node_names: dict[str, str] | None = None  # node GUID -> device label, when rows carry no description


def parse_payload(payload: dict[str, Any], spec: TargetSpec) -> ParseResult:
    opts = UfmTelemetryParseOptions.from_spec(spec)
    if not isinstance(payload, dict) or not isinstance(payload.get("responses"), list):
        raise ParseError("ufm-telemetry payload must be an object with a 'responses' list")
    out = _Rows({norm_guid(k): v for k, v in (opts.node_names or {}).items()})
    for resp in payload["responses"]:
        for row in _response_rows(resp, opts.format, out):
            out.add(row)
    return out.finish()


def _response_rows(resp: Any, forced: BodyFormat, out: _Rows) -> Iterator[Row]:
    """The rows of one recorded response (none for a failed call or an empty body, with a warning).
    A text body is counted against MAX_VALUES of the poll before it is read: a 10^6-port body took 4.6 GB."""
    warnings = out.result.warnings
    if not isinstance(resp, dict):
        raise ParseError("ufm-telemetry payload: each response must be an object")
    path = str(resp.get("path") or "")
    status = to_int(resp.get("status"))
    if status is None or not 200 <= status < 300:
        warnings.append(f"{path}: HTTP {resp.get('status')}, ignored")
        return iter(())
    body = resp.get("body")
    if body is None:
        warnings.append(f"{path}: empty body")
        return iter(())
    fmt = detect_format(path, body, forced)
    if isinstance(body, str):
        out.values += body.count(",") if fmt == "csv" else body.count("\n")
        if out.values > MAX_VALUES:
            raise ParseError(f"{path}: the poll holds about {out.values:,} values, more than the limit of {MAX_VALUES:,} "
                             "(about 200,000 ports): shard the endpoint (num_shards)")
    if fmt == "json":
        return json_rows(body, path)
    if not isinstance(body, str):
        raise ParseError(f"{path}: {'CSV' if fmt == 'csv' else 'Prometheus text'} expected, got JSON")
    return csv_rows(body, path, warnings) if fmt == "csv" else prom_rows(body, path, warnings)


@dataclass(slots=True)
class _Rows:
    """The parse result built row by row: the first reading of a series wins."""

    node_names: dict[str, str]
    result: ParseResult = field(default_factory=ParseResult)
    seen: set[tuple[str, str, str]] = field(default_factory=set)
    ports: dict[tuple[str, str], PortInfo] = field(default_factory=dict)
    by_guid: set[str] = field(default_factory=set)
    no_port: int = 0
    values: int = 0  # text values of the poll so far (bounded by MAX_VALUES)
    bad: BadValues = field(default_factory=BadValues)

    def add(self, row: Row) -> None:
        where = _locate(row, self.node_names)
        if where is None:
            # device-level metrics (dev_temperature) have no port: only miss rows with counters
            self.no_port += any(lookup(name) is not None for name, _ in row.values)
            return
        device, port, named_by_guid = where
        if named_by_guid:
            self.by_guid.add(device)
        if (device, port) not in self.ports:
            self.ports[(device, port)] = PortInfo(device=device, port=port, guid=norm_guid(_first(row.ident, PORT_GUID_KEYS)),
                                                  label=_first(row.ident, LABEL_KEYS))
        clocks = self.result.clocks
        if row.ts is not None and row.ts > clocks.get(device, 0.0):
            clocks[device] = row.ts
        for name, value in row.values:
            hit = lookup(name)
            if hit is None:
                continue
            n = to_int(value)
            if n is None:
                self.bad.note(name, f"{device} port {port}", value)
                continue
            counter, scale = hit
            if (device, port, counter) not in self.seen:
                self.seen.add((device, port, counter))
                self.result.counters.add(device, port, counter, n, scale=scale)

    def finish(self) -> ParseResult:
        result = self.result
        result.ports = list(self.ports.values())
        result.warnings.extend(self.bad.warnings())
        if self.no_port:
            result.warnings.append(f"{self.no_port} row(s) with counters but without node/port GUID and port number skipped")
        if self.by_guid:
            result.warnings.append(f"{len(self.by_guid)} node(s) without a node description or node_names entry: labelled by GUID")
        return result


def _locate(row: Row, node_names: dict[str, str]) -> tuple[str, str, bool] | None:
    """(device, port, named_by_guid) of a row, or None when it identifies no port."""
    num = to_int(_first(row.ident, PORT_NUM_KEYS))
    guid = norm_guid(_first(row.ident, NODE_GUID_KEYS)) or norm_guid(_first(row.ident, PORT_GUID_KEYS))
    if num is None or not guid:
        return None
    desc = _first(row.ident, DESC_KEYS)
    if desc:
        return desc, str(num), False
    if guid in node_names:
        return node_names[guid], str(num), False
    return guid, str(num), True
