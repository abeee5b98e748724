"""host collector: fake /sys trees built from the public flat listings, a fake ethtool on PATH."""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import sys
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from fabricmon import collectors
from fabricmon.collectors.base import FetchError, ParseError
from fabricmon.collectors.host import HostCollector, HostOptions
from fabricmon.collectors.host.parse import HostState, parse_ethtool, parse_payload, parse_rate
from fabricmon.core.model import ParseResult, TargetSpec
from tests.conftest import public_fixture

DATA = Path(__file__).resolve().parent / "data" / "host"
NODE_EXPORTER_FLAT = "ib/prometheus__node_exporter/collector__fixtures__sys.ttar.infiniband-excerpt.flat.txt"
PROCFS_FLAT = "ib/prometheus__procfs/testdata__fixtures.ttar.infiniband-excerpt.flat.txt"


def build_tree(root: Path, flat: Path) -> Path:
    """Write every ``path = value`` line of a flat listing as a file under ``root``; returns the
    sysfs root (``root/sys``). Leading ``fixtures/`` is dropped; a literal ``\\n`` is a newline."""
    for line in flat.read_text().splitlines():
        path, sep, value = line.partition(" = ")
        if not sep or "sys/" not in path:
            continue
        dest = root / path[path.index("sys/"):]
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_text(value.replace("\\n", "\n") + "\n")
    return root / "sys"


def add_roce_device(sysfs: Path, dev: str = "mlx5_1", netdev: str = "eth2", out_of_buffer: int = 0) -> None:
    """A RoCE mlx5 port next to the fixture devices: Ethernet link layer, DCQCN hw_counters, a netdev."""
    port = sysfs / "class" / "infiniband" / dev / "ports" / "1"
    files = {
        "state": "4: ACTIVE", "phys_state": "5: LinkUp", "rate": "100 Gb/sec (4X EDR)", "link_layer": "Ethernet",
        "gid_attrs/ndevs/0": netdev,
        "counters/port_xmit_data": "250000000000", "counters/port_rcv_data": "125000000000",
        "counters/unicast_xmit_packets": "1", "counters/port_xmit_wait": "0", "counters/link_downed": "0",
        "hw_counters/np_ecn_marked_roce_packets": "5531", "hw_counters/np_cnp_sent": "5400",
        "hw_counters/rp_cnp_handled": "812", "hw_counters/rp_cnp_ignored": "0",
        "hw_counters/out_of_buffer": str(out_of_buffer), "hw_counters/lifespan": "10",
        "hw_counters/duplicate_request": "7",
    }
    for rel, text in files.items():
        (port / rel).parent.mkdir(parents=True, exist_ok=True)
        (port / rel).write_text(text + "\n")
    (sysfs / "class" / "infiniband" / dev / "node_guid").write_text("b859:9f03:00ab:cdef\n")


def fake_ethtool(bindir: Path, *, sleep: float = 0.0, pidfile: Path | None = None) -> Path:
    """An ``ethtool`` on PATH printing the recorded-style sample for eth2, failing for others."""
    bindir.mkdir(parents=True, exist_ok=True)
    exe = bindir / "ethtool"
    exe.write_text(
        f"#!{sys.executable}\n"
        "import os, sys, time\n"
        f"pidfile = {str(pidfile) if pidfile else ''!r}\n"
        "if pidfile:\n"
        "    open(pidfile, 'w').write(str(os.getpid()))\n"
        f"time.sleep({sleep})\n"
        "if sys.argv[1:] == ['-S', 'eth2']:\n"
        f"    sys.stdout.write(open({str(DATA / 'ethtool-S-mlx5-roce.txt')!r}).read())\n"
        "    sys.exit(0)\n"
        "sys.stderr.write('no stats available\\n')\n"
        "sys.exit(94)\n"
    )
    exe.chmod(0o755)
    return exe


def collector(sysfs: Path, **opts) -> HostCollector:
    """dcb off unless a test asks: the machine's own iproute2 ``dcb`` must never run (tests/test_host_dcb.py
    runs the fake one in tests/fakebin)."""
    return HostCollector("gpu-node-07", "local", HostOptions(sysfs_root=str(sysfs), **{"dcb": False, **opts}))


def by_key(result: ParseResult) -> dict[tuple[str, str, tuple], object]:
    return {(s.port, s.counter, s.sub): s for s in result.counters}


def gauges(result: ParseResult) -> dict[tuple[str, str], float]:
    return {(g.port, g.name): g.value for g in result.gauges}


async def poll(c: HostCollector) -> tuple[dict, ParseResult]:
    payload = await c.fetch()
    return payload, HostCollector.parse(payload, c.spec(), HostCollector.new_state())[0]


