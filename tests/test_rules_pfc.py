"""pfc_storm and pfc_deadlock on simulated fabrics: trees, roles, cycles, hysteresis, guards."""

from __future__ import annotations

import pytest

from tests.test_rules_sim import Fab, two_leaf_fabric

P = 3


def stuck(fab: Fab, dev: str, port: str, prio: int = P) -> None:
    """The port is paused the whole interval by its peer and sends nothing; its queue holds data."""
    fab.rate(dev, port, "pfc_rx_pause_seconds", 1.0, (prio,))
    fab.rate(dev, port, "pfc_rx_pause_frames", 3000.0, (prio,))
    fab.rate(dev, port, "queue_tx_packets", 0.0, (prio,))
    fab.rate(dev, port, "tx_bytes", 0.0)
    fab.gauge(dev, port, "queue_occupancy_bytes", 2e6, (prio,))


def pausing(fab: Fab, dev: str, port: str, prio: int = P, fraction: float = 1.0) -> None:
    fab.rate(dev, port, "pfc_tx_pause_seconds", fraction, (prio,))
    fab.rate(dev, port, "pfc_tx_pause_frames", 3000.0 * fraction, (prio,))


def host_storm(fab: Fab) -> None:
    """h1's NIC stalls and pauses leaf1; the backlog spreads through the spine to leaf2."""
    pausing(fab, "h1", "eth0")
    stuck(fab, "leaf1", "Ethernet1")
    pausing(fab, "leaf1", "Ethernet49")
    stuck(fab, "spine", "Ethernet1")
    pausing(fab, "spine", "Ethernet2")
    stuck(fab, "leaf2", "Ethernet49")
    pausing(fab, "leaf2", "Ethernet1")
    pausing(fab, "leaf2", "Ethernet2")


def test_storm_tree_origin_is_monitored_host_nic_and_raises_on_poll_two():
    fab = two_leaf_fabric()
    fab.poll(n=2)
    host_storm(fab)
    fab.poll()
    assert fab.active("pfc_storm") == {}  # poll 1 of a counter-derived storm: not yet
    fab.poll()
    got = fab.active("pfc_storm")
    # leaf1 Ethernet1 faces the NIC: the origin's own cable (origin_peer), not a separate victim.
    assert set(got) == {
        ("h1", "eth0", P, "origin"),
        ("spine", "Ethernet1", P, "victim"),
        ("leaf2", "Ethernet49", P, "victim"),
    }
    origin = got[("h1", "eth0", P, "origin")]
    assert origin.severity == "critical" and origin.evidence["victims"] == 2
    assert origin.peer_device == "leaf1" and origin.peer_port == "Ethernet1"
    assert got[("spine", "Ethernet1", P, "victim")].evidence["origin"] == "h1:eth0"
    assert fab.kinds() == {"pfc_storm"}  # no deadlock, no unrelated alerts
    start = origin.start
    # The storm ends: pauses stop, queues drain; findings clear after clear_polls fresh misses.
    for dev, port in [("h1", "eth0"), ("leaf1", "Ethernet49"), ("spine", "Ethernet2"), ("leaf2", "Ethernet1"), ("leaf2", "Ethernet2")]:
        pausing(fab, dev, port, fraction=0.0)
    for dev, port in [("leaf1", "Ethernet1"), ("spine", "Ethernet1"), ("leaf2", "Ethernet49")]:
        fab.eth_port(dev, port)
    fab.poll(n=2)
    assert fab.active() == {}
    ended = {(f.device, f.role): f for f in fab.det.take_finished()}
    assert ended[("h1", "origin")].start == start and ended[("h1", "origin")].end == start + 2


def test_storm_origin_is_switch_port_facing_unmonitored_host():
    fab = two_leaf_fabric(hosts=False)
    fab.poll(n=2)
    host_storm(fab)
    for key in [k for k in fab.rates if k[0] == "h1"]:
        del fab.rates[key], fab.values[key]
    fab.poll(n=2)
    got = fab.active("pfc_storm")
    assert set(got) == {
        ("leaf1", "Ethernet1", P, "origin"),
        ("spine", "Ethernet1", P, "victim"),
        ("leaf2", "Ethernet49", P, "victim"),
    }
    assert got[("leaf1", "Ethernet1", P, "origin")].evidence["origin_peer"] == "h1:eth0"


