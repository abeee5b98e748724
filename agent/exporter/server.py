"""HTTP server: /metrics (pre-rendered), /healthz, /ready, /api/targets, and the web view (agent/web).

``/metrics`` never renders the fabric: it serves the body the :class:`Exporter` rendered
after the last change (a poll finishing), gzip-compressed when the client accepts it, in
Prometheus text or OpenMetrics by content negotiation. Only a few lines are rendered per
scrape and appended: the process's own metrics (``process_*``, ``python_gc_*``,
``python_info``, by prometheus_client's collectors), ``fabricmon_exposition_ready`` (0 until
the first render of the fabric is done) and the event-loop lag (agent/looplag.py).

With a :class:`~fabricmon.agent.worker.PipelineWorker` (the live agent), renders run on the
worker and the handlers read only what a render published (the body, the ``/api/targets``
snapshot, the ready state): a scrape never waits for a render and never sees the pipeline
half-updated. Without one (replay, the demo, tests) everything runs on the loop, as before.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web
from aiohttp.abc import AbstractStreamWriter
from aiohttp.payload import Payload
from prometheus_client import CollectorRegistry, GCCollector, PlatformCollector, ProcessCollector
from prometheus_client import generate_latest as text_latest
from prometheus_client.openmetrics.exposition import generate_latest as openmetrics_latest

from fabricmon.agent.exporter import connections, metrics
from fabricmon.agent.exporter.exposition import (
    EMPTY,
    EOF,
    OPENMETRICS_CONTENT_TYPE,
    TEXT_CONTENT_TYPE,
    Exposition,
    Family,
    build,
    pieces,
)
from fabricmon.agent.gcpause import gc_paused
from fabricmon.agent.looplag import LoopLag
from fabricmon.agent.pipeline import Pipeline
from fabricmon.agent.web import routes as web_routes
from fabricmon.agent.web.cache import WebCache
from fabricmon.agent.worker import PipelineWorker

log = logging.getLogger(__name__)


def process_registry() -> CollectorRegistry:
    """prometheus_client's process, GC and platform collectors in a registry of their own
    (not the global one, so nothing else registered in this process leaks into /metrics)."""
    reg = CollectorRegistry(auto_describe=True)
    ProcessCollector(registry=reg)
    GCCollector(registry=reg)
    PlatformCollector(registry=reg)
    return reg


class ChunksPayload(Payload):
    """A response body sent as the parts it is held in, never joined whole: no copy of the
    body per scrape, and the transport's buffer stays one piece deep (:func:`pieces`: each
    ``write`` of at most ``exposition.WRITE_SLICE`` bytes waits for the socket to drain)."""

    _autoclose = True  # bytes in memory, nothing to close

    def __init__(self, chunks: list[bytes], content_type: str) -> None:
        super().__init__(chunks, content_type=content_type)
        self._nbytes = sum(len(c) for c in chunks)

    @property
    def size(self) -> int:
        """The Content-Length aiohttp sends."""
        return self._nbytes

    def decode(self, encoding: str = "utf-8", errors: str = "strict") -> str:
        return b"".join(self._value).decode(encoding, errors)

    async def write(self, writer: AbstractStreamWriter) -> None:
        for piece in pieces(self._value):
            await writer.write(piece)


class Exporter:
    """Owns the current exposition; re-renders (coalesced) when the pipeline changed.

    Without a worker, the previous body is dropped before the next is built, so a render holds
    one body, not two (nothing can scrape while the loop renders anyway). With a worker the
    previous body is served until the next is ready: a scrape never sees the fabric series
    vanish for one render. A render that fails (a bug) keeps the previous body.
    """

    def __init__(self, pipeline: Pipeline, extra_families: Callable[[], list[Family]] | None = None, demo: bool = False,
                 worker: PipelineWorker | None = None) -> None:
        self.pipeline = pipeline
        self.demo = demo  # `fabricmon demo`: a banner on / and fabricmon_demo 1, so made-up findings are never mistaken
        self.exposition: Exposition = EMPTY
        self.reload_ok = True
        self.reload_t = time.time()
        self.extra_families = extra_families
        self.worker = worker
        self.loop_lag: LoopLag | None = None  # the live agent's monitor, rendered per scrape
        self.rendered = False  # a render of the fabric finished at least once (fabricmon_exposition_ready)
        self._scheduled = False
        self._dirty = False
        self._stopping = False
        self._last_render_end = 0.0
        self._targets_json = b"[]\n"  # /api/targets as of the last render (worker mode)
        self._waiting: list[str] | None = None  # /ready as of the last render: None once ready
        self.reload_hook: Callable[[], Awaitable[bool]] | None = None
        self.web = WebCache(pipeline, demo, worker)  # /, /fabric, /api/findings: rendered here, after each pass
        self.process = process_registry()

    def process_tail(self, openmetrics: bool) -> bytes:
        """What is rendered per scrape (a few lines) for the end of its body: the process
        metrics, ``fabricmon_exposition_ready`` and the event-loop lag."""
        own = (f"# HELP fabricmon_exposition_ready 1 once the first render of the fabric is done; 0 while only "
               f"these self metrics are served.\n# TYPE fabricmon_exposition_ready gauge\n"
               f"fabricmon_exposition_ready {int(self.rendered)}\n")
        if self.loop_lag is not None:
            own += self.loop_lag.text()
        if openmetrics:
            return openmetrics_latest(self.process).removesuffix(EOF) + own.encode()
        return text_latest(self.process) + own.encode()

    def render_now(self) -> Exposition:
        t0 = time.perf_counter()
        last_render_s = self.exposition.render_seconds
        if self.worker is None:
            self.exposition = Exposition(EMPTY.body, self.exposition.generation, self.exposition.rendered_at, last_render_s)
        with gc_paused():  # millions of short-lived objects, no cycles: see agent/gcpause.py
            extra = self.extra_families() if self.extra_families else []
            if self.demo:
                extra = [metrics.demo_family(), *extra]
            fams = metrics.all_families(self.pipeline, self.reload_ok, self.reload_t, last_render_s, extra)
            body = build(fams)
            del fams
        try:
            with gc_paused():
                self.web.render()
        except Exception:  # a page bug must not stop /metrics; the previous pages stay
            log.exception("rendering the web pages failed; serving the previous ones")
        if self.worker is not None:
            self._targets_json = json.dumps(targets_json(self.pipeline)).encode()
            self._waiting = waiting_for(self.pipeline)
        self.exposition = Exposition(body, self.pipeline.generation, time.time(), time.perf_counter() - t0)
        self.rendered = True
        self._last_render_end = time.monotonic()
        return self.exposition

    def targets_body(self) -> bytes:
        """``/api/targets``: the last render's snapshot with a worker, else built now."""
        if self.worker is not None:
            return self._targets_json
        return json.dumps(targets_json(self.pipeline)).encode()

    def waiting(self) -> list[str] | None:
        """Targets without a first poll (``/ready``), or None when ready."""
        if self.worker is not None:
            return self._waiting if self.rendered else []
        return waiting_for(self.pipeline)

    def request_render(self) -> None:
        """Render soon, once, however many polls finish meanwhile.

        A render costs as long as it takes (seconds on a fabric of millions of series), so the
        next one waits at least that long after the previous ended: rendering never takes more
        than half the time of the thread it runs on (the loop, or the pipeline worker) from the
        polls.
        """
        if self._stopping:
            return
        if self._scheduled:
            self._dirty = True
            return
        self._scheduled = True
        wait = self._last_render_end + self.exposition.render_seconds - time.monotonic()
        asyncio.get_running_loop().call_later(max(0.0, wait), self._render_scheduled)

    def stop_rendering(self) -> None:
        """No render after this one (the agent is stopping: the CPU goes to the final state save)."""
        self._stopping = True

    def _render_scheduled(self) -> None:
        if self._stopping:
            return
        if self.worker is None:
            self._scheduled = False
            self._render_safely()
            return
        self._dirty = False
        loop = asyncio.get_running_loop()
        fut = self.worker.submit(self._render_safely, mutates=False)  # reads the pipeline only
        fut.add_done_callback(lambda _f: loop.call_soon_threadsafe(self._rendered))

    def _rendered(self) -> None:
        self._scheduled = False
        if self._dirty:
            self._dirty = False
            self.request_render()

    def _render_safely(self) -> None:
        if self._stopping:
            return
        try:
            self.render_now()
        except Exception:  # never let a rendering bug take the agent down; keep serving the last body
            log.exception("rendering the exposition failed; serving the previous one")



