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

import numpy as np

from fabricmon.collectors.base import BadValues, ParseError, ParseOptions
from fabricmon.collectors.ufm.names import add_readings, lookup, to_int
from fabricmon.core import boundedjson
from fabricmon.core.boundedjson import MAX_VALUES
from fabricmon.core.guid import norm_guid
from fabricmon.core.model import Counters, ParseResult, PortInfo, TargetSpec, series_key
from fabricmon.core.slicing import group_index

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


def csv_records(text: str, path: str, warnings: list[str]) -> tuple[list[str], list[list[str]]]:
    """The header and the records of a CSV body that have as many fields as the header."""
    header: list[str] | None = None
    records: list[list[str]] = []
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
        records.append(rec)
    if header is None:
        warnings.append(f"{path}: empty CSV body")
    if bad:
        warnings.append(f"{path}: {bad} CSV row(s) with the wrong number of columns skipped")
    return header or [], records


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
    """Prometheus text exposition: one Row per distinct identity label set (a label text is
    read once however many of a port's metrics repeat it, a timestamp text once per scrape)."""
    rows: dict[tuple[tuple[str, str], ...], Row] = {}
    by_text: dict[str | None, Row] = {}
    times: dict[str, float | None] = {}
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
        row = by_text.get(label_text)
        if row is None:
            labels = dict(_PROM_LABEL.findall(label_text or ""))
            ident = {k: _unescape(v) for k, v in labels.items() if k in _IDENT}
            key = tuple(sorted(ident.items()))
            row = rows.get(key)
            if row is None:
                row = rows[key] = Row(ident)
            by_text[label_text] = row
        row.values.append((name, value))
        good += 1
        if ts is not None:
            t = times.get(ts, False)
            if t is False:
                t = times[ts] = to_seconds(int(ts))
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
    node_names = {norm_guid(k): v for k, v in (opts.node_names or {}).items()}
    result = ParseResult()
    # each response's rows (CSV: its header and records)
    counted = [0]  # text values of the poll so far (bounded by MAX_VALUES)
    frames = [f for resp in payload["responses"] if (f := _response_frame(resp, opts.format, result.warnings, counted)) is not None]
    bad = BadValues()
    found = _csv_in_bulk(frames, node_names, result, bad) if all(isinstance(f, _Csv) for f in frames) else None
    if found is None:
        bad = BadValues()
        found = _rows_one_by_one(frames, node_names, result, bad)
    no_port, by_guid = found
    result.warnings.extend(bad.warnings())
    if no_port:
        result.warnings.append(f"{no_port} row(s) with counters but without node/port GUID and port number skipped")
    if by_guid:
        result.warnings.append(f"{len(by_guid)} node(s) without a node description or node_names entry: labelled by GUID")
    return result


def _response_frame(resp: Any, forced: BodyFormat, warnings: list[str], counted: list[int]) -> _Csv | list[Row] | None:
    """One recorded response: a CSV body's header and records, or the rows of the other
    formats; None for a failed call or an empty body (with a warning). A text body is counted
    (``counted``: the poll's values so far) against MAX_VALUES of the poll before it is read: a
    10^6-port body took 4.6 GB."""
    if not isinstance(resp, dict):
        raise ParseError("ufm-telemetry payload: each response must be an object")
    path = str(resp.get("path") or "")
    status = to_int(resp.get("status"))
    if status is None or not 200 <= status < 300:
        warnings.append(f"{path}: HTTP {resp.get('status')}, ignored")
        return None
    body = resp.get("body")
    if body is None:
        warnings.append(f"{path}: empty body")
        return None
    fmt = detect_format(path, body, forced)
    if isinstance(body, str):
        counted[0] += body.count(",") if fmt == "csv" else body.count("\n")
        if counted[0] > MAX_VALUES:
            raise ParseError(f"{path}: the poll holds about {counted[0]:,} values, more than the limit of {MAX_VALUES:,} "
                             "(about 200,000 ports): shard the endpoint (num_shards)")
    if fmt == "json":
        return list(json_rows(body, path))
    if not isinstance(body, str):
        raise ParseError(f"{path}: {'CSV' if fmt == 'csv' else 'Prometheus text'} expected, got JSON")
    return _Csv(*csv_records(body, path, warnings), body.isascii()) if fmt == "csv" else list(prom_rows(body, path, warnings))


