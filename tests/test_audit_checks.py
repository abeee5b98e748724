"""The lossless-fabric checklist (agent/detector/checklist.py) and the misconfig rule, on store
contents built through the store's public API: every check passes on a clean fabric, fails when
one setting is broken, and is unknown (never pass) when an input is absent."""

from __future__ import annotations

import pytest

from fabricmon.agent.detector import DetectContext, Detector
from fabricmon.agent.detector import checklist as cl
from fabricmon.agent.detector.rules import build
from fabricmon.agent.detector.rules.misconfig import MisconfigRule
from fabricmon.agent.store import CounterStore
from fabricmon.core.model import DeviceInfo, Gauge, Link, Sample
from fabricmon.core.topology import Topology
from fabricmon.core.vocabulary import PriorityMap

PMAP = PriorityMap()  # lossless priority 3, identity queue and PG maps
# Onyx "show roce" defaults: ECN min 150 KB; an XOFF well above it; mlxsw's 100G headroom (102528 B).
ECN_MIN, ECN_MAX, XOFF, HEADROOM = 150_000, 1_500_000, 500_000, 102_528
HOST, LEAF, SPINE = "host01", "leaf01", "spine01"
HOST_PORT, LEAF_DOWN, LEAF_UP, SPINE_PORT = (HOST, "mlx5_0/1"), (LEAF, "swp1"), (LEAF, "swp49"), (SPINE, "swp1")


def switch_port(device: str, port: str) -> dict[tuple[str, tuple], float]:
    g: dict[tuple[str, tuple], float] = {("pfc_enabled", (p,)): float(p == 3) for p in range(8)}
    g.update({("pfc_watchdog_enabled", (3,)): 1, ("ecn_enabled", (3,)): 1, ("ecn_min_threshold_bytes", (3,)): ECN_MIN,
              ("ecn_max_threshold_bytes", (3,)): ECN_MAX, ("pfc_xoff_threshold_bytes", (3,)): XOFF,
              ("headroom_bytes", (3,)): HEADROOM, ("qos_trust_dscp", ()): 1, ("dscp_priority", (26,)): 3,
              ("dscp_priority", (48,)): 6})
    return g


def host_port() -> dict[tuple[str, tuple], float]:
    g: dict[tuple[str, tuple], float] = {("pfc_enabled", (p,)): float(p == 3) for p in range(8)}
    g.update({("nic_ecn_enabled", (3, "np")): 1, ("nic_ecn_enabled", (3, "rp")): 1, ("qos_trust_dscp", ()): 1,
              ("dscp_priority", (26,)): 3})
    return g


class Fabric:
    """host01 -- leaf01 swp1 | leaf01 swp49 -- spine01 swp1, every setting as the RoCE guides have it."""

    def __init__(self) -> None:
        self.store = CounterStore()
        self.topology = Topology()
        self.topology.set_static([Link(*HOST_PORT, *LEAF_DOWN), Link(*LEAF_UP, *SPINE_PORT)])
        self.store.set_devices([DeviceInfo(HOST, kind="host"), DeviceInfo(LEAF), DeviceInfo(SPINE)])
        self.config = {HOST_PORT: host_port(), LEAF_DOWN: switch_port(*LEAF_DOWN), LEAF_UP: switch_port(*LEAF_UP),
                       SPINE_PORT: switch_port(*SPINE_PORT)}

    def set(self, pk: tuple[str, str], name: str, sub: tuple, value: float | None) -> Fabric:
        if value is None:
            self.config[pk].pop((name, sub))
        else:
            self.config[pk][(name, sub)] = value
        return self

    def poll(self, t: float, samples: list[Sample] = ()) -> set:
        gauges = [Gauge(pk[0], pk[1], name, v, sub) for pk, g in self.config.items() for (name, sub), v in g.items()]
        return self.store.update(samples, t, gauges=gauges)

    def check(self) -> list[cl.Result]:
        return cl.run(cl.FabricView(self.store, self.topology, PMAP))


def by(results: list[cl.Result], check: str) -> list[cl.Result]:
    return [r for r in results if r.check == check]


