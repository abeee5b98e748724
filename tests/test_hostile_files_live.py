"""Files swapped for FIFOs and devices under a running agent (issue 32): a reload reads them
without blocking, refuses them with a clear error, keeps the old settings, keeps serving, and
later reloads and a stop still work. Plus the log: one line per cause for malformed requests,
and no control character from a device's error body."""

from __future__ import annotations

import asyncio
import logging
import os
import time

import aiohttp

from fabricmon.agent.config import load
from fabricmon.agent.exporter import webconfig
from fabricmon.agent.runtime import Agent
from fabricmon.core.secrets import RedactFilter
from tests.conftest import free_port


async def _get(url: str) -> int:
    async with aiohttp.ClientSession() as s, s.get(url, timeout=aiohttp.ClientTimeout(total=10)) as r:
        await r.read()
        return r.status


async def test_fifos_and_devices_swapped_in_are_refused_and_the_agent_keeps_going(tmp_path, caplog):
    cfg, web = tmp_path / "f.yml", tmp_path / "web.yml"
    cfg.write_text(f"global: {{state_dir: {tmp_path / 'state'}}}\ntargets: []\n")
    web.write_text("http_server_config:\n  headers: {X-Frame-Options: deny}\n")
    port = free_port()
    ssl_ctx, middlewares = webconfig.load(str(web))
    agent = Agent(load(cfg), listen=f"127.0.0.1:{port}", ssl_context=ssl_ctx, middlewares=middlewares)
    caplog.set_level(logging.INFO)
    task = asyncio.create_task(agent.run())
    url = f"http://127.0.0.1:{port}"
    for _ in range(100):
        try:
            if await _get(url + "/healthz") == 200:
                break
        except aiohttp.ClientError:
            await asyncio.sleep(0.05)
    for swap in ("web-fifo", "web-zero", "config-fifo"):
        victim = web if swap.startswith("web") else cfg
        keep = victim.read_bytes()
        victim.unlink()
        if swap.endswith("fifo"):
            os.mkfifo(victim)
        else:
            os.symlink("/dev/zero", victim)
        t0 = time.monotonic()
        ok, health = await asyncio.gather(asyncio.wait_for(agent.reload(), 10), _get(url + "/healthz"))
        assert ok is False and health == 200 and time.monotonic() - t0 < 10, swap
        assert "not a regular file" in caplog.text
        victim.unlink()
        victim.write_bytes(keep)
    assert await asyncio.wait_for(agent.reload(), 10) is True  # later reloads are not ignored
    assert agent.exporter.reload_ok
    t0 = time.monotonic()
    agent.stop_event.set()
    await asyncio.wait_for(task, 10)
    assert time.monotonic() - t0 < 5


async def test_malformed_requests_are_one_line_per_cause(tmp_path, caplog):
    """3,000 bad requests wrote 3,007 ERROR tracebacks (1.8 MB)."""
    (tmp_path / "f.yml").write_text("targets: []\n")
    port = free_port()
    agent = Agent(load(tmp_path / "f.yml"), listen=f"127.0.0.1:{port}")
    caplog.set_level(logging.INFO)
    task = asyncio.create_task(agent.run())
    await asyncio.sleep(0.5)
    for i in range(300):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write([b"NOT HTTP\r\n\r\n", b"GET /\x00\x1b[2J HTTP/1.1\r\n\r\n", b"GET / HTTP/9.9\r\n\r\n"][i % 3])
        await writer.drain()
        await reader.read()
        writer.close()
    before = agent.exporter.exposition
    agent.exporter.request_render()  # the listener's counters are rendered with the body (after each poll)
    while agent.exporter.exposition is before:
        await asyncio.sleep(0.02)
    async with aiohttp.ClientSession() as s, s.get(f"http://127.0.0.1:{port}/metrics") as r:
        body = await r.text()
    agent.stop_event.set()
    await task
    lines = [r for r in caplog.records if r.name == "aiohttp.server"]
    assert 1 <= len(lines) <= 3 and not any(r.exc_info for r in lines), [r.getMessage() for r in lines]
    assert 'fabricmon_http_bad_requests_total{cause="BadStatusLine"}' in body


def test_control_characters_from_a_device_never_reach_the_log(caplog):
    from fabricmon.collectors.base import FetchError

    log = logging.getLogger("fabricmon.test")
    caplog.handler.addFilter(RedactFilter())
    caplog.set_level(logging.INFO)
    log.warning("target %s: %s", "sw1", "body: \x1b[2J\x1b[31mpwned\r\x00fake line\nERROR forged")
    log.warning("%s", FetchError("GET /x failed with HTTP 500: \x1b]0;title\x07 \r\n"))
    text = caplog.text
    assert not any(c in text.replace("\n", "") for c in "\x1b\r\x00\x07")
    assert "\\x1b[2J" in text and "fake line\\x0aERROR forged" in text
