"""The pipeline worker keeps the event loop free (issue 29 item 4, issue 32): renders and page
builds run on the worker, a scrape during the first render gets the self metrics with
``fabricmon_exposition_ready 0`` at once, and the loop's lag is measured and exported."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
from aiohttp.test_utils import TestClient, TestServer

from fabricmon.agent.exporter import metrics
from fabricmon.agent.exporter.server import Exporter, make_app
from fabricmon.agent.looplag import LoopLag
from fabricmon.agent.pipeline import Pipeline
from fabricmon.agent.web import views
from fabricmon.agent.worker import PipelineWorker
from fabricmon.core.model import Finding, Poll, TargetSpec


async def test_a_scrape_during_the_first_render_gets_self_metrics_at_once(monkeypatch):
    real = metrics.all_families
    release = threading.Event()

    def slow(*args, **kw):  # the first render of a large fabric: seconds, on the worker
        release.wait(30)
        return real(*args, **kw)

    monkeypatch.setattr(metrics, "all_families", slow)
    worker = PipelineWorker()
    exporter = Exporter(Pipeline([TargetSpec("t1", "host")], []), worker=worker)
    exporter.loop_lag = LoopLag().start()
    async with TestClient(TestServer(make_app(exporter))) as client:
        exporter.request_render()
        await asyncio.sleep(0.1)
        t0 = time.monotonic()
        r = await client.get("/metrics")
        body = await r.text()
        assert r.status == 200 and time.monotonic() - t0 < 5  # answered, not held until the render ends
        assert "fabricmon_exposition_ready 0" in body and "fabricmon_event_loop_lag_seconds_count" in body
        assert "fabricmon_target_up" not in body  # no fabric yet
        assert (await client.get("/ready")).status == 503
        release.set()
        for _ in range(100):
            if exporter.rendered:
                break
            await asyncio.sleep(0.05)
        body = await (await client.get("/metrics")).text()
        assert "fabricmon_exposition_ready 1" in body and 'fabricmon_target_up{target="t1",source="host"} 0' in body
    exporter.loop_lag.stop()
    worker.close()


async def test_ingest_and_api_targets_go_through_the_worker():
    worker = PipelineWorker()
    p = Pipeline([TargetSpec("t1", "host")], [])
    exporter = Exporter(p, worker=worker)
    async with TestClient(TestServer(make_app(exporter))) as client:
        await worker.call(p.ingest, Poll("t1", "host", 100.0, 0.1, False, error="boom", reason="command"))
        exporter.request_render()
        for _ in range(100):
            if exporter.rendered and not exporter._scheduled:
                break
            await asyncio.sleep(0.02)
        [t] = await (await client.get("/api/targets")).json()
        assert t["target"] == "t1" and t["up"] is False and t["last_error"] == "boom"
        assert (await client.get("/ready")).status == 200
    worker.close()


def _findings(n: int) -> list[Finding]:
    return [Finding("congestion", "warning", f"sw{i // 64:04d}", f"Ethernet{i % 64}", 3, None, 1000.0 + i,
                    summary=f"queue 3 congested on port {i}", evidence={"i": i}, rule="congestion") for i in range(n)]


async def test_finding_pages_render_on_the_worker_while_healthz_is_answered(monkeypatch):
    """Issue 32: with 20,000 findings, 60 parallel /findings/<id> pushed /healthz to 11-15 s."""
    worker = PipelineWorker()
    p = Pipeline([], [])
    p.detector.restore(_findings(20_000))
    exporter = Exporter(p, worker=worker)
    await worker.call(exporter.render_now)
    threads: set[str] = set()
    real = views.finding_page

    def spy(*args, **kw):
        threads.add(threading.current_thread().name)
        time.sleep(0.05)  # a page that takes a while, as with 20,000 findings on a loaded machine
        return real(*args, **kw)

    monkeypatch.setattr(views, "finding_page", spy)
    ids = list(exporter.web.by_id)[:60]
    async with TestClient(TestServer(make_app(exporter))) as client:
        health: list[float] = []

        async def healthz() -> None:
            for _ in range(20):
                t0 = time.monotonic()
                assert (await client.get("/healthz")).status == 200
                health.append(time.monotonic() - t0)
                await asyncio.sleep(0.02)

        async def page(fid: str) -> int:
            r = await client.get(f"/findings/{fid}")
            await r.read()
            return r.status

        statuses, _ = await asyncio.gather(asyncio.gather(*(page(f) for f in ids)), healthz())
    assert set(statuses) <= {200, 503} and 200 in statuses  # beyond 16 pages waiting: 503, at once
    assert threads == {"fabricmon-pipeline"}
    assert len(health) == 20  # answered all along
    worker.close()


async def test_the_loop_lag_monitor_sees_a_stall():
    lag = LoopLag().start()
    await asyncio.sleep(0.1)
    time.sleep(0.3)  # the loop blocked, as a C call on the loop would
    await asyncio.sleep(0.1)
    lag.stop()
    assert 0.25 <= lag.max_recent() < 5
    text = lag.text()
    exported = float(next(ln.split()[1] for ln in text.splitlines() if ln.startswith("fabricmon_event_loop_lag_max_seconds ")))
    assert exported == lag.max_recent()
    le_01 = int(next(ln.split()[1] for ln in text.splitlines() if ln.startswith('fabricmon_event_loop_lag_seconds_bucket{le="0.1"}')))
    assert lag.n // 2 <= le_01 < lag.n  # the wake-up after the stall is above 0.1 s (the others: on a loaded machine, mostly)
    assert f"fabricmon_event_loop_lag_seconds_count {lag.n}" in text


async def test_a_reader_runs_beside_a_render_but_never_beside_an_ingest():
    """The final state save at SIGTERM must not wait for a render of millions of series to end."""
    worker = PipelineWorker()
    render_started, render_release = threading.Event(), threading.Event()
    ingest_started, ingest_release = threading.Event(), threading.Event()

    def render() -> None:
        render_started.set()
        render_release.wait(10)

    def ingest() -> None:
        ingest_started.set()
        ingest_release.wait(10)

    rendering = asyncio.wrap_future(worker.submit(render, mutates=False))
    await asyncio.to_thread(render_started.wait, 10)
    assert await asyncio.wait_for(worker.read(lambda: "snapshot"), 5) == "snapshot"  # beside the render
    render_release.set()
    await rendering
    ingesting = asyncio.wrap_future(worker.submit(ingest))
    await asyncio.to_thread(ingest_started.wait, 10)
    reading = asyncio.ensure_future(worker.read(lambda: "snapshot"))
    await asyncio.sleep(0.3)
    assert not reading.done()  # waits for the ingest
    ingest_release.set()
    await ingesting
    assert await asyncio.wait_for(reading, 5) == "snapshot"
    worker.close()


async def test_the_worker_and_the_compression_run_at_a_lower_cpu_priority_than_the_loop():
    """Heavy threads give way to the event loop when the cores are busy: the pipeline worker
    and the gzip thread run BACKGROUND_NICE nicer than the loop's thread (Linux: per thread),
    once, however many jobs they run."""
    import os

    from fabricmon.agent.exporter.exposition import Exposition, build
    from fabricmon.core.threads import BACKGROUND_NICE

    def nice() -> int:
        return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())

    loop_nice = nice()
    want = min(19, loop_nice + BACKGROUND_NICE)
    worker = PipelineWorker()
    try:
        assert [await worker.call(nice) for _ in range(3)] == [want] * 3
    finally:
        worker.close()
    expo = Exposition(build([]), 1, time.time(), 0.0)
    seen = []
    real = expo._deflated
    expo._deflated = lambda om: (real(om), seen.append(nice()))[0]  # type: ignore[method-assign]
    await expo.compressed(False)
    await expo.compressed(True)
    assert seen == [want, want]
    assert await asyncio.to_thread(nice) == loop_nice  # the loop's executor is not touched
    assert nice() == loop_nice


def test_a_worker_shortens_the_wait_for_the_gil_after_each_system_call():
    """The loop gets the GIL back from a busy worker within SWITCH_INTERVAL, not CPython's 5 ms
    (agent/worker.py: the convoy effect); a shorter interval already set is kept."""
    import sys

    from fabricmon.agent.worker import SWITCH_INTERVAL

    before = sys.getswitchinterval()
    try:
        sys.setswitchinterval(0.005)
        PipelineWorker().close()
        assert sys.getswitchinterval() == pytest.approx(SWITCH_INTERVAL)
        sys.setswitchinterval(SWITCH_INTERVAL / 2)
        PipelineWorker().close()
        assert sys.getswitchinterval() == pytest.approx(SWITCH_INTERVAL / 2)
    finally:
        sys.setswitchinterval(before)
