"""The gufo-snmp transport (the default, ``backend: gufo``): BER, USM and crypto in Rust.

Why: with pysnmp, 88 % of a poll's CPU is pysnmp/pyasn1 BER decoding and engine work; gufo-snmp
(BSD-3, https://github.com/gufolabs/gufo_snmp) walks the same values with about 20x less CPU.
What it cannot do is refused by the config check (``SnmpOptions``): 3DES-EDE privacy and
SNMPv3 context names (gufo-snmp 0.13 always sends an empty contextName); those targets use
``backend: pysnmp``.

Types: gufo-snmp hands back plain Python values (int for Integer32, Counter32, Gauge32,
TimeTicks and Counter64 alike: its ``SnmpValue`` -> Python conversion drops the BER tag), but
the snmprec payload and the parser need the tag (a Counter32 wraps at 2^32, a Counter64 at
2^64). An SMIv2 column has one SYNTAX (RFC 2578 section 7.1), so the tag is learned once per
target and walked column from a pysnmp walk, which reads it off the wire, and reused: each
poll checks every value against its column's tag (Python type and the tag's range) and a
column that fails the check, or was empty when learned, is walked with pysnmp again that
poll and relearned. So both transports write the same bytes, and the first poll of a target
costs what a pysnmp poll costs. gufo-snmp also skips NULL values inside a GETBULK answer
(``src/snmp/op/getbulk.rs``); NULL is no counter, and a column of them is learned as
"mixed" and left to pysnmp.

Concurrency: one gufo socket per walk in flight (at most ``MAX_CONCURRENT_WALKS`` per target),
so answers never queue behind another target's in one shared receive buffer. Retries: gufo
has none of its own; a request that times out is sent again up to ``retries`` times.
"""

from __future__ import annotations

import asyncio
import functools
import ipaddress
import socket
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from contextlib import asynccontextmanager
from typing import TypeVar

from gufo.snmp import (
    Aes128Key,
    Aes192Key,
    Aes256Key,
    DesKey,
    KeyExpansion,
    Md5Key,
    Sha1Key,
    Sha224Key,
    Sha256Key,
    Sha384Key,
    Sha512Key,
    SnmpAuthError,
    SnmpVersion,
    User,
)
from gufo.snmp.aio import SnmpSession
from gufo.snmp.typing import ValueType

from fabricmon.collectors.base import ErrorReason, FetchError
from fabricmon.collectors.snmp import transport_pysnmp
from fabricmon.collectors.snmp.fetch import Row, Session
from fabricmon.collectors.snmp.snmprec import (
    COUNTER32,
    COUNTER64,
    GAUGE32,
    INTEGER,
    IPADDR,
    OCTETS,
    OID,
    OPAQUE,
    TIMETICKS,
    Oid,
)

T = TypeVar("T")

AUTH_KEYS = {"md5": Md5Key, "sha": Sha1Key, "sha224": Sha224Key, "sha256": Sha256Key,
             "sha384": Sha384Key, "sha512": Sha512Key}
PRIV_KEYS = {"des": DesKey, "aes": Aes128Key, "aes128": Aes128Key, "aes192": Aes192Key, "aes256": Aes256Key}

# The Python value each snmprec tag comes back as, and the tag's range (RFC 2578 section 7.1).
_INT_RANGES = {INTEGER: (-(2**31), 2**31 - 1), COUNTER32: (0, 2**32 - 1), GAUGE32: (0, 2**32 - 1),
               TIMETICKS: (0, 2**32 - 1), COUNTER64: (0, 2**64 - 1)}
_PY_TYPE = {OCTETS: bytes, OPAQUE: bytes, OID: str, IPADDR: str}
MIXED = "mixed"  # a column whose rows came with more than one tag (or a NULL): always pysnmp
# Learned tags are kept for this many targets (oldest dropped first): bounded memory.
MAX_TARGETS = 65536
_LEARNED: OrderedDict[tuple[str, int], dict[Oid, str | None]] = OrderedDict()


def _learned(s: Session) -> dict[Oid, str | None]:
    """Tag per walked root and per scalar OID of this target (None: the column was empty)."""
    key = (s.host, s.port)
    table = _LEARNED.get(key)
    if table is None:
        table = _LEARNED[key] = {}
        while len(_LEARNED) > MAX_TARGETS:
            _LEARNED.popitem(last=False)
    return table