def test_storm_without_topology_reports_ports_with_no_role():
    fab = two_leaf_fabric()
    fab.topo.set_links("lldp", [])
    fab.poll(n=2)
    stuck(fab, "leaf1", "Ethernet1")
    fab.poll(n=2)
    assert set(fab.active("pfc_storm")) == {("leaf1", "Ethernet1", P, None)}


def test_watchdog_storm_is_raised_in_one_poll():
    fab = two_leaf_fabric()
    fab.rate("leaf1", "Ethernet1", "pfc_watchdog_storms", 0.0, (P,))
    fab.poll(n=2)
    fab.bump("leaf1", "Ethernet1", "pfc_watchdog_storms", 1, (P,))
    fab.rate("leaf1", "Ethernet1", "pfc_watchdog_drops", 5000.0, (P,))
    fab.rate("leaf1", "Ethernet1", "queue_tx_packets", 0.0, (P,))  # drop mode: the queue's packets are dropped
    fab.poll()
    got = fab.active("pfc_storm")
    # h1 has telemetry: it is the pauser, so it is the origin, even though its counters
    # show nothing (a stalled NIC may not count its own pause frames). leaf1 Ethernet1 is
    # the other end of the origin's cable: its watchdog event is the origin's evidence, not a victim.
    assert set(got) == {("h1", "eth0", P, "origin")}
    origin = got[("h1", "eth0", P, "origin")]
    assert origin.severity == "critical" and origin.evidence["watchdog"].startswith("acted: 1 storm event(s)")
    assert origin.evidence["origin_peer"] == "leaf1:Ethernet1"


def test_watchdog_storm_toward_unmonitored_host_reports_the_switch_port_as_origin():
    fab = two_leaf_fabric(hosts=False)
    fab.rate("leaf1", "Ethernet1", "pfc_watchdog_storms", 0.0, (P,))
    fab.poll(n=2)
    fab.bump("leaf1", "Ethernet1", "pfc_watchdog_storms", 1, (P,))
    fab.rate("leaf1", "Ethernet1", "queue_tx_packets", 0.0, (P,))
    fab.poll()
    got = fab.active("pfc_storm")
    assert set(got) == {("leaf1", "Ethernet1", P, "origin")}
    assert got[("leaf1", "Ethernet1", P, "origin")].evidence["origin_peer"] == "h1:eth0"


def test_nic_pause_storm_events_mark_the_origin():
    fab = two_leaf_fabric()
    fab.rate("h2", "eth0", "tx_pause_storm_warning_events", 0.0)
    fab.rate("h2", "eth0", "tx_pause_storm_error_events", 0.0)
    fab.poll(n=2)
    fab.bump("h2", "eth0", "tx_pause_storm_warning_events", 1)
    fab.poll()
    got = fab.active("pfc_storm")
    assert set(got) == {("h2", "eth0", P, "origin")}  # the only lossless priority
    assert got[("h2", "eth0", P, "origin")].severity == "warning"
    fab.bump("h2", "eth0", "tx_pause_storm_error_events", 1)
    fab.poll()
    assert fab.active("pfc_storm")[("h2", "eth0", P, "origin")].severity == "critical"


