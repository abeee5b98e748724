"""Bounded HTTP connections: a listener with a connection cap, handshake and header timeouts.

aiohttp has no connection cap and no header-read timeout, and asyncio's own accept loop
logs a traceback for every ``accept()`` that fails with EMFILE. A flood of slow clients
then eats every file descriptor and the collectors cannot start a subprocess or open a
socket. :class:`GatedSite` replaces ``web.TCPSite``: it accepts connections itself
(``loop.sock_accept``), refuses them (accept, then close at once, so the kernel queue
drains and no descriptor stays held) beyond

- ``max_connections`` open at once: :func:`connection_cap` derives it from
  ``RLIMIT_NOFILE`` with a reserve of descriptors for the collectors, and
- ``max_per_address`` from one client address, so one host cannot take every slot,

and hands the rest to aiohttp through ``loop.connect_accepted_socket`` with
``ssl_handshake_timeout``: a TLS client that never finishes its handshake is dropped
after :data:`HANDSHAKE_TIMEOUT_S` and its slot released.

Header timeout and keep-alive limits use aiohttp's keep-alive timer: it starts when the
connection is made and again after each response, and closes a connection whose next
request has not been fully received when it fires. So :data:`HEADER_TIMEOUT_S` bounds
both the time to send the request headers and the idle time of a kept-alive connection;
a connection is closed after :data:`MAX_REQUESTS_PER_CONNECTION` requests.

Overload is logged once per :data:`OVERLOAD_LOG_INTERVAL_S` with counts, never per
connection; the counts are exported (``fabricmon_http_connections*``).

**Eviction.** The caps alone let an attacker keep every slot: 4 addresses x 64 half-sent
requests filled the 256 slots and every real scrape was reset for 40 s (issue 32). A slot
held by a connection that has not sent a whole request (headers not complete yet, or idle
between kept-alive requests) is cheap to give back: when a new connection arrives at a full
cap, the oldest such connection of the address holding the most of them is closed to make
room (at the per-address cap: the oldest one of that address). A connection whose request is
being answered is never evicted. So a scrape that sends its request at once always gets
through, however many slow connections there are; the slow ones are cut, as they would be
by the header timeout anyway.

**Malformed requests** (a bad request line, a bad header, a TLS hello on the plain port) are
answered 400 by aiohttp, which also logged a traceback for each (3,000 bad requests wrote
3,007 tracebacks, 1.8 MB). :class:`BadRequestLog` turns them into one line per cause, at
most once per :data:`OVERLOAD_LOG_INTERVAL_S` with the count since the last line, and counts
them (``fabricmon_http_bad_requests_total{cause}``).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import resource
import socket
import ssl
import time
from dataclasses import dataclass, field
from typing import Any

from aiohttp import http_exceptions, web, web_response
from aiohttp.web_runner import BaseRunner, BaseSite

from fabricmon.agent.exporter.exposition import Family, labels
from fabricmon.core.vocabulary import NAMESPACE

log = logging.getLogger(__name__)

# Descriptors kept for everything that is not an HTTP client: every poll may hold a socket
# or a subprocess with three pipes (max_concurrency defaults to 64), plus the state file,
# the recording, the log and Python's own. 256 covers 64 concurrent perfquery polls
# (4 fds each) with room to spare; the cap is half of what is left, so even a full cap
# leaves the collectors more than the reserve.
FD_RESERVE = 256
DEFAULT_MAX_CONNECTIONS = 256  # Prometheus HA pairs, Grafana, curl: a few dozen at most in practice
MIN_CONNECTIONS = 8
HANDSHAKE_TIMEOUT_S = 10.0  # a TLS 1.2/1.3 handshake is a few round trips; 10 s allows for a slow WAN
HEADER_TIMEOUT_S = 15.0  # request headers within 15 s; also the idle keep-alive time (scrapes reconnect)
MAX_REQUESTS_PER_CONNECTION = 1000
OVERLOAD_LOG_INTERVAL_S = 60.0
SHUTDOWN_TIMEOUT_S = 2.0  # requests in flight at stop; the unit's TimeoutStopSec is 15 s
SERVER_HEADER = "fabricmon"  # no library or Python version in `Server:`
_ACCEPT_ERROR_BACKOFF_S = 0.1  # after EMFILE/ENFILE/ENOBUFS: pause accepting instead of spinning


def connection_cap(limit: int | None = None, nofile: int | None = None) -> int:
    """Open-connection cap: ``limit`` (default 256), at most half of (soft RLIMIT_NOFILE - reserve)."""
    if nofile is None:
        nofile = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        if nofile == resource.RLIM_INFINITY:
            nofile = 1 << 20
    budget = max(MIN_CONNECTIONS, (nofile - FD_RESERVE) // 2)
    return max(1, min(limit or DEFAULT_MAX_CONNECTIONS, budget))


@dataclass
class ConnectionStats:
    """Counters of every :class:`GatedSite` in the process: the listener's status object."""

    open: int = 0
    accepted: int = 0
    refused: dict[str, int] = field(default_factory=lambda: {"cap": 0, "per_address": 0})
    evicted: int = 0
    handshake_failed: int = 0
    accept_errors: int = 0
    bad_requests: dict[str, int] = field(default_factory=dict)  # cause -> count

    def families(self) -> list[Family]:
        """The listener's counters as exposition families (the live agent adds them to /metrics)."""
        n = NAMESPACE
        open_ = Family(f"{n}_http_connections_open", "gauge", "HTTP connections open now (all listeners).")
        open_.add("", self.open)
        accepted = Family(f"{n}_http_connections_accepted_total", "counter", "HTTP connections accepted and served.")
        accepted.add("", self.accepted)
        refused = Family(f"{n}_http_connections_refused_total", "counter",
                         "HTTP connections closed at once: over the open-connection cap, or over the per-address cap.")
        for reason, count in sorted(self.refused.items()):
            refused.add(labels((("reason", reason),)), count)
        handshake = Family(f"{n}_http_tls_handshake_failures_total", "counter",
                           "TLS connections dropped before the handshake finished (timeout or error).")
        handshake.add("", self.handshake_failed)
        errors = Family(f"{n}_http_accept_errors_total", "counter", "accept() failures, e.g. EMFILE when out of descriptors.")
        errors.add("", self.accept_errors)
        evicted = Family(f"{n}_http_connections_evicted_total", "counter",
                         "Connections closed to make room at a full cap because they had not sent a whole request.")
        evicted.add("", self.evicted)
        bad = Family(f"{n}_http_bad_requests_total", "counter", "Malformed requests answered 400, by cause (the parser's error).")
        for cause, count in sorted(self.bad_requests.items()):
            bad.add(labels((("cause", cause),)), count)
        return [open_, accepted, refused, evicted, handshake, errors, bad]


