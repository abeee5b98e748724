"""The collector interface: ``fetch`` (async I/O, returns the raw payload) and ``parse`` (pure).

A collector class is registered under its source name (``snmp``, ``perfquery``, ``ufm``,
``ufm-telemetry``, ``nvue``, ``host``). The scheduler calls ``fetch`` on an instance made
for one target; the pipeline calls the class's ``parse_poll`` (``parse``, then every string
sanitised) on the payload, live or from a recording. Nothing outside the collector's own
package knows which source it is: what the agent needs of a source (which address it takes,
the commands it runs, whether it splits itself across shards) the class declares
(:class:`Collector`'s class attributes), and config validation, ``check-config``, preflight
and sharding read those.
"""

from __future__ import annotations

import abc
import asyncio
import ipaddress
import math
import re
import reprlib
import time
from contextvars import ContextVar
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, ClassVar, NamedTuple, Self

from pydantic import BaseModel, ConfigDict, ValidationError

from fabricmon.collectors.sanitize import MAX_TEXT, clean, sanitize_result
from fabricmon.core.model import Gauge, ParseResult, TargetSpec
from fabricmon.core.secrets import redact


class ParseError(ValueError):
    """A payload the parser cannot read. The only exception a parser may raise.

    The message may quote the payload, so it is cleaned like every payload string
    (:func:`fabricmon.collectors.sanitize.clean`) before it reaches the API, logs or ``/``."""

    def __init__(self, message: str) -> None:
        super().__init__(clean(redact(message), MAX_TEXT))  # redacted before it is cut: no half secret at the cut


class ErrorReason(StrEnum):
    """Why a poll failed: the ``reason`` label of ``fabricmon_target_poll_errors_total`` and the
    ``reason`` field of a failed poll line in a recording. The one list; the README's metrics
    section refers here."""

    TIMEOUT = "timeout"  # no answer within the target's timeout
    CONNECTION = "connection"  # refused, reset, unreachable, DNS
    TLS = "tls"  # handshake or certificate verification failed
    AUTH = "auth"  # credentials refused (HTTP 401/403, SNMP auth) or unreadable
    HTTP = "http"  # any other HTTP status that is not 2xx, redirects included
    PROTOCOL = "protocol"  # an answer the collector cannot use (not JSON, wrong shape, SNMP error)
    SIZE = "size"  # a response above the configured body limit
    COMMAND = "command"  # a local tool (perfquery, ibnetdiscover, ethtool) missing or failed
    PARSE = "parse"  # the payload arrived but the parser refused it (ParseError)
    INTERNAL = "internal"  # a bug in the collector or the agent: logged with its traceback


class FetchError(Exception):
    """A poll that failed. ``reason`` is an :class:`ErrorReason` (a plain string naming one is
    accepted; any other string is a bug and raises ValueError). The message names what went
    wrong; the scheduler adds the target name. ``retry_after``: seconds the server asked us to
    wait (HTTP Retry-After on a 429/503); the scheduler does not poll the target again sooner."""

    def __init__(self, message: str, reason: ErrorReason | str = ErrorReason.PROTOCOL, retry_after: float | None = None,
                 fatal: bool = False) -> None:
        super().__init__(clean(redact(message), MAX_TEXT))  # may quote a server's body: redacted and cleaned like ParseError
        self.reason = ErrorReason(reason)
        self.retry_after = retry_after
        self.fatal = fatal  # ends the whole poll, even where one failed request would only be skipped


# When the poll in progress must be over (time.monotonic()), set by the scheduler around each
# fetch. The scheduler's own timeout cancels the fetch; a collector whose library can swallow a
# cancellation (gufo-snmp's receive, on Python 3.11) checks this between requests, so the
# deadline holds whatever the library does.
POLL_DEADLINE: ContextVar[float] = ContextVar("fabricmon_poll_deadline", default=math.inf)