def test_clean_fabric_passes_every_check() -> None:
    f = Fabric()
    f.poll(100.0)
    results = f.check()
    assert {r.status for r in results} == {cl.PASS}, [r.summary for r in results if r.status != cl.PASS]
    counts = cl.counts(results)
    assert all(n[cl.PASS] > 0 for n in counts.values()), counts  # every check was actually verified
    assert counts["trust_mismatch"][cl.PASS] == 1  # the one host link; switch-switch links have no trust check
    assert counts["pfc_priorities_mismatch"][cl.PASS] == 2
    assert not [r for r in results if r.device == HOST and r.check in ("pfc_watchdog_off", "headroom_missing", "ecn_after_pfc")]


# (what to break, the one failure to fix that must result: check, device, port, priority)
BROKEN = [
    pytest.param(HOST_PORT, "pfc_enabled", (3,), 0, ("pfc_not_enabled", HOST, "mlx5_0/1", 3), id="pfc_not_enabled-host"),
    pytest.param(LEAF_UP, "pfc_enabled", (3,), 0, ("pfc_not_enabled", LEAF, "swp49", 3), id="pfc_not_enabled-uplink"),
    pytest.param(LEAF_DOWN, "pfc_enabled", (4,), 1, ("pfc_on_lossy_priority", LEAF, "swp1", 4), id="pfc_on_lossy_priority"),
    pytest.param(LEAF_UP, "ecn_enabled", (3,), 0, ("ecn_not_enabled", LEAF, "swp49", 3), id="ecn_not_enabled-switch"),
    pytest.param(HOST_PORT, "nic_ecn_enabled", (3, "rp"), 0, ("ecn_not_enabled", HOST, "mlx5_0/1", 3), id="ecn_not_enabled-nic"),
    pytest.param(SPINE_PORT, "ecn_min_threshold_bytes", (3,), XOFF, ("ecn_after_pfc", SPINE, "swp1", 3), id="ecn_after_pfc"),
    pytest.param(SPINE_PORT, "pfc_watchdog_enabled", (3,), 0, ("pfc_watchdog_off", SPINE, "swp1", 3), id="pfc_watchdog_off"),
    pytest.param(LEAF_UP, "headroom_bytes", (3,), 0, ("headroom_missing", LEAF, "swp49", 3), id="headroom_missing"),
    pytest.param(HOST_PORT, "qos_trust_dscp", (), 0, ("trust_mismatch", HOST, "mlx5_0/1", None), id="trust_mismatch-mode"),
    pytest.param(HOST_PORT, "dscp_priority", (26,), 0, ("trust_mismatch", HOST, "mlx5_0/1", None), id="trust_mismatch-map"),
]


@pytest.mark.parametrize(("pk", "name", "sub", "value", "expected"), BROKEN)
def test_one_broken_setting_is_the_one_failure_to_fix(pk, name, sub, value, expected) -> None:
    f = Fabric().set(pk, name, sub, value)
    f.poll(100.0)
    results = f.check()
    bad = [(r.check, r.device, r.port, r.priority) for r in cl.failing(results)]
    assert bad == [expected]
    r = next(cl.failing(results))
    assert r.evidence["check"] == expected[0]
    assert r.summary and "Fix first" in r.summary
    assert r.peer_device is not None  # every port here is cabled: the other end is named
    assert not [x for x in results if x.status == cl.UNKNOWN]


def test_a_failure_another_explains_fails_but_is_not_reported_twice() -> None:
    """PFC off on the host: the link's PFC sets differ too, which the port check explains."""
    f = Fabric().set(HOST_PORT, "pfc_enabled", (3,), 0)
    f.poll(100.0)
    mismatch = by(f.check(), "pfc_priorities_mismatch")
    failed = [r for r in mismatch if r.status == cl.FAIL]
    assert len(failed) == 1 and failed[0].priority == 3
    assert failed[0].covered_by == f"pfc_not_enabled {HOST} mlx5_0/1"
    assert not failed[0].reported


def test_pfc_off_explains_watchdog_and_headroom_on_that_priority() -> None:
    f = Fabric().set(SPINE_PORT, "pfc_enabled", (3,), 0).set(SPINE_PORT, "pfc_watchdog_enabled", (3,), 0)
    f.set(SPINE_PORT, "headroom_bytes", (3,), 0)
    f.poll(100.0)
    results = f.check()
    assert [(r.check, r.device) for r in cl.failing(results)] == [("pfc_not_enabled", SPINE)]
    assert {r.check for r in results if r.status == cl.FAIL} == {"pfc_not_enabled", "pfc_watchdog_off", "headroom_missing",
                                                                  "pfc_priorities_mismatch"}


