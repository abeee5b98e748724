"""A small aiohttp client for the REST collectors (UFM, UFM Telemetry, NVUE).

Why a shared helper: every REST source needs the same care — TLS verified by default (with a
CA file for self-signed appliances and an explicit opt-out), basic or token auth, a cap on
body size, a check that the body was not cut short, and every failure turned into a
:class:`FetchError` with a reason the error metric can count. Secrets are resolved at fetch
time (a secret file is read in a thread) and never appear in a message, a payload or a
recording.

**Objects, not bytes.** A JSON body is also bounded in values (``max_values``,
:mod:`fabricmon.core.boundedjson`): counted as it arrives, refused beyond the bound (reason
``size``) before the rest is read, and a large body is decoded element by element in a
thread, so neither a body of ``[{},{},...]`` nor a legitimate 100 MB ports list takes the
memory or the event loop. A body nested deeper than the decoder can follow is reason
``protocol``.

**Compressed bodies** are decompressed here, not by aiohttp: its decompression of a gzip bomb
(255 KB on the wire, 250 MB inside) ran on the event loop in 64 MB steps. Here each step makes
at most :data:`_INFLATE_STEP` bytes, the byte cap and the values bound apply to what comes out,
and the loop gets a turn between steps. Accepted encodings: gzip and deflate (what the request
offers).
"""

from __future__ import annotations

import asyncio
import base64
import email.utils
import ssl
import time
import zlib
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any, ClassVar, Literal, Self
from urllib.parse import urlsplit

import aiohttp
from pydantic import model_validator

from fabricmon.collectors.base import Collector, ErrorReason, FetchError, LocalFile, SourceOptions, resolve_secret
from fabricmon.core import boundedjson, secrets
from fabricmon.core.files import MAX_PEM_BYTES, FileRefused, checked_path, read_regular
from fabricmon.core.threads import in_daemon_thread

DEFAULT_MAX_BODY = 256 * 1024 * 1024  # a full-fabric UFM ports list can be tens of MB
_INFLATE_STEP = 1 << 20  # decompressed bytes per step (a few ms of zlib), then the loop gets a turn


@dataclass(slots=True)
class HttpAuth:
    """``kind``: ``none``, ``basic`` (username + secret) or ``token`` (``Authorization: <scheme> <secret>``)."""

    kind: str = "none"
    username: str = ""
    secret: str = ""
    token_scheme: str = "Bearer"
    # Headers of an API's own scheme (slurmrestd: X-SLURM-USER-NAME and X-SLURM-USER-TOKEN),
    # sent whatever the kind; a secret among them is resolved like any other.
    extra: tuple[tuple[str, str], ...] = ()

    def headers(self) -> dict[str, str]:
        return {**self._authorization(), **dict(self.extra)}

    def _authorization(self) -> dict[str, str]:
        if self.kind == "basic":
            pair = base64.b64encode(f"{self.username}:{self.secret}".encode()).decode("ascii")
            secrets.remember(pair)  # a device that echoes this header in an error body: redacted like the password
            return {"Authorization": f"Basic {pair}"}
        if self.kind == "token":
            return {"Authorization": f"{self.token_scheme} {self.secret}"}
        return {}


# The files a TLS client reads (Collector.files): the CA bundle and a client certificate and key.
TLS_FILES = (LocalFile("ca_file", "ca"), LocalFile("cert_file", "tls"), LocalFile("key_file", "tls"))


class TlsPasswordOptions(SourceOptions):
    """The TLS and credential keys every source that talks to a device over TLS with a
    username and password has, spelled the same everywhere (REST sources and gNMI):
    ``ca_file`` (PEM CA bundle; default the system store), ``tls_insecure_skip_verify`` (only
    when asked), ``cert_file``/``key_file`` (a client certificate), ``username`` and
    ``password`` / ``password_file`` / ``password_env``."""

    ca_file: str | None = None
    tls_insecure_skip_verify: bool = False
    cert_file: str | None = None
    key_file: str | None = None
    username: str | None = None
    password: str | None = None
    password_file: str | None = None
    password_env: str | None = None

    @model_validator(mode="after")
    def _client_cert_pair(self) -> Self:
        if bool(self.cert_file) != bool(self.key_file):
            raise ValueError("a client certificate needs both cert_file and key_file")
        return self