def poll_over() -> bool:
    """True when the poll's deadline has passed or its task was asked to stop (cancelled)."""
    task = asyncio.current_task()
    return time.monotonic() > POLL_DEADLINE.get() or (task is not None and task.cancelling() > 0)


def resolve_secret(what: str, inline: str | None, file: str | None, env: str | None) -> str | None:
    """The plain value of secret option ``what`` (inline, ``<what>_file`` or ``<what>_env``),
    through :func:`fabricmon.core.secrets.resolve`; a problem is this poll's ``auth`` error, naming
    the option and never the value."""
    from fabricmon.core.secrets import SecretError, resolve

    try:
        secret = resolve({what: inline, f"{what}_file": file, f"{what}_env": env}, what)
    except SecretError as exc:
        raise FetchError(str(exc), "auth") from None
    return secret.reveal() if secret is not None else None


@dataclass
class ResultBuilder:
    """A :class:`ParseResult` for one device, built value by value: the first value per
    (port, name, sub-labels) wins and later ones are dropped, so a payload that reports one
    counter twice (two tables, a fallback column, a repeated key) never yields two samples
    for one series. Counters and gauges have separate key spaces."""

    device: str
    result: ParseResult = field(default_factory=ParseResult)
    seen: set[tuple[str, str, tuple[Any, ...]]] = field(default_factory=set)

    def has(self, port: str, name: str, sub: tuple[Any, ...] = ()) -> bool:
        return (port, name, sub) in self.seen

    def has_gauge(self, port: str, name: str, sub: tuple[Any, ...] = ()) -> bool:
        return (port, "gauge:" + name, sub) in self.seen

    def sample(self, port: str, name: str, value: int, sub: tuple[Any, ...] = (), bits: int = 64,
               saturating: bool = False, scale: float = 1.0) -> bool:
        """Add a counter sample unless this series already has one; True when added."""
        key = (port, name, sub)
        if key in self.seen:
            return False
        self.seen.add(key)
        self.result.counters.add(self.device, port, name, value, sub, bits, saturating, scale)
        return True

    def gauge(self, port: str, name: str, value: float, sub: tuple[Any, ...] = ()) -> bool:
        """Add a gauge reading unless this series already has one; True when added."""
        key = (port, "gauge:" + name, sub)
        if key in self.seen:
            return False
        self.seen.add(key)
        self.result.gauges.append(Gauge(self.device, port, name, float(value), sub))
        return True


@dataclass
class BadValues:
    """Counter readings dropped because they are numbers but not counter values (a whole number
    in [0, 2^64)): 1e400 (infinity once decoded), -1, NaN, 1.5, 2^70. Such a value is never
    stored (it would fake a reset or a wrap), and never dropped silently: one warning per field
    and poll names the field, how many were dropped, and the first one with its port (the
    pipeline's log line names the target). An empty or ``N/A`` cell is an absent reading, not
    a bad one, and is not counted."""

    seen: dict[str, list[Any]] = field(default_factory=dict)  # field -> [count, first port, first value]

    def note(self, name: str, where: str, raw: Any) -> None:
        if not _numeric(raw):
            return
        entry = self.seen.get(name)
        if entry is None:
            self.seen[name] = [1, where, raw]
        else:
            entry[0] += 1

    def warnings(self) -> list[str]:
        return [f"field {name}: {n} value(s) that are not counter values (a whole number 0..2^64) dropped, "
                f"first {clean(reprlib.repr(raw), 64)} on {where}" for name, (n, where, raw) in sorted(self.seen.items())]


def _numeric(raw: Any) -> bool:
    if isinstance(raw, bool):
        return False
    if isinstance(raw, int | float):
        return True
    if isinstance(raw, str):
        try:
            float(raw.strip())
        except ValueError:
            try:
                int(raw.strip(), 0)
            except ValueError:
                return False
        return True
    return False


