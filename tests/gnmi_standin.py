"""A gNMI server stand-in on 127.0.0.1, built on grpcio's asyncio server and pygnmi's gNMI
messages: TLS (a throw-away certificate from tests/http_standins.self_signed_cert), username
and password checked on every call, ``Capabilities``, ``Get`` and ``Subscribe`` in STREAM and
POLL mode. It serves notifications in the recording's form (docs/recording-format.md, the
``gnmi`` row): the current ``snapshot()`` as the initial sync (then ``sync_response``), whatever
a test ``push``es, or a ``sampler(round)`` every sample interval the client asked for. It can
drop every stream, delete paths, refuse STREAM (and POLL), and send an endless stream.

Also the shapes of the public data: :func:`sonic_port_notifications` builds SONiC COUNTERS_DB
notifications from sonic-gnmi's test data files, :func:`cumulus_wjh_notifications` the
Cumulus WJH sample as the gnmic output in the NVIDIA docs shows it.

Use as ``async with GnmiStandIn(...) as srv: srv.port``.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import grpc.aio
from pygnmi.spec.v080 import gnmi_pb2 as pb
from pygnmi.spec.v080 import gnmi_pb2_grpc

from fabricmon.collectors.gnmi import paths as gp

LOOPBACK = "127.0.0.1"
DROP = object()  # a queue item: abort the stream with UNAVAILABLE
Notes = list[dict[str, Any]]


@dataclass
class GnmiStandIn(gnmi_pb2_grpc.gNMIServicer):
    tls: tuple[Path, Path]
    username: str = "admin"
    password: str = "secret"
    client_ca: Path | None = None  # require a client certificate signed by (or equal to) this PEM
    snapshot: Callable[[], Notes] = lambda: []
    sampler: Callable[[int], Notes] | None = None  # round k -> notifications, every sample interval
    models: list[str] = field(default_factory=lambda: ["sonic-db"])
    encodings: list[int] = field(default_factory=lambda: [pb.JSON_IETF, pb.JSON])
    refuse_stream: bool = False
    refuse_poll: bool = False
    endless: bool = False  # after the sync, send the snapshot again and again without pause
    send_sync: bool = True
    port: int = 0
    calls: list[str] = field(default_factory=list)
    subscriptions: list[Any] = field(default_factory=list)  # every SubscriptionList received
    _server: grpc.aio.Server | None = None
    _streams: list[asyncio.Queue[Any]] = field(default_factory=list)

    async def __aenter__(self) -> GnmiStandIn:
        self._server = grpc.aio.server()
        gnmi_pb2_grpc.add_gNMIServicer_to_server(self, self._server)
        cert, key = self.tls
        creds = grpc.ssl_server_credentials([(key.read_bytes(), cert.read_bytes())],
                                            root_certificates=self.client_ca.read_bytes() if self.client_ca else None,
                                            require_client_auth=self.client_ca is not None)
        self.port = self._server.add_secure_port(f"{LOOPBACK}:{self.port}", creds)
        await self._server.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def stop(self) -> None:
        if self._server is not None:
            await self._server.stop(grace=None)
            self._server = None

    # ------------------------------------------------------------------ test controls
    def push(self, notes: Notes) -> None:
        """Send ``notes`` on every open STREAM subscription."""
        for q in self._streams:
            q.put_nowait(notes)

    def drop_streams(self) -> None:
        """Abort every open stream with UNAVAILABLE (a device restarting its server)."""
        for q in self._streams:
            q.put_nowait(DROP)

    @property
    def open_streams(self) -> int:
        return len(self._streams)

    # ------------------------------------------------------------------ gNMI service
    async def _auth(self, context: grpc.aio.ServicerContext) -> None:
        md = dict(context.invocation_metadata() or ())
        if md.get("username") != self.username or md.get("password") != self.password:
            await context.abort(grpc.StatusCode.UNAUTHENTICATED, "authentication failed")

    async def Capabilities(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        self.calls.append("Capabilities")
        await self._auth(context)
        return pb.CapabilityResponse(supported_models=[pb.ModelData(name=m, organization="test") for m in self.models],
                                     supported_encodings=self.encodings, gNMI_version="0.8.0")

    async def Get(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        self.calls.append("Get")
        await self._auth(context)
        return pb.GetResponse(notification=[gp.notification_proto(n, pb) for n in _of(self.snapshot(), request.prefix.target)])

    async def Subscribe(self, request_iterator: Any, context: grpc.aio.ServicerContext) -> Any:
        self.calls.append("Subscribe")
        await self._auth(context)
        first = await request_iterator.__anext__()
        sl = first.subscribe
        self.subscriptions.append(sl)
        if sl.mode == pb.SubscriptionList.POLL:
            if self.refuse_poll:
                await context.abort(grpc.StatusCode.UNIMPLEMENTED, "POLL mode is not supported")
            async for req in request_iterator:
                if req.HasField("poll"):
                    for n in _of(self.snapshot(), sl.prefix.target):
                        yield _response(n)
                    yield pb.SubscribeResponse(sync_response=True)
            return
        if self.refuse_stream:
            await context.abort(grpc.StatusCode.UNIMPLEMENTED, "STREAM mode is not supported")
        for n in _of(self.snapshot(), sl.prefix.target):
            yield _response(n)
        if self.send_sync:
            yield pb.SubscribeResponse(sync_response=True)
        while self.endless:
            for n in _of(self.snapshot(), sl.prefix.target):
                yield _response(n)
            await asyncio.sleep(0)
        queue: asyncio.Queue[Any] = asyncio.Queue()
        self._streams.append(queue)
        sampler = None
        if self.sampler is not None:
            interval = max((s.sample_interval for s in sl.subscription), default=0) / 1e9 or 1.0
            sampler = asyncio.create_task(self._sample(queue, interval))
        try:
            while True:
                item = await queue.get()
                if item is DROP:
                    await context.abort(grpc.StatusCode.UNAVAILABLE, "stand-in dropped the stream")
                for n in _of(item, sl.prefix.target):
                    yield _response(n)
        finally:
            self._streams.remove(queue)
            if sampler is not None:
                sampler.cancel()

    async def _sample(self, queue: asyncio.Queue[Any], interval: float) -> None:
        assert self.sampler is not None
        k = 1
        while True:
            await asyncio.sleep(interval)
            queue.put_nowait(self.sampler(k))
            k += 1


def _of(notes: Notes, target: str) -> Notes:
    """The notifications a subscription with prefix target ``target`` gets (a SONiC server
    answers each DB's subscription with that DB's data)."""
    return [n for n in notes if n.get("sync_response") or n.get("target", "") == target]


def _response(n: dict[str, Any]) -> Any:
    if n.get("sync_response"):
        return pb.SubscribeResponse(sync_response=True)
    return pb.SubscribeResponse(update=gp.notification_proto(n, pb))


# ---------------------------------------------------------------------- public data shapes

SONIC_GNMI = "eth/sonic-net__sonic-gnmi/"


def sonic_port_notifications(fixtures: Callable[[str], Path], ports: list[str], t_ns: int,
                             values: Callable[[str, str, str], str | None] | None = None) -> Notes:
    """SONiC COUNTERS_DB notifications for ``ports`` in the shapes of sonic-gnmi's test data:
    ``COUNTERS/<port>`` (the port hash of COUNTERS:Ethernet68.txt), ``COUNTERS/<port>/Queues``
    and ``COUNTERS/<port>/Pfcwd`` (keys ``<port>:<queue>``). ``values(port, row, field)`` may
    replace a field's value ("" row for the port hash); the fixture's own value otherwise."""
    port_hash = json.loads(fixtures(SONIC_GNMI + "testdata__COUNTERS:Ethernet68.txt").read_text())
    queues = json.loads(fixtures(SONIC_GNMI + "testdata__COUNTERS:Ethernet68:Queues.txt").read_text())
    pfcwd = json.loads(fixtures(SONIC_GNMI + "testdata__COUNTERS:Ethernet68:Pfcwd.txt").read_text())

    def fill(port: str, row: str, fields: dict[str, str]) -> dict[str, str]:
        out = {}
        for k, v in fields.items():
            new = values(port, row, k) if values else None
            out[k] = v if new is None else new
        return out

    def rows(port: str, table: dict[str, dict[str, str]]) -> dict[str, dict[str, str]]:
        return {re.sub(r"^Ethernet68", port, key): fill(port, key.split(":", 1)[1], fields) for key, fields in table.items()}

    out: Notes = []
    for port in ports:
        out.append({"timestamp": t_ns, "prefix": "/COUNTERS", "target": "COUNTERS_DB",
                    "update": [{"path": f"/{port}", "val": {"json_ietf_val": fill(port, "", port_hash)}},
                               {"path": f"/{port}/Queues", "val": {"json_ietf_val": rows(port, queues)}},
                               {"path": f"/{port}/Pfcwd", "val": {"json_ietf_val": rows(port, pfcwd)}}],
                    "delete": []})
    return out


CUMULUS_WJH = "eth/CumulusNetworks__docs/content__cumulus-linux-512__Monitoring-and-Troubleshooting__gNMI_Streaming.md.gnmic-wjh-stream-sample.txt"


def cumulus_wjh_notifications(fixtures: Callable[[str], Path]) -> Notes:
    """The two WJH notifications of the Cumulus Linux 5.12 gnmic sample, in the recording's form
    (gnmic prints the prefix without its leading ``/`` and with unsorted keys; the JSON string
    of ``state/drop`` is a string_val)."""
    text = fixtures(CUMULUS_WJH).read_text()
    out: Notes = []
    for m in re.finditer(r"^\{\n.*?^\}", text, re.S | re.M):
        obj = json.loads(m.group(0))
        prefix = gp.to_string(gp.parse("/" + obj["prefix"]))
        out.append({"timestamp": obj["timestamp"], "prefix": prefix, "target": obj.get("target", ""),
                    "update": [{"path": "/" + u["Path"], "val": {"string_val": u["values"][u["Path"]]}} for u in obj["updates"]],
                    "delete": []})
    return out