def test_s2b_frames_only_needs_three_polls():
    fab = two_leaf_fabric()
    for dev, port in [("leaf1", "Ethernet1")]:
        for c in ("pfc_rx_pause_seconds", "pfc_tx_pause_seconds"):
            del fab.rates[(dev, port, c, (P,))], fab.values[(dev, port, c, (P,))]
    fab.topo.set_links("lldp", [])
    fab.poll(n=2)
    # One max-quanta frame holds a 100G port 335 us, so 100e9/(512*65535) = 2980 frames/s keep it
    # paused all the time; 2000/s can have held it two thirds of it at most: no storm.
    fab.rate("leaf1", "Ethernet1", "pfc_rx_pause_frames", 2000.0, (P,))
    fab.rate("leaf1", "Ethernet1", "queue_tx_packets", 0.0, (P,))
    fab.gauge("leaf1", "Ethernet1", "queue_occupancy_bytes", 1e6, (P,))
    fab.poll(n=4)
    assert fab.active("pfc_storm") == {}
    fab.rate("leaf1", "Ethernet1", "pfc_rx_pause_frames", 5960.0, (P,))  # an XOFF refresh every half quanta
    fab.poll(n=2)
    assert fab.active("pfc_storm") == {}
    fab.poll()
    assert set(fab.active("pfc_storm")) == {("leaf1", "Ethernet1", P, None)}
    # XOFF->XON transitions: the port is not continuously paused.
    fab.rate("leaf1", "Ethernet1", "pfc_rx_pause_transitions", 10.0, (P,))
    fab.poll()
    fab.poll(n=2)
    assert fab.active("pfc_storm") == {}


def test_long_interval_raises_in_one_poll():
    fab = two_leaf_fabric()
    fab.topo.set_links("lldp", [])
    fab.poll(dt=10, n=2)
    stuck(fab, "leaf1", "Ethernet1")
    fab.poll(dt=10)
    assert set(fab.active("pfc_storm")) == {("leaf1", "Ethernet1", P, None)}


def test_paused_port_that_still_transmits_is_no_storm():
    fab = two_leaf_fabric()
    fab.poll(n=2)
    stuck(fab, "leaf1", "Ethernet1")
    fab.rate("leaf1", "Ethernet1", "queue_tx_packets", 50.0, (P,))  # a trickle still leaves the queue
    fab.poll(n=4)
    # Not a storm: chronic pause, i.e. congestion, on that port alone.
    assert set(fab.active()) == {("leaf1", "Ethernet1", P, None)}
    assert fab.kinds() == {"congestion"} and fab.det.active[0].severity == "critical"


def test_no_storm_over_link_flap_or_counter_reset():
    fab = two_leaf_fabric()
    fab.topo.set_links("lldp", [])
    fab.poll(n=2)
    # Link flap: down, paused and silent during the interval -> link_degraded only.
    stuck(fab, "leaf1", "Ethernet1")
    fab.bump("leaf1", "Ethernet1", "link_downed", 1)
    fab.gauge("leaf1", "Ethernet1", "link_up", 0)
    fab.poll(n=3)
    assert fab.kinds() == {"link_degraded"}
    fab.eth_port("leaf1", "Ethernet1")
    fab.poll(n=4)
    assert fab.active() == {}
    # Counter reset: the pause counter jumps back to 0 and then the huge "delta" must not count.
    fab.set_value("leaf1", "Ethernet1", "pfc_rx_pause_seconds", 0.0, (P,))
    fab.rate("leaf1", "Ethernet1", "queue_tx_packets", 0.0, (P,))
    fab.gauge("leaf1", "Ethernet1", "queue_occupancy_bytes", 1e6, (P,))
    fab.poll()
    se = fab.store.get("leaf1", "Ethernet1", "pfc_rx_pause_seconds", (P,))
    assert se.delta is None  # reset interval skipped (pause seconds went from 3 to 0)
    fab.poll(n=3)
    assert fab.active() == {}


def ring(n: int = 3) -> Fab:
    """sw0..sw{n-1} in a ring: swI:e1 -> sw{I+1}:e2; every switch also has a host port."""
    links = [(f"sw{i}", "e1", f"sw{(i + 1) % n}", "e2") for i in range(n)]
    links += [(f"sw{i}", "e3", f"host{i}", "eth0") for i in range(n)]
    fab = Fab(links)
    for i in range(n):
        for p in ("e1", "e2", "e3"):
            fab.eth_port(f"sw{i}", p)
    return fab