class RestOptions(TlsPasswordOptions):
    """Options every REST collector has: where and how to connect, and basic credentials.
    Subclasses override defaults (port, scheme) and add their own fields."""

    scheme: Literal["https", "http"] = "https"
    port: int | None = None
    max_body_bytes: int = DEFAULT_MAX_BODY
    max_values: int = boundedjson.MAX_VALUES  # values a JSON body may hold (see the module docstring)


class TokenRestOptions(RestOptions):
    """REST options for APIs that also take a token (UFM, UFM Telemetry)."""

    token: str | None = None
    token_file: str | None = None
    token_env: str | None = None


def auth_from_options(o: RestOptions, token_scheme: str = "Bearer") -> HttpAuth:
    """The HttpAuth for a REST collector's options: ``auth`` (none, basic, token; basic when
    the options have no such field), ``username``, ``password[_file|_env]``,
    ``token[_file|_env]`` and an optional ``token_scheme``. Secrets are read at call time."""
    kind = getattr(o, "auth", "basic")
    if kind == "basic":
        password = resolve_secret("password", o.password, o.password_file, o.password_env) or ""
        return HttpAuth("basic", username=o.username or "", secret=password)
    if kind == "token":
        token = resolve_secret("token", o.token, o.token_file, o.token_env) or ""
        return HttpAuth("token", secret=token, token_scheme=getattr(o, "token_scheme", token_scheme))
    return HttpAuth()


@dataclass(slots=True)
class HttpResponse:
    """One finished call; ``record()`` is the recording's RESPONSE object."""

    method: str
    path: str
    status: int
    body: Any  # parsed JSON when the response was JSON, else text
    content_type: str = ""

    def record(self) -> dict[str, Any]:
        return {"method": self.method, "path": self.path, "status": self.status, "body": self.body}


def make_ssl_context(ca_file: str | None, insecure: bool, cert_file: str | None = None, key_file: str | None = None) -> ssl.SSLContext:
    """Verify against the system store, or ``ca_file``; ``insecure`` turns verification off;
    ``cert_file``/``key_file``: the client certificate to present. Each file is opened without
    blocking and must be a regular file of at most MAX_PEM_BYTES (a FIFO or ``/dev/zero`` is a
    ``tls`` error at once, see fabricmon.core.files); callers on the event loop run this in a thread."""
    if insecure:
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    else:
        try:
            if ca_file:
                with checked_path(ca_file, MAX_PEM_BYTES, "ca_file") as ca:
                    ctx = ssl.create_default_context(cafile=ca)
            else:
                ctx = ssl.create_default_context()
        except (OSError, ssl.SSLError, FileRefused) as exc:
            raise FetchError(f"cannot load ca_file {ca_file}: {exc}", ErrorReason.TLS) from None
    if cert_file:
        try:
            with checked_path(cert_file, MAX_PEM_BYTES, "cert_file") as cert, \
                    checked_path(key_file or cert_file, MAX_PEM_BYTES, "key_file") as key:
                ctx.load_cert_chain(cert, key)
        except (OSError, ssl.SSLError, FileRefused) as exc:
            raise FetchError(f"cannot load the client certificate cert_file {cert_file} / key_file {key_file}: {exc}",
                             ErrorReason.TLS) from None
    return ctx


def read_pem(path: str | None, option: str) -> bytes | None:
    """A PEM file's bytes for a TLS option (gRPC takes bytes, not paths); None when unset. A
    regular file of at most MAX_PEM_BYTES, opened without blocking (callers run it in a thread)."""
    if not path:
        return None
    try:
        return read_regular(path, MAX_PEM_BYTES, option)
    except FileRefused as exc:
        raise FetchError(f"cannot read {option} {path}: {exc}", ErrorReason.TLS) from None


def base_url(scheme: str, address: str, port: int | None) -> str:
    """``scheme://host[:port]``; IPv6 literals get brackets."""
    host = address.strip()
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    return f"{scheme}://{host}" + (f":{port}" if port else "")