def test_mismatch_seen_through_dcbx_when_the_host_reports_no_pfc() -> None:
    """The host shows no PFC state of its own; the switch's DCBX remote table shows PFC off on 3."""
    f = Fabric()
    for p in range(8):
        f.set(HOST_PORT, "pfc_enabled", (p,), None)
        f.set(LEAF_DOWN, "pfc_peer_enabled", (p,), 0)
    f.poll(100.0)
    results = f.check()
    assert [(r.check, r.device, r.port, r.priority, r.peer_device) for r in cl.failing(results)] == [
        ("pfc_priorities_mismatch", HOST, "mlx5_0/1", 3, LEAF)]
    r = next(cl.failing(results))
    assert r.evidence["ends"][f"{HOST} mlx5_0/1"]["seen"] == f"DCBX as received by {LEAF} swp1"
    # the host's own PFC checks cannot be verified: unknown, not pass
    assert {x.status for x in results if x.device == HOST and x.check in ("pfc_not_enabled", "pfc_on_lossy_priority")} == {cl.UNKNOWN}


@pytest.mark.parametrize(("pk", "name", "sub", "check"), [
    (SPINE_PORT, "pfc_watchdog_enabled", (3,), "pfc_watchdog_off"),
    (LEAF_UP, "headroom_bytes", (3,), "headroom_missing"),
    (LEAF_UP, "pfc_xoff_threshold_bytes", (3,), "ecn_after_pfc"),
    (LEAF_UP, "ecn_enabled", (3,), "ecn_not_enabled"),
    (HOST_PORT, "nic_ecn_enabled", (3, "np"), "ecn_not_enabled"),
    (LEAF_DOWN, "pfc_enabled", (5,), "pfc_on_lossy_priority"),
    (HOST_PORT, "qos_trust_dscp", (), "trust_mismatch"),
    (HOST_PORT, "dscp_priority", (26,), "trust_mismatch"),
])
def test_an_absent_input_is_unknown_never_pass(pk, name, sub, check) -> None:
    f = Fabric().set(pk, name, sub, None)
    f.poll(100.0)
    results = by(f.check(), check)
    link = cl.CHECKS[check].scope == "link"
    mine = [r for r in results if (r.device, r.port) == pk or (link and (r.peer_device, r.peer_port) == pk)]
    assert [r.status for r in mine] == [cl.UNKNOWN]
    assert mine[0].evidence["missing"]
    assert not list(cl.failing(results))


def test_a_link_with_one_end_visible_is_unknown() -> None:
    """leaf01 swp2 faces host02, which nobody polls: its checks are unknown, and nothing fails."""
    f = Fabric()
    f.topology.set_links("lldp", [Link(LEAF, "swp2", "host02", "eth0")])
    f.config[(LEAF, "swp2")] = switch_port(LEAF, "swp2")
    f.poll(100.0)
    results = f.check()
    assert not list(cl.failing(results))
    link = [r for r in results if {(r.device, r.port), (r.peer_device, r.peer_port)} == {(LEAF, "swp2"), ("host02", "eth0")}
            and cl.CHECKS[r.check].scope == "link"]
    # host02 is described by nobody; with one cable it is an end point: a host, so trust is checked too
    assert sorted(r.check for r in link) == ["pfc_priorities_mismatch", "trust_mismatch"]
    assert {r.status for r in link} == {cl.UNKNOWN}
    assert all("host02 eth0" in r.evidence["missing"] for r in link)
    unpolled = [r for r in results if r.device == "host02" and cl.CHECKS[r.check].scope == "port"]
    assert sorted(r.check for r in unpolled) == ["ecn_not_enabled", "pfc_not_enabled", "pfc_on_lossy_priority"]
    assert {r.status for r in unpolled} == {cl.UNKNOWN}  # shown, so the summary counts it as unverified
    assert {r.status for r in results if (r.device, r.port) == (LEAF, "swp2")} == {cl.PASS}


