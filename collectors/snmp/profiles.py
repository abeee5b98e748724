"""Vendor profiles: YAML files that say which SNMP table columns feed which vocabulary names.

Why data, not code: every switch vendor puts PFC, ECN and queue-drop counters in its own MIB
with its own index shape. A profile declares, per table, the entry OID, how the index splits
into ifIndex / priority / queue parts, and which columns map to which counter or gauge; one
engine (``parse.py``) turns any profile into samples. Users add profiles for other switches
with the ``profile_dirs`` option, without touching code.

Schema (see ``profiles/*.yaml`` for real ones)::

    name: cisco                      # defaults to the file stem
    description: ...
    match:                           # selection when the target sets no ``profile``
      sys_object_id: [1.3.6.1.4.1.9] # OID prefixes (component-wise)
      sys_descr: ["SONiC"]           # regexes; a sysDescr match outranks any OID match
    tables:
      - name: cpfcIfPriorityTable
        entry: 1.3.6.1.4.1.9.9.813.1.2.1
        index: [ifIndex, priority]   # parts: ifIndex | priority | queue | pg | dscp | int | string | implied
        columns:                     # or {role: queue, format: "pg{}", values: [0, 2], offset: 0}
          2: {counter: pfc_tx_pause_frames}
          3: {counter: pfc_rx_pause_frames, scale: 0.001, priority: 3, queue: all,
              fallback: true, map: {1: 0, 2: 1}, default: 0, ignore: [4294967295]}

Index parts filter rows: ``values`` (only these raw values) and ``range`` ([lo, hi]); a row
that fails a filter belongs to someone else and is skipped silently. ``offset`` is added to
a priority/queue value (``-1`` turns a 1-based queue number into the 0-based class).

Counter-id tables (one value column, the counter chosen by an index part, as in
CISCO-SWITCH-QOS csqIfQosGroupStatsValue) use one ``selector`` index part and a column
whose ``select`` maps each selector value to an ordinary column target; rows with a selector
value that is not listed are skipped::

        index: [ifIndex, {values: [2]}, {role: queue, offset: -1}, {role: selector}]
        columns:
          4:
            select:
              1: {counter: queue_tx_packets}
              5: {counter: queue_drops}
"""

from __future__ import annotations

import dataclasses
import functools
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

from fabricmon.collectors import profile_files
from fabricmon.collectors.snmp.snmprec import Oid, parse_oid
from fabricmon.core.vocabulary import COUNTERS, GAUGES

SHIPPED_DIR = Path(__file__).resolve().parent / "profiles"
BASE_PROFILE = "if-mib"  # applied to every target, before the vendor profile
FALLBACK_PROFILE = "ieee8021-pfc"  # when no vendor profile matches
ROLES = ("ifIndex", "priority", "queue", "pg", "dscp", "selector", "ignore")  # pg: an ingress priority group
KINDS = ("int", "string", "implied")


class ProfileError(ValueError):
    """A profile file that does not follow the schema; names the file and the problem."""


@dataclass(frozen=True, slots=True)
class IndexPart:
    kind: str = "int"  # int: one sub-identifier; string: length-prefixed; implied: the rest
    role: str = "ignore"
    values: frozenset[int] | None = None  # rows with other values are not ours (filter)
    lo: int | None = None
    hi: int | None = None
    offset: int = 0  # label = raw + offset (a 1-based queue numbering)
    fmt: str = "{}"  # queue label format, e.g. "pg{}"


@dataclass(frozen=True, slots=True)
class Column:
    number: int
    kind: str  # counter | gauge
    name: str
    scale: float = 1.0
    fixed: tuple[tuple[str, Any], ...] = ()  # labels given by the column (Cumulus InPfc3Pkt)
    fallback: bool = False  # only when an earlier column gave no value for the same key
    value_map: tuple[tuple[int, float], ...] | None = None
    default: float | None = None
    ignore: frozenset[int] = frozenset()
    select: int | None = None  # only rows whose selector index part has this value


@dataclass(frozen=True, slots=True)
class Table:
    name: str
    entry: Oid
    index: tuple[IndexPart, ...]
    columns: tuple[Column, ...]

    def column_oids(self) -> list[Oid]:
        return [(*self.entry, n) for n in dict.fromkeys(c.number for c in self.columns)]

    def column_groups(self) -> list[tuple[int, dict[int | None, Column]]]:
        """Columns by OID column number, in profile order: one plain column (key None), or
        the selected targets of a counter-id column keyed by their selector value."""
        groups: dict[int, dict[int | None, Column]] = {}
        for c in self.columns:
            groups.setdefault(c.number, {})[c.select] = c
        return list(groups.items())


@dataclass(frozen=True, slots=True)
class Profile:
    name: str
    description: str
    match_oids: tuple[Oid, ...]
    match_descr: tuple[re.Pattern[str], ...]
    tables: tuple[Table, ...]
    path: str = ""

    def walk_oids(self) -> list[Oid]:
        return [oid for t in self.tables for oid in t.column_oids()]


