"""gnmi payload -> ParseResult: the poll's notifications, latest value per path, through the
profiles' rules onto the one vocabulary. Pure: the result depends on the payload and the state.

The payload is ``{"notifications": [...]}`` (recording-format.md, ``gnmi`` row). Read here:

- every update, joined with its notification's prefix; when a path was updated more than once
  in the poll (two sample rounds fell into one poll), the last one counts; a ``delete`` drops
  what the poll said about that path (and its subtree) before it;
- JSON object values under a table of a profile (SONiC's ``COUNTERS`` hashes) as rows and
  fields; other JSON objects are expanded into leaves (module prefixes dropped), and leaves
  are matched against every profile's leaf patterns (:func:`profiles.rules`);
- counters are the device's absolute values, as SNMP reads them: the store takes their deltas.
  Their rate is measured over the **notification timestamps**: the newest timestamp of the
  poll's counter updates is the device clock (``clocks[target]``, seconds), as sysUpTime is
  for SNMP;
- gauges (state and configuration, often streamed ON_CHANGE: sent once, then only when they
  change) are kept in :class:`GnmiState` by path and exported on every poll until the device
  changes or deletes them, so a PFC watchdog that stormed stays stormed between notifications
  and a setting read once does not go stale;
- WJH ``state/drop`` values (a JSON list of per-window aggregates) are counted into monotonic
  totals by the NVUE source's :func:`~fabricmon.collectors.nvue.parse.wjh_samples`;
- SONiC CONFIG_DB tables (``PORT_QOS_MAP``, ``PFC_WD``, ``QUEUE``, ``WRED_PROFILE``) become the
  checklist's configuration gauges, APPL_DB's ``LLDP_ENTRY_TABLE`` the links (:mod:`.sonic_config`),
  kept in the state like the gauges: sent once, read on every poll.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import Field

from fabricmon.collectors.base import ParseError, ParseOptions
from fabricmon.collectors.gnmi import paths as gp
from fabricmon.collectors.gnmi import profiles as prof
from fabricmon.collectors.gnmi import sonic_config
from fabricmon.collectors.nvue.parse import Emitter, NvueState, to_count, wjh_samples
from fabricmon.core.model import DeviceInfo, Link, ParseResult, PortInfo, TargetSpec
from fabricmon.core.vocabulary import COUNTERS, GAUGES

NS = 1e-9
_JSON_KINDS = ("json_val", "json_ietf_val")
GaugeKey = tuple[str, str, tuple[Any, ...]]  # port, gauge name, sub-labels


class GnmiParseOptions(ParseOptions):
    """What a gNMI parse reads from the target's options (``GnmiOptions`` has the same field):
    user profile directories, whose rules are needed to read the payload again on replay."""

    profile_dirs: list[str] = Field(default_factory=list)


@dataclass(frozen=True, slots=True)
class GnmiState:
    """What a target's next poll needs from this one, never changed after it is made:
    ``gauges``: the state values last received, by the path that carried them (exported until
    changed or deleted); ``config``: the SONiC CONFIG_DB rows last received, by path (read
    together every poll); ``wjh``: the WJH window totals (NVUE's state); ``lldp``: the OpenConfig
    LLDP neighbour leaves last received, by path: (port, neighbour path, field, value)."""

    gauges: Mapping[str, tuple[tuple[GaugeKey, float], ...]] = field(default_factory=dict)
    config: Mapping[str, tuple[tuple[str, ...], Any]] = field(default_factory=dict)
    wjh: NvueState = field(default_factory=NvueState)
    lldp: Mapping[str, tuple[str, str, str, str]] = field(default_factory=dict)


@dataclass(slots=True)
class _Update:
    path: gp.GPath
    ts: int | None
    kind: str
    value: Any


class _Problems:
    """Problems of one poll, counted per kind with the first example (a hostile device can send
    a million bad updates: the warnings stay a handful of lines)."""

    def __init__(self) -> None:
        self.seen: dict[str, tuple[int, str]] = {}

    def note(self, what: str, example: str) -> None:
        n, first = self.seen.get(what, (0, example))
        self.seen[what] = (n + 1, first)

    def lines(self) -> list[str]:
        return [f"{what}: {n} (first: {first[:200]})" for what, (n, first) in sorted(self.seen.items())]


def _timestamp(raw: Any) -> int | None:
    return raw if type(raw) is int and raw > 0 else None


def _deletes(n: dict[str, Any], i: int, prefix: Any, latest: dict[str, _Update], deleted: list[str], problems: _Problems) -> None:
    """One notification's deletes: each path and everything below it leaves ``latest``."""
    deletes = n.get("delete") or []
    if not isinstance(deletes, list):
        problems.note("notifications whose delete is not a list, deletes skipped", f"#{i}")
        return
    for d in deletes:
        try:
            full = gp.to_string(prefix.join(gp.parse(d)))
        except gp.PathError as exc:
            problems.note("bad delete paths, skipped", str(exc))
            continue
        deleted.append(full)
        for key in [k for k in latest if k == full or k.startswith(full.rstrip("/") + "/")]:
            del latest[key]


def _updates(n: dict[str, Any], i: int, prefix: Any, ts: int | None, latest: dict[str, _Update], problems: _Problems) -> None:
    """One notification's updates into ``latest`` (the last value per full path wins)."""
    updates = n.get("update") or []
    if not isinstance(updates, list):
        problems.note("notifications whose update is not a list, skipped", f"#{i}")
        return
    for u in updates:
        if not isinstance(u, dict) or not isinstance(u.get("val"), dict) or len(u["val"]) != 1:
            problems.note("updates without a path and one typed value, skipped", repr(u)[:120])
            continue
        try:
            path = prefix.join(gp.parse(u.get("path") or "/"))
        except gp.PathError as exc:
            problems.note("updates with a bad path, skipped", str(exc))
            continue
        (kind, value), = u["val"].items()
        if kind == gp.INVALID_JSON:
            problems.note("JSON values that do not parse, skipped", f"{gp.to_string(path)} = {str(value)[:60]}")
            continue
        latest[gp.to_string(path)] = _Update(path, ts, kind, value)


def _latest(notifications: list[Any], problems: _Problems) -> tuple[dict[str, _Update], list[str]]:
    """The last update per full path, and the deleted paths in order."""
    latest: dict[str, _Update] = {}
    deleted: list[str] = []
    for i, n in enumerate(notifications):
        if not isinstance(n, dict):
            problems.note("notifications that are not objects, skipped", f"#{i}")
            continue
        if n.get("sync_response") is True and "update" not in n:
            continue
        try:
            prefix = gp.parse(n.get("prefix") or "/", str(n.get("target") or ""))
        except gp.PathError as exc:
            problems.note("notifications with a bad prefix, skipped", str(exc))
            continue
        ts = _timestamp(n.get("timestamp"))
        if ts is None and n.get("update"):
            problems.note("notifications without an integer timestamp (no device clock from them)", f"#{i}: {str(n.get('timestamp'))[:40]}")
        _deletes(n, i, prefix, latest, deleted, problems)
        _updates(n, i, prefix, ts, latest, problems)
    return latest, deleted


def _gauge_value(target: prof.Target, value: Any) -> float | None:
    if target.value_map is not None:
        key = str(value).lower() if not isinstance(value, bool) else ("true" if value else "false")
        key = key.rsplit(":", 1)[-1]  # an identityref may carry its module prefix
        return dict(target.value_map).get(key)
    if isinstance(value, bool):
        return 1.0 if value else 0.0
    if isinstance(value, int | float) and math.isfinite(value):
        return float(value)
    count = to_count(value)
    return float(count) if count is not None else None


def _sub(defn_labels: tuple[str, ...], labels: dict[str, Any]) -> tuple[Any, ...] | None:
    out = []
    for name in defn_labels:
        v = labels.get(name)
        if name in ("priority", "pg"):
            n = to_count(v)
            if n is None or (name == "priority" and n > 7):
                return None
            v = n
        elif v is None:
            return None
        out.append(str(v) if name == "queue" else v)
    return tuple(out)


class _Reader:
    """Maps one poll's latest updates onto counters and gauges."""

    def __init__(self, em: Emitter, rules: prof.Rules, problems: _Problems) -> None:
        self.em = em
        self.rules = rules
        self.problems = problems
        self.gauges: dict[str, list[tuple[GaugeKey, float]]] = {}  # path -> gauges it gave this poll
        self.wjh: list[Any] = []
        self.lldp: dict[str, tuple[str, str, str, str]] = {}
        self.ports: set[str] = set()
        self.clock: int | None = None
        self.mapped = 0
        self._fields: dict[tuple[int, str], tuple[int, prof.Field, dict[str, str]] | None] = {}

    def emit(self, where: str, ts: int | None, target: prof.Target, labels: dict[str, Any], kind: str, value: Any,
             detail: str = "") -> None:
        """One reading. ``where``: the update's path (a gauge is kept by it until the path is
        updated or deleted); ``detail``: the row and field inside a table value, for messages."""
        port = labels.get("port")
        if not isinstance(port, str) or not port:
            return
        if target.kind == "wjh":
            self.wjh.append({port: value})
            self.ports.add(port)
            self.mapped += 1
            return
        if target.kind == "lldp":
            text = str(value).rsplit(":", 1)[-1] if target.name == "port_id_type" else str(value)
            self.lldp[where] = (port, where.rsplit("/state/", 1)[0], target.name, text)
            self.mapped += 1
            return
        if target.per_priority:
            self._per_priority(where, ts, target, labels, kind, value)
            return
        defn = COUNTERS.get(target.name) if target.kind == "counter" else GAUGES.get(target.name)
        sub = _sub(defn.labels, labels) if defn is not None else None
        if sub is None:
            self.problems.note(f"{target.name}: label values out of range, skipped", where + detail)
            return
        self.ports.add(port)
        self.mapped += 1
        if target.kind == "counter":
            count = to_count(value)
            if count is None:
                self.problems.note(f"{target.name}: value is not a non-negative integer, skipped",
                                   f"{where}{detail} = {kind} {str(value)[:40]}")
                return
            self.em.sample(port, target.name, count, sub, scale=target.scale)
            if ts is not None and (self.clock is None or ts > self.clock):
                self.clock = ts
        else:
            reading = _gauge_value(target, value)
            if reading is None:
                self.problems.note(f"{target.name}: value cannot be read as the gauge, skipped",
                                   f"{where}{detail} = {kind} {str(value)[:40]}")
                return
            self.gauges.setdefault(where, []).append(((port, target.name, sub), reading * target.scale))

    def _per_priority(self, where: str, ts: int | None, target: prof.Target, labels: dict[str, Any], kind: str, value: Any) -> None:
        counts = value.get("count", value) if isinstance(value, dict) else None
        if not isinstance(counts, dict):
            self.problems.note(f"{target.name}: not a per-priority map, skipped", f"{where} = {kind} {str(value)[:40]}")
            return
        for p, v in counts.items():
            self.emit(where, ts, prof.Target(target.kind, target.name, target.scale, source=target.source), {**labels, "priority": p},
                      kind, v)

    # ------------------------------------------------------------ tables (SONiC DB hashes)

    def table(self, spec: prof.TableSpec, u: _Update, where: str) -> None:
        ctx: dict[str, str] = {}
        rest = u.path.names()[1:]
        for name in rest:
            m = spec.row.match(name)
            if m:
                ctx = {k: v for k, v in m.groupdict().items() if v is not None}
        last = rest[-1] if rest else ""
        if not isinstance(u.value, dict) or u.kind not in _JSON_KINDS:
            if last and not spec.row.match(last):  # COUNTERS/Ethernet68/SAI_... = "2"
                self._field(spec, ctx, last, where, u)
            return
        self._walk(spec, ctx, u.value, last, where, u, 0)

    def _walk(self, spec: prof.TableSpec, ctx: dict[str, str], obj: dict[str, Any], last: str, where: str, u: _Update, depth: int) -> None:
        if depth > 4:
            return
        upper: dict[str, int] = {}
        if last in spec.multicast_upper_half:  # a Queues map: n queues of each port, the upper half multicast
            for k in obj:
                m = spec.row.match(k)
                if m and m.group("port"):
                    upper[m.group("port")] = upper.get(m.group("port"), 0) + 1
        scalars: list[tuple[int, str, Any]] = []
        for k, v in obj.items():
            m = spec.row.match(k) if isinstance(k, str) else None
            if m is not None:
                row = {kk: vv for kk, vv in m.groupdict().items() if vv is not None}
                n = upper.get(row.get("port", ""))
                index = to_count(row.get("index"))
                if n and index is not None and index >= n // 2:
                    continue
                if isinstance(v, dict):
                    self._walk(spec, row, v, last, where, u, depth + 1)
            elif isinstance(v, dict):
                self._walk(spec, ctx, v, last, where, u, depth + 1)
            elif isinstance(k, str):
                hit = self._lookup(spec, k)
                if hit is not None:
                    scalars.append((hit[0], k, v))
        # In profile order, so the first field of a series wins (SAI's pause time before the estimate).
        for _order, k, v in sorted(scalars, key=lambda x: x[0]):
            self._field(spec, ctx, k, where, _Update(u.path, u.ts, u.kind, v))

    def _lookup(self, spec: prof.TableSpec, name: str) -> tuple[int, prof.Field, dict[str, str]] | None:
        key = (id(spec), name)
        hit = self._fields.get(key, False)
        if hit is False:
            hit = None
            for i, f in enumerate(spec.fields):
                m = f.pattern.fullmatch(name)
                if m:
                    hit = (i, f, {k: v for k, v in m.groupdict().items() if v is not None})
                    break
            self._fields[key] = hit
        return hit

    def _field(self, spec: prof.TableSpec, ctx: dict[str, str], name: str, where: str, u: _Update) -> None:
        hit = self._lookup(spec, name)
        if hit is None or "port" not in ctx:
            return
        _order, f, groups = hit
        labels: dict[str, Any] = {**ctx, **groups}
        if f.target.index:
            if "index" not in ctx:
                return
            labels[f.target.index] = ctx["index"]
        index = ":" + ctx["index"] if "index" in ctx else ""
        self.emit(where, u.ts, f.target, labels, u.kind, u.value, f" [{ctx.get('port')}{index}] {name}")

    # ------------------------------------------------------------ leaves

    def leaf(self, path: gp.GPath, where: str, u: _Update) -> bool:
        if not path.elems:
            return False
        for rule in self.rules.leaves.get((prof._origin(path.origin), len(path.elems), path.elems[-1][0]), ()):
            labels = rule.match(path)
            if labels is not None:
                self.emit(where, u.ts, rule.target, labels, u.kind, u.value)
                return True
        return False

    def expand(self, path: gp.GPath, obj: Any, u: _Update, depth: int = 0) -> Iterator[tuple[gp.GPath, Any]]:
        """A JSON container value as (leaf path, value) pairs; ``mod:name`` keys lose the module."""
        if depth > 12:
            return
        if isinstance(obj, dict):
            for k, v in obj.items():
                if not isinstance(k, str):
                    continue
                child = gp.GPath((*path.elems, (k.rsplit(":", 1)[-1], ())), path.origin, path.target)
                yield from self.expand(child, v, u, depth + 1)
        elif not isinstance(obj, list):
            yield path, obj


def _read_updates(rd: _Reader, rules: Any, latest: dict[str, _Update]) -> dict[str, tuple[tuple[str, ...], Any]]:
    """Every latest update through the profiles' tables and leaves; SONiC CONFIG_DB/APPL_DB rows
    are returned (by full path) for :mod:`sonic_config`."""
    config: dict[str, tuple[tuple[str, ...], Any]] = {}
    for where, u in latest.items():
        names = u.path.names()
        tables = rules.tables.get(names[0], ()) if names else ()
        if tables:
            for t in tables:
                rd.table(t, u, where)
            continue
        if names and names[0] in sonic_config.TABLES:
            config[where] = (names, u.value)
            continue
        if u.kind in _JSON_KINDS and isinstance(u.value, dict) and not rd.leaf(u.path, where, u):
            for leaf_path, value in rd.expand(u.path, u.value, u):
                rd.leaf(leaf_path, gp.to_string(leaf_path), _Update(leaf_path, u.ts, u.kind, value))
            continue
        rd.leaf(u.path, where, u)
    return config


def _config_rows(em: Emitter, rd: _Reader, all_config: dict[str, tuple[tuple[str, ...], Any]], device: str,
                 problems: _Problems) -> list[Link] | None:
    """The SONiC config rows as gauges (for the audit) and, from APPL_DB's LLDP table, links."""
    if not all_config:
        return None
    entries = list(all_config.values())
    rows, seen = sonic_config.rows_of(entries), {n[0] for n, _v in entries}
    for (port, name, sub), value in sonic_config.gauges(rows, problems.note, seen):
        em.gauge(port, name, value, sub)
        rd.ports.add(port)
    return sonic_config.links(rows, device) if "LLDP_ENTRY_TABLE" in seen else None


def _kept_gauges(em: Emitter, rd: _Reader, state: GnmiState, deleted: list[str]) -> dict[str, Any]:
    """This poll's gauges, then those kept from earlier polls that were neither updated nor
    deleted (ON_CHANGE leaves are sent once); returns the gauges to keep for the next poll."""
    kept = _kept(state.gauges, rd.gauges, deleted)
    for gauges in (rd.gauges.values(), kept.values()):
        for group in gauges:
            for (port, name, sub), value in group:
                em.gauge(port, name, value, sub)
                rd.ports.add(port)
    return {**kept, **{p: tuple(g) for p, g in rd.gauges.items()}}


def parse_payload(payload: dict[str, Any], spec: TargetSpec, state: GnmiState) -> tuple[ParseResult, GnmiState]:
    """A recorded gNMI poll -> (ParseResult, next state). Device = the target name."""
    opts = GnmiParseOptions.from_spec(spec)
    if not isinstance(payload, dict) or not isinstance(payload.get("notifications"), list):
        raise ParseError("gnmi payload must be an object with a 'notifications' list")
    try:
        rules = prof.rules(tuple(opts.profile_dirs))
    except prof.ProfileError as exc:
        raise ParseError(f"gNMI profiles: {exc}") from None
    device = spec.name
    em = Emitter(device)
    problems = _Problems()
    latest, deleted = _latest(payload["notifications"], problems)
    rd = _Reader(em, rules, problems)
    config = _read_updates(rd, rules, latest)
    all_config = {**_kept(state.config, config, deleted), **config}
    lldp = _config_rows(em, rd, all_config, device, problems)
    if latest and not rd.mapped and not config:
        problems.note("updates that match no profile path (is the profile right?)", next(iter(latest)))
    new_gauges = _kept_gauges(em, rd, state, deleted)
    wjh_state = state.wjh
    if rd.wjh or state.wjh.wjh:
        wjh_state = wjh_samples(em, rd.wjh, state.wjh)
    all_lldp = {**_kept(state.lldp, rd.lldp, deleted), **rd.lldp}
    if all_lldp:
        lldp = sorted({*(lldp or ()), *_oc_links(all_lldp.values(), device)}, key=lambda ln: (ln.port, ln.peer_device, ln.peer_port))
    result = em.finish()
    result.links = lldp
    if rd.clock is not None:
        result.clocks[device] = rd.clock * NS
    result.warnings.extend(problems.lines())
    result.devices.append(DeviceInfo(name=device, kind="switch"))
    for port in sorted(rd.ports):
        result.ports.append(PortInfo(device=device, port=port))
    unchanged = (new_gauges == dict(state.gauges) and all_config == dict(state.config) and wjh_state is state.wjh
                 and all_lldp == dict(state.lldp))
    return result, (state if unchanged else GnmiState(new_gauges, all_config, wjh_state, all_lldp))


def _oc_links(entries: Any, device: str) -> list[Link]:
    """OpenConfig LLDP neighbour leaves -> links: per neighbour, the system name and the port id
    when its type names an interface (INTERFACE_NAME, LOCAL, or not given), else the port
    description, as the SNMP source reads LLDP-MIB's subtypes."""
    neighbours: dict[tuple[str, str], dict[str, str]] = {}
    for port, neighbour, name, value in entries:
        neighbours.setdefault((port, neighbour), {})[name] = value
    out = []
    for (port, _n), f in neighbours.items():
        by_name = f.get("port_id_type", "INTERFACE_NAME").upper() in ("INTERFACE_NAME", "LOCAL")
        peer_port = f.get("port_id", "") if by_name else (f.get("port_description") or f.get("port_id", ""))
        if f.get("system_name") and peer_port:
            out.append(Link(device, port, f["system_name"], peer_port))
    return out


def _kept(old: Mapping[str, Any], fresh: Mapping[str, Any], deleted: list[str]) -> dict[str, Any]:
    """Entries of ``old`` this poll neither replaced (``fresh``) nor deleted (a path or its subtree)."""
    prefixes = [d.rstrip("/") + "/" for d in deleted]
    return {p: v for p, v in old.items() if p not in fresh and p not in deleted and not any(p.startswith(d) for d in prefixes)}