@dataclass(slots=True)
class _Csv:
    header: list[str]
    records: list[list[str]]
    ascii: bool


def _rows_one_by_one(frames: list[_Csv | list[Row]], node_names: dict[str, str], result: ParseResult,
                     bad: BadValues) -> tuple[int, set[str]]:
    """Every row's counters into ``result``, row by row: the first reading of a series wins;
    values that are numbers but not counter values noted in ``bad``."""
    seen: set[tuple[str, str, str]] = set()
    ports: dict[tuple[str, str], PortInfo] = {}
    by_guid: set[str] = set()
    no_port = 0
    for frame in frames:
        rows = (_row_from_items(zip(frame.header, rec, strict=True)) for rec in frame.records) \
            if isinstance(frame, _Csv) else frame
        for row in rows:
            where = _locate(row, node_names)
            if where is None:
                # device-level metrics (dev_temperature) have no port: only miss rows with counters
                no_port += any(lookup(name) is not None for name, _ in row.values)
                continue
            device, port, named_by_guid = where
            if named_by_guid:
                by_guid.add(device)
            if (device, port) not in ports:
                ports[(device, port)] = _port_info(row, device, port)
            if row.ts is not None and row.ts > result.clocks.get(device, 0.0):
                result.clocks[device] = row.ts
            add_readings(result.counters, seen, bad, device, port, row.values)
    result.ports = list(ports.values())
    return no_port, by_guid


def _port_info(row: Row, device: str, port: str) -> PortInfo:
    return PortInfo(device=device, port=port, guid=norm_guid(_first(row.ident, PORT_GUID_KEYS)), label=_first(row.ident, LABEL_KEYS))


def _csv_in_bulk(frames: list[_Csv], node_names: dict[str, str], result: ParseResult,
                 bad: BadValues) -> tuple[int, set[str]] | None:
    """CSV bodies read column by column: each column's counter looked up once, its numbers
    converted in numpy (one Python step per row, for its identity; none per value but the
    few that are not plain decimals). The same result as :func:`_rows_one_by_one` when every
    body is ASCII, no two columns name one counter (or one header name twice) and no port has
    two rows: otherwise None, and nothing was changed."""
    plans = []
    for f in frames:
        if not f.ascii or len(set(f.header)) != len(f.header):
            return None
        value_cols = [(j, hit) for j, name in enumerate(f.header)
                      if name not in TIME_KEYS and name not in _IDENT and (hit := lookup(name)) is not None]
        if len({hit[0] for _, hit in value_cols}) != len(value_cols):
            return None
        plans.append(value_cols)
    ports: dict[tuple[str, str], PortInfo] = {}
    by_guid: set[str] = set()
    no_port = 0
    clocks: dict[str, float] = {}
    blocks = []  # per frame: (its rows with a port, their groups, value columns)
    for f, value_cols in zip(frames, plans, strict=True):
        ident_cols = [(j, name) for j, name in enumerate(f.header) if name in _IDENT]
        time_col = next((j for j, name in enumerate(f.header) if name in TIME_KEYS), None)
        kept: list[int] = []
        for i, rec in enumerate(f.records):
            row = Row({name: rec[j].strip() for j, name in ident_cols},
                      ts=to_seconds(rec[time_col]) if time_col is not None else None)
            where = _locate(row, node_names)
            if where is None:
                no_port += bool(value_cols)
                continue
            device, port, named_by_guid = where
            if (device, port) in ports:
                return None  # a port with two rows: first writer wins, row by row
            if named_by_guid:
                by_guid.add(device)
            ports[(device, port)] = _port_info(row, device, port)
            if row.ts is not None and row.ts > clocks.get(device, 0.0):
                clocks[device] = row.ts
            kept.append(i)
        blocks.append((f, kept, value_cols))
    counters = _bulk_counters(blocks, list(ports), bad)
    result.counters = counters
    result.ports = list(ports.values())
    result.clocks.update(clocks)
    return no_port, by_guid


