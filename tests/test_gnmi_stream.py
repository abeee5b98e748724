"""The gNMI collector against a real grpcio gNMI server on loopback (tests/gnmi_standin.py): TLS
with a throw-away certificate, username/password, the initial sync, streams cut into polls,
dropped streams, deletes, refused STREAM (POLL, then Get), bad credentials, a wrong CA, a dead
server, an endless stream, and a clean close."""

from __future__ import annotations

import asyncio
import gc
import warnings

import pytest

from fabricmon.collectors.base import FetchError
from fabricmon.collectors.gnmi import GnmiCollector, GnmiOptions
from fabricmon.core.model import TargetSpec
from tests.conftest import free_port, public_fixture
from tests.gnmi_standin import GnmiStandIn, sonic_port_notifications
from tests.pki import self_signed_cert

pytestmark = pytest.mark.fixtures
T0 = 1_700_000_000_000_000_000


def _fixture(rel: str):
    return public_fixture(rel)


@pytest.fixture
def certs(tmp_path):
    server = tmp_path / "server"
    server.mkdir()
    return self_signed_cert(server)


def collector(port: int, ca, *, password: str = "secret", timeout: float = 3.0, interval: float = 1.0, **extra) -> GnmiCollector:
    opts = GnmiOptions.model_validate({"port": port, "username": "admin", "password": password, "ca_file": str(ca),
                                       "profile": "sonic", **extra})
    c = GnmiCollector("sw1", "127.0.0.1", opts)
    c.set_schedule(interval, timeout)
    return c


def snapshot(rounds: list[int], ports=("Ethernet0", "Ethernet4")):
    """The SONiC shapes with PFC RX on priority 3 at 100 x round (rounds[0] is the current round)."""
    def make():
        k = rounds[0]
        return sonic_port_notifications(_fixture, list(ports), T0 + k * 10**9,
                                        lambda port, row, f: str(100 * k) if (row, f) == ("", "SAI_PORT_STAT_PFC_3_RX_PKTS") else None)
    return make


def pfc3(payload: dict, port: str = "Ethernet0") -> list[int]:
    """Every recorded value of Ethernet0's SAI_PORT_STAT_PFC_3_RX_PKTS in a payload."""
    out = []
    for n in payload["notifications"]:
        for u in n.get("update", []):
            if u["path"] == f"/{port}":
                out.append(int(u["val"]["json_ietf_val"]["SAI_PORT_STAT_PFC_3_RX_PKTS"]))
    return out


async def test_tls_password_initial_sync_then_pushed_rounds(certs):
    cert, key = certs
    rounds = [0]
    async with GnmiStandIn(tls=(cert, key), snapshot=snapshot(rounds)) as srv:
        c = collector(srv.port, cert)
        try:
            first = await c.fetch()
            assert pfc3(first) == [0]
            assert first["notifications"][-1] == {"sync_response": True}
            assert srv.calls[:2] == ["Capabilities", "Subscribe"]
            subs = srv.subscriptions[0]
            assert subs.prefix.target == "COUNTERS_DB" and subs.mode == 0  # STREAM
            assert all(s.sample_interval == 10**9 for s in subs.subscription)  # the poll interval, ns
            rounds[0] = 1
            srv.push(snapshot(rounds)())
            second = await c.fetch()
            assert pfc3(second) == [100]
            assert "sync_response" not in second["notifications"][-1]
            result, _ = GnmiCollector.parse_poll(second, TargetSpec("sw1", "gnmi"), GnmiCollector.new_state())
            assert result.clocks["sw1"] == pytest.approx((T0 + 10**9) / 1e9)
        finally:
            await c.close()


async def test_sampler_streams_at_the_poll_interval_and_polls_cut_whole_rounds(certs):
    cert, key = certs
    rounds = [0]

    def sample(k: int):
        rounds[0] = k
        return snapshot(rounds)()

    async with GnmiStandIn(tls=(cert, key), snapshot=snapshot(rounds), sampler=sample) as srv:
        c = collector(srv.port, cert, interval=0.3)
        try:
            seen = []
            for _ in range(4):
                seen.append(pfc3(await c.fetch()))
                await asyncio.sleep(0.3)
            flat = [v for poll in seen for v in poll]
            assert flat == sorted(flat) and flat[0] == 0 and len(flat) >= 3
            assert all(len(poll) >= 1 for poll in seen[1:]), seen  # no empty poll: a round in flight is waited for
            client = c._client
            assert client.received == client.delivered + client.waiting and client.dropped == 0  # none lost
        finally:
            await c.close()


