"""Configuration: YAML in the spirit of Prometheus' own, validated with pydantic.

Every error names the file, the line and the key (``fabricmon.yml:3: targets[0].source:
unknown source 'snmpp' ...``). Per-source options are validated by the collector's own
options model, so a typo in a UFM option is reported with the line of that option.
Secrets are never required inline: collectors accept ``<name>_file`` and ``<name>_env``.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, field_validator, model_validator

from fabricmon import collectors
from fabricmon.core.model import Link

DEFAULT_LISTEN = "127.0.0.1:10117"

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, None: 1.0}


def parse_duration(v: Any) -> float:
    """``10s``, ``5m``, ``250ms``, ``1.5h`` or a number of seconds."""
    if isinstance(v, bool):
        raise ValueError("expected a duration like 10s, 5m or 250ms")
    if isinstance(v, int | float):
        seconds = float(v)
    else:
        m = _DURATION.match(str(v))
        if not m:
            raise ValueError(f"invalid duration {v!r}: expected a number with a unit, like 10s, 5m or 250ms")
        seconds = float(m.group(1)) * _UNITS[m.group(2)]
    if seconds < 0:
        raise ValueError("a duration cannot be negative")
    return seconds


Duration = Annotated[float, BeforeValidator(parse_duration)]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class GlobalConfig(Strict):
    poll_interval: Duration = 10.0
    poll_timeout: Duration = 8.0
    jitter: float = Field(0.1, ge=0.0, le=1.0, description="fraction of the interval used to spread targets")
    max_concurrency: int = Field(64, ge=1)
    backoff_max: Duration = 300.0
    stale_after: Duration = 600.0
    history: int = Field(8, ge=2, le=1000)
    state_dir: str | None = None


class WebConfig(Strict):
    listen_address: str = DEFAULT_LISTEN
    config_file: str | None = None  # exporter-toolkit web config (TLS, basic auth)


class RecordingConfig(Strict):
    path: str | None = None


class DetectorConfig(Strict):
    min_interval: Duration = 0.0  # coalesce detection passes, on the poll clock


class ShardConfig(Strict):
    """This agent's share of the targets: ``index`` of ``count`` agents (see docs/scaling.md)."""

    index: int = Field(0, ge=0)
    count: int = Field(1, ge=1)

    @model_validator(mode="after")
    def _in_range(self) -> ShardConfig:
        if self.index >= self.count:
            raise ValueError(f"shard index {self.index} must be below count {self.count}")
        return self


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


def splits_itself(options: Any) -> bool:
    """Sources with their own shard parameters (UFM Telemetry) are split by them, not by name."""
    return hasattr(options, "num_shards") and hasattr(options, "shard")


def shard_options(options: Any, shard: ShardConfig) -> Any:
    """Options of a self-sharding source for this agent: its shard ``index`` of ``count``."""
    if shard.count <= 1 or not splits_itself(options):
        return options
    return options.model_copy(update={"num_shards": shard.count, "shard": shard.index})


class StaticLink(Strict):
    device: str
    port: str
    peer_device: str
    peer_port: str


class TargetConfig(BaseModel):
    """A target: generic fields here, source options validated by the collector."""

    model_config = ConfigDict(extra="allow")

    name: str = Field(min_length=1)
    source: str
    address: str = ""
    interval: Duration | None = None
    timeout: Duration | None = None
    enabled: bool = True
    exposition: Level | None = None  # None: the global exposition level

    @field_validator("source")
    @classmethod
    def _known_source(cls, v: str) -> str:
        if v not in collectors.SOURCES:
            raise ValueError(f"unknown source {v!r}; known sources: {', '.join(collectors.SOURCES)}")
        return v

    @property
    def source_options(self) -> dict[str, Any]:
        return dict(self.model_extra or {})


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

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    @model_validator(mode="after")
    def _unique_names(self) -> Config:
        seen: set[str] = set()
        for t in self.targets:
            if t.name in seen:
                raise ValueError(f"duplicate target name {t.name!r}")
            seen.add(t.name)
        return self

    def static_links(self) -> list[Link]:
        return [Link(ln.device, ln.port, ln.peer_device, ln.peer_port) for ln in self.links]

    def enabled_targets(self) -> list[TargetConfig]:
        return [t for t in self.targets if t.enabled and self.collectors.get(t.source, True)]

    def shard_targets(self, options: dict[str, Any]) -> list[TargetConfig]:
        """The enabled targets this agent polls: its hash share, plus every self-sharding one."""
        n, i = self.shard.count, self.shard.index
        return [t for t in self.enabled_targets()
                if n <= 1 or splits_itself(options.get(t.name)) or shard_of(t.name, n) == i]

    def target_levels(self) -> dict[str, str]:
        """Exposition level per target name (targets without one use ``exposition.level``)."""
        return {t.name: t.exposition for t in self.targets if t.exposition}


