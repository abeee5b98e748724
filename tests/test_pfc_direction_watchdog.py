"""Issue 27 on simulated fabrics: pause direction from both ends, deadlocks in the poll they form,
frames-only grading, a host NIC storm from the NIC's own counters, and the PFC watchdog
cross-check (role ``watchdog``)."""

from __future__ import annotations

import pytest

from tests.test_rules_pfc import pausing, ring, stuck
from tests.test_rules_sim import G100, two_leaf_fabric

P = 3


def switch_emitted(fab) -> None:
    """leaf1's uplink sends XOFF all the time without being paused and keeps transmitting; the
    spine's egress toward it is paused and sends nothing; the spine pauses leaf2's uplink."""
    pausing(fab, "leaf1", "Ethernet49")
    stuck(fab, "spine", "Ethernet1")
    pausing(fab, "spine", "Ethernet2", fraction=0.9)
    fab.rate("leaf2", "Ethernet49", "pfc_rx_pause_seconds", 0.9, (P,))
    fab.rate("leaf2", "Ethernet49", "pfc_rx_pause_frames", 2700.0, (P,))
    fab.gauge("leaf2", "Ethernet49", "queue_occupancy_bytes", 1e6, (P,))


def test_a_switch_that_emits_pause_is_the_origin_and_the_egress_it_holds_is_a_victim():
    fab = two_leaf_fabric()
    fab.poll(dt=10.0, n=2)
    switch_emitted(fab)
    fab.poll(dt=10.0, n=2)
    got = fab.active("pfc_storm")
    assert set(got) == {("leaf1", "Ethernet49", P, "origin"), ("spine", "Ethernet1", P, "victim"),
                        ("leaf2", "Ethernet49", P, "victim")}
    origin = got[("leaf1", "Ethernet49", P, "origin")]
    assert "not monitored" not in origin.summary and "is not paused itself" in origin.summary
    edge = origin.evidence["pause_edge"]
    assert edge.startswith("leaf1:Ethernet49 sends XOFF on priority 3") and "spine:Ethernet1 receives it (paused 100%" in edge
    assert "leaf1:Ethernet49 still transmits 8.0 Gb/s" in edge
    # Each end's numbers stay its own: the origin transmits, the paused end does not.
    assert origin.evidence["tx_progress"] is True and origin.evidence["paused_end"]["tx_progress"] is False
    assert got[("spine", "Ethernet1", P, "victim")].severity == "critical"
    assert got[("leaf2", "Ethernet49", P, "victim")].severity == "warning"  # paused 90 %: graded, not a blanket critical


def test_a_deadlock_is_judged_in_the_poll_it_forms_and_no_member_is_a_storm():
    fab = ring(3)
    fab.poll(dt=10.0, n=2)
    # The poll it forms in: one member already stuck, the others paused 60-80 % and still sending.
    stuck(fab, "sw0", "e1")
    for i, f in ((1, 0.8), (2, 0.6)):
        fab.rate(f"sw{i}", "e1", "pfc_rx_pause_seconds", f, (P,))
        fab.rate(f"sw{i}", "e1", "pfc_rx_pause_frames", 3000.0 * f, (P,))
        fab.gauge(f"sw{i}", "e1", "queue_occupancy_bytes", 1e6, (P,))
    for i in range(3):
        pausing(fab, f"sw{i}", "e2")
    fab.poll(dt=10.0)
    assert fab.active() == {}
    for i in range(3):
        stuck(fab, f"sw{i}", "e1")
    fab.poll(dt=10.0)
    got = fab.active("pfc_deadlock")
    assert set(got) == {(f"sw{i}", "e1", P, "member") for i in range(3)}
    assert {f.start for f in got.values()} == {fab.t - 10.0}  # from the poll it formed in
    assert not [f for f in fab.raised if f.kind == "pfc_storm"]