def test_deadlock_cycle_members_raised_on_poll_two_and_no_storm():
    fab = ring(3)
    fab.poll(n=2)
    for i in range(3):
        stuck(fab, f"sw{i}", "e1")
        pausing(fab, f"sw{i}", "e2")
    fab.poll()
    assert fab.active() == {}
    fab.poll()
    got = fab.active("pfc_deadlock")
    assert set(got) == {(f"sw{i}", "e1", P, "member") for i in range(3)}
    assert got[("sw0", "e1", P, "member")].evidence["cycle"] == ["sw0:e1", "sw1:e1", "sw2:e1"]
    assert fab.kinds() == {"pfc_deadlock"}


def test_cycle_with_one_member_still_transmitting_is_no_deadlock():
    fab = ring(3)
    fab.poll(n=2)
    for i in range(3):
        stuck(fab, f"sw{i}", "e1")
        pausing(fab, f"sw{i}", "e2")
    fab.rate("sw1", "e1", "queue_tx_packets", 1000.0, (P,))
    fab.poll(n=4)
    assert "pfc_deadlock" not in fab.kinds()


def test_watchdogs_firing_around_a_cycle_raise_deadlock_in_one_poll():
    fab = ring(3)
    for i in range(3):
        fab.rate(f"sw{i}", "e1", "pfc_watchdog_storms", 0.0, (P,))
    fab.poll(n=2)
    for i in range(3):
        fab.bump(f"sw{i}", "e1", "pfc_watchdog_storms", 1, (P,))
        fab.rate(f"sw{i}", "e1", "queue_tx_packets", 0.0, (P,))  # the watchdogs drop what the queues hold
    fab.poll()
    got = fab.active("pfc_deadlock")
    assert set(got) == {(f"sw{i}", "e1", P, "member") for i in range(3)}
    assert got[("sw2", "e1", P, "member")].evidence["watchdog_broken"] is True
    assert "pfc_storm" not in fab.kinds()


def test_heavy_incast_with_partial_pauses_raises_nothing_pfc():
    fab = ring(4)
    fab.poll(n=2)
    # Every ring port is paused 90 % of the time with full queues, yet keeps transmitting.
    for i in range(4):
        fab.rate(f"sw{i}", "e1", "pfc_rx_pause_seconds", 0.9, (P,))
        fab.gauge(f"sw{i}", "e1", "queue_occupancy_bytes", 5e6, (P,))
        pausing(fab, f"sw{i}", "e2", fraction=0.9)
    fab.poll(n=6)
    assert not fab.kinds() & {"pfc_storm", "pfc_deadlock"}


def test_pause_fraction_bounds_progress_when_only_port_tx_is_known():
    """No per-queue counter, and other priorities keep the port busy (port TX 40 % of line):
    a priority paused 99.8 % of the time sent at most 0.2 % of line rate on it, below the 1 %
    progress floor, so it is stuck; paused 97 % it may still have moved: no storm."""
    for fraction, expect in ((0.998, True), (0.97, False)):
        fab = Fab()
        fab.eth_port("sw", "Ethernet1", tx_rate=5e9, qtx=None, occupancy=None)
        fab.poll(dt=10.0, n=2)
        fab.rate("sw", "Ethernet1", "pfc_rx_pause_seconds", fraction, (P,))
        fab.rate("sw", "Ethernet1", "pfc_rx_pause_frames", 3000.0, (P,))
        fab.poll(dt=10.0)
        assert bool(fab.active("pfc_storm")) is expect, fraction


def test_storm_end_seen_by_one_switch_first_leaves_no_phantom_origin():
    """Targets are polled one after another. When the storm ends, leaf1 reports it first while
    the spine's last reading still shows its port toward leaf1 paused: leaf1's own fresh
    counters (it no longer sends pause) overrule that stale edge, so no new origin appears."""
    fab = two_leaf_fabric()
    fab.poll(dt=10.0, n=2)
    host_storm(fab)
    fab.poll(dt=10.0, n=3)
    assert ("h1", "eth0", P, "origin") in fab.active("pfc_storm")
    for dev, port in [("h1", "eth0"), ("leaf1", "Ethernet49"), ("spine", "Ethernet2"), ("leaf2", "Ethernet1"), ("leaf2", "Ethernet2")]:
        pausing(fab, dev, port, fraction=0.0)
    for dev, port in [("leaf1", "Ethernet1"), ("spine", "Ethernet1"), ("leaf2", "Ethernet49")]:
        fab.eth_port(dev, port)
    for _ in range(3):
        fab.poll(dt=10.0, devices={"leaf1", "h1", "h2", "h3", "h4"})
        fab.poll(dt=0.01, devices={"spine"})
        fab.poll(dt=0.01, devices={"leaf2"})
    origins = {(f.device, f.port) for f in fab.raised if f.kind == "pfc_storm" and f.role == "origin"}
    assert origins == {("h1", "eth0")}
    assert fab.active("pfc_storm") == {}