class ConfigError(Exception):
    """One or more problems in a config file; ``problems`` are ``file:line: key: message``."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = problems


@dataclass
class LoadedConfig:
    config: Config
    path: str
    options: dict[str, Any]  # target name -> validated collector options (SourceOptions)


# --------------------------------------------------------------------- YAML + line numbers
def _compose(text: str, path: str) -> tuple[Any, dict[tuple, int]]:
    """Load YAML and remember the line of every key and list item, by path."""
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark else 0
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError([f"{path}:{line}: invalid YAML: {problem}"]) from None
    lines: dict[tuple, int] = {}
    scalars = yaml.SafeLoader("")

    def build(n: yaml.Node, loc: tuple) -> Any:
        lines.setdefault(loc, n.start_mark.line + 1)
        if isinstance(n, yaml.MappingNode):
            out = {}
            for k, v in n.value:
                key = scalars.construct_object(k) if isinstance(k, yaml.ScalarNode) else str(k.value)
                lines[(*loc, key)] = k.start_mark.line + 1
                out[key] = build(v, (*loc, key))
            return out
        if isinstance(n, yaml.SequenceNode):
            return [build(v, (*loc, i)) for i, v in enumerate(n.value)]
        return scalars.construct_object(n, deep=True)

    if node is None:
        return {}, lines
    return build(node, ()), lines


def _line_for(lines: dict[tuple, int], loc: tuple) -> int:
    for i in range(len(loc), -1, -1):
        if loc[:i] in lines:
            return lines[loc[:i]]
    return 0


def _loc_str(loc: tuple) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out or "(top level)"


def _problems(exc: ValidationError, path: str, lines: dict[tuple, int], prefix: tuple = ()) -> list[str]:
    out = []
    for err in exc.errors():
        loc = tuple("global" if p == "global_" else p for p in (*prefix, *err["loc"]))
        # pydantic may append the validator's function name for "after" validators; drop non-keys
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            msg = "unknown key"
        out.append(f"{path}:{_line_for(lines, loc)}: {_loc_str(loc)}: {msg}")
    return out


def load_text(text: str, path: str = "<config>") -> LoadedConfig:
    data, lines = _compose(text, path)
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError([f"{path}:1: the config must be a mapping with keys like targets:, global:"])
    problems: list[str] = []
    try:
        config = Config.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_problems(exc, path, lines)) from None
    options: dict[str, Any] = {}
    for i, target in enumerate(config.targets):
        try:
            cls = collectors.get(target.source)
        except collectors.UnknownSource:
            problems.append(f"{path}:{_line_for(lines, ('targets', i, 'source'))}: targets[{i}].source: "
                            f"source {target.source!r} is not available in this installation")
            continue
        try:
            options[target.name] = cls.options_model.model_validate(target.source_options)
        except ValidationError as exc:
            problems.extend(_problems(exc, path, lines, ("targets", i)))
    # Rules: names and parameters are checked by building them.
    from fabricmon.agent.detector import rules as rules_mod

    try:
        rules_mod.build(config.rules)
    except (ValueError, TypeError) as exc:
        problems.append(f"{path}:{_line_for(lines, ('rules',))}: rules: {exc}")
    if problems:
        raise ConfigError(problems)
    return LoadedConfig(config=config, path=path, options=options)


def load(path: str | Path) -> LoadedConfig:
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError([f"{p}:0: cannot read config: {exc.strerror or exc}"]) from None
    return load_text(text, str(p))
