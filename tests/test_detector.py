"""Detector framework: hysteresis counts only polls that brought data for the finding's device."""

from __future__ import annotations

from fabricmon.agent.detector import DetectContext, Detector, Observation, Rule
from fabricmon.agent.store import CounterStore
from fabricmon.core.topology import Topology


class Always(Rule):
    name = "always"
    kinds = ("congestion",)
    raise_polls = 2
    clear_polls = 2

    def __init__(self):
        super().__init__()
        self.on = True

    def evaluate(self, ctx):
        if self.on:
            yield Observation("congestion", "warning", "sw1", "1", summary="x")


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
    class Broken(Rule):
        name = "broken"
        kinds = ("congestion",)

        def evaluate(self, ctx):
            raise KeyError("bug")

    det = Detector([Broken(), Always()])
    det.run(ctx(0, {"sw1"}))
    det.run(ctx(10, {"sw1"}))
    assert det.errors == {"broken": 2}
    assert len(det.active) == 1