async def test_node_exporter_tree(tmp_path):
    sysfs = build_tree(tmp_path, public_fixture(NODE_EXPORTER_FLAT))
    payload, res = await poll(collector(sysfs, ethtool=False))
    assert payload["files"]["infiniband/mlx4_0/ports/1/counters/port_rcv_data"].strip() == "4631917"
    s = by_key(res)
    # node_exporter e2e: port_data_received_bytes{mlx4_0,1} = 4631917 x 4 = 1.8527668e+07
    rx = s[("mlx4_0/1", "rx_bytes", ())]
    assert rx.value * rx.scale == 18527668 and rx.bits == 64 and not rx.saturating
    tx = s[("mlx4_0/1", "tx_bytes", ())]
    assert tx.value * tx.scale == 14933760  # 1.493376e+07
    assert s[("mlx4_0/2", "rx_bytes", ())].value == 0  # counters/ wins over counters_ext when it has the ext group
    wait = s[("mlx4_0/1", "xmit_wait", ())]
    assert (wait.value, wait.bits, wait.saturating) == (4294967295, 32, True)  # stuck at the cap, not busy
    assert s[("mlx4_0/1", "tx_discards", ())].value == 5
    assert s[("mlx4_0/1", "rx_packets", ())].value == 6825908347
    assert all(x.device == "gpu-node-07" for x in res.counters)
    assert not any(p.startswith("i40iw0") for p, _c, _s in s)  # iWARP: every counter N/A
    assert any("i40iw0/1: counters N/A (no PMA)" in w for w in res.warnings)
    g = gauges(res)
    assert g[("i40iw0/1", "link_speed_bytes")] == 1.25e9  # "10 Gb/sec (4X)": no speed name, the number given
    assert g[("mlx4_0/1", "link_speed_bytes")] == 4e9  # 4X QDR effective 8 Gb/s per lane (node_exporter: 5e9 raw)
    assert g[("mlx4_0/1", "link_width_lanes")] == 4 and g[("mlx4_0/2", "link_up")] == 1.0
    assert [d.kind for d in res.devices] == ["host"]


async def test_procfs_tree_hw_counters_and_widths(tmp_path):
    sysfs = build_tree(tmp_path, public_fixture(PROCFS_FLAT))
    _payload, res = await poll(collector(sysfs, ethtool=False, hostname="node-a"))
    s = by_key(res)
    assert s[("mlx5_0/1", "local_ack_timeout_err", ())].value == 131
    assert s[("mlx5_0/1", "roce_adp_retrans", ())].value == 99
    assert s[("mlx5_0/1", "out_of_sequence", ())].value == 1
    assert s[("mlx5_0/1", "packet_seq_err", ())].value == 1
    assert s[("mlx5_0/1", "rx_out_of_buffer", ())].value == 0
    assert not any(c in ("duplicate_request", "lifespan") for _p, c, _s in s)  # unmapped hw_counters are ignored
    assert s[("mlx5_0/1", "tx_bytes", ())].value * 4 == 2880761508848 * 4
    # procfs mlx4_0 has no unicast_* files (basic table) but a data value above 2^32: 64-bit.
    assert s[("mlx4_0/1", "rx_bytes", ())].bits == 64
    assert s[("hfi1_0/1", "tx_bytes", ())].bits == 64
    assert gauges(res)[("mlx4_0/2", "link_speed_bytes")] == 4e9  # "InfiniBand\n" link layer still read
    assert gauges(res)[("mlx5_0/1", "link_width_lanes")] == 1
    ports = {p.port: p for p in res.ports}
    assert ports["mlx5_0/1"].guid == ""  # the fixture's node_guid "…d23bEOF" is not a GUID
    assert all(x.device == "node-a" for x in [*res.counters, *res.gauges])


