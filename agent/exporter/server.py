"""HTTP server: /metrics (pre-rendered), /healthz, /ready, /api/findings, /api/targets, /.

``/metrics`` never renders: it serves the body the :class:`Exporter` rendered after the
last change (a poll finishing), gzip-compressed when the client accepts it, in
Prometheus text or OpenMetrics by content negotiation.
"""

from __future__ import annotations

import asyncio
import html
import json
import logging
import time
from collections.abc import Awaitable, Callable

from aiohttp import web

from fabricmon.agent.exporter import metrics
from fabricmon.agent.exporter.exposition import EMPTY, OPENMETRICS_CONTENT_TYPE, TEXT_CONTENT_TYPE, Exposition, Family, render
from fabricmon.agent.gcpause import gc_paused
from fabricmon.agent.pipeline import Pipeline

log = logging.getLogger(__name__)


class Exporter:
    """Owns the current exposition; re-renders (coalesced) when the pipeline changed."""

    def __init__(self, pipeline: Pipeline, extra_families: Callable[[], list[Family]] | None = None, demo: bool = False) -> None:
        self.pipeline = pipeline
        self.demo = demo  # `fabricmon demo`: a banner on / and fabricmon_demo 1, so made-up findings are never mistaken
        self.exposition: Exposition = EMPTY
        self.reload_ok = True
        self.reload_t = time.time()
        self.extra_families = extra_families
        self._scheduled = False
        self._last_render_end = 0.0
        self.reload_hook: Callable[[], Awaitable[bool]] | None = None

    def render_now(self) -> Exposition:
        t0 = time.perf_counter()
        with gc_paused():  # millions of short-lived objects, no cycles: see agent/gcpause.py
            extra = self.extra_families() if self.extra_families else []
            if self.demo:
                extra = [metrics.demo_family(), *extra]
            fams = metrics.all_families(self.pipeline, self.reload_ok, self.reload_t, self.exposition.render_seconds, extra)
            text, om = render(fams)
            del fams
        self.exposition = Exposition(text, om, self.pipeline.generation, time.time(), time.perf_counter() - t0)
        self._last_render_end = time.monotonic()
        return self.exposition

    def request_render(self) -> None:
        """Render soon, once, however many polls finish meanwhile.

        A render blocks the event loop for as long as it takes (seconds on a fabric of
        millions of series), so the next one waits at least that long after the previous
        ended: rendering never takes more than half the loop's time from the polls.
        """
        if self._scheduled:
            return
        self._scheduled = True
        wait = self._last_render_end + self.exposition.render_seconds - time.monotonic()
        asyncio.get_running_loop().call_later(max(0.0, wait), self._render_scheduled)

    def _render_scheduled(self) -> None:
        self._scheduled = False
        try:
            self.render_now()
        except Exception:  # never let a rendering bug take the agent down; keep serving the last body
            log.exception("rendering the exposition failed; serving the previous one")


def _wants_openmetrics(accept: str) -> bool:
    return "application/openmetrics-text" in accept


def _wants_gzip(accept_encoding: str) -> bool:
    return any(part.split(";")[0].strip() == "gzip" for part in accept_encoding.split(","))


