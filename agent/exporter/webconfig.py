"""exporter-toolkit web config (``--web.config.file``): TLS, mutual TLS, basic auth, headers, rate limit.

The same YAML as Prometheus exporters (prometheus/exporter-toolkit, docs/web-configuration.md)::

    tls_server_config:
      cert_file: server.crt          # relative paths: relative to this file, as in the toolkit
      key_file: server.key
      client_auth_type: RequireAndVerifyClientCert   # NoClientCert | VerifyClientCertIfGiven | ...
      client_ca_file: clients-ca.crt
      client_allowed_sans: [prometheus.example.org]
      min_version: TLS12             # TLS10 .. TLS13
      max_version: TLS13
    http_server_config:
      headers: {Strict-Transport-Security: max-age=31536000}
    basic_auth_users:
      prometheus: $2y$10$...         # bcrypt, e.g. `htpasswd -nBC 10 "" | tr -d ':\\n'`
    rate_limit: {interval: 100ms, burst: 10}

Everything is protected, /healthz included, as the toolkit does.

**Basic auth under attack.** bcrypt is slow on purpose (cost 10: about 0.1 s, cost 12: 0.4 s),
so a flood of wrong passwords could keep the verifier busy and starve the real scraper:

- A verified credential is cached under an HMAC-SHA256 (a key drawn at start, never stored)
  of user, hash and password: the cache holds no fast-to-guess digest of a password, and it
  survives reloads (an entry stays valid exactly while the user's hash is unchanged). A cached
  credential never waits for bcrypt. Identical uncached credentials checked at once share one
  bcrypt check.
- Failed verifications are rate-limited per client address (:data:`FAILURE_BURST` at once,
  then one per :data:`FAILURE_REFILL_S`); beyond that the address gets 429 without any
  bcrypt work.
- Uncached checks wait for the :data:`BCRYPT_WORKERS` bcrypt threads in a small priority
  queue (:data:`MAX_WAITING_CHECKS` places), served by the reputation of the client's address
  (IPv6 by /64): an address that has logged in before first, then an address with no recent
  failure, then addresses that keep failing; within each, the address that asked for fewer
  uncached checks lately (a decaying count, half-life :data:`PRESSURE_HALF_LIFE_S`) first.
  When the queue is full, a better-placed check takes the place of the worst one, which
  answers 503 at once. So a correct credential from a scraper's address never queues behind a
  flood from other addresses, cold cache or not (a fresh start, a rotated hash): it waits for
  at most the checks already running.
- Timing does not tell users apart. Every uncached check costs as much as one check at the
  highest bcrypt cost configured: an unknown user is checked against a dummy hash of that
  cost, and a known user whose hash has a lower cost is padded (an ``asyncio.sleep``
  outside the bcrypt threads) to the measured duration of a highest-cost check. This was
  chosen over re-hashing (the file holds hashes, not passwords) and over refusing mixed
  costs (htpasswd files accumulate users over years).

**Reload.** The toolkit re-reads the file on every request; fabricmon re-reads it on reload
(SIGHUP, ``POST /-/reload`` with ``--web.enable-lifecycle``), validated completely before anything changes: a broken file
fails the reload and the previous settings stay. The file and the certificates it names are read
like every file the agent reads (:mod:`fabricmon.core.files`: a FIFO or a device is refused at
once, sizes are bounded), and in a thread (:meth:`WebSecurity.prepare`), never on the event loop. Users, headers and rate limit change at
once. TLS: certificate, key, client CA, client_auth_type and versions change for new
connections (the listening socket keeps one SSLContext whose ``sni_callback`` switches each
handshake to the current context). Switching between plain HTTP and TLS needs a restart.

Not supported (rejected with a clear error rather than silently ignored): ``cipher_suites``,
``curve_preferences`` (OpenSSL picks its defaults) and the ``RequestClientCert`` /
``RequireAnyClientCert`` client auth types (Python's ssl cannot accept unverified client
certificates). ``http2`` and ``prefer_server_cipher_suites`` are accepted and ignored.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hmac
import ipaddress
import itertools
import logging
import os
import re
import ssl
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Literal

import bcrypt
from aiohttp import web
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from fabricmon.agent.config import ConfigError, _compose, _problems
from fabricmon.core.durations import Duration
from fabricmon.core.files import FileRefused, checked_path, read_regular

log = logging.getLogger(__name__)

TLS_VERSIONS = {
    "TLS10": ssl.TLSVersion.TLSv1,
    "TLS11": ssl.TLSVersion.TLSv1_1,
    "TLS12": ssl.TLSVersion.TLSv1_2,
    "TLS13": ssl.TLSVersion.TLSv1_3,
}
CLIENT_AUTH = {
    "NoClientCert": ssl.CERT_NONE,
    "VerifyClientCertIfGiven": ssl.CERT_OPTIONAL,
    "RequireAndVerifyClientCert": ssl.CERT_REQUIRED,
}
# Valid in the toolkit, but they accept client certificates without verifying them.
UNSUPPORTED_CLIENT_AUTH = ("RequestClientCert", "RequireAnyClientCert")
# Headers the toolkit refuses to let a config set.
RESERVED_HEADERS = {
    "authorization", "proxy-authorization", "proxy-authenticate", "www-authenticate", "content-encoding",
    "content-length", "content-type", "date", "connection", "keep-alive", "transfer-encoding", "vary", "set-cookie",
}
_BCRYPT = re.compile(r"^\$2[abxy]\$\d\d\$[./A-Za-z0-9]{53}$")
_CACHE_MAX = 1024
BCRYPT_WORKERS = 2  # threads verifying at once: bounds the CPU a flood of bad passwords can take
MAX_WAITING_CHECKS = 8  # uncached checks queued behind them; more answer 503 at once
FAILURE_BURST = 5  # wrong passwords an address may try at once (a human retyping, a misconfigured scraper)
FAILURE_REFILL_S = 2.0  # then one try per 2 s: 30 per minute, far too few to guess a password
_MAX_TRACKED_ADDRESSES = 4096  # per-address failure buckets (and trusted addresses) kept; the oldest are forgotten first
MAX_WEB_CONFIG_BYTES = 1 << 20  # users, headers, TLS paths: a few KB; 1 MiB holds over 10,000 users
MAX_PEM_BYTES = 4 << 20  # a certificate chain, a key, or a client CA bundle (the Debian bundle is ~220 KB)
# Priority classes of an uncached check (lower first): see the module docstring.
TRUSTED, CLEAN, FAILING = 0, 1, 2
PRESSURE_HALF_LIFE_S = 10.0  # how fast an address's count of recent uncached checks decays
REALM_HEADER = 'Basic realm="fabricmon"'


class WebConfigError(ValueError):
    """A web config file that cannot be used; the message names the file and the key."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class TLSServerConfig(_Strict):
    cert_file: str | None = None
    key_file: str | None = None
    client_auth_type: str = "NoClientCert"
    client_ca_file: str | None = None
    client_allowed_sans: list[str] = Field(default_factory=list)
    min_version: Literal["TLS10", "TLS11", "TLS12", "TLS13"] = "TLS12"
    max_version: Literal["TLS10", "TLS11", "TLS12", "TLS13"] = "TLS13"
    prefer_server_cipher_suites: bool | None = None  # accepted, ignored: OpenSSL servers prefer their order
    cipher_suites: list[str] | None = None
    curve_preferences: list[str] | None = None

    @field_validator("client_auth_type")
    @classmethod
    def _auth_type(cls, v: str) -> str:
        if v in UNSUPPORTED_CLIENT_AUTH:
            raise ValueError(f"{v} (accepting unverified client certificates) is not supported by fabricmon; "
                             "use VerifyClientCertIfGiven or RequireAndVerifyClientCert with client_ca_file")
        if v not in CLIENT_AUTH:
            raise ValueError(f"unknown client_auth_type {v!r}; one of {', '.join(CLIENT_AUTH)}")
        return v

    @model_validator(mode="after")
    def _check(self) -> TLSServerConfig:
        if self.cipher_suites is not None or self.curve_preferences is not None:
            raise ValueError("cipher_suites and curve_preferences are not supported by fabricmon (OpenSSL defaults are used); remove them")
        if not self.cert_file:
            raise ValueError("cert_file is required")
        if not self.key_file:
            raise ValueError("key_file is required")
        if self.client_ca_file and self.client_auth_type == "NoClientCert":
            raise ValueError("client_ca_file is set but client_auth_type is NoClientCert: set client_auth_type too")
        if self.client_auth_type != "NoClientCert" and not self.client_ca_file:
            raise ValueError(f"client_auth_type {self.client_auth_type} needs client_ca_file")
        if self.client_allowed_sans and self.client_auth_type != "RequireAndVerifyClientCert":
            raise ValueError("client_allowed_sans needs client_auth_type RequireAndVerifyClientCert")
        if TLS_VERSIONS[self.min_version] > TLS_VERSIONS[self.max_version]:
            raise ValueError(f"min_version {self.min_version} is above max_version {self.max_version}")
        return self


