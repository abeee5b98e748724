"""Routes of the web view on the exporter's aiohttp app (behind its auth/TLS middlewares).

``/api/findings`` is paged: ``?page=`` (from 1) and ``?limit=`` (default
:data:`~fabricmon.agent.web.cache.DEFAULT_LIMIT`, at most ``MAX_LIMIT``); the body stays a
JSON list, with ``X-Total-Count`` and a ``Link: <...>; rel="next"`` header while more pages
follow. ``?ended=1`` appends recently ended findings after the active ones.
"""

from __future__ import annotations

from collections.abc import Awaitable
from importlib import resources

from aiohttp import web

from fabricmon.agent.web.cache import DEFAULT_LIMIT, MAX_LIMIT, Busy, WebCache

REFRESH_JS = resources.files("fabricmon.agent.web").joinpath("static/refresh.js").read_bytes()


def _int(request: web.Request, name: str, default: int, lo: int, hi: int) -> int:
    raw = request.query.get(name)
    if raw is None:
        return default
    if not raw.isascii() or not raw.isdigit() or not lo <= int(raw) <= hi:
        raise web.HTTPBadRequest(text=f"?{name}= must be a whole number from {lo} to {hi}, got {raw[:40]!r}\n")
    return int(raw)


def _busy() -> web.Response:
    return web.Response(status=503, text="Service Unavailable: too many pages being rendered; try again\n", headers={"Retry-After": "1"})


def register(app: web.Application, cache: WebCache) -> None:
    async def summary(request: web.Request) -> web.Response:
        return web.Response(body=cache.summary, content_type="text/html", charset="utf-8")

    async def fabric(request: web.Request) -> web.Response:
        try:
            return web.Response(body=await cache.fabric(), content_type="text/html", charset="utf-8")
        except Busy:
            return _busy()

    async def page(build: Awaitable[bytes | None], missing: str, content_type: str = "text/html") -> web.Response:
        """A page rendered by the cache (on the worker): 503 when too many wait, 404 when ``build`` finds nothing."""
        try:
            body = await build
        except Busy:
            return _busy()
        if body is None:
            raise web.HTTPNotFound(text=missing)
        return web.Response(body=body, content_type=content_type, charset="utf-8" if content_type == "text/html" else None)

    no_job = "no such job: no job source reports it running (or recently ended)\n"

    async def finding(request: web.Request) -> web.Response:
        return await page(cache.finding(request.match_info["fid"]),
                          "no such finding (it may have ended and aged out of the recent list)\n")

    async def target(request: web.Request) -> web.Response:
        return await page(cache.target(request.match_info["name"]), "no such target\n")

    async def job(request: web.Request) -> web.Response:
        return await page(cache.job(request.match_info["jid"]), no_job)

    async def job_api(request: web.Request) -> web.Response:
        window = _int(request, "window", 0, 60, 30 * 86400) or None  # seconds; default: jobs.window
        return await page(cache.job_json(request.match_info["jid"], window), no_job, "application/json")

    async def findings_api(request: web.Request) -> web.Response:
        page = _int(request, "page", 1, 1, 10**9)
        limit = _int(request, "limit", DEFAULT_LIMIT, 1, MAX_LIMIT)
        ended = request.query.get("ended") in ("1", "true", "yes")
        body, total = cache.findings_page(page, limit, ended)
        headers = {"X-Total-Count": str(total)}
        if page * limit < total:
            headers["Link"] = f'</api/findings?page={page + 1}&limit={limit}{"&ended=1" if ended else ""}>; rel="next"'
        return web.Response(body=body, content_type="application/json", headers=headers)

    async def refresh_js(request: web.Request) -> web.Response:
        return web.Response(body=REFRESH_JS, content_type="text/javascript", headers={"Cache-Control": "max-age=300"})

    app.router.add_get("/", summary)
    app.router.add_get("/fabric", fabric)
    app.router.add_get("/findings/{fid}", finding)
    app.router.add_get("/targets/{name}", target)
    app.router.add_get("/jobs/{jid:.+}", job)  # a Kubernetes job id holds a slash
    app.router.add_get("/api/jobs/{jid:.+}", job_api)
    app.router.add_get("/api/findings", findings_api)
    app.router.add_get("/static/refresh.js", refresh_js)