async def test_dropped_stream_fails_the_poll_then_reconnects(certs, monkeypatch):
    from fabricmon.collectors.gnmi import fetch as gnmi_fetch

    monkeypatch.setattr(gnmi_fetch, "BACKOFF_START", 0.2)
    cert, key = certs
    rounds = [0]
    async with GnmiStandIn(tls=(cert, key), snapshot=snapshot(rounds)) as srv:
        c = collector(srv.port, cert)
        try:
            await c.fetch()
            srv.drop_streams()
            await asyncio.sleep(0.1)
            with pytest.raises(FetchError) as err:
                await c.fetch()
            assert err.value.reason == "connection" and "UNAVAILABLE" in str(err.value)
            rounds[0] = 5
            for _ in range(50):  # the reconnect re-subscribes and syncs again
                await asyncio.sleep(0.1)
                if srv.open_streams:
                    break
            again = await c.fetch()
            assert 500 in pfc3(again) and {"sync_response": True} in again["notifications"]
        finally:
            await c.close()


async def test_deleted_paths_reach_the_payload_and_drop_the_kept_state(certs):
    cert, key = certs
    rounds = [0]
    async with GnmiStandIn(tls=(cert, key), snapshot=snapshot(rounds, ports=("Ethernet0",))) as srv:
        c = collector(srv.port, cert)
        try:
            state = GnmiCollector.new_state()
            spec = TargetSpec("sw1", "gnmi")
            first, state = GnmiCollector.parse_poll(await c.fetch(), spec, state)
            assert any(g.name == "pfc_watchdog_stormed" and g.port == "Ethernet0" for g in first.gauges)
            # The port goes away (a breakout change): the device deletes its subtree.
            srv.push([{"timestamp": T0 + 2 * 10**9, "prefix": "/COUNTERS", "target": "COUNTERS_DB", "update": [],
                       "delete": ["/Ethernet0"]}])
            payload = await c.fetch()
            assert payload["notifications"] == [{"timestamp": T0 + 2 * 10**9, "prefix": "/COUNTERS", "target": "COUNTERS_DB",
                                                 "update": [], "delete": ["/Ethernet0"]}]
            after, state = GnmiCollector.parse_poll(payload, spec, state)
            assert not after.gauges and not state.gauges  # the stormed/occupancy state of the port is gone
            assert not after.warnings
        finally:
            await c.close()


async def test_refused_stream_falls_back_to_poll_then_get(certs):
    cert, key = certs
    rounds = [0]
    async with GnmiStandIn(tls=(cert, key), snapshot=snapshot(rounds), refuse_stream=True) as srv:
        c = collector(srv.port, cert)
        try:
            first = await c.fetch()
            assert pfc3(first) == [0] and c._client.mode == "poll"
            rounds[0] = 2
            assert pfc3(await c.fetch()) == [200]
            modes = [s.mode for s in srv.subscriptions]
            assert modes[0] == 0 and modes[-1] == 2  # STREAM refused, then POLL
        finally:
            await c.close()
    async with GnmiStandIn(tls=(cert, key), snapshot=snapshot(rounds), refuse_stream=True, refuse_poll=True) as srv:
        c = collector(srv.port, cert)
        try:
            assert pfc3(await c.fetch()) == [200] and c._client.mode == "get"
            assert "Get" in srv.calls
        finally:
            await c.close()


async def test_wrong_password_is_an_auth_error(certs):
    cert, key = certs
    async with GnmiStandIn(tls=(cert, key)) as srv:
        c = collector(srv.port, cert, password="wrong")
        try:
            with pytest.raises(FetchError) as err:
                await c.fetch()
            assert err.value.reason == "auth" and "wrong" not in str(err.value)
        finally:
            await c.close()


