"""POST /-/reload is opt-in and cannot be triggered by a cross-site form (issue 20, item 9).

The original attack: without a web config, any page a user opened could make their browser post
a form to http://agent:10117/-/reload (a CORS-"simple" request needs no preflight).
"""

from __future__ import annotations

import contextlib

import aiohttp
import pytest

from fabricmon.agent.cli import build_parser
from fabricmon.agent.exporter.server import Exporter, make_app, start_server
from fabricmon.agent.pipeline import Pipeline
from tests.conftest import free_port


@contextlib.asynccontextmanager
async def serving(with_lifecycle: bool):
    exporter = Exporter(Pipeline([], []))
    exporter.render_now()
    calls: list[float] = []

    async def reload() -> bool:
        calls.append(1.0)
        return True

    exporter.reload_hook = reload if with_lifecycle else None
    port = free_port()
    runner = await start_server(make_app(exporter), f"127.0.0.1:{port}")
    try:
        yield f"http://127.0.0.1:{port}/-/reload", calls
    finally:
        await runner.cleanup()


async def _post(url: str, **kw) -> tuple[int, str]:
    async with aiohttp.ClientSession() as s, s.post(url, **kw) as r:
        return r.status, await r.text()


def test_lifecycle_is_off_unless_asked_for():
    assert build_parser().parse_args(["run", "--config.file", "x.yml"]).enable_lifecycle is False
    assert build_parser().parse_args(["run", "--config.file", "x.yml", "--web.enable-lifecycle"]).enable_lifecycle is True


async def test_reload_without_the_flag_is_refused():
    async with serving(with_lifecycle=False) as (url, calls):
        status, text = await _post(url, headers={"X-Requested-With": "curl"})
    assert status == 403 and "--web.enable-lifecycle" in text and not calls


@pytest.mark.parametrize("kw", [
    {"data": {"a": "b"}},  # <form method=post> (application/x-www-form-urlencoded)
    {"data": b"x", "headers": {"Content-Type": "text/plain"}},  # fetch(..., {mode: "no-cors"})
    {"data": aiohttp.FormData({"a": "b"}, default_to_multipart=True)},  # multipart form
    {},  # a bare POST
], ids=["urlencoded-form", "text-plain", "multipart-form", "bare"])
async def test_simple_cross_site_requests_are_refused(kw):
    async with serving(with_lifecycle=True) as (url, calls):
        status, text = await _post(url, **kw)
    assert status == 403 and "X-Requested-With" in text and not calls


@pytest.mark.parametrize("kw", [
    {"headers": {"X-Requested-With": "curl"}},
    {"json": {}},
    {"data": b"{}", "headers": {"Content-Type": "application/json; charset=utf-8"}},
], ids=["custom-header", "json", "json-charset"])
async def test_non_simple_requests_reload(kw):
    async with serving(with_lifecycle=True) as (url, calls):
        status, text = await _post(url, **kw)
    assert (status, text, len(calls)) == (200, "reloaded\n", 1)
