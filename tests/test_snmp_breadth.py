"""Breadth: public recordings of data-centre switches fabricmon has no special case for, served
by a real snmpsim agent and polled by the snmp collector (files: tests/data/INDEX.md).

For each device: the poll succeeds; the profile chosen is the one its sysObjectID/sysDescr
calls for; every interface with traffic in the recording is exported, each under its own
label; and every IF-MIB value the collector exports equals the recording's value for that
interface. The expected interface for a label is worked out here from the recording (ifName,
and the ``(ifIndex N)`` suffix the collector documents), not taken from the parser.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from fabricmon.collectors.snmp import SnmpCollector, SnmpOptions
from fabricmon.collectors.snmp.snmprec import parse_snmprec
from fabricmon.core.model import TargetSpec
from tests.conftest import PUBLIC
from tests.snmpsim_util import SnmpSim

pytestmark = pytest.mark.snmpsim

def recording(name: str) -> Path:
    """A public LibreNMS recording, from the shared public fixtures
    (``eth/Jellyfrog__librenms/tests__snmpsim__<name>.snmprec``): fetched public data enters the
    project only through ../shared, never a commit (tests/data/INDEX.md lists file and commit)."""
    full = PUBLIC / "eth" / "Jellyfrog__librenms" / f"tests__snmpsim__{name}.snmprec"
    if not full.exists():
        pytest.skip(f"public recording {name} is not in ../shared yet (tests/data/INDEX.md)")
    return full

# recording -> (profile, what must appear in the match that chose it)
EXPECTED = {
    "slxos_slx9150": ("ieee8021-pfc", "fallback"),  # Extreme SLX-OS 20.1
    "cumulus_mellanox": ("cumulus", "sysDescr"),  # Cumulus 4.2 on Mellanox: net-snmp sysObjectID
    "cumulus_edgecore-as4610-54p": ("cumulus", "sysObjectID under 1.3.6.1.4.1.40310"),  # Cumulus 3.5
    "arista_eos": ("arista", "sysObjectID under 1.3.6.1.4.1.30065"),  # DCS-7050TX-128
    "nxos_lag-mib": ("cisco", "sysObjectID under 1.3.6.1.4.1.9"),  # Nexus 9000 C9336C-FX2
    "nxos_n3k-3064pq": ("cisco", "sysObjectID under 1.3.6.1.4.1.9"),  # Nexus 3064PQ
    "junos_qfx5130-32cd-evo": ("ieee8021-pfc", "fallback"),  # Juniper QFX5130 Junos EVO
    "junos_qfx5100": ("ieee8021-pfc", "fallback"),  # Juniper QFX5100
    "dell-os10": ("ieee8021-pfc", "fallback"),  # Dell EMC OS10
    "dnos_z9100-on": ("ieee8021-pfc", "fallback"),  # Dell Networking OS 9 Z9100-ON
    "vrp_ce12804-withvrf": ("ieee8021-pfc", "fallback"),  # Huawei CloudEngine 12804
    "arubaos-cx_8360": ("ieee8021-pfc", "fallback"),  # HPE Aruba 8360
    "fs-centec_s5850-48s2q4c": ("ieee8021-pfc", "fallback"),  # FS S5850 (Centec)
    "edgecos_dcs203": ("sonic", "sysDescr"),  # Edgecore AS7326-56X running SONiC
}
IF_NAME, IF_DESCR = (1, 3, 6, 1, 2, 1, 31, 1, 1, 1, 1), (1, 3, 6, 1, 2, 1, 2, 2, 1, 2)
HC_IN, HC_OUT = (1, 3, 6, 1, 2, 1, 31, 1, 1, 1, 6), (1, 3, 6, 1, 2, 1, 31, 1, 1, 1, 10)
# IF-MIB columns -> the counter they are exported as (HC first: the profile's rule)
COLUMNS = {
    "rx_bytes": (HC_IN, (1, 3, 6, 1, 2, 1, 2, 2, 1, 10)),
    "tx_bytes": (HC_OUT, (1, 3, 6, 1, 2, 1, 2, 2, 1, 16)),
    "rx_packets": ((1, 3, 6, 1, 2, 1, 31, 1, 1, 1, 7), (1, 3, 6, 1, 2, 1, 2, 2, 1, 11)),
    "tx_packets": ((1, 3, 6, 1, 2, 1, 31, 1, 1, 1, 11), (1, 3, 6, 1, 2, 1, 2, 2, 1, 17)),
    "rx_errors": ((1, 3, 6, 1, 2, 1, 2, 2, 1, 14),),
    "tx_errors": ((1, 3, 6, 1, 2, 1, 2, 2, 1, 20),),
    "rx_discards": ((1, 3, 6, 1, 2, 1, 2, 2, 1, 13),),
    "tx_discards": ((1, 3, 6, 1, 2, 1, 2, 2, 1, 19),),
}
OPER_STATUS = (1, 3, 6, 1, 2, 1, 2, 2, 1, 8)
NUMERIC = {"2", "65", "66", "67", "70"}
SUFFIX = re.compile(r"^(?P<name>.*) \(ifIndex (?P<index>\d+)\)$")


@pytest.fixture(scope="module")
def sim():
    with SnmpSim({name: recording(name) for name in EXPECTED}) as agent:
        yield agent


def column(table: dict, prefix: tuple[int, ...]) -> dict[int, object]:
    """ifIndex -> value of one IF-MIB column, numeric values only where numbers are expected."""
    out = {}
    for oid, (tag, value) in table.items():
        if oid[: len(prefix)] == prefix and len(oid) == len(prefix) + 1:
            out[oid[-1]] = value if (tag in NUMERIC) == isinstance(value, int) else None
    return out


def text(value: object) -> str:
    return value.decode("utf-8", "backslashreplace").strip("\x00").strip() if isinstance(value, bytes) else ""


def recorded_names(table: dict) -> dict[int, str]:
    names = {i: text(v) for i, v in column(table, IF_DESCR).items() if text(v)}
    names.update({i: text(v) for i, v in column(table, IF_NAME).items() if text(v)})
    return names


def expected_index(label: str, names: dict[int, str], suffixed: set[int]) -> int:
    """The ifIndex a label stands for, from the recording's names and the documented suffix."""
    m = SUFFIX.match(label)
    if m and int(m["index"]) in names and names[int(m["index"])] == m["name"]:
        return int(m["index"])
    plain = [i for i, n in names.items() if n == label and i not in suffixed]
    assert len(plain) == 1, f"label {label!r} stands for {plain}"
    return plain[0]