async def test_wrong_ca_is_a_tls_error_and_skip_verify_connects(certs, tmp_path):
    cert, key = certs
    other = tmp_path / "other"
    other.mkdir()
    wrong_ca, _ = self_signed_cert(other)
    async with GnmiStandIn(tls=(cert, key), snapshot=snapshot([0])) as srv:
        c = collector(srv.port, wrong_ca)
        try:
            with pytest.raises(FetchError) as err:
                await c.fetch()
            assert err.value.reason == "tls"
        finally:
            await c.close()
        c = collector(srv.port, wrong_ca, tls_insecure_skip_verify=True)
        try:
            assert pfc3(await c.fetch()) == [0]
        finally:
            await c.close()


async def test_client_certificate(certs, tmp_path):
    cert, key = certs
    client_dir = tmp_path / "client"
    client_dir.mkdir()
    client_cert, client_key = self_signed_cert(client_dir)
    async with GnmiStandIn(tls=(cert, key), client_ca=client_cert, snapshot=snapshot([0])) as srv:
        c = collector(srv.port, cert)
        try:
            with pytest.raises(FetchError) as err:
                await c.fetch()
            assert err.value.reason in ("tls", "connection")
        finally:
            await c.close()
        c = collector(srv.port, cert, cert_file=str(client_cert), key_file=str(client_key))
        try:
            assert pfc3(await c.fetch()) == [0]
        finally:
            await c.close()


async def test_dead_server_is_a_connection_error(certs):
    cert, _key = certs
    c = collector(free_port(), cert)
    try:
        with pytest.raises(FetchError) as err:
            await c.fetch()
        assert err.value.reason == "connection"
    finally:
        await c.close()


async def test_endless_stream_is_bounded_per_poll(certs):
    cert, key = certs
    async with GnmiStandIn(tls=(cert, key), snapshot=snapshot([0]), endless=True) as srv:
        c = collector(srv.port, cert, max_notifications_per_poll=50)
        try:
            await c.fetch()  # the initial sync arrives before the cap fills
            await asyncio.sleep(0.2)
            with pytest.raises(FetchError) as err:
                await c.fetch()
            assert err.value.reason == "size" and "max_notifications_per_poll" in str(err.value)
            assert len(c._client._buffer) <= 50  # memory stays bounded while the stream goes on
            await asyncio.sleep(0.2)
            assert len(c._client._buffer) <= 50 and c._client.dropped > 0
        finally:
            await c.close()


async def test_no_sync_within_the_poll_is_a_timeout(certs):
    cert, key = certs
    async with GnmiStandIn(tls=(cert, key), send_sync=False) as srv:
        c = collector(srv.port, cert, timeout=0.5)
        try:
            with pytest.raises(FetchError) as err:
                await c.fetch()
            assert err.value.reason == "timeout"
        finally:
            await c.close()


async def test_close_cancels_cleanly(certs):
    cert, key = certs
    async with GnmiStandIn(tls=(cert, key), snapshot=snapshot([0])) as srv:
        c = collector(srv.port, cert)
        await c.fetch()
        tasks = [g.task for g in c._client._groups]
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            await c.close()
            gc.collect()
        assert all(t.done() for t in tasks)
        assert not [w for w in caught if "destroyed" in str(w.message) or "never awaited" in str(w.message)]
        await asyncio.sleep(0.05)
        assert srv.open_streams == 0


async def test_a_fixed_password_file_is_used_on_the_next_poll(certs, tmp_path):
    """A failed connect leaves nothing behind: once the secret file is right, the next poll of the
    same collector connects (a rotated password needs no restart)."""
    cert, key = certs
    pw = tmp_path / "pw"
    pw.write_text("old-password")
    pw.chmod(0o600)
    async with GnmiStandIn(tls=(cert, key), snapshot=snapshot([0])) as srv:
        opts = GnmiOptions.model_validate({"port": srv.port, "username": "admin", "password_file": str(pw), "ca_file": str(cert),
                                           "profile": "sonic"})
        c = GnmiCollector("sw1", "127.0.0.1", opts)
        c.set_schedule(1.0, 3.0)
        try:
            with pytest.raises(FetchError) as err:
                await c.fetch()
            assert err.value.reason == "auth"
            pw.write_text("secret")
            assert pfc3(await c.fetch()) == [0]
        finally:
            await c.close()
