"""Configuration: YAML in the spirit of Prometheus' own, validated with pydantic.

Every error names the file, line, column and key (``fabricmon.yml:3:13: targets[0].source:
unknown source 'snmpp' ...``), and one run reports every error: each section and each target
is validated on its own, so a bad ``global:`` never hides a typo under ``targets:``. Per-source
options are validated by the collector's own options model. Secrets are never required
inline: collectors accept ``<name>_file`` and ``<name>_env``.

Parsing has a bounded cost whatever the file holds: at most ``MAX_CONFIG_BYTES``, aliases may
add at most ``ALIAS_NODE_BUDGET`` nodes (a 1 KB "billion laughs" file would otherwise expand
to gigabytes), recursive aliases, unknown tags, non-UTF-8 bytes and duplicate keys are
``file:line:column`` errors.
"""

from __future__ import annotations

import difflib
import hashlib
import re
import typing
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, field_validator, model_validator

from fabricmon import collectors
from fabricmon.agent.gcpause import gc_paused
from fabricmon.core.durations import bounded, old_spellings
from fabricmon.core.files import FileRefused, read_regular
from fabricmon.core.model import Link
from fabricmon.core.vocabulary import PriorityMap

DEFAULT_LISTEN = "127.0.0.1:10117"

DAY = 86400.0
# 0.1 s to a day. 0 is a busy loop and divides by zero in the rate maths. Devices refresh their
# counters no faster: SONiC's `counterpoll` (sonic-utilities) accepts 100-30000 ms and reads
# port counters from the ASIC every 1000 ms by default (verified: `counterpoll show` output),
# so a faster poll re-reads the same values. Beyond a day a poll is not monitoring.
PollInterval = bounded(0.1, DAY, "0 is a busy loop; more than a day is not monitoring")
# A poll needs some time to reach a device at all; an hour-long poll is a hung one.
PollTimeout = bounded(0.1, 3600.0, "a poll needs at least 0.1 s; one longer than an hour is hung")
BackoffMax = bounded(1.0, DAY, "a failing target is retried at least daily")
StaleAfter = bounded(1.0, 30 * DAY, "kept at most 30 days")
MinInterval = bounded(0.0, 3600.0, "findings must not lag by more than an hour")
JobWindow = bounded(60.0, 30 * DAY, "the job view looks back at least a minute, at most 30 days")


class Strict(BaseModel):
    """Closed (an unknown key is an error) and strict: ``"yes"`` is not a boolean, ``"8"`` not a number."""

    model_config = ConfigDict(extra="forbid", strict=True)


class GlobalConfig(Strict):
    poll_interval: PollInterval = 10.0
    poll_timeout: PollTimeout = 8.0
    jitter: float = Field(0.1, ge=0.0, le=1.0, allow_inf_nan=False, description="fraction of the interval used to spread targets")
    # Each poll in flight may hold a socket or a subprocess (two fds or more): the cap stays well
    # below the unit's file-descriptor limit, with a reserve for the web server.
    max_concurrency: int = Field(64, ge=1, le=4096)
    backoff_max: BackoffMax = 300.0
    # A series must outlive at least one poll interval, or every reading expires before the next.
    stale_after: StaleAfter = 600.0
    history: int = Field(8, ge=2, le=1000)  # points per series: 2 for a rate; 1000 x 8 bytes x series bounds memory
    state_dir: str | None = None

    @model_validator(mode="after")
    def _stale_after_interval(self) -> GlobalConfig:
        if self.stale_after < self.poll_interval:
            raise ValueError(f"stale_after ({self.stale_after:g} s) must be at least poll_interval ({self.poll_interval:g} s): "
                             "otherwise every series expires before its next reading")
        return self


class WebConfig(Strict):
    listen_address: str = DEFAULT_LISTEN
    config_file: str | None = None  # exporter-toolkit web config (TLS, basic auth)


class RecordingConfig(Strict):
    path: str | None = None


class DetectorConfig(Strict):
    # coalesce detection passes, on the poll clock; past an hour findings would lag their faults
    min_interval: MinInterval = 0.0
    # The analyses' parameters, each checked key by key by its own model at load (check_text):
    # fabricmon.agent.detector.analyses (PfcParams, IbParams).
    pfc: dict[str, Any] = Field(default_factory=dict)
    ib: dict[str, Any] = Field(default_factory=dict)

    def analyses(self) -> dict[str, dict[str, Any]]:
        """``{analysis: parameters}`` for :class:`fabricmon.agent.detector.Detector`."""
        return {"pfc": self.pfc, "ib": self.ib}