class AddressKind(StrEnum):
    """What a target's ``address`` may be (:attr:`Collector.address_kind`); config validation
    reports any other at the target's line (:meth:`Collector.address_problem`)."""

    NONE = "none"  # takes no address: reads this node (host, jobs-file); an address is an error
    LOCAL = "local"  # empty or this node only (perfquery: the local HCA); a remote address is an error
    REMOTE = "remote"  # a device or server to reach over the network: required


# The addresses that name this node, for an AddressKind.LOCAL source.
LOCAL_ADDRESSES = ("", "local", "localhost", "127.0.0.1", "::1")


class Executable(NamedTuple):
    """A command a source runs (:attr:`Collector.executables`): preflight warns when it is not on PATH."""

    option: str  # the options-model field that names the command (e.g. "perfquery_path")
    switch: str | None = None  # an options field that turns the command off (e.g. "ethtool"), or None


class LocalFile(NamedTuple):
    """A file a source reads to poll (:attr:`Collector.files`): check-config proves it can be
    read (and, for a ``ca`` file, loaded as a CA bundle), as the user running the check."""

    option: str  # the options-model field that names the file (e.g. "ca_file")
    # "ca": PEM CA certificates, read only over HTTPS/TLS while certificates are verified;
    # "tls": a client certificate or key, read only over HTTPS/TLS; "file": any readable file.
    kind: str = "file"


def address_problem(kind: AddressKind, source: str, address: str, default_port: int | None = None) -> str | None:
    """Why ``address`` does not fit a source of this kind, or None when it does."""
    a = address.strip()
    if kind is AddressKind.NONE:
        return None if not a else f"a {source} target takes no address: it reads this node; remove address: {a!r}"
    if kind is AddressKind.LOCAL:
        return None if a.lower() in LOCAL_ADDRESSES else \
            f"address {a!r}: a {source} target polls from this node only; leave the address empty or write 'local'"
    if not a:
        return f"a {source} target needs an address: (the device to poll)"
    if "://" in a or "/" in a:
        return f"address {a!r}: give the host name or IP address alone, not a URL"
    if a.count(":") == 1 or (a.startswith("[") and "]:" in a):  # host:port, [v6]:port; a bare IPv6 literal has 2+ colons
        port = f" (default {default_port})" if default_port else ""
        return f"address {a!r}: give the host alone and the port as port:{port}"
    return host_problem(a)


# A DNS label (RFC 1123 section 2.1: letters, digits, hyphens, not at either end, 1-63 characters).
# An underscore is accepted too: resolvers look such names up, and internal zones hold them.
_LABEL = re.compile(r"[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?")


def host_problem(host: str) -> str | None:
    """Why ``host`` is neither an IPv4 or IPv6 address nor a DNS name, or None.

    ``127.0.0.300`` is refused here rather than at every poll: a name made of digits only
    is an IPv4 address or nothing (RFC 1123 section 2.1: a top-level label is never all
    digits, so a resolver would not look it up as a name either)."""
    if host.startswith("[") and host.endswith("]"):
        return f"address {host!r}: write an IPv6 address without brackets: {host[1:-1]}"
    try:
        ipaddress.ip_address(host)  # IPv4, IPv6, IPv6 with a zone (fe80::1%eth0)
        return None
    except ValueError:
        pass
    if ":" in host:
        return f"address {host!r} is not a valid IPv6 address"
    labels = host.removesuffix(".").split(".")
    if all(label.isdigit() for label in labels):
        return f"address {host!r} is not a valid IPv4 address (four numbers from 0 to 255)"
    if len(host) > 253:
        return f"address {host[:40]!r}... is longer than a DNS name can be (253 characters)"
    bad = next((label for label in labels if not _LABEL.fullmatch(label)), None)
    if bad is not None:
        return (f"address {host!r} is neither an IP address nor a DNS name: label {bad!r} (letters, digits and hyphens, "
                "1 to 63 of them, no hyphen at either end)")
    if labels[-1].isdigit():
        return f"address {host!r} is not a DNS name: its last label is all digits"
    return None