class HTTPServerConfig(_Strict):
    headers: dict[str, str] = Field(default_factory=dict)
    http2: bool = True  # accepted, ignored: aiohttp serves HTTP/1.1

    @field_validator("headers")
    @classmethod
    def _headers(cls, v: dict[str, str]) -> dict[str, str]:
        for name, value in v.items():
            low = name.lower()
            if low in RESERVED_HEADERS:
                raise ValueError(f"header {name} cannot be configured")
            if low == "x-content-type-options" and value.lower() != "nosniff":
                raise ValueError(f"X-Content-Type-Options must be nosniff, not {value!r}")
            if low == "x-frame-options" and value.lower() not in ("deny", "sameorigin"):
                raise ValueError(f"X-Frame-Options must be deny or sameorigin, not {value!r}")
        return v


class RateLimit(_Strict):
    interval: Duration = Field(description="time to earn one request")
    burst: int = Field(ge=1)


class WebConfigFile(_Strict):
    tls_server_config: TLSServerConfig | None = None
    http_server_config: HTTPServerConfig = Field(default_factory=HTTPServerConfig)
    basic_auth_users: dict[str, str] = Field(default_factory=dict)
    rate_limit: RateLimit | None = None

    @field_validator("basic_auth_users")
    @classmethod
    def _hashes(cls, v: dict[str, str]) -> dict[str, str]:
        for user, h in v.items():
            if not isinstance(h, str) or not _BCRYPT.match(h):
                # Never echo the value: a plain password pasted here must not reach a log.
                raise ValueError(f"user {user!r}: not a bcrypt hash (expected $2y$10$... as made by `htpasswd -nBC 10 \"\"`)")
        return v