class ShardConfig(Strict):
    """This agent's share of the targets: ``index`` of ``count`` agents (see docs/scaling.md)."""

    index: int = Field(0, ge=0)
    count: int = Field(1, ge=1, le=4096)  # more agents than that is a deployment mistake, not a fabric

    @model_validator(mode="after")
    def _in_range(self) -> ShardConfig:
        if self.index >= self.count:
            raise ValueError(f"shard index {self.index} must be below count {self.count}")
        return self


Priority = Annotated[int, Field(ge=0, le=7)]  # IEEE 802.1Q priorities (PCP) 0-7


class FabricConfig(Strict):
    """The fabric's QoS layout, set once and handed to every rule through the detector context.

    ``lossless_priorities``: the PFC priorities (RoCE's conventional one is 3, DSCP 26).
    ``priority_to_queue``: egress queue (traffic class) per priority; ``priority_to_pg``:
    ingress priority group per priority. Unlisted priorities map to the same number, the
    default of Spectrum/Onyx, Arista EOS and NX-OS RoCE QoS templates.
    """

    lossless_priorities: list[Priority] = Field(default_factory=lambda: [3])
    priority_to_queue: dict[Priority, Annotated[int, Field(ge=0, le=15)]] = Field(default_factory=dict)
    priority_to_pg: dict[Priority, Annotated[int, Field(ge=0, le=7)]] = Field(default_factory=dict)

    def priority_map(self) -> PriorityMap:
        return PriorityMap(tuple(sorted(set(self.lossless_priorities))), dict(self.priority_to_queue),
                           dict(self.priority_to_pg))


Level = Literal["full", "health"]


class ExpositionConfig(Strict):
    """What /metrics carries: ``full`` (every counter) or ``health`` (derived rates, aggregates).

    ``level`` is the default of every target (a target's own ``exposition:`` wins);
    ``groups`` overrides per counter group (traffic, errors, drops, pfc, ecn, watchdog,
    transport, state), over both.
    """

    level: Level = "full"
    groups: dict[str, Level] = Field(default_factory=dict)


def shard_of(name: str, count: int) -> int:
    """Stable shard of a target name: the same on every host, Python version and restart."""
    if count <= 1:
        return 0
    return int.from_bytes(hashlib.sha256(name.encode("utf-8")).digest()[:8], "big") % count


def in_shard(name: str, source: str, shard: ShardConfig) -> bool:
    """Whether the agent that is ``shard`` polls (or, replaying, keeps) target ``name`` of
    ``source``: the one place that decides. A source that splits itself (its collector's
    ``self_sharding``, e.g. UFM Telemetry) is every agent's, each asking it for its own share
    (:meth:`Collector.shard_options`); any other target is the agent's its name hashes to. A
    source this installation does not know (a recording from a newer version) goes by its name.
    A source every shard polls (its collector's ``every_shard``: the job inventories, which each
    shard joins to its own findings) is every agent's too."""
    if shard.count <= 1:
        return True
    try:
        cls = collectors.get(source)
        if cls.self_sharding or cls.every_shard:
            return True
    except collectors.UnknownSource:
        pass
    return shard_of(name, shard.count) == shard.index


def _label_text(v: str) -> str:
    """A name that becomes a label value: printable (no control characters, no lone surrogates,
    which no UTF-8 body can carry) and at most 256 characters, the same bound payload names get
    (collectors/sanitize.py)."""
    if not v.isprintable():
        raise ValueError("must be printable text: no control characters or invalid code points")
    if len(v) > 256:
        raise ValueError(f"is {len(v)} characters long; at most 256")
    return v


LabelText = Annotated[str, Field(min_length=1), AfterValidator(_label_text)]


class StaticLink(Strict):
    device: LabelText
    port: LabelText
    peer_device: LabelText
    peer_port: LabelText


class JobHostPort(Strict):
    """A switch port a host's NIC is cabled to, for ``jobs.hosts``: what no source can see."""

    switch: LabelText
    port: LabelText
    nic: str = ""  # the NIC port's name, shown in the job view