class HttpClient:
    """One keep-alive session to one appliance. Create inside the event loop; ``close()`` when done."""

    def __init__(
        self,
        base: str,
        *,
        auth: HttpAuth | None = None,
        ca_file: str | None = None,
        insecure: bool = False,
        client_cert: tuple[str, str] | None = None,
        max_body_bytes: int = DEFAULT_MAX_BODY,
        max_values: int = boundedjson.MAX_VALUES,
        headers: dict[str, str] | None = None,
        connect_timeout: float | None = 10.0,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self.base = base.rstrip("/")
        self.auth = auth or HttpAuth()
        self.ca_file = ca_file
        self.insecure = insecure
        self.client_cert = client_cert
        self.max_body_bytes = max_body_bytes
        self.max_values = max_values
        self.headers = dict(headers or {})
        self.connect_timeout = connect_timeout
        self.ssl_context = ssl_context  # made by the caller (a kubeconfig's CA and client certificate), else from ca_file
        self._session: aiohttp.ClientSession | None = None

    async def _get_session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            ssl_arg: ssl.SSLContext | bool = True
            if urlsplit(self.base).scheme == "https":  # the CA and certificate files are read in a thread
                ssl_arg = self.ssl_context or await asyncio.to_thread(
                    make_ssl_context, self.ca_file, self.insecure, *(self.client_cert or (None, None)))
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(ssl=ssl_arg),
                headers={"Accept": "application/json, text/plain;q=0.9, */*;q=0.5", "Accept-Encoding": "gzip, deflate",
                         **self.headers, **self.auth.headers()},
                auto_decompress=False,  # bounded, in steps: _read_body
                timeout=aiohttp.ClientTimeout(total=None, sock_connect=self.connect_timeout),
                # Redirects could carry the credentials to another host: never follow them silently.
            )
        return self._session

    async def close(self) -> None:
        session, self._session = self._session, None
        if session is not None and not session.closed:
            await session.close()

    async def get(self, path: str, *, ok_statuses: range = range(200, 300), want_json: bool = False) -> HttpResponse:
        """GET ``path`` (with its query string).

        401/403 raise FetchError "auth"; other statuses outside ``ok_statuses`` raise "http".
        ``want_json``: the body must be JSON whatever the Content-Type, else "protocol".
        """
        url = self.base + path
        session = await self._get_session()
        try:
            async with session.get(url, allow_redirects=False) as resp:
                ctype = resp.headers.get("Content-Type", "")
                counted = (want_json and 200 <= resp.status < 300) or "json" in ctype.lower()
                raw = await self._read_body(resp, path, counted)
                status = resp.status
                retry_header = resp.headers.get("Retry-After")
        except FetchError:
            raise
        except TimeoutError:
            raise FetchError(f"timed out on GET {path}", ErrorReason.TIMEOUT) from None
        except aiohttp.ClientConnectorCertificateError as exc:
            raise FetchError(f"TLS certificate of {self.base} not trusted ({exc.certificate_error}); "
                             "set ca_file, or tls_insecure_skip_verify", ErrorReason.TLS) from None
        except (aiohttp.ClientSSLError, aiohttp.ServerFingerprintMismatch, ssl.SSLError) as exc:
            raise FetchError(f"TLS error talking to {self.base}: {exc}", ErrorReason.TLS) from None
        except aiohttp.ClientConnectorError as exc:
            raise FetchError(f"cannot connect to {self.base}: {exc.os_error.strerror or exc.os_error}", ErrorReason.CONNECTION) from None
        except aiohttp.ClientPayloadError as exc:
            raise FetchError(f"response to GET {path} was cut short: {exc}", ErrorReason.SIZE) from None
        except (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError) as exc:
            raise FetchError(f"connection to {self.base} lost during GET {path}: {exc}", ErrorReason.CONNECTION) from None
        except aiohttp.ClientError as exc:
            raise FetchError(f"HTTP protocol error on GET {path}: {exc}", ErrorReason.PROTOCOL) from None

        if status in (401, 403):
            raise FetchError(f"GET {path} refused with HTTP {status}: check the credentials and the user's role", ErrorReason.AUTH)
        if status not in ok_statuses:
            if 300 <= status < 400:
                raise FetchError(f"GET {path} answered with a redirect (HTTP {status}); check scheme, port and URL prefix",
                                 ErrorReason.HTTP)
            if status in (429, 503):
                wait = retry_after_seconds(retry_header)
                asks = f"; the server asks to wait {wait:g} s (Retry-After)" if wait is not None else ""
                why = "rate limited" if status == 429 else "service unavailable"
                raise FetchError(f"GET {path} {why} (HTTP {status}){asks}: {_snippet(raw)}", ErrorReason.HTTP, retry_after=wait)
            raise FetchError(f"GET {path} failed with HTTP {status}: {_snippet(raw)}", ErrorReason.HTTP)
        json_body = (want_json and 200 <= status < 300) or "json" in ctype.lower()
        if len(raw) < boundedjson.SLICE_BYTES:
            return _decode(path, status, ctype, raw, json_body, want_json, self.max_values)
        # A large body is decoded in a thread, element by element (the loop keeps the GIL often enough),
        # a daemon one: a stop does not wait for a decode in progress.
        return await in_daemon_thread(_decode, path, status, ctype, raw, json_body, want_json, self.max_values)

    async def _read_body(self, resp: aiohttp.ClientResponse, path: str, count_values: bool) -> bytes:
        """The body, decompressed, at most ``max_body_bytes`` (and ``max_values`` values when it
        is JSON, ``count_values``); FetchError("size") as soon as either is passed."""
        declared = resp.content_length
        limit = self.max_body_bytes
        if declared is not None and declared > limit:
            raise FetchError(f"response to GET {path} is {declared} bytes, over the {limit}-byte limit", ErrorReason.SIZE)
        encoding = resp.headers.get("Content-Encoding", "").strip().lower()
        if encoding in ("", "identity"):
            inflate = None
        elif encoding in ("gzip", "x-gzip", "deflate"):
            inflate = _Inflater(encoding)
        else:
            raise FetchError(f"response to GET {path} has Content-Encoding {encoding[:40]!r}, which was not asked for",
                             ErrorReason.PROTOCOL)
        chunks: list[bytes] = []
        received = total = values = 0
        async for chunk in resp.content.iter_chunked(1 << 16):
            received += len(chunk)
            for piece in (inflate.steps(chunk) if inflate is not None else (chunk,)):
                total += len(piece)
                if total > limit:
                    raise FetchError(f"response to GET {path} exceeds the {limit}-byte limit"
                                     + (" once decompressed" if inflate is not None else ""), ErrorReason.SIZE)
                if count_values:
                    values += piece.count(b",") + piece.count(b"{") + piece.count(b"[")
                    if values > self.max_values:
                        raise FetchError(f"response to GET {path} holds more than {self.max_values:,} values (the limit, "
                                         "counted before decoding); refused", ErrorReason.SIZE)
                chunks.append(piece)
                if inflate is not None:
                    await asyncio.sleep(0)  # a turn for the loop between decompression steps
        if inflate is not None:
            inflate.check(path)
        body = b"".join(chunks)
        # aiohttp normally raises on a short body; this also catches a peer that closed cleanly.
        if declared is not None and received < declared:
            raise FetchError(f"response to GET {path} truncated: {received} of {declared} bytes (Content-Length)", ErrorReason.SIZE)
        return body


