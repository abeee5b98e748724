"""Both SNMP transports (gufo-snmp, pysnmp) against real snmpsim agents on 127.0.0.1: the same
snmprec payload byte for byte, v2c and v3, and the same kinds of failure."""

from __future__ import annotations

import asyncio
import socket
import threading
from pathlib import Path

import pytest
from pydantic import ValidationError

from fabricmon.collectors.base import ErrorReason, FetchError
from fabricmon.collectors.snmp import SnmpCollector, SnmpOptions, transport_gufo
from fabricmon.collectors.snmp.fetch import Credentials, Session, open_agent
from tests.conftest import PUBLIC, free_udp_port
from tests.snmpsim_util import SnmpSim

pytestmark = pytest.mark.snmpsim

BACKENDS = ("pysnmp", "gufo")
DATA = Path(__file__).parent / "data" / "snmp"
RECORDED = {
    name: PUBLIC / "eth" / "Jellyfrog__librenms" / f"tests__snmpsim__{name}.snmprec"
    for name in ("arista_eos_7280r", "cumulus_bgp", "dell-sonic", "nxos_n9k-c93180yc-fx3")
}
SOURCES = {**{k: v for k, v in RECORDED.items() if v.exists()}, **{p.stem: p for p in sorted(DATA.glob("*.snmprec"))}}
# snmpsim serves an SNMPv3 request with an empty contextName (gufo-snmp sends no other) from
# the data file named after its own engine, "self" (snmpsim datafile.probe_context).
V3_FILE = "self"
SCALARS_ONLY = "1.3.6.1.2.1.1.2.0|6|1.3.6.1.4.1.99999\n1.3.6.1.2.1.1.3.0|67|100\n"
HIDDEN = "1.3.6.1.2.1.2.2.1.2.1|4|eth0\n"  # interfaces, but no system group: a view without sysUpTime
USER, AUTH_KEY, PRIV_KEY = "fabmon", "auth-secret-1", "priv-secret-1"


@pytest.fixture(scope="module")
def sim():
    data: dict[str, str | Path] = dict(SOURCES)
    data.update({V3_FILE: DATA / "cisco_pfc.snmprec", "scalars_only": SCALARS_ONLY, "hidden": HIDDEN})
    with SnmpSim(data, v3_user=USER, v3_auth_key=AUTH_KEY, v3_priv_key=PRIV_KEY) as agent:
        yield agent


def v2c(port: int, community: str, backend: str, **opts) -> SnmpCollector:
    return SnmpCollector("sw1", "127.0.0.1", SnmpOptions(port=port, community=community, backend=backend, **opts))


def v3(port: int, backend: str | None, auth: str = "sha", priv: str = "aes", **opts) -> SnmpCollector:
    return SnmpCollector("sw1", "127.0.0.1", SnmpOptions(
        port=port, version="3", user=USER, auth_protocol=auth, auth_key=AUTH_KEY, priv_protocol=priv,
        priv_key=PRIV_KEY, backend=backend, **opts))


def learned_everything(port: int) -> bool:
    """After a poll, the gufo transport knows a tag for every column it walked: its next poll
    reads them all with gufo-snmp (a column it had to relearn is marked MIXED or absent)."""
    table = transport_gufo._LEARNED[("127.0.0.1", port)]
    return bool(table) and all(tag != transport_gufo.MIXED for tag in table.values())


@pytest.mark.parametrize("community", list(SOURCES))
async def test_v2c_payloads_are_identical(sim, community):
    want = (await v2c(sim.port, community, "pysnmp").fetch())["snmprec"]
    gufo = v2c(sim.port, community, "gufo")
    first = (await gufo.fetch())["snmprec"]  # learns each column's type (pysnmp reads it off the wire)
    assert learned_everything(sim.port)
    second = (await gufo.fetch())["snmprec"]  # every column through gufo-snmp
    assert want.encode() == first.encode() == second.encode()
    assert want.count("\n") > 20


async def test_v3_payloads_are_identical(sim):
    want = (await v3(sim.port, "pysnmp").fetch())["snmprec"]
    gufo = v3(sim.port, "gufo")
    payloads = [(await gufo.fetch())["snmprec"] for _ in range(2)]
    assert payloads == [want, want] and "1.3.6.1.4.1.9.9.813" in want  # the Cisco PFC tables came through


@pytest.mark.parametrize(("sim_auth", "sim_priv"), [("MD5", "DES"), ("SHA256", "AES256"), ("SHA512", "AES192")])
async def test_v3_protocols_on_both_backends(sim_auth, sim_priv):
    """Each protocol pair snmpsim (pysnmp's USM) serves, read by both transports, same bytes.
    AES-192/256 keys are localised the Reeder/Cisco way by both (pysnmp's usmAesCfb192Protocol)."""
    # the first file is the community snmpsim_util probes for readiness ("self" has none)
    with SnmpSim({"onyx": DATA / "onyx.snmprec", V3_FILE: DATA / "onyx.snmprec"}, v3_user=USER, v3_auth_key=AUTH_KEY, v3_priv_key=PRIV_KEY,
                 v3_auth_proto=sim_auth, v3_priv_proto=sim_priv) as agent:
        got = {}
        for backend in BACKENDS:
            col = v3(agent.port, backend, sim_auth.lower(), sim_priv.lower())
            got[backend] = [(await col.fetch())["snmprec"] for _ in range(2)]
    assert got["gufo"] == got["pysnmp"] and len(set(got["gufo"])) == 1