_SHORTHANDS = {
    "ifIndex": IndexPart(role="ifIndex"),
    "priority": IndexPart(role="priority", lo=0, hi=7),
    "queue": IndexPart(role="queue"),
    "pg": IndexPart(role="pg"),
    "dscp": IndexPart(role="dscp", lo=0, hi=63),  # a 6-bit DSCP value (RFC 2474)
    "selector": IndexPart(role="selector"),
    "int": IndexPart(),
    "string": IndexPart(kind="string"),
    "implied": IndexPart(kind="implied"),
}


def _index_part(raw: Any, where: str) -> IndexPart:
    if isinstance(raw, str):
        if raw not in _SHORTHANDS:
            raise ProfileError(f"{where}: unknown index part {raw!r} (one of {', '.join(_SHORTHANDS)})")
        return _SHORTHANDS[raw]
    if not isinstance(raw, dict):
        raise ProfileError(f"{where}: an index part is a name or a mapping, got {raw!r}")
    unknown = set(raw) - {"kind", "role", "values", "range", "offset", "format", "name"}
    if unknown:
        raise ProfileError(f"{where}: unknown index keys {sorted(unknown)}")
    kind, role = raw.get("kind", "int"), raw.get("role", "ignore")
    if kind not in KINDS or role not in ROLES:
        raise ProfileError(f"{where}: kind must be one of {KINDS}, role one of {ROLES}")
    if kind != "int" and role != "ignore":
        raise ProfileError(f"{where}: only int index parts can carry a role")
    values = raw.get("values")
    lo, hi = (0, 7) if role == "priority" else (None, None)
    if "range" in raw:
        lo, hi = (int(x) for x in raw["range"])
    fmt = str(raw.get("format", "{}"))
    if "{}" not in fmt:
        raise ProfileError(f"{where}: format needs a {{}} placeholder")
    return IndexPart(kind=kind, role=role, values=frozenset(int(v) for v in values) if values is not None else None,
                     lo=lo, hi=hi, offset=int(raw.get("offset", 0)), fmt=fmt)


def _columns(number: Any, raw: Any, roles: set[str], where: str) -> list[Column]:
    """One column, or one per selector value for a ``select`` column."""
    if isinstance(raw, dict) and "select" in raw:
        if set(raw) != {"select"}:
            raise ProfileError(f"{where}: column {number}: select goes alone (put options on each target)")
        if "selector" not in roles:
            raise ProfileError(f"{where}: column {number}: select needs a selector index part")
        targets = raw["select"]
        if not isinstance(targets, dict) or not targets:
            raise ProfileError(f"{where}: column {number}: select maps selector values to targets")
        out = []
        for value, target in targets.items():
            try:
                sel = int(value)
            except (TypeError, ValueError):
                raise ProfileError(f"{where}: column {number}: selector value {value!r} is not an integer") from None
            col = _column(number, target, roles, f"{where} select {sel}")
            out.append(dataclasses.replace(col, select=sel))
        return out
    if "selector" in roles:
        raise ProfileError(f"{where}: column {number}: a table with a selector index part needs select columns")
    return [_column(number, raw, roles, where)]


def _column(number: Any, raw: Any, roles: set[str], where: str) -> Column:
    if not isinstance(raw, dict):
        raise ProfileError(f"{where}: column {number} must be a mapping")
    allowed = {"counter", "gauge", "scale", "priority", "queue", "fallback", "map", "default", "ignore", "name"}
    if set(raw) - allowed:
        raise ProfileError(f"{where}: column {number}: unknown keys {sorted(set(raw) - allowed)}")
    if ("counter" in raw) == ("gauge" in raw):
        raise ProfileError(f"{where}: column {number} needs exactly one of counter/gauge")
    kind = "counter" if "counter" in raw else "gauge"
    name = str(raw[kind])
    defn = COUNTERS.get(name) if kind == "counter" else GAUGES.get(name)
    if defn is None:
        raise ProfileError(f"{where}: column {number}: {name!r} is not a {kind} of agent/core/vocabulary.py")
    fixed = {k: raw[k] for k in ("priority", "queue") if k in raw}
    if "priority" in fixed:
        fixed["priority"] = int(fixed["priority"])
    if "queue" in fixed:
        fixed["queue"] = str(fixed["queue"])
    for label in defn.labels:
        if label not in roles and label not in fixed:
            raise ProfileError(f"{where}: column {number}: {name} needs a {label!r} label from the index or the column")
    value_map = raw.get("map")
    if value_map is not None and kind != "gauge":
        raise ProfileError(f"{where}: column {number}: map is for gauges")
    try:
        col_no = int(number)
        return Column(
            number=col_no, kind=kind, name=name, scale=float(raw.get("scale", 1.0)),
            fixed=tuple(sorted(fixed.items())), fallback=bool(raw.get("fallback", False)),
            value_map=tuple((int(k), float(v)) for k, v in value_map.items()) if value_map is not None else None,
            default=float(raw["default"]) if raw.get("default") is not None else None,
            ignore=frozenset(int(v) for v in raw.get("ignore", ())),
        )
    except (TypeError, ValueError, AttributeError) as exc:
        raise ProfileError(f"{where}: column {number}: {exc}") from None


