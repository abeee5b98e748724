"""gNMI path profiles: YAML files that say what to subscribe to and which paths feed which
vocabulary names (the idea of collectors/snmp/profiles.py, for paths instead of OIDs).

A profile is chosen per target from its ``Capabilities`` (model names) or the target's
``profile`` option, and decides only the *subscriptions*. The parser reads a payload with the
rules of every loaded profile together: the vendors' paths do not overlap (SONiC's
``COUNTERS/...`` tables, OpenConfig leaves, EOS ``eos_native`` paths), so a recording replays
without knowing which profile the live run chose.

Schema (see ``profiles/*.yaml``)::

    name: sonic                        # defaults to the file stem
    description: ...
    match: {models: ['^sonic-db$']}    # regexes on Capabilities model names
    include: [openconfig]              # subscriptions of other profiles, added after these
    encoding: json_ietf                # preferred; the first one Capabilities lists otherwise
    subscriptions:                     # one Subscribe stream per group
      - target: COUNTERS_DB            # prefix target (SONiC: the redis DB); origin: likewise
        optional: false                # true: a group the device refuses is dropped with a warning
        paths:
          - {path: 'COUNTERS/Ethernet*', mode: sample}        # sample | on_change | target_defined
          - {path: '/interfaces/interface[name={port}]/state/counters'}   # {port}: the interfaces
    tables:                            # JSON object values: rows and fields (SONiC DB tables)
      - under: COUNTERS                # first element of the update path
        row: '^(?P<port>Ethernet\\d+)(?::(?P<index>\\d+))?$'
        multicast_upper_half: [Queues] # a Queues map's upper half are multicast queues: skipped
        fields:
          - {field: 'SAI_PORT_STAT_PFC_(?P<priority>[0-7])_RX_PKTS', counter: pfc_rx_pause_frames,
             verified: 'sonic-gnmi testdata COUNTERS:Ethernet68'}
    leaves:                            # scalar leaves (a JSON container value is expanded to them)
      - {path: '/interfaces/interface[name={port}]/state/counters/in-octets', counter: rx_bytes,
         verified: 'openconfig-interfaces'}

Every field and leaf carries exactly one of ``verified: <public source>`` or ``inferred: <why>``.
Labels: ``{port}`` is the port label; ``{priority}``, ``{queue}``, ``{pg}`` the vocabulary's; a
table field's row ``index`` becomes the label named by ``index:`` (queue, priority or pg).
Leaf options: ``scale`` (to base units), ``map`` (a string or bool state -> gauge value),
``value: per_priority`` (a JSON map priority -> count, as EOS's ``PfcClassFrames``),
``wjh: true`` (a What-Just-Happened ``state/drop`` JSON list, counted as the NVUE source does),
``lldp: system_name | port_id | port_id_type | port_description`` (an LLDP neighbour's field:
the leaves of one neighbour, the path up to its ``state``, make one link).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

from fabricmon.collectors import profile_files
from fabricmon.collectors.gnmi import paths as gp
from fabricmon.core.vocabulary import COUNTERS, GAUGES

SHIPPED_DIR = Path(__file__).resolve().parent / "profiles"
FALLBACK_PROFILE = "openconfig"
MODES = ("sample", "on_change", "target_defined")
ENCODINGS = ("json", "json_ietf", "proto", "ascii", "bytes")
LABELS = ("port", "priority", "queue", "pg")
# What a neighbour leaf says (``lldp:``): the cabling, paired per neighbour into links.
LLDP_FIELDS = ("system_name", "port_id", "port_id_type", "port_description")
_PLACEHOLDER = re.compile(r"^\{(\w+)\}$")
# Expansion of a placeholder in a subscription path when the device takes no wildcard keys.
EXPAND = {"priority": tuple(str(p) for p in range(8)), "queue": tuple(str(q) for q in range(8))}


class ProfileError(ValueError):
    """A profile file that does not follow the schema; names the file and the problem."""


@dataclass(frozen=True, slots=True)
class Target:
    """What a field or leaf feeds: a counter or gauge of the vocabulary, and how."""

    kind: str  # counter | gauge | wjh | lldp
    name: str
    scale: float = 1.0
    value_map: tuple[tuple[str, float], ...] | None = None
    per_priority: bool = False
    index: str | None = None  # tables: the label the row index becomes
    source: str = ""  # "verified: ..." or "inferred: ..."


@dataclass(frozen=True, slots=True)
class Field:
    pattern: re.Pattern[str]
    target: Target


@dataclass(frozen=True, slots=True)
class TableSpec:
    under: str
    row: re.Pattern[str]
    multicast_upper_half: frozenset[str]
    fields: tuple[Field, ...]


# A leaf pattern element: name (literal, "*" or a label placeholder) and keys (key -> literal,
# "*" or a placeholder).
PatElem = tuple[str, tuple[tuple[str, str], ...]]


@dataclass(frozen=True, slots=True)
class Leaf:
    origin: str
    elems: tuple[PatElem, ...]
    target: Target

    def match(self, path: gp.GPath) -> dict[str, str] | None:
        """Labels of ``path`` when it matches, else None (origin "" and "openconfig" are one)."""
        if _origin(path.origin) != self.origin or len(path.elems) != len(self.elems):
            return None
        labels: dict[str, str] = {}
        for (pname, pkeys), (name, keys) in zip(self.elems, path.elems, strict=True):
            if not _take(pname, name, labels):
                return None
            have = dict(keys)
            for k, want in pkeys:
                if k not in have or not _take(want, have[k], labels):
                    return None
        return labels


def _origin(origin: str) -> str:
    return "" if origin in ("", "openconfig") else origin  # gNMI: an empty origin means openconfig


def _take(pattern: str, value: str, labels: dict[str, str]) -> bool:
    if pattern == "*":
        return True
    m = _PLACEHOLDER.match(pattern)
    if m is None:
        return pattern == value
    labels[m.group(1)] = value
    return True


@dataclass(frozen=True, slots=True)
class SubPath:
    path: str
    mode: str = "sample"


@dataclass(frozen=True, slots=True)
class Group:
    target: str
    origin: str
    paths: tuple[SubPath, ...]
    optional: bool = False


@dataclass(frozen=True, slots=True)
class Profile:
    name: str
    description: str
    models: tuple[re.Pattern[str], ...]
    include: tuple[str, ...]
    encoding: str
    groups: tuple[Group, ...]
    tables: tuple[TableSpec, ...]
    leaves: tuple[Leaf, ...]
    path: str = ""


def _source(raw: dict[str, Any], where: str) -> str:
    has_v, has_i = bool(raw.get("verified")), bool(raw.get("inferred"))
    if has_v == has_i:
        raise ProfileError(f"{where}: needs exactly one of verified: <public source> or inferred: <why>")
    return f"verified: {raw['verified']}" if has_v else f"inferred: {raw['inferred']}"


def _target(raw: dict[str, Any], where: str, allowed: set[str]) -> Target:
    unknown = set(raw) - allowed - {"counter", "gauge", "wjh", "lldp", "scale", "map", "value", "verified", "inferred", "index"}
    if unknown:
        raise ProfileError(f"{where}: unknown keys {sorted(unknown)}")
    kinds = [k for k in ("counter", "gauge", "wjh", "lldp") if k in raw]
    if len(kinds) != 1:
        raise ProfileError(f"{where}: needs exactly one of counter, gauge, wjh, lldp")
    kind = kinds[0]
    name = "wjh_drops" if kind == "wjh" else str(raw[kind])
    if kind == "lldp" and name not in LLDP_FIELDS:
        raise ProfileError(f"{where}: lldp is one of {', '.join(LLDP_FIELDS)}")
    if kind == "counter" and name not in COUNTERS:
        raise ProfileError(f"{where}: {name!r} is not a counter of agent/core/vocabulary.py")
    if kind == "gauge" and name not in GAUGES:
        raise ProfileError(f"{where}: {name!r} is not a gauge of agent/core/vocabulary.py")
    vmap = raw.get("map")
    if vmap is not None and (not isinstance(vmap, dict) or kind != "gauge"):
        raise ProfileError(f"{where}: map is a mapping, for gauges")
    index = raw.get("index")
    if index is not None and index not in ("priority", "queue", "pg"):
        raise ProfileError(f"{where}: index is priority, queue or pg")
    value = raw.get("value")
    if value not in (None, "per_priority"):
        raise ProfileError(f"{where}: value is per_priority or absent")
    try:
        return Target(kind, name, float(raw.get("scale", 1.0)),
                      tuple((str(k).lower(), float(v)) for k, v in vmap.items()) if vmap else None,
                      value == "per_priority", index, _source(raw, where))
    except (TypeError, ValueError) as exc:
        raise ProfileError(f"{where}: {exc}") from None


def _needs(target: Target, have: set[str], where: str) -> None:
    defn = COUNTERS.get(target.name) or GAUGES.get(target.name)
    if target.kind in ("wjh", "lldp") or defn is None:
        return
    have = have | ({"priority"} if target.per_priority else set())
    missing = [lb for lb in defn.labels if lb not in have]
    if missing:
        raise ProfileError(f"{where}: {target.name} needs the label(s) {missing} from the path")
    if "port" not in have:
        raise ProfileError(f"{where}: the path names no {{port}}")


def _compile(pattern: str, where: str) -> tuple[str, tuple[PatElem, ...]]:
    try:
        p = gp.parse(pattern)
    except gp.PathError as exc:
        raise ProfileError(f"{where}: {exc}") from None
    for name, keys in p.elems:
        for v in (name, *(val for _k, val in keys)):
            m = _PLACEHOLDER.match(v)
            if m and m.group(1) not in LABELS:
                raise ProfileError(f"{where}: unknown placeholder {v} (one of {', '.join(LABELS)})")
    return _origin(p.origin), p.elems


def _labels_of(elems: tuple[PatElem, ...]) -> set[str]:
    out = set()
    for name, keys in elems:
        for v in (name, *(val for _k, val in keys)):
            m = _PLACEHOLDER.match(v)
            if m:
                out.add(m.group(1))
    return out


def _regex(text: Any, where: str) -> re.Pattern[str]:
    try:
        return re.compile(str(text))
    except re.error as exc:
        raise ProfileError(f"{where}: bad regex {text!r}: {exc}") from None


def _group(raw: Any, where: str) -> Group:
    if not isinstance(raw, dict) or not isinstance(raw.get("paths"), list) or not raw["paths"]:
        raise ProfileError(f"{where}: a subscription group needs a list of paths")
    unknown = set(raw) - {"target", "origin", "paths", "optional"}
    if unknown:
        raise ProfileError(f"{where}: unknown keys {sorted(unknown)}")
    subs = []
    for i, p in enumerate(raw["paths"]):
        if not isinstance(p, dict) or not isinstance(p.get("path"), str) or set(p) - {"path", "mode"}:
            raise ProfileError(f"{where} path {i}: {{path: ..., mode: ...}}")
        mode = p.get("mode", "sample")
        if mode not in MODES:
            raise ProfileError(f"{where} path {i}: mode is one of {', '.join(MODES)}")
        _compile(p["path"], f"{where} path {i}")
        subs.append(SubPath(p["path"], mode))
    return Group(str(raw.get("target", "")), str(raw.get("origin", "")), tuple(subs), bool(raw.get("optional", False)))


def _table(raw: Any, where: str) -> TableSpec:
    if not isinstance(raw, dict) or not isinstance(raw.get("fields"), list) or "under" not in raw or "row" not in raw:
        raise ProfileError(f"{where}: a table needs under, row and fields")
    row = _regex(raw["row"], where)
    if "port" not in row.groupindex:
        raise ProfileError(f"{where}: the row regex needs a (?P<port>...) group")
    fields = []
    for i, f in enumerate(raw["fields"]):
        fwhere = f"{where} field {i}"
        if not isinstance(f, dict) or "field" not in f:
            raise ProfileError(f"{fwhere}: needs field: <regex>")
        pattern = _regex(f["field"], fwhere)
        target = _target(f, fwhere, {"field"})
        have = {"port", *pattern.groupindex, *([target.index] if target.index else [])}
        _needs(target, have, fwhere)
        fields.append(Field(pattern, target))
    return TableSpec(str(raw["under"]), row, frozenset(raw.get("multicast_upper_half") or ()), tuple(fields))


def _leaf(raw: Any, where: str) -> Leaf:
    if not isinstance(raw, dict) or not isinstance(raw.get("path"), str):
        raise ProfileError(f"{where}: a leaf needs path")
    origin, elems = _compile(raw["path"], where)
    if not elems or elems[-1][0] == "*" or _PLACEHOLDER.match(elems[-1][0]):
        raise ProfileError(f"{where}: the last element of a leaf path is a literal name")
    target = _target(raw, where, {"path"})
    _needs(target, _labels_of(elems), where)
    return Leaf(origin, elems, target)


def profile_from_dict(doc: Any, default_name: str, path: str = "") -> Profile:
    where = path or default_name
    if not isinstance(doc, dict):
        raise ProfileError(f"{where}: a profile is a YAML mapping")
    unknown = set(doc) - {"name", "description", "match", "include", "encoding", "subscriptions", "tables", "leaves"}
    if unknown:
        raise ProfileError(f"{where}: unknown keys {sorted(unknown)}")
    encoding = str(doc.get("encoding", "json_ietf"))
    if encoding not in ENCODINGS:
        raise ProfileError(f"{where}: encoding is one of {', '.join(ENCODINGS)}")
    match = doc.get("match") or {}
    return Profile(
        name=str(doc.get("name", default_name)), description=str(doc.get("description", "")),
        models=tuple(_regex(m, where) for m in match.get("models") or ()),
        include=tuple(str(i) for i in doc.get("include") or ()), encoding=encoding,
        groups=tuple(_group(g, f"{where} subscription {i}") for i, g in enumerate(doc.get("subscriptions") or ())),
        tables=tuple(_table(t, f"{where} table {i}") for i, t in enumerate(doc.get("tables") or ())),
        leaves=tuple(_leaf(lf, f"{where} leaf {i}") for i, lf in enumerate(doc.get("leaves") or ())),
        path=path,
    )


@functools.lru_cache(maxsize=32)
def load_profiles(extra_dirs: tuple[str, ...] = ()) -> dict[str, Profile]:
    """Shipped profiles, then each extra directory (a later file of the same name replaces an
    earlier one). Cached per process; ``load_profiles.cache_clear()`` on a config reload."""
    profiles = profile_files.load_dirs(SHIPPED_DIR, extra_dirs, profile_from_dict, ProfileError)
    if FALLBACK_PROFILE not in profiles:
        raise ProfileError(f"profile {FALLBACK_PROFILE!r} is missing")
    for prof in profiles.values():
        for inc in prof.include:
            if inc not in profiles:
                raise ProfileError(f"{prof.path or prof.name}: include {inc!r}: no such profile")
    return profiles


class Selection(NamedTuple):
    profile: Profile
    match: str


def select_profile(profiles: dict[str, Profile], models: list[str], explicit: str | None = None) -> Selection:
    """The profile for a target: the ``profile`` option, else the one whose model regexes match
    the most of the models ``Capabilities`` listed, else ``openconfig``."""
    if explicit:
        return Selection(profiles[explicit], "option profile")
    best: tuple[int, str] | None = None
    for prof in profiles.values():
        hits = sum(1 for rx in prof.models if any(rx.search(m) for m in models))
        if hits and (best is None or (hits, prof.name) > best):
            best = (hits, prof.name)
    if best is None:
        return Selection(profiles[FALLBACK_PROFILE], "fallback (no profile matched the Capabilities models)")
    return Selection(profiles[best[1]], f"Capabilities lists {best[0]} of its models")


def groups_of(profiles: dict[str, Profile], name: str) -> list[Group]:
    """The subscription groups of a profile and of those it includes (each once)."""
    out: list[Group] = []
    seen: set[str] = set()

    def visit(n: str) -> None:
        if n in seen:
            return
        seen.add(n)
        prof = profiles[n]
        out.extend(prof.groups)
        for inc in prof.include:
            visit(inc)

    visit(name)
    return out


def expand(path: str, interfaces: list[str] | None) -> list[str]:
    """A subscription path with ``{port}`` (the configured interfaces, else ``*``) and
    ``{priority}``/``{queue}`` (0..7 when the interfaces are listed: a device that takes no
    wildcard keys, as Cumulus, gets every key spelled out; else ``*``)."""
    out = [path]
    for label in ("port", "priority", "queue"):
        token = "{" + label + "}"
        if token not in path:
            continue
        values = (interfaces or ["*"]) if label == "port" else (EXPAND[label] if interfaces else ("*",))
        out = [p.replace(token, v) for p in out for v in values]
    return out


@dataclass(frozen=True, slots=True)
class Rules:
    """Every loaded profile's tables and leaves, indexed for the parser."""

    tables: dict[str, tuple[TableSpec, ...]]
    leaves: dict[tuple[str, int, str], tuple[Leaf, ...]]


@functools.lru_cache(maxsize=32)
def rules(extra_dirs: tuple[str, ...] = ()) -> Rules:
    """The parse rules of all profiles: tables by their ``under`` element, leaves by (origin,
    length, last element name); the first profile (by name) to define a leaf pattern wins."""
    tables: dict[str, list[TableSpec]] = {}
    leaves: dict[tuple[str, int, str], list[Leaf]] = {}
    seen: set[tuple[str, tuple[PatElem, ...]]] = set()
    for prof in sorted(load_profiles(extra_dirs).values(), key=lambda p: p.name):
        for t in prof.tables:
            tables.setdefault(t.under, []).append(t)
        for lf in prof.leaves:
            if (lf.origin, lf.elems) in seen:
                continue
            seen.add((lf.origin, lf.elems))
            leaves.setdefault((lf.origin, len(lf.elems), lf.elems[-1][0]), []).append(lf)
    return Rules({k: tuple(v) for k, v in tables.items()}, {k: tuple(v) for k, v in leaves.items()})