# ---------------------------------------------------------------------- loading
def parse(text: str, path: str) -> WebConfigFile:
    try:
        data, lines = _compose(text, path)
    except ConfigError as exc:
        raise WebConfigError("; ".join(exc.problems)) from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise WebConfigError(f"{path}:1: a web config must be a mapping (tls_server_config:, basic_auth_users:, ...)")
    try:
        return WebConfigFile.model_validate(data)
    except ValidationError as exc:
        raise WebConfigError("; ".join(_problems(exc, path, lines))) from None


def _read(path: str) -> WebConfigFile:
    try:
        raw = read_regular(path, MAX_WEB_CONFIG_BYTES, "web config")
    except FileRefused as exc:
        raise WebConfigError(str(exc)) from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise WebConfigError(f"{path}: web config is not UTF-8 text (byte {exc.start})") from None
    return parse(text, path)


def build_ssl_context(tls: TLSServerConfig, path: str) -> ssl.SSLContext:
    """A server SSLContext; errors name the web config file, the key and the file it points to.
    The files are opened like every file the agent reads (no FIFO, no device, bounded size)."""
    base = Path(path).resolve().parent

    def rel(p: str) -> str:
        return str(base / p)

    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = TLS_VERSIONS[tls.min_version]
    ctx.maximum_version = TLS_VERSIONS[tls.max_version]
    assert tls.cert_file and tls.key_file  # the model requires them
    cert, key = rel(tls.cert_file), rel(tls.key_file)
    try:
        with checked_path(cert, MAX_PEM_BYTES, "certificate") as cert_p, checked_path(key, MAX_PEM_BYTES, "key") as key_p:
            ctx.load_cert_chain(cert_p, key_p)
    except FileRefused as exc:
        raise WebConfigError(f"{path}: tls_server_config.cert_file/key_file: {exc}") from None
    except (OSError, ssl.SSLError) as exc:
        raise WebConfigError(f"{path}: tls_server_config.cert_file/key_file: cannot load {cert} with {key}: "
                             f"{getattr(exc, 'strerror', None) or exc}") from None
    if tls.client_ca_file:
        ca = rel(tls.client_ca_file)
        try:
            with checked_path(ca, MAX_PEM_BYTES, "client CA file") as ca_p:
                ctx.load_verify_locations(cafile=ca_p)
        except FileRefused as exc:
            raise WebConfigError(f"{path}: tls_server_config.client_ca_file: {exc}") from None
        except (OSError, ssl.SSLError) as exc:
            raise WebConfigError(f"{path}: tls_server_config.client_ca_file: cannot load {ca}: "
                                 f"{getattr(exc, 'strerror', None) or exc}") from None
    ctx.verify_mode = CLIENT_AUTH[tls.client_auth_type]
    return ctx


