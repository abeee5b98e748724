"""WJH buffer drops by traffic class, from the NVUE parser through packet_loss: a drop on a
lossless class is a lossless violation, a drop on a lossy class is not, and a record without
its class is placed by the port's own traffic (the loss analysis) or not at all."""

from __future__ import annotations

from fabricmon.collectors.nvue.parse import NvueState, parse_payload
from fabricmon.core.model import TargetSpec
from fabricmon.core.vocabulary import PriorityMap
from tests.test_rules_sim import two_leaf_fabric

PORT = ("leaf2", "Ethernet1")


def wjh_subs(*records: dict) -> dict[tuple, int]:
    body = [{"AggCount": n, "DropType": "Buffer", "ReasonId": 503, "EgressPort": PORT[1], "EndTimestamp": 100,
             **({"traffic_class": tc} if tc is not None else {})} for n, tc in records]
    res, _ = parse_payload({"responses": [{"method": "GET", "path": "/nvue_v1/system/wjh/packet-buffer", "status": 200,
                                        "body": body}]}, TargetSpec(PORT[0], "nvue"), NvueState())
    return {s.sub: s.value for s in res.counters if s.counter == "wjh_drops"}


def loss_after(sub: tuple, drops: int, fabric: PriorityMap | None = None) -> dict:
    fab = two_leaf_fabric(fabric=fabric)
    fab.rate(*PORT, "wjh_drops", 0.0, sub)
    fab.poll(n=2)
    fab.bump(*PORT, "wjh_drops", drops, sub)
    fab.poll()
    return fab.active("packet_loss")


def test_parser_labels_match_what_packet_loss_reads():
    assert wjh_subs((12, 3), (5, 1), (2, None)) == {("buffer", "503", "3"): 12, ("buffer", "503", "1"): 5,
                                                    ("buffer", "503", ""): 2}


def test_lossless_class_drop_is_critical_with_its_priority():
    got = loss_after(("buffer", "503", "3"), 12)
    f = got[(*PORT, 3, None)]
    assert f.severity == "critical" and f.evidence["wjh_buffer_drops"] == {"503": 12}
    assert f.evidence["wjh_traffic_classes"] == ["3"] and "lossless priority 3" in f.summary


def test_lossy_class_drop_is_not_a_lossless_violation():
    assert loss_after(("buffer", "503", "1"), 500) == {}


def test_unknown_class_drop_is_placed_by_the_port_s_traffic():
    # The record names no traffic class: the port's queues decide. It carries priority 3 only
    # here (two_leaf_fabric), so the drop is lossless loss on priority 3, placed by its traffic.
    got = loss_after(("buffer", "504", ""), 7)
    assert set(got) == {(*PORT, 3, None)} and got[(*PORT, 3, None)].evidence["wjh_buffer_drops"] == {"504": 7}
    assert got[(*PORT, 3, None)].evidence["attributed_by"] == ["traffic"]


def test_unknown_class_drop_on_a_converged_port_is_no_finding():
    fab = two_leaf_fabric()
    fab.rate(*PORT, "queue_tx_packets", 5e4, (0,))  # best effort shares the port
    fab.rate(*PORT, "wjh_drops", 0.0, ("buffer", "504", ""))
    fab.poll(n=2)
    fab.bump(*PORT, "wjh_drops", 7, ("buffer", "504", ""))
    fab.poll()
    assert fab.active("packet_loss") == {}
    assert [u.stage for u in fab.det.analysis("loss").unattributed_at(*PORT)] == ["wjh"]


def test_priority_to_queue_maps_the_lossless_class():
    # The config's fabric: {lossless_priorities: [3], priority_to_queue: {3: 5, 5: 3}}
    layout = PriorityMap((3,), {3: 5, 5: 3})
    assert set(loss_after(("buffer", "503", "5"), 4, layout)) == {(*PORT, 3, None)}
    assert loss_after(("buffer", "503", "3"), 4, layout) == {}  # class 3 is not priority 3's queue here
