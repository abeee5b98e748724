"""Which jobs each kind of finding touches, by its rule of reach, written into its evidence.

The fabric: two Ethernet leaves under a spine (LLDP names the hosts), and an InfiniBand ring of
three switches, one named the way UFM names a managed switch (a colon in the name), with a CA
each. Jobs: A on gpu01 and gpu04, B on gpu02, C on gpu05 and gpu06, D on gpu03, E on the IB hosts.
"""

from __future__ import annotations

import pytest

from fabricmon.agent.config import JobsConfig
from fabricmon.agent.jobs.export import job_families
from fabricmon.agent.jobs.impact import REACH_TEXT
from fabricmon.agent.pipeline import Pipeline
from fabricmon.core.model import DeviceInfo, Finding, JobInfo, Link, ParseResult

T0 = 1764691200.0
UFM_SW = "MF0;ib-sw3:MQM8700/U1"
JOBS = [JobInfo("A", ("gpu01", "gpu04")), JobInfo("B", ("gpu02",)), JobInfo("C", ("gpu05", "gpu06")),
        JobInfo("D", ("gpu03",)), JobInfo("E", ("ib01", "ib02", "ib03"))]


def build(info_max: int = 1000) -> Pipeline:
    p = Pipeline([], [], jobs=JobsConfig(info_max_series=info_max))
    links = [Link("leaf01", f"Ethernet{i}", f"gpu0{i}", "eth0") for i in (1, 2, 3)]
    links += [Link("leaf02", f"Ethernet{i}", f"gpu0{i + 3}", "eth0") for i in (1, 2, 3)]
    links += [Link("leaf01", "Ethernet49", "spine01", "Ethernet1"), Link("leaf02", "Ethernet49", "spine01", "Ethernet2")]
    p.store_result("eth", T0, ParseResult(devices=[DeviceInfo(n, "switch") for n in ("leaf01", "leaf02", "spine01")],
                                          links=links))
    ring = ["ib-sw1", "ib-sw2", UFM_SW]
    ib = [Link(ring[i], "1", ring[(i + 1) % 3], "2") for i in range(3)]
    ib += [Link(sw, "10", f"ib0{i + 1} mlx5_0", "1") for i, sw in enumerate(ring)]
    p.store_result("ib", T0, ParseResult(devices=[*(DeviceInfo(s, "switch") for s in ring),
                                                  *(DeviceInfo(f"ib0{i} mlx5_0", "ca") for i in (1, 2, 3))], links=ib))
    p.store_result("slurmctl", T0, ParseResult(inventory=JOBS))
    return p


def finding(p: Pipeline, kind: str, device: str, port: str | None, role: str | None = None, **evidence) -> Finding:
    peer = p.topology.peer(device, port) if port else None
    return Finding(kind, "critical", device, port, 3, role, T0, evidence=evidence,
                   peer_device=peer[0] if peer else None, peer_port=peer[1] if peer else None)


def jobs_of(p: Pipeline, *findings: Finding) -> list[tuple[list[str], str]]:
    p.jobs.annotate(list(findings), [], p.store, p.topology, T0, ready=lambda: True)
    return [(f.evidence["jobs"], f.evidence["jobs_reach"]) for f in findings]


def test_storm_origin_reaches_its_tree_and_its_victims_share_it() -> None:
    p = build()
    origin = finding(p, "pfc_storm", "leaf01", "Ethernet1", "origin", origin_peer="gpu01:eth0",
                     victim_ports=["spine01:Ethernet1"], also_paused={"gpu05:eth0": "paused 97% (not polled)"})
    victim = finding(p, "pfc_storm", "spine01", "Ethernet1", "victim", origin="leaf01:Ethernet1")
    assert jobs_of(p, victim, origin) == [(["A", "C"], REACH_TEXT["victim"]), (["A", "C"], REACH_TEXT["storm"])]
    assert origin.evidence["jobs_hosts"] == ["gpu01", "gpu05"] and origin.evidence["jobs_affected"] == 2