STATS = ConnectionStats()


class _OverloadLog:
    """One warning per interval with what was refused since the last one."""

    def __init__(self) -> None:
        self.last = 0.0
        self.pending: dict[str, int] = {}

    def note(self, what: str, detail: str) -> None:
        self.pending[what] = self.pending.get(what, 0) + 1
        now = time.monotonic()
        if now - self.last >= OVERLOAD_LOG_INTERVAL_S:
            counts = ", ".join(f"{n} {k}" for k, n in sorted(self.pending.items()))
            log.warning("HTTP listener overloaded (%s): %s in the last %.0f s at most; "
                        "logged once per %.0f s", detail, counts, OVERLOAD_LOG_INTERVAL_S, OVERLOAD_LOG_INTERVAL_S)
            self.last, self.pending = now, {}


class BadRequestLog(logging.Filter):
    """On the ``aiohttp.server`` logger: a malformed request's "Error handling request" record
    (with its traceback) becomes one line per cause and interval, without the traceback; every
    other record passes unchanged (a handler's own bug keeps its traceback)."""

    def __init__(self) -> None:
        super().__init__()
        self.last: dict[str, float] = {}
        self.since: dict[str, int] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if not isinstance(exc, http_exceptions.HttpProcessingError):
            return True
        cause = type(exc).__name__
        STATS.bad_requests[cause] = STATS.bad_requests.get(cause, 0) + 1
        self.since[cause] = self.since.get(cause, 0) + 1
        now = time.monotonic()
        if now - self.last.get(cause, -OVERLOAD_LOG_INTERVAL_S) < OVERLOAD_LOG_INTERVAL_S:
            return False
        n, self.since[cause], self.last[cause] = self.since[cause], 0, now
        detail = " ".join(str(getattr(exc, "message", "") or "").split("\n")[:2]).strip().rstrip(":")[:120]
        origin = record.getMessage().removeprefix("Error handling request")  # " from 127.0.0.1"
        record.msg = "malformed HTTP request%s answered 400: %s%s (%d of this kind in the last %.0f s at most; logged once per %.0f s)"
        record.args = (origin, cause, f": {detail}" if detail else "", n, OVERLOAD_LOG_INTERVAL_S, OVERLOAD_LOG_INTERVAL_S)
        record.levelno, record.levelname = logging.WARNING, "WARNING"
        record.exc_info, record.exc_text = None, None
        return True


