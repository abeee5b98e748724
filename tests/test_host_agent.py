"""Node-local agent on a fake /sys tree: the real host collector's payloads through the
pipeline and exporter, two polls 10 s apart, rates checked against the counter changes."""

from __future__ import annotations

import os

import pytest

from fabricmon.agent.detector.rules import build
from fabricmon.agent.exporter.server import Exporter
from fabricmon.agent.pipeline import Pipeline
from fabricmon.collectors.host import HostCollector, HostOptions
from fabricmon.core.model import Poll
from tests.test_host_sysfs import add_roce_device, fake_ethtool


async def test_node_local_agent_exports_nic_counters_with_rates(tmp_path, monkeypatch):
    sysfs = tmp_path / "sys"
    add_roce_device(sysfs, dev="mlx5_0", netdev="eth2")
    fake_ethtool(tmp_path / "bin")
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    c = HostCollector("gpu07", "local", HostOptions(sysfs_root=str(sysfs), dcb=False))  # never the machine's dcb
    p = Pipeline([c.spec()], build())
    hw = sysfs / "class" / "infiniband" / "mlx5_0" / "ports" / "1"

    p.ingest(Poll("gpu07", "host", 100.0, 0.01, True, payload=await c.fetch()))
    # 10 s later: 2.5e9 more data words sent (10 GB), 540 more CNPs sent, an out-of-sequence burst.
    (hw / "counters" / "port_xmit_data").write_text("252500000000\n")
    (hw / "hw_counters" / "np_cnp_sent").write_text("5940\n")
    (hw / "hw_counters" / "out_of_sequence").write_text("3000\n")
    p.ingest(Poll("gpu07", "host", 110.0, 0.01, True, payload=await c.fetch()))
    await c.close()

    port = "mlx5_0/1"
    assert p.store.rate("gpu07", port, "tx_bytes") == pytest.approx(1e9)  # 2.5e9 words x 4 / 10 s
    assert p.store.rate("gpu07", port, "np_cnp_sent") == pytest.approx(54.0)
    assert p.store.rate("gpu07", port, "pfc_rx_pause_frames", (3,)) == pytest.approx(0.0)  # ethtool unchanged
    text = Exporter(p).render_now().text.decode()
    for line in (
        f'fabricmon_port_transmit_bytes_total{{device="gpu07",port="{port}"}} 1010000000000',
        f'fabricmon_nic_cnp_sent_total{{device="gpu07",port="{port}"}} 5940',
        f'fabricmon_nic_ecn_marked_packets_total{{device="gpu07",port="{port}"}} 5531',
        f'fabricmon_pfc_receive_pause_frames_total{{device="gpu07",port="{port}",priority="3"}} 48211',
        f'fabricmon_nic_pause_storm_error_events_total{{device="gpu07",port="{port}"}} 1',
        'fabricmon_target_up{target="gpu07",source="host"} 1',
    ):
        assert line in text, line
    # The out-of-sequence file appeared only in the second poll: a first sample, no rate yet,
    # and no finding from a counter's first reading.
    assert p.store.get("gpu07", port, "out_of_sequence").rate is None
    assert not [f for f in p.findings() if f.kind == "packet_loss"]