def fits(tag: str, values: Sequence[ValueType]) -> bool:
    """Every value is what ``tag`` decodes to in gufo-snmp (type and range)."""
    bounds = _INT_RANGES.get(tag)
    if bounds is not None:
        if not all(type(v) is int for v in values):
            return False
        return not values or (bounds[0] <= min(values) and max(values) <= bounds[1])  # type: ignore[type-var]
    want = _PY_TYPE.get(tag)
    if want is None:
        return False
    if tag == IPADDR:
        return all(type(v) is str and v.count(".") == 3 for v in values)  # type: ignore[union-attr]
    return all(type(v) is want for v in values)


def learn(rows: Iterable[Row]) -> str | None:
    """One tag for a column's rows; None when there were none, MIXED when they disagree."""
    tags = {tag for _oid, tag, _value in rows}
    if not tags:
        return None
    return tags.pop() if len(tags) == 1 and not tags & {"5"} else MIXED


def user(s: Session) -> User:
    c = s.credentials
    auth = AUTH_KEYS[c.auth_protocol]((c.auth_key or "").encode()) if c.auth_protocol != "none" else None
    priv = PRIV_KEYS[c.priv_protocol]((c.priv_key or "").encode()) if c.priv_protocol != "none" else None
    # Cisco/Reeder expansion for AES-192/256: what pysnmp's usmAesCfb192/256Protocol do.
    return User(c.user, auth_key=auth, priv_key=priv, key_expansion=KeyExpansion.Cisco)


@functools.lru_cache(maxsize=1 << 18)  # a target's OIDs come again every poll
def _oid(text: str) -> Oid:
    return tuple(map(int, text.removeprefix(".").split(".")))


