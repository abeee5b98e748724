"""Scoring of findings against truth (agent/evaluate.py), with hand-made findings and truth."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from fabricmon.agent.evaluate import DEFAULT_FLOORS, evaluate, format_report, run_eval
from fabricmon.core.model import Finding

T = 1000.0


def truth(kind="pfc_storm", device="leaf01", port="Ethernet3", priority=3, role="origin", start=T + 100, end=T + 240, **kw):
    return {"type": "truth", "kind": kind, "device": device, "port": port, "priority": priority, "role": role,
            "start": start, "end": end, **kw}


def finding(kind="pfc_storm", device="leaf01", port="Ethernet3", priority=3, role="origin", start=T + 110, end=T + 260,
            severity="critical", **kw):
    return Finding(kind=kind, severity=severity, device=device, port=port, priority=priority, role=role,
                   start=start, end=end, **kw)


def test_exact_match_precision_recall_delay() -> None:
    rep = evaluate({"r": [finding()]}, {"r": [truth()]})
    s = rep.kinds["pfc_storm"]
    assert (s.truths, s.findings, s.matched_truths, s.false_findings) == (1, 1, 1, 0)
    assert s.precision == 1.0 and s.recall == 1.0
    assert s.delay_median == 1.0 and s.delay_max == 1.0  # 10 s late at a 10 s poll interval
    assert rep.origin_top1 == 1.0 and not rep.failures()


@pytest.mark.parametrize("change", [
    {"device": "leaf02"}, {"port": "Ethernet4"}, {"priority": 4}, {"priority": None}, {"role": "victim"},
    {"kind": "congestion"}, {"start": T + 300, "end": None},  # starts 6 polls after the truth ended
])
def test_any_field_mismatch_is_a_miss_and_a_false_finding(change) -> None:
    rep = evaluate({"r": [finding(**change)]}, {"r": [truth()]})
    s = rep.kinds["pfc_storm"]
    assert s.matched_truths == 0 and s.recall == 0.0
    f_kind = change.get("kind", "pfc_storm")
    assert rep.kinds[f_kind].false_findings == 1
    assert rep.failures()


def test_null_priority_matches_null_and_tolerance_widens_time() -> None:
    t = truth(kind="link_degraded", port="1", priority=None, role=None, start=T, end=T + 10)
    # starts two polls after the truth ended: within the default tolerance of 2 polls
    f = finding(kind="link_degraded", port="1", priority=None, role=None, start=T + 30, end=None, severity="warning")
    assert evaluate({"r": [f]}, {"r": [t]}).kinds["link_degraded"].recall == 1.0
    assert evaluate({"r": [f]}, {"r": [t]}, tolerance_polls=1).kinds["link_degraded"].recall == 0.0
    # the poll interval scales the tolerance and the delay
    rep = evaluate({"r": [f]}, {"r": [t]}, poll_interval={"r": 30.0}, tolerance_polls=1)
    assert rep.kinds["link_degraded"].delays == [1.0]


def test_early_finding_has_zero_delay_and_duplicates_are_not_false() -> None:
    rep = evaluate({"r": [finding(start=T + 90), finding(start=T + 120)]}, {"r": [truth()]})
    s = rep.kinds["pfc_storm"]
    assert s.delays == [0.0] and s.matched_findings == 2 and s.false_findings == 0


def test_origin_on_either_end_of_the_cable() -> None:
    t = truth(peer_device="gpu03", peer_port="eth0")
    on_nic = finding(device="gpu03", port="eth0")
    assert evaluate({"r": [on_nic]}, {"r": [t]}).kinds["pfc_storm"].recall == 1.0
    # a finding naming the truth port as its peer matches too
    via_peer = finding(device="gpu03", port="eth0", peer_device="leaf01", peer_port="Ethernet3")
    assert evaluate({"r": [via_peer]}, {"r": [truth()]}).kinds["pfc_storm"].recall == 1.0
    # but not for victims
    v = truth(role="victim", peer_device="gpu03", peer_port="eth0")
    assert evaluate({"r": [finding(device="gpu03", port="eth0", role="victim")]}, {"r": [v]}).kinds["pfc_storm"].recall == 0.0


def test_origin_top1_takes_the_earliest_origin_finding() -> None:
    wrong_first = finding(device="leaf02", port="Ethernet1", start=T + 100)
    right_later = finding(start=T + 120)
    rep = evaluate({"r": [wrong_first, right_later]}, {"r": [truth()]})
    assert rep.kinds["pfc_storm"].recall == 1.0
    assert rep.origin_truths == 1 and rep.origin_hits == 0
    assert any("origin top-1" in f for f in rep.failures())
    rep = evaluate({"r": [right_later]}, {"r": [truth()]})
    assert rep.origin_hits == 1


def test_benign_recording_findings_are_false_and_floors() -> None:
    dl = finding(kind="pfc_deadlock", role="member")
    rep = evaluate({"benign": [dl], "storm": [finding()]}, {"benign": [], "storm": [truth()]})
    assert rep.recordings == 2
    assert rep.kinds["pfc_deadlock"].false_findings == 1 and rep.kinds["pfc_deadlock"].precision == 0.0
    fails = rep.failures()
    assert any("pfc_deadlock: 1 false" in f for f in fails)
    # floors are configurable: drop the precision floor and allow one false deadlock
    relaxed = {"precision": None, "max_false": {}}
    assert rep.failures(relaxed) == []
    assert DEFAULT_FLOORS["recall"] == 0.95


def test_delay_floor() -> None:
    late = finding(start=T + 130)  # 3 polls late
    rep = evaluate({"r": [late]}, {"r": [truth()]})
    assert rep.kinds["pfc_storm"].delay_max == 3.0
    assert any("max detection delay 3 polls > 2" in f for f in rep.failures())


def test_dict_findings_and_report_text() -> None:
    f = finding().to_json()
    rep = evaluate({"r": [f]}, {"r": [truth(), truth(kind="packet_loss", role=None, port="Ethernet9")]})
    text = format_report(rep)
    lines = text.splitlines()
    row = next(ln for ln in lines if ln.startswith("pfc_storm"))
    assert row.split()[:7] == ["pfc_storm", "1", "1", "1", "0", "1.00", "1.00"]
    assert "missed (1):" in text and "packet_loss leaf01 Ethernet9 prio 3" in text
    assert lines[-1].startswith("FAIL: packet_loss: recall 0.00")


def test_optional_truth_match_counts_and_miss_does_not() -> None:
    """An optional line: a matching finding is correct, no finding is not a miss."""
    opt = truth(kind="pfc_storm", role="victim", port="Ethernet9", optional=True)
    found = finding(role="victim", port="Ethernet9")
    rep = evaluate({"r": [finding(), found]}, {"r": [truth(), opt]})
    s = rep.kinds["pfc_storm"]
    assert (s.truths, s.matched_truths, s.findings, s.matched_findings) == (1, 1, 2, 2)
    assert (s.optional_truths, s.matched_optional) == (1, 1) and s.precision == 1.0 and s.recall == 1.0
    assert not rep.false and not rep.misses and not rep.failures()
    assert "optional truth found: pfc_storm 1/1" in format_report(rep)
    missed = evaluate({"r": [finding()]}, {"r": [truth(), opt]})
    m = missed.kinds["pfc_storm"]
    assert (m.recall, m.matched_optional, m.optional_truths) == (1.0, 0, 1)
    assert not missed.misses and not missed.failures()
    assert "optional truth found: pfc_storm 0/1" in format_report(missed)


def test_optional_truth_is_not_a_required_one_or_an_origin() -> None:
    """Only ``true`` makes a line optional; optional origins stay out of top-1 and delays."""
    for flag in (False, None, "yes"):
        rep = evaluate({"r": []}, {"r": [truth(optional=flag)]})
        assert rep.kinds["pfc_storm"].recall == 0.0 and rep.misses
    late = finding(start=T + 150)  # 5 polls late: a delay failure if it were required
    rep = evaluate({"r": [late]}, {"r": [truth(optional=True)]})
    assert rep.origin_truths == 0 and rep.kinds["pfc_storm"].delays == [] and not rep.failures()
    assert rep.kinds["pfc_storm"].precision == 1.0 and rep.kinds["pfc_storm"].recall is None


HAVE_REPLAY = importlib.util.find_spec("fabricmon.agent.replay") is not None


@pytest.mark.skipif(not HAVE_REPLAY, reason="fabricmon.agent.replay (replay_recording) is not in the tree yet")
def test_run_eval_end_to_end_on_the_corpus() -> None:
    corpus = Path(__file__).resolve().parent / "scenarios"
    text, ok = run_eval([corpus / "nic_pause_storm_onyx.jsonl.gz", corpus / "benign_heavy_load.jsonl.gz"], floors={})
    assert "2 recording(s)" in text and "storm origin top-1" in text
    assert isinstance(ok, bool)


# ---------------------------------------------------------------------- misconfig (the lossless checklist)
def mis_truth(check="pfc_priorities_mismatch", device="leaf01", port="swp5", priority=3, start=T, end=None, **kw):
    return truth(kind="misconfig", device=device, port=port, priority=priority, role=None, start=start, end=end, check=check, **kw)


def mis_finding(check="pfc_priorities_mismatch", device="leaf01", port="swp5", priority=3, start=T, end=None, **kw):
    return finding(kind="misconfig", device=device, port=port, priority=priority, role=None, start=start, end=end,
                   severity="warning", evidence={"check": check}, **kw)


def test_misconfig_matches_on_the_check() -> None:
    rep = evaluate({"r": [mis_finding()]}, {"r": [mis_truth()]})
    s = rep.kinds["misconfig"]
    assert (s.truths, s.findings, s.matched_truths, s.false_findings) == (1, 1, 1, 0)
    assert s.delays == [0.0] and not rep.failures()
    other = evaluate({"r": [mis_finding(check="pfc_not_enabled")]}, {"r": [mis_truth()]})
    assert other.kinds["misconfig"].recall == 0.0 and other.kinds["misconfig"].false_findings == 1
    assert other.misses == ["r: misconfig pfc_priorities_mismatch leaf01 swp5 prio 3 at 1970-01-01T00:16:40.000Z"]
    assert other.false == ["r: misconfig pfc_not_enabled leaf01 swp5 prio 3 at 1970-01-01T00:16:40.000Z"]


def test_misconfig_on_either_end_of_the_link() -> None:
    """A link check names the end to fix first; the truth may name the other end."""
    f = mis_finding(device="host01", port="mlx5_0/1", peer_device="leaf01", peer_port="swp5")
    assert evaluate({"r": [f]}, {"r": [mis_truth()]}).kinds["misconfig"].recall == 1.0
    t = mis_truth(peer_device="host01", peer_port="mlx5_0/1")
    assert evaluate({"r": [mis_finding(device="host01", port="mlx5_0/1")]}, {"r": [t]}).kinds["misconfig"].recall == 1.0
    assert evaluate({"r": [mis_finding(device="host01", port="mlx5_0/1")]}, {"r": [mis_truth()]}).kinds["misconfig"].recall == 0.0


def test_misconfig_priority_null_on_one_side_matches_any() -> None:
    assert evaluate({"r": [mis_finding(check="trust_mismatch", priority=None)]},
                    {"r": [mis_truth(check="trust_mismatch", priority=None)]}).kinds["misconfig"].recall == 1.0
    assert evaluate({"r": [mis_finding(priority=3)]}, {"r": [mis_truth(priority=None)]}).kinds["misconfig"].recall == 1.0
    assert evaluate({"r": [mis_finding(priority=4)]}, {"r": [mis_truth(priority=3)]}).kinds["misconfig"].recall == 0.0


def test_misconfig_in_the_report_table() -> None:
    rep = evaluate({"r": [mis_finding(), mis_finding(check="headroom_missing", port="swp9")]}, {"r": [mis_truth()]})
    s = rep.kinds["misconfig"]
    assert (s.matched_findings, s.false_findings, s.precision) == (1, 1, 0.5)
    text = format_report(rep)
    row = next(ln for ln in text.splitlines() if ln.startswith("misconfig"))
    assert row.split() == ["misconfig", "1", "2", "1", "1", "0.50", "1.00", "0", "0"]
    assert "misconfig: precision 0.50 < 0.95" in text