def test_pfc_off_on_an_uncabled_port_depends_on_its_traffic() -> None:
    """Off a cable, PFC off is a failure only where the counters show lossless traffic."""
    f = Fabric()
    f.config[(LEAF, "swp9")] = {**switch_port(LEAF, "swp9"), ("pfc_enabled", (3,)): 0}

    def status(samples: list[Sample]) -> str:
        f.store = CounterStore()
        f.store.set_devices([DeviceInfo(HOST, kind="host"), DeviceInfo(LEAF), DeviceInfo(SPINE)])
        f.poll(100.0, [s for s in samples])
        f.poll(110.0, [Sample(s.device, s.port, s.counter, s.value * 2, s.sub) for s in samples])
        return next(r.status for r in f.check() if (r.device, r.port, r.check) == (LEAF, "swp9", "pfc_not_enabled"))

    assert status([]) == cl.UNKNOWN  # no counter could say whether RoCE crosses it
    assert status([Sample(LEAF, "swp9", "queue_tx_packets", 0, (3,))]) == cl.PASS  # the lossless queue sent nothing
    assert status([Sample(LEAF, "swp9", "queue_tx_packets", 5000, (3,))]) == cl.FAIL


def test_pfc_frames_on_a_lossy_priority_fail_from_behaviour() -> None:
    """No PFC configuration visible, but the port sends pause frames on priority 0."""
    f = Fabric()
    for p in range(8):
        f.set(LEAF_UP, "pfc_enabled", (p,), None)
    f.poll(100.0, [Sample(LEAF, "swp49", "pfc_tx_pause_frames", 10, (0,))])
    assert not [r for r in by(f.check(), "pfc_on_lossy_priority") if r.status == cl.FAIL]  # one reading: no delta yet
    f.poll(110.0, [Sample(LEAF, "swp49", "pfc_tx_pause_frames", 900, (0,))])
    bad = [r for r in cl.failing(f.check()) if r.check == "pfc_on_lossy_priority"]
    assert [(r.device, r.port, r.priority) for r in bad] == [(LEAF, "swp49", 0)]
    assert bad[0].evidence["pfc_frames_sent"] == 890


def ecn_after_pfc_status(polls: int, marks: int = 0, paused: int = 0, ecn_counter: bool = True,
                         pausing_s: float = 0.5) -> cl.Result:
    """leaf01 swp1 sends PFC on priority 3 in every interval of ``polls`` polls (10 s apart),
    keeping its peer paused ``pausing_s`` seconds per interval, with no XOFF threshold visible;
    ``marks``/``paused`` per interval on swp49 (queue 3 ECN marks, PFC received on priority 3)."""
    f = Fabric()
    for pk in (LEAF_DOWN, LEAF_UP):
        f.set(pk, "pfc_xoff_threshold_bytes", (3,), None)
    for i in range(polls):
        samples = [Sample(LEAF, "swp1", "pfc_tx_pause_frames", 1000 * i, (3,)),
                   Sample(LEAF, "swp1", "pfc_tx_pause_seconds", int(pausing_s * 1e6) * i, (3,), scale=1e-6),
                   Sample(LEAF, "swp49", "pfc_rx_pause_frames", paused * i, (3,))]
        if ecn_counter:
            samples.append(Sample(LEAF, "swp49", "ecn_marked_packets", marks * i, (3,)))
        f.poll(100.0 + 10 * i, samples)
    return next(r for r in f.check() if (r.device, r.port, r.check, r.priority) == (LEAF, "swp1", "ecn_after_pfc", 3))


def test_sustained_pfc_without_ecn_marks_fails_ecn_after_pfc_from_behaviour() -> None:
    """The XOFF threshold is not visible, but the leaf paused its host for three intervals while
    no lossless queue of the leaf marked a packet and the leaf itself was never paused."""
    r = ecn_after_pfc_status(polls=4)
    assert r.status == cl.FAIL and r.reported, r.summary
    assert r.evidence["pfc_sent_intervals"] == cl.SUSTAINED_INTERVALS and r.evidence["ecn_marked_packets"] == 0
    assert r.evidence["pfc_tx_pause_frames"] == 1000
    assert r.lossless_traffic  # PFC on the lossless priority is lossless traffic: critical as a finding


@pytest.mark.parametrize(("kwargs", "why"), [
    ({"polls": 3}, "two intervals of PFC are a burst, not sustained"),
    ({"polls": 4, "marks": 50}, "a queue of the lossless class marked: ECN engaged"),
    ({"polls": 4, "paused": 20}, "the leaf was paused itself: a storm or deadlock spreading, not late ECN"),
    ({"polls": 4, "ecn_counter": False}, "no ECN mark counter on the device: zero marks cannot be seen"),
    ({"polls": 4, "pausing_s": 9.9}, "its peer paused 99 % of the time: a storm from this port, not late ECN"),
])
def test_pfc_with_ecn_or_while_paused_is_not_ecn_after_pfc(kwargs, why) -> None:
    r = ecn_after_pfc_status(**kwargs)
    assert r.status == cl.UNKNOWN, why  # the configuration half still lacks the XOFF threshold
    assert r.evidence["missing"] == "pfc_xoff_threshold_bytes"


