"""SNMP polling, the same for every transport: one GET, then concurrent GETBULK walks.

Why this shape: a poll first GETs sysDescr/sysObjectID/sysUpTime (the device is alive, and
its sysObjectID picks the vendor profile), then walks every needed column concurrently. Only
the first GET failing fails the poll; a walk that fails is logged and the rest kept. The
varbinds are written as snmprec text (``snmprec.py``), so a recording does not say, and does
not depend on, which transport made it.

The wire I/O is a transport module chosen by name (``BACKENDS``): ``transport_gufo`` (gufo-snmp,
Rust BER/USM, the default) or ``transport_pysnmp`` (pysnmp 7.x, the original stack, and the
only one with 3DES and SNMPv3 context names). Each one's ``open_agent(session)`` returns an
``Agent`` whose ``get`` and ``walk`` give rows of (OID, snmprec tag, value).
"""

from __future__ import annotations

import asyncio
import gc
import importlib
import logging
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

from fabricmon.collectors.base import ErrorReason, FetchError, poll_over
from fabricmon.collectors.snmp.snmprec import Oid, Value, format_snmprec

log = logging.getLogger(__name__)

# Columns walked at once per target: enough to hide round trips, few enough that a switch's
# single-threaded agent is not flooded.
MAX_CONCURRENT_WALKS = 8
# Varbinds one poll may return, all walks together: a 1,000-port chassis x 40 columns x 8
# priorities is 320,000; an agent that keeps answering inside the subtree (an endless walk:
# 1.6 MB/s of RSS for ever, issue 32) is cut here, or at the poll's deadline, whichever comes first.
MAX_ROWS_PER_POLL = 1_000_000
IF_TABLES = ((1, 3, 6, 1, 2, 1, 2, 2), (1, 3, 6, 1, 2, 1, 31, 1))  # ifTable, ifXTable: every switch has interfaces

Backend = Literal["gufo", "pysnmp"]
BACKENDS: dict[str, str] = {
    "gufo": "fabricmon.collectors.snmp.transport_gufo",
    "pysnmp": "fabricmon.collectors.snmp.transport_pysnmp",
}
# What only pysnmp does: gufo-snmp 0.13 has no 3DES-EDE and always sends an empty contextName.
PYSNMP_ONLY_PRIV = frozenset({"3des"})

Row = tuple[Oid, str, Value]
WalkPlanner = Callable[[list[Row]], list[Oid]]


@dataclass(slots=True, frozen=True)
class Credentials:
    """v2c community or v3 USM user, in the config's own words (protocol names of SnmpOptions)."""

    version: Literal["2c", "3"]
    community: str = ""
    user: str = ""
    auth_protocol: str = "none"
    auth_key: str | None = None
    priv_protocol: str = "none"
    priv_key: str | None = None
    context: str = ""  # SNMPv3 context name (Cisco VRF contexts; snmpsim's data file)

    def __repr__(self) -> str:  # never the secrets, even in a debugger or a log line
        who = f"user {self.user!r}" if self.version == "3" else "community"
        return f"Credentials(v{self.version}, {who}, auth={self.auth_protocol}, priv={self.priv_protocol})"


@dataclass(slots=True)
class Session:
    """Everything a request needs; built once per poll (the secrets live only here)."""

    host: str
    port: int
    credentials: Credentials
    timeout: float
    retries: int
    max_repetitions: int
    backend: Backend = "gufo"
    rows: int = 0  # varbinds walked so far this poll (MAX_ROWS_PER_POLL)

    @property
    def where(self) -> str:
        return f"{self.host}:{self.port}"

    def walked(self, what: str, oid: Oid, last: Oid) -> None:
        """The checks fabricmon makes on every walked varbind, whatever the backend: the OID
        increases (else the walk would loop: ``protocol``), the poll's varbinds stay bounded
        (``size``), and the poll is not over (its deadline passed, or it was cancelled and the
        library swallowed the cancellation)."""
        if oid <= last:
            raise FetchError(f"{what} on {self.where}: OID {'.'.join(map(str, oid))} does not increase "
                             f"(after {'.'.join(map(str, last))}): the agent's walk loops", ErrorReason.PROTOCOL)
        self.rows += 1
        if self.rows > MAX_ROWS_PER_POLL:
            raise FetchError(f"{what} on {self.where}: more than {MAX_ROWS_PER_POLL:,} varbinds in one poll; "
                             "the walk does not end", ErrorReason.SIZE, fatal=True)
        if poll_over():
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                raise asyncio.CancelledError()
            raise FetchError(f"{what} on {self.where}: the poll's deadline passed after {self.rows:,} varbinds "
                             "(the walk does not end)", ErrorReason.TIMEOUT, fatal=True)


