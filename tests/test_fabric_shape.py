"""The fabric analysis: one answer to "which device is a host" for the detector, the audit and the
web view; tiers and planes from the topology."""

from __future__ import annotations

import pytest

from fabricmon.agent.detector import checklist as cl
from fabricmon.agent.detector.analyses.fabric import FabricShape
from fabricmon.agent.store import CounterStore
from fabricmon.agent.web import pictures
from fabricmon.core.model import DeviceInfo, Gauge, Link, PortInfo
from fabricmon.core.topology import Topology
from fabricmon.core.vocabulary import PriorityMap
from tests.conftest import ROOT


def _fabric() -> tuple[CounterStore, Topology]:
    """Two planes: plane A (leafA1, leafA2 under spineA) and plane B (leafB1 under spineB). h1 is
    described as a CA and cabled to both planes; h2 is known only from one cable; nvue-leaf is
    polled (its ports are in the store) but not described; dual is unpolled with two cables."""
    store = CounterStore()
    store.set_devices([DeviceInfo(name="h1", kind="ca"), DeviceInfo(name="spineA", kind="switch")])
    store.update([], 100.0, gauges=[Gauge("nvue-leaf", "swp1", "link_up", 1.0)])
    topo = Topology()
    topo.set_links("t", [Link(*c) for c in [
        ("leafA1", "1", "h1", "p1"), ("leafB1", "1", "h1", "p2"), ("leafA2", "1", "h2", "p1"),
        ("leafA1", "9", "spineA", "1"), ("leafA2", "9", "spineA", "2"), ("leafB1", "9", "spineB", "1"),
        ("nvue-leaf", "swp1", "spineB", "2"), ("leafA1", "7", "dual", "1"), ("leafA2", "7", "dual", "2"),
    ]])
    return store, topo


def test_one_host_classification():
    store, topo = _fabric()
    shape = FabricShape(store, topo)
    assert shape.is_host("h1")  # described: its kind decides, whatever its cables
    assert not shape.is_host("spineA")
    assert not shape.is_host("nvue-leaf")  # polled but not described: a switch source, one cable or not
    assert shape.is_host("h2")  # only the topology knows it, with a single cable: an end point
    assert not shape.is_host("dual")  # two cables: not an end point
    store.set_devices([DeviceInfo(name="h2", kind="switch")])
    assert not shape.is_host("h2")  # a description read live wins at once


def test_tiers_and_planes():
    store, topo = _fabric()
    shape = FabricShape(store, topo)
    switches = {"leafA1", "leafA2", "leafB1", "spineA", "spineB", "nvue-leaf", "dual"}
    tiers = shape.tiers(switches, {"h1", "h2"})
    assert {s: tiers[s] for s in ("leafA1", "leafA2", "leafB1", "spineA", "spineB", "nvue-leaf")} == {
        "leafA1": 0, "leafA2": 0, "leafB1": 0, "spineA": 1, "spineB": 1, "nvue-leaf": 2}
    planes = shape.planes(switches)
    assert planes["leafA1"] == planes["leafA2"] == planes["spineA"] == planes["dual"]
    assert planes["leafB1"] == planes["spineB"] == planes["nvue-leaf"] != planes["leafA1"]
    assert sorted(set(planes.values())) == [0, 1]


def test_the_audit_and_the_web_view_use_the_same_classification():
    store, topo = _fabric()
    view = cl.FabricView(store, topo, PriorityMap())
    shape = view.shape
    for device in ("h1", "h2", "spineA", "nvue-leaf", "dual", "nobody"):
        assert view.is_host(device) == shape.is_host(device), device
    svg = pictures.fabric_picture(shape, [], lambda f: "")
    assert "hosts ok" in svg and "nvue-leaf" in svg
    # nvue-leaf, polled and undescribed, is a switch box: only h1 and h2 are host boxes.
    assert svg.count('class="node hosts ok"') == 2


def test_no_second_host_rule_in_the_code():
    """``HOST_KINDS`` and a host test are written once, in the fabric analysis."""
    hits = [str(p.relative_to(ROOT)) for p in sorted((ROOT / "agent").rglob("*.py"))
            if "HOST_KINDS = " in p.read_text() or "def _is_host(" in p.read_text()]
    assert hits == ["agent/detector/analyses/fabric.py"]


# ------------------------------------------------------------------ issue 31: groups and names
from fabricmon.agent.detector.analyses.fabric import tier_name  # noqa: E402
from fabricmon.core import names as names_mod  # noqa: E402
from tests.conftest import public_fixture  # noqa: E402


def _three_tiers() -> tuple[CounterStore, Topology]:
    """Two pods (leaves L1/L2 under spines S1/S2, leaves L3/L4 under S3/S4), two cores (C1 on the
    first spine of each pod, C2 on the second), hosts h1-h4 (an adapter per leaf, named by
    rdma-ndd: "<host> mlx5_0"), and a SHARP aggregation node inside every switch."""
    store = CounterStore()
    topo = Topology()
    links, devices = [], []
    for pod, (leaves, spines) in enumerate(((("L1", "L2"), ("S1", "S2")), (("L3", "L4"), ("S3", "S4")))):
        for i, leaf in enumerate(leaves):
            for j, spine in enumerate(spines):
                links.append(Link(leaf, f"1{j}", spine, f"1{i}"))
            host = f"h{2 * pod + i + 1}"
            devices.append(DeviceInfo(name=f"{host} mlx5_0", kind="ca", guid=f"0x00000000000000a{2 * pod + i}",
                                      description=f"{host} mlx5_0"))
            links.append(Link(leaf, "1", f"{host} mlx5_0", "1"))
        for j, spine in enumerate(spines):
            links.append(Link(spine, "20", f"C{j + 1}", f"{pod}"))
    for sw in ("L1", "L2", "L3", "L4", "S1", "S2", "S3", "S4", "C1", "C2"):
        an = f"Mellanox Technologies Aggregation Node {sw}"
        devices.append(DeviceInfo(name=an, kind="ca", description="Mellanox Technologies Aggregation Node"))
        devices.append(DeviceInfo(name=sw, kind="switch"))
        links.append(Link(sw, "41", an, "1"))
    store.set_devices(devices)
    topo.set_links("t", links)
    return store, topo


