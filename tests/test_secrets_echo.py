"""A device that echoes the credentials (issue 32): with the password ``p@ss"w\\rd/+=Zq9`` a UFM
stand-in answers with a JSON error body that quotes it (and the Authorization header) in every
encoding a server may use, and a JSON ports list that carries it too. Nothing of it may reach
the log, ``/api/targets``, ``/``, ``/targets/<name>``, the recording or a replay's output."""

from __future__ import annotations

import asyncio
import base64
import gzip
import html
import json
import logging
import subprocess
import sys
from urllib.parse import quote, quote_plus

import aiohttp
from aiohttp import web

from fabricmon.agent.config import load
from fabricmon.agent.runtime import Agent
from tests.conftest import free_port

PASSWORD = 'p@ss"w\\rd/+=Zq9'
USER = "admin"
PAIR = base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()


def echoes() -> dict:
    return {"error": f"login refused for {USER} with password {PASSWORD} (Authorization: Basic {PAIR})",
            "forms": [PASSWORD, quote(PASSWORD, safe=""), quote_plus(PASSWORD), html.escape(PASSWORD),
                      base64.b64encode(PASSWORD.encode()).decode(), json.dumps(PASSWORD)]}


def leaks(text: str) -> list[str]:
    forms = {"Zq9", PAIR, base64.b64encode(PASSWORD.encode()).decode().rstrip("=")}
    return [f for f in forms if f in text]


CALLS = {"ports": 0}


async def _ufm(request: web.Request) -> web.Response:
    if request.path.endswith("/resources/ports"):
        CALLS["ports"] += 1
        if CALLS["ports"] % 2:  # every other poll fails with an error body quoting the credentials
            return web.json_response(echoes(), status=500)
    if request.path.endswith("/resources/systems"):  # a 200 whose JSON carries them: recorded as it came
        return web.json_response([{"system_name": "sw1", "description": f"set by {PASSWORD}", "echo": echoes()}])
    return web.json_response([])


async def test_an_echoed_password_is_never_stored_or_shown(tmp_path, caplog):
    app = web.Application()
    app.router.add_get("/{tail:.*}", _ufm)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    ufm_port = free_port()
    await web.TCPSite(runner, "127.0.0.1", ufm_port).start()
    (tmp_path / "pw").write_text(PASSWORD + "\n")
    (tmp_path / "pw").chmod(0o600)
    (tmp_path / "f.yml").write_text(f"""global: {{poll_interval: 0.3s, poll_timeout: 5s, jitter: 0, backoff_max: 1s}}
targets:
  - {{name: ufm1, source: ufm, address: 127.0.0.1, scheme: http, port: {ufm_port}, username: {USER}, password_file: {tmp_path / "pw"}}}
""")
    rec = tmp_path / "rec.jsonl.gz"
    port = free_port()
    agent = Agent(load(tmp_path / "f.yml"), listen=f"127.0.0.1:{port}", record_path=str(rec), duration=3.0)
    from fabricmon.core.secrets import RedactFilter

    caplog.handler.addFilter(RedactFilter())  # as the CLI installs it on every handler
    caplog.set_level(logging.INFO)
    task = asyncio.create_task(agent.run())
    await asyncio.sleep(2.0)
    pages = {}
    async with aiohttp.ClientSession() as s:
        for path in ("/api/targets", "/", "/targets/ufm1", "/metrics"):
            async with s.get(f"http://127.0.0.1:{port}{path}") as r:
                pages[path] = await r.text()
    await task
    await runner.cleanup()
    assert json.loads(pages["/api/targets"])[0]["last_error"]  # the poll failed, with a message
    for path, text in pages.items():
        assert not leaks(text), (path, leaks(text))
    assert not leaks(caplog.text), caplog.text
    recorded = gzip.decompress(rec.read_bytes()).decode()
    assert "set by ***" in recorded and '"ok":false' in recorded  # both kinds of poll were recorded, redacted
    assert not leaks(recorded), leaks(recorded)
    out = subprocess.run([sys.executable, "-m", "fabricmon.agent", "replay", "--fast", str(rec)], capture_output=True,
                         text=True, timeout=120)
    assert not leaks(out.stdout + out.stderr), leaks(out.stdout + out.stderr)