class _Inflater:
    """A gzip or deflate body decompressed in steps of at most _INFLATE_STEP bytes."""

    def __init__(self, encoding: str) -> None:
        self.deflate = encoding == "deflate"
        self.d = zlib.decompressobj(zlib.MAX_WBITS | 32 if not self.deflate else zlib.MAX_WBITS)  # 32: gzip or zlib header
        self.raw_tried = False

    def steps(self, chunk: bytes):
        data = chunk
        while data:
            try:
                out = self.d.decompress(data, _INFLATE_STEP)
            except zlib.error:
                if self.deflate and not self.raw_tried:  # "deflate" without the zlib wrapper, as some servers send it
                    self.raw_tried, self.d = True, zlib.decompressobj(-zlib.MAX_WBITS)
                    continue
                raise FetchError("the body is not valid compressed data", ErrorReason.PROTOCOL) from None
            self.raw_tried = True
            data = self.d.unconsumed_tail
            if out:
                yield out
            if self.d.eof:
                return

    def check(self, path: str) -> None:
        if not self.d.eof:
            raise FetchError(f"response to GET {path}: the compressed body ends before its end marker", ErrorReason.SIZE)


class ClientSlot:
    """Holds one collector's HttpClient; a new session when the resolved auth changed (rotated secret)."""

    def __init__(self) -> None:
        self._client: HttpClient | None = None
        self._auth: tuple[HttpAuth, object] | None = None

    async def client(self, base: str, auth: HttpAuth, *, ca_file: str | None, insecure: bool, max_body_bytes: int,
                     max_values: int = boundedjson.MAX_VALUES, client_cert: tuple[str, str] | None = None,
                     ssl_context: ssl.SSLContext | None = None, tls_key: object = None) -> HttpClient:
        """The client for ``auth``; ``ssl_context`` (the caller's, e.g. from a kubeconfig) is
        used when ``tls_key`` (what it was made from) differs from the last one."""
        if self._client is None or (auth, tls_key) != self._auth:
            await self.close()
            self._client = HttpClient(base, auth=auth, ca_file=ca_file, insecure=insecure, client_cert=client_cert,
                                      max_body_bytes=max_body_bytes, max_values=max_values, ssl_context=ssl_context)
            self._auth = (auth, tls_key)
        return self._client

    async def close(self) -> None:
        client, self._client, self._auth = self._client, None, None
        if client is not None:
            await client.close()