def _host_port(v: Any) -> Any:
    """``"leaf07:Ethernet12"`` (the last colon splits) or ``{switch, port, nic}``."""
    if isinstance(v, str):
        device, sep, port = v.rpartition(":")
        if not sep or not device or not port:
            raise ValueError(f"{v!r}: write a switch port as device:port, or as {{switch: ..., port: ...}}")
        return {"switch": device, "port": port}
    return v


class JobsConfig(Strict):
    """The job view and job impact (agent/jobs): where hosts sit that no source places, how many
    finding/job series the info metric may have, and how far back the job view looks."""

    hosts: dict[LabelText, list[Annotated[JobHostPort, BeforeValidator(_host_port)]]] = Field(default_factory=dict)
    # fabricmon_finding_job_info is left out while there are more (finding, job) pairs than this.
    info_max_series: int = Field(1000, ge=0, le=1_000_000)
    # "no fabric finding touches this job ... in the last <window>"
    window: JobWindow = 6 * 3600.0

    def static_hosts(self) -> dict[str, list[tuple[str, str, str]]]:
        return {h: [(e.switch, e.port, e.nic) for e in entries] for h, entries in self.hosts.items()}


class TargetConfig(BaseModel):
    """A target: generic fields here, source options validated by the collector."""

    model_config = ConfigDict(extra="allow", strict=True)

    name: LabelText
    source: str
    address: str = ""
    interval: PollInterval | None = None
    timeout: PollTimeout | None = None
    enabled: bool = True
    exposition: Level | None = None  # None: the global exposition level

    @field_validator("source")
    @classmethod
    def _known_source(cls, v: str) -> str:
        if v not in collectors.SOURCES:
            raise ValueError(f"unknown source {v!r}{did_you_mean(v, collectors.SOURCES)}; known sources: {', '.join(collectors.SOURCES)}")
        return v


class Config(Strict):
    global_: GlobalConfig = Field(default_factory=GlobalConfig, alias="global")
    web: WebConfig = Field(default_factory=WebConfig)
    recording: RecordingConfig = Field(default_factory=RecordingConfig)
    detector: DetectorConfig = Field(default_factory=DetectorConfig)
    rules: dict[str, dict[str, Any]] = Field(default_factory=dict)
    collectors: dict[str, bool] = Field(default_factory=dict)
    links: list[StaticLink] = Field(default_factory=list)
    targets: list[TargetConfig] = Field(default_factory=list)
    shard: ShardConfig = Field(default_factory=ShardConfig)
    exposition: ExpositionConfig = Field(default_factory=ExpositionConfig)
    fabric: FabricConfig = Field(default_factory=FabricConfig)
    jobs: JobsConfig = Field(default_factory=JobsConfig)

    model_config = ConfigDict(extra="forbid", populate_by_name=True, strict=True)

    @field_validator("collectors")
    @classmethod
    def _known_sources(cls, v: dict[str, bool]) -> dict[str, bool]:
        for name in v:
            if name not in collectors.SOURCES:
                raise ValueError(f"unknown source {name!r}{did_you_mean(name, collectors.SOURCES)}; "
                                 f"known sources: {', '.join(collectors.SOURCES)}")
        return v

    def static_links(self) -> list[Link]:
        return [Link(ln.device, ln.port, ln.peer_device, ln.peer_port) for ln in self.links]

    def enabled_targets(self) -> list[TargetConfig]:
        return [t for t in self.targets if t.enabled and self.collectors.get(t.source, True)]

    def shard_targets(self) -> list[TargetConfig]:
        """The enabled targets this agent polls (:func:`in_shard`)."""
        return [t for t in self.enabled_targets() if in_shard(t.name, t.source, self.shard)]

    def target_levels(self) -> dict[str, str]:
        """Exposition level per target name (targets without one use ``exposition.level``)."""
        return {t.name: t.exposition for t in self.targets if t.exposition}


Positions = dict[tuple, tuple[int, int]]  # key path -> (line, column), both 1-based


