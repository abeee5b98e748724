"""SNMP I/O with pysnmp 7.x (asyncio API): one GET, then concurrent GETBULK walks.

Why this shape: a poll first GETs sysDescr/sysObjectID/sysUpTime (the device is alive, and
its sysObjectID picks the vendor profile), then walks every needed column concurrently with
``asyncio.gather``. Only the first GET failing fails the poll; a walk that fails is logged
and the rest kept. The varbinds are written as snmprec text (``snmprec.py``).

pysnmp 7.x traps handled here: one SnmpEngine per event loop (lextudio/pysnmp #237: it binds to
its loop and is costly to build); ``bulk_walk_cmd`` keeps looping on a timeout, so break on
any errorIndication; ``lookupMib=False`` (2-3x less CPU); ``lexicographicMode=False`` so a
walk stops at its subtree's end.
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from pyasn1.type import univ
from pysnmp.hlapi.v3arch import asyncio as hl
from pysnmp.proto import rfc1902

from fabricmon.collectors.base import ErrorReason, FetchError
from fabricmon.collectors.snmp.snmprec import Oid, Value, format_snmprec

log = logging.getLogger(__name__)

# Columns walked at once per target: enough to hide round trips, few enough that a switch's
# single-threaded agent is not flooded.
MAX_CONCURRENT_WALKS = 8
# Walks in flight across ALL targets of one event loop. They share the engine's one UDP
# socket: 64 switches x 8 walks = 512 GETBULK answers arriving together overflow its default
# receive buffer (~208 KB), and every dropped datagram costs a whole retry timeout (measured
# in bench/snmp_compare.py). 32 answers of a few KB each fit.
MAX_WALKS_IN_FLIGHT = 32
_ENGINES: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, hl.SnmpEngine] = weakref.WeakKeyDictionary()
_IN_FLIGHT: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore] = weakref.WeakKeyDictionary()

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


def engine() -> hl.SnmpEngine:
    """The SnmpEngine of the running event loop, created on first use."""
    loop = asyncio.get_running_loop()
    eng = _ENGINES.get(loop)
    if eng is None:
        eng = hl.SnmpEngine()
        _ENGINES[loop] = eng
    return eng


def in_flight_gate() -> asyncio.Semaphore:
    """The running loop's limit on walks in flight over its engine's socket."""
    loop = asyncio.get_running_loop()
    gate = _IN_FLIGHT.get(loop)
    if gate is None:
        gate = _IN_FLIGHT[loop] = asyncio.Semaphore(MAX_WALKS_IN_FLIGHT)
    return gate


@dataclass(slots=True)
class Session:
    """Everything a request needs; built once per poll (the secrets live only here)."""

    host: str
    port: int
    auth: hl.CommunityData | hl.UsmUserData
    timeout: float
    retries: int
    max_repetitions: int
    context: str = ""  # SNMPv3 context name (Cisco VRF contexts; snmpsim's data file)

    def context_data(self) -> hl.ContextData:
        return hl.ContextData(contextName=self.context) if self.context else hl.ContextData()

    @property
    def where(self) -> str:
        return f"{self.host}:{self.port}"


def to_row(oid: Oid, value: object) -> tuple[Oid, str, Value] | None:
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


async def _transport(s: Session) -> hl.UdpTransportTarget:
    try:
        return await hl.UdpTransportTarget.create((s.host, s.port), timeout=s.timeout, retries=s.retries)
    except Exception as exc:  # pysnmp raises PySnmpError for unresolvable names
        raise FetchError(f"cannot resolve SNMP agent address {s.host}: {exc}", ErrorReason.CONNECTION) from None


def _error_reason(indication: object) -> str:
    text = str(indication).lower()
    if "timed out" in text or "timeout" in text:
        return ErrorReason.TIMEOUT
    if any(w in text for w in ("auth", "unknown user", "wrong digest", "decryption", "unsupported security")):
        return ErrorReason.AUTH
    return "protocol"


IF_TABLES = ((1, 3, 6, 1, 2, 1, 2, 2), (1, 3, 6, 1, 2, 1, 31, 1))  # ifTable, ifXTable: every switch has interfaces


async def get_scalars(s: Session, target: hl.UdpTransportTarget, oids: Sequence[Oid]) -> list[tuple[Oid, str, Value]]:
    """The first request of a poll. Any failure here fails the poll."""
    var_binds = [hl.ObjectType(hl.ObjectIdentity(".".join(map(str, o)))) for o in oids]
    err_ind, err_status, err_index, out = await hl.get_cmd(
        engine(), s.auth, target, s.context_data(), *var_binds, lookupMib=False)
    if err_ind:
        reason = _error_reason(err_ind)
        detail = f"no response from {s.where} within {s.timeout:g} s x {s.retries + 1} tries" if reason == ErrorReason.TIMEOUT else str(err_ind)
        raise FetchError(f"SNMP GET to {s.where} failed: {detail}", reason)
    if err_status:
        raise FetchError(f"SNMP GET to {s.where} failed: {err_status.prettyPrint()} at index {err_index}", ErrorReason.PROTOCOL)
    rows = []
    for name, value in out:
        row = to_row(tuple(name.asTuple()), value)
        if row is not None:
            rows.append(row)
    return rows


async def walk(s: Session, target: hl.UdpTransportTarget, root: Oid) -> list[tuple[Oid, str, Value]]:
    """Every varbind under ``root``; raises FetchError on the first error indication."""
    rows: list[tuple[Oid, str, Value]] = []
    n = len(root)
    start = hl.ObjectType(hl.ObjectIdentity(".".join(map(str, root))))
    async for err_ind, err_status, _err_index, var_binds in hl.bulk_walk_cmd(
        engine(), s.auth, target, s.context_data(), 0, s.max_repetitions, start,
        lookupMib=False, lexicographicMode=False,
    ):
        if err_ind:  # bulk_walk_cmd would keep retrying a timeout forever
            raise FetchError(f"walk of {'.'.join(map(str, root))} on {s.where}: {err_ind}", _error_reason(err_ind))
        if err_status:
            raise FetchError(f"walk of {'.'.join(map(str, root))} on {s.where}: {err_status.prettyPrint()}", ErrorReason.PROTOCOL)
        for name, value in var_binds:
            oid = tuple(name.asTuple())
            if oid[:n] != root:
                continue
            row = to_row(oid, value)
            if row is not None:
                rows.append(row)
    return rows


Row = tuple[Oid, str, Value]
WalkPlanner = Callable[[list[Row]], list[Oid]]


async def poll(s: Session, scalars: Sequence[Oid], walks_for: WalkPlanner) -> str:
    """GET the scalars, ask ``walks_for`` which subtrees to walk, walk them; snmprec text."""
    target = await _transport(s)
    rows = await get_scalars(s, target, scalars)
    if not rows:  # every scalar answered noSuchObject/noSuchInstance: a view that hides the device
        raise FetchError(f"SNMP agent at {s.where} answered, but none of sysUpTime, sysObjectID ... exists in its view "
                         "(noSuchObject): check the community/user's view", ErrorReason.PROTOCOL)
    roots = walks_for(rows)
    gate = asyncio.Semaphore(MAX_CONCURRENT_WALKS)

    shared = in_flight_gate()

    async def gated(root: Oid) -> list[Row]:
        async with gate, shared:
            return await walk(s, target, root)

    results = await asyncio.gather(*(gated(r) for r in roots), return_exceptions=True)
    for root, res in zip(roots, results, strict=True):
        if isinstance(res, BaseException):
            if isinstance(res, asyncio.CancelledError):
                raise res
            if not isinstance(res, FetchError):
                raise res
            log.warning("SNMP %s: subtree %s skipped this poll: %s", s.where, ".".join(map(str, root)), res)
            continue
        rows.extend(res)
    if not any(r[0][: len(IF_TABLES[0])] in IF_TABLES for r in rows):
        raise FetchError(f"SNMP agent at {s.where} has no IF-MIB interface rows (its walks ended at once, endOfMibView): "
                         "check the community/user's view", ErrorReason.PROTOCOL)
    return format_snmprec(rows)