class RestCollector(Collector):
    """Base of the collectors that poll one HTTP(S) API (UFM, UFM Telemetry, NVUE).

    Their options carry ``scheme``, ``port``, ``ca_file``, ``tls_insecure_skip_verify``,
    ``max_body_bytes`` and the auth fields of :func:`auth_from_options`. One client per
    target, made anew when the resolved auth changes (a rotated secret file).
    """

    token_scheme: ClassVar[str] = "Bearer"

    options_model: ClassVar[type[SourceOptions]] = RestOptions
    files = TLS_FILES

    def __init__(self, name: str, address: str, options: SourceOptions) -> None:
        super().__init__(name, address, options)
        self._slot = ClientSlot()

    async def client(self) -> HttpClient:
        o = self.options
        assert isinstance(o, RestOptions)
        if getattr(o, "password_file", None) or getattr(o, "token_file", None):  # a file read: never on the loop
            auth = await asyncio.to_thread(auth_from_options, o, self.token_scheme)
        else:
            auth = auth_from_options(o, self.token_scheme)
        return await self._slot.client(
            base_url(o.scheme, self.address, o.port), auth,
            ca_file=o.ca_file, insecure=o.tls_insecure_skip_verify, max_body_bytes=o.max_body_bytes, max_values=o.max_values,
            client_cert=(o.cert_file, o.key_file) if o.cert_file and o.key_file else None,
        )

    async def close(self) -> None:
        await self._slot.close()


async def run_all(calls: list[Coroutine[Any, Any, HttpResponse]]) -> list[HttpResponse]:
    """Run the calls of one poll concurrently; the first failure cancels the others and is raised
    as itself (a FetchError when there is one), never as an ExceptionGroup."""
    try:
        async with asyncio.TaskGroup() as tg:
            tasks = [tg.create_task(c) for c in calls]
    except BaseExceptionGroup as eg:
        errors = list(eg.exceptions)
        first = next((e for e in errors if isinstance(e, FetchError)), errors[0])
        raise first from None
    return [t.result() for t in tasks]


def _decode(path: str, status: int, ctype: str, raw: bytes, json_body: bool, want_json: bool, max_values: int) -> HttpResponse:
    """The response with its body decoded: JSON (bounded, see the module docstring) when the
    Content-Type says so or ``want_json``, else text. A body that is not JSON is kept as text
    unless JSON was required (``protocol``)."""
    text = raw.decode("utf-8", errors="replace")
    if json_body and text.strip():
        try:
            return HttpResponse("GET", path, status, boundedjson.loads(text, max_values, f"response to GET {path}"), ctype)
        except boundedjson.JsonRefused as exc:
            reason = ErrorReason.SIZE if exc.too_many else ErrorReason.PROTOCOL
            raise FetchError(f"{exc}; refused", reason) from None
        except ValueError:
            if want_json:
                raise FetchError(f"GET {path}: expected JSON, got {ctype or 'no Content-Type'}: {_snippet(raw)}",
                                 ErrorReason.PROTOCOL) from None
    elif want_json and 200 <= status < 300:
        raise FetchError(f"GET {path}: expected JSON, got {ctype or 'no Content-Type'}: {_snippet(raw)}", ErrorReason.PROTOCOL)
    return HttpResponse("GET", path, status, None if json_body and not text.strip() else text, ctype)


def retry_after_seconds(value: str | None, now: float | None = None) -> float | None:
    """An HTTP Retry-After header (RFC 9110 section 10.2.3: delay-seconds or an HTTP-date) as
    seconds from ``now``; None when absent or unreadable."""
    if not value:
        return None
    text = value.strip()
    if text.isascii() and text.isdigit():
        return float(text)
    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:  # an HTTP-date is always GMT
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


def _snippet(raw: bytes, n: int = 160) -> str:
    """The start of a body for an error message, redacted before it is cut (a secret the device
    echoes across the cut must not leave its first half in the message)."""
    text = secrets.redact(raw[: 64 * n].decode("utf-8", errors="replace")).strip().replace("\n", " ")
    return text[:n] or "(empty body)"