class ConfigError(Exception):
    """One or more problems in a config file; ``problems`` are ``file:line:column: key: message``."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = problems


@dataclass
class LoadedConfig:
    config: Config
    path: str
    options: dict[str, Any]  # target name -> validated collector options (SourceOptions)
    positions: Positions = field(default_factory=dict)  # key path -> (line, column), for later checks
    warnings: list[str] = field(default_factory=list)  # ``file:line:column: key: warning: ...`` (old spellings)


# --------------------------------------------------------------------- YAML with positions
# A 10,000-target config at about 200 bytes a target is 2 MB: 4 MiB leaves room, and bounds
# what a reload may cost.
MAX_CONFIG_BYTES = 4 << 20
# Aliases are allowed (shared option blocks are a fair use), but together they may add at most
# this many nodes beyond those written in the file: a "billion laughs" file of nine nested
# aliases (about 1 KB) stops here instead of expanding to 10^9 nodes.
ALIAS_NODE_BUDGET = 100_000
_MAP_TAG, _SEQ_TAG, _MERGE_TAG = "tag:yaml.org,2002:map", "tag:yaml.org,2002:seq", "tag:yaml.org,2002:merge"


class _Problem(Exception):
    def __init__(self, mark: Any, loc: tuple, message: str) -> None:
        super().__init__(message)
        self.mark, self.loc, self.message = mark, loc, message


def _nearest_key(text: str, line: int) -> str:
    """The key path around a line, from indentation: YAML that does not parse has no tree."""
    stack: list[tuple[int, str]] = []
    key_re = re.compile(r"^(\s*)(-\s+)?([^\s#:'\"\[\]{}-][^:#]*?|'[^']*'|\"[^\"]*\"):(\s|$)")
    for raw in text.splitlines()[:line]:
        m = key_re.match(raw)
        if not m:
            continue
        indent = len(m.group(1)) + len(m.group(2) or "")
        while stack and stack[-1][0] >= indent:
            stack.pop()
        stack.append((indent, m.group(3).strip("'\"")))
    return ".".join(k for _, k in stack) or "(top level)"


def _yaml_error(exc: yaml.YAMLError, text: str, path: str) -> str:
    if isinstance(exc, yaml.reader.ReaderError):  # a character YAML does not allow (e.g. a NUL byte)
        before = text[:exc.position]
        line, col = before.count("\n") + 1, exc.position - before.rfind("\n")
        char = chr(exc.character) if isinstance(exc.character, int) else exc.character
        problem = f"character {char!r} is not allowed in YAML"
    else:
        mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
        line, col = (mark.line + 1, mark.column + 1) if mark else (1, 1)
        problem = getattr(exc, "problem", None) or str(exc)
    return f"{path}:{line}:{col}: {_nearest_key(text, line)}: invalid YAML: {problem}"


def _count_nodes(root: yaml.Node) -> int:
    """Nodes written in the file (each aliased node once; cycle-safe)."""
    seen: set[int] = set()
    todo = [root]
    while todo:
        n = todo.pop()
        if id(n) in seen:
            continue
        seen.add(id(n))
        if isinstance(n, yaml.MappingNode):
            todo.extend(x for kv in n.value for x in kv)
        elif isinstance(n, yaml.SequenceNode):
            todo.extend(n.value)
    return len(seen)


if yaml.__with_libyaml__:
    from yaml._yaml import CParser

    class _Loader(yaml.composer.Composer, CParser, yaml.resolver.Resolver):  # type: ignore[misc]
        """libyaml's scanner and parser (C), PyYAML's composer (Python): 25x faster than the
        pure-Python loader (a 4 MiB config took 48 s to reload), and unlike libyaml's own
        composer it hands the GIL over between events, so a reload's parse in a thread never
        stalls the event loop."""

        def __init__(self, stream: str) -> None:
            CParser.__init__(self, stream)
            yaml.composer.Composer.__init__(self)
            yaml.resolver.Resolver.__init__(self)
else:  # pragma: no cover - PyYAML built without libyaml
    _Loader = yaml.SafeLoader  # type: ignore[assignment,misc]


def _compose(text: str, path: str) -> tuple[Any, Positions]:
    """Load YAML and remember the position of every key and list item, by path."""
    try:
        root = yaml.compose(text, Loader=_Loader)
    except yaml.YAMLError as exc:
        raise ConfigError([_yaml_error(exc, text, path)]) from None
    except RecursionError:  # the parser recurses once per nesting level
        raise ConfigError([f"{path}:1:1: (top level): nesting too deep"]) from None
    if root is None:
        return {}, {}
    builder = _Builder(_count_nodes(root) + ALIAS_NODE_BUDGET)
    try:
        data = builder.build(root, (), root.start_mark)
    except _Problem as p:
        m = p.mark
        raise ConfigError([f"{path}:{m.line + 1}:{m.column + 1}: {_loc_str(p.loc)}: {p.message}"]) from None
    except RecursionError:  # nesting deeper than the interpreter's stack
        raise ConfigError([f"{path}:1:1: (top level): nesting too deep"]) from None
    if builder.duplicates:  # every duplicate key is reported, not only the first
        raise ConfigError([f"{path}:{m.line + 1}:{m.column + 1}: {_loc_str(loc)}: {message}" for m, loc, message in builder.duplicates])
    return data, builder.positions


class _Builder:
    """Python values from a composed YAML tree, with the position of every key and item, within
    a node budget (aliases included) and refusing recursive aliases, unknown tags and NULs."""

    def __init__(self, budget: int) -> None:
        self.positions: Positions = {}
        self.budget = budget
        self.building: set[int] = set()
        self.scalars = yaml.SafeLoader("")
        self.duplicates: list[tuple[Any, tuple, str]] = []  # (mark, location, message) of every duplicate key

    def scalar(self, n: yaml.Node, loc: tuple) -> Any:
        if "\x00" in n.value:  # YAML's "\0" escape: no path, host, variable or name holds a NUL
            raise _Problem(n.start_mark, loc, "a NUL character (\\0) is not allowed in a value")
        try:
            return self.scalars.construct_object(n, deep=True)
        except yaml.YAMLError as exc:  # an unknown tag such as !!python/object, or a bad !!timestamp
            problem = str(getattr(exc, "problem", None) or exc)
            if "could not determine a constructor" in problem:
                problem = f"unknown tag {n.tag!r}"
            raise _Problem(n.start_mark, loc, problem) from None

    def build(self, n: yaml.Node, loc: tuple, mark: Any) -> Any:
        self.budget -= 1
        if self.budget < 0:
            raise _Problem(mark, loc, f"aliases expand to more than {ALIAS_NODE_BUDGET} extra nodes; refused (a \"billion laughs\" file?)")
        if id(n) in self.building:
            raise _Problem(mark, loc, "recursive alias: a node that contains itself")
        self.positions.setdefault(loc, (n.start_mark.line + 1, n.start_mark.column + 1))
        if isinstance(n, yaml.ScalarNode):
            return self.scalar(n, loc)
        self.building.add(id(n))
        try:
            if isinstance(n, yaml.MappingNode):
                if n.tag != _MAP_TAG:
                    raise _Problem(n.start_mark, loc, f"unknown tag {n.tag!r} on a mapping")
                return self.build_map(n, loc)
            if n.tag != _SEQ_TAG:
                raise _Problem(n.start_mark, loc, f"unknown tag {n.tag!r} on a list")
            return [self.build(v, (*loc, i), v.start_mark) for i, v in enumerate(n.value)]
        finally:
            self.building.discard(id(n))

    def build_map(self, n: yaml.MappingNode, loc: tuple) -> dict[Any, Any]:
        out: dict[Any, Any] = {}
        merged: dict[Any, Any] = {}
        first: dict[Any, int] = {}
        for k, v in n.value:
            if isinstance(k, yaml.ScalarNode) and k.tag == _MERGE_TAG:  # "<<: *defaults": explicit keys win
                merged = {**self.merge(k, v, loc), **merged}
                continue
            if not isinstance(k, yaml.ScalarNode):
                raise _Problem(k.start_mark, loc, "a key must be a plain value, not a list or mapping")
            key = self.scalar(k, loc)
            try:
                hash(key)
            except TypeError:
                raise _Problem(k.start_mark, loc, "a key must be a plain value") from None
            if key in first:
                self.duplicates.append((k.start_mark, (*loc, key), f"duplicate key {key!r} (first at line {first[key]})"))
                continue
            first[key] = k.start_mark.line + 1
            self.positions[(*loc, key)] = (k.start_mark.line + 1, k.start_mark.column + 1)
            out[key] = self.build(v, (*loc, key), k.start_mark)
        return {**merged, **out}

    def merge(self, k: yaml.Node, v: yaml.Node, loc: tuple) -> dict[Any, Any]:
        """The mappings a merge key (``<<``) names, the earlier ones winning."""
        merged: dict[Any, Any] = {}
        for src in v.value if isinstance(v, yaml.SequenceNode) else [v]:
            value = self.build(src, loc, k.start_mark)
            if not isinstance(value, dict):
                raise _Problem(k.start_mark, loc, "a merge key (<<) needs a mapping or a list of mappings")
            merged = {**value, **merged}
        return merged


def _position(positions: Positions, loc: tuple) -> tuple[int, int]:
    for i in range(len(loc), -1, -1):
        if loc[:i] in positions:
            return positions[loc[:i]]
    return (1, 1)


def _loc_str(loc: tuple) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out or "(top level)"


def _at(path: str, positions: Positions, loc: tuple, message: str) -> str:
    line, col = _position(positions, loc)
    return f"{path}:{line}:{col}: {_loc_str(loc)}: {message}"


def did_you_mean(key: Any, allowed: Iterable[str]) -> str:
    """`` (did you mean 'x'?)`` for the allowed name closest to a misspelt ``key``, else ``""``."""
    if not isinstance(key, str):
        return ""
    close = difflib.get_close_matches(key, list(allowed), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _model_in(annotation: Any) -> type[BaseModel] | None:
    """The pydantic model an annotation holds: itself, a list's item, an Optional's value."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in typing.get_args(annotation):
        found = _model_in(arg)
        if found is not None:
            return found
    return None


