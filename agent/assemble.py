"""Putting the agent together from a config: the one way to build a pipeline, and this
shard's targets with their collectors.

Every command that runs polls through the detector builds its :class:`Pipeline` here:
``run``/``record`` (:mod:`fabricmon.agent.runtime`), ``replay``, ``eval`` and ``demo``
(:mod:`fabricmon.agent.replay`), ``audit`` (:mod:`fabricmon.agent.audit`) and the benchmarks.
Without a config a pipeline gets the config model's defaults (``Config()``), so a replay
without ``--config.file`` runs exactly as an agent whose config sets nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from fabricmon import collectors
from fabricmon.agent.config import Config, LoadedConfig, TargetConfig
from fabricmon.agent.detector import rules as rules_mod
from fabricmon.agent.exporter.metrics import ExpositionPolicy
from fabricmon.agent.pipeline import Pipeline
from fabricmon.agent.recording import RecordingWriter
from fabricmon.agent.scheduler import ScheduledTarget
from fabricmon.core.model import Finding, TargetSpec


def settings(cfg: Config, exposition: bool = False) -> dict[str, Any]:
    """What a config sets in a pipeline, as :meth:`Pipeline.reconfigure` takes it (a reload
    applies the same): rules, the analyses' parameters (``detector: {pfc:, ib:}``), the
    ``fabric:`` layout, static links, detection coalescing, the ``jobs:`` settings and, with ``exposition`` (a live
    agent), the export levels and shard. Without it everything is exported in full and no shard
    info is shown, so a replay's /metrics is the same whatever shard or levels its config names."""
    policy = ExpositionPolicy(level=cfg.exposition.level, groups=dict(cfg.exposition.groups), targets=cfg.target_levels(),
                              shard_index=cfg.shard.index, shard_count=cfg.shard.count) if exposition else None
    return {"rules": rules_mod.build(cfg.rules), "analyses": cfg.detector.analyses(), "fabric": cfg.fabric.priority_map(),
            "static_links": cfg.static_links(), "detect_min_interval": cfg.detector.min_interval, "exposition_policy": policy,
            "jobs": cfg.jobs}


def build_pipeline(config: Config | None, specs: Iterable[TargetSpec], *, recorder: RecordingWriter | None = None,
                   on_finding_end: Callable[[Finding], None] | None = None, wall_clock: bool = False,
                   max_targets: int | None = None, exposition: bool = False) -> Pipeline:
    """The pipeline for ``specs`` under ``config`` (None: the config model's defaults).

    ``wall_clock``: ages against the wall clock (a live agent, a live audit) instead of the
    recording's; ``max_targets``: refuse polls of new targets beyond that many (a replay's
    limit); ``exposition``: see :func:`settings`."""
    cfg = config if config is not None else Config()
    limit = {} if max_targets is None else {"max_targets": max_targets}
    return Pipeline(specs, history=cfg.global_.history, stale_after=cfg.global_.stale_after, recorder=recorder,
                    on_finding_end=on_finding_end, wall_clock=wall_clock, **limit, **settings(cfg, exposition))


@dataclass(frozen=True, slots=True)
class PlannedTarget:
    """One target of this agent: its spec (known without a collector) and how to build its
    collector, with its options for this agent's shard."""

    config: TargetConfig
    cls: type[collectors.Collector]
    options: collectors.SourceOptions
    spec: TargetSpec
    interval: float
    timeout: float

    @property
    def fingerprint(self) -> str:
        """What a reload compares: a target whose fingerprint is unchanged keeps its collector."""
        return self.config.model_dump_json() + self.options.model_dump_json()

    def scheduled(self) -> ScheduledTarget:
        """The target's collector, built now, on its interval and timeout."""
        return ScheduledTarget(self.cls(self.config.name, self.config.address, self.options), self.interval, self.timeout)


def plan_targets(loaded: LoadedConfig) -> list[PlannedTarget]:
    """The targets this agent polls (:meth:`Config.shard_targets`, once), each with its
    source's options for this shard (:meth:`Collector.shard_options`). No collector is built
    here: :meth:`PlannedTarget.scheduled` builds it, once, when it is to be polled."""
    cfg = loaded.config
    g = cfg.global_
    out = []
    for t in cfg.shard_targets():
        cls = collectors.get(t.source)
        options = cls.shard_options(loaded.options[t.name], cfg.shard.index, cfg.shard.count)
        out.append(PlannedTarget(t, cls, options, cls.target_spec(t.name, options), t.interval or g.poll_interval,
                                 t.timeout or g.poll_timeout))
    return out