def targets_json(p: Pipeline) -> list[dict[str, Any]]:
    """``/api/targets``: every target's status, sorted by name."""
    now = p.now()
    return [p.targets[name].to_json(now) for name in sorted(p.targets)]


def waiting_for(p: Pipeline) -> list[str] | None:
    """None when the pipeline is ready (one poll cycle done), else the targets still waiting."""
    if p.ready:
        return None
    return sorted(n for n, s in p.targets.items() if s.polls == 0)


RELOAD_NEEDS_HEADER = ("POST /-/reload needs an X-Requested-With header or Content-Type: application/json "
                       "(a cross-site form post cannot send either)\n")


def _non_simple(request: web.Request) -> bool:
    """A request a browser sends cross-origin only after a CORS preflight, which this server never answers.

    A form or ``fetch`` with a CORS-"simple" request (Fetch standard) cannot add custom headers or a JSON
    content type, so a page on another origin cannot trigger a reload through a user's browser.
    """
    ctype = request.headers.get("Content-Type", "").split(";")[0].strip().lower()
    return "X-Requested-With" in request.headers or ctype == "application/json"


def _wants_openmetrics(accept: str) -> bool:
    return "application/openmetrics-text" in accept


def _wants_gzip(accept_encoding: str) -> bool:
    return any(part.split(";")[0].strip() == "gzip" for part in accept_encoding.split(","))