def _keys_at(model: type[BaseModel], loc: tuple) -> list[str]:
    """The keys the mapping at ``loc`` inside ``model`` may hold (list indexes are skipped)."""
    current: type[BaseModel] | None = model
    for part in loc:
        if isinstance(part, int) or current is None:
            continue
        fields = {f.alias or n: f for n, f in current.model_fields.items()}
        current = _model_in(fields[part].annotation) if part in fields else None
    return [] if current is None else [f.alias or n for n, f in current.model_fields.items()]


def _problems(exc: ValidationError, path: str, lines: Positions, prefix: tuple = (), model: type[BaseModel] | None = None,
              also: Iterable[str] = ()) -> list[str]:
    """``file:line:column: key: message`` per pydantic error; an unknown key names the allowed key
    closest to it (``model``'s keys at that place, and ``also`` beside them)."""
    out = []
    for err in exc.errors():
        loc = tuple("global" if p == "global_" else p for p in (*prefix, *err["loc"]))
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            msg = "unknown key"
            if model is not None:
                msg += did_you_mean(err["loc"][-1], [*_keys_at(model, err["loc"][:-1]), *also])
        out.append(_at(path, lines, loc, msg))
    return out


def position_order(lines: Iterable[str], path: str) -> list[str]:
    """Problems and warnings in the order of the file (line, column); errors before warnings at
    one place, and lines without a position (an unreadable file) first."""
    prefix = re.compile(re.escape(path) + r":(\d+):(\d+): ")

    def key(line: str) -> tuple[int, int, bool]:
        m = prefix.match(line)
        return (int(m.group(1)), int(m.group(2)), ": warning: " in line) if m else (0, 0, False)
    return sorted(lines, key=key)


