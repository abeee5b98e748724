"""The pysnmp 7.x transport (asyncio API): ``backend: pysnmp``.

The design's original stack, kept selectable: it is the only transport here with 3DES-EDE
privacy and SNMPv3 context names, and it types every value from the wire (the gufo transport
learns its column types from it, see ``transport_gufo``).

pysnmp 7.x traps handled here: one SnmpEngine per event loop (lextudio/pysnmp #237: it binds to
its loop and is costly to build); ``bulk_walk_cmd`` keeps looping on a timeout, so break on
any errorIndication; ``lookupMib=False`` (2-3x less CPU); ``lexicographicMode=False`` so a
walk stops at its subtree's end.

Same failure, same ErrorReason as gufo-snmp: pysnmp's one unconnected socket never sees the
ICMP port-unreachable of a closed port, and it drops an answer it cannot decode without a
word, so both would be bare timeouts. When the first GET times out, this transport tells the
two apart the way the gufo transport sees them: datagrams from the target that pysnmp could
not decode (its snmpInASNParseErrs counter, RFC 3418, grew on them) are "protocol", and a
connected probe socket that gets ECONNREFUSED back (RFC 1122 section 4.1.3.3: UDP passes ICMP
port unreachable up to the application) is "connection, refused".
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import weakref
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence

from pyasn1.type import univ
from pysnmp.hlapi.v3arch import asyncio as hl
from pysnmp.proto import rfc1902

from fabricmon.collectors.base import ErrorReason, FetchError
from fabricmon.collectors.snmp.fetch import Credentials, Row, Session
from fabricmon.collectors.snmp.snmprec import Oid

# Walks in flight across ALL targets of one event loop. They share the engine's one UDP
# socket: 64 switches x 8 walks = 512 GETBULK answers arriving together overflow its default
# receive buffer (~208 KB), and every dropped datagram costs a whole retry timeout (measured
# in bench/snmp_compare.py). 32 answers of a few KB each fit.
MAX_WALKS_IN_FLIGHT = 32
_ENGINES: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, hl.SnmpEngine] = weakref.WeakKeyDictionary()
_IN_FLIGHT: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore] = weakref.WeakKeyDictionary()
# Undecodable datagrams per sender (ip, port), per engine: see _count_undecodable.
_UNDECODABLE: weakref.WeakKeyDictionary[hl.SnmpEngine, Counter[tuple[str, int]]] = weakref.WeakKeyDictionary()
# How long a closed port's ICMP answer is waited for after a timeout: one round trip is enough.
REFUSED_PROBE_S = 0.5

AUTH_PROTOCOLS = {
    "none": hl.usmNoAuthProtocol,
    "md5": hl.usmHMACMD5AuthProtocol,
    "sha": hl.usmHMACSHAAuthProtocol,
    "sha224": hl.usmHMAC128SHA224AuthProtocol,
    "sha256": hl.usmHMAC192SHA256AuthProtocol,
    "sha384": hl.usmHMAC256SHA384AuthProtocol,
    "sha512": hl.usmHMAC384SHA512AuthProtocol,
}
PRIV_PROTOCOLS = {
    "none": hl.usmNoPrivProtocol,
    "des": hl.usmDESPrivProtocol,
    "3des": hl.usm3DESEDEPrivProtocol,
    "aes": hl.usmAesCfb128Protocol,
    "aes128": hl.usmAesCfb128Protocol,
    # pysnmp's usmAesCfb192/256Protocol localise the key the Reeder/Cisco way (pysnmp
    # proto/secmod/eso/priv/aes192.py); transport_gufo uses the same expansion.
    "aes192": hl.usmAesCfb192Protocol,
    "aes256": hl.usmAesCfb256Protocol,
}

# Most specific classes first: Counter32, Gauge32... all derive from Integer.
_TYPE_TAGS: tuple[tuple[type, str], ...] = (
    (rfc1902.Counter64, "70"),
    (rfc1902.Counter32, "65"),
    (rfc1902.Gauge32, "66"),  # Unsigned32 shares Gauge32's tag
    (rfc1902.Unsigned32, "66"),
    (rfc1902.TimeTicks, "67"),
    (rfc1902.IpAddress, "64"),
    (rfc1902.Opaque, "68"),
    (rfc1902.Bits, "4"),
    (rfc1902.OctetString, "4"),
    (univ.ObjectIdentifier, "6"),
    (univ.Integer, "2"),
    (univ.Null, "5"),
)


_BUILDING: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Future[hl.SnmpEngine]] = weakref.WeakKeyDictionary()


def engine() -> hl.SnmpEngine:
    """The SnmpEngine of the running event loop, created on first use."""
    loop = asyncio.get_running_loop()
    eng = _ENGINES.get(loop)
    if eng is None:
        eng = hl.SnmpEngine()
        _count_undecodable(eng)
        _ENGINES[loop] = eng
    return eng


async def ensure_engine() -> bool:
    """Create the running loop's SnmpEngine in a thread: building one loads pysnmp's MIB modules
    (0.6 s on the test machine, 2 s under load), which on the event loop stalled every other
    poll and scrape at a SNMP target's first poll. True when this call made it."""
    loop = asyncio.get_running_loop()
    if loop in _ENGINES:
        return False
    building = _BUILDING.get(loop)
    if building is None:  # one build per loop, however many targets start at once

        def build() -> hl.SnmpEngine:
            eng = hl.SnmpEngine()
            _count_undecodable(eng)
            # The first request resolves its varbinds through a MIB view whose compiler (pysmi's
            # lark grammar) takes seconds to build: built here, in the thread, once per engine.
            from pysnmp.hlapi import varbinds

            varbinds.CommandGeneratorVarBinds().make_varbinds(eng.cache, (hl.ObjectType(hl.ObjectIdentity("1.3.6.1.2.1.1.3.0")),))
            return eng

        building = _BUILDING[loop] = asyncio.ensure_future(asyncio.to_thread(build))
    try:
        eng = await asyncio.shield(building)
    finally:
        if building.done():
            _BUILDING.pop(loop, None)
    return _ENGINES.setdefault(loop, eng) is eng  # True for the caller that made it