def test_aggregation_nodes_are_part_of_their_switch_and_tiers_come_from_the_graph():
    store, topo = _three_tiers()
    shape = FabricShape(store, topo)
    an = "Mellanox Technologies Aggregation Node S3"
    assert shape.inside(an) == "S3" and not shape.is_host(an)  # counted as a host it made every switch a leaf
    layout = shape.layout(set(store.devices))
    assert [(name, sorted(m for g in gs for m in g.members)) for _, name, gs in layout.tiers] == [
        ("core", ["C1", "C2"]), ("spine", ["S1", "S2", "S3", "S4"]), ("leaf", ["L1", "L2", "L3", "L4"])]
    pods = {g.name: g.members for _, name, gs in layout.tiers if name == "leaf" for g in gs}
    assert pods == {"pod L1 … L2": ["L1", "L2"], "pod L3 … L4": ["L3", "L4"]}
    cores = {g.name: g.members for _, name, gs in layout.tiers if name == "core" for g in gs}
    assert cores == {"to spine 1 of each pod": ["C1"], "to spine 2 of each pod": ["C2"]}
    assert layout.group_of[an] == layout.group_of["S3"]  # drawn with its switch
    assert layout.host_of["h3 mlx5_0"] == "h3"  # rdma-ndd's "<host> <device>"
    assert tier_name(3, 4) == "tier 3"


def test_names_map_names_hosts_and_places_switches(tmp_path):
    store, topo = _three_tiers()
    (tmp_path / "n.map").write_text('# node-name-map\n0x00000000000000a0 "gpu-a"\n')
    (tmp_path / "places.yml").write_text("L1: {pod: blue}\nL2: {pod: blue}\nS1: {pod: blue}\n")
    names = names_mod.load([str(tmp_path / "n.map"), str(tmp_path / "places.yml")])
    shape = FabricShape(store, topo)
    layout = shape.layout(set(store.devices), names)
    assert layout.host_of["h1 mlx5_0"] == "gpu-a"
    assert shape.label("h1 mlx5_0", names) == "gpu-a"
    leaf_groups = {g.name: (g.members, g.why) for _, n, gs in layout.tiers if n == "leaf" for g in gs}
    assert leaf_groups["pod blue"] == (["L1", "L2"], "names map")


def test_default_descriptions_never_stand_alone():
    store, topo = _three_tiers()
    store.set_devices([DeviceInfo(name="MT4123 ConnectX6 Mellanox Technologies 0x1070fd0300a00001", kind="ca", guid="0x1070fd0300a00001",
                                  description="MT4123 ConnectX6 Mellanox Technologies")])
    topo.set_links("t2", [Link("L4", "7", "MT4123 ConnectX6 Mellanox Technologies 0x1070fd0300a00001", "1")])
    shape = FabricShape(store, topo)
    assert shape.label("MT4123 ConnectX6 Mellanox Technologies 0x1070fd0300a00001") == "adapter 0x1070fd0300a00001 on L4"
    assert shape.label("Mellanox Technologies Aggregation Node S3") == "aggregation node of S3"
    assert shape.label("L1") == "L1"


def test_the_host_source_names_an_adapter_by_its_guid():
    store, topo = _three_tiers()
    store.set_devices([DeviceInfo(name="node-77", kind="host")])
    store.set_port_info([PortInfo("node-77", "mlx5_0/1", guid="0x00000000000000a1")], 100.0)
    layout = FabricShape(store, topo).layout(set(store.devices))
    assert layout.host_of["h2 mlx5_0"] == "node-77"  # the host target's adapter GUID wins over the description


def test_a_static_switch_to_switch_link_is_not_two_hosts():
    store, topo = CounterStore(), Topology()
    topo.set_static([Link("swA", "Ethernet49", "swB", "Ethernet1")])
    shape = FabricShape(store, topo)
    assert not shape.is_host("swA") and not shape.is_host("swB")
    svg = pictures.fabric_picture(shape, [], lambda f: "")
    assert "hosts" not in svg


def test_node_name_map_of_a_real_cluster():
    """infiniband__X5.map: ``H-<guid> name`` lines, names unquoted (ltaulell/HPC_toolset)."""
    text = public_fixture("ib/ltaulell__HPC_toolset/infiniband__X5.map").read_text()
    n = names_mod.parse(text, "X5.map")
    assert n.get("whatever", "0x0002c90300080d28").name == "r510gluster4"
    assert len(n) == sum(1 for ln in text.splitlines() if ln.strip() and not ln.startswith("#"))
    with pytest.raises(ValueError, match=r"bad.map:2: expected a node-name-map line"):
        names_mod.parse('0x1 "a"\nnot a guid line\n', "bad.map")
