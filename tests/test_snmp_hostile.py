"""A hostile SNMP agent (issue 32) against both transports: a walk that never ends must stop at
fabricmon's own bounds (the poll's deadline, the varbinds of a poll) whatever the backend does,
and a walk that does not increase is reason ``protocol``. The agent is tests/snmp_hostile.py."""

from __future__ import annotations

import asyncio
import time

import pytest

from fabricmon.collectors.base import POLL_DEADLINE, ErrorReason, FetchError
from fabricmon.collectors.snmp import fetch as snmp_fetch
from fabricmon.collectors.snmp import transport_gufo
from fabricmon.collectors.snmp.fetch import Credentials, Session
from tests.snmp_hostile import serve

IF_IN_OCTETS = (1, 3, 6, 1, 2, 1, 2, 2, 1, 10)


def _session(port: int, backend: str) -> Session:
    return Session("127.0.0.1", port, Credentials("2c", community="public"), timeout=1.0, retries=0,
                   max_repetitions=25, backend=backend)  # type: ignore[arg-type]


@pytest.mark.parametrize("backend", ["gufo", "pysnmp"])
async def test_a_walk_that_does_not_increase_is_a_protocol_error(backend):
    transport, _agent = await serve("loop")
    try:
        s = _session(transport.get_extra_info("sockname")[1], backend)
        agent = snmp_fetch.open_agent(s)
        if backend == "gufo":  # the column's type is learned: this walk goes through gufo-snmp itself
            agent.types[IF_IN_OCTETS] = "70"
        with pytest.raises(FetchError) as exc:
            await asyncio.wait_for(agent.walk(IF_IN_OCTETS), 30)
        agent.close()
    finally:
        transport.close()
    assert exc.value.reason == ErrorReason.PROTOCOL and "does not increase" in str(exc.value)


@pytest.mark.parametrize("backend", ["gufo", "pysnmp"])
async def test_an_endless_walk_stops_at_the_poll_deadline(backend):
    transport, agent_srv = await serve("endless")
    try:
        s = _session(transport.get_extra_info("sockname")[1], backend)
        agent = snmp_fetch.open_agent(s)
        if backend == "gufo":
            agent.types[IF_IN_OCTETS] = "70"
        token = POLL_DEADLINE.set(time.monotonic() + 1.5)
        try:
            with pytest.raises(FetchError) as exc:
                await asyncio.wait_for(agent.walk(IF_IN_OCTETS), 30)
        finally:
            POLL_DEADLINE.reset(token)
        agent.close()
    finally:
        transport.close()
    assert exc.value.reason in (ErrorReason.TIMEOUT, ErrorReason.SIZE) and exc.value.fatal
    assert agent_srv.requests > 1  # it did walk, and stopped by itself (wait_for's 30 s never fired)


async def test_the_scheduler_timeout_ends_an_endless_gufo_walk():
    """The original break: with gufo-snmp the poll never ended in 3 of 3 runs (its receive's
    wait_for swallowed the outer cancellation on Python 3.11), RSS growing 1.6 MB/s."""
    transport, _agent = await serve("endless")
    try:
        s = _session(transport.get_extra_info("sockname")[1], "gufo")
        agent = transport_gufo.open_agent(s)
        agent.types[IF_IN_OCTETS] = "70"
        t0 = time.monotonic()
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(agent.walk(IF_IN_OCTETS), 1.0)  # no deadline set: only the cancellation
        assert time.monotonic() - t0 < 10
        agent.close()
    finally:
        transport.close()


async def test_the_varbinds_of_a_poll_are_bounded(monkeypatch):
    monkeypatch.setattr(snmp_fetch, "MAX_ROWS_PER_POLL", 300)
    transport, _agent = await serve("endless")
    try:
        s = _session(transport.get_extra_info("sockname")[1], "gufo")
        agent = transport_gufo.open_agent(s)
        agent.types[IF_IN_OCTETS] = "70"
        with pytest.raises(FetchError) as exc:
            await asyncio.wait_for(agent.walk(IF_IN_OCTETS), 30)
        agent.close()
    finally:
        transport.close()
    assert exc.value.reason == ErrorReason.SIZE and "more than 300 varbinds" in str(exc.value)


def test_a_gufo_decode_error_names_the_backend():
    from gufo.snmp import SnmpDecodeError

    s = _session(161, "gufo")
    err = transport_gufo.GufoAgent(s)._fail("SNMP GET", SnmpDecodeError("bad BER"))
    assert "gufo-snmp backend: SnmpDecodeError" in str(err) and "PySnmp" not in str(err)
    assert err.reason == ErrorReason.PROTOCOL
