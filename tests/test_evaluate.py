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
    assert row.split() == ["misconfig", "1", "2", "1", "1", "0.50", "1.00", "0/0", "0/0", "1.00/1.00"]
    assert "misconfig: precision 0.50 < 0.95" in text


# ---------------------------------------------------------------------- issue 27: what a user of the detector needs
# Each test builds truth and findings by a rule and computes the expected figures from that rule.

INTERVAL = 10.0


def _span(i: int, polls: int = 6) -> tuple[float, float]:
    """Truth line i's span: well apart from every other line's (no overlap within the tolerance)."""
    start = T + i * 100 * INTERVAL
    return start, start + polls * INTERVAL


ROLE_CASES = [("pfc_storm", "origin"), ("pfc_storm", "victim"), ("pfc_storm", "watchdog"),
              ("credit_deadlock", "member"), ("credit_deadlock", "stalled"), ("pfc_deadlock", "member")]


def test_precision_and_recall_per_kind_and_role() -> None:
    """Every third truth line of a role is missed and every fourth round invents one more: the
    figures per kind/role follow from that rule."""
    truths, findings = [], []
    expect: dict[str, dict[str, int]] = {}
    for i in range(36):
        kind, role = ROLE_CASES[i % len(ROLE_CASES)]
        key = f"{kind}/{role}"
        e = expect.setdefault(key, {"truths": 0, "found": 0, "findings": 0, "false": 0})
        start, end = _span(i)
        prio = None if kind == "credit_deadlock" else 3
        truths.append(truth(kind=kind, role=role, port=f"p{i}", priority=prio, start=start, end=end))
        e["truths"] += 1
        if (i // len(ROLE_CASES)) % 3 != 0:
            findings.append(finding(kind=kind, role=role, port=f"p{i}", priority=prio, start=start, end=end))
            e["found"] += 1
            e["findings"] += 1
        if (i // len(ROLE_CASES) + i) % 4 == 0:  # an invented one of the same kind and role, elsewhere
            findings.append(finding(kind=kind, role=role, port=f"x{i}", priority=prio, start=start, end=end))
            e["findings"] += 1
            e["false"] += 1
    assert any(e["found"] < e["truths"] for e in expect.values()) and any(e["false"] for e in expect.values())
    rep = evaluate({"r": findings}, {"r": truths})
    for key, e in expect.items():
        s = rep.roles[key]
        assert (s.truths, s.matched_truths, s.findings, s.false_findings) == (e["truths"], e["found"], e["findings"], e["false"]), key
        assert s.recall == e["found"] / e["truths"], key
        assert s.precision == ((e["findings"] - e["false"]) / e["findings"] if e["findings"] else None), key
    for kind in {k for k, _ in ROLE_CASES}:  # the kind row sums its roles
        mine = [e for key, e in expect.items() if key.startswith(kind + "/")]
        assert rep.kinds[kind].truths == sum(e["truths"] for e in mine)
        assert rep.kinds[kind].false_findings == sum(e["false"] for e in mine)
    text = format_report(rep)
    assert "kind/role" in text and all(key in text for key in expect)


def test_confusion_says_what_was_found_instead() -> None:
    """Per truth line, what was found at its place and time instead of it; false findings where no
    truth is are (no truth); a finding right about another truth line at the same port is not a
    confusion."""
    plan = [  # (truth kind, role, priority) -> (found kind, role, priority) or None
        (("credit_deadlock", "stalled", None), ("congestion", None, None)),
        (("credit_deadlock", "stalled", None), ("congestion", None, None)),
        (("packet_loss", None, 3), ("packet_loss", None, None)),
        (("pfc_deadlock", "member", 3), ("pfc_storm", "origin", 3)),
        (("link_degraded", None, None), None),
        (("congestion", None, 3), ("congestion", None, 3)),  # found right
        (("link_degraded", None, None), ("congestion", None, 3)),  # another kind: its priority is no news
    ]
    truths, findings, want = [], [], {}
    for i, ((tk, tr, tp), found) in enumerate(plan):
        start, end = _span(i)
        truths.append(truth(kind=tk, role=tr, priority=tp, port=f"p{i}", start=start, end=end))
        t_label = f"{tk}/{tr}" if tr else tk
        if found is None:
            label = "(nothing)"
        else:
            fk, fr, fp = found
            findings.append(finding(kind=fk, role=fr, priority=fp, port=f"p{i}", start=start + INTERVAL, end=end))
            label = (f"{fk}/{fr}" if fr else fk) + ("" if fp == tp or fk != tk or fr != tr else f" (priority {fp})")
        want[(t_label, label)] = want.get((t_label, label), 0) + 1
    # at p0 the stalled port's discards are also (rightly) loss: not a confusion of p0's stall
    truths.append(truth(kind="packet_loss", role=None, priority=None, port="p0", start=_span(0)[0], end=_span(0)[1]))
    findings.append(finding(kind="packet_loss", role=None, priority=None, port="p0", start=_span(0)[0], end=_span(0)[1]))
    want[("packet_loss", "packet_loss")] = 1
    # a false finding where no truth line is
    findings.append(finding(kind="congestion", role=None, priority=3, port="elsewhere", start=T, end=T + 60))
    want[("(no truth)", "congestion")] = 1
    rep = evaluate({"r": findings}, {"r": truths})
    assert dict(rep.confusion) == want
    stalled = [m for m in rep.missed if m["role"] == "stalled"]
    assert len(stalled) == 2 and all(m["found_there"] == ["congestion"] for m in stalled)
    text = format_report(rep)
    assert "credit_deadlock/stalled -> congestion: 2" in text and "found there: congestion" in text


def test_time_to_detect_in_polls_and_seconds() -> None:
    """Findings raised d polls after their truth, at two poll intervals: medians and worst per kind
    are those of the d's, in polls and in seconds."""
    import statistics

    delays = {"r10": [0, 1, 2, 1], "r30": [0, 3]}
    intervals = {"r10": 10.0, "r30": 30.0}
    findings, truths = {}, {}
    for rec, ds in delays.items():
        iv = intervals[rec]
        truths[rec] = [truth(kind="link_degraded", role=None, priority=None, port=f"p{i}", start=T + i * 1000,
                             end=T + i * 1000 + 10 * iv) for i in range(len(ds))]
        findings[rec] = [finding(kind="link_degraded", role=None, priority=None, port=f"p{i}", start=T + i * 1000 + d * iv,
                                 end=None, severity="warning") for i, d in enumerate(ds)]
    rep = evaluate(findings, truths, intervals, tolerance_polls=5)
    s = rep.kinds["link_degraded"]
    polls = [d for ds in delays.values() for d in ds]
    seconds = [d * intervals[rec] for rec, ds in delays.items() for d in ds]
    assert (s.delay_median, s.delay_max) == (statistics.median(polls), max(polls))
    assert (s.delay_s_median, s.delay_s_max) == (statistics.median(seconds), max(seconds))
    assert rep.failures({"max_delay_polls": {"link_degraded": max(polls) - 1}})


@pytest.mark.parametrize(("length", "late", "lasts"), [(20, 1, 1), (20, 1, 3), (20, 2, 30), (6, 1, 6), (1, 0, 3)])
def test_coverage_of_a_lasting_fault(length: int, late: int, lasts: int) -> None:
    """A fault ``length`` polls long, one finding raised ``late`` polls in and lasting ``lasts``
    polls: it covers its polls, and the poll before it (the poll a rule needs to see it)."""
    start, end = T, T + length * INTERVAL
    f = finding(kind="link_degraded", role=None, priority=None, port="1", start=start + late * INTERVAL,
                end=start + (late + lasts) * INTERVAL, severity="warning")
    rep = evaluate({"r": [f]}, {"r": [truth(kind="link_degraded", role=None, priority=None, port="1", start=start, end=end)]},
                   tolerance_polls=3)
    covered_polls = min(length, late + lasts) - max(0, late - 1)
    assert rep.kinds["link_degraded"].coverage == [round(covered_polls / length, 3)]
    floor = {"min_coverage": {"link_degraded": 0.8}}
    assert bool(rep.failures(floor)) == (covered_polls / length < 0.8)


def test_coverage_of_an_open_fault_runs_to_the_recording_s_end() -> None:
    """A truth line open to the end (end null) is covered up to the recording's last poll; two
    findings for it count as their union."""
    end_of_recording = T + 40 * INTERVAL
    t = truth(kind="link_degraded", role=None, priority=None, port="1", start=T, end=None)
    spans = [(1, 10), (20, 30)]  # polls after the truth's start
    fs = [finding(kind="link_degraded", role=None, priority=None, port="1", start=T + a * INTERVAL, end=T + b * INTERVAL,
                  severity="warning") for a, b in spans]
    rep = evaluate({"r": fs}, {"r": [t]}, recording_end={"r": end_of_recording})
    covered = sum(b - (a - 1) for a, b in spans)
    assert rep.kinds["link_degraded"].coverage == [round(covered / 40, 3)]
    open_f = finding(kind="link_degraded", role=None, priority=None, port="1", start=T + 5 * INTERVAL, end=None, severity="warning")
    rep = evaluate({"r": [open_f]}, {"r": [t]}, recording_end={"r": end_of_recording})
    assert rep.kinds["link_degraded"].coverage == [round((40 - 4) / 40, 3)]


def test_every_false_finding_names_its_rule_and_attribution() -> None:
    why = "per-queue counter: queue 3 maps to lossless priority 3"
    invented = [finding(kind="packet_loss", role=None, port=f"e{i}", rule="packet_loss", summary=f"loss {i}",
                        evidence={"attribution": why} if i % 2 else {}) for i in range(4)]
    rep = evaluate({"r": invented}, {"r": []})
    assert [f["port"] for f in rep.false_findings] == [f.port for f in invented]
    for f, out in zip(invented, rep.false_findings, strict=True):
        assert out["rule"] == f.rule and out["summary"] == f.summary and out["recording"] == "r"
        assert out["attribution"] == f.evidence.get("attribution")
    text = format_report(rep)
    assert text.count("rule packet_loss") == len(invented)
    assert text.count(f"attribution: {why}") == sum(1 for f in invented if f.evidence)


def test_json_report_holds_what_the_text_shows() -> None:
    import json

    rep = evaluate({"r": [finding(), finding(kind="congestion", role=None, port="Ethernet9")]},
                   {"r": [truth(), truth(kind="credit_deadlock", role="stalled", port="Ethernet9", priority=None)]})
    out = json.loads(json.dumps(rep.to_json()))
    assert out["recordings"] == rep.recordings and out["pass"] is (not rep.failures())
    assert out["failures"] == rep.failures()
    for kind, s in rep.kinds.items():
        assert out["kinds"][kind]["precision"] == s.precision and out["kinds"][kind]["recall"] == s.recall
        assert out["kinds"][kind]["detect_polls"] == {"median": s.delay_median, "max": s.delay_max}
    assert set(out["roles"]) == set(rep.roles)
    assert out["confusion"] == [{"truth": t, "found": f, "count": n} for (t, f), n in sorted(rep.confusion.items())]
    assert out["missed"] == rep.missed and out["false_findings"] == rep.false_findings
    assert out["per_recording"]["r"] == {"truths": 2, "findings": 2, "matched_truths": 1, "false_findings": 1, "missed": 1}


def test_eval_command_on_a_hand_made_recording(tmp_path) -> None:
    """The worked example of docs/recording-format.md (a link goes down between two polls), as
    text and as JSON: the command's figures are those of its one truth line."""
    import gzip
    import json
    import subprocess
    import sys

    snmprec = ("1.3.6.1.2.1.1.1.0|4|Arista Networks EOS version 4.28\n1.3.6.1.2.1.1.2.0|6|1.3.6.1.4.1.30065.1.3011.7060\n"
               "1.3.6.1.2.1.1.3.0|67|{up}\n1.3.6.1.2.1.2.2.1.8.1|2|{oper}\n1.3.6.1.2.1.31.1.1.1.1.1|4|Ethernet1\n"
               "1.3.6.1.2.1.31.1.1.1.6.1|70|{rx}\n1.3.6.1.2.1.31.1.1.1.10.1|70|{tx}\n1.3.6.1.2.1.31.1.1.1.15.1|66|100000\n")
    t0 = 1764691200.0
    lines = [{"type": "header", "format": "fabricmon-recording", "version": 1, "created": "2026-12-02T16:00:00Z",
              "description": "one leaf, Ethernet1 goes down", "targets": [{"name": "leaf01", "source": "snmp", "profile": "arista"}]},
             {"type": "poll", "target": "leaf01", "source": "snmp", "t": t0, "duration_s": 0.1, "ok": True,
              "payload": {"snmprec": snmprec.format(up=100000, oper=1, rx=1000000, tx=2000000)}},
             {"type": "poll", "target": "leaf01", "source": "snmp", "t": t0 + 10, "duration_s": 0.1, "ok": True,
              "payload": {"snmprec": snmprec.format(up=101000, oper=2, rx=1500000, tx=2600000)}},
             {"type": "truth", "kind": "link_degraded", "device": "leaf01", "port": "Ethernet1", "priority": None,
              "role": None, "start": t0 + 10, "end": None}]
    path = tmp_path / "ex.jsonl.gz"
    with gzip.open(path, "wt") as fh:
        fh.write("".join(json.dumps(line) + "\n" for line in lines))
    truth_lines = [line for line in lines if line["type"] == "truth"]
    cmd = [sys.executable, "-m", "fabricmon.agent", "--log.level", "error", "eval"]
    r = subprocess.run([*cmd, "--json", str(path)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    out = json.loads(r.stdout)
    row = out["kinds"]["link_degraded"]
    assert row["truths"] == len(truth_lines) == row["matched_truths"] and row["recall"] == 1.0 and out["pass"] is True
    assert out["per_recording"][str(path)]["truths"] == len(truth_lines)
    text = subprocess.run([*cmd, str(path)], capture_output=True, text=True, timeout=120).stdout
    assert text.startswith("1 recording(s)") and text.rstrip().endswith("PASS")