def test_frames_only_ports_are_graded_by_what_their_frames_can_hold():
    # 100G: 100e9 / (512 x 65535) = 2980 pause frames/s keep a port paused all the time.
    fab = two_leaf_fabric()
    for dev, port in [("leaf1", "Ethernet1"), ("spine", "Ethernet1"), ("leaf2", "Ethernet49")]:
        for c in ("pfc_rx_pause_seconds", "pfc_tx_pause_seconds"):
            del fab.rates[(dev, port, c, (P,))], fab.values[(dev, port, c, (P,))]
    fab.poll(dt=10.0, n=2)
    pausing(fab, "h1", "eth0")  # h1's NIC storms: leaf1's egress toward it is held all the time
    fab.rate("leaf1", "Ethernet1", "pfc_rx_pause_frames", 5960.0, (P,))
    fab.rate("leaf1", "Ethernet1", "queue_tx_packets", 0.0, (P,))
    fab.gauge("leaf1", "Ethernet1", "queue_occupancy_bytes", 1e6, (P,))
    pausing(fab, "leaf1", "Ethernet49")
    fab.rate("spine", "Ethernet1", "pfc_rx_pause_frames", 2200.0, (P,))  # at most 74 %: still sending
    fab.gauge("spine", "Ethernet1", "queue_occupancy_bytes", 1e6, (P,))
    fab.rate("leaf2", "Ethernet49", "pfc_rx_pause_frames", 300.0, (P,))  # at most 10 %: no victim
    pausing(fab, "spine", "Ethernet2", fraction=0.1)
    fab.poll(dt=10.0, n=3)
    got = fab.active("pfc_storm")
    assert set(got) == {("h1", "eth0", P, "origin"), ("spine", "Ethernet1", P, "victim")}
    v = got[("spine", "Ethernet1", P, "victim")]
    assert v.severity == "warning" and v.evidence["paused_at_most"] == pytest.approx(2200 / 2980.2, abs=1e-3)
    assert "can have held it at most 74% of the interval" in v.summary


def test_a_host_nic_storm_from_its_own_counters_without_a_switch():
    fab = two_leaf_fabric()
    fab.topo.set_links("lldp", [])  # only the hosts are seen: no topology
    fab.rate("h1", "eth0", "prio_rx_bytes", 5e9, (P,))
    fab.poll(dt=10.0, n=2)
    pausing(fab, "h1", "eth0")  # sends pause all the time ...
    fab.rate("h1", "eth0", "prio_rx_bytes", 1e6, (P,))  # ... and drains next to nothing on priority 3
    fab.rate("h2", "eth0", "pfc_rx_pause_seconds", 0.4, (P,))  # another host, paused 40 % meanwhile
    fab.poll(dt=10.0, n=3)
    got = fab.active("pfc_storm")
    assert set(got) == {("h1", "eth0", P, "origin")}
    f = got[("h1", "eth0", P, "origin")]
    assert f.evidence["nic_pause_storm"] == "stalled" and "rx_prio3_bytes" in f.evidence["nic_stall"]
    assert "h2:eth0" in f.evidence["also_paused"]  # no topology: its pause is the storm's, not congestion
    assert "congestion" not in fab.kinds()


def test_a_nic_that_pauses_but_still_drains_is_no_storm():
    fab = two_leaf_fabric()
    fab.topo.set_links("lldp", [])
    fab.poll(dt=10.0, n=2)
    pausing(fab, "h1", "eth0")
    fab.rate("h1", "eth0", "rx_bytes", 0.3 * G100)  # a slow receiver: congestion, not a storm
    fab.poll(dt=10.0, n=3)
    assert "pfc_storm" not in fab.kinds()


