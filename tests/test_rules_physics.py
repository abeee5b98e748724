"""The rules under documented fabric physics the rule corpus does not have: loops that leak
through head-of-queue discards, 32-bit XmitWait stuck at its cap, storms that spread in
grades and reach hosts the agent does not poll, PFC deadlocks that watchdogs keep breaking,
and lossless loss at every stage, read through the vocabulary and the fabric layout."""

from __future__ import annotations

import pytest

from fabricmon.agent.config import ConfigError, load_text
from fabricmon.agent.replay import replay_recording
from fabricmon.core.vocabulary import PriorityMap
from tests.conftest import ROOT
from tests.test_rules_ib import FULL_WAIT, ib_ring
from tests.test_rules_pfc import pausing, ring, stuck
from tests.test_rules_sim import G400, Fab, two_leaf_fabric

P = 3


# ----------------------------------------------------------------- InfiniBand
def leak(fab: Fab, dev: str, port: str, wait: float, sent_share: float) -> None:
    """A loop member that leaks: waits ``wait`` of the time, sends ``sent_share`` of line rate."""
    fab.rate(dev, port, "xmit_wait", FULL_WAIT * wait)
    fab.rate(dev, port, "tx_bytes", G400 * sent_share, scale=4)
    fab.rate(*fab.topo.peer(dev, port), "rx_bytes", G400 * sent_share, scale=4)


def test_a_leaking_credit_loop_is_one_loop_within_two_polls_and_no_congestion():
    # Per poll each member waits 70-100 % and sends a trickle (HOQ lifetime frees a packet now
    # and then): no member passes the frozen-stall test (>= 95 %, < 1 % of line rate).
    fab = ib_ring(4)
    fab.poll(n=2)
    for i, (wait, share) in enumerate([(0.72, 0.015), (0.80, 0.02), (0.91, 0.004), (0.75, 0.012)]):
        leak(fab, f"sw{i}", "1", wait, share)
    fab.poll(n=2)
    got = fab.active("credit_deadlock")
    assert set(got) == {(f"sw{i}", "1", None, "member") for i in range(4)}
    ev = got[("sw0", "1", None, "member")].evidence
    assert ev["members"]["sw1:1"]["sent_line_fraction"] == 0.02 and ev["members"]["sw1:1"]["xmit_wait_fraction"] == 0.8
    assert "72%-91%" in got[("sw0", "1", None, "member")].summary
    fab.poll(n=3)
    assert fab.kinds() == {"credit_deadlock"}  # the loop's wait is not separate congestion


def test_a_ring_that_waits_but_moves_its_data_is_no_loop():
    fab = ib_ring(4)
    fab.poll(n=2)
    for i in range(4):
        leak(fab, f"sw{i}", "1", 0.6, 0.35)  # congested by load: what it does not wait for, it sends
    fab.poll(n=5)
    assert "credit_deadlock" not in fab.kinds()


def test_a_quiet_ring_with_stray_waits_is_no_loop():
    # Lightly loaded: 3 % of line rate each way and a few waits. The cable peers receive little,
    # but that is the load, not blocking: without the wait itself or discards there is no loop.
    fab = ib_ring(4)
    fab.poll(n=2)
    for i in range(4):
        leak(fab, f"sw{i}", "1", 0.02, 0.03)
    fab.poll(n=5)
    assert fab.active() == {}


def test_xmit_wait_at_its_32bit_cap_and_discards_still_find_the_stall():
    # Old firmware: only the 32-bit PortXmitWait, already at its cap before the stall, so it no
    # longer moves. Head-of-queue discards show the port holds data; its peer receives nothing.
    fab = ib_ring(3)
    fab.rate("sw1", "3", "xmit_wait", 0.0, bits=32, saturating=True)
    fab.set_value("sw1", "3", "xmit_wait", 2**32 - 1)
    fab.poll(n=2)
    fab.rate("sw1", "3", "tx_bytes", 0.0, scale=4)
    fab.rate("hca1", "1", "rx_bytes", 0.0, scale=4)
    fab.rate("sw1", "3", "tx_discards", 40.0)
    fab.poll(n=2)
    stall = fab.active("credit_deadlock")[("sw1", "3", None, "stalled")]
    assert stall.severity == "critical" and stall.evidence["xmit_wait_at_cap"] is True
    assert "hca1" in stall.evidence["blocked_because"][0]
    loss = fab.active("packet_loss")[("sw1", "3", None, None)]
    assert loss.evidence["incident"] == stall.evidence["incident"] == "stall:sw1:3"


