"""Scheduler isolation: a hanging and a failing target never delay the others."""

from __future__ import annotations

import asyncio
import itertools
import time

from fabricmon.agent.scheduler import ScheduledTarget, Scheduler
from fabricmon.collectors import Collector, FetchError, SourceOptions
from fabricmon.core.model import ParseResult


class FakeCollector(Collector):
    source = "fake"

    def __init__(self, name: str, behaviour: str) -> None:
        super().__init__(name, "127.0.0.1", SourceOptions())
        self.behaviour = behaviour
        self.running = 0
        self.max_running = 0
        self.starts: list[float] = []
        self.cancelled = 0

    async def fetch(self):
        self.running += 1
        self.max_running = max(self.max_running, self.running)
        self.starts.append(time.monotonic())
        try:
            if self.behaviour == "hang":
                await asyncio.sleep(3600)
            if self.behaviour == "fail":
                raise FetchError("connection refused by 127.0.0.1:1", reason="connection")
            if self.behaviour == "crash":
                raise RuntimeError("bug")
            await asyncio.sleep(0.01)
            return {"ok": True}
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        finally:
            self.running -= 1

    @classmethod
    def parse(cls, payload, spec, state):
        return ParseResult(), state


async def test_hanging_and_failing_targets_do_not_delay_others():
    polls = []
    sched = Scheduler(polls.append, max_concurrency=8, jitter=0.0, backoff_max=10.0)
    good = FakeCollector("good", "ok")
    hang = FakeCollector("hang", "hang")
    fail = FakeCollector("fail", "fail")
    crash = FakeCollector("crash", "crash")
    sched.start([ScheduledTarget(good, 0.1, 1.0), ScheduledTarget(hang, 0.1, 0.3),
                 ScheduledTarget(fail, 0.1, 1.0), ScheduledTarget(crash, 0.1, 1.0)])
    await asyncio.sleep(1.55)
    await sched.stop()
    by = {n: [p for p in polls if p.target == n] for n in ("good", "hang", "fail", "crash")}
    # The good target kept its 0.1 s interval (about 15 polls), with no gap near the hang timeout.
    assert len(by["good"]) >= 12
    gaps = [b - a for a, b in itertools.pairwise(good.starts)]
    assert max(gaps) < 0.25
    assert all(p.ok for p in by["good"])
    # The hanging target timed out (and its fetch was cancelled), the failing one backed off.
    assert by["hang"] and all(not p.ok and p.reason == "timeout" for p in by["hang"])
    assert hang.cancelled >= 1
    assert "timeout after 0.3 s" in by["hang"][0].error
    assert 2 <= len(by["fail"]) <= 5  # 0.1, 0.2, 0.4, 0.8 s backoff within 1.55 s
    assert by["fail"][0].reason == "connection" and "refused" in by["fail"][0].error
    assert by["crash"][0].reason == "internal" and "RuntimeError" in by["crash"][0].error
    # Polls of one target never overlap.
    assert max(c.max_running for c in (good, hang, fail, crash)) == 1


def test_backoff_is_exponential_and_capped():
    sched = Scheduler(lambda p: None, backoff_max=60.0)
    t = ScheduledTarget(FakeCollector("x", "ok"), 10.0, 5.0)
    assert [sched.next_delay(t, n) for n in range(5)] == [10.0, 20.0, 40.0, 60.0, 60.0]


async def test_concurrency_limit_is_global():
    polls = []
    sched = Scheduler(polls.append, max_concurrency=1, jitter=0.0)
    a, b = FakeCollector("a", "ok"), FakeCollector("b", "ok")
    running = []

    orig_a, orig_b = a.fetch, b.fetch

    async def watched(orig):
        running.append(a.running + b.running)
        return await orig()

    a.fetch = lambda: watched(orig_a)  # type: ignore[method-assign]
    b.fetch = lambda: watched(orig_b)  # type: ignore[method-assign]
    sched.start([ScheduledTarget(a, 0.05, 1.0), ScheduledTarget(b, 0.05, 1.0)])
    await asyncio.sleep(0.4)
    await sched.stop()
    assert polls and max(running) == 0  # nobody else was inside fetch when one started


async def test_unusable_payload_backs_off_like_a_failed_fetch():
    polls = []

    def reject(poll):  # the pipeline could not parse it
        polls.append(poll)
        return False

    sched = Scheduler(reject, jitter=0.0, backoff_max=10.0)
    sched.start([ScheduledTarget(FakeCollector("garbage", "ok"), 0.1, 1.0)])
    await asyncio.sleep(0.75)
    await sched.stop()
    # 0.1 s interval, but backing off: polls at 0, 0.2, 0.6 s instead of 8 on the interval
    assert 2 <= len(polls) <= 4 and sched.failures == {}


async def test_a_task_that_dies_is_logged_counted_shown_down_and_restarted(caplog):
    """The original defect: interval 0 made the loop divide by zero after the first poll, the
    task died silently and the target stayed up. Now the death is logged, counted, reported as
    a failed poll (the target shows down) and the loop restarts. (Config forbids interval 0;
    the scheduler is built directly here to reproduce the crash.)"""
    from fabricmon.agent.pipeline import Pipeline
    from fabricmon.core.model import TargetSpec

    pipeline = Pipeline([TargetSpec("bad", "fake"), TargetSpec("good", "fake")], [])
    s = Scheduler(pipeline.ingest, jitter=0.0, backoff_max=0.05)
    s.start([ScheduledTarget(FakeCollector("bad", "ok"), 0.0, 1.0),
             ScheduledTarget(FakeCollector("good", "ok"), 0.02, 1.0)])
    try:
        for _ in range(500):
            await asyncio.sleep(0.02)
            if s.restarts >= 2 and pipeline.targets["good"].polls >= 3:
                break
    finally:
        await s.stop()
    assert s.restarts >= 2  # restarted, and died again: each death counted
    assert "the poll task of bad died; restarting it" in caplog.text and "ZeroDivisionError" in caplog.text
    bad = pipeline.targets["bad"]
    assert bad.up is False and bad.errors.get("internal", 0) >= 1 and "ZeroDivisionError" in (bad.last_error or "")
    assert pipeline.targets["good"].polls >= 3  # the other target kept polling


async def test_agent_exports_scheduler_restarts(tmp_path):
    from fabricmon.agent.config import load
    from fabricmon.agent.runtime import Agent

    path = tmp_path / "f.yml"
    path.write_text("targets: []\n")
    agent = Agent(load(path), listen="")
    agent.scheduler.restarts = 3
    assert agent.scheduler.status().restarts == 3
    [family] = agent.families()  # no state_dir, not serving: the scheduler's family alone
    assert family.name == "fabricmon_scheduler_task_restarts_total" and family.lines == ["fabricmon_scheduler_task_restarts_total 3"]
