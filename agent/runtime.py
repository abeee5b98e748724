"""The live agent: config -> collectors -> scheduler -> pipeline -> exporter, with reload.

SIGHUP (or ``POST /-/reload`` with ``--web.enable-lifecycle``) reloads atomically: the new file is validated completely
first; a bad one keeps the old config running and sets
``fabricmon_config_last_reload_successful 0``. SIGTERM/SIGINT stop: polls are cancelled
(collectors kill their subprocesses), the state is saved, the recording is flushed and closed.

The event loop only does I/O: ingest (record, parse, store, detect), renders, the state
snapshot and a reload's changes to the pipeline are jobs on the pipeline worker
(agent/worker.py), and files are read in threads.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import time

from fabricmon import collectors
from fabricmon.agent import state, systemd
from fabricmon.agent.assemble import build_pipeline, plan_targets, settings
from fabricmon.agent.config import ConfigError, LoadedConfig, load
from fabricmon.agent.exporter import connections
from fabricmon.agent.exporter.exposition import Family
from fabricmon.agent.exporter.server import Exporter, make_app, start_server
from fabricmon.agent.looplag import LoopLag
from fabricmon.agent.recording import RecordingWriter
from fabricmon.agent.scheduler import Scheduler
from fabricmon.agent.worker import PipelineWorker

log = logging.getLogger(__name__)


class Agent:
    def __init__(self, loaded: LoadedConfig, listen: str | None = None, record_path: str | None = None,
                 duration: float | None = None, ssl_context=None, middlewares: list | None = None,
                 enable_lifecycle: bool = False, keep_state: bool = True) -> None:
        self.loaded = loaded
        self.enable_lifecycle = enable_lifecycle  # POST /-/reload only with --web.enable-lifecycle, as in Prometheus
        self.listen = listen if listen is not None else loaded.config.web.listen_address
        self.record_path = record_path or loaded.config.recording.path
        self.duration = duration
        self.ssl_context = ssl_context
        self.middlewares = middlewares or []
        self.stop_event = asyncio.Event()
        self.reload_lock = asyncio.Lock()
        g = loaded.config.global_
        self.scheduler = Scheduler(self._on_poll, g.max_concurrency, g.jitter, g.backoff_max)
        self.keeper: state.StateKeeper | None = None  # with a state_dir, from run()
        self.recorder: RecordingWriter | None = None  # with a recording path, from run()
        self.keep_state = keep_state  # False for `fabricmon record`: the daemon's state file is not its to restore or write

    async def run(self) -> None:
        loaded = self.loaded
        cfg = loaded.config
        planned = plan_targets(loaded)  # this shard's targets, once per start
        specs = [t.spec for t in planned]
        self.recorder = recorder = RecordingWriter(self.record_path, specs, description="fabricmon record") if self.record_path else None
        self.pipeline = build_pipeline(cfg, specs, recorder=recorder, wall_clock=True, exposition=True)
        self.worker = worker = PipelineWorker()
        state_dir = state.default_state_dir(cfg.global_.state_dir) if self.keep_state else None
        keeper = state.StateKeeper(state.state_path(state_dir), self.pipeline.store, self.pipeline.detector,
                                   run=worker.read) if state_dir else None
        self.keeper = keeper
        self.exporter = Exporter(self.pipeline, extra_families=self.families, worker=worker)
        self.exporter.reload_hook = self.reload if self.enable_lifecycle else None
        self.exporter.loop_lag = lag = LoopLag().start()
        if keeper is not None:
            await worker.call(keeper.load)  # restores into the store: a job of the worker
            keeper.start()
        self.exporter.request_render()  # on the worker: a scrape meanwhile gets the self metrics, never waits
        self._fingerprints = {t.spec.name: t.fingerprint for t in planned}
        self.scheduler.start([t.scheduled() for t in planned])  # each collector built here, once
        runner = None
        if self.listen:
            runner = await start_server(make_app(self.exporter, self.middlewares), self.listen, self.ssl_context)
            log.info("serving /metrics on %s://%s", "https" if self.ssl_context else "http", self.listen)
        loop = asyncio.get_running_loop()
        for sig, handler in ((signal.SIGHUP, lambda: asyncio.ensure_future(self.reload())),
                             (signal.SIGTERM, self.stop_event.set), (signal.SIGINT, self.stop_event.set)):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(sig, handler)
        systemd.notify("READY=1", f"STATUS=polling {self.scheduler.status().targets} targets")
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
            self.exporter.stop_rendering()
            # The final state save starts now, beside the polls' cancellation: both within the stop budget.
            final_save = asyncio.ensure_future(keeper.close()) if keeper is not None else None
            await self.scheduler.stop()
            if final_save is not None:
                await final_save
            if recorder is not None:
                with contextlib.suppress(TimeoutError):
                    await worker.call(recorder.close, timeout=1.0)
            if runner is not None:
                await runner.cleanup()
            lag.stop()
            worker.close()

    def families(self) -> list[Family]:
        """The live agent's components' own families, after the pipeline's on /metrics: the
        scheduler's, the state file's (with a state_dir), the recording's (when recording) and the
        HTTP listener's (when serving)."""
        keeper = self.keeper.families() if self.keeper is not None else []
        recording = self.recorder.families() if self.recorder is not None else []
        return [*self.scheduler.families(), *keeper, *recording, *(connections.STATS.families() if self.listen else [])]

    def _healthy(self) -> bool:
        return not self.stop_event.is_set() and all(not t.done() for t in self.scheduler.tasks.values())

    async def _on_poll(self, poll) -> bool:
        ok = await self.worker.call(self.pipeline.ingest, poll)
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
            configured = settings(new.config, exposition=True)
            planned = plan_targets(new)
            fresh = {t.spec.name: t.fingerprint for t in planned}
            # only new and changed targets get a (new) collector; the others keep theirs
            built = {t.spec.name: t.scheduled() for t in planned if self._fingerprints.get(t.spec.name) != fresh[t.spec.name]}
            # The web config (TLS, basic auth) is re-read too, in a thread; it commits last.
            commits = [await asyncio.to_thread(mw.prepare) for mw in self.middlewares if hasattr(mw, "prepare")]
        except (ConfigError, ValueError, OSError) as exc:
            log.error("reload failed, keeping the running config: %s", exc)
            self.exporter.reload_ok = False
            self.exporter.request_render()
            return False
        for commit in commits:
            commit()
        for name in list(self.scheduler.targets):
            if name not in fresh or name in built:
                await self.scheduler.remove(name)
        for target in built.values():
            self.scheduler.add(target)
        specs = [t.spec for t in planned]

        def apply() -> None:  # on the pipeline worker: never while a poll is ingested or rendered
            self.pipeline.set_targets(specs)
            self.pipeline.reconfigure(**configured)

        await self.worker.call(apply)
        self._fingerprints = fresh
        self.loaded = new
        self.exporter.reload_ok = True
        self.exporter.reload_t = time.time()
        self.exporter.request_render()
        for w in new.warnings:  # deprecated spellings, as at start
            log.warning("%s", w)
        log.info("configuration reloaded from %s: %d targets (%d restarted)", new.path, len(fresh), len(built))
        return True