def _bulk_counters(blocks: list[tuple[_Csv, list[int], list[tuple[int, tuple[str, float]]]]],
                   ports: list[tuple[str, str]], bad: BadValues) -> Counters:
    """The counters of the kept rows, in row order then column order: a row's port is the
    next of ``ports``; a row without any valid number adds no port group (as ``add`` would).
    Cells that are numbers but not counter values are noted in ``bad``."""
    values_all, valid_all, cols_all = [], [], []
    first = 0  # the kept rows' first port in ``ports``
    for f, kept, value_cols in blocks:
        first += len(kept)
        if not kept or not value_cols:
            values_all.append(np.zeros((len(kept), 0), np.uint64))
            valid_all.append(np.zeros((len(kept), 0), bool))
            cols_all.append(value_cols)
            continue
        records = [f.records[i] for i in kept]
        columns = list(zip(*records, strict=True))
        vals = np.zeros((len(kept), len(value_cols)), np.uint64)
        ok = np.zeros((len(kept), len(value_cols)), bool)
        row0 = first - len(kept)
        for c, (j, _hit) in enumerate(value_cols):
            vals[:, c], ok[:, c] = _numbers(columns[j])
            for i in np.flatnonzero(~ok[:, c]).tolist():
                cell = columns[j][i]
                if cell.strip():  # an empty cell is an absent reading
                    device, port = ports[row0 + i]
                    bad.note(f.header[j], f"{device} port {port}", cell)
        values_all.append(vals)
        valid_all.append(ok)
        cols_all.append(value_cols)
    out_ports: list[tuple[str, str]] = []
    port_of, keys, values, scales = [], [], [], []
    at = 0
    for vals, ok, value_cols in zip(values_all, valid_all, cols_all, strict=True):
        col_keys = [series_key(hit[0]) for _, hit in value_cols]
        col_scale = np.array([hit[1] for _, hit in value_cols], np.float64)
        per_row = ok.sum(axis=1)
        for n in per_row.tolist():
            if n:
                out_ports.append(ports[at])
            at += 1
        nonempty = per_row > 0
        base = len(out_ports) - int(nonempty.sum())
        port_of.append(base + group_index(per_row[nonempty]))
        r, c = np.nonzero(ok)
        keys.extend(map(col_keys.__getitem__, c.tolist()))
        values.append(vals[r, c])
        scales.append(col_scale[c])
    n = sum(len(v) for v in values)
    cat = (lambda xs, dtype: np.concatenate(xs).astype(dtype) if xs else np.zeros(0, dtype))  # noqa: E731
    return Counters.bulk(out_ports, cat(port_of, np.int32), keys, cat(values, np.uint64), np.full(n, 64, np.int16),
                         np.zeros(n, bool), cat(scales, np.float64), tuple(dict.fromkeys(keys)))


def _numbers(cells: tuple[str, ...]) -> tuple[np.ndarray, np.ndarray]:
    """A column's cells as :func:`to_int` reads them: (uint64 values, valid). Plain decimals of
    up to 19 digits are converted in numpy, the rest one by one."""
    a = np.array(cells, dtype="S") if cells else np.zeros(0, "S1")
    plain = np.strings.isdigit(a) & (np.strings.str_len(a) <= 19)
    out = np.zeros(len(cells), np.uint64)
    out[plain] = a[plain].astype(np.uint64)
    ok = plain.copy()
    for i in np.flatnonzero(~plain).tolist():
        n = to_int(cells[i])
        if n is not None:
            out[i] = n
            ok[i] = True
    return out, ok


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