# ----------------------------------------------------------------- the watchdog cross-check
def watchdog(fab, dev, port, storms=0.0, restores=0.0, drops=0.0, state=None, enabled=None):
    fab.rate(dev, port, "pfc_watchdog_storms", storms, (P,))
    fab.rate(dev, port, "pfc_watchdog_restores", restores, (P,))
    fab.rate(dev, port, "pfc_watchdog_drops", drops, (P,))
    if state is not None:
        fab.gauge(dev, port, "pfc_watchdog_stormed", state, (P,))
    if enabled is not None:
        fab.gauge(dev, port, "pfc_watchdog_enabled", enabled, (P,))


def test_a_watchdog_cycling_on_a_healthy_port_is_a_finding_and_no_storm():
    fab = two_leaf_fabric()
    watchdog(fab, "leaf1", "Ethernet1", state=0)
    fab.poll(dt=10.0, n=2)
    watchdog(fab, "leaf1", "Ethernet1", storms=0.8, restores=0.8, state=0)  # 8 storm/restore cycles a poll
    fab.rate("leaf1", "Ethernet1", "pfc_rx_pause_seconds", 0.005, (P,))  # the port's normal brief pause
    fab.poll(dt=10.0, n=2)
    got = fab.active("pfc_storm")
    assert set(got) == {("leaf1", "Ethernet1", P, "watchdog")}
    f = got[("leaf1", "Ethernet1", P, "watchdog")]
    assert f.evidence["checks"] == ["cycling", "unfounded"] and f.severity == "warning"
    assert "stormed and restored 8 times in 10 s while the port was paused 0%" in f.summary


def test_a_watchdog_that_restores_through_a_storm_its_port_does_not_count_is_a_finding_beside_the_storm():
    # sonic-buildimage#29203: the NIC pauses all the time; the switch counts pause only while
    # PFC is on (45 %) and its watchdog cycles; the NIC's own counters show the storm.
    fab = two_leaf_fabric()
    watchdog(fab, "leaf1", "Ethernet1", state=0)
    fab.rate("h1", "eth0", "prio_rx_bytes", 5e9, (P,))
    fab.poll(dt=10.0, n=2)
    pausing(fab, "h1", "eth0")
    fab.rate("h1", "eth0", "prio_rx_bytes", 0.0, (P,))
    fab.rate("leaf1", "Ethernet1", "pfc_rx_pause_seconds", 0.45, (P,))
    fab.rate("leaf1", "Ethernet1", "queue_tx_packets", 0.0, (P,))
    fab.gauge("leaf1", "Ethernet1", "queue_occupancy_bytes", 1e6, (P,))
    watchdog(fab, "leaf1", "Ethernet1", storms=1.6, restores=1.6, drops=1e5, state=0)
    fab.poll(dt=10.0, n=2)
    got = fab.active("pfc_storm")
    assert {("h1", "eth0", P, "origin"), ("leaf1", "Ethernet1", P, "watchdog")} <= set(got)
    assert got[("leaf1", "Ethernet1", P, "watchdog")].evidence["checks"] == ["cycling"]
    assert got[("h1", "eth0", P, "origin")].evidence["watchdog"].startswith("acted: 16 storm event(s), 16 restoration(s)")


def test_a_watchdog_breaking_a_deadlock_that_re_forms_is_no_watchdog_finding():
    fab = ring(3)
    for i in range(3):
        watchdog(fab, f"sw{i}", "e1")
    fab.poll(dt=10.0, n=2)
    for i in range(3):
        stuck(fab, f"sw{i}", "e1")
        fab.rate(f"sw{i}", "e1", "pfc_rx_pause_seconds", 0.45, (P,))
        watchdog(fab, f"sw{i}", "e1", storms=2.0, restores=2.0, drops=3000.0)
        pausing(fab, f"sw{i}", "e2", fraction=0.45)
    fab.poll(dt=10.0, n=3)
    assert set(fab.active()) == {(f"sw{i}", "e1", P, "member") for i in range(3)}