def _oid(text: Any, where: str) -> Oid:
    try:
        return parse_oid(str(text))
    except ValueError as exc:
        raise ProfileError(f"{where}: {exc}") from None


def profile_from_dict(doc: Any, default_name: str, path: str = "") -> Profile:
    where = path or default_name
    if not isinstance(doc, dict):
        raise ProfileError(f"{where}: a profile is a YAML mapping")
    unknown = set(doc) - {"name", "description", "match", "tables"}
    if unknown:
        raise ProfileError(f"{where}: unknown keys {sorted(unknown)}")
    name = str(doc.get("name", default_name))
    match = doc.get("match") or {}
    try:
        descr = tuple(re.compile(str(p)) for p in match.get("sys_descr", []) or [])
    except re.error as exc:
        raise ProfileError(f"{where}: bad sys_descr regex: {exc}") from None
    oids = tuple(_oid(o, where) for o in match.get("sys_object_id", []) or [])
    tables = []
    for i, t in enumerate(doc.get("tables") or []):
        twhere = f"{where} table {t.get('name', i) if isinstance(t, dict) else i}"
        if not isinstance(t, dict) or "entry" not in t or "columns" not in t:
            raise ProfileError(f"{twhere}: a table needs entry and columns")
        index = tuple(_index_part(p, twhere) for p in t.get("index") or [])
        roles = [p.role for p in index]
        if roles.count("ifIndex") != 1:
            raise ProfileError(f"{twhere}: the index needs exactly one ifIndex part")
        if roles.count("selector") > 1:
            raise ProfileError(f"{twhere}: at most one selector index part")
        if not isinstance(t["columns"], dict):
            raise ProfileError(f"{twhere}: columns is a mapping of column number to target")
        cols = tuple(c for n, raw in t["columns"].items() for c in _columns(n, raw, set(roles), twhere))
        tables.append(Table(name=str(t.get("name", f"table{i}")), entry=_oid(t["entry"], twhere), index=index, columns=cols))
    return Profile(name=name, description=str(doc.get("description", "")), match_oids=oids,
                   match_descr=descr, tables=tuple(tables), path=path)


@functools.lru_cache(maxsize=32)
def load_profiles(extra_dirs: tuple[str, ...] = ()) -> dict[str, Profile]:
    """Shipped profiles, then each extra directory in order (a later file of the same name
    replaces an earlier one). Cached per process: profiles are configuration, read once;
    call ``load_profiles.cache_clear()`` on a config reload."""
    profiles = profile_files.load_dirs(SHIPPED_DIR, extra_dirs, profile_from_dict, ProfileError)
    for required in (BASE_PROFILE, FALLBACK_PROFILE):
        if required not in profiles:
            raise ProfileError(f"profile {required!r} is missing")
    return profiles


def _oid_prefix(prefix: Oid, oid: Oid) -> bool:
    return len(oid) >= len(prefix) and oid[: len(prefix)] == prefix


class Selection(NamedTuple):
    """The chosen profile, what chose it (shown in the log and ``fabricmon_target_info``),
    and a warning when nothing matched."""

    profile: Profile
    match: str
    warning: str | None


def select_profile(profiles: dict[str, Profile], sys_object_id: Oid | None, sys_descr: str,
                   explicit: str | None = None) -> Selection:
    """The vendor profile for a device.

    An explicit ``profile`` option wins; else a sysDescr regex match (SONiC runs on many
    vendors' hardware and keeps their sysObjectID; Cumulus Linux 4.x reports net-snmp's
    1.3.6.1.4.1.8072.3.2.10), else the longest sysObjectID prefix, as LibreNMS's os
    definitions match on ``sysObjectID`` or ``sysDescr``.
    """
    if explicit:
        if explicit not in profiles:
            raise KeyError(explicit)
        return Selection(profiles[explicit], "option profile", None)
    best: tuple[int, int, str, str] | None = None
    for prof in profiles.values():
        if prof.name == BASE_PROFILE:
            continue
        descr_hit = next((p for p in prof.match_descr if p.search(sys_descr)), None)
        oid_hit = max((p for p in prof.match_oids if sys_object_id and _oid_prefix(p, sys_object_id)), key=len, default=None)
        if descr_hit is None and oid_hit is None:
            continue
        why = " and ".join([*([f"sysDescr matches {descr_hit.pattern!r}"] if descr_hit is not None else []),
                            *([f"sysObjectID under {'.'.join(map(str, oid_hit))}"] if oid_hit is not None else [])])
        rank = (int(descr_hit is not None), len(oid_hit or ()), prof.name, why)
        if best is None or rank[:2] > best[:2]:
            best = rank
    if best is not None:
        return Selection(profiles[best[2]], best[3], None)
    shown = ".".join(map(str, sys_object_id)) if sys_object_id else "(none)"
    return Selection(profiles[FALLBACK_PROFILE], "fallback (no profile matched)",
                     f"no vendor profile matches sysObjectID {shown}; using IF-MIB + IEEE8021-PFC")