class GufoAgent:
    """One target: a few gufo sockets, and pysnmp to learn (or relearn) column types."""

    def __init__(self, s: Session) -> None:
        self.s = s
        self.types = _learned(s)
        self._address: str | None = None
        self._engine_id: bytes | None = None
        self._free: list[SnmpSession] = []
        self._pysnmp: transport_pysnmp.PysnmpAgent | None = None

    @property
    def pysnmp(self) -> transport_pysnmp.PysnmpAgent:
        if self._pysnmp is None:
            self._pysnmp = transport_pysnmp.open_agent(self.s)
        return self._pysnmp

    def _fail(self, what: str, exc: BaseException) -> FetchError:
        """A gufo/OS exception as a FetchError that names the target (never a traceback)."""
        s = self.s
        detail = str(exc) or str(exc.__cause__ or "")
        if isinstance(exc, TimeoutError) and "refused" in detail:  # ICMP port unreachable
            return FetchError(f"{what} on {s.where}: refused (nothing listens on UDP port {s.port})", ErrorReason.CONNECTION)
        if isinstance(exc, TimeoutError):
            return FetchError(f"{what} on {s.where}: no response within {s.timeout:g} s x {s.retries + 1} tries",
                              ErrorReason.TIMEOUT)
        if isinstance(exc, SnmpAuthError):
            return FetchError(f"{what} on {s.where}: SNMPv3 authentication failed (user, keys or protocols)",
                              ErrorReason.AUTH)
        if isinstance(exc, OSError):
            return FetchError(f"{what} on {s.where}: {detail}", ErrorReason.CONNECTION)
        # gufo's exception types are named PySnmpDecodeError etc. (its Rust bindings): say which backend it was.
        kind = type(exc).__name__.removeprefix("Py")
        return FetchError(f"{what} on {s.where}: malformed or unusable response (gufo-snmp backend: {kind}: {detail})",
                          ErrorReason.PROTOCOL)

    def _give_up(self, what: str, exc: BaseException, attempt: int) -> FetchError | None:
        """None when ``exc`` is a timeout worth another try; else the FetchError to raise."""
        if isinstance(exc, asyncio.CancelledError) or not (
                isinstance(exc, Exception) or type(exc).__name__ == "PanicException"):  # gufo's Rust panics
            raise exc
        if isinstance(exc, TimeoutError) and attempt < self.s.retries and "refused" not in (str(exc) or str(exc.__cause__ or "")):
            return None
        return self._fail(what, exc)

    async def _retry(self, what: str, call: Callable[[], Awaitable[T]]) -> T:
        attempt = 0
        while True:
            try:
                return await call()
            except BaseException as exc:
                err = self._give_up(what, exc, attempt)
                if err is not None:
                    raise err from None
                attempt += 1

    async def _resolve(self) -> str:
        if self._address is None:
            host = self.s.host
            try:
                self._address = str(ipaddress.ip_address(host))
            except ValueError:
                try:
                    infos = await asyncio.get_running_loop().getaddrinfo(host, self.s.port, type=socket.SOCK_DGRAM)
                except OSError as exc:
                    raise FetchError(f"cannot resolve SNMP agent address {host}: {exc}", ErrorReason.CONNECTION) from None
                self._address = str(infos[0][4][0])
        return self._address

    @asynccontextmanager
    async def _session(self) -> AsyncIterator[SnmpSession]:
        """A free gufo session of this target (a new socket when all are busy)."""
        if self._free:
            sess = self._free.pop()
        else:
            s, c = self.s, self.s.credentials
            sess = SnmpSession(
                addr=await self._resolve(), port=s.port, timeout=s.timeout, max_repetitions=s.max_repetitions,
                **({"community": c.community, "version": SnmpVersion.v2c} if c.version == "2c"
                   else {"user": user(s), "version": SnmpVersion.v3, "engine_id": self._engine_id}))
            if c.version == "3":  # engine discovery (first socket) and boots/time sync
                await self._retry("SNMPv3 engine discovery", sess.refresh)
                self._engine_id = self._engine_id or sess.get_engine_id()
        yield sess
        self._free.append(sess)

    async def get(self, oids: Sequence[Oid]) -> list[Row]:
        """Always through gufo-snmp first, so reachability, timeouts and auth fail the gufo way;
        pysnmp again only for tags not learned yet (a target's first poll)."""
        tags = [self.types.get(o) for o in oids]
        async with self._session() as sess:
            got = await self._retry("SNMP GET", lambda: sess.get_many([".".join(map(str, o)) for o in oids]))
        by_oid = {_oid(k): v for k, v in got.items()}
        if set(by_oid) <= set(oids) and all(
                t not in (None, MIXED) and fits(t, [by_oid[o]]) for o, t in zip(oids, tags, strict=True) if o in by_oid):
            return [(o, t, by_oid[o]) for o, t in zip(oids, tags, strict=True) if o in by_oid]  # type: ignore[misc]
        rows = await self.pysnmp.get(oids)
        for oid, tag, _value in rows:
            self.types[oid] = tag
        return rows

    async def walk(self, root: Oid) -> list[Row]:
        if root in self.types and self.types[root] != MIXED:
            tag = self.types[root]
            text = ".".join(map(str, root))
            async with self._session() as sess:
                got = await self._bulk(sess, text)
            if not got:
                return []
            if tag is not None and fits(tag, [v for _o, v in got]):
                return [(_oid(o), tag, v) for o, v in got]
        rows = await self.pysnmp.walk(root)
        self.types[root] = learn(rows)
        return rows

    async def _bulk(self, sess: SnmpSession, oid: str) -> list[tuple[str, ValueType]]:
        """A GETBULK walk of one column; a request that times out is sent again (same position).

        gufo-snmp neither notices a walk that loops (the same OID again) nor, on Python 3.11,
        always lets a cancellation through its own ``wait_for``: :meth:`Session.walked` checks
        every varbind (increasing, bounded, inside the poll's deadline, not cancelled)."""
        rows: list[tuple[str, ValueType]] = []
        it = sess.getbulk(oid)
        attempt = 0
        last = _oid(oid)
        what = f"walk of {oid}"
        while True:
            try:
                row = await it.__anext__()
                attempt = 0
            except StopAsyncIteration:
                return rows
            except BaseException as exc:
                err = self._give_up(what, exc, attempt)
                if err is not None:
                    raise err from None
                attempt += 1
                continue
            current = _oid(row[0])
            self.s.walked(what, current, last)
            last = current
            rows.append(row)

    def close(self) -> None:
        self._free.clear()  # gufo closes a socket when its session is dropped


def open_agent(s: Session) -> GufoAgent:
    return GufoAgent(s)