def test_two_opposite_storms_over_one_link_are_two_storms_not_a_deadlock():
    """h1 stalls (its storm climbs leaf1 -> spine -> leaf2) while h3 stalls the other way
    (leaf2 -> spine -> leaf1): both ends of each uplink are stuck AND pausing, so with hairpin
    edges leaf1:Ethernet49 <-> spine:Ethernet1 form a two-port cycle. That cycle drains into
    the two origins' ports (leaf1:Ethernet1, leaf2:Ethernet1, which wait on nothing further),
    so the drain check must explain it by the storms: two origins, no pfc_deadlock."""
    fab = two_leaf_fabric()
    fab.poll(n=2)
    host_storm(fab)  # h1 -> leaf1 -> spine -> leaf2
    pausing(fab, "h3", "eth0")  # and the mirror image: h3 -> leaf2 -> spine -> leaf1
    stuck(fab, "leaf2", "Ethernet1")
    stuck(fab, "spine", "Ethernet2")
    pausing(fab, "spine", "Ethernet1")
    stuck(fab, "leaf1", "Ethernet49")
    fab.poll(n=3)
    assert "pfc_deadlock" not in fab.kinds()
    origins = {(dev, port) for (dev, port, _prio, role) in fab.active("pfc_storm") if role == "origin"}
    assert origins == {("h1", "eth0"), ("h3", "eth0")}
    victims = {(dev, port): f.evidence["origin"] for (dev, port, _p, role), f in fab.active("pfc_storm").items() if role == "victim"}
    # Each uplink port is paused by the storm that flows into it from its peer's side.
    assert victims == {("spine", "Ethernet1"): "h1:eth0", ("leaf2", "Ethernet49"): "h1:eth0",
                       ("spine", "Ethernet2"): "h3:eth0", ("leaf1", "Ethernet49"): "h3:eth0"}
    assert not [f for f in fab.raised if f.kind == "pfc_deadlock"]


def test_pause_left_after_a_storm_is_judged_on_the_time_since_the_storm():
    fab = two_leaf_fabric()
    fab.poll(n=2)
    host_storm(fab)
    fab.poll(n=3)
    assert ("spine", "Ethernet1", P, "victim") in fab.active("pfc_storm")
    # The storm ends; spine Ethernet1 stays paused 10 % of the time by a slow leaf (it sends).
    for dev, port in [("h1", "eth0"), ("leaf1", "Ethernet49"), ("leaf2", "Ethernet1"), ("leaf2", "Ethernet2"),
                      ("spine", "Ethernet2")]:
        pausing(fab, dev, port, fraction=0.0)
    for dev, port in [("leaf1", "Ethernet1"), ("leaf2", "Ethernet49")]:
        fab.eth_port(dev, port)
    fab.eth_port("spine", "Ethernet1")
    fab.rate("spine", "Ethernet1", "pfc_rx_pause_seconds", 0.1, (P,))
    fab.poll(n=6)
    got = fab.active()
    assert set(got) == {("spine", "Ethernet1", P, None)}
    f = got[("spine", "Ethernet1", P, None)]
    # Judged on the pause since the storm (0.1), not a 300 s window holding the storm's 1.0.
    assert f.kind == "congestion" and f.severity == "warning"
    assert f.evidence["rx_pause_fraction"] == pytest.approx(0.1, abs=1e-6)
