"""One device seen through two sources is one device: GUID-labelled readings (UFM Telemetry)
join the names, topology and link rates another source reports (UFM REST, ibnetdiscover) by
port GUID and port number, whichever source polls first (agent/identity.py)."""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterable

from fabricmon.agent.detector.base import DetectContext, Observation, Rule
from fabricmon.agent.identity import Identity, is_guid_label
from fabricmon.agent.pipeline import Pipeline
from fabricmon.collectors.ufm.parse import parse_payload as ufm_parse
from fabricmon.collectors.ufm_telemetry.parse import parse_payload as telemetry_parse
from fabricmon.core.model import DeviceInfo, Gauge, Link, ParseResult, PortInfo, TargetSpec
from tests.conftest import ROOT

T0 = 1764691200.0
SW, HCA_NODE, HCA_PORT = "0xb8599f0300fc0900", "0x1070fd0300a01910", "0x1070fd0300a01911"


def named() -> ParseResult:
    """What UFM REST (or ibnetdiscover) says: names, port GUIDs, system GUIDs, rates, cables."""
    return ParseResult(
        devices=[DeviceInfo("ib-spine01", "switch", guid=SW, model="MQM9700"), DeviceInfo("dgx01 mlx5_0", "ca", guid=HCA_NODE)],
        ports=[PortInfo("ib-spine01", "1", guid=SW, lid="1"), PortInfo("ib-spine01", "2", guid=SW, lid="1"),
               PortInfo("dgx01 mlx5_0", "1", guid=HCA_PORT, lid="101")],
        gauges=[Gauge("ib-spine01", "1", "link_speed_bytes", 50e9), Gauge("dgx01 mlx5_0", "1", "link_speed_bytes", 50e9)],
        links=[Link("ib-spine01", "1", "dgx01 mlx5_0", "1")])


def counters(xmit: int, t: float) -> ParseResult:
    """What UFM Telemetry says: node GUID as the device label, port GUID and number, a device clock."""
    r = ParseResult(ports=[PortInfo(SW, "1", guid=SW), PortInfo(HCA_NODE, "1", guid=HCA_PORT, label="p1")],
                    clocks={SW: t, HCA_NODE: t})
    for dev in (SW, HCA_NODE):
        r.counters.add(dev, "1", "tx_bytes", xmit, scale=4)
    return r


def test_guid_labels_resolve_by_port_guid_then_node_guid() -> None:
    ident = Identity()
    assert ident.learn(named()) and not ident.learn(named())  # the second report binds nothing new
    r = counters(1000, T0)
    assert ident.resolve(r) == {SW: "ib-spine01", HCA_NODE: "dgx01 mlx5_0"}
    assert {(s.device, s.port) for s in r.counters} == {("ib-spine01", "1"), ("dgx01 mlx5_0", "1")}
    assert set(r.clocks) == {"ib-spine01", "dgx01 mlx5_0"} and {p.device for p in r.ports} == {"ib-spine01", "dgx01 mlx5_0"}
    # The HCA's port GUID differs from its node GUID: the port binding found it. Without the port
    # the node GUID (UFM's system GUID) still does.
    bare = ParseResult(gauges=[Gauge(HCA_NODE, "1", "link_up", 1.0)])
    assert ident.resolve(bare) == {HCA_NODE: "dgx01 mlx5_0"}


def test_the_same_names_again_learn_nothing_until_another_source_rebinds_them() -> None:
    """A collector hands the same device and port objects over every poll: learning them again
    changes nothing and is skipped, but when another source has bound one of their GUIDs to
    another name since, they are learned again and win it back (learning is a function of the
    bindings and the input)."""
    ident = Identity()
    r = named()
    assert ident.learn(r)
    assert not ident.learn(r) and not ident.learn(ParseResult(devices=list(r.devices), ports=list(r.ports)))
    other = ParseResult(ports=[PortInfo("spine-renamed", "1", guid=SW)])
    assert ident.learn(other) and ident.by_port[(SW, "1")] == "spine-renamed"
    assert ident.learn(r) and ident.by_port[(SW, "1")] == "ib-spine01"
    r.ports[0] = PortInfo("ib-spine01", "7", guid=SW)  # the list changed in place: learned again
    assert ident.learn(r) and ident.by_port[(SW, "7")] == "ib-spine01"


def test_a_node_guid_that_is_also_the_first_port_s_guid_joins() -> None:
    """UFM REST lists a ConnectX port under a GUID equal to its node GUID (the vports example of the
    REST API guide), while telemetry gives node and port GUIDs: the node GUID label finds it."""
    ident = Identity()
    ident.learn(ParseResult(ports=[PortInfo("dgx03 mlx5_0", "1", guid=HCA_NODE)]))  # no systems call
    r = ParseResult()
    r.counters.add(HCA_NODE, "1", "tx_bytes", 5, scale=4)  # Prometheus rows without a port GUID label
    assert ident.resolve(r) == {HCA_NODE: "dgx03 mlx5_0"}