def test_infiniband_ports_stay_out_of_the_audit() -> None:
    f = Fabric()
    f.topology.set_links("ibnetdiscover", [Link("ib-sw1", "1", "ib-sw2", "1")])
    f.poll(100.0, [Sample("ib-sw1", "1", "xmit_wait", 5, bits=32, saturating=True)])
    ports, links = cl.audit_ports(cl.FabricView(f.store, f.topology, PMAP))
    assert not [pk for pk in ports if pk[0].startswith("ib-")]
    assert len(links) == 2


# ---------------------------------------------------------------------- the misconfig rule
def detect(f: Fabric, det: Detector, t: float, samples: list[Sample] = ()) -> None:
    touched = f.poll(t, samples)
    ctx = DetectContext(store=f.store, topology=f.topology, t=t, updated=touched, updated_devices={d for d, _ in touched},
                        fabric=PMAP)
    det.run(ctx)


def test_rule_raises_at_the_first_poll_and_ends_when_it_clears() -> None:
    f = Fabric().set(LEAF_UP, "pfc_watchdog_enabled", (3,), 0).set(LEAF_UP, "headroom_bytes", (3,), 0)
    det = Detector([MisconfigRule()])
    traffic = [Sample(LEAF, "swp49", "queue_tx_packets", 1000, (3,))]
    detect(f, det, 100.0, traffic)
    found = sorted(det.active, key=lambda x: x.evidence["check"])
    assert [(x.kind, x.device, x.port, x.priority, x.evidence["check"]) for x in found] == [
        ("misconfig", LEAF, "swp49", 3, "headroom_missing"), ("misconfig", LEAF, "swp49", 3, "pfc_watchdog_off")]
    assert all(x.start == 100.0 and x.end is None for x in found)
    assert all((x.peer_device, x.peer_port) == SPINE_PORT for x in found)
    assert {x.severity for x in found} == {"warning"}  # no interval yet: no traffic measured
    detect(f, det, 110.0, [Sample(LEAF, "swp49", "queue_tx_packets", 90_000, (3,))])
    assert {x.severity for x in det.active} == {"critical"}  # lossless traffic crossed the broken port
    f.set(LEAF_UP, "pfc_watchdog_enabled", (3,), 1)
    detect(f, det, 120.0, [Sample(LEAF, "swp49", "queue_tx_packets", 90_000, (3,))])
    ended = det.take_finished()
    assert [(x.evidence["check"], x.end) for x in ended] == [("pfc_watchdog_off", 120.0)]
    assert [x.evidence["check"] for x in det.active] == ["headroom_missing"]


def test_rule_on_a_clean_fabric_raises_nothing_and_counts_what_it_verified() -> None:
    f = Fabric()
    rule = MisconfigRule()
    det = Detector([rule])
    for t in (100.0, 110.0, 120.0):
        detect(f, det, t)
    assert det.active == [] and det.take_finished() == []
    counts, failing = rule.summary()
    assert failing == []
    assert counts == cl.counts(f.check())
    assert {r.status for r in rule.results()} == {cl.PASS}


def test_rule_updates_only_what_a_poll_touched_and_matches_a_full_run() -> None:
    """Polling one device re-checks its ports and their cables; the result equals a full checklist."""
    f = Fabric()
    rule = MisconfigRule()
    det = Detector([rule])
    detect(f, det, 100.0)
    f.set(HOST_PORT, "qos_trust_dscp", (), 0)
    touched = f.store.update([], 110.0, gauges=[Gauge(*HOST_PORT, "qos_trust_dscp", 0)])
    ctx = DetectContext(store=f.store, topology=f.topology, t=110.0, updated=touched, updated_devices={HOST}, fabric=PMAP)
    det.run(ctx)
    assert [(x.device, x.evidence["check"]) for x in det.active] == [(HOST, "trust_mismatch")]
    assert [r.to_json() for r in rule.results()] == [r.to_json() for r in f.check()]


def test_rule_is_registered_and_can_be_switched_off() -> None:
    assert "misconfig" in [r.name for r in build()]
    assert "misconfig" not in [r.name for r in build({"misconfig": {"enabled": False}})]
    with pytest.raises(ValueError, match=r"rules\.misconfig\.threshold: unknown key"):
        build({"misconfig": {"threshold": 1}})


