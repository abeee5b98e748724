"""The fabric analysis: one answer to "which device is a host" for the detector, the audit and the
web view; tiers and planes from the topology."""

from __future__ import annotations

from fabricmon.agent.detector import checklist as cl
from fabricmon.agent.detector.analyses.fabric import FabricShape
from fabricmon.agent.store import CounterStore
from fabricmon.agent.web import pictures
from fabricmon.core.model import DeviceInfo, Gauge, Link
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
