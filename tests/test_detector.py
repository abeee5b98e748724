"""Detector framework: hysteresis counts only polls that brought data for the finding's device;
rules read only the analyses they declare; a failing rule or analysis is counted, exported and
fails ``fabricmon replay``/``eval``; observations merge the same whatever the rules' order."""

from __future__ import annotations

import pytest

from fabricmon.agent.cli import main
from fabricmon.agent.detector import DetectContext, Detector, Observation, Rule
from fabricmon.agent.detector.analyses.pfc import PfcAnalysis
from fabricmon.agent.detector.rules.link_flap import LinkFlapRule
from fabricmon.agent.exporter.exposition import render
from fabricmon.agent.store import CounterStore
from fabricmon.core.topology import Topology
from tests.conftest import ROOT


class Always(Rule):
    name = "always"
    kinds = ("congestion",)
    raise_polls = 2
    clear_polls = 2

    def __init__(self, severity: str = "warning", name: str = "always"):
        super().__init__()
        self.on = True
        self.severity = severity
        self.name = name  # type: ignore[misc]

    def evaluate(self, ctx):
        if self.on:
            yield Observation("congestion", self.severity, "sw1", "1", summary=f"from {self.name}")


class Broken(Rule):
    name = "broken"
    kinds = ("congestion",)

    def evaluate(self, ctx):
        raise KeyError("bug")


def ctx(t, devices):
    return DetectContext(CounterStore(), Topology(), t, set(), set(devices))


def test_raise_needs_fresh_polls_of_that_device():
    rule = Always()
    det = Detector([rule])
    det.run(ctx(0, {"sw1"}))
    det.run(ctx(1, {"sw2"}))  # another target's poll: not a second hit
    det.run(ctx(2, {"sw2"}))
    assert det.active == []
    det.run(ctx(10, {"sw1"}))
    [f] = det.active
    assert f.start == 0 and f.end is None


def test_clear_needs_fresh_misses_and_end_is_first_miss():
    rule = Always()
    det = Detector([rule])
    det.run(ctx(0, {"sw1"}))
    det.run(ctx(10, {"sw1"}))
    rule.on = False
    det.run(ctx(20, {"sw1"}))
    det.run(ctx(25, {"sw2"}))  # no data for sw1: neither hit nor miss
    assert len(det.active) == 1
    det.run(ctx(30, {"sw1"}))
    assert det.active == []
    [f] = det.take_finished()
    assert (f.start, f.end) == (0, 20)


def test_a_failing_rule_is_counted_not_raised():
    det = Detector([Broken(), Always()])
    det.run(ctx(0, {"sw1"}))
    det.run(ctx(10, {"sw1"}))
    status = det.status()
    assert status.failures == {"broken": 2} and status.failed_rules == ("broken",)
    assert status.last_failure["broken"] == "KeyError: 'bug'"
    assert status.problems() == ["rule broken failed 2 time(s); last: KeyError: 'bug'"]
    assert det.last_errors == ["rule broken failed: KeyError: 'bug'"]
    assert len(det.active) == 1
    text = render(det.families())[0].decode()
    assert 'fabricmon_rule_failures_total{rule="always"} 0\nfabricmon_rule_failures_total{rule="broken"} 2\n' in text


def test_same_key_merges_by_severity_then_rule_name_whatever_the_order():
    def winner(rules: list[Rule]) -> tuple[str, str, str]:
        det = Detector(rules)
        det.run(ctx(0, {"sw1"}))
        det.run(ctx(10, {"sw1"}))
        [f] = det.active
        return f.severity, f.rule, f.summary

    a, b = Always("warning", "a_rule"), Always("warning", "b_rule")
    assert winner([a, b]) == winner([b, a]) == ("warning", "a_rule", "from a_rule")
    c = Always("critical", "c_rule")
    assert winner([a, c]) == winner([c, a]) == ("critical", "c_rule", "from c_rule")


def test_a_rule_reads_only_the_analyses_it_names():
    class Sneaky(Rule):
        name = "sneaky"
        kinds = ("pfc_storm",)

        def evaluate(self, ctx):
            return ctx.analysis(PfcAnalysis).result.trees  # not in needs

    class Honest(Sneaky):
        name = "honest"
        needs = ("pfc",)

    det = Detector([Sneaky(), Honest()])
    det.run(ctx(0, {"sw1"}))
    assert det.status().failed_rules == ("sneaky",)
    assert "name it in the rule's needs" in det.status().last_failure["sneaky"]
    typo = type("Typo", (Honest,), {"name": "typo", "needs": ("nope",)})
    with pytest.raises(ValueError, match="needs unknown analysis 'nope'"):
        Detector([typo()])


def test_a_failing_analysis_fails_the_rules_that_need_it_only(monkeypatch):
    def broken(self, ctx):
        raise ZeroDivisionError("division by zero")

    monkeypatch.setattr(PfcAnalysis, "_analyze", broken)

    class NeedsPfc(Always):
        needs = ("pfc",)

    det = Detector([NeedsPfc("warning", "reader"), Always("warning", "other")])
    det.run(ctx(0, {"sw1"}))
    det.run(ctx(10, {"sw1"}))
    assert det.status().failed_rules == ("reader",)
    assert det.status().last_failure["reader"] == "RuntimeError: analysis pfc failed: ZeroDivisionError: division by zero"
    assert "analysis pfc failed: ZeroDivisionError: division by zero" in det.last_errors
    assert [f.rule for f in det.active] == ["other"]


@pytest.fixture
def link_flap_fails(monkeypatch):
    def broken(self, ctx):
        raise ValueError("a bug in link_flap")

    monkeypatch.setattr(LinkFlapRule, "evaluate", broken)


@pytest.mark.usefixtures("link_flap_fails")
def test_replay_exits_3_and_names_the_rule_that_failed(capsys):
    code = main(["replay", "--fast", "--quiet", str(ROOT / "tests" / "scenarios" / "link_flap_ib.jsonl.gz")])
    err = capsys.readouterr().err
    assert code == 3
    assert "error: detector rule link_flap failed" in err and "ValueError: a bug in link_flap" in err


@pytest.mark.usefixtures("link_flap_fails")
def test_eval_fails_and_names_the_rule_that_failed(capsys):
    code = main(["eval", str(ROOT / "tests" / "scenarios" / "link_flap_ib.jsonl.gz")])
    out = capsys.readouterr().out
    assert code == 1
    assert "FAIL:" in out and "detector rules failed" in out and "rule link_flap failed" in out and "\nPASS" not in out