class _Bucket:
    """Token bucket like golang.org/x/time/rate: one token per ``interval``, at most ``burst``."""

    def __init__(self, interval: float, burst: int) -> None:
        self.interval, self.burst = interval, burst
        self.tokens = float(burst)
        self.t = time.monotonic()

    def available(self) -> bool:
        """Refill, and say whether a token is there (without taking it)."""
        now = time.monotonic()
        if self.interval > 0:
            self.tokens = min(float(self.burst), self.tokens + (now - self.t) / self.interval)
        else:
            self.tokens = float(self.burst)
        self.t = now
        return self.tokens >= 1.0

    def allow(self) -> bool:
        if self.available():
            self.tokens -= 1.0
            return True
        return False


def _sans(peercert: dict[str, Any] | None) -> set[str]:
    return {str(v) for _k, v in (peercert or {}).get("subjectAltName", ())}


class _CheckQueue:
    """At most ``workers`` checks at once; at most ``places`` waiting, served best first. A
    waiter's rank is (class, the current pressure of its address, arrival): computed when it
    matters, so an address that kept asking since it queued has dropped back meanwhile. A full
    queue gives a newcomer's place to it when it ranks better than the worst waiter, which is
    told "busy" at once."""

    def __init__(self, workers: int, places: int, pressure: Callable[[str], float]) -> None:
        self.workers, self.places = workers, places
        self._pressure = pressure
        self._running = 0
        self._waiting: list[tuple[int, str, int, asyncio.Future[bool]]] = []  # (class, group, arrival, granted?)
        self._seq = itertools.count()

    def _rank(self, entry: tuple[int, str, int, asyncio.Future[bool]]) -> tuple[int, int, int]:
        klass, group, seq, _fut = entry
        return klass, int(self._pressure(group)).bit_length(), seq  # pressure 0, 1, 2-3, 4-7, ...

    async def run(self, klass: int, group: str, check: Callable[[], Awaitable[bool]]) -> bool | None:
        """``check()``'s result, or None when there was no place (answer 503)."""
        if self._running >= self.workers or self._waiting:
            entry = (klass, group, next(self._seq), asyncio.get_running_loop().create_future())
            if len(self._waiting) >= self.places:
                worst = max(self._waiting, key=self._rank)
                if self._rank(entry) > self._rank(worst):
                    return None
                self._waiting.remove(worst)
                worst[3].set_result(False)
            self._waiting.append(entry)
            try:
                if not await entry[3]:
                    return None  # pushed out by a better-placed check
            except asyncio.CancelledError:
                if entry in self._waiting:
                    self._waiting.remove(entry)
                elif entry[3].done() and not entry[3].cancelled() and entry[3].result():
                    self._release()  # the slot was handed over as the client left
                raise
        else:
            self._running += 1
        try:
            return await check()
        finally:
            self._release()

    def _release(self) -> None:
        """Hand the slot to the best waiter, or free it."""
        while self._waiting:
            best = min(self._waiting, key=self._rank)
            self._waiting.remove(best)
            if not best[3].done():
                best[3].set_result(True)
                return
        self._running -= 1