# ----------------------------------------------------------------- PFC storms and deadlocks
def partly(fab: Fab, dev: str, port: str, fraction: float) -> None:
    """Paused ``fraction`` of the time by its peer, queue holding data, still transmitting."""
    fab.rate(dev, port, "pfc_rx_pause_seconds", fraction, (P,))
    fab.rate(dev, port, "pfc_rx_pause_frames", 3000.0 * fraction, (P,))
    fab.gauge(dev, port, "queue_occupancy_bytes", 1e6, (P,))


def test_a_graded_storm_covers_what_it_reaches_including_unpolled_hosts():
    # h1 (not polled) stalls: leaf1 Ethernet1 is stuck facing it; the spine's port to leaf1 is
    # paused 90 %, leaf2's uplink 55 %, and leaf1 pauses its other host h2 40 % of the time.
    fab = two_leaf_fabric(hosts=False)
    fab.poll(n=2)
    stuck(fab, "leaf1", "Ethernet1")
    pausing(fab, "leaf1", "Ethernet49", fraction=0.9)
    partly(fab, "spine", "Ethernet1", 0.9)
    pausing(fab, "spine", "Ethernet2", fraction=0.55)
    partly(fab, "leaf2", "Ethernet49", 0.55)
    pausing(fab, "leaf1", "Ethernet2", fraction=0.4)
    fab.poll(n=3)
    got = fab.active("pfc_storm")
    assert set(got) == {("leaf1", "Ethernet1", P, "origin"), ("spine", "Ethernet1", P, "victim"),
                        ("leaf2", "Ethernet49", P, "victim")}
    origin = got[("leaf1", "Ethernet1", P, "origin")].evidence
    assert origin["victims_lost"]["spine:Ethernet1"].startswith("paused 90% of the interval")
    assert "h2:eth0" in origin["also_paused"] and "not polled" in origin["also_paused"]["h2:eth0"]
    assert fab.kinds() == {"pfc_storm"}  # the storm's pause is not also congestion


def test_a_victim_whose_grade_dips_below_a_majority_stays_one_finding():
    fab = two_leaf_fabric(hosts=False)
    fab.poll(n=2)
    stuck(fab, "leaf1", "Ethernet1")
    pausing(fab, "leaf1", "Ethernet49", fraction=0.9)
    partly(fab, "spine", "Ethernet1", 0.9)
    pausing(fab, "spine", "Ethernet2", fraction=0.6)
    partly(fab, "leaf2", "Ethernet49", 0.6)
    fab.poll(n=2)
    first = fab.active("pfc_storm")[("leaf2", "Ethernet49", P, "victim")]
    for fraction in (0.42, 0.65, 0.45, 0.45):
        partly(fab, "leaf2", "Ethernet49", fraction)
        fab.poll()
        assert fab.active("pfc_storm")[("leaf2", "Ethernet49", P, "victim")] is first
    assert "congestion" not in fab.kinds()


def test_a_pfc_deadlock_that_watchdogs_keep_breaking_stays_one_deadlock():
    fab = ring(3)
    for i in range(3):
        fab.rate(f"sw{i}", "e1", "pfc_watchdog_storms", 0.0, (P,))
    fab.poll(n=2)
    for i in range(3):
        stuck(fab, f"sw{i}", "e1")
        pausing(fab, f"sw{i}", "e2")
    fab.poll(n=2)
    got = fab.active("pfc_deadlock")
    assert set(got) == {(f"sw{i}", "e1", P, "member") for i in range(3)}
    # A watchdog on sw1 drains its queue for a while, then the loop re-forms: sw1 is paused
    # 70 % of the next interval and sends some, the others stay stuck.
    # Polls 10 s apart, so the watchdog event is out of the watchdog window by the next one.
    fab.bump("sw1", "e1", "pfc_watchdog_storms", 1, (P,))
    fab.poll(dt=10.0)
    partly(fab, "sw1", "e1", 0.7)
    fab.rate("sw1", "e1", "queue_tx_packets", 2000.0, (P,))
    for _ in range(3):
        fab.poll(dt=10.0)
        assert set(fab.active("pfc_deadlock")) == set(got)
    assert fab.active("pfc_deadlock")[("sw0", "e1", P, "member")].evidence["recovery_cycling"] is True
    assert "pfc_storm" not in fab.kinds()