def test_landing_page_shows_the_checklist_counts_and_the_failing_port() -> None:
    from fabricmon.agent.pipeline import Pipeline
    from fabricmon.agent.web import views

    p = Pipeline([], build())
    f = Fabric().set(SPINE_PORT, "pfc_watchdog_enabled", (3,), 0)
    f.store, f.topology = p.store, p.topology
    f.store.set_devices([DeviceInfo(HOST, kind="host"), DeviceInfo(LEAF), DeviceInfo(SPINE)])
    f.topology.set_static([Link(*HOST_PORT, *LEAF_DOWN), Link(*LEAF_UP, *SPINE_PORT)])
    detect(f, p.detector, 100.0)
    html = views.summary_page(p, p.findings(), demo=False)
    section = html[html.index("<h2 id='checklist'>"):html.index("<h2>Recently ended")]
    counts = cl.counts(f.check())
    assert f"<tr class='warning'><td>pfc_watchdog_off</td><td>{counts['pfc_watchdog_off']['pass']}</td><td>1</td><td>0</td></tr>" in section
    assert "<h3>Failing (1)</h3>" in section and "<td>spine01</td><td>swp1</td><td>3</td><td>leaf01 swp49</td>" in section
    off = Pipeline([], build({"misconfig": {"enabled": False}}))
    assert "The misconfig rule is switched off." in views.summary_page(off, [], demo=False)


def test_dcbx_partner_of_an_uncabled_port_is_compared_too() -> None:
    """No cable in the topology, but the port's DCBX table shows its partner's PFC set."""
    f = Fabric()
    f.config[(LEAF, "swp7")] = {**switch_port(LEAF, "swp7"), **{("pfc_peer_enabled", (p,)): 0.0 for p in range(8)}}
    f.poll(100.0)
    bad = [r for r in cl.failing(f.check()) if r.port == "swp7"]
    assert [(r.check, r.priority, r.peer_device) for r in bad] == [("pfc_priorities_mismatch", 3, None)]
    assert "Fix first: make the link partner of leaf01 swp7" in bad[0].summary  # this end has the fabric's set
    f.config[(LEAF, "swp7")][("pfc_peer_enabled", (3,))] = 1.0
    f.poll(110.0)
    assert [r.status for r in f.check() if r.port == "swp7" and r.check == "pfc_priorities_mismatch"] == [cl.PASS]


def test_a_host_port_named_by_its_netdev_in_the_topology_is_the_same_port() -> None:
    """LLDP names the host's cable end by its netdev; the host collector reports the RDMA port with
    the netdev as alias. The link checks read the host's settings, and the port is listed once."""
    from fabricmon.core.model import PortInfo

    f = Fabric().set(HOST_PORT, "qos_trust_dscp", (), 0)
    f.topology.set_static([Link(*LEAF_DOWN, HOST, "eth2"), Link(*LEAF_UP, *SPINE_PORT)])
    f.store.set_port_info([PortInfo(HOST, "mlx5_0/1", alias="eth2")], 100.0)
    f.poll(100.0)
    results = f.check()
    assert [(r.check, r.device, r.port, r.peer_device, r.peer_port) for r in cl.failing(results)] == [
        ("trust_mismatch", HOST, "mlx5_0/1", LEAF, "swp1")]
    assert not [r for r in results if r.port == "eth2"]
    assert {r.peer_port for r in results if (r.device, r.port) == LEAF_DOWN} == {"mlx5_0/1"}