# --------------------------------------------------------------------- validation
_SECTIONS = {(f.alias or name): name for name, f in Config.model_fields.items()}
_TARGET_FIELDS = set(TargetConfig.model_fields)


@dataclass
class CheckedTarget:
    """A target valid on its own: its place in ``targets:``, generic fields and source options."""

    index: int
    config: TargetConfig
    options: Any  # the collector's SourceOptions


@dataclass
class Checked:
    """What validating a config file found: every problem and warning, and each part that is valid
    on its own, so the checks that need this machine (``check-config``'s preflight: secrets, files,
    the web config) run for every valid target even when another part of the file is wrong."""

    path: str
    data: dict[Any, Any]  # the parsed file, with old spellings taken in
    positions: Positions
    problems: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    sections: dict[str, Any] = field(default_factory=dict)  # section (YAML key) -> its model, when valid
    targets: list[CheckedTarget] = field(default_factory=list)  # valid targets, unique names
    config: Config | None = None  # the whole config, when there is no problem

    def warn(self, loc: tuple, message: str) -> None:
        self.warnings.append(_at(self.path, self.positions, loc, f"warning: {message}"))


def _take_old_spellings(checked: Checked, model: type[BaseModel], raw: dict[Any, Any], loc: tuple) -> dict[Any, Any]:
    """``raw`` with ``model``'s deprecated duration spellings taken in, each warned about at its line."""
    fixed, found = old_spellings(model, raw)
    for key, new, message in found:
        checked.warn((*loc, key), message)
        checked.positions.setdefault((*loc, new), _position(checked.positions, (*loc, key)))
    return fixed