async def test_roce_port_with_ethtool_on_path(tmp_path, monkeypatch):
    sysfs = build_tree(tmp_path, public_fixture(PROCFS_FLAT))
    add_roce_device(sysfs)
    fake_ethtool(tmp_path / "bin")
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    payload, res = await poll(collector(sysfs))
    assert set(payload["ethtool"]) == {"eth2"}  # only the Ethernet port of an mlx5 device
    s = by_key(res)
    port = "mlx5_1/1"
    assert s[(port, "pfc_rx_pause_frames", (3,))].value == 48211
    dur = s[(port, "pfc_rx_pause_seconds", (3,))]
    assert dur.value * dur.scale == pytest.approx(1.8432)  # 1843200 µs
    assert s[(port, "pfc_tx_pause_frames", (3,))].value == 1290
    assert s[(port, "pfc_rx_pause_transitions", (3,))].value == 24105
    assert s[(port, "pfc_rx_pause_frames", (0,))].value == 0
    assert s[(port, "tx_pause_storm_error_events", ())].value == 1
    assert s[(port, "tx_pause_storm_warning_events", ())].value == 3
    assert s[(port, "rx_discards_phy", ())].value == 4
    assert s[(port, "rx_out_of_buffer", ())].value == 0  # hw_counters out_of_buffer is read first
    assert s[(port, "np_ecn_marked", ())].value == 5531
    assert s[(port, "rp_cnp_handled", ())].value == 812
    ld = s[(port, "link_downed", ())]
    assert (ld.value, ld.bits) == (0, 8)  # sysfs LinkDowned wins over link_down_events_phy
    assert gauges(res)[(port, "link_speed_bytes")] == 100e9 / 8  # Ethernet: the number given
    assert {p.port: p.alias for p in res.ports}[port] == "eth2"
    assert {p.port: p.guid for p in res.ports}[port] == "0xb8599f0300abcdef"


async def test_unreadable_file_is_left_out_and_logged_once(tmp_path, caplog):
    sysfs = build_tree(tmp_path, public_fixture(PROCFS_FLAT))
    bad = sysfs / "class/infiniband/mlx5_0/ports/1/counters/symbol_error"
    bad.unlink()
    bad.mkdir()  # reading a directory fails (EISDIR) even as root, like EACCES/EINVAL would
    c = collector(sysfs, ethtool=False)
    with caplog.at_level(logging.WARNING, logger="fabricmon.collectors.host.fetch"):
        payload, res = await poll(c)
        await c.fetch()
    assert "infiniband/mlx5_0/ports/1/counters/symbol_error" not in payload["files"]
    assert ("mlx5_0/1", "link_downed", ()) in by_key(res)
    lines = [r.getMessage() for r in caplog.records if "symbol_error" in r.getMessage()]
    assert len(lines) == 1 and "left out of the poll" in lines[0]


async def test_ethtool_timeout_and_missing_binary_do_not_fail_the_poll(tmp_path):
    sysfs = build_tree(tmp_path, public_fixture(PROCFS_FLAT))
    add_roce_device(sysfs)
    exe = fake_ethtool(tmp_path / "bin", sleep=30)
    payload, res = await poll(collector(sysfs, ethtool_path=str(exe), ethtool_timeout=0.3))
    assert payload["ethtool"] == {} and ("mlx5_1/1", "np_cnp_sent", ()) in by_key(res)
    payload, _ = await poll(collector(sysfs, ethtool_path=str(tmp_path / "nope" / "ethtool")))
    assert payload["ethtool"] == {}


async def test_cancelled_poll_kills_ethtool(tmp_path):
    sysfs = build_tree(tmp_path, public_fixture(PROCFS_FLAT))
    add_roce_device(sysfs)
    pidfile = tmp_path / "pid"
    exe = fake_ethtool(tmp_path / "bin", sleep=60, pidfile=pidfile)
    task = asyncio.create_task(collector(sysfs, ethtool_path=str(exe), ethtool_timeout=120).fetch())
    for _ in range(200):
        if pidfile.exists() and pidfile.read_text():
            break
        await asyncio.sleep(0.02)
    pid = int(pidfile.read_text())
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        await asyncio.sleep(0.05)
    else:
        pytest.fail("ethtool child survived the cancelled poll")


async def test_no_infiniband_dir_is_a_clear_error(tmp_path):
    with pytest.raises(FetchError, match="class/infiniband does not exist"):
        await collector(tmp_path).fetch()


def test_registry_and_options():
    assert collectors.get("host") is HostCollector
    with pytest.raises(ValidationError):
        HostOptions(ethtool_timeout=0)
    with pytest.raises(ValidationError):
        HostOptions(bogus=1)
    c = HostCollector("n1", "local", HostOptions(hostname="gpu01"))
    assert c.spec().options == {"hostname": "gpu01"}


def test_parse_helpers():
    assert parse_rate("100 Gb/sec (4X EDR)", "InfiniBand") == (12.5e9, 4)
    assert parse_rate("200 Gb/sec (4X HDR)", "InfiniBand") == (25e9, 4)
    assert parse_rate("40 Gb/sec (4X QDR)", "Ethernet") == (5e9, 4)
    assert parse_rate("garbage", "InfiniBand") == (None, None)
    assert parse_ethtool("NIC statistics:\n     rx_prio3_pause: 12\n  weird line\n  x: -1\n") == {"rx_prio3_pause": 12}