def watchdog_cycling(fab: Fab, dev: str, port: str, paused: float, fired: int) -> None:
    """A deadlock member whose watchdog breaks the cycle ``fired`` times per second and which
    is paused ``paused`` of the time in between (the cycle re-forms); it pauses its upstream
    in turn (``e2`` of the ring), its queue holds data. No per-queue transmit progress."""
    fab.rate(dev, port, "pfc_rx_pause_seconds", paused, (P,))
    fab.rate(dev, port, "pfc_rx_pause_frames", 3000.0 * paused, (P,))
    fab.rate(dev, port, "pfc_watchdog_storms", float(fired), (P,))
    fab.rate(dev, port, "queue_tx_packets", 0.0, (P,))  # nothing the loop carries is delivered
    fab.gauge(dev, port, "queue_occupancy_bytes", 1.5e6, (P,))
    fab.rate(dev, "e2", "pfc_tx_pause_seconds", paused, (P,))
    fab.rate(dev, "e2", "pfc_tx_pause_frames", 3000.0 * paused, (P,))


def test_what_waits_behind_a_watchdog_cycled_deadlock_is_the_deadlock_s_pause():
    # Each member's watchdog fires about twice a second (SONiC defaults: 200 ms detection,
    # 200 ms restoration), so the members are paused only ~45 % of each poll; the hosts
    # sending into the loop are paused 30 % by their switch port. One deadlock, no congestion
    # for the hosts' pause, no storm.
    fab = ring(3)
    for i in range(3):
        fab.rate(f"sw{i}", "e1", "pfc_watchdog_storms", 0.0, (P,))
    fab.poll(dt=10.0, n=2)
    for i in range(3):
        watchdog_cycling(fab, f"sw{i}", "e1", 0.45, 2)
        pausing(fab, f"sw{i}", "e3", fraction=0.3)  # the switch pauses its host: unpolled
    for _ in range(8):
        fab.poll(dt=10.0)
        assert set(fab.active("pfc_deadlock")) == {(f"sw{i}", "e1", P, "member") for i in range(3)}
    assert fab.kinds() == {"pfc_deadlock"}
    assert fab.active("pfc_deadlock")[("sw0", "e1", P, "member")].evidence["watchdog_broken"] is True


def test_a_deadlock_ending_seen_by_one_switch_first_leaves_no_phantom_storm():
    """Targets are polled one after another: when the loop ends, sw0 reports it first, twice
    (sw1's and sw2's next polls time out once), while their last polls still show the
    watchdog-cycled pause. sw0's fresh counters (it no longer pauses sw1, nor is paused)
    overrule those stale edges, watchdog events included: no storm origin appears where the
    deadlock was."""
    fab = ring(3)
    for i in range(3):
        fab.rate(f"sw{i}", "e1", "pfc_watchdog_storms", 0.0, (P,))
    fab.poll(dt=10.0, n=2)
    for i in range(3):
        watchdog_cycling(fab, f"sw{i}", "e1", 0.45, 2)
    fab.poll(dt=10.0, n=3)
    assert len(fab.active("pfc_deadlock")) == 3
    for i in range(3):
        watchdog_cycling(fab, f"sw{i}", "e1", 0.0, 0)
    fab.poll(dt=10.0, devices={"sw0", "host0"}, n=2)
    for _ in range(3):
        fab.poll(dt=0.01, devices={"sw1", "host1"})
        fab.poll(dt=0.01, devices={"sw2", "host2"})
        fab.poll(dt=10.0, devices={"sw0", "host0"})
    assert not [f for f in fab.raised if f.kind == "pfc_storm"]
    assert fab.active() == {}


