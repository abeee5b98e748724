"""ibnetdiscover ``devid=`` lines name each node's ASIC, so the XmitWait tick of its generation
applies (NVIDIA ibdiagnet manual, "Congestion Assessment on InfiniBand Links": 8 bytes per
tick on Quantum, 32 bytes per lane on Switch-IB 2 and older). Real public files only."""

from __future__ import annotations

from fabricmon.agent.detector.analyses.ib_wait import TICK_BY_DEVID, IbParams, devid, tick_s
from fabricmon.agent.store import CounterStore
from fabricmon.collectors.perfquery.parse import PerfqueryState, parse_ibnetdiscover, parse_payload
from fabricmon.core.model import Gauge
from tests.conftest import public_fixture

QM9700 = "ib/gary-minghuili__infiniband-exporter/data__ibdiagnet2__ibdiagnet2.ibnetdiscover"
SELENE = "ib/Mellanox__ufm_sdk_3.0/topo__selene.compute.txt"
SMALL = "ib/Mellanox__ufm_sdk_3.0/topo__small_topo_file"


def by_desc(path: str) -> dict[str, str]:
    topo = parse_ibnetdiscover(public_fixture(path).read_text())
    return {n.description: n.devid for n in topo.nodes.values()}


def test_quantum2_switches_carry_their_devid():
    got = by_desc(QM9700)
    assert got["MF0;ib-switch-sequoia:MQM9700/U1"] == "0xd2f2"
    assert {v for k, v in got.items() if k.startswith("Quantum-2")} == {"0xd2f2"}


def test_each_block_gets_its_own_devid_and_hcas_too():
    got = by_desc(SMALL)
    assert got["MF0;r-ufm-sw226:SX6036/U1"] == "0xc738"  # SwitchX
    assert got["Mellanox Technologies Aggregation Node"] == "0xcf09"  # a CA block: its own devid, not the switch's
    selene = by_desc(SELENE)
    assert selene["MF0;MLG01-02:MQM8700/U1"] == "0xd2f0"  # Quantum


def test_devid_reaches_device_info_and_picks_the_generation_tick():
    text = public_fixture(SMALL).read_text()
    res, _ = parse_payload({"ibnetdiscover": text, "perfquery": []}, PerfqueryState())
    models = {d.description: d.model for d in res.devices}
    assert models["MF0;r-ufm-sw226:SX6036/U1"] == "0xc738"
    assert TICK_BY_DEVID[devid(models["MF0;r-ufm-sw226:SX6036/U1"])] == (32, True)
    # A 4x FDR port (56 Gb/s, 4 lanes): 32 bytes of one lane's time = 32 / (7e9 / 4) s.
    store = CounterStore()
    store.update([], 1.0, gauges=[Gauge("sw", "1", "link_speed_bytes", 7e9), Gauge("sw", "1", "link_width_lanes", 4.0)])
    entry = store.ports[("sw", "1")]
    assert tick_s(entry, IbParams(), "0xc738") == 32 / (7e9 / 4)
    assert tick_s(entry, IbParams(), "0xd2f2") == 8 / 7e9
    assert tick_s(entry, IbParams(), "") == 64 / (7e9 * 8)  # unknown device: the 8-byte default


def test_a_header_without_devid_leaves_it_empty_and_bad_values_are_ignored():
    text = ('vendid=0x2c9\ndevid=0xZZ\nswitchguid=0x1\nSwitch 2 "S-0000000000000001" # "sw-a" enhanced port 0 lid 1 lmc 0\n'
            '[1] "S-0000000000000002"[1] # "sw-b" lid 2 4xEDR\n\n'
            'Switch 2 "S-0000000000000002" # "sw-b" enhanced port 0 lid 2 lmc 0\n'
            '[1] "S-0000000000000001"[1] # "sw-a" lid 1 4xEDR\n')
    got = {n.description: n.devid for n in parse_ibnetdiscover(text).nodes.values()}
    assert got == {"sw-a": "", "sw-b": ""}


def test_ufm_model_names_map_to_the_same_generations():
    assert devid("MQM9700") == 0xD2F2 and devid("MQM8700") == 0xD2F0 and devid("SX6036") == 0xC738
    assert devid("SN4700") is None and devid("") is None