def test_32bit_basic_table_saturates_and_ext_dir_is_preferred():
    spec = TargetSpec("h", "host")
    base = "infiniband/mlx4_0/ports/1/"
    basic = {base + "counters/port_xmit_data": "4294967295\n", base + "counters/port_rcv_data": "12\n"}
    res, state = parse_payload({"files": basic, "ethtool": {}}, spec, HostState())
    s = by_key(res)
    assert (s[("mlx4_0/1", "tx_bytes", ())].bits, s[("mlx4_0/1", "tx_bytes", ())].saturating) == (32, True)
    with_ext = {**basic, base + "counters_ext/port_xmit_data_64": "98765432100\n"}
    res, state = parse_payload({"files": with_ext, "ethtool": {}}, spec, state)
    s = by_key(res)
    assert (s[("mlx4_0/1", "tx_bytes", ())].value, s[("mlx4_0/1", "tx_bytes", ())].bits) == (98765432100, 64)
    # No unicast_* files but a value above 2^32 (the kernel's "noietf" table): 64-bit, and sticky,
    # so a small value after a counter reset does not flip the width back.
    big = {base + "counters/port_xmit_data": "98765432100\n"}
    res, state = parse_payload({"files": big, "ethtool": {}}, spec, state)
    assert by_key(res)[("mlx4_0/1", "tx_bytes", ())].bits == 64
    assert state.wide_ports == {("mlx4_0", "1")}
    res, _ = parse_payload({"files": {base + "counters/port_xmit_data": "5\n"}, "ethtool": {}}, spec, state)
    s = by_key(res)
    assert s[("mlx4_0/1", "tx_bytes", ())].bits == 64


def test_unmapped_ethtool_and_bad_values_warn():
    res = parse_payload({"files": {"infiniband/x/ports/1/counters/symbol_error": "abc"},
                         "ethtool": {"ens1f0": "NIC statistics:\n     rx_prio5_pause: 9\n", "ens1f1": "nothing"}},
                        TargetSpec("h", "host"), HostState())[0]
    assert by_key(res)[("ens1f0", "pfc_rx_pause_frames", (5,))].value == 9
    text = "\n".join(res.warnings)
    assert "ens1f0: no RDMA port maps" in text and "ens1f1: no known counters" in text
    assert "x/1: counters not a number ('abc'): symbol_error skipped" in text


@pytest.mark.parametrize("payload", [[], {"files": []}, {"files": {"a": 1}}, {"ethtool": {"a": None}}])
def test_bad_payloads_raise_parse_error(payload):
    with pytest.raises(ParseError):
        parse_payload(payload, TargetSpec("h", "host"), HostState())


_paths = st.sampled_from([
    "infiniband/mlx5_0/ports/1/counters/port_xmit_data", "infiniband/mlx5_0/ports/1/counters/unicast_xmit_packets",
    "infiniband/mlx5_0/ports/1/counters_ext/port_rcv_data_64", "infiniband/mlx5_0/ports/1/hw_counters/out_of_buffer",
    "infiniband/mlx5_0/ports/1/state", "infiniband/mlx5_0/ports/1/rate", "infiniband/mlx5_0/ports/1/link_layer",
    "infiniband/mlx5_0/ports/1/gid_attrs/ndevs/0", "infiniband/mlx5_0/device/net/eth0/dev_port",
    "infiniband/mlx5_0/node_guid", "infiniband/mlx5_0/ports/999/counters/link_downed", "net/eth0/statistics/x",
])
_texts = st.one_of(st.text(max_size=40), st.integers(0, 2**70).map(str), st.just("N/A (no PMA)"),
                   st.sampled_from(["4: ACTIVE", "1: DOWN", "100 Gb/sec (4X EDR)", "7 Gb/sec (99X ZZZ)", "Ethernet"]))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(files=st.dictionaries(_paths, _texts, max_size=10),
       ethtool=st.dictionaries(st.sampled_from(["eth0", "eth1"]), st.text(max_size=200), max_size=2),
       host=st.one_of(st.none(), st.text(max_size=5), st.integers()))
def test_fuzz_parse(files, ethtool, host):
    spec = TargetSpec("h", "host", {} if host is None else {"hostname": host})
    try:
        res, _ = parse_payload({"files": files, "ethtool": ethtool}, spec, HostState())
    except ParseError:
        return
    for s in res.counters:
        assert isinstance(s.value, int) and s.value >= 0


def test_fake_ethtool_helper_is_executable(tmp_path):
    exe = fake_ethtool(tmp_path / "bin")
    assert shutil.which("ethtool", path=str(tmp_path / "bin")) == str(exe)
