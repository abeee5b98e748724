"""Real aiohttp stand-in servers on 127.0.0.1 for the REST collectors (UFM, UFM Telemetry, NVUE).

* ``self_signed_cert(dir)``: a throw-away self-signed certificate for 127.0.0.1 (tests/pki.py).
* ``StandIn``: an aiohttp server with per-prefix auth (basic user/password, or a token sent
  as ``Authorization: <scheme> <token>``), optional TLS, canned ``Reply`` objects per path,
  and a log of every request (path with query string, headers) for assertions.

Only loopback is ever bound. Use as ``async with StandIn(routes, ...) as srv: srv.url``.
"""

from __future__ import annotations

import asyncio
import base64
import json
import socket
import ssl
import struct
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import web

from tests.pki import LOOPBACK


@dataclass
class Reply:
    """A canned answer. ``body``: dict/list -> JSON, str/bytes -> as is. ``truncate_to``: send the
    full Content-Length but only this many bytes, then drop the connection."""

    body: Any = ""
    status: int = 200
    content_type: str | None = None
    truncate_to: int | None = None
    delay: float = 0.0  # seconds before answering (for cancellation tests)
    headers: dict[str, str] = field(default_factory=dict)  # extra response headers (Retry-After)

    def encoded(self) -> tuple[bytes, str]:
        if isinstance(self.body, (dict, list)):
            return json.dumps(self.body).encode(), self.content_type or "application/json"
        raw = self.body if isinstance(self.body, bytes) else str(self.body).encode()
        return raw, self.content_type or "text/plain; charset=utf-8"


@dataclass(frozen=True)
class BasicAuthRule:
    username: str
    password: str

    def ok(self, header: str) -> bool:
        want = "Basic " + base64.b64encode(f"{self.username}:{self.password}".encode()).decode()
        return header == want


@dataclass(frozen=True)
class TokenAuthRule:
    token: str
    scheme: str = "Basic"  # UFM's /ufmRestV3 takes "Authorization: Basic <token>"

    def ok(self, header: str) -> bool:
        return header == f"{self.scheme} {self.token}"


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@dataclass
class Seen:
    path_qs: str
    query: dict[str, str]
    headers: dict[str, str]


@dataclass
class StandIn:
    """An HTTP(S) server on 127.0.0.1 serving ``routes`` (path without query -> Reply)."""

    routes: dict[str, Reply] = field(default_factory=dict)
    auth: dict[str, BasicAuthRule | TokenAuthRule] = field(default_factory=dict)  # path prefix -> rule
    tls: tuple[Path, Path] | None = None
    seen: list[Seen] = field(default_factory=list)
    port: int = 0
    _runner: web.AppRunner | None = None

    @property
    def url(self) -> str:
        return f"{'https' if self.tls else 'http'}://{LOOPBACK}:{self.port}"

    async def __aenter__(self) -> StandIn:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5)
        await self._runner.setup()
        ctx = None
        if self.tls:
            ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            ctx.load_cert_chain(str(self.tls[0]), str(self.tls[1]))
        site = web.TCPSite(self._runner, LOOPBACK, 0, ssl_context=ctx)
        await site.start()
        self.port = self._runner.addresses[0][1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        self.seen.append(Seen(request.path_qs, dict(request.query), dict(request.headers)))
        for prefix, rule in self.auth.items():
            if request.path.startswith(prefix + "/") and not rule.ok(request.headers.get("Authorization", "")):
                return web.json_response({"error": "unauthorized"}, status=401, headers={"WWW-Authenticate": 'Basic realm="ufm"'})
        reply = self.routes.get(request.path)
        if reply is None:
            return web.json_response({"error": f"no route {request.path}"}, status=404)
        if reply.delay:
            await asyncio.sleep(reply.delay)
        raw, ctype = reply.encoded()
        if reply.truncate_to is None:
            return web.Response(body=raw, status=reply.status, headers={"Content-Type": ctype, **reply.headers})
        resp = web.StreamResponse(status=reply.status, headers={"Content-Type": ctype})
        resp.content_length = len(raw)
        await resp.prepare(request)
        await resp.write(raw[: reply.truncate_to])
        await asyncio.sleep(0)
        assert request.transport is not None
        request.transport.close()  # the client sees fewer bytes than Content-Length
        return resp


@dataclass
class FaultServer:
    """A raw TCP server on 127.0.0.1 that misbehaves below HTTP (no aiohttp on this side).

    ``mode``: ``reset`` accepts, reads the request and aborts with an RST (SO_LINGER 0);
    ``hang`` accepts, reads the request and never answers (the client's timeout must end it).
    """

    mode: str = "reset"
    port: int = 0
    accepted: int = 0
    _server: asyncio.AbstractServer | None = None
    _open: set[asyncio.StreamWriter] = field(default_factory=set)

    @property
    def url(self) -> str:
        return f"http://{LOOPBACK}:{self.port}"

    async def __aenter__(self) -> FaultServer:
        if self.mode not in ("reset", "hang"):
            raise ValueError(f"unknown FaultServer mode {self.mode!r}")
        self._server = await asyncio.start_server(self._handle, LOOPBACK, 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        for w in list(self._open):
            w.transport.abort()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        self._open.add(writer)
        try:
            await reader.readuntil(b"\r\n\r\n")  # the request head: the client is now waiting for an answer
            if self.mode == "reset":
                sock = writer.get_extra_info("socket")
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                writer.transport.abort()
            else:
                await reader.read()  # until the client gives up and closes
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
            pass
        finally:
            self._open.discard(writer)
            writer.transport.abort()


async def fetch_once(collector: Any) -> dict[str, Any]:
    """One poll's raw payload from a REST collector, its HTTP client closed afterwards."""
    try:
        return await collector.fetch()
    finally:
        await collector.close()
