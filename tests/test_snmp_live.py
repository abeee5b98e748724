"""The snmp collector against a real snmpsim agent on 127.0.0.1 (one agent for the module).

Timeouts, cancellation and a closed port, for both transports: tests/test_snmp_backends.py."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from fabricmon.collectors.base import FetchError
from fabricmon.collectors.snmp import SnmpCollector, SnmpOptions
from fabricmon.collectors.snmp.snmprec import parse_snmprec
from fabricmon.core.model import TargetSpec
from tests.conftest import PUBLIC
from tests.snmpsim_util import SnmpSim

pytestmark = pytest.mark.snmpsim

DATA = Path(__file__).parent / "data" / "snmp"
RECORDED = {
    name: PUBLIC / "eth" / "Jellyfrog__librenms" / f"tests__snmpsim__{name}.snmprec"
    for name in ("arista_eos_7280r", "cumulus_bgp", "dell-sonic", "nxos_n9k-c93180yc-fx3")
}
SYNTHESIZED = {p.stem: p for p in sorted(DATA.glob("*.snmprec"))}
# Time behaviour through snmpsim's numeric variation module: uptime and a Counter64 grow,
# a Counter32 starts 295 below 2^32 at 1000/s, so it has wrapped before the first poll.
TIMEVAR = """1.3.6.1.2.1.1.2.0|6|1.3.6.1.4.1.99999
1.3.6.1.2.1.1.3.0|67:numeric|rate=100,initial=1000
1.3.6.1.2.1.2.2.1.14.1|65:numeric|wrap=1,max=4294967295,initial=4294967000,rate=1000,deviation=0
1.3.6.1.2.1.31.1.1.1.1.1|4|swp1
1.3.6.1.2.1.31.1.1.1.6.1|70:numeric|rate=100000,initial=1000,deviation=0
"""
V3 = {"user": "fabmon", "auth_key": "auth-secret-1", "priv_key": "priv-secret-1"}


@pytest.fixture(scope="module")
def sim():
    data: dict[str, str | Path] = {k: v for k, v in RECORDED.items() if v.exists()}
    data.update(SYNTHESIZED)
    data["timevar"] = TIMEVAR
    with SnmpSim(data, v3_user=V3["user"], v3_auth_key=V3["auth_key"], v3_priv_key=V3["priv_key"]) as agent:
        yield agent


def collector(sim: SnmpSim, community: str, **opts) -> SnmpCollector:
    return SnmpCollector("sw1", "127.0.0.1", SnmpOptions(port=sim.port, community=community, **opts))


def facts(result) -> tuple:
    return (sorted((s.port, s.counter, s.sub, s.value, s.bits, s.scale) for s in result.counters),
            sorted((g.port, g.name, g.sub, g.value) for g in result.gauges),
            result.links, result.clocks, result.warnings)


@pytest.mark.parametrize("community", [*RECORDED, *SYNTHESIZED])
async def test_fetch_reads_what_the_recording_holds(sim, community):
    path = RECORDED.get(community) or SYNTHESIZED[community]
    if not path.exists():
        pytest.skip(f"public fixture not available: {path}")
    payload = await collector(sim, community).fetch()
    assert list(payload) == ["snmprec"]
    got = parse_snmprec(payload["snmprec"])
    assert got.warnings == []
    oids = list(got.table)
    assert oids == sorted(oids)  # OID order, as snmpsim needs to serve it again
    # every fetched varbind is in the recording with the same type and value
    source = parse_snmprec(path.read_text()).table
    assert {o: got.table[o] for o in oids} == {o: source[o] for o in oids}
    spec = TargetSpec("sw1", "snmp")
    live = SnmpCollector.parse(payload, spec, SnmpCollector.new_state())[0]
    offline = SnmpCollector.parse({"snmprec": path.read_text()}, spec, SnmpCollector.new_state())[0]
    assert facts(live) == facts(offline)  # the walk plan fetched everything the profile reads
    assert live.counters


async def test_snmpv3_sha_aes(sim):
    c = SnmpCollector("leaf01", "127.0.0.1", SnmpOptions(
        port=sim.port, version="3", user=V3["user"], auth_key=V3["auth_key"], priv_key=V3["priv_key"],
        context="cisco_pfc"))  # snmpsim picks the data file by v3 context name
    payload = await c.fetch()
    result = SnmpCollector.parse(payload, c.spec(), SnmpCollector.new_state())[0]
    assert {(s.port, s.sub): s.value for s in result.counters if s.counter == "pfc_watchdog_storms"}[("Ethernet1/1", (3,))] == 2


async def test_snmpv3_wrong_key_fails_without_leaking_it(sim, monkeypatch):
    monkeypatch.setenv("FM_TEST_PRIV", "not-the-key-xx")
    c = SnmpCollector("leaf01", "127.0.0.1", SnmpOptions(
        port=sim.port, version="3", user=V3["user"], auth_key=V3["auth_key"], priv_key_env="FM_TEST_PRIV",
        context="cisco_pfc", snmp_timeout=0.5, retries=0))
    with pytest.raises(FetchError) as err:
        await c.fetch()
    assert "not-the-key" not in str(err.value) and V3["auth_key"] not in str(err.value)


async def test_counters_move_and_wrap_between_polls(sim):
    c = collector(sim, "timevar")
    spec = TargetSpec("sw1", "snmp")
    first = SnmpCollector.parse(await c.fetch(), spec, SnmpCollector.new_state())[0]
    await asyncio.sleep(1.1)
    second = SnmpCollector.parse(await c.fetch(), spec, SnmpCollector.new_state())[0]
    a = {s.counter: s for s in first.counters}
    b = {s.counter: s for s in second.counters}
    assert a["rx_errors"].bits == 32 and a["rx_errors"].value < 4294967000  # already wrapped
    assert 0 < (b["rx_errors"].value - a["rx_errors"].value) % 2**32 < 2**31
    assert a["rx_bytes"].bits == 64 and b["rx_bytes"].value > a["rx_bytes"].value
    assert second.clocks["sw1"] > first.clocks["sw1"]


async def test_secret_from_file(sim, tmp_path):
    secret = tmp_path / "community"
    secret.write_text("ieee_pfc\n")
    c = SnmpCollector("sw1", "127.0.0.1", SnmpOptions(port=sim.port, community_file=str(secret)))
    assert "1.3.111.2.802.1.1.21.1.1.1.3.2|65|24690" in (await c.fetch())["snmprec"]
    missing = SnmpCollector("sw1", "127.0.0.1", SnmpOptions(port=sim.port, community_file=str(tmp_path / "nope")))
    with pytest.raises(FetchError, match="community_file") as err:
        await missing.fetch()
    assert err.value.reason == "auth"