def _count_undecodable(eng: hl.SnmpEngine) -> None:
    """Count, per sender, the datagrams ``eng`` drops as undecodable (its snmpInASNParseErrs grew).

    Verified in pysnmp 7.1 ``proto/rfc3412.py``: ``MsgAndPduDispatcher.receive_message`` counts
    a message whose version does not decode in snmpInASNParseErrs and returns without a word;
    the engine looks the method up on every datagram, so wrapping the instance's is enough."""
    dispatcher = eng.message_dispatcher
    (parse_errors,) = dispatcher.mib_instrum_controller.get_mib_builder().import_symbols(
        "__SNMPv2-MIB", "snmpInASNParseErrs")
    counts: Counter[tuple[str, int]] = _UNDECODABLE.setdefault(eng, Counter())
    receive = dispatcher.receive_message

    def counting(snmp_engine: hl.SnmpEngine, domain: object, address: tuple[str, int], whole_msg: bytes) -> object:
        before = int(parse_errors.syntax)
        try:
            return receive(snmp_engine, domain, address, whole_msg)
        finally:
            if int(parse_errors.syntax) > before:
                counts[(str(address[0]), int(address[1]))] += 1

    dispatcher.receive_message = counting


async def port_refused(address: tuple[str, int], wait: float) -> bool:
    """Whether ``address`` answers an empty datagram with ICMP port unreachable within ``wait`` s."""
    family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
    with socket.socket(family, socket.SOCK_DGRAM) as sock:
        sock.setblocking(False)
        try:
            sock.connect(address)
            sock.send(b"")  # no SNMP message: an agent ignores it, a closed port bounces it
            await asyncio.wait_for(asyncio.get_running_loop().sock_recv(sock, 1), wait)
        except ConnectionRefusedError:
            return True
        except (TimeoutError, OSError):
            return False
    return False  # something answered an empty datagram: not a closed port


def in_flight_gate() -> asyncio.Semaphore:
    """The running loop's limit on walks in flight over its engine's socket."""
    loop = asyncio.get_running_loop()
    gate = _IN_FLIGHT.get(loop)
    if gate is None:
        gate = _IN_FLIGHT[loop] = asyncio.Semaphore(MAX_WALKS_IN_FLIGHT)
    return gate


def auth_data(c: Credentials) -> hl.CommunityData | hl.UsmUserData:
    """pysnmp's form of the credentials."""
    if c.version == "2c":
        return hl.CommunityData(c.community, mpModel=1)
    return hl.UsmUserData(
        c.user,
        authKey=c.auth_key if c.auth_protocol != "none" else None,
        privKey=c.priv_key if c.priv_protocol != "none" else None,
        authProtocol=AUTH_PROTOCOLS[c.auth_protocol],
        privProtocol=PRIV_PROTOCOLS[c.priv_protocol],
    )


def to_row(oid: Oid, value: object) -> Row | None:
    """A pysnmp value as (oid, snmprec tag, value); None for an exception value."""
    if isinstance(value, (hl.NoSuchObject, hl.NoSuchInstance, hl.EndOfMibView)):
        return None
    for cls, tag in _TYPE_TAGS:
        if isinstance(value, cls):
            if tag in ("4", "68"):
                return oid, tag, bytes(value.asOctets())
            if tag == "64":
                return oid, tag, ".".join(str(b) for b in value.asNumbers())
            if tag == "6":
                return oid, tag, str(value)
            if tag == "5":
                return oid, tag, None
            return oid, tag, int(value)
    return None


def _error_reason(indication: object) -> ErrorReason:
    text = str(indication).lower()
    if "timed out" in text or "timeout" in text:
        return ErrorReason.TIMEOUT
    # pysnmp's words for the USM report PDUs (RFC 3414 usmStats*): wrong digest, unknown user name,
    # decryption error ("ciphertext is broken"), unsupported security level; gufo-snmp says
    # SnmpAuthError for all of them.
    if any(w in text for w in ("auth", "unknown usm user", "unknown user", "digest", "decryption", "ciphertext",
                               "unsupported security")):
        return ErrorReason.AUTH
    return ErrorReason.PROTOCOL