def _validate_target(checked: Checked, i: int, raw: Any) -> tuple[str | None, CheckedTarget | None]:
    """(name, the target when valid) of one target: generic fields and source options are checked
    independently, so a bad name does not hide a typo in an option. The target's entry in
    ``checked.data`` gets the old spellings taken in."""
    path, positions, loc = checked.path, checked.positions, ("targets", i)
    if not isinstance(raw, dict):
        checked.problems.append(_at(path, positions, loc, "a target must be a mapping with name: and source:"))
        return None, None
    raw = checked.data["targets"][i] = _take_old_spellings(checked, TargetConfig, raw, loc)
    before = len(checked.problems)
    generic = None
    try:
        generic = TargetConfig.model_validate(raw)
    except ValidationError as exc:
        checked.problems.extend(_problems(exc, path, positions, loc))
    source, options = raw.get("source"), None
    if isinstance(source, str) and source in collectors.SOURCES:
        try:
            cls = collectors.get(source)
        except collectors.UnknownSource:
            checked.problems.append(_at(path, positions, (*loc, "source"), f"source {source!r} is not available in this installation"))
        else:
            address = raw.get("address")
            wrong = cls.address_problem(address or "") if address is None or isinstance(address, str) else None
            if wrong is not None:  # (an address that is not text is TargetConfig's error)
                checked.problems.append(_at(path, positions, (*loc, "address") if address else loc, wrong))
            raw = checked.data["targets"][i] = _take_old_spellings(checked, cls.options_model, raw, loc)
            extra = {k: v for k, v in raw.items() if k not in _TARGET_FIELDS}
            try:
                options = cls.options_model.model_validate(extra)
            except ValidationError as exc:
                checked.problems.extend(_problems(exc, path, positions, loc, cls.options_model, _TARGET_FIELDS))
    name = raw.get("name")
    valid = generic is not None and options is not None and len(checked.problems) == before
    return (name if isinstance(name, str) else None), (CheckedTarget(i, generic, options) if valid else None)  # type: ignore[arg-type]


def _check_sections(checked: Checked) -> None:
    """Every section but ``targets:`` on its own, keeping the valid ones (defaults for absent ones)."""
    data, path, positions = checked.data, checked.path, checked.positions
    for key in list(data):
        if key not in _SECTIONS:
            checked.problems.append(_at(path, positions, (key,), "unknown key" + did_you_mean(key, _SECTIONS)))
            continue
        model = _model_in(Config.model_fields[_SECTIONS[key]].annotation)
        if model is not None and isinstance(data[key], dict):
            data[key] = _take_old_spellings(checked, model, data[key], (key,))
    defaults = Config()
    for key, name in _SECTIONS.items():
        if key == "targets":
            continue
        if key not in data:
            checked.sections[key] = getattr(defaults, name)
            continue
        try:
            checked.sections[key] = getattr(Config.model_validate({key: data[key]}), name)
        except ValidationError as exc:
            checked.problems.extend(_problems(exc, path, positions, model=Config))


def _check_targets(checked: Checked) -> None:
    targets = checked.data.get("targets") or []
    if not isinstance(targets, list):
        checked.problems.append(_at(checked.path, checked.positions, ("targets",), "targets must be a list"))
        return
    targets = checked.data["targets"] = list(targets)
    first_line: dict[str, int] = {}
    for i, raw in enumerate(targets):
        name, target = _validate_target(checked, i, raw)
        if name is None:
            continue
        if name in first_line:
            checked.problems.append(_at(checked.path, checked.positions, ("targets", i, "name"),
                                        f"duplicate target name {name!r} (first at line {first_line[name]})"))
        else:
            first_line[name] = _position(checked.positions, ("targets", i, "name"))[0]
            if target is not None:
                checked.targets.append(target)