def test_a_guid_two_names_share_is_not_used_and_names_that_look_like_guids_are_not_bound() -> None:
    ident = Identity()
    shared = "0x1070fd0300a01900"  # one system image GUID for two HCAs of one host
    ident.learn(ParseResult(devices=[DeviceInfo("dgx02 mlx5_0", "ca", guid=shared), DeviceInfo("dgx02 mlx5_1", "ca", guid=shared),
                                     DeviceInfo(SW, "switch", guid=SW)]))
    assert ident.resolve(ParseResult(gauges=[Gauge(shared, "1", "link_up", 1.0), Gauge(SW, "1", "link_up", 1.0)])) == {}
    assert is_guid_label(SW) and not is_guid_label("ib-spine01") and not is_guid_label("0xB8599F0300FC0900")


def test_host_ports_named_by_netdev_do_not_capture_fabric_port_numbers() -> None:
    """The host collector gives its HCA's node GUID on a port named ``mlx5_0/1``: a telemetry row
    for port 1 of that GUID is not that port, and no device GUID was bound: it stays unjoined."""
    ident = Identity()
    ident.learn(ParseResult(devices=[DeviceInfo("gpu01", "host")], ports=[PortInfo("gpu01", "mlx5_0/1", guid=HCA_NODE)]))
    assert ident.resolve(ParseResult(ports=[PortInfo(HCA_NODE, "1", guid=HCA_PORT)], gauges=[Gauge(HCA_NODE, "1", "link_up", 1)])) == {}


def test_pipeline_joins_counters_and_rates_in_either_order() -> None:
    for telemetry_first in (False, True):
        p = Pipeline([], [])
        if telemetry_first:
            p.store_result("ufm-telemetry", T0 - 30, counters(0, T0 - 30))
            assert (SW, "1") in p.store.ports  # nothing named it yet
        p.store_result("ufm", T0, named())
        assert not any(is_guid_label(d) for d, _ in p.store.ports)  # what a GUID label held went to the name
        p.store_result("ufm-telemetry", T0, counters(1000, T0))
        p.store_result("ufm-telemetry", T0 + 30, counters(376000, T0 + 30))
        e = p.store.port(("ib-spine01", "1"))
        assert e is not None and e.gauge("link_speed_bytes") == 50e9
        assert e.counter("tx_bytes").rate == 4 * 375000 / 30  # on the device clock, scaled to bytes
        assert e.info is not None and e.info.lid == "1"  # UFM REST's description of the port stays
        assert p.topology.peer("ib-spine01", "1") == ("dgx01 mlx5_0", "1")


def test_a_poll_that_brings_only_states_is_no_fresh_evidence_for_counters_read_elsewhere() -> None:
    """UFM REST between two UFM Telemetry polls: the detector's hysteresis must not count the
    same counter interval twice. A device that only a gauge source knows stays fresh."""
    seen: list[set[str]] = []

    class Fresh(Rule):
        name, kinds = "fresh", ()

        def evaluate(self, ctx: DetectContext) -> Iterable[Observation]:
            seen.append(set(ctx.updated_devices))
            return ()

    p = Pipeline([], [Fresh()])
    p.store_result("ufm", T0, named())
    p.store_result("ufm-telemetry", T0, counters(1000, T0))
    p.detect(T0)
    p.store_result("ufm", T0 + 15, named())
    p.store_result("gauges-only", T0 + 15, ParseResult(gauges=[Gauge("leaf-x", "1", "link_up", 1.0)]))
    p.detect(T0 + 15)
    changed = named()
    changed.gauges[0] = Gauge("ib-spine01", "1", "link_speed_bytes", 25e9)  # a state change is news
    p.store_result("ufm", T0 + 20, changed)
    p.detect(T0 + 20)
    assert seen == [{"ib-spine01", "dgx01 mlx5_0"}, {"leaf-x"}, {"ib-spine01"}]


def test_recorded_ufm_rest_and_telemetry_land_on_one_port() -> None:
    """The real parsers on one poll pair of the capability recording (UFM REST, then UFM
    Telemetry's GUID-only CSV): every counter lands on a port UFM REST named and rated."""
    path = ROOT / "tests" / "scenarios_capabilities" / "ib_ufm_two_sources.jsonl.gz"
    polls = {}
    with gzip.open(path, "rt") as fh:
        for line in map(json.loads, fh):
            if line["type"] == "poll" and line["source"] not in polls:
                polls[line["source"]] = line
    p = Pipeline([], [])
    p.store_result("ufm", T0, ufm_parse(polls["ufm"]["payload"], TargetSpec("ufm", "ufm")))
    p.store_result("ufm-telemetry", T0, telemetry_parse(polls["ufm-telemetry"]["payload"], TargetSpec("t", "ufm-telemetry")))
    with_counters = [pk for pk, e in p.store.ports.items() if e.series_count()]
    assert len(with_counters) == 24 and not any(is_guid_label(d) for d, _ in with_counters)
    assert all(p.store.port(pk).gauge("link_speed_bytes") == 50e9 for pk in with_counters)