async def _ipv6(host: str, port: int) -> bool:
    """Whether the agent is reached over IPv6: an IPv6 literal, or a name whose first address
    (in the resolver's order, RFC 6724) is IPv6. pysnmp needs its IPv6 transport for those."""
    try:
        return ipaddress.ip_address(host).version == 6
    except ValueError:
        pass
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_DGRAM)
    return bool(infos) and infos[0][0] == socket.AF_INET6


class PysnmpAgent:
    """One target over the loop's shared SnmpEngine.

    Retries are this class's, not pysnmp's (its target has ``retries=0``): pysnmp keeps
    resending a request whose caller was cancelled, so a poll cut off by its deadline would
    go on loading the agent. The walk is a loop of GETBULKs for the same reason (and each
    GETBULK that times out is sent again from the same position, as the gufo transport does).
    """

    def __init__(self, s: Session) -> None:
        self.s = s
        self.auth = auth_data(s.credentials)
        c = s.credentials.context
        self.context = hl.ContextData(contextName=c) if c else hl.ContextData()
        self._target: hl.UdpTransportTarget | hl.Udp6TransportTarget | None = None

    async def _transport(self) -> hl.UdpTransportTarget | hl.Udp6TransportTarget:
        if self._target is None:
            s = self.s
            try:
                kind = hl.Udp6TransportTarget if await _ipv6(s.host, s.port) else hl.UdpTransportTarget
                self._target = await kind.create((s.host, s.port), timeout=s.timeout, retries=0)
            except Exception as exc:  # pysnmp raises PySnmpError for unresolvable names
                raise FetchError(f"cannot resolve SNMP agent address {s.host}: {exc}", ErrorReason.CONNECTION) from None
        return self._target

    async def _request(self, what: str, send: Callable[[hl.UdpTransportTarget], Awaitable[tuple]]) -> list:
        """The varbinds of one request, sent up to retries + 1 times; FetchError naming the target."""
        s = self.s
        target = await self._transport()
        eng = engine()
        peer = (str(target.transport_address[0]), int(target.transport_address[1]))
        undecodable = _UNDECODABLE[eng][peer]
        for attempt in range(s.retries + 1):
            err_ind, err_status, err_index, var_binds = await send(target)
            if not err_ind:
                break
            reason = _error_reason(err_ind)
            if reason != ErrorReason.TIMEOUT:
                raise FetchError(f"{what} on {s.where}: {err_ind}", reason)
            if attempt == s.retries:
                raise await self._timed_out(what, peer, _UNDECODABLE[eng][peer] > undecodable)
        if err_status:
            raise FetchError(f"{what} on {s.where}: {err_status.prettyPrint()} at index {err_index}", ErrorReason.PROTOCOL)
        return var_binds

    async def _timed_out(self, what: str, peer: tuple[str, int], undecodable: bool) -> FetchError:
        """What a timeout was: answers pysnmp dropped as undecodable, a closed port, or silence."""
        s = self.s
        if undecodable:
            return FetchError(f"{what} on {s.where}: malformed or unusable response (answers that do not decode "
                              "as SNMP messages)", ErrorReason.PROTOCOL)
        if await port_refused(peer, min(s.timeout, REFUSED_PROBE_S)):
            return FetchError(f"{what} on {s.where}: refused (nothing listens on UDP port {s.port})", ErrorReason.CONNECTION)
        return FetchError(f"{what} on {s.where}: no response within {s.timeout:g} s x {s.retries + 1} tries",
                          ErrorReason.TIMEOUT)

    async def get(self, oids: Sequence[Oid]) -> list[Row]:
        var_binds = [hl.ObjectType(hl.ObjectIdentity(".".join(map(str, o)))) for o in oids]
        out = await self._request("SNMP GET", lambda target: hl.get_cmd(
            engine(), self.auth, target, self.context, *var_binds, lookupMib=False))
        rows = []
        for name, value in out:
            row = to_row(tuple(name.asTuple()), value)
            if row is not None:
                rows.append(row)
        return rows

    async def walk(self, root: Oid) -> list[Row]:
        rows: list[Row] = []
        n, text = len(root), ".".join(map(str, root))
        last = root
        async with in_flight_gate():
            while True:
                start = hl.ObjectType(hl.ObjectIdentity(".".join(map(str, last))))
                var_binds = await self._request(f"walk of {text}", lambda target, start=start: hl.bulk_cmd(
                    engine(), self.auth, target, self.context, 0, self.s.max_repetitions, start, lookupMib=False))
                if not var_binds:
                    return rows
                for name, value in var_binds:
                    oid = tuple(name.asTuple())
                    if oid[:n] != root or isinstance(value, hl.EndOfMibView):
                        return rows
                    self.s.walked(f"walk of {text}", oid, last)  # increasing, bounded, inside the poll's deadline
                    last = oid
                    row = to_row(oid, value)
                    if row is not None:
                        rows.append(row)

    def close(self) -> None:
        """Nothing per target: the engine and its socket belong to the event loop."""


def open_agent(s: Session) -> PysnmpAgent:
    return PysnmpAgent(s)