def _take_parameter_spellings(checked: Checked, section: str, models: dict[str, type[BaseModel]]) -> None:
    """The deprecated duration spellings (``window_s: 600``) of the rules' or the analyses'
    parameters taken in, each warned about at its line, as for every other section."""
    block = checked.data.get(section)
    if not isinstance(block, dict):
        return
    block = checked.data[section] = dict(block)
    for name, raw in block.items():
        if name in models and isinstance(raw, dict):
            block[name] = _take_old_spellings(checked, models[name], raw, (section, name))


def check_text(text: str, path: str = "<config>") -> Checked:
    """Validate a config file's text completely: every section, every target, the rules and the
    checks that span sections. Raises ConfigError only when the text is not a YAML mapping at all
    (nothing else can be checked then); every other problem is in the result.

    The cyclic collector is paused meanwhile: the YAML tree and the models hold no cycles
    (reference counting frees them), and its traversals of the tree cost more than half of a
    4 MiB config's load (27 -> 11 s for 40,000 targets, issue 32)."""
    with gc_paused():
        return _check_text(text, path)


def _check_text(text: str, path: str) -> Checked:
    data, positions = _compose(text, path)
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError([f"{path}:1:1: (top level): the config must be a mapping with keys like targets:, global:"])
    checked = Checked(path, dict(data), positions)
    _check_sections(checked)
    _check_targets(checked)
    from fabricmon.agent.detector import analyses, rules  # the detector imports config: import late

    _take_parameter_spellings(checked, "rules", {n: cls.Params for n, cls in rules.RULES.items()})
    _take_parameter_spellings(checked, "detector", {n: analyses.ANALYSES[n].Params for n in analyses.CONFIGURABLE})
    # Each rule's and analysis's parameters by their own models, reported at the key's line.
    for loc, what in [*rules.problems(checked.data.get("rules")), *analyses.problems(checked.data.get("detector"))]:
        checked.problems.extend(_problems(what, path, positions, loc) if isinstance(what, ValidationError)
                                else [_at(path, positions, loc, what)])
    if not checked.problems:
        try:
            checked.config = Config.model_validate(checked.data)
        except ValidationError as exc:  # only checks that span sections are left at this point
            checked.problems.extend(_problems(exc, path, positions, model=Config))
        except (TypeError, ValueError, AttributeError, KeyError) as exc:  # a cross-section validator tripped on a value of the wrong shape
            checked.problems.append(_at(path, positions, (), f"{type(exc).__name__}: {exc}"))
    checked.problems = position_order(checked.problems, path)
    checked.warnings = position_order(checked.warnings, path)
    return checked


def load_text(text: str, path: str = "<config>") -> LoadedConfig:
    """The validated config of a file's text; ConfigError with every problem when there is one."""
    checked = check_text(text, path)
    if checked.problems or checked.config is None:
        raise ConfigError(checked.problems)
    return LoadedConfig(config=checked.config, path=path, options={t.config.name: t.options for t in checked.targets},
                        positions=checked.positions, warnings=checked.warnings)


def decode_config(raw: bytes, path: str) -> str:
    """UTF-8 text of a config file, or a ``file:line:column`` error at the first bad byte."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        before = raw[:exc.start]
        line, col = before.count(b"\n") + 1, exc.start - before.rfind(b"\n")
        raise ConfigError([f"{path}:{line}:{col}: {_nearest_key(before.decode('utf-8', 'replace'), line)}: "
                           f"byte 0x{raw[exc.start]:02x} is not UTF-8 (YAML files are UTF-8 text)"]) from None


def read_config(path: str | Path) -> str:
    """The text of a config file: a regular file of at most ``MAX_CONFIG_BYTES``, opened without
    blocking (a FIFO or a device is refused at once, see :mod:`fabricmon.core.files`)."""
    try:
        raw = read_regular(path, MAX_CONFIG_BYTES, "config")
    except FileRefused as exc:
        raise ConfigError([str(exc)]) from None
    return decode_config(raw, str(path))


def load(path: str | Path) -> LoadedConfig:
    return load_text(read_config(path), str(path))


def check_file(path: str | Path) -> Checked:
    """:func:`check_text` of a file; ConfigError when it cannot be read or is not a YAML mapping."""
    return check_text(read_config(path), str(path))
