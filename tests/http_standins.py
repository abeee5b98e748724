"""Real aiohttp stand-in servers on 127.0.0.1 for the REST collectors (UFM, UFM Telemetry, NVUE, Kubernetes).

* ``self_signed_cert(dir)``: a throw-away self-signed certificate for 127.0.0.1 (tests/pki.py).
* ``StandIn``: an aiohttp server with per-prefix auth (basic user/password, or a token sent
  as ``Authorization: <scheme> <token>``), optional TLS, canned ``Reply`` objects per path,
  and a log of every request (path with query string, headers) for assertions.
* ``KubeApiStandIn``: a Kubernetes API server's pod list (TLS, bearer token, paging with
  ``continue``, the ``status.phase`` field selector) in the API reference's shapes.

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


async def serve_app(app: web.Application, tls: tuple[Path, Path] | None,
                    client_ca: Path | None = None) -> tuple[web.AppRunner, int]:
    """Serve ``app`` on a free loopback port (TLS with ``(cert, key)`` when given): (runner, port).
    With ``client_ca``, a client certificate signed by it is asked for and verified (optional:
    a client without one still connects, and the app decides)."""
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5)
    await runner.setup()
    ctx = None
    if tls:
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ctx.load_cert_chain(str(tls[0]), str(tls[1]))
        if client_ca is not None:
            ctx.load_verify_locations(str(client_ca))
            ctx.verify_mode = ssl.CERT_OPTIONAL
    site = web.TCPSite(runner, LOOPBACK, 0, ssl_context=ctx)
    await site.start()
    return runner, runner.addresses[0][1]


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
        self._runner, self.port = await serve_app(app, self.tls)
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


@dataclass
class KubeApiStandIn:
    """A Kubernetes API server stand-in on 127.0.0.1 (TLS, bearer token) serving ``GET /api/v1/pods``.

    Answers in the shapes of the Kubernetes API reference (v1.31, "Pod v1 core" and its "list"
    operation; API concepts, "Retrieving large results sets in chunks"): a ``PodList``
    ``{"kind", "apiVersion", "metadata": {"resourceVersion", "continue"}, "items"}``, ``limit``
    pages with a ``continue`` token (an unknown token is ``410 Gone`` with a ``Status``), the
    ``status.phase`` field selector, and ``401`` with a ``Status`` body for a missing or wrong
    token. With ``client_ca``, a verified client certificate signed by it authenticates instead
    of a token (the API server's X509 client-certificate authentication; its CN is the user),
    and ``users`` logs those CNs. ``seen`` logs every request (path with query, headers)."""

    pods: list[dict[str, Any]]
    token: str
    tls: tuple[Path, Path]
    client_ca: Path | None = None
    seen: list[Seen] = field(default_factory=list)
    users: list[str] = field(default_factory=list)
    port: int = 0
    _runner: web.AppRunner | None = None

    @property
    def address(self) -> str:
        return LOOPBACK

    @staticmethod
    def status(code: int, reason: str, message: str) -> web.Response:
        return web.json_response({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                                  "message": message, "reason": reason, "code": code}, status=code)

    async def _pods(self, request: web.Request) -> web.Response:
        self.seen.append(Seen(request.path_qs, dict(request.query), dict(request.headers)))
        if request.headers.get("Authorization") != f"Bearer {self.token}" and not self._client_cert_user(request):
            return self.status(401, "Unauthorized", "Unauthorized")
        pods = self.pods
        selector = request.query.get("fieldSelector", "")
        if selector:
            key, _, want = selector.partition("=")
            if key != "status.phase":
                return self.status(400, "BadRequest", f'field label not supported: "{key}"')
            pods = [p for p in pods if p.get("status", {}).get("phase") == want]
        start = 0
        token = request.query.get("continue")
        if token:
            if not token.startswith("page-") or not token[5:].isdigit():
                return self.status(410, "Expired", "The provided continue parameter is too old to display a consistent list result.")
            start = int(token[5:])
        limit = int(request.query.get("limit", "0") or 0) or len(pods)
        page = pods[start:start + limit]
        meta: dict[str, Any] = {"resourceVersion": "123456"}
        if start + limit < len(pods):
            meta["continue"] = f"page-{start + limit}"
            meta["remainingItemCount"] = len(pods) - start - limit
        return web.json_response({"kind": "PodList", "apiVersion": "v1", "metadata": meta, "items": page})

    def _client_cert_user(self, request: web.Request) -> bool:
        """Whether the connection presented a client certificate the client CA verified (the TLS
        layer checked the chain; an unverified one never gets here), logging its CN."""
        cert = request.transport.get_extra_info("peercert") if request.transport else None
        if not cert:
            return False
        self.users.extend(v for rdn in cert.get("subject", ()) for k, v in rdn if k == "commonName")
        return True

    async def __aenter__(self) -> KubeApiStandIn:
        app = web.Application()
        app.router.add_get("/api/v1/pods", self._pods)
        self._runner, self.port = await serve_app(app, self.tls, self.client_ca)
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