def make_app(exporter: Exporter, middlewares: list | None = None) -> web.Application:
    app = web.Application(middlewares=middlewares or [])

    async def handle_metrics(request: web.Request) -> web.Response:
        expo = exporter.exposition
        om = _wants_openmetrics(request.headers.get("Accept", ""))
        gz = _wants_gzip(request.headers.get("Accept-Encoding", ""))
        headers = {"Content-Type": OPENMETRICS_CONTENT_TYPE if om else TEXT_CONTENT_TYPE, "Vary": "Accept, Accept-Encoding"}
        if gz:
            headers["Content-Encoding"] = "gzip"
            await expo.compressed(om)
        body = ChunksPayload(expo.response(om, gz, exporter.process_tail(om)), headers["Content-Type"])
        # A plain Response, not prepared here: middlewares (the web config's headers) still
        # add to it, and aiohttp sends it (Content-Length, HEAD without a body) as any other.
        return web.Response(body=body, headers=headers)

    async def handle_healthz(request: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    async def handle_ready(request: web.Request) -> web.Response:
        waiting = exporter.waiting()
        if waiting is None:
            # Still ready (it serves what it has), but a rule that failed may be missing findings: say which.
            problems = exporter.pipeline.detector.status().problems()
            return web.Response(text="ready\n" + "".join(f"detector: {line}\n" for line in problems))
        return web.Response(status=503, text=f"not ready: waiting for the first poll of {', '.join(waiting) or 'any target'}\n")

    async def handle_targets(request: web.Request) -> web.Response:
        return web.Response(body=exporter.targets_body(), content_type="application/json")

    async def handle_reload(request: web.Request) -> web.Response:
        if exporter.reload_hook is None:
            return web.Response(status=403, text="Lifecycle API is not enabled (start with --web.enable-lifecycle)\n")
        if not _non_simple(request):
            return web.Response(status=403, text=RELOAD_NEEDS_HEADER)
        ok = await exporter.reload_hook()
        return web.Response(status=200 if ok else 500, text="reloaded\n" if ok else "reload failed; old config kept (see log)\n")

    app.router.add_get("/metrics", handle_metrics)
    app.router.add_get("/healthz", handle_healthz)
    app.router.add_get("/ready", handle_ready)
    app.router.add_get("/api/targets", handle_targets)
    app.router.add_post("/-/reload", handle_reload)
    web_routes.register(app, exporter.web)  # /, /fabric, /findings/<id>, /targets/<name>, /api/findings
    return app


async def start_server(app: web.Application, listen: str, ssl_context=None) -> web.AppRunner:
    """Serve ``app`` on a :class:`~fabricmon.agent.exporter.connections.GatedSite` (connection caps, timeouts)."""
    host, port = split_listen(listen)
    # keepalive_timeout is also the header-read timeout (see connections.py); shutdown_timeout bounds how long a
    # stop waits for requests in flight, well inside the unit's TimeoutStopSec.
    runner = web.AppRunner(app, access_log=None, handle_signals=False, keepalive_timeout=connections.HEADER_TIMEOUT_S,
                           shutdown_timeout=connections.SHUTDOWN_TIMEOUT_S)
    await runner.setup()
    site = connections.GatedSite(runner, host or None, port, ssl_context=ssl_context)
    await site.start()
    return runner


def split_listen(listen: str) -> tuple[str, int]:
    """``host:port``, ``:port`` or ``[::1]:port``."""
    host, sep, port = listen.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"invalid listen address {listen!r}: expected host:port, like 127.0.0.1:10117 or :10117")
    return host.strip("[]"), int(port)
