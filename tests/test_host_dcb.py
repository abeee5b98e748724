"""Host lossless configuration (collectors/host/dcb.py): RoCE ECN sysfs files, a fake ``dcb`` and
``mlnx_qos`` on PATH (tests/fakebin, printing tests/data/host/qos/*.out), hostile outputs.

The ECN files are the public prometheus/procfs fixture's ``/sys/class/net/eth0/ecn`` tree; the
tool outputs are written by us in the formats of iproute2 dcb/dcb_pfc.c, dcb/dcb_app.c and
published ``mlnx_qos -i`` outputs (tests/data/host/README.md).
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fabricmon.collectors.host import HostCollector, HostOptions
from fabricmon.collectors.host.dcb import dscp_value, parse_dcb_app, parse_dcb_pfc, parse_mlnx_qos
from fabricmon.core.model import ParseResult, TargetSpec
from tests.conftest import public_fixture

ECN_TTAR = "eth/prometheus__procfs/testdata__fixtures.ttar.net-eth0-ecn-excerpt"
FAKEBIN = Path(__file__).resolve().parent / "fakebin"
QOS = Path(__file__).resolve().parent / "data" / "host" / "qos"
PORT = "mlx5_0/1"


def ttar_files(text: str) -> dict[str, str]:
    """``Path:`` / ``Lines:`` / content records of a ttar archive -> {path: content}."""
    out: dict[str, str] = {}
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("Path: ") and i + 2 < len(lines) and lines[i + 1].startswith("Lines: "):
            n = int(lines[i + 1].split()[1])
            out[line[len("Path: "):]] = "\n".join(lines[i + 2:i + 2 + n]) + "\n"
    return out


def build_host(root: Path) -> Path:
    """A RoCE mlx5 port whose netdev is eth0, with the public ECN tree under class/net/eth0."""
    sysfs = root / "sys"
    port = sysfs / "class/infiniband/mlx5_0/ports/1"
    for rel, text in {"state": "4: ACTIVE", "link_layer": "Ethernet", "rate": "100 Gb/sec (4X EDR)",
                      "gid_attrs/ndevs/0": "eth0", "counters/port_xmit_data": "5", "counters/port_rcv_data": "7"}.items():
        (port / rel).parent.mkdir(parents=True, exist_ok=True)
        (port / rel).write_text(text + "\n")
    for path, text in ttar_files(public_fixture(ECN_TTAR).read_text()).items():
        dest = root / path.removeprefix("fixtures/")
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_text(text)
    return sysfs


def collector(sysfs: Path, **opts) -> HostCollector:
    return HostCollector("gpu-node-07", "local", HostOptions(sysfs_root=str(sysfs), ethtool=False, **opts))


async def poll(c: HostCollector) -> tuple[dict, ParseResult]:
    payload = await c.fetch()
    return payload, HostCollector.parse(payload, c.spec(), HostCollector.new_state())[0]


def config(res: ParseResult, name: str) -> dict[tuple, float]:
    return {g.sub: g.value for g in res.gauges if g.name == name and g.port == PORT}


@pytest.fixture
def fake_tools(monkeypatch, tmp_path):
    qos = tmp_path / "qos"
    qos.mkdir()
    for f in QOS.iterdir():
        (qos / f.name).write_text(f.read_text())
    monkeypatch.setenv("PATH", f"{FAKEBIN}:/usr/bin:/bin")
    monkeypatch.setenv("FAKE_QOS_DIR", str(qos))
    monkeypatch.setenv("FAKE_QOS_LOG", str(tmp_path / "calls.jsonl"))
    return qos


async def test_ecn_files_and_tools_on_path(tmp_path, fake_tools):
    payload, res = await poll(collector(build_host(tmp_path)))
    assert payload["files"]["net/eth0/ecn/roce_np/enable/3"].strip() == "1"
    assert set(payload["dcb"]["eth0"]) == {"pfc", "app", "mlnx_qos"}
    ecn = config(res, "nic_ecn_enabled")
    # procfs fixture: roce_np enable 0..7 = 1 1 0 1 1 0 1 1, roce_rp = 1 1 0 1 1 0 1 0
    assert [int(ecn[(p, "np")]) for p in range(8)] == [1, 1, 0, 1, 1, 0, 1, 1]
    assert [int(ecn[(p, "rp")]) for p in range(8)] == [1, 1, 0, 1, 1, 0, 1, 0]
    assert sorted(p for (p,), v in config(res, "pfc_enabled").items() if v) == [3]
    assert config(res, "dscp_priority") == {(26,): 3.0, (48,): 6.0}  # AF31 = 26, CS6 = 48
    assert config(res, "qos_trust_dscp") == {(): 1.0}
    assert res.warnings == []


async def test_without_mlnx_qos_dcb_alone_gives_the_settings(tmp_path, fake_tools, caplog):
    (fake_tools / "mlnx_qos-eth0.out").unlink()
    with caplog.at_level(logging.INFO, logger="fabricmon.collectors.host.fetch"):
        payload, res = await poll(collector(build_host(tmp_path), mlnx_qos_path=str(tmp_path / "absent" / "mlnx_qos")))
    assert "mlnx_qos" not in payload["dcb"]["eth0"]
    assert config(res, "qos_trust_dscp") == {(): 1.0} and config(res, "dscp_priority")[(26,)] == 3.0
    missing = [r for r in caplog.records if "mlnx_qos" in r.getMessage()]
    assert len(missing) == 1 and missing[0].levelno == logging.INFO  # optional tool: not a warning


async def test_no_tools_and_no_ecn_dir_means_unknown(tmp_path, monkeypatch):
    sysfs = build_host(tmp_path)
    for f in sorted((sysfs / "class/net").rglob("*"), reverse=True):
        f.unlink() if f.is_file() else f.rmdir()
    payload, res = await poll(collector(sysfs, dcb=False))
    assert "dcb" not in payload  # the payload format is unchanged when nothing was read
    assert not [g for g in res.gauges if g.name in ("nic_ecn_enabled", "pfc_enabled", "qos_trust_dscp")]


async def test_hostile_outputs_are_named_and_skipped(tmp_path, fake_tools):
    (fake_tools / "dcb-pfc-eth0.out").write_text("prio-pfc 0:off 1:maybe\n")
    (fake_tools / "dcb-app-eth0.out").write_text("Segmentation fault\n")
    (fake_tools / "mlnx_qos-eth0.out").write_text("\x00\xff garbage\n")
    sysfs = build_host(tmp_path)
    (sysfs / "class/net/eth0/ecn/roce_np/enable/3").write_text("yes\n")
    _payload, res = await poll(collector(sysfs))
    warnings = "\n".join(res.warnings)
    assert "dcb pfc show dev eth0: no prio-pfc map of priorities 0-7 in the output, skipped" in warnings
    assert "dcb app show dev eth0: not dcb app output, skipped" in warnings
    assert "mlnx_qos -i eth0: no trust state, PFC table or dscp2prio mapping in the output, skipped" in warnings
    assert "/sys/class/net/eth0/ecn/roce_np/enable/3: not 0 or 1 ('yes'), skipped" in warnings
    assert not config(res, "pfc_enabled") and not config(res, "dscp_priority")
    assert (3, "np") not in config(res, "nic_ecn_enabled") and (4, "np") in config(res, "nic_ecn_enabled")


@pytest.mark.parametrize("dcb", [[], "text", {"eth0": "x"}, {"eth0": {"pfc": 5, "app": None}}])
def test_hostile_payload_shapes_never_raise(dcb):
    res = HostCollector.parse({"files": {}, "ethtool": {}, "dcb": dcb}, TargetSpec("h", "host"), HostCollector.new_state())[0]
    assert not res.gauges


def test_parsers_on_the_tool_formats():
    assert parse_dcb_pfc("pfc-cap 8 macsec-bypass off delay 0\nprio-pfc 0:off 1:off 2:off 3:on 4:on 5:off 6:off 7:off\n") == \
        {0: False, 1: False, 2: False, 3: True, 4: True, 5: False, 6: False, 7: False}
    assert parse_dcb_pfc("prio-pfc 0:off 3:on") is None  # not all eight: not read
    assert parse_dcb_app("") == ({}, [])  # no app entries: an empty table prints nothing
    assert parse_dcb_app("default-prio 0\ndscp-prio 26:3 EF:5 AF41:4\nstream-port-prio 4791:3\n") == ({26: 3, 46: 5, 34: 4}, [])
    assert parse_dcb_app("dscp-prio MYCLASS:3 10:1") == ({10: 1}, ["MYCLASS"])  # a local rt_dsfield name
    assert [dscp_value(k) for k in ("CS0", "cs7", "AF11", "AF43", "EF", "LE", "63", "64", "AF51")] == [0, 56, 10, 38, 46, 1, 63, None, None]
    trust, pfc, dscp = parse_mlnx_qos((QOS / "mlnx_qos-eth0.out").read_text())
    assert trust is True and pfc is not None and [p for p, on in pfc.items() if on] == [3] and dscp[26] == 3 and dscp[0] == 0
    assert parse_mlnx_qos("Priority trust state: pcp\n") == (False, None, {})


@given(st.text(alphabet=st.sampled_from("prio-pfc dscp:AF31CSE0123456789,\n\t enabled trust state: mlnx"), max_size=200) | st.text(max_size=200))
def test_tool_parsers_never_raise(text):
    pfc = parse_dcb_pfc(text)
    assert pfc is None or set(pfc) == set(range(8))
    app = parse_dcb_app(text)
    assert app is None or all(0 <= d <= 63 and 0 <= p <= 7 for d, p in app[0].items())
    trust, mlnx_pfc, dscp = parse_mlnx_qos(text)
    assert trust in (None, True, False) and (mlnx_pfc is None or set(mlnx_pfc) == set(range(8)))
    assert all(0 <= d <= 63 for d in dscp)
