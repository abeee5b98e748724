"""SNMP: lossless configuration from the IEEE 802.1Q LLDP DCBX tables (LLDP-EXT-DOT1-DCBX-MIB).

The recording ``tests/data/snmp/ieee_dcbx.snmprec`` was written by us from the MIB definitions
(see tests/data/snmp/README.md): local, admin and remote PFC enable per priority (TruthValue
rows) and the DSCP application-priority table.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from fabricmon.collectors.snmp import SnmpCollector, SnmpOptions
from fabricmon.core.model import TargetSpec
from tests.snmpsim_util import SnmpSim

DATA = Path(__file__).parent / "data" / "snmp" / "ieee_dcbx.snmprec"
DCBX = "1.3.111.2.802.1.1.13.1.5.32962.5.1"
SPEC = TargetSpec("leaf01", "snmp")


def config(result, name: str) -> dict[tuple[str, tuple], float]:
    return {(g.port, g.sub): g.value for g in result.gauges if g.name == name}


def enabled(result, name: str, port: str) -> list[int]:
    return sorted(sub[0] for (p, sub), v in config(result, name).items() if p == port and v == 1.0)


def parse(text: str):
    return SnmpCollector.parse({"snmprec": text}, SPEC, SnmpCollector.new_state())[0]


def test_local_remote_and_admin_pfc_enable_per_priority() -> None:
    r = parse(DATA.read_text())
    assert enabled(r, "pfc_enabled", "swp1") == [3]  # admin says 3 and 5: the local (operational) row wins
    assert enabled(r, "pfc_enabled", "swp2") == [3, 4]
    assert enabled(r, "pfc_enabled", "swp3") == [3]  # no local rows: the admin table fills in
    assert len([k for k in config(r, "pfc_enabled") if k[0] == "swp1"]) == 8  # disabled priorities are 0, not absent
    assert enabled(r, "pfc_peer_enabled", "swp1") == [3]
    assert enabled(r, "pfc_peer_enabled", "swp2") == [3]
    assert not any(p == "swp3" for p, _ in config(r, "pfc_peer_enabled"))  # no DCBX partner: unknown, not 0


def test_dscp_rows_only_from_the_dscp_selector() -> None:
    r = parse(DATA.read_text())
    assert config(r, "dscp_priority") == {("swp1", (26,)): 3.0, ("swp1", (48,)): 6.0, ("swp2", (26,)): 3.0}


def test_a_value_of_the_wrong_type_is_named_and_skipped() -> None:
    text = DATA.read_text().replace(f"{DCBX}.2.3.2.1.2.2.3|2|1", f"{DCBX}.2.3.2.1.2.2.3|4|true")
    r = parse(text)
    assert ("swp2", (3,)) not in config(r, "pfc_enabled")  # unknown, never guessed (swp2 has no admin row)
    assert any("lldpXdot1dcbxLocPFCEnableTable" in w and "non-numeric" in w for w in r.warnings)
    assert enabled(r, "pfc_enabled", "swp2") == [4]  # the other rows are kept


def test_a_truthvalue_outside_the_mib_is_not_read_as_a_setting() -> None:
    r = parse(DATA.read_text().replace(f"{DCBX}.3.3.2.1.2.0.2.1.1.3|2|1", f"{DCBX}.3.3.2.1.2.0.2.1.1.3|2|7"))
    assert ("swp2", (3,)) not in config(r, "pfc_peer_enabled")
    assert ("swp2", (4,)) in config(r, "pfc_peer_enabled")


@pytest.mark.snmpsim
async def test_the_walk_plan_fetches_the_dcbx_tables_from_a_live_agent() -> None:
    with SnmpSim({"dcbx": DATA}) as sim:
        c = SnmpCollector("leaf01", "127.0.0.1", SnmpOptions(port=sim.port, community="dcbx"))
        payload = await c.fetch()
    live = SnmpCollector.parse(payload, SPEC, SnmpCollector.new_state())[0]
    offline = parse(DATA.read_text())
    for name in ("pfc_enabled", "pfc_peer_enabled", "dscp_priority"):
        assert config(live, name) == config(offline, name)
    assert enabled(live, "pfc_enabled", "swp2") == [3, 4]
