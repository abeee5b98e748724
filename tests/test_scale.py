"""Exposition levels (full / health, per target and counter group) and the render cache."""

from __future__ import annotations

import pytest

from fabricmon.agent.config import ConfigError, load_text
from fabricmon.agent.exporter import metrics
from fabricmon.agent.exporter.exposition import render
from fabricmon.agent.exporter.metrics import ExpositionPolicy
from fabricmon.agent.pipeline import Pipeline
from fabricmon.core.model import Gauge, Sample


def feed(p: Pipeline, t: float, k: int, target: str, device: str, ports: int = 2) -> None:
    """Two polls' worth of data: tx 1000 B/s, rx 500 B/s, 3 symbol errors + 1 discard per poll (10 s)."""
    samples, gauges = [], []
    for port in range(1, ports + 1):
        pn = str(port)
        samples += [Sample(device, pn, "tx_bytes", 10_000 * k + port), Sample(device, pn, "rx_bytes", 5_000 * k),
                    Sample(device, pn, "symbol_errors", 3 * k), Sample(device, pn, "tx_discards", k),
                    Sample(device, pn, "pfc_rx_pause_frames", 7 * k, sub=(3,))]
        gauges += [Gauge(device, pn, "link_up", 1), Gauge(device, pn, "link_speed_bytes", 5e10)]
    p.store.update(samples, t, gauges=gauges, target=target)
    p.generation += 1


def pipeline(policy: ExpositionPolicy | None) -> Pipeline:
    p = Pipeline([], [])
    if policy is not None:
        p.exposition_policy = policy
    for k in range(2):
        feed(p, 100.0 + 10 * k, k, "ib", "sw-ib")
        feed(p, 100.0 + 10 * k, k, "eth", "sw-eth")
    return p


def lines(p: Pipeline) -> dict[str, list[str]]:
    return {f.name: f.samples() for f in metrics.fabric_families(p)}


def test_full_level_is_the_default_and_equals_no_policy():
    assert lines(pipeline(None)) == lines(pipeline(ExpositionPolicy()))
    fams = lines(pipeline(None))
    assert "fabricmon_port_transmit_bytes_total" in fams and "fabricmon_port_symbol_errors_total" in fams
    assert not any(n.startswith("fabricmon_fabric_") or n.endswith("_per_second") for n in fams)
    assert 'fabricmon_port_transmit_bytes_total{device="sw-ib",port="2"} 10002' in fams["fabricmon_port_transmit_bytes_total"]


def test_health_level_for_one_target_drops_its_raw_counters():
    fams = lines(pipeline(ExpositionPolicy(targets={"ib": "health"})))
    tx = fams["fabricmon_port_transmit_bytes_total"]
    assert tx and all('device="sw-eth"' in ln for ln in tx)  # eth stays full
    assert fams["fabricmon_port_transmit_bytes_per_second"] == [
        'fabricmon_port_transmit_bytes_per_second{device="sw-ib",port="1"} 1000',
        'fabricmon_port_transmit_bytes_per_second{device="sw-ib",port="2"} 1000']
    assert fams["fabricmon_port_receive_bytes_per_second"][0] == 'fabricmon_port_receive_bytes_per_second{device="sw-ib",port="1"} 500'
    # problems = symbol errors (0.3/s) + discards (0.1/s)
    assert fams["fabricmon_port_problems_per_second"][0] == 'fabricmon_port_problems_per_second{device="sw-ib",port="1"} 0.4'
    # fabric sums per target: tx totals 10001 + 10002
    assert fams["fabricmon_fabric_port_transmit_bytes_total"] == ['fabricmon_fabric_port_transmit_bytes_total{target="ib"} 20003']
    assert fams["fabricmon_fabric_pfc_receive_pause_frames_total"] == ['fabricmon_fabric_pfc_receive_pause_frames_total{target="ib"} 14']
    # link state stays at every level; speed is a full-level gauge
    assert sum('device="sw-ib"' in ln for ln in fams["fabricmon_port_up"]) == 2
    assert not any('device="sw-ib"' in ln for ln in fams["fabricmon_port_speed_bytes"])