class SourceOptions(BaseModel):
    """Base of each collector's per-target options: closed (an unknown key is an error) and
    strict, for every source at once: a boolean option takes ``true``/``false`` only (YAML's
    ``yes``/``no`` are booleans too), never a string such as ``"yes"``, and a number is never a
    string (``port: "161"``)."""

    model_config = ConfigDict(extra="forbid", strict=True)


class ParseOptions(BaseModel):
    """Base of each collector's parse options: the few target options that change how a payload
    is read, as the recording header carries them (:meth:`Collector.spec`). A parser reads its
    options only through its subclass's :meth:`from_spec`, never from ``spec.options``.

    Frozen, strict (a header's ``"3"`` is not the integer 3, ``true`` is not 1) and closed (an
    option this version does not know is an error rather than silently ignored: the payload
    would be parsed differently from how it was recorded). Each field mirrors the field of the
    same name in the collector's :class:`SourceOptions`, so every live target's header validates."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    @classmethod
    def from_spec(cls, spec: TargetSpec) -> Self:
        """The typed options of ``spec``, or a ParseError naming the target, each bad option and
        what is wrong with it (never a pydantic traceback or its help links)."""
        try:
            return cls.model_validate(spec.options)
        except ValidationError as exc:
            problems = []
            for err in exc.errors(include_url=False):
                where = "option " + ".".join(str(part) for part in err["loc"]) if err["loc"] else "options"
                problems.append(f"{where}: {err['msg']} (got {reprlib.repr(err['input'])})")  # bounded, however big
            raise ParseError(f"target {spec.name!r} ({spec.source}): " + "; ".join(problems)) from None


class Collector(abc.ABC):
    """One collector instance polls one target.

    A source declares what the agent needs of it as class attributes (defaults here):
    ``address_kind`` (config validation checks the target's address against it),
    ``default_port`` (named when an address carries a port), ``executables`` (preflight looks
    them up on PATH), ``files`` (preflight reads them) and ``self_sharding`` (sharding gives such a target to every agent, with
    its own shard in its options, instead of to one agent by its name's hash). Secret options
    are derived from ``options_model``: every field ``X`` that also has ``X_file`` and ``X_env``.
    """

    source: ClassVar[str]
    options_model: ClassVar[type[SourceOptions]] = SourceOptions
    # The options that change how payloads are parsed, typed; their values go into the recording
    # header, in field order. The base class has none (perfquery).
    parse_options_model: ClassVar[type[ParseOptions]] = ParseOptions
    address_kind: ClassVar[AddressKind] = AddressKind.REMOTE
    default_port: ClassVar[int | None] = None  # e.g. 161 snmp, 443 ufm
    executables: ClassVar[tuple[Executable, ...]] = ()
    files: ClassVar[tuple[LocalFile, ...]] = ()  # files its options name, read at poll time
    # Splits itself by its own shard options (``num_shards`` and ``shard``, as UFM Telemetry's
    # endpoint does): every agent polls it for its own share.
    self_sharding: ClassVar[bool] = False
    # Polled by every shard (the job inventories: each shard joins the jobs to its own findings).
    every_shard: ClassVar[bool] = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.self_sharding and not {"num_shards", "shard"} <= set(cls.options_model.model_fields):
            raise TypeError(f"{cls.__name__}: a self-sharding source needs num_shards and shard options")

    @classmethod
    def address_problem(cls, address: str) -> str | None:
        """Why ``address`` cannot be this source's target address, or None."""
        return address_problem(cls.address_kind, cls.source, address, cls.default_port)

    @classmethod
    def commands(cls, options: SourceOptions) -> list[tuple[str, str]]:
        """(option, command) of every command a target with these options runs."""
        return [(e.option, getattr(options, e.option)) for e in cls.executables
                if e.switch is None or getattr(options, e.switch)]

    @classmethod
    def local_files(cls, options: SourceOptions) -> list[tuple[LocalFile, str]]:
        """(declaration, path) of every file a target with these options reads (:attr:`files`
        that are set): plain HTTP (``scheme: http``) reads no TLS file, and
        ``tls_insecure_skip_verify`` no CA bundle."""
        tls = getattr(options, "scheme", "https") == "https"
        verify = not getattr(options, "tls_insecure_skip_verify", False)
        return [(f, path) for f in cls.files if (path := getattr(options, f.option))
                and (f.kind == "file" or (tls and (f.kind == "tls" or verify)))]

    @classmethod
    def shard_options(cls, options: SourceOptions, index: int, count: int) -> SourceOptions:
        """The options of this agent's target when it is shard ``index`` of ``count``: a
        self-sharding source asks for its share; any other is unchanged (it is polled whole, by
        the one agent its name hashes to)."""
        if not cls.self_sharding or count <= 1:
            return options
        return options.model_copy(update={"num_shards": count, "shard": index})

    def __init__(self, name: str, address: str, options: SourceOptions) -> None:
        self.name = name
        self.address = address
        self.options = options

    @classmethod
    def target_spec(cls, name: str, options: SourceOptions) -> TargetSpec:
        """The parse-relevant view of a target, as written to a recording header: what the
        pipeline needs of a target, known without building its collector."""
        dumped = options.model_dump(mode="json")
        opts = {k: dumped[k] for k in cls.parse_options_model.model_fields if dumped.get(k) is not None}
        return TargetSpec(name=name, source=cls.source, options=opts)

    def spec(self) -> TargetSpec:
        """:meth:`target_spec` of this collector's target."""
        return self.target_spec(self.name, self.options)

    @abc.abstractmethod
    async def fetch(self) -> dict[str, Any]:
        """Fetch one poll's raw payload (recording-format.md). Raise FetchError on failure."""

    @classmethod
    def new_state(cls) -> Any:
        """The empty per-target parse state of this source, or None when it keeps none.

        A source whose payload may omit what later polls need (perfquery polls carry
        ibnetdiscover output only when it was refreshed) keeps it in a typed, immutable state
        object. The pipeline creates one per target, hands it to :meth:`parse`, keeps the one
        parse returns and drops it with its target."""
        return None

    @classmethod
    @abc.abstractmethod
    def parse(cls, payload: dict[str, Any], spec: TargetSpec, state: Any) -> tuple[ParseResult, Any]:
        """Turn a raw payload into counter columns and facts: a pure function. No I/O; raise only ParseError.

        ``spec`` names the target; its options are read only as
        ``cls.parse_options_model.from_spec(spec)`` (typed; a bad one is a ParseError naming the
        target and the option). ``state`` is what :meth:`new_state` or the previous poll's parse
        returned; it is never changed. Returns the result and the state for the target's next poll."""

    @classmethod
    def parse_poll(cls, payload: dict[str, Any], spec: TargetSpec, state: Any) -> tuple[ParseResult, Any]:
        """:meth:`parse`, then every string in the result made safe for every later stage
        (:func:`fabricmon.collectors.sanitize.sanitize_result`). The one entry point the
        pipeline and the testcase runner use, so no collector can skip it."""
        result, new_state = cls.parse(payload, spec, state)
        return sanitize_result(result), new_state

    async def prepare(self) -> None:
        """Load what the first poll needs and is slow to load (a library, an engine), off the
        event loop. The scheduler calls it once before a target's first poll, outside the poll's
        timeout: seconds of imports must neither stall the loop nor time the first poll out."""
        return None

    def set_schedule(self, interval: float, timeout: float) -> None:
        """The target's poll interval and timeout, told by the scheduler before the first poll.
        Polled sources ignore them; a streaming source (gnmi) samples at the interval."""
        return None

    async def close(self) -> None:
        """Release sessions, engines, subprocesses. Called on shutdown and reload."""
        return None

    @classmethod
    def reset_caches(cls) -> None:
        """Forget anything cached from files the user may have changed (called on reload)."""
        return None
