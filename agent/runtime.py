"""The live agent: config -> collectors -> scheduler -> pipeline -> exporter, with reload.

SIGHUP (or ``POST /-/reload`` with ``--web.enable-lifecycle``) reloads atomically: the new file is validated completely
first; a bad one keeps the old config running and sets
``fabricmon_config_last_reload_successful 0``. SIGTERM/SIGINT stop: polls are cancelled
(collectors kill their subprocesses), the recording is flushed and closed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import time
from typing import Any

from fabricmon import collectors
from fabricmon.agent import state, systemd
from fabricmon.agent.config import ConfigError, LoadedConfig, TargetConfig, load, shard_options
from fabricmon.agent.detector import rules as rules_mod
from fabricmon.agent.exporter import connections
from fabricmon.agent.exporter.exposition import Family
from fabricmon.agent.exporter.metrics import ExpositionPolicy, state_family
from fabricmon.agent.exporter.server import Exporter, make_app, start_server
from fabricmon.agent.jobs.stage import JobStage
from fabricmon.agent.pipeline import Pipeline
from fabricmon.agent.recording import RecordingWriter
from fabricmon.agent.scheduler import ScheduledTarget, Scheduler
from fabricmon.core.model import TargetSpec

log = logging.getLogger(__name__)


def _make_collector(loaded: LoadedConfig, t: TargetConfig) -> collectors.Collector:
    cls = collectors.get(t.source)
    return cls(t.name, t.address, shard_options(loaded.options[t.name], loaded.config.shard))


def _scheduled(loaded: LoadedConfig, t: TargetConfig) -> ScheduledTarget:
    g = loaded.config.global_
    return ScheduledTarget(_make_collector(loaded, t), t.interval or g.poll_interval, t.timeout or g.poll_timeout)


def _fingerprint(loaded: LoadedConfig, t: TargetConfig) -> Any:
    return (t.model_dump_json(), shard_options(loaded.options[t.name], loaded.config.shard).model_dump_json())


def _policy(cfg: Any) -> ExpositionPolicy:
    return ExpositionPolicy(level=cfg.exposition.level, groups=dict(cfg.exposition.groups), targets=cfg.target_levels(),
                            shard_index=cfg.shard.index, shard_count=cfg.shard.count)


class Agent:
    def __init__(self, loaded: LoadedConfig, listen: str | None = None, record_path: str | None = None,
                 duration: float | None = None, ssl_context=None, middlewares: list | None = None,
                 enable_lifecycle: bool = False) -> None:
        self.loaded = loaded
        self.enable_lifecycle = enable_lifecycle  # POST /-/reload only with --web.enable-lifecycle, as in Prometheus
        self.listen = listen if listen is not None else loaded.config.web.listen_address
        self.record_path = record_path or loaded.config.recording.path
        self.duration = duration
        self.ssl_context = ssl_context
        self.middlewares = middlewares or []
        self.stop_event = asyncio.Event()
        self.reload_lock = asyncio.Lock()

    def _specs(self, loaded: LoadedConfig) -> list[TargetSpec]:
        return [_make_collector(loaded, t).spec() for t in loaded.config.shard_targets(loaded.options)]

    async def run(self) -> None:
        loaded = self.loaded
        cfg = loaded.config
        specs = self._specs(loaded)
        recorder = RecordingWriter(self.record_path, specs, description="fabricmon record") if self.record_path else None
        self.pipeline = Pipeline(
            specs, rules_mod.build(cfg.rules), history=cfg.global_.history, stale_after=cfg.global_.stale_after,
            static_links=cfg.static_links(), detect_min_interval=cfg.detector.min_interval, recorder=recorder, wall_clock=True,
            exposition_policy=_policy(cfg), fabric=cfg.fabric.priority_map(), jobs=JobStage.of(cfg.jobs),
        )
        self.exporter = Exporter(self.pipeline, extra_families=self._scheduler_families)
        self.exporter.reload_hook = self.reload if self.enable_lifecycle else None
        state_dir = state.default_state_dir(cfg.global_.state_dir)
        keeper = state.StateKeeper(state.state_path(state_dir), self.pipeline.store, self.pipeline.detector) if state_dir else None
        self.keeper = keeper
        if keeper is not None:
            keeper.load()
            keeper.start()
        self.exporter.render_now()
        self.scheduler = Scheduler(self._on_poll, cfg.global_.max_concurrency, cfg.global_.jitter, cfg.global_.backoff_max)
        self._fingerprints = {t.name: _fingerprint(loaded, t) for t in cfg.shard_targets(loaded.options)}
        self.scheduler.start([_scheduled(loaded, t) for t in cfg.shard_targets(loaded.options)])
        runner = None
        if self.listen:
            runner = await start_server(make_app(self.exporter, self.middlewares), self.listen, self.ssl_context)
            log.info("serving /metrics on %s://%s", "https" if self.ssl_context else "http", self.listen)
        loop = asyncio.get_running_loop()
        for sig, handler in ((signal.SIGHUP, lambda: asyncio.ensure_future(self.reload())),
                             (signal.SIGTERM, self.stop_event.set), (signal.SIGINT, self.stop_event.set)):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(sig, handler)
        systemd.notify("READY=1", f"STATUS=polling {len(self.scheduler.targets)} targets")
        watchdog = asyncio.create_task(systemd.watchdog_loop(self._healthy))
        try:
            if self.duration:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.stop_event.wait(), self.duration)
            else:
                await self.stop_event.wait()
        finally:
            systemd.notify("STOPPING=1")
            watchdog.cancel()
            await self.scheduler.stop()
            if keeper is not None:
                await keeper.close()
            if recorder is not None:
                recorder.close()
            if runner is not None:
                await runner.cleanup()

    def _scheduler_families(self) -> list[Family]:
        restarts = Family("fabricmon_scheduler_task_restarts_total", "counter",
                          "Poll tasks that died of an internal error and were restarted (the target shows down meanwhile).")
        scheduler = getattr(self, "scheduler", None)
        restarts.add("", scheduler.restarts if scheduler is not None else 0)
        keeper = getattr(self, "keeper", None)
        saves = [state_family(keeper.save_errors)] if keeper is not None else []
        return [restarts, *saves, *(connections.families() if self.listen else [])]

    def _healthy(self) -> bool:
        return not self.stop_event.is_set() and all(not t.done() for t in self.scheduler.tasks.values())

    def _on_poll(self, poll) -> bool:
        ok = self.pipeline.ingest(poll)
        self.exporter.request_render()
        return ok

    async def reload(self) -> bool:
        """Validate the config file again, then swap targets and rules. False keeps the old one."""
        async with self.reload_lock:
            systemd.notify("RELOADING=1", f"MONOTONIC_USEC={int(time.monotonic() * 1e6)}")
            try:
                return await self._reload()
            finally:
                systemd.notify("READY=1")

    async def _reload(self) -> bool:
        for cls in collectors.loaded_classes():
            cls.reset_caches()
        try:
            new = await asyncio.to_thread(load, self.loaded.path)  # parsing a big file must not stall the loop
            rules = rules_mod.build(new.config.rules)
            mine = new.config.shard_targets(new.options)
            fresh = {t.name: _fingerprint(new, t) for t in mine}
            built = {t.name: _scheduled(new, t) for t in mine if self._fingerprints.get(t.name) != fresh[t.name]}
            for mw in self.middlewares:  # the web config (TLS, basic auth) is re-read too; it commits last
                if hasattr(mw, "reload"):
                    mw.reload()
        except (ConfigError, ValueError, OSError) as exc:
            log.error("reload failed, keeping the running config: %s", exc)
            self.exporter.reload_ok = False
            self.exporter.request_render()
            return False
        for name in list(self.scheduler.targets):
            if name not in fresh or name in built:
                await self.scheduler.remove(name)
        for target in built.values():
            self.scheduler.add(target)
        self.pipeline.set_targets(self._specs(new))
        self.pipeline.detector.rules = rules
        self.pipeline.fabric = new.config.fabric.priority_map()
        self.pipeline.jobs.configure(new.config.jobs)
        self.pipeline.topology.set_static(new.config.static_links())
        self.pipeline.exposition_policy = _policy(new.config)
        self._fingerprints = fresh
        self.loaded = new
        self.exporter.reload_ok = True
        self.exporter.reload_t = time.time()
        self.exporter.request_render()
        log.info("configuration reloaded from %s: %d targets (%d restarted)", new.path, len(fresh), len(built))
        return True