# ----------------------------------------------------------------- lossless loss, every stage
def test_ingress_pg_drops_map_through_priority_to_pg():
    fab = two_leaf_fabric(fabric=PriorityMap((3,), {}, {3: 1}))
    fab.rate("leaf1", "Ethernet49", "pg_no_buffer_drops", 0.0, (1,))
    fab.rate("leaf1", "Ethernet49", "pg_no_buffer_drops", 0.0, (3,))
    fab.poll(n=2)
    fab.bump("leaf1", "Ethernet49", "pg_no_buffer_drops", 25, (3,))  # PG 3 holds a lossy priority here
    fab.poll()
    assert fab.active("packet_loss") == {}
    fab.bump("leaf1", "Ethernet49", "pg_no_buffer_drops", 25, (1,))
    fab.poll()
    f = fab.active("packet_loss")[("leaf1", "Ethernet49", P, None)]
    assert f.evidence["pg_no_buffer_drops"] == 25 and f.evidence["pg"] == 1 and f.evidence["stages"] == ["ingress_pg"]
    assert "ingress priority-group buffer 1" in f.summary and "headroom" in f.summary


def test_a_port_total_drop_is_lossless_only_where_the_traffic_says_so():
    # clBufferOverflowDiscards names no class. On a port whose ingress carried best effort too (its
    # peer's queue 0 transmits) it is loss of an unknown class: no finding, counted by stage; once
    # the peer sends priority 3 only, the same drop is lossless loss on priority 3.
    fab = two_leaf_fabric()
    fab.rate("leaf1", "Ethernet1", "ingress_buffer_overflow_drops", 0.0)
    fab.rate("h1", "eth0", "queue_tx_packets", 4e5, (0,))
    fab.rate("h1", "eth0", "queue_tx_packets", 1e5, (P,))
    fab.poll(n=2)
    fab.bump("leaf1", "Ethernet1", "ingress_buffer_overflow_drops", 9)
    fab.poll()
    assert fab.active("packet_loss") == {}
    [u] = fab.det.analysis("loss").unattributed_at("leaf1", "Ethernet1")
    assert (u.stage, u.total, u.last) == ("ingress_port", 9, 9) and "80.0%" in u.why
    fab.rate("h1", "eth0", "queue_tx_packets", 0.0, (0,))
    fab.poll()
    fab.bump("leaf1", "Ethernet1", "ingress_buffer_overflow_drops", 5)
    fab.poll()
    f = fab.active("packet_loss")[("leaf1", "Ethernet1", P, None)]
    assert f.evidence["ingress_buffer_overflow_drops"] == 5 and f.evidence["attributed_by"] == ["traffic"]
    assert "h1 eth0" in f.evidence["attribution"]


def test_the_fabric_section_maps_queues_for_every_rule_in_a_replay():
    # Priority 3 rides traffic class 5 (and lossy priority 5 rides TC 3): with the layout, the
    # TC 5 no-buffer drops are lossless loss and the TC 3 tail drops are not.
    path = ROOT / "tests" / "scenarios_physics" / "nonidentity_priority_map.jsonl.gz"
    cfg = load_text("fabric:\n  priority_to_queue: {3: 5, 5: 3}\n", "layout.yml")
    loss = {(f.device, f.port, f.priority) for f in replay_recording(path, cfg).findings if f.kind == "packet_loss"}
    assert loss == {("leaf02", "Ethernet2", 3)}
    identity = {(f.device, f.port) for f in replay_recording(path).findings if f.kind == "packet_loss"}
    assert ("leaf02", "Ethernet2") not in identity  # assuming identity misses it: the layout is needed


def test_a_layout_key_under_a_rule_is_an_error_at_that_key():
    # The layout before ``fabric:`` existed (keys under one rule) is gone: one fabric: section.
    with pytest.raises(ConfigError) as err:
        load_text("fabric:\n  priority_to_queue: {3: 5}\nrules:\n  packet_loss: {lossless_priorities: [3, 4]}\n", "old.yml")
    [problem] = err.value.problems
    assert problem.startswith("old.yml:4:17: rules.packet_loss.lossless_priorities: ") and "under fabric:" in problem