@pytest.mark.parametrize("name", sorted(EXPECTED))
async def test_public_switch_recording(sim, name):
    path = recording(name)
    c = SnmpCollector(name, "127.0.0.1", SnmpOptions(port=sim.port, community=name, snmp_timeout=5))
    payload = await c.fetch()  # the poll succeeds
    result, _ = SnmpCollector.parse(payload, TargetSpec(name, "snmp"), SnmpCollector.new_state())

    profile, match = EXPECTED[name]
    assert result.target_info["profile"] == profile
    assert match in result.target_info["match"]

    recorded = parse_snmprec(path.read_text(errors="surrogateescape")).table
    names = recorded_names(recorded)
    labels = [p.port for p in result.ports]
    assert len(labels) == len(set(labels)) == len(names)  # one unique label per named interface
    suffixed = {int(m["index"]) for m in map(SUFFIX.match, labels) if m}
    index_of = {label: expected_index(label, names, suffixed) for label in labels}
    assert sorted(index_of.values()) == sorted(names)

    exported = {(s.port, s.counter): s.value for s in result.counters if not s.sub}
    assert len(exported) == len([s for s in result.counters if not s.sub])  # no (port, counter) twice
    checked = 0
    for counter, sources in COLUMNS.items():
        by_index = [column(recorded, src) for src in sources]
        for label, if_index in index_of.items():
            want = next((col[if_index] for col in by_index if col.get(if_index) is not None), None)
            if want is None:
                assert (label, counter) not in exported
                continue
            if isinstance(want, int) and want < 0:
                want &= 0xFFFFFFFF  # an Integer32 count is read as unsigned
            assert exported[(label, counter)] == want, (label, counter)
            checked += 1
    link_up = {g.port: g.value for g in result.gauges if g.name == "link_up"}
    for label, if_index in index_of.items():
        status = column(recorded, OPER_STATUS).get(if_index)
        if status is not None:
            assert link_up[label] == (1.0 if status == 1 else 0.0), label  # ifOperStatus up(1)
            checked += 1
    assert checked

    with_traffic = {i for col in (column(recorded, HC_IN), column(recorded, HC_OUT)) for i, v in col.items() if v}
    carried = {index_of[p] for (p, counter), v in exported.items() if counter in ("rx_bytes", "tx_bytes") and v}
    assert with_traffic <= carried  # no interface with traffic dropped
