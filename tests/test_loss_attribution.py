"""Loss attributed from evidence (issue 27 item 1; agent/detector/analyses/loss.py): a drop is
lossless loss only where a class counter, the port's own traffic or RoCE's own loss counters
put it on a lossless class; otherwise it is counted by stage for the port's page, exported as
``fabricmon_port_unattributed_drops_total``, and is no finding."""

from __future__ import annotations

from fabricmon.core.vocabulary import PriorityMap
from tests.test_rules_sim import two_leaf_fabric

P = 3
LEAF = ("leaf1", "Ethernet1")  # toward host h1
HOST = ("h1", "eth0")


def converged(**kw):
    """two_leaf_fabric with best effort on queue 0 of every switch port beside RoCE."""
    fab = two_leaf_fabric(**kw)
    for dev, port in [("leaf1", "Ethernet1"), ("leaf1", "Ethernet2"), ("leaf2", "Ethernet1"), ("leaf2", "Ethernet2"),
                      ("leaf1", "Ethernet49"), ("leaf2", "Ethernet49")]:
        fab.rate(dev, port, "queue_tx_packets", 5e4, (0,))
    return fab


def drop_once(fab, pk, counter, n, sub=()):
    fab.rate(*pk, counter, 0.0, sub)
    fab.poll(n=2)
    fab.bump(*pk, counter, n, sub)
    fab.poll()
    return fab.active("packet_loss")


def test_a_class_counter_on_a_lossless_class_is_loss_and_on_a_lossy_class_is_not():
    fab = converged()
    assert drop_once(fab, LEAF, "queue_drops", 40, (0,)) == {}
    assert fab.det.analysis("loss").unattributed_at(*LEAF) == ()  # best effort's drops: known, not unknown
    fab.bump(*LEAF, "queue_drops", 7, (P,))
    fab.poll()
    f = fab.active("packet_loss")[(*LEAF, P, None)]
    assert f.evidence["attributed_by"] == ["class"] and "names queue 3, which carries only lossless priority 3" in \
        f.evidence["attribution"]


def test_a_class_shared_by_lossless_and_lossy_priorities_is_unknown():
    # Priority 3 and priority 5 (lossy) ride queue 5: a drop there may be either.
    fab = converged(fabric=PriorityMap((3,), {3: 5}))
    assert drop_once(fab, LEAF, "queue_drops", 12, (5,)) == {}
    [u] = fab.det.analysis("loss").unattributed_at(*LEAF)
    assert u.stage == "egress_queue" and u.counters == ("queue_drops",)


def test_a_port_total_beside_a_lossless_class_drop_joins_it():
    fab = converged()
    fab.rate(*LEAF, "queue_drops", 0.0, ("all",))
    fab.rate(*LEAF, "queue_drops", 0.0, (P,))
    fab.poll(n=2)
    fab.bump(*LEAF, "queue_drops", 30, ("all",))
    fab.bump(*LEAF, "queue_drops", 25, (P,))
    fab.poll()
    f = fab.active("packet_loss")[(*LEAF, P, None)]
    assert f.evidence["dropped_packets"] == 25  # what the class counter puts on priority 3; the total is evidence
    assert "queue_drops (queue all) counted 30 at the same time" in f.evidence["attribution"]
    assert fab.det.analysis("loss").unattributed_at(*LEAF) == ()


def test_class_less_egress_drops_are_corroborated_by_the_receiving_host_only():
    fab = converged()
    fab.rate(*HOST, "out_of_sequence", 0.0)
    fab.rate(*HOST, "packet_seq_err", 0.0)
    fab.rate(*LEAF, "queue_drops", 0.0, ("all",))
    fab.poll(n=2)
    fab.bump(*HOST, "packet_seq_err", 50)  # h1 as a sender saw NAKs: not this egress's loss
    fab.bump(*LEAF, "queue_drops", 20, ("all",))
    fab.poll()
    assert fab.active("packet_loss") == {}
    fab.bump(*HOST, "out_of_sequence", 600)  # h1 as the receiver: RoCE packets went missing on the way
    fab.bump(*LEAF, "queue_drops", 20, ("all",))
    fab.poll()
    f = fab.active("packet_loss")[(*LEAF, P, None)]
    assert f.evidence["attributed_by"] == ["corroboration"] and f.evidence["corroborated_by"] == "h1:eth0"
    assert f.evidence["transport_loss"] == {"out_of_sequence": 600}
    assert "the receiving host h1 eth0 counted RoCE loss" in f.summary


def test_class_less_ingress_drops_are_corroborated_by_the_sending_host():
    fab = converged()
    fab.rate("h1", "eth0", "queue_tx_packets", 5e4, (0,))  # h1 sends best effort too
    fab.rate(*HOST, "local_ack_timeout_err", 0.0)
    assert drop_once(fab, LEAF, "ingress_buffer_overflow_drops", 9) == {}
    fab.bump(*HOST, "local_ack_timeout_err", 4)
    fab.bump(*LEAF, "ingress_buffer_overflow_drops", 9)
    fab.poll()
    f = fab.active("packet_loss")[(*LEAF, P, None)]
    assert "the sending host h1 eth0" in f.evidence["attribution"]


def test_a_nic_that_receives_only_roce_puts_its_class_less_drops_on_roce():
    fab = converged()
    for p in (0, P):
        fab.rate(*HOST, "prio_rx_bytes", 0.0 if p == 0 else 4e9, (p,))
    f = drop_once(fab, HOST, "rx_discards_phy", 300)[(*HOST, P, None)]
    assert f.evidence["attributed_by"] == ["traffic"] and f.evidence["lossy_share"] == 0.0
    assert "bytes received per priority of h1 eth0" in f.evidence["attribution"]
    fab.rate(*HOST, "prio_rx_bytes", 1e9, (0,))  # a converged NIC: the same counter cannot tell
    fab.poll(n=3)
    fab.bump(*HOST, "rx_discards_phy", 300)
    fab.poll()
    assert fab.active("packet_loss") == {}
    [u] = fab.det.analysis("loss").unattributed_at(*HOST)
    assert u.stage == "nic" and u.total == 300 and "rx_prio<p>_buf_discard" in u.would_tell


def test_a_nic_s_per_priority_buffer_drops_name_their_class():
    fab = converged()
    fab.rate(*HOST, "prio_rx_buffer_drops", 0.0, (P,))
    assert drop_once(fab, HOST, "prio_rx_buffer_drops", 40, (0,)) == {}
    fab.bump(*HOST, "prio_rx_buffer_drops", 6, (P,))
    fab.poll()
    assert set(fab.active("packet_loss")) == {(*HOST, P, None)}


def test_unattributed_drops_are_exported_as_a_counter_by_stage():
    fab = converged()
    fab.rate(*LEAF, "queue_drops", 0.0, ("all",))
    fab.poll(n=2)
    for n in (10, 15):
        fab.bump(*LEAF, "queue_drops", n, ("all",))
        fab.poll()
    [fam] = [f for f in fab.det.families() if f.name == "fabricmon_port_unattributed_drops_total"]
    assert fam.type == "counter"
    assert fam.lines == ['fabricmon_port_unattributed_drops_total{device="leaf1",port="Ethernet1",stage="egress_queue"} 25']
    [u] = fab.det.analysis("loss").unattributed_at(*LEAF)
    assert (u.total, u.last, u.rate, u.interval_s, u.stage_words) == (25, 15, 15.0, 1.0, "egress queue")
    assert fab.active("packet_loss") == {}