def make_app(exporter: Exporter, middlewares: list | None = None) -> web.Application:
    app = web.Application(middlewares=middlewares or [])
    p = exporter.pipeline

    async def handle_metrics(request: web.Request) -> web.Response:
        expo = exporter.exposition
        om = _wants_openmetrics(request.headers.get("Accept", ""))
        gz = _wants_gzip(request.headers.get("Accept-Encoding", ""))
        headers = {"Content-Type": OPENMETRICS_CONTENT_TYPE if om else TEXT_CONTENT_TYPE, "Vary": "Accept, Accept-Encoding"}
        if gz:
            headers["Content-Encoding"] = "gzip"
        return web.Response(body=expo.body(om, gz), headers=headers)

    async def handle_healthz(request: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    async def handle_ready(request: web.Request) -> web.Response:
        if p.ready:
            return web.Response(text="ready\n")
        waiting = sorted(n for n, s in p.targets.items() if s.polls == 0)
        return web.Response(status=503, text=f"not ready: waiting for the first poll of {', '.join(waiting) or 'any target'}\n")

    async def handle_findings(request: web.Request) -> web.Response:
        items = [f.to_json() for f in p.findings()]
        if request.query.get("ended") in ("1", "true", "yes"):
            items += [f.to_json() for f in reversed(p.ended)]
        return web.json_response(items, dumps=lambda o: json.dumps(o, indent=1))

    async def handle_targets(request: web.Request) -> web.Response:
        now = p.now()
        out = []
        for name in sorted(p.targets):
            s = p.targets[name]
            out.append({"target": s.name, "source": s.source, "up": s.up, "polls": s.polls,
                        "last_success": s.last_success_t,
                        "age_s": None if s.last_success_t is None else round(now - s.last_success_t, 3),
                        "last_error": s.last_error, "errors": s.errors, "warnings": s.warnings})
        return web.json_response(out)

    async def handle_landing(request: web.Request) -> web.Response:
        return web.Response(text=landing_page(p, exporter.demo), content_type="text/html")

    async def handle_reload(request: web.Request) -> web.Response:
        if exporter.reload_hook is None:
            return web.Response(status=404, text="reload is not available in this mode\n")
        ok = await exporter.reload_hook()
        return web.Response(status=200 if ok else 500, text="reloaded\n" if ok else "reload failed; old config kept (see log)\n")

    app.router.add_get("/metrics", handle_metrics)
    app.router.add_get("/healthz", handle_healthz)
    app.router.add_get("/ready", handle_ready)
    app.router.add_get("/api/findings", handle_findings)
    app.router.add_get("/api/targets", handle_targets)
    app.router.add_post("/-/reload", handle_reload)
    app.router.add_get("/", handle_landing)
    return app


def _age(now: float, t: float | None) -> str:
    if t is None:
        return "never"
    s = max(0.0, now - t)
    return f"{s:.0f} s ago" if s < 120 else f"{s / 60:.0f} min ago" if s < 7200 else f"{s / 3600:.1f} h ago"


DEMO_BANNER = ("<p class='demo'><b>DEMO</b>: these targets and findings are replayed from a bundled recording of a "
               "made-up fabric (<code>fabricmon demo</code>), not from your network.</p>")


def landing_page(p: Pipeline, demo: bool = False) -> str:
    e = html.escape
    now = p.now()
    rows = []
    for name in sorted(p.targets):
        s = p.targets[name]
        state = "waiting" if s.up is None else "up" if s.up else "DOWN"
        rows.append(f"<tr class='{state.lower()}'><td>{e(s.name)}</td><td>{e(s.source)}</td><td>{state}</td>"
                    f"<td>{_age(now, s.last_success_t)}</td><td>{e(s.last_error or '') if not s.up else ''}</td></tr>")
    frows = []
    for f in sorted(p.findings(), key=lambda f: f.severity != "critical"):  # most severe first
        frows.append(f"<tr class='{f.severity}'><td>{e(f.severity)}</td><td>{e(f.kind)}</td><td>{e(f.device)}</td>"
                     f"<td>{e(f.port or '')}</td><td>{'' if f.priority is None else f.priority}</td><td>{e(f.role or '')}</td>"
                     f"<td>{_age(now, f.start)}</td><td>{e(f.summary)}</td></tr>")
    findings = ("<table><tr><th>severity</th><th>kind</th><th>device</th><th>port</th><th>priority</th><th>role</th>"
                "<th>since</th><th>summary</th></tr>" + "".join(frows) + "</table>") if frows else "<p>No active findings.</p>"
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>fabricmon</title>
<style>body{{font-family:sans-serif;margin:2em}}table{{border-collapse:collapse}}td,th{{border:1px solid #ccc;padding:3px 8px;text-align:left}}
tr.down td,tr.critical td{{background:#fdd}}tr.warning td{{background:#ffd}}.demo{{background:#fe9;padding:.5em}}</style></head>
<body><h1>fabricmon</h1>{DEMO_BANNER if demo else ""}
<p><a href="/metrics">/metrics</a> · <a href="/api/findings">/api/findings</a> · <a href="/api/targets">/api/targets</a> · <a href="/ready">/ready</a></p>
<h2>Active findings ({len(frows)})</h2>{findings}
<h2>Targets ({len(rows)})</h2>
<table><tr><th>target</th><th>source</th><th>state</th><th>last success</th><th>last error</th></tr>{''.join(rows)}</table>
</body></html>
"""


async def start_server(app: web.Application, listen: str, ssl_context=None) -> web.AppRunner:
    host, port = split_listen(listen)
    runner = web.AppRunner(app, access_log=None, handle_signals=False)
    await runner.setup()
    site = web.TCPSite(runner, host or None, port, ssl_context=ssl_context, reuse_address=True)
    await site.start()
    return runner


def split_listen(listen: str) -> tuple[str, int]:
    """``host:port``, ``:port`` or ``[::1]:port``."""
    host, sep, port = listen.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"invalid listen address {listen!r}: expected host:port, like 127.0.0.1:10117 or :10117")
    return host.strip("[]"), int(port)
