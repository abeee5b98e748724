"""I/O for the gNMI source: one gRPC channel per target, ``Capabilities`` once per connection,
and long-lived ``Subscribe`` streams cut into polls.

Why streams and polls meet this way: the scheduler calls ``fetch()`` once per poll interval,
like for every source, and the rest of the agent (store, rates, detector, exporter,
recordings) works on polls. A :class:`StreamClient` keeps one STREAM subscription per profile
group open in background tasks it owns (SAMPLE at the poll interval, ON_CHANGE where the
profile says so); every ``Notification`` that arrives goes into a buffer, and :meth:`poll`
hands over what arrived since the previous poll boundary, in arrival order.

- **First poll**: opens the channel, reads ``Capabilities`` (logged: gNMI version, encodings,
  models; the profile is chosen from the models unless the target sets ``profile``), starts
  the streams and waits, within the poll's budget, for every group's ``sync_response``.
- **Cutting**: a sample round that is arriving at the poll boundary is taken whole (the cut
  waits while notifications keep coming less than ``SETTLE_GAP`` apart, at most
  ``SETTLE_MAX``), and a poll that finds nothing waits up to half an interval for the next
  round, so a stream whose rounds fall on the poll boundary does not alternate between empty
  and double polls.
- **Bounds**: at most ``max_notifications`` notifications and ``max_updates`` updates are kept
  per poll; past that the poll fails with reason ``size`` (like an over-long REST body) and
  its buffer is dropped, so an endless stream costs bounded memory. gRPC messages are capped
  at ``max_message_bytes``.
- **Failures**: a stream that breaks (the device closed it, reset, TLS, auth) is reopened with
  exponential backoff (1 s doubling to 60 s); while it is down every poll raises
  :class:`FetchError` with the reason, so the target shows down as any source does.
- **Fallback**: a device that refuses STREAM (``UNIMPLEMENTED`` or ``INVALID_ARGUMENT``) is
  polled with ``Subscribe`` POLL, and one that refuses that too with ``Get``, once per poll.
- **close()** cancels the tasks, ends the calls and closes the channel inside the event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import grpc
import grpc.aio
from pygnmi.spec.v080 import gnmi_pb2 as pb
from pygnmi.spec.v080 import gnmi_pb2_grpc

from fabricmon.collectors.base import ErrorReason, FetchError
from fabricmon.collectors.gnmi import paths as gp
from fabricmon.collectors.gnmi import profiles as prof

log = logging.getLogger(__name__)

SETTLE_GAP = 0.1  # s: notifications of one sample round arrive closer together than this
SETTLE_MAX = 1.0  # s: the longest a cut waits for a round in progress to finish
BACKOFF_START, BACKOFF_MAX = 1.0, 60.0
REFUSED = (grpc.StatusCode.UNIMPLEMENTED, grpc.StatusCode.INVALID_ARGUMENT)
_MODE = {"sample": pb.SAMPLE, "on_change": pb.ON_CHANGE, "target_defined": pb.TARGET_DEFINED}
ENCODING_CODES = {"json": pb.JSON, "json_ietf": pb.JSON_IETF, "proto": pb.PROTO, "ascii": pb.ASCII, "bytes": pb.BYTES}


@dataclass(frozen=True)
class Tls:
    """PEM bytes for the channel; ``override``: the name to verify the server certificate for."""

    root: bytes | None
    key: bytes | None
    chain: bytes | None
    override: str | None = None


def rpc_error(exc: grpc.aio.AioRpcError, where: str) -> FetchError:
    """A gRPC status as a FetchError with the reason the error metric counts."""
    code, details = exc.code(), (exc.details() or "").strip()
    text = f"{where}: {code.name}: {details[:300]}"
    low = details.lower()
    if code in (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED):
        return FetchError(f"{text} (check username and password)", ErrorReason.AUTH)
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
        return FetchError(text, ErrorReason.TIMEOUT)
    if code == grpc.StatusCode.UNAVAILABLE:
        if any(w in low for w in ("ssl", "tls", "handshake", "certificate")):
            return FetchError(f"{text} (set ca_file, or tls_insecure_skip_verify)", ErrorReason.TLS)
        return FetchError(text, ErrorReason.CONNECTION)
    if code == grpc.StatusCode.RESOURCE_EXHAUSTED:
        return FetchError(f"{text} (a message over max_message_bytes?)", ErrorReason.SIZE)
    return FetchError(text, ErrorReason.PROTOCOL)


def server_name(pem: bytes) -> str | None:
    """The first DNS name (else the common name) of a PEM certificate: what a channel that trusts
    exactly that certificate verifies the server for (``tls_insecure_skip_verify``)."""
    from cryptography import x509

    cert = x509.load_pem_x509_certificate(pem)
    try:
        names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        dns = names.get_values_for_type(x509.DNSName)
        if dns:
            return dns[0]
        ips = names.get_values_for_type(x509.IPAddress)
        if ips:
            return str(ips[0])
    except x509.ExtensionNotFound:
        pass
    cn = cert.subject.get_attributes_for_oid(x509.oid.NameOID.COMMON_NAME)
    return str(cn[0].value) if cn else None


async def fetch_server_certificate(host: str, port: int, timeout: float) -> bytes:
    """The server's certificate, unverified (``tls_insecure_skip_verify``: gRPC has no switch to
    skip verification, so the channel is told to trust exactly the certificate presented)."""
    try:
        pem = await asyncio.to_thread(ssl.get_server_certificate, (host, port), timeout=timeout)
    except (OSError, ssl.SSLError) as exc:
        raise FetchError(f"cannot read the TLS certificate of {host}:{port}: {exc}", ErrorReason.CONNECTION) from None
    return pem.encode()


@dataclass
class Plan:
    """What the streams subscribe to, once Capabilities chose the profile."""

    profile: str
    match: str
    encoding: int
    groups: list[prof.Group]


@dataclass
class _Group:
    spec: prof.Group
    synced: asyncio.Event = field(default_factory=asyncio.Event)
    up: bool = False
    disabled: bool = False
    task: asyncio.Task | None = None


class StreamClient:
    """The gNMI client of one target (see the module docstring)."""

    def __init__(self, *, name: str, endpoint: str, tls: Callable[[], Awaitable[Tls]], auth: Callable[[], list[tuple[str, str]]],
                 plan: Callable[[list[str], list[str]], Plan], interfaces: list[str] | None, interval: float,
                 mode: str | None, max_notifications: int, max_updates: int, max_message_bytes: int) -> None:
        self.name = name
        self.endpoint = endpoint
        self._tls = tls
        self._auth = auth
        self._plan_for = plan
        self.interfaces = interfaces
        self.interval = interval
        self.mode = mode or "stream"  # stream, poll or get; stream falls back to poll, then get
        self.max_notifications = max_notifications
        self.max_updates = max_updates
        self.max_message_bytes = max_message_bytes
        self.plan: Plan | None = None
        self._channel: grpc.aio.Channel | None = None
        self._stub: Any = None
        self._groups: list[_Group] = []
        self._buffer: list[dict[str, Any]] = []
        self._updates = 0
        self._overflow = 0
        self._last_arrival = 0.0
        self._error: FetchError | None = None
        self._started = False
        self._closing = asyncio.Event()
        self._poll_calls: dict[int, Any] = {}
        self.received = 0  # notifications received in all (sync markers not counted)
        self.delivered = 0  # notifications handed to polls
        self.dropped = 0  # notifications dropped over the per-poll caps

    @property
    def waiting(self) -> int:
        """Notifications received and not yet handed to a poll."""
        return sum(1 for n in self._buffer if "sync_response" not in n)

    # ------------------------------------------------------------------ connection

    async def _connect(self, budget: float) -> None:
        """Channel and Capabilities; on failure the channel is closed again, so the next poll
        starts over (a rotated password, a server that came back)."""
        if self._channel is not None:
            channel, self._channel = self._channel, None
            await channel.close(grace=None)
        tls = await self._tls()
        creds = grpc.ssl_channel_credentials(root_certificates=tls.root, private_key=tls.key, certificate_chain=tls.chain)
        # A subchannel pool of the channel's own: close() then ends the target's connection too
        # (with the global pool a closed channel's connection lingers, shared, until the device hangs up).
        options = [("grpc.max_receive_message_length", self.max_message_bytes), ("grpc.use_local_subchannel_pool", 1),
                   ("grpc.keepalive_time_ms", 30_000), ("grpc.keepalive_permit_without_calls", 0)]
        if tls.override:
            options.append(("grpc.ssl_target_name_override", tls.override))
        self._channel = grpc.aio.secure_channel(self.endpoint, creds, options=options)
        self._stub = gnmi_pb2_grpc.gNMIStub(self._channel)
        try:
            models, encodings = await self._capabilities(budget)
        except BaseException:
            channel, self._channel = self._channel, None
            await channel.close(grace=None)
            raise
        self.plan = self._plan_for(models, encodings)
        log.info("target %s: gNMI profile %s (%s), %d subscription group(s)", self.name, self.plan.profile, self.plan.match,
                 len(self.plan.groups))

    async def _capabilities(self, budget: float) -> tuple[list[str], list[str]]:
        try:
            caps = await self._stub.Capabilities(pb.CapabilityRequest(), metadata=self._auth(), timeout=max(0.5, min(5.0, budget)))
        except grpc.aio.AioRpcError as exc:
            if exc.code() == grpc.StatusCode.UNIMPLEMENTED:
                log.info("target %s: Capabilities not implemented; choosing the profile from the config", self.name)
                return [], []
            raise rpc_error(exc, "Capabilities") from None
        models = [m.name for m in caps.supported_models]
        encodings = [pb.Encoding.Name(e).lower() for e in caps.supported_encodings]
        log.info("target %s: gNMI %s, encodings %s, %d models%s", self.name, caps.gNMI_version or "(version not given)",
                 ", ".join(encodings) or "(none listed)", len(models),
                 (": " + ", ".join(models[:12]) + (" ..." if len(models) > 12 else "")) if models else "")
        return models, encodings

    def _request(self, group: prof.Group, mode: int) -> Any:
        assert self.plan is not None
        subs = []
        for sp in group.paths:
            for text in prof.expand(sp.path, self.interfaces):
                subs.append(pb.Subscription(path=gp.to_proto(gp.parse(text), pb), mode=_MODE[sp.mode],
                                            sample_interval=int(self.interval * 1e9) if sp.mode == "sample" else 0))
        prefix = pb.Path(target=group.target, origin=group.origin)
        return pb.SubscribeRequest(subscribe=pb.SubscriptionList(prefix=prefix, subscription=subs, mode=mode, encoding=self.plan.encoding))

    # ------------------------------------------------------------------ the buffer

    def _take(self, n: Any) -> None:
        self.received += 1
        self._last_arrival = time.monotonic()
        if self._overflow or len(self._buffer) >= self.max_notifications or self._updates + len(n.update) > self.max_updates:
            self._overflow += 1
            self.dropped += 1
            return
        self._updates += len(n.update)
        self._buffer.append(gp.notification_record(n))

    def _cut(self) -> list[dict[str, Any]]:
        """Everything since the last cut (synchronous: a cancelled poll never loses a notification)."""
        out, self._buffer, self._updates = self._buffer, [], 0
        overflow, self._overflow = self._overflow, 0
        if overflow:
            raise FetchError(f"more than {self.max_notifications} notifications or {self.max_updates} updates arrived in one poll; "
                             f"{overflow} notification(s) over the cap and the rest of the poll dropped (max_notifications_per_poll, "
                             "max_updates_per_poll)", ErrorReason.SIZE)
        self.delivered += sum(1 for n in out if "sync_response" not in n)
        return out

    # ------------------------------------------------------------------ STREAM

    async def _requests(self, first: Any) -> AsyncIterator[Any]:
        yield first
        await self._closing.wait()  # keep the request side open for the stream's life

    async def _run_group(self, g: _Group) -> None:
        backoff = BACKOFF_START
        while not self._closing.is_set():
            got_any = False
            try:
                call = self._stub.Subscribe(self._requests(self._request(g.spec, pb.SubscriptionList.STREAM)), metadata=self._auth())
                async for resp in call:
                    which = resp.WhichOneof("response")
                    if which == "update":
                        got_any = True
                        if not g.up:
                            g.up = True
                        self._take(resp.update)
                    elif which == "sync_response":
                        got_any = True
                        g.up = True
                        g.synced.set()
                        self._buffer.append({"sync_response": True})
                        backoff = BACKOFF_START
                        self._error = None if all(x.up or x.disabled for x in self._groups) else self._error
                    elif which == "error":
                        raise FetchError(f"Subscribe: the device sent an error: {resp.error.code} {resp.error.message[:200]}",
                                         ErrorReason.PROTOCOL)
                error = FetchError(f"Subscribe stream ({_group_name(g.spec)}) ended by the device", ErrorReason.CONNECTION)
            except grpc.aio.AioRpcError as exc:
                if exc.code() == grpc.StatusCode.CANCELLED and self._closing.is_set():
                    return
                if exc.code() in REFUSED and not got_any:
                    if g.spec.optional:
                        log.warning("target %s: optional subscription %s refused (%s: %s); not streamed", self.name, _group_name(g.spec),
                                    exc.code().name, (exc.details() or "")[:200])
                        g.disabled = True
                        g.synced.set()
                        return
                    self._refused(exc, g)
                    return
                error = rpc_error(exc, f"Subscribe ({_group_name(g.spec)})")
            except FetchError as exc:
                error = exc
            g.up = False
            g.synced.clear()
            self._error = error
            log.warning("target %s: %s; reconnecting in %.0f s", self.name, error, backoff)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._closing.wait(), backoff)
            backoff = min(backoff * 2, BACKOFF_MAX)

    def _refused(self, exc: grpc.aio.AioRpcError, refused: _Group) -> None:
        """STREAM refused: the target is polled from now on; the other groups' streams end (their
        data comes with the polls)."""
        if self.mode == "stream":
            log.warning("target %s: the device refuses STREAM subscriptions (%s: %s); polling with Subscribe POLL instead",
                        self.name, exc.code().name, (exc.details() or "")[:200])
            self.mode = "poll"
            for g in self._groups:
                g.synced.set()  # wake the first poll; it now polls
                if g is not refused and g.task is not None:
                    g.task.cancel()

    async def _start_streams(self) -> None:
        assert self.plan is not None
        self._groups = [_Group(spec) for spec in self.plan.groups]
        for g in self._groups:
            g.task = asyncio.create_task(self._run_group(g), name=f"gnmi:{self.name}:{_group_name(g.spec)}")

    async def _stream_poll(self, budget: float) -> list[dict[str, Any]]:
        deadline = time.monotonic() + budget
        if not self._started:
            self._started = True
            await self._start_streams()
            # Until every group synced, or one failed (no need to wait out the budget), or time is up.
            while (time.monotonic() < deadline and self._error is None and self.mode == "stream"
                   and not all(g.synced.is_set() for g in self._groups)):
                await asyncio.sleep(0.02)
            if self.mode != "stream":
                return await self.poll_once(max(0.1, deadline - time.monotonic()))
            if not all(g.synced.is_set() for g in self._groups):
                if self._error is not None:
                    raise FetchError(str(self._error), self._error.reason)
                if not self._buffer:
                    raise FetchError(f"no initial data within {budget:.1f} s of subscribing", ErrorReason.TIMEOUT)
                log.info("target %s: no sync_response within the poll; using what arrived", self.name)
            return self._cut()
        if self._error is not None and not all(g.up or g.disabled for g in self._groups):
            raise FetchError(str(self._error), self._error.reason)
        await self._settle(deadline)
        return self._cut()

    async def _settle(self, deadline: float) -> None:
        """Wait for a round in progress, or for the next one when nothing arrived (bounded)."""
        if not self._buffer:
            end = min(deadline, time.monotonic() + self.interval / 2)
            while not self._buffer and time.monotonic() < end and self._error is None:
                await asyncio.sleep(min(0.02, max(0.0, end - time.monotonic())))
        end = min(deadline, time.monotonic() + SETTLE_MAX)
        while self._buffer and time.monotonic() - self._last_arrival < SETTLE_GAP and time.monotonic() < end:
            await asyncio.sleep(SETTLE_GAP / 4)

    # ------------------------------------------------------------------ POLL and Get

    async def _poll_subscribe(self, budget: float) -> list[dict[str, Any]]:
        assert self.plan is not None
        out: list[dict[str, Any]] = []
        for i, group in enumerate(self.plan.groups):
            call = self._poll_calls.get(i)
            if call is None:
                queue: asyncio.Queue[Any] = asyncio.Queue()
                queue.put_nowait(self._request(group, pb.SubscriptionList.POLL))

                async def reqs(q: asyncio.Queue[Any] = queue) -> AsyncIterator[Any]:
                    while True:
                        yield await q.get()

                call = self._poll_calls[i] = (self._stub.Subscribe(reqs(), metadata=self._auth()), queue)
            stream, queue = call
            queue.put_nowait(pb.SubscribeRequest(poll=pb.Poll()))
            try:
                async with asyncio.timeout(budget):
                    while True:
                        resp = await stream.read()
                        if resp is grpc.aio.EOF:
                            raise FetchError("Subscribe POLL stream ended by the device", ErrorReason.CONNECTION)
                        which = resp.WhichOneof("response")
                        if which == "update":
                            self._take(resp.update)
                        elif which == "sync_response":
                            break
            except grpc.aio.AioRpcError as exc:
                self._poll_calls.pop(i, None)
                if exc.code() in REFUSED and group.optional:
                    continue
                if exc.code() in REFUSED and self.mode == "poll":
                    log.warning("target %s: the device refuses POLL subscriptions too (%s); using Get", self.name, exc.code().name)
                    self.mode = "get"
                    return await self._get(budget)
                raise rpc_error(exc, "Subscribe POLL") from None
            except (FetchError, TimeoutError):
                self._poll_calls.pop(i, None)
                stream.cancel()
                raise
        out.extend(self._cut())
        return out

    async def _get(self, budget: float) -> list[dict[str, Any]]:
        assert self.plan is not None
        for group in self.plan.groups:
            paths = [gp.to_proto(gp.parse(t), pb) for sp in group.paths for t in prof.expand(sp.path, self.interfaces)]
            req = pb.GetRequest(prefix=pb.Path(target=group.target, origin=group.origin), path=paths, encoding=self.plan.encoding)
            try:
                resp = await self._stub.Get(req, metadata=self._auth(), timeout=max(0.1, budget))
            except grpc.aio.AioRpcError as exc:
                if group.optional and exc.code() in (*REFUSED, grpc.StatusCode.NOT_FOUND):
                    continue
                raise rpc_error(exc, "Get") from None
            for n in resp.notification:
                self._take(n)
        return self._cut()

    async def poll_once(self, budget: float) -> list[dict[str, Any]]:
        """The notifications of one poll (see the module docstring); FetchError on failure."""
        if self.plan is None:
            await self._connect(budget)
        if self.mode == "stream":
            return await self._stream_poll(budget)
        if self.mode == "poll":
            return await self._poll_subscribe(budget)
        return await self._get(budget)

    async def close(self) -> None:
        self._closing.set()
        tasks = [g.task for g in self._groups if g.task is not None]
        for t in tasks:
            t.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        for stream, _queue in self._poll_calls.values():
            stream.cancel()
        self._poll_calls.clear()
        channel, self._channel = self._channel, None
        if channel is not None:
            await channel.close(grace=None)


def _group_name(g: prof.Group) -> str:
    where = g.target or g.origin or "default"
    return f"{where}: {g.paths[0].path}" + (f" +{len(g.paths) - 1}" if len(g.paths) > 1 else "")