async def test_3des_and_context_need_pysnmp(sim):
    for bad in ({"priv": "3des"}, {"context": "cisco_pfc"}):
        with pytest.raises(ValidationError, match="use backend: pysnmp"):
            v3(sim.port, "gufo", **bad)
    # unset backend: pysnmp for what only it does; the v3 context selects snmpsim's data file
    payload = (await v3(sim.port, None, context="cisco_pfc").fetch())["snmprec"]
    assert payload == (await v3(sim.port, "pysnmp").fetch())["snmprec"]


@pytest.mark.parametrize("backend", BACKENDS)
async def test_wrong_community_times_out_naming_the_target(sim, backend):
    col = v2c(sim.port, "no-such-community", backend, snmp_timeout=0.3, retries=1)
    with pytest.raises(FetchError) as err:
        await col.fetch()
    assert err.value.reason == ErrorReason.TIMEOUT and f"127.0.0.1:{sim.port}" in str(err.value)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(("user", "auth_key", "priv_key"), [
    (USER, "wrong-auth-key", PRIV_KEY), (USER, AUTH_KEY, "wrong-priv-key"), ("nobody", AUTH_KEY, PRIV_KEY)])
async def test_wrong_v3_credentials_are_auth_without_leaking_them(sim, backend, user, auth_key, priv_key):
    """snmpsim answers each with a USM report (wrong digest, decryption error, unknown user):
    both transports call it "auth"."""
    col = SnmpCollector("sw1", "127.0.0.1", SnmpOptions(
        port=sim.port, version="3", user=user, auth_key=auth_key, priv_key=priv_key, backend=backend,
        snmp_timeout=0.3, retries=0))
    with pytest.raises(FetchError) as err:
        await col.fetch()
    assert err.value.reason == ErrorReason.AUTH
    assert auth_key not in str(err.value) and priv_key not in str(err.value)
    assert f"127.0.0.1:{sim.port}" in str(err.value)


class Silent:
    """A UDP socket on loopback that counts SNMP requests and never answers (a hung agent)."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.settimeout(0.05)
        self.port = self.sock.getsockname()[1]
        self.received = 0
        self.reply: bytes | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                _data, peer = self.sock.recvfrom(65535)
            except TimeoutError:
                continue
            if not _data:  # the pysnmp transport's empty probe for a closed port (not a request)
                continue
            self.received += 1
            if self.reply is not None:
                self.sock.sendto(self.reply, peer)

    def __enter__(self) -> Silent:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.sock.close()


@pytest.mark.parametrize("backend", BACKENDS)
async def test_timeout_sends_retries_plus_one_requests(backend):
    with Silent() as agent:
        with pytest.raises(FetchError) as err:
            await v2c(agent.port, "public", backend, snmp_timeout=0.2, retries=2).fetch()
        await asyncio.sleep(0.1)
    assert err.value.reason == ErrorReason.TIMEOUT
    assert f"127.0.0.1:{agent.port}" in str(err.value) and "0.2 s x 3 tries" in str(err.value)
    assert agent.received == 3


@pytest.mark.parametrize("backend", BACKENDS)
async def test_fetch_is_cancellable(backend):
    """A poll cancelled mid-request (the scheduler's deadline) stops: no retry goes out after it."""
    with Silent() as agent:
        collector = v2c(agent.port, "public", backend, snmp_timeout=0.3, retries=3)
        await collector.prepare()  # as the scheduler does before a target's first poll
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(collector.fetch(), 0.15)
        await asyncio.sleep(1.0)  # past the three retries a live request would have sent
    assert agent.received == 1


@pytest.mark.parametrize("backend", BACKENDS)
async def test_garbage_answer(backend):
    """An answer that does not decode as SNMP: both say protocol (pysnmp drops it silently; its
    transport notices the parse error count of that sender grew)."""
    with Silent() as agent:
        agent.reply = b"\x30\x03\x02\x01"
        with pytest.raises(FetchError) as err:
            await v2c(agent.port, "public", backend, snmp_timeout=0.2, retries=0).fetch()
    assert err.value.reason == ErrorReason.PROTOCOL and f"127.0.0.1:{agent.port}" in str(err.value)
    assert "malformed" in str(err.value)


@pytest.mark.parametrize("backend", BACKENDS)
async def test_closed_port_is_refused(backend):
    """Nothing listens: the kernel answers ICMP port unreachable, and both transports say so
    (connection, "refused", with the address), which tells an operator more than a timeout."""
    port = free_udp_port()
    with pytest.raises(FetchError) as err:
        await v2c(port, "public", backend, snmp_timeout=0.3, retries=1).fetch()
    assert err.value.reason == ErrorReason.CONNECTION
    assert f"127.0.0.1:{port}" in str(err.value) and f"refused (nothing listens on UDP port {port})" in str(err.value)


@pytest.mark.parametrize("backend", BACKENDS)
async def test_unknown_host(backend):
    s = Session(host="no-such-host.invalid", port=161, credentials=Credentials("2c", community="public"),
                timeout=0.3, retries=0, max_repetitions=25, backend=backend)  # type: ignore[arg-type]
    agent = open_agent(s)
    with pytest.raises(FetchError) as err:
        await agent.get([(1, 3, 6, 1, 2, 1, 1, 3, 0)])
    agent.close()
    assert err.value.reason == ErrorReason.CONNECTION and "no-such-host.invalid" in str(err.value)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(("community", "why"), [("scalars_only", "endOfMibView"), ("hidden", "noSuchObject")])
async def test_empty_views(sim, backend, community, why):
    col = v2c(sim.port, community, backend)
    for _ in range(2):  # the gufo transport's second poll runs on what the first learned
        with pytest.raises(FetchError) as err:
            await col.fetch()
        assert err.value.reason == ErrorReason.PROTOCOL and why in str(err.value)
        assert f"127.0.0.1:{sim.port}" in str(err.value)
