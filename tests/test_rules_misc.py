"""congestion (ECN, chronic pause), packet_loss, link_degraded / link_flap, registry, metrics."""

from __future__ import annotations

import re

import pytest

from fabricmon.agent.detector.rules import RULES, build
from fabricmon.core.model import DeviceInfo
from tests.test_rules_sim import G100, G400, Fab, two_leaf_fabric

P = 3


def test_registry_has_every_rule_and_rejects_unknown_parameters():
    assert set(RULES) == {"pfc_storm", "pfc_deadlock", "credit_deadlock", "congestion", "packet_loss", "link_degraded", "link_flap",
                          "misconfig"}
    assert [r.name for r in build({"congestion": {"enabled": False}})].count("congestion") == 0
    with pytest.raises(ValueError, match="ecn_warn"):
        build({"congestion": {"ecn_warn": 0.5}})
    rule = build({"congestion": {"ecn_warning_ratio": 0.02, "raise_polls": 5}})[3]
    assert rule.params.ecn_warning_ratio == 0.02 and rule.raise_polls == 5


@pytest.mark.parametrize(("config", "message"), [
    ({"link_flap": {"critical_flaps": "many"}}, "rules.link_flap.critical_flaps: Input should be a valid integer"),
    ({"link_flap": {"enabled": "maybe"}}, "rules.link_flap.enabled: Input should be a valid boolean"),
    ({"congestion": {"ecn_warning_ratio": 1.5}}, "rules.congestion.ecn_warning_ratio: Input should be less than or equal to 1"),
    ({"congestion": {"ecn_warning_ratio": 0.3}}, "ecn_warning_ratio (0.3) is above ecn_critical_ratio (0.25)"),
    ({"link_flap": {"window": "10 parsecs"}}, "rules.link_flap.window: invalid duration"),
    ({"packet_loss": {"transport_counters": ["out_of_sequence", "oos"]}}, "not counters of the vocabulary: oos"),
    ({"pfc_storm": {"storm_pause_fraction": 0.9}}, "rules.pfc_storm.storm_pause_fraction: not a parameter of the pfc_storm rule"),
    ({"packet_loss": {"lossless_priorities": [3]}}, "the fabric layout is set once, under fabric:"),
    ({"no_such_rule": {}}, "rules.no_such_rule: unknown rule"),
])
def test_rule_parameters_are_typed_and_checked(config, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        build(config)


def test_rule_parameters_take_durations_and_honour_enabled_words():
    rule = next(r for r in build({"link_flap": {"window": "5m"}}) if r.name == "link_flap")
    assert rule.params.window == 300.0
    # YAML's quoted "no" (or "off", "false", 0) switches the rule off; it never leaves it on silently.
    for off in ("no", "off", "false", 0, False):
        assert "link_flap" not in [r.name for r in build({"link_flap": {"enabled": off}})], off


def test_benign_heavy_load_with_ecn_marks_and_brief_pauses_raises_nothing():
    fab = two_leaf_fabric()
    fab.poll(n=2)
    for dev, port in [("leaf1", "Ethernet1"), ("leaf2", "Ethernet49"), ("spine", "Ethernet1"), ("spine", "Ethernet2")]:
        fab.rate(dev, port, "tx_bytes", G100 * 0.9)
        fab.rate(dev, port, "queue_tx_packets", 2e6, (P,))
        fab.rate(dev, port, "ecn_marked_packets", 2e6 * 0.008, (P,))  # 0.8 % marked
        fab.rate(dev, port, "pfc_rx_pause_seconds", 0.03, (P,))  # paused 3 % of the time
        fab.rate(dev, port, "pfc_rx_pause_frames", 200.0, (P,))
        fab.gauge(dev, port, "queue_occupancy_bytes", 3e5, (P,))
    fab.rate("h1", "eth0", "pfc_tx_pause_seconds", 0.03, (P,))
    fab.poll(n=10)
    assert fab.det.active == [] and fab.raised == []


def test_ecn_congestion_warning_after_three_polls_then_critical():
    fab = two_leaf_fabric()
    fab.poll(n=2)
    fab.rate("leaf2", "Ethernet2", "queue_tx_packets", 1e6, (P,))
    fab.rate("leaf2", "Ethernet2", "ecn_marked_packets", 8e4, (P,))  # 8 %: above DCQCN's 1-3 % normal
    fab.poll(n=2)
    assert fab.active() == {}
    fab.poll()
    got = fab.active("congestion")
    assert set(got) == {("leaf2", "Ethernet2", P, None)}
    f = got[("leaf2", "Ethernet2", P, None)]
    assert f.severity == "warning"
    fab.rate("leaf2", "Ethernet2", "ecn_marked_packets", 5e5, (P,))  # 50 % now
    fab.poll(n=4)
    assert f.severity == "critical"
    metric = next(m for r in fab.det.rules for m in r.metrics() if m.name == "fabricmon_queue_ecn_mark_ratio")
    assert dict(metric.values)[("leaf2", "Ethernet2", "3")] == pytest.approx(0.5)


def test_ecn_is_judged_against_the_fabric_s_normal_and_the_queue_s_own():
    # Every busy queue of this fabric marks 6 %: above the 5 % floor, but its normal. One queue
    # marking 40 % (an incast) is congestion; the others are not.
    fab = two_leaf_fabric()
    busy = [("leaf1", "Ethernet1"), ("leaf1", "Ethernet2"), ("leaf2", "Ethernet1"), ("leaf2", "Ethernet2"),
            ("spine", "Ethernet1"), ("spine", "Ethernet2")]
    for dev, port in busy:
        fab.rate(dev, port, "queue_tx_packets", 1e6, (P,))
        fab.rate(dev, port, "ecn_marked_packets", 6e4, (P,))
    fab.poll(dt=10.0, n=8)
    assert fab.active() == {}
    fab.rate("leaf2", "Ethernet2", "ecn_marked_packets", 4e5, (P,))
    fab.poll(dt=10.0, n=7)  # a 60 s window over 40 %, then raise_polls
    got = fab.active("congestion")
    assert set(got) == {("leaf2", "Ethernet2", P, None)}
    ev = got[("leaf2", "Ethernet2", P, None)].evidence
    assert ev["usual"] == {"port": pytest.approx(0.06), "fabric": pytest.approx(0.06)} and ev["threshold"] == pytest.approx(0.24)
    assert "against a usual 6.0%" in got[("leaf2", "Ethernet2", P, None)].summary


def test_chronic_pause_is_congestion_not_storm():
    fab = two_leaf_fabric()
    fab.poll(n=2)
    fab.rate("spine", "Ethernet2", "pfc_rx_pause_seconds", 0.3, (P,))
    fab.rate("spine", "Ethernet2", "pfc_rx_pause_frames", 900.0, (P,))
    fab.poll(n=12)
    got = fab.active()
    assert set(got) == {("spine", "Ethernet2", P, None)}
    assert got[("spine", "Ethernet2", P, None)].kind == "congestion"
    assert got[("spine", "Ethernet2", P, None)].severity == "critical"  # 0.3 over the window >= 0.20
    pause = next(m for m in fab.det.metrics() if m.name == "fabricmon_port_pause_ratio")
    assert dict(pause.values)[("spine", "Ethernet2", "3")] == pytest.approx(0.3)


def test_lossless_queue_drop_is_critical_loss_in_one_poll_but_lossy_is_not():
    fab = two_leaf_fabric()
    fab.rate("leaf1", "Ethernet2", "queue_drops", 0.0, (0,))
    fab.poll(n=2)
    fab.rate("leaf1", "Ethernet2", "queue_drops", 100.0, (0,))  # lossy queue 0: tail drops are normal
    fab.poll(n=3)
    assert fab.active() == {}
    fab.bump("leaf1", "Ethernet1", "queue_drops", 7, (P,))
    fab.poll()
    got = fab.active("packet_loss")
    assert set(got) == {("leaf1", "Ethernet1", P, None)}
    assert got[("leaf1", "Ethernet1", P, None)].evidence["queue_drops"] == 7


def test_wjh_buffer_drops_and_nic_phy_discards():
    # Class-less drops (a WJH record without its traffic class, a NIC's rx_discards_phy) on ports
    # whose traffic is all priority 3: the per-queue transmit counters (the leaf port's own, and
    # the leaf's toward the NIC) put them on the lossless class (tests/test_loss_attribution.py).
    fab = two_leaf_fabric()
    fab.rate("leaf2", "Ethernet1", "wjh_drops", 0.0, ("buffer", "503"))
    fab.rate("leaf2", "Ethernet1", "wjh_drops", 0.0, ("l2", "209"))
    fab.rate("h4", "eth0", "rx_discards_phy", 0.0)
    fab.poll(n=2)
    fab.bump("leaf2", "Ethernet1", "wjh_drops", 50, ("l2", "209"))  # SMAC multicast: not a lossless violation
    fab.poll()
    assert fab.active() == {}
    fab.bump("leaf2", "Ethernet1", "wjh_drops", 12, ("buffer", "503"))
    fab.bump("h4", "eth0", "rx_discards_phy", 3)
    fab.poll()
    got = fab.active("packet_loss")
    assert set(got) == {("leaf2", "Ethernet1", P, None), ("h4", "eth0", P, None)}
    assert got[("leaf2", "Ethernet1", P, None)].evidence["wjh_buffer_drops"] == {"503": 12}
    assert got[("h4", "eth0", P, None)].evidence["attributed_by"] == ["traffic"]
    assert "leaf2 Ethernet2" in got[("h4", "eth0", P, None)].evidence["attribution"]  # the peer's egress is its ingress


def test_ib_discards_warning_then_critical_at_ufm_threshold():
    fab = Fab()
    fab.ib_port("sw", "7")
    fab.poll(n=2)
    fab.bump("sw", "7", "tx_discards", 5)
    fab.poll()
    assert fab.active("packet_loss")[("sw", "7", None, None)].severity == "warning"
    fab.bump("sw", "7", "tx_discards", 250)
    fab.poll()
    assert fab.active("packet_loss")[("sw", "7", None, None)].severity == "critical"


def test_transport_loss_needs_three_of_five_polls():
    fab = Fab()
    fab.rate("h1", "mlx5_0", "rx_packets", 1e6)
    fab.rate("h1", "mlx5_0", "out_of_sequence", 0.0)
    fab.poll(n=2)
    fab.bump("h1", "mlx5_0", "out_of_sequence", 1)
    fab.poll()
    fab.poll()
    fab.bump("h1", "mlx5_0", "out_of_sequence", 1)
    fab.poll()
    assert fab.active() == {}  # 2 of the last 5
    fab.bump("h1", "mlx5_0", "out_of_sequence", 1)
    fab.poll()
    got = fab.active("packet_loss")
    assert set(got) == {("h1", "mlx5_0", None, None)}
    # 3 errors in ~6 s is 30/min: critical.
    assert got[("h1", "mlx5_0", None, None)].severity == "critical"
    fab.poll(n=6)
    assert fab.active() == {}


def test_symbol_ber_over_the_statistical_window():
    fab = Fab()
    fab.ib_port("sw", "1", speed=G400)  # 400 Gb/s: 1e-12 needs 3e12 bits = 7.5 s
    fab.ib_port("sw", "2", speed=G400)
    fab.poll(n=2)
    fab.bump("sw", "1", "symbol_errors", 2)  # 2 errors in a 7.5 s window: BER 6.7e-13 < 1e-12; PDR: 2 < 2.88
    fab.poll(n=8)
    assert fab.active() == {}
    fab.bump("sw", "2", "symbol_errors", 4)  # > 3 errors: above 1e-12 whatever the rest of the window holds
    fab.poll()
    got = fab.active("link_degraded")
    assert got[("sw", "2", None, None)].severity == "critical"
    assert got[("sw", "2", None, None)].evidence["symbol_ber"] == pytest.approx(4 / (400e9 * 7.5))


def test_pdr_symbol_errors_warn_over_twelve_minutes():
    fab = Fab()
    fab.ib_port("sw", "1", speed=G400)
    fab.poll(dt=60, n=2)
    for _ in range(12):
        fab.bump("sw", "1", "symbol_errors", 1)  # 12 errors in 12 min, never 4 within 7.5 s
        fab.poll(dt=60)
    got = fab.active("link_degraded")
    assert got[("sw", "1", None, None)].severity == "warning"  # 12 > 2.88 (PDR 1e-14 over 720 s)


def test_link_flap_and_retrain_and_downgrade():
    fab = Fab(config={"link_degraded": {"expected_width_lanes": 4}})
    fab.ib_port("sw", "1")
    fab.gauge("sw", "1", "link_width_lanes", 4)
    fab.poll(n=2)
    fab.bump("sw", "1", "link_error_recovery", 1)
    fab.poll()
    got = fab.active()
    assert set(got) == {("sw", "1", None, None)} and got[("sw", "1", None, None)].severity == "warning"
    fab.bump("sw", "1", "link_downed", 2)
    fab.poll()
    assert fab.active()[("sw", "1", None, None)].severity == "critical"  # 3 events in the window
    fab.poll(n=10)
    assert fab.active() == {}
    fab.gauge("sw", "1", "link_width_lanes", 2)
    fab.poll()
    assert fab.active() == {}
    fab.poll()
    assert fab.active()[("sw", "1", None, None)].evidence["width_lanes"] == 2


def test_snmp_link_down_without_counters_is_a_flap():
    fab = Fab()
    fab.gauge("leaf1", "Ethernet3", "link_up", 1)
    fab.rate("leaf1", "Ethernet3", "tx_bytes", 1e6)
    fab.poll(n=2)
    fab.gauge("leaf1", "Ethernet3", "link_up", 0)
    fab.poll()
    assert set(fab.active("link_degraded")) == {("leaf1", "Ethernet3", None, None)}


# ----------------------------------------------------------------- lasting link states
NDR_LANE = 100e9 / 8  # bytes/s per NDR lane


def leaf_spine(pairs: int = 4) -> Fab:
    """``pairs`` leaf-spine cables between Quantum-2 switches (devid 0xd2f2), 4x NDR each."""
    links = [(f"leaf{i}", "1", f"spine{i % 2}", str(i)) for i in range(pairs)]
    fab = Fab(links)
    fab.store.set_devices([DeviceInfo(d, "switch", model="0xd2f2") for d in {x for a, _, b, _ in links for x in (a, b)}])
    for a, pa, b, pb in links:
        for dev, port in ((a, pa), (b, pb)):
            fab.ib_port(dev, port, speed=4 * NDR_LANE)
            fab.gauge(dev, port, "link_width_lanes", 4)
    return fab


def narrow(fab: Fab, dev: str, port: str, lanes: int) -> None:
    for d, p in ((dev, port), fab.topo.peer(dev, port)):
        fab.gauge(d, p, "link_width_lanes", lanes)
        fab.gauge(d, p, "link_speed_bytes", lanes * NDR_LANE)


def test_a_narrower_link_is_a_finding_for_as_long_as_it_lasts():
    """A cable retrained from 4x to 2x NDR is one finding per end from the poll after it shows
    (one poll can catch a link mid-training) until it runs 4x again, saying since when and how
    much of its usual bandwidth it has."""
    fab = leaf_spine()
    fab.poll(n=3)
    narrow(fab, "leaf1", "1", 2)
    fab.poll()
    t_retrain = fab.t
    assert fab.active() == {}
    fab.poll(n=6)
    got = fab.active("link_degraded")
    assert set(got) == {("leaf1", "1", None, None), ("spine1", "1", None, None)}
    f = got[("leaf1", "1", None, None)]
    assert f.start == t_retrain and f.evidence["since"] == t_retrain and f.evidence["bandwidth_fraction"] == 0.5
    assert "runs at 2x NDR (200 Gb/s) since" in f.summary and "half its usual 4x NDR (400 Gb/s)" in f.summary
    narrow(fab, "leaf1", "1", 4)
    fab.poll(n=3)
    assert fab.active() == {}


def test_a_link_degraded_before_the_agent_started_is_judged_by_its_like():
    """No history of its own: the other ports on cables between the same two models (a strict
    majority of at least two) say what it should run at."""
    fab = leaf_spine()
    narrow(fab, "leaf2", "1", 2)
    fab.poll(n=3)
    f = fab.active("link_degraded")[("leaf2", "1", None, None)]
    assert "what 6 other ports on cables between 0xd2f2 and 0xd2f2 devices run at" in f.summary


def test_two_populations_of_one_model_pair_give_no_reference():
    """Half the cables split to 2x by design, half at 4x, since before the agent started: no
    majority says which is right, so neither is a finding."""
    fab = leaf_spine()
    narrow(fab, "leaf0", "1", 2)
    narrow(fab, "leaf2", "1", 2)
    fab.poll(n=4)
    assert fab.active() == {}


def test_the_rated_width_and_speed_both_ends_report_are_the_reference():
    """UFM says what both ends support and have enabled: NDR at 4x. A link that trained at HDR
    runs at half of it, whatever its history and its like."""
    fab = leaf_spine(pairs=1)
    for dev, port in (("leaf0", "1"), ("spine0", "0")):
        fab.gauge(dev, port, "link_width_rated_lanes", 4)
        fab.gauge(dev, port, "link_speed_rated_bytes", 4 * NDR_LANE)
        fab.gauge(dev, port, "link_speed_bytes", 4 * NDR_LANE / 2)  # HDR
    fab.poll(n=3)
    f = fab.active("link_degraded")[("leaf0", "1", None, None)]
    assert f.evidence["reference"] == "rated" and "half its rated 4x NDR (400 Gb/s)" in f.summary
    assert "runs at 4x HDR (200 Gb/s)" in f.summary


def test_a_link_that_went_down_is_a_finding_until_it_is_back():
    fab = leaf_spine(pairs=1)
    fab.poll(n=2)
    fab.gauge("leaf0", "1", "link_up", 0)
    fab.poll()
    t_down = fab.t
    fab.poll(n=5)
    f = fab.active("link_degraded")[("leaf0", "1", None, None)]
    assert f.start == t_down and "is down since" in f.summary and f.evidence["was"] == "4x NDR (400 Gb/s)"
    fab.gauge("leaf0", "1", "link_up", 1)
    fab.poll(n=3)
    assert fab.active() == {}