class Agent(Protocol):
    """One target as a transport sees it."""

    async def get(self, oids: Sequence[Oid]) -> list[Row]:
        """The values of ``oids`` (missing ones left out); FetchError naming the target on failure."""
        ...

    async def walk(self, root: Oid) -> list[Row]:
        """Every varbind under ``root`` in OID order; FetchError on the first error."""
        ...

    def close(self) -> None:
        """Release sockets."""
        ...


def open_agent(s: Session) -> Agent:
    """The session's transport module's agent (imported on first use: pysnmp costs 0.5 s to import)."""
    module = importlib.import_module(BACKENDS[s.backend])
    return module.open_agent(s)


async def prepare(backend: Backend) -> None:
    """Import the transport and build pysnmp's engine (both backends use it: gufo learns column
    types with it) in a thread, not on the event loop: 1.6 s of imports and 0.6 s of MIB loading
    at a target's first poll stalled everything else (2 s under load)."""
    name = BACKENDS[backend]
    if name not in sys.modules:
        await asyncio.to_thread(importlib.import_module, name)
    from fabricmon.collectors.snmp import transport_pysnmp

    if await transport_pysnmp.ensure_engine():
        # pysnmp's modules and MIBs are hundreds of thousands of objects that live as long as the
        # process: out of the cyclic collector's reach, whose full collections (run by whichever
        # thread allocates, the event loop's too) traversed them again and again (0.2-0.3 s each).
        gc.freeze()


async def poll(s: Session, scalars: Sequence[Oid], walks_for: WalkPlanner) -> str:
    """GET the scalars, ask ``walks_for`` which subtrees to walk, walk them; snmprec text."""
    await prepare(s.backend)
    agent = open_agent(s)
    try:
        return await _poll(s, agent, scalars, walks_for)
    finally:
        agent.close()


async def _poll(s: Session, agent: Agent, scalars: Sequence[Oid], walks_for: WalkPlanner) -> str:
    rows = await agent.get(scalars)
    if not rows:  # every scalar answered noSuchObject/noSuchInstance: a view that hides the device
        raise FetchError(f"SNMP agent at {s.where} answered, but none of sysUpTime, sysObjectID ... exists in its view "
                         "(noSuchObject): check the community/user's view", ErrorReason.PROTOCOL)
    roots = walks_for(rows)
    gate = asyncio.Semaphore(MAX_CONCURRENT_WALKS)

    async def gated(root: Oid) -> list[Row]:
        async with gate:
            return await agent.walk(root)

    results = await asyncio.gather(*(gated(r) for r in roots), return_exceptions=True)
    for root, res in zip(roots, results, strict=True):
        if isinstance(res, BaseException):
            if not isinstance(res, FetchError) or res.fatal:  # CancelledError, bugs and the poll's bounds go up as they are
                raise res
            log.warning("SNMP %s: subtree %s skipped this poll: %s", s.where, ".".join(map(str, root)), res)
            continue
        rows.extend(res)
    if not any(r[0][: len(IF_TABLES[0])] in IF_TABLES for r in rows):
        raise FetchError(f"SNMP agent at {s.where} has no IF-MIB interface rows (its walks ended at once, endOfMibView): "
                         "check the community/user's view", ErrorReason.PROTOCOL)
    return format_snmprec(rows)