def test_rule_follows_cables_that_appear_and_ports_that_expire() -> None:
    """A cable learnt later (LLDP) is checked from the pass that brings it; an expired port's
    results go. After each step the rule's checklist equals a full run."""
    f = Fabric()
    f.config[(LEAF, "swp3")] = switch_port(LEAF, "swp3")
    f.config[("host03", "mlx5_0/1")] = {**host_port(), ("qos_trust_dscp", ()): 0}
    f.store.set_devices([DeviceInfo("host03", kind="host")])
    rule = MisconfigRule()
    det = Detector([rule])
    detect(f, det, 100.0)
    assert not det.active  # no cable yet: a PCP-trusting host is not compared with anything
    f.topology.set_links("lldp", [Link(LEAF, "swp3", "host03", "mlx5_0/1")])
    detect(f, det, 110.0)
    assert [(x.device, x.evidence["check"]) for x in det.active] == [("host03", "trust_mismatch")]
    assert [r.to_json() for r in rule.results()] == [r.to_json() for r in f.check()]
    del f.config[("host03", "mlx5_0/1")]
    f.store.stale_after = 15.0
    detect(f, det, 120.0)
    assert f.store.expire(130.0) == 1  # host03 sent nothing since 110: dropped
    # a pass in which only spine01 reports: host03's results still follow the store
    touched = f.store.update([], 130.0, gauges=[Gauge(*SPINE_PORT, n, v, sub) for (n, sub), v in f.config[SPINE_PORT].items()])
    ctx = DetectContext(store=f.store, topology=f.topology, t=130.0, updated=touched, updated_devices={SPINE}, fabric=PMAP)
    det.run(ctx)
    assert [r.to_json() for r in rule.results()] == [r.to_json() for r in f.check()]
    assert {r.status for r in rule.results() if r.device == "host03"} == {cl.UNKNOWN}  # still cabled: unverified


def test_a_mismatch_seen_only_through_dcbx_is_raised_on_the_polled_end() -> None:
    """host05 is not polled; leaf01's DCBX table shows it with PFC off on 3. The finding needs a
    polled device, so it goes on leaf01 swp5; the fix is named on host05."""
    f = Fabric()
    f.topology.set_links("lldp", [Link(LEAF, "swp5", "host05", "eth0")])
    f.config[(LEAF, "swp5")] = {**switch_port(LEAF, "swp5"), **{("pfc_peer_enabled", (p,)): 0.0 for p in range(8)}}
    det = Detector([MisconfigRule()])
    detect(f, det, 100.0)
    assert [(x.device, x.port, x.priority, x.peer_device, x.evidence["check"]) for x in det.active] == [
        (LEAF, "swp5", 3, "host05", "pfc_priorities_mismatch")]
    assert det.active[0].summary.endswith("on host05 eth0.") and "seen through DCBX" in det.active[0].summary


class _Churn:
    """A fabric whose configuration, counters, cables and device kinds change at random between
    polls: two hosts and an uncabled port on leaf01, two uplinks to spine01, ECN mark counters on
    one leaf port. Each counter keeps a mode (still, moving a little, moving a lot) for a while
    and changes it now and then, so pause becomes sustained and stops, traffic leaves the
    history, and most polls change few inputs (a rule that re-checks what did not change would
    hide a missed one)."""

    COUNTERS = [("pfc_tx_pause_frames", (3,)), ("pfc_rx_pause_frames", (3,)), ("pfc_tx_pause_frames", (0,)),
                ("pfc_rx_pause_frames", (5,)), ("queue_tx_packets", (3,)), ("tx_bytes", ()), ("rx_bytes", ()),
                ("pfc_tx_pause_seconds", (3,)), ("ecn_marked_packets", (3,))]
    LOSSY = {("pfc_tx_pause_frames", (0,)), ("pfc_rx_pause_frames", (5,))}
    # Modes to draw from (0 still, 1 a little, 2 a lot): a leaf seldom paused itself and seldom
    # marking, so its sustained pause without ECN marks comes and goes.
    MODES = {("pfc_rx_pause_frames", (3,)): (0, 0, 0, 0, 1), ("ecn_marked_packets", (3,)): (0, 0, 0, 1),
             ("pfc_tx_pause_frames", (3,)): (0, 1, 1)}
    UNCABLED = (LEAF, "swp9")  # PFC off, only a queue counter: whether it carries RoCE is its history's

    def __init__(self, seed: int) -> None:
        import random

        self.rng = random.Random(seed)
        self.f = Fabric()
        self.links = [Link(*HOST_PORT, *LEAF_DOWN), Link(*LEAF_UP, *SPINE_PORT), Link("host02", "mlx5_0/1", LEAF, "swp2"),
                      Link(LEAF, "swp50", SPINE, "swp2")]
        for pk in ((LEAF, "swp2"), (LEAF, "swp50"), (SPINE, "swp2"), self.UNCABLED):
            self.f.config[pk] = switch_port(*pk)
        self.f.set(self.UNCABLED, "pfc_enabled", (3,), 0.0)
        self.f.config[("host02", "mlx5_0/1")] = host_port()
        self.f.topology.set_static(self.links)
        self.totals: dict[tuple, int] = {}
        self.modes: dict[tuple, int] = {}

    def step(self) -> list[Sample]:
        rng, f = self.rng, self.f
        if rng.random() < 0.3:  # a setting changes
            pk = rng.choice(sorted(f.config))
            key = rng.choice(sorted(f.config[pk]))
            f.config[pk][key] = rng.choice([0.0, 1.0, float(ECN_MIN), float(XOFF)])
        if rng.random() < 0.05:
            f.topology.set_static(rng.sample(self.links, rng.randrange(2, len(self.links) + 1)))
        if rng.random() < 0.05:
            f.store.set_devices([DeviceInfo("host02", kind=rng.choice(["host", "switch"]))])
        samples = []
        for pk in sorted(f.config):
            for name, sub in self.COUNTERS:
                if (name == "ecn_marked_packets" and pk != LEAF_UP) or (pk == self.UNCABLED and name != "queue_tx_packets"):
                    continue
                key = (pk, name, sub)
                if key not in self.modes or rng.random() < (0.03 if (name, sub) in self.LOSSY else 0.1):
                    self.modes[key] = rng.choice(self.MODES.get((name, sub), (0, 0, 1, 2))) \
                        if (name, sub) not in self.LOSSY or key in self.modes else 0
                step = {"pfc_tx_pause_seconds": (0, 2_000_000, 9_900_000)}.get(name, (0, 10, 500))[self.modes[key]]
                self.totals[key] = self.totals.get(key, 0) + step
                samples.append(Sample(pk[0], pk[1], name, self.totals[key], sub, scale=1e-6 if name.endswith("seconds") else 1.0))
        return samples