def test_pfc_deadlock_reaches_every_host_on_the_member_switches() -> None:
    p = build()
    cycle = ["leaf01:Ethernet49", "spine01:Ethernet1", "spine01:Ethernet2", "leaf02:Ethernet49"]
    f = finding(p, "pfc_deadlock", "leaf01", "Ethernet49", "member", cycle=cycle, paused_behind=[])
    assert jobs_of(p, f) == [(["A", "B", "C", "D"], REACH_TEXT["loop"])]


def test_credit_loop_members_with_colons_in_switch_names() -> None:
    p = build()
    members = {"ib-sw1:1": {}, "ib-sw2:1": {}, f"{UFM_SW}:1": {}}
    f = finding(p, "credit_deadlock", "ib-sw2", "1", "member", cycle=list(members), members=members)
    assert jobs_of(p, f) == [(["E"], REACH_TEXT["loop"])]
    assert f.evidence["jobs_hosts"] == ["ib01", "ib02", "ib03"]


@pytest.mark.parametrize(("kind", "device", "port", "want"), [
    ("link_degraded", "spine01", "Ethernet1", ["A", "B", "D"]),  # between switches: hosts on either switch (leaf01's)
    ("link_degraded", "leaf02", "Ethernet2", ["C"]),  # a host's cable: that host only
    ("packet_loss", "gpu06", "eth0", ["C"]),  # on the host's own port
])
def test_links_reach_their_ends_or_the_hosts_behind_them(kind, device, port, want) -> None:
    p = build()
    assert jobs_of(p, finding(p, kind, device, port)) == [(want, REACH_TEXT["link"])]


@pytest.mark.parametrize(("device", "port", "want", "hosts"), [
    (UFM_SW, "10", ["E"], ["ib03"]),  # toward a host's HCA: that host
    ("leaf01", "Ethernet49", [], []),  # toward a switch: the hosts attached to it (spine01: none)
    ("spine01", "Ethernet2", ["A", "C"], ["gpu04", "gpu05", "gpu06"]),  # ... leaf02's hosts
])
def test_a_stalled_port_reaches_the_hosts_behind_its_peer(device, port, want, hosts) -> None:
    p = build()
    f = finding(p, "credit_deadlock", device, port, "stalled")
    assert jobs_of(p, f) == [(want, REACH_TEXT["stalled"])]
    assert f.evidence["jobs_hosts"] == hosts


@pytest.mark.parametrize(("kind", "role", "device", "port", "want"), [
    ("pfc_storm", "watchdog", "leaf02", "Ethernet3", ["C"]),  # a new role flows through the port rule
    ("congestion", None, "leaf01", "Ethernet3", ["D"]),
    ("congestion", None, "leaf01", "Ethernet49", []),  # a switch-to-switch port alone reaches no host
    ("a_kind_from_the_future", "origin", "leaf01", "Ethernet2", ["B"]),
])
def test_everything_else_reaches_its_port_and_its_cable(kind, role, device, port, want) -> None:
    p = build()
    assert jobs_of(p, finding(p, kind, device, port, role)) == [(want, REACH_TEXT["port"])]


def test_a_finding_without_a_port_reaches_the_hosts_of_its_device() -> None:
    p = build()
    f = finding(p, "misconfig", "leaf02", None, check="pfc_priorities_mismatch")
    assert jobs_of(p, f) == [(["A", "C"], REACH_TEXT["device"])]


def test_metrics_count_jobs_per_finding_and_join_them_under_the_cardinality_cap() -> None:
    for cap, info_lines in ((1000, 2), (1, 0)):
        p = build(info_max=cap)
        f = finding(p, "pfc_storm", "leaf01", "Ethernet1", "origin", origin_peer="gpu01:eth0", also_paused={"gpu05:eth0": ""})
        p.detector.restore([f])  # an active finding (as a restart re-seeds it)
        p.jobs.annotate([f], [], p.store, p.topology, T0, ready=lambda: True)
        text = "\n".join(line for fam in job_families(p) for line in fam.lines)
        assert 'fabricmon_finding_jobs_affected{kind="pfc_storm",device="leaf01",port="Ethernet1"} 2' in text
        assert 'fabricmon_finding_job_pairs 2' in text
        assert text.count("fabricmon_finding_job_info{") == info_lines
