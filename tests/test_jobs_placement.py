"""Host -> NIC ports -> switch ports, by each of the stated rules, and hosts no rule places (never guessed)."""

from __future__ import annotations

import logging

from fabricmon.agent.config import load_text
from fabricmon.agent.jobs.export import job_families
from fabricmon.agent.pipeline import Pipeline
from fabricmon.core.model import DeviceInfo, Gauge, JobInfo, Link, ParseResult, PortInfo

T0 = 1764691200.0


def fabric(static: str = "") -> Pipeline:
    """An Ethernet leaf whose LLDP names its hosts, a host-source NIC, and an InfiniBand leaf with
    CAs named by node description and by GUID."""
    cfg = load_text(static).config if static else None
    p = Pipeline([], [], jobs=cfg.jobs if cfg else None)
    # the host source on gpu01 (FQDN) and gpu03: NIC ports with netdev aliases and port GUIDs
    p.store_result("gpu01-node", T0, ParseResult(
        devices=[DeviceInfo("gpu01.cluster", "host")],
        ports=[PortInfo("gpu01.cluster", "mlx5_0/1", guid="0x0c42a10300b40d00", alias="ens1f0np0")],
        gauges=[Gauge("gpu01.cluster", "mlx5_0/1", "link_up", 1.0)]))
    p.store_result("gpu03-node", T0, ParseResult(
        devices=[DeviceInfo("gpu03", "host")],
        ports=[PortInfo("gpu03", "mlx5_0/1", guid="0x1070fd0300a00033", alias="ib0")],
        gauges=[Gauge("gpu03", "mlx5_0/1", "link_up", 1.0)]))
    # SNMP LLDP of leaf01: its neighbours' system names (short) and port ids (netdevs)
    p.store_result("leaf01", T0, ParseResult(
        devices=[DeviceInfo("leaf01", "switch")],
        links=[Link("leaf01", "Ethernet1", "gpu01", "ens1f0np0"), Link("leaf01", "Ethernet2", "gpu02", "eth0"),
               Link("leaf01", "Ethernet49", "spine01", "Ethernet1")]))
    # ibnetdiscover: a CA named "<host> <device>" and one whose description is empty (named by its GUID)
    p.store_result("ib-fabric", T0, ParseResult(
        devices=[DeviceInfo("ib-leaf01", "switch"), DeviceInfo("gpu04 mlx5_0", "ca"), DeviceInfo("0x1070fd0300a00033", "ca")],
        ports=[PortInfo("gpu04 mlx5_0", "1", guid="0x1070fd0300a00044"), PortInfo("0x1070fd0300a00033", "1", guid="0x1070fd0300a00033")],
        links=[Link("ib-leaf01", "4", "gpu04 mlx5_0", "1"), Link("ib-leaf01", "3", "0x1070fd0300a00033", "1")]))
    return p


def placed(p: Pipeline, host: str) -> list[tuple[str, str, tuple[str, str] | None, str]]:
    p.jobs.placement.refresh(p.store, p.topology)
    return [(n.device, n.port, n.switch, n.via.split(":")[0].split(" (")[0]) for n in p.jobs.placement.place(host).nics]


def test_host_source_nic_joined_to_lldp_by_its_netdev() -> None:
    nics = placed(fabric(), "gpu01")
    assert nics[0] == ("gpu01.cluster", "mlx5_0/1", ("leaf01", "Ethernet1"), "LLDP")
    assert all(n[2] == ("leaf01", "Ethernet1") for n in nics)  # the LLDP name of the same port adds no second NIC


def test_lldp_neighbour_alone_places_a_host() -> None:
    assert placed(fabric(), "gpu02.cluster") == [("gpu02", "eth0", ("leaf01", "Ethernet2"), "cable of the host's own port")]


def test_port_guid_joins_the_host_source_to_ibnetdiscover() -> None:
    assert placed(fabric(), "gpu03") == [("gpu03", "mlx5_0/1", ("ib-leaf01", "3"), "port GUID")]


def test_node_description_places_an_infiniband_host() -> None:
    assert placed(fabric(), "gpu04") == [("gpu04 mlx5_0", "1", ("ib-leaf01", "4"), "node description")]


def test_config_places_what_no_source_sees() -> None:
    p = fabric("jobs: {hosts: {gpu09: ['leaf09:Ethernet9', {switch: leaf09, port: Ethernet10, nic: mlx5_1/1}]}}")
    assert placed(p, "gpu09.cluster") == [("gpu09.cluster", "", ("leaf09", "Ethernet9"), "config"),
                                          ("gpu09.cluster", "mlx5_1/1", ("leaf09", "Ethernet10"), "config")]


def test_similar_names_are_not_guessed() -> None:
    p = fabric()
    for host in ("gpu0", "gpu011", "pu01", "gpu04-ib", "gpu04x"):
        assert placed(p, host) == [], host
    # a short name is the short form of any FQDN, but two FQDNs of different domains are two hosts
    assert {n[0] for n in placed(p, "gpu01.other")} == {"gpu01"}


def test_unmatched_hosts_are_reported_once_and_counted(caplog) -> None:
    p = fabric()
    p.store_result("slurmctl", T0, ParseResult(inventory=[JobInfo("7", ("gpu01", "gpu77", "gpu78"))]))
    with caplog.at_level(logging.WARNING, logger="fabricmon.agent.jobs.stage"):
        p.jobs.annotate([], [], p.store, p.topology, T0, ready=lambda: False)  # at start-up the topology may not be in yet: quiet
        assert not caplog.records and p.jobs.unmatched == {"gpu77", "gpu78"}
        for k in range(3):
            p.jobs.annotate([], [], p.store, p.topology, T0 + 10 * k, ready=lambda: True)
    warned = [r.getMessage() for r in caplog.records if "gpu7" in r.getMessage()]
    assert len(warned) == 2 and all("not guessed" in w for w in warned)
    assert p.jobs.unmatched == {"gpu77", "gpu78"}
    text = "\n".join(line for f in job_families(p) for line in f.lines)
    assert "fabricmon_job_hosts_unmatched 2" in text and 'fabricmon_jobs_running{target="slurmctl"} 1' in text


def test_no_job_source_no_job_metrics() -> None:
    p = fabric()
    p.detect(T0)
    assert job_families(p) == []
