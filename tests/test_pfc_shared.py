"""The PFC analysis is the detector's: one per detector, read by the rules that name it, its
state export independent of which rules run; one paused-by graph for the agent and
``fabricmon correlate``."""

from __future__ import annotations

import subprocess

import pytest

from fabricmon.agent.detector import Detector
from fabricmon.agent.detector.pausegraph import PausedBy, best_sinks, deadlock_cycles
from fabricmon.agent.detector.rules import build
from tests.conftest import ROOT
from tests.test_rules_pfc import P, host_storm
from tests.test_rules_sim import two_leaf_fabric


def _pfc_state(fab) -> dict[tuple[str, ...], float]:
    [m] = [m for m in fab.det.metrics() if m.name == "fabricmon_port_pfc_state"]
    return dict(m.values)


def _storm_states(config):
    fab = two_leaf_fabric(config=config)
    fab.poll(n=2)
    host_storm(fab)
    fab.poll(n=2)
    return fab, _pfc_state(fab)


@pytest.mark.parametrize("off", [["pfc_storm"], ["pfc_storm", "pfc_deadlock"], ["pfc_storm", "pfc_deadlock", "congestion"]])
def test_switching_pfc_rules_off_keeps_the_pfc_state_export(off):
    _, on_states = _storm_states(None)
    fab, off_states = _storm_states({name: {"enabled": False} for name in off})
    assert on_states[("spine", "Ethernet1", str(P))] == 2.0  # stuck: what correlate joins
    assert off_states == on_states
    assert "pfc_storm" not in fab.kinds()


def test_one_pfc_analysis_for_every_rule_and_a_reload_keeps_it_while_its_parameters_hold():
    det = Detector(build())
    kept = det.analysis("pfc")
    assert [r.name for r in det.rules if "pfc" in r.needs] == ["pfc_storm", "pfc_deadlock", "congestion"]
    det.rules = build({"pfc_deadlock": {"enabled": False}})
    assert det.analysis("pfc") is kept
    det.configure(build(), {"pfc": {}, "ib": {}})  # the same parameters written out: kept, with its state
    assert det.analysis("pfc") is kept
    det.configure(build(), {"pfc": {"storm_pause_fraction": 0.99}})
    assert det.analysis("pfc") is not kept and det.analysis("pfc").params.storm_pause_fraction == 0.99
    with pytest.raises(ValueError, match="storm_pause_fraction"):
        det.configure(build(), {"pfc": {"storm_pause_fraction": 2}})
    assert det.analysis("pfc").params.storm_pause_fraction == 0.99  # a bad reload changes nothing


def test_pause_graph_sinks_deadlocks_and_hairpins():
    # a -> (b's device) ; a 3-cycle x1 -> x2 -> x3 -> x1 across three switches, a tail t behind it.
    peer = {("A", "1"): ("B", "9"), ("B", "2"): ("C", "9"),  # A:1 waits on B's ports, B:2 on C's
            ("X", "1"): ("Y", "9"), ("Y", "1"): ("Z", "9"), ("Z", "1"): ("X", "9"), ("T", "1"): ("X", "8")}
    nodes = [("A", "1"), ("B", "2"), ("X", "1"), ("Y", "1"), ("Z", "1"), ("T", "1")]
    g = PausedBy(nodes, peer.get)
    assert g.successors(("A", "1")) == [("B", "2")]
    assert g.successors(("B", "2")) == []  # C has no paused port: B:2 is a sink
    best, behind = best_sinks(nodes, g.successors, lambda pk: pk, {("X", "1"), ("Y", "1"), ("Z", "1")})
    assert best[("A", "1")] == ("B", "2") and best[("X", "1")] is None
    assert behind[("T", "1")] and not behind[("A", "1")]
    cycles = deadlock_cycles(nodes, g.successors)
    assert [sorted(c) for c in cycles] == [[("X", "1"), ("Y", "1"), ("Z", "1")]]
    # Hairpin: two ports of one link pausing each other form a cycle only when hairpins count.
    pair = {("L", "1"): ("S", "1"), ("S", "1"): ("L", "1")}
    g2 = PausedBy(list(pair), pair.get)
    assert deadlock_cycles(list(pair), g2.successors) == []
    assert len(deadlock_cycles(list(pair), lambda pk: g2.successors(pk, hairpin=True))) == 1


def test_duplicates_does_not_pair_correlate_and_the_pfc_rules():
    out = subprocess.run(["duplicates", "--change"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    text = out.stdout + out.stderr
    pairs = [ln for ln in text.splitlines() if "correlate.py" in ln and "analyses/pfc" in ln]
    assert pairs == [], text