def test_group_override_keeps_pfc_in_full_at_health_level():
    fams = lines(pipeline(ExpositionPolicy(level="health", groups={"pfc": "full"})))
    assert "fabricmon_port_transmit_bytes_total" not in fams
    assert len(fams["fabricmon_pfc_receive_pause_frames_total"]) == 4
    assert fams["fabricmon_pfc_receive_pause_frames_total"][0] == \
        'fabricmon_pfc_receive_pause_frames_total{device="sw-eth",port="1",priority="3"} 7'
    assert "fabricmon_fabric_pfc_receive_pause_frames_total" not in fams
    # and the reverse: a full agent with the traffic group at health
    fams = lines(pipeline(ExpositionPolicy(groups={"traffic": "health"})))
    assert "fabricmon_port_transmit_bytes_total" not in fams and "fabricmon_port_symbol_errors_total" in fams


def test_health_exposition_is_valid_text():
    p = pipeline(ExpositionPolicy(level="health"))
    text, om = render(metrics.all_families(p))
    body = text.decode()
    assert "# TYPE fabricmon_port_transmit_bytes_per_second gauge" in body
    assert "# TYPE fabricmon_fabric_port_transmit_bytes_total counter" in body
    assert om.decode().endswith("# EOF\n")


def test_render_cache_follows_new_and_expired_ports():
    p = pipeline(None)
    first = lines(p)["fabricmon_port_transmit_bytes_total"]
    feed(p, 120.0, 2, "ib", "sw-aa", ports=1)  # sorts first: the cached port order must be rebuilt
    tx = lines(p)["fabricmon_port_transmit_bytes_total"]
    assert tx[0] == 'fabricmon_port_transmit_bytes_total{device="sw-aa",port="1"} 20001'
    assert tx[1:] == [ln for ln in first]
    p.store.stale_after = 5.0
    p.store.expire(124.0)  # everything but sw-aa is stale
    assert lines(p)["fabricmon_port_transmit_bytes_total"] == [tx[0]]
    # a new series on a known port (same port count) is picked up too
    p.store.update([Sample("sw-aa", "1", "pfc_rx_pause_frames", 1, sub=(5,))], 130.0)
    assert lines(p)["fabricmon_pfc_receive_pause_frames_total"] == [
        'fabricmon_pfc_receive_pause_frames_total{device="sw-aa",port="1",priority="3"} 14',
        'fabricmon_pfc_receive_pause_frames_total{device="sw-aa",port="1",priority="5"} 1']


def test_exposition_config():
    loaded = load_text("exposition: {level: health, groups: {pfc: full}}\n"
                       "targets:\n  - {name: a, source: perfquery, exposition: full}\n  - {name: b, source: perfquery}\n")
    cfg = loaded.config
    assert cfg.exposition.level == "health" and cfg.target_levels() == {"a": "full"}
    assert loaded.options["a"].model_dump() == loaded.options["b"].model_dump()  # not a collector option
    with pytest.raises(ConfigError, match="exposition"):
        load_text("exposition: {level: partial}\n")


def test_port_info_follows_topology_changes():
    from fabricmon.core.model import Link

    p = pipeline(None)

    def port_info() -> list[str]:
        return metrics.topology_families(p)[1].samples()

    before = port_info()
    assert before[0] == ('fabricmon_port_info{device="sw-eth",port="1",guid="",lid="",alias="",label="",'
                         'peer_device="",peer_port=""} 1')
    p.topology.set_links("ib", [Link("sw-eth", "1", "sw-ib", "2")])
    after = port_info()
    assert after[0].endswith('peer_device="sw-ib",peer_port="2"} 1') and after[-1].endswith('peer_device="sw-eth",peer_port="1"} 1')
    assert metrics.topology_families(p)[2].lines == ["fabricmon_topology_links 1"]