def address_group(address: str) -> str:
    """The unit an address's reputation is kept for: the address, or its /64 for IPv6 (one host
    can hold a whole /64, so single IPv6 addresses are free to an attacker)."""
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return address
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return str(ipaddress.ip_network(f"{ip}/64", strict=False))
    return str(ip)


class WebSecurity:
    """The aiohttp middleware that enforces a web config, and owns the server's SSLContext."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.config = WebConfigFile()
        self.ssl_context: ssl.SSLContext | None = None  # the listening socket's context (fixed)
        self._current: ssl.SSLContext | None = None  # the context handshakes switch to
        self._key = os.urandom(32)  # HMAC key of the credential cache: in memory only, new at every start
        self._ok_cache: OrderedDict[bytes, None] = OrderedDict()  # least recently used first
        self._inflight: dict[bytes, asyncio.Future[bool | None]] = {}  # one bcrypt check per credential at a time
        self._bucket: _Bucket | None = None
        self._queue = _CheckQueue(BCRYPT_WORKERS, MAX_WAITING_CHECKS, self._pressure_of)
        self._failures: dict[str, _Bucket] = {}
        self._trusted: OrderedDict[str, None] = OrderedDict()  # address groups that logged in before
        self._pressure: OrderedDict[str, tuple[float, float]] = OrderedDict()  # group -> (recent uncached checks, when)
        self._dummy = ""  # a hash of the highest configured cost, for unknown users
        self._check_s: dict[int, float] = {}  # measured seconds of one check, per bcrypt cost
        self.reload(initial=True)

    # ------------------------------------------------------------------ (re)load
    def prepare(self, initial: bool = False) -> Callable[[], None]:
        """Read and validate the file and load its certificates (file I/O: call it in a thread, never
        on the event loop); returns the commit that switches to it (call it on the loop).
        WebConfigError keeps the old settings."""
        cfg = _read(self.path)
        ctx = build_ssl_context(cfg.tls_server_config, self.path) if cfg.tls_server_config else None
        if not initial and (ctx is None) != (self.ssl_context is None):
            raise WebConfigError(f"{self.path}: tls_server_config was {'added' if ctx else 'removed'}: "
                                 "switching between HTTP and HTTPS needs a restart")
        dummy = _dummy_hash(max((_cost(h) for h in cfg.basic_auth_users.values()), default=4))

        def commit() -> None:
            self._commit(cfg, ctx, dummy, initial)

        return commit

    def reload(self, initial: bool = False) -> None:
        """:meth:`prepare` and commit at once (start-up, tests)."""
        self.prepare(initial)()

    def _commit(self, cfg: WebConfigFile, ctx: ssl.SSLContext | None, dummy: str, initial: bool) -> None:
        self.config = cfg
        # The credential cache is kept: its keys contain the user's hash, so a changed hash or a removed
        # user simply stops matching (and `known` is checked first).
        self._dummy = dummy
        self._bucket = _Bucket(cfg.rate_limit.interval, cfg.rate_limit.burst) if cfg.rate_limit else None
        if ctx is not None:
            if self.ssl_context is None:
                self.ssl_context = ctx
                ctx.sni_callback = self._switch_context
            else:
                base = self.ssl_context
                # Per-connection settings are copied from the listening context when a connection starts.
                base.verify_mode = ctx.verify_mode
                base.minimum_version = ctx.minimum_version
                base.maximum_version = ctx.maximum_version
            self._current = ctx
        if not initial:
            log.info("web config reloaded from %s", self.path)

    def _switch_context(self, sslobj: Any, server_name: str | None, ctx: ssl.SSLContext) -> None:
        """Called by OpenSSL on every ClientHello (with or without SNI): use the latest certificate and CAs."""
        current = self._current
        if current is not None and current is not ctx:
            sslobj.context = current

    # ------------------------------------------------------------------ middleware
    async def middleware(self, request: web.Request, handler: Any) -> web.StreamResponse:
        headers = self.config.http_server_config.headers
        try:
            resp = await self._guarded(request, handler)
        except web.HTTPException as exc:
            exc.headers.update(headers)
            raise
        resp.headers.update(headers)
        return resp

    async def _guarded(self, request: web.Request, handler: Any) -> web.StreamResponse:
        cfg = self.config
        if self._bucket is not None and not self._bucket.allow():
            return web.Response(status=429, text="Too Many Requests\n")
        tls = cfg.tls_server_config
        if tls is not None and tls.client_allowed_sans:
            peer = request.transport.get_extra_info("peercert") if request.transport else None
            if not _sans(peer) & set(tls.client_allowed_sans):
                return web.Response(status=403, text="Forbidden: client certificate SAN not allowed\n")
        if cfg.basic_auth_users:
            verdict = await self._authorized(request.headers.get("Authorization", ""), request.remote or "")
            if verdict == "busy":
                return web.Response(status=503, text="Service Unavailable: too many password checks waiting\n",
                                    headers={"Retry-After": "1"})
            if verdict == "limited":
                return web.Response(status=429, text="Too Many Requests: too many failed logins from this address\n",
                                    headers={"Retry-After": f"{FAILURE_REFILL_S:.0f}"})
            if verdict != "ok":
                return web.Response(status=401, text="Unauthorized\n", headers={"WWW-Authenticate": REALM_HEADER})
        return await handler(request)

    async def _authorized(self, header: str, address: str) -> Literal["ok", "denied", "limited", "busy"]:
        """Cached credentials first; then the per-address failure limit; then the bcrypt queue."""
        scheme, _, encoded = header.partition(" ")
        if scheme.lower() != "basic":
            return "denied"
        try:
            user, sep, password = base64.b64decode(encoded.strip(), validate=True).decode("utf-8").partition(":")
        except (binascii.Error, UnicodeDecodeError):
            return "denied"
        if not sep:
            return "denied"
        users = self.config.basic_auth_users
        known = user in users
        hashed = users[user] if known else self._dummy
        key = hmac.digest(self._key, b"\0".join((user.encode(), hashed.encode(), password.encode())), "sha256")
        group = address_group(address)
        if known and key in self._ok_cache:
            self._ok_cache.move_to_end(key)
            return "ok"
        bucket = self._failures.get(group)
        if bucket is not None and not bucket.available():
            return "limited"
        pending = self._inflight.get(key)
        if pending is None:
            failing = bucket is not None and bucket.tokens < bucket.burst  # failed recently (the bucket refills)
            klass = TRUSTED if group in self._trusted else FAILING if failing else CLEAN
            self._pressed(group)
            pending = self._inflight[key] = asyncio.ensure_future(self._queue.run(klass, group, lambda: self._check(password, hashed)))
            pending.add_done_callback(lambda _f: self._inflight.pop(key, None))
        ok = await asyncio.shield(pending)  # a client that leaves does not cancel the check others wait for
        if ok is None:
            return "busy"
        if ok and known:
            if key not in self._ok_cache:
                self._ok_cache[key] = None
                if len(self._ok_cache) > _CACHE_MAX:
                    self._ok_cache.popitem(last=False)
            self._trusted[group] = None
            self._trusted.move_to_end(group)
            if len(self._trusted) > _MAX_TRACKED_ADDRESSES:
                self._trusted.popitem(last=False)
            return "ok"
        self._failed(group)
        return "denied"

    def _pressure_of(self, group: str) -> float:
        """The uncached checks ``group`` asked for lately (decayed), this one not counted."""
        value, t = self._pressure.get(group, (1.0, time.monotonic()))
        return max(0.0, value * 0.5 ** ((time.monotonic() - t) / PRESSURE_HALF_LIFE_S) - 1.0)

    def _pressed(self, group: str) -> None:
        """Count one more uncached check of ``group``."""
        now = time.monotonic()
        value, t = self._pressure.pop(group, (0.0, now))
        self._pressure[group] = (value * 0.5 ** ((now - t) / PRESSURE_HALF_LIFE_S) + 1.0, now)
        if len(self._pressure) > _MAX_TRACKED_ADDRESSES:
            self._pressure.popitem(last=False)

    async def _check(self, password: str, hashed: str) -> bool:
        """One bcrypt check in a thread, padded to the duration of a check at the highest configured cost."""
        cost, top = _cost(hashed), _cost(self._dummy)
        t0 = time.perf_counter()
        try:
            ok = await asyncio.to_thread(bcrypt.checkpw, password.encode(), hashed.encode())
        except ValueError:
            ok = False
        took = time.perf_counter() - t0
        prev = self._check_s.get(cost)
        self._check_s[cost] = took if prev is None else 0.5 * prev + 0.5 * took  # follows load changes within a few checks
        if cost < top:
            # bcrypt's work doubles with each cost step; a measured top-cost duration is preferred.
            target = self._check_s.get(top, self._check_s[cost] * 2 ** (top - cost))
            if target > took:
                await asyncio.sleep(target - took)
        return ok

    def _failed(self, address: str) -> None:
        bucket = self._failures.pop(address, None)  # re-inserted: the dict stays ordered by last failure
        if bucket is None:
            if len(self._failures) >= _MAX_TRACKED_ADDRESSES:
                self._failures.pop(next(iter(self._failures)))
            bucket = _Bucket(FAILURE_REFILL_S, FAILURE_BURST)
        bucket.allow()
        self._failures[address] = bucket


def _cost(hashed: str) -> int:
    return int(hashed[4:6])


_DUMMIES: dict[int, str] = {}


def _dummy_hash(cost: int) -> str:
    """A well-formed bcrypt hash of ``cost`` that matches no password (checking it costs the full work)."""
    if cost not in _DUMMIES:
        _DUMMIES[cost] = bcrypt.gensalt(cost).decode() + "." * 31
    return _DUMMIES[cost]


def load(path: str) -> tuple[ssl.SSLContext | None, list[Any]]:
    """(SSLContext or None, [middleware]) for ``start_server``/``make_app``; WebConfigError when unusable.

    The middleware has a ``reload()`` method (bound through ``security``) that the agent calls on reload.
    """
    sec = WebSecurity(path)
    return sec.ssl_context, [_ReloadableMiddleware(sec)]


class _ReloadableMiddleware:
    """An aiohttp middleware (a callable) that also exposes ``reload()`` and the ``security`` object."""

    __middleware_version__ = 1

    def __init__(self, security: WebSecurity) -> None:
        self.security = security

    async def __call__(self, request: web.Request, handler: Any) -> web.StreamResponse:
        return await self.security.middleware(request, handler)

    def reload(self) -> None:
        self.security.reload()

    def prepare(self) -> Callable[[], None]:
        """Read the file in the caller's thread; the returned commit switches to it (see WebSecurity.prepare)."""
        return self.security.prepare()