_BAD_REQUESTS = BadRequestLog()


def _install_bad_request_log() -> None:
    server_log = logging.getLogger("aiohttp.server")
    if _BAD_REQUESTS not in server_log.filters:
        server_log.addFilter(_BAD_REQUESTS)


class _Listening:
    """What ``BaseRunner.addresses`` reads from a site: its listening sockets."""

    def __init__(self, sockets: list[socket.socket]) -> None:
        self.sockets = sockets

    def close(self) -> None:
        for sock in self.sockets:
            sock.close()


@dataclass(eq=False)
class _Conn:
    """One served connection: its address, its aiohttp protocol once made, whether it was evicted."""

    host: str
    proto: Any = None
    evicted: bool = False

    def waiting(self) -> bool:
        """True while no whole request is being answered or queued (connecting, headers in
        progress, or idle between kept-alive requests): the connections eviction may close.
        Reads two attributes of aiohttp's RequestHandler (3.9 to 3.14)."""
        p = self.proto
        if p is None:
            return True
        return not getattr(p, "_request_in_progress", True) and not getattr(p, "_messages", True)


class GatedSite(BaseSite):
    """A TCP site with a connection cap, a per-address cap and a TLS handshake timeout."""

    def __init__(self, runner: BaseRunner, host: str | None, port: int, *, ssl_context: ssl.SSLContext | None = None,
                 max_connections: int | None = None, max_per_address: int | None = None,
                 handshake_timeout: float = HANDSHAKE_TIMEOUT_S) -> None:
        super().__init__(runner, ssl_context=ssl_context)
        self._host, self._port = host, port
        self.max_connections = connection_cap(max_connections)
        self.max_per_address = max_per_address or max(1, self.max_connections // 4)
        self.handshake_timeout = handshake_timeout
        self._per_address: dict[str, int] = {}
        self._socks: list[socket.socket] = []
        self._tasks: set[asyncio.Task] = set()
        self._overload = _OverloadLog()
        self._open = 0
        self._closed: dict[Any, asyncio.Future[None]] = {}  # aiohttp RequestHandler -> resolved when it is lost
        self._requests: dict[Any, int] = {}
        self._conns: dict[asyncio.Task, _Conn] = {}  # every connection served, in accept order
        assert runner.server is not None
        self._hook(runner.server)
        _install_bad_request_log()
        # aiohttp fills in `Server: Python/3.x aiohttp/3.y` on every response, its own 400s included; the
        # module global is read per response and is used by the server side only (the client has its own copy).
        web_response.SERVER_SOFTWARE = SERVER_HEADER

    @property
    def name(self) -> str:
        scheme = "https" if self._ssl_context else "http"
        return f"{scheme}://{self._host or '0.0.0.0'}:{self._port}"

    def _hook(self, server: web.Server) -> None:
        """Learn when a connection ends (the Server's connection_lost), and close kept-alive
        connections after MAX_REQUESTS_PER_CONNECTION requests (the current one finishes)."""
        inner_factory, inner_lost = server.request_factory, server.connection_lost

        def request_factory(message: Any, payload: Any, protocol: Any, writer: Any, task: Any) -> web.BaseRequest:
            if protocol in self._closed:
                n = self._requests[protocol] = self._requests.get(protocol, 0) + 1
                if n >= MAX_REQUESTS_PER_CONNECTION:
                    protocol.close()
            return inner_factory(message, payload, protocol, writer, task)

        def connection_lost(handler: Any, exc: BaseException | None = None) -> None:
            try:
                inner_lost(handler, exc)
            finally:
                self._requests.pop(handler, None)
                fut = self._closed.pop(handler, None)
                if fut is not None and not fut.done():
                    fut.set_result(None)

        server.request_factory = request_factory
        server.connection_lost = connection_lost  # type: ignore[method-assign]

    async def start(self) -> None:
        await super().start()
        loop = asyncio.get_running_loop()
        infos = await loop.getaddrinfo(self._host or None, self._port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        seen = set()
        for family, type_, proto, _, addr in infos:
            if (family, addr) in seen:
                continue
            seen.add((family, addr))
            sock = socket.socket(family, type_, proto)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            try:
                sock.bind(addr)
            except OSError:
                sock.close()
                self._close_sockets()
                raise
            sock.listen(128)
            sock.setblocking(False)
            self._socks.append(sock)
        self._server = _Listening(self._socks)  # type: ignore[assignment]  # runner.addresses reads its sockets
        for sock in self._socks:
            self._spawn(self._accept_loop(sock))

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _close_sockets(self) -> None:
        for sock in self._socks:
            sock.close()
        self._socks = []
        self._server = None

    async def stop(self) -> None:
        self._runner._check_site(self)
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._close_sockets()

    async def _accept_loop(self, sock: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                conn, addr = await loop.sock_accept(sock)
            except OSError as exc:
                STATS.accept_errors += 1
                if exc.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                    self._overload.note("accept errors", f"accept(): {exc.strerror}")
                    await asyncio.sleep(_ACCEPT_ERROR_BACKOFF_S)
                continue  # ECONNABORTED and friends: the client left before we took it
            host = str(addr[0])
            if self._per_address.get(host, 0) >= self.max_per_address and not self._evict(host):
                self._refuse(conn, "per_address", f"{host} has {self.max_per_address} connections open, the per-address cap")
                continue
            if self._open >= self.max_connections and not self._evict(None):
                self._refuse(conn, "cap", f"{self._open} connections open, cap {self.max_connections}")
                continue
            self._open += 1
            STATS.open += 1
            STATS.accepted += 1
            self._per_address[host] = self._per_address.get(host, 0) + 1
            entry = _Conn(host)
            task = asyncio.get_running_loop().create_task(self._serve(conn, host, entry))
            self._tasks.add(task)
            self._conns[task] = entry
            task.add_done_callback(self._forget)

    def _forget(self, task: asyncio.Task) -> None:
        self._tasks.discard(task)
        self._conns.pop(task, None)

    def _evict(self, host: str | None) -> bool:
        """Close the oldest connection that has not sent a whole request: of ``host``, or of the
        address holding the most such connections; False when there is none (every slot is
        answering a request)."""
        idle = [(task, c) for task, c in self._conns.items() if not c.evicted and (host is None or c.host == host) and c.waiting()]
        if not idle:
            return False
        if host is None:
            counts: dict[str, int] = {}
            for _task, c in idle:
                counts[c.host] = counts.get(c.host, 0) + 1
            worst = max(counts, key=lambda h: counts[h])
            idle = [(task, c) for task, c in idle if c.host == worst]
        task, victim = idle[0]
        victim.evicted = True
        STATS.evicted += 1
        self._overload.note("evicted (no whole request)", f"{self._open} connections open, cap {self.max_connections}")
        transport = getattr(victim.proto, "transport", None) if victim.proto is not None else None
        if transport is not None:
            transport.abort()  # RST: the slot and its descriptor come back at once
        else:
            task.cancel()  # still in its TLS handshake
        # Counted as gone now, so the new connection fits; the victim's own bookkeeping runs when it ends.
        self._open -= 1
        STATS.open -= 1
        left = self._per_address.get(victim.host, 1) - 1
        if left:
            self._per_address[victim.host] = left
        else:
            self._per_address.pop(victim.host, None)
        return True

    def _refuse(self, conn: socket.socket, why: str, detail: str) -> None:
        # SO_LINGER 0: reset instead of FIN, so no descriptor or TIME_WAIT state stays behind.
        with contextlib.suppress(OSError):
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        conn.close()
        STATS.refused[why] += 1
        self._overload.note(f"refused ({why.replace('_', '-')})", detail)

    async def _serve(self, conn: socket.socket, host: str, entry: _Conn) -> None:
        loop = asyncio.get_running_loop()
        closed: asyncio.Future[None] = loop.create_future()
        server = self._runner.server
        assert server is not None

        def factory() -> Any:
            proto = server()
            self._closed[proto] = closed
            entry.proto = proto
            return proto

        try:
            kw: dict[str, Any] = {"ssl": self._ssl_context, "ssl_handshake_timeout": self.handshake_timeout} if self._ssl_context else {}
            try:
                await loop.connect_accepted_socket(factory, conn, **kw)
            except (OSError, ssl.SSLError, TimeoutError, ConnectionError):
                STATS.handshake_failed += 1
                conn.close()
                for proto, fut in list(self._closed.items()):
                    if fut is closed:
                        del self._closed[proto]
                return
            await closed
        finally:
            if not entry.evicted:  # an evicted connection was counted out when it was chosen
                self._open -= 1
                STATS.open -= 1
                left = self._per_address.get(host, 1) - 1
                if left:
                    self._per_address[host] = left
                else:
                    self._per_address.pop(host, None)