@pytest.mark.parametrize("seed", range(10))
def test_rule_rechecking_only_changed_inputs_equals_a_full_checklist_every_pass(seed) -> None:
    """The rule re-checks only the ports whose configuration, counters (as checklist.behaviour
    codes them), cables or host kind changed; after every pass its checklist equals a full run
    on random churn of all of them (pause that becomes sustained and stops, ECN marks, lossy
    pause, traffic in and out of the history, cables that come and go, a host described as a
    switch)."""
    churn = _Churn(seed)
    rule = MisconfigRule()
    det = Detector([rule])
    for i in range(60):
        detect(churn.f, det, 100.0 + 10 * i, churn.step())
        assert [r.to_json() for r in rule.results()] == [r.to_json() for r in churn.f.check()], (seed, i)


def test_rule_rechecks_nothing_on_a_poll_where_no_input_changed(monkeypatch) -> None:
    """Counters that keep moving the same way and unchanged settings: after the history holds
    the traffic, a poll re-checks no port; a setting that changes re-checks that port and its
    cable's other end only."""
    f = Fabric()
    det = Detector([MisconfigRule()])
    checked: list = []
    real = cl.port_results
    monkeypatch.setattr(cl, "port_results", lambda view, pk: checked.append(pk) or real(view, pk))
    for i in range(12):
        checked.clear()
        detect(f, det, 100.0 + 10 * i, [Sample(LEAF, "swp49", "queue_tx_packets", 1000 * i, (3,))])
    assert checked == []
    f.set(SPINE_PORT, "headroom_bytes", (3,), 0)
    detect(f, det, 220.0, [Sample(LEAF, "swp49", "queue_tx_packets", 12_000, (3,))])
    assert sorted(checked) == sorted([SPINE_PORT, LEAF_UP])
    assert [(x.device, x.evidence["check"], x.severity) for x in det.active] == [(SPINE, "headroom_missing", "warning")]  # spine01 swp1 shows no traffic counter


def test_a_link_failure_follows_the_traffic_at_its_other_end() -> None:
    """The host trusts PCP, its switch port DSCP: the failure is on the host, and whether it
    carried lossless traffic (a finding's severity) follows either end, here only the switch
    end's traffic, which starts, stops and starts again."""
    f = Fabric().set(HOST_PORT, "qos_trust_dscp", (), 0)
    rule = MisconfigRule()
    det = Detector([rule])
    seen = []
    for t, total in ((100.0, 0), (110.0, 5000), (120.0, 5000), (130.0, 9000)):
        detect(f, det, t, [Sample(LEAF, "swp1", "queue_tx_packets", total, (3,))])
        seen += [(r.device, r.lossless_traffic) for r in rule.results() if r.check == "trust_mismatch"]
        assert [r.to_json() for r in rule.results()] == [r.to_json() for r in f.check()]
    assert seen == [(HOST, False), (HOST, True), (HOST, False), (HOST, True)]