def test_a_stale_stormed_state_through_xon_frames_is_critical():
    # sonic-swss#4581: after an XOFF storm the NIC sends XON at the same rate: frames arrive,
    # nothing is paused, and the watchdog keeps the queue stormed (dropping it).
    fab = two_leaf_fabric()
    watchdog(fab, "leaf1", "Ethernet1", state=0, enabled=1)
    fab.poll(dt=10.0, n=2)
    stuck(fab, "leaf1", "Ethernet1")
    watchdog(fab, "leaf1", "Ethernet1", storms=0.1, state=1, enabled=1)
    fab.poll(dt=10.0)
    watchdog(fab, "leaf1", "Ethernet1", state=1, enabled=1)
    fab.rate("leaf1", "Ethernet1", "pfc_rx_pause_seconds", 0.0, (P,))
    fab.rate("leaf1", "Ethernet1", "pfc_rx_pause_frames", 5960.0, (P,))
    fab.poll(dt=10.0, n=2)
    f = fab.active("pfc_storm")[("leaf1", "Ethernet1", P, "watchdog")]
    assert f.evidence["checks"] == ["stale"] and f.severity == "critical"


def test_a_watchdog_that_acts_without_counting_is_frozen():
    # sonic-buildimage#19067: the queue is shut through a storm while the counters stay flat.
    fab = two_leaf_fabric(hosts=False)
    watchdog(fab, "leaf1", "Ethernet1", state=0)
    fab.poll(dt=10.0, n=2)
    stuck(fab, "leaf1", "Ethernet1")
    watchdog(fab, "leaf1", "Ethernet1", state=1)
    fab.poll(dt=10.0, n=2)
    got = fab.active("pfc_storm")
    assert {("leaf1", "Ethernet1", P, "origin"), ("leaf1", "Ethernet1", P, "watchdog")} <= set(got)
    assert got[("leaf1", "Ethernet1", P, "watchdog")].evidence["checks"] == ["frozen"]


def test_an_enabled_watchdog_silent_through_a_storm_is_a_finding_but_an_unknown_one_is_not():
    for enabled, expect in ((1, True), (None, False)):
        fab = two_leaf_fabric(hosts=False)
        watchdog(fab, "leaf1", "Ethernet1", state=0, enabled=enabled)
        fab.poll(dt=10.0, n=2)
        stuck(fab, "leaf1", "Ethernet1")
        fab.poll(dt=10.0, n=2)
        got = fab.active("pfc_storm")
        assert (("leaf1", "Ethernet1", P, "watchdog") in got) is expect
        assert got[("leaf1", "Ethernet1", P, "origin")].evidence["watchdog"] == \
            ("enabled, did not act" if enabled else "did not act (no storm event, queue not stormed)")


def test_a_watchdog_in_forward_mode_through_a_real_storm_is_no_watchdog_finding():
    # SONiC pfcwd `--action forward`: the stormed queue ignores the pause it receives and keeps
    # transmitting, so the port's pause time stays low; the frames that keep arriving (enough to
    # hold a 100G port paused twice over) show the storm is real: neither unfounded nor stale.
    fab = two_leaf_fabric()
    watchdog(fab, "leaf1", "Ethernet1", state=0, enabled=1)
    fab.poll(dt=10.0, n=2)
    pausing(fab, "h1", "eth0")
    watchdog(fab, "leaf1", "Ethernet1", storms=0.1, state=1, enabled=1)
    fab.rate("leaf1", "Ethernet1", "pfc_rx_pause_seconds", 0.0, (P,))
    fab.rate("leaf1", "Ethernet1", "pfc_rx_pause_frames", 5960.0, (P,))
    fab.poll(dt=10.0)
    watchdog(fab, "leaf1", "Ethernet1", state=1, enabled=1)
    fab.poll(dt=10.0, n=2)
    assert ("leaf1", "Ethernet1", P, "watchdog") not in fab.active("pfc_storm")
    assert not [f for f in fab.raised if f.kind == "pfc_storm" and f.role == "watchdog"]
