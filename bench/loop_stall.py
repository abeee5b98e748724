"""The longest event-loop stall of the live agent's design at a fabric size (issue 29 item 4).

Runs what ``fabricmon run`` runs around its event loop: the pipeline worker (agent/worker.py)
ingests every poll (record, parse, store, detect) and renders (the exposition and the pages),
the server answers scrapes, and the loop-lag monitor (agent/looplag.py) records how late the
loop woke. Polls of the bench fabric (bench/fabric.py) are handed to the worker as the
scheduler hands them, the first with the topology (the first render builds every template),
while a client in another process scrapes ``/metrics`` (OpenMetrics + gzip) and ``/healthz``
all along. The payloads are built before the agent starts: a real agent receives them from
its subprocesses a pipe chunk at a time, and a thread of the bench generating 200,000 ports
of text in Python would compete for the interpreter as no agent's own work does. The figure
is the monitor's longest lag, beside the /healthz latencies, and each lag over 0.1 s comes
with its measured cause: what both threads did over it (a sampler process), the loop callback
that filled it, and the worker's line.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any

from bench.fabric import Fabric
from bench.size import CONFIG
from fabricmon.agent.assemble import build_pipeline
from fabricmon.agent.exporter.server import Exporter, make_app, start_server
from fabricmon.agent.looplag import BUCKETS, LoopLag
from fabricmon.agent.looplag import INTERVAL as INTERVAL_LAG
from fabricmon.agent.worker import PipelineWorker
from fabricmon.core.model import Poll, TargetSpec

T0 = 1_700_000_000.0
INTERVAL = 10.0
# The client: /healthz every 50 ms and a Prometheus-like /metrics scrape every second, until stdin closes.
CLIENT = r"""
import json, sys, threading, time, urllib.request
port = int(sys.argv[1]); stop = threading.Event(); health = []; scrapes = []
def get(path, headers=None):
    t0 = time.perf_counter()
    try:
        with urllib.request.urlopen(urllib.request.Request(f"http://127.0.0.1:{port}{path}", headers=headers or {}), timeout=120) as r:
            r.read(); return time.perf_counter() - t0, r.status
    except Exception:
        return time.perf_counter() - t0, 0
def healthz():
    while not stop.is_set():
        health.append(get("/healthz")); time.sleep(0.05)
def metrics():
    while not stop.is_set():
        scrapes.append(get("/metrics", {"Accept": "application/openmetrics-text;version=1.0.0", "Accept-Encoding": "gzip"})); time.sleep(1.0)
ts = [threading.Thread(target=f) for f in (healthz, metrics)]
[t.start() for t in ts]; sys.stdin.read(); stop.set(); [t.join() for t in ts]
print(json.dumps({"healthz": health, "metrics": scrapes}))
"""


# The thread sampler, a process of its own: every 5 ms, each named thread's time on a CPU and
# waiting for one (ns, /proc/<pid>/task/<tid>/schedstat) and its page faults (minflt, field 10
# of .../stat; proc(5)), with CLOCK_MONOTONIC, which is the same clock in every process. Read
# on the agent's loop instead, each /proc read would give up the GIL and wait to get it back.
SAMPLER = r"""
import sys, time
pid, out, tids = sys.argv[1], open(sys.argv[2], "w"), sys.argv[3:]
def read(tid):
    with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
        run, wait, _ = f.read().split()
    with open(f"/proc/{pid}/task/{tid}/stat") as f:
        return f"{run} {wait} {f.read().rsplit(')', 1)[1].split()[7]}"
while True:
    try:
        row = " ".join(read(t) for t in tids)
    except (OSError, ValueError, IndexError):
        break
    out.write(f"{time.monotonic()} {row}\n"); out.flush(); time.sleep(0.005)
"""


def _thread_use(samples: list[list[float]], start: float, end: float) -> dict[str, Any]:
    """What the loop's thread and the worker did over [start, end], from the sampler's rows
    (time, then per thread: ns on a CPU, ns waiting for one, page faults): the rows just
    outside the window, so the figures cover it whole (``window_s`` is their span)."""
    before = [r for r in samples if r[0] <= start]
    after = [r for r in samples if r[0] >= end]
    if not before or not after:
        return {}
    a, b = before[-1], after[0]
    return {"window_s": round(b[0] - a[0], 3), "loop_cpu_s": round((b[1] - a[1]) / 1e9, 3),
            "worker_cpu_s": round((b[4] - a[4]) / 1e9, 3), "worker_cpu_wait_s": round((b[5] - a[5]) / 1e9, 3),
            "worker_page_faults": int(b[6] - a[6])}


class _SlowCallbacks:
    """Every event-loop callback that ran longer than 50 ms (start, seconds, what it was), by
    timing ``asyncio.events.Handle._run`` in this bench process while it is installed: a stall
    spent inside one of the loop's own callbacks is told apart from one the loop spent in its
    selector, waiting for the GIL to come back."""

    def __init__(self) -> None:
        self.slow: list[tuple[float, float, str]] = []
        self._run = asyncio.events.Handle._run

    def __enter__(self) -> _SlowCallbacks:
        run, slow = self._run, self.slow

        def timed(handle: asyncio.events.Handle) -> None:
            t0 = time.monotonic()
            run(handle)
            took = time.monotonic() - t0
            if took > 0.05:
                cb = handle._callback  # type: ignore[attr-defined]
                owner = getattr(cb, "__self__", None)
                what = owner.get_coro() if isinstance(owner, asyncio.Task) else cb
                slow.append((t0, took, getattr(what, "__qualname__", type(what).__name__)))

        asyncio.events.Handle._run = timed  # type: ignore[method-assign]
        return self

    def __exit__(self, *exc: object) -> None:
        asyncio.events.Handle._run = self._run  # type: ignore[method-assign]

    def longest_in(self, start: float, end: float) -> tuple[float, str]:
        """The longest slow callback that overlapped [start, end]: (seconds, what), or (0, "")."""
        return max(((took, what) for t0, took, what in self.slow if t0 < end and t0 + took > start), default=(0.0, ""))


class _Blamed(LoopLag):
    """The monitor, also noting for each stall over 0.1 s the loop callback that filled it, if
    one did (:class:`_SlowCallbacks`), and where the worker was: when it lets go of the GIL it
    is (almost always) still on the line whose C call held it. With the thread sampler's rows
    over the stall (:func:`_thread_use`: a CPU shortage shows as the worker's run-queue wait),
    the bench prints these as the measured causes."""

    def __init__(self, worker: PipelineWorker, callbacks: _SlowCallbacks) -> None:
        super().__init__()
        self.worker = worker
        self.callbacks = callbacks
        self.blame: dict[str, list[float]] = {}
        self.stalls: list[dict[str, Any]] = []

    def observe(self, lag: float, now: float | None = None) -> None:
        super().observe(lag, now)
        if lag > 0.1:
            frame = sys._current_frames().get(self.worker._thread.ident)
            where = []
            while frame is not None and len(where) < 3:
                code = frame.f_code
                if "/threading.py" not in code.co_filename:
                    where.append(f"{code.co_filename.rsplit('/', 2)[-2]}/{code.co_filename.rsplit('/', 1)[-1]}:{frame.f_lineno} {code.co_name}")
                frame = frame.f_back
            line = " < ".join(where) or "worker idle"
            self.blame.setdefault(line, []).append(lag)
            end = time.monotonic() if now is None else now
            took, what = self.callbacks.longest_in(end - lag - INTERVAL_LAG, end)
            self.stalls.append({"lag_s": round(lag, 3), "start": end - lag - INTERVAL_LAG, "end": end,
                                "loop_callback_s": round(took, 3), "loop_callback": what, "line": line})


def _pct(xs: list[float], q: float) -> float:
    return sorted(xs)[min(len(xs) - 1, int(q * len(xs)))] if xs else float("nan")


async def _run(fab: Fabric, polls: int, callbacks: _SlowCallbacks) -> dict[str, Any]:
    from tests.conftest import free_port

    texts = [fab.perfquery_texts(k) for k in range(polls)]
    p = build_pipeline(CONFIG, [TargetSpec("ib", "perfquery")])
    worker = PipelineWorker()
    exporter = Exporter(p, worker=worker)
    lag = _Blamed(worker, callbacks)
    exporter.loop_lag = lag.start()
    fd, rows = tempfile.mkstemp(suffix=".sched")
    os.close(fd)
    sampler = subprocess.Popen([sys.executable, "-c", SAMPLER, str(os.getpid()), rows,
                                str(threading.get_native_id()), str(worker._thread.native_id)])
    port = free_port()
    runner = await start_server(make_app(exporter), f"127.0.0.1:{port}")
    client = subprocess.Popen([sys.executable, "-c", CLIENT, str(port)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    await asyncio.sleep(1.0)
    first_render_s = None
    t_start = time.perf_counter()
    for k in range(polls):
        payload: dict[str, Any] = {"perfquery": texts[k]}
        texts[k] = []
        if k == 0:
            payload["ibnetdiscover"] = fab.ibnetdiscover
        poll = Poll("ib", "perfquery", T0 + INTERVAL * k, 1.0, True, payload=payload)
        del payload
        await worker.call(p.ingest, poll)
        del poll
        t_render = time.perf_counter()
        exporter.request_render()
        while exporter._scheduled:  # the render of this poll (the first one builds every template)
            await asyncio.sleep(0.05)
        if k == 0:
            first_render_s = time.perf_counter() - t_render
    wall = time.perf_counter() - t_start
    await asyncio.sleep(1.0)
    out, _ = await asyncio.to_thread(client.communicate, "")
    lag.stop()
    sampler.terminate()
    sampler.wait()
    with open(rows) as f:
        samples = [[float(x) for x in line.split()] for line in f if len(line.split()) == 7]
    os.unlink(rows)
    await runner.cleanup()
    worker.close()
    got = json.loads(out)
    health = [t for t, status in got["healthz"] if status == 200]
    return {"polls": polls, "wall_s": wall, "first_render_wall_s": first_render_s,
            "loop_lag_max_s": lag.peak, "loop_lag_samples": lag.n,
            "loop_lag_over_0_1_s": sum(c for b, c in zip((*BUCKETS, float("inf")), lag.counts, strict=True) if b > 0.1),
            "healthz": {"n": len(got["healthz"]), "ok": len(health), "p50_s": _pct(health, 0.5), "max_s": max(health, default=float("nan"))},
            "metrics_scrapes": {"n": len(got["metrics"]), "ok": sum(1 for _, s in got["metrics"] if s == 200),
                                "max_s": max((t for t, _ in got["metrics"]), default=float("nan"))},
            "series": p.store.series_count(),
            "stalls_by_worker_line": sorted(([round(max(v), 3), len(v), k] for k, v in lag.blame.items()), reverse=True)[:8],
            "stall_causes": sorted(({**{k: v for k, v in s.items() if k not in ("start", "end")}, **_thread_use(samples, s["start"], s["end"])}
                                    for s in lag.stalls), key=lambda c: -c["lag_s"])[:8]}


def measure(fab: Fabric, polls: int = 3) -> dict[str, Any]:
    with _SlowCallbacks() as callbacks:
        return asyncio.run(_run(fab, polls, callbacks))


def main(argv: list[str] | None = None) -> None:
    import argparse

    ap = argparse.ArgumentParser(prog="python -m bench.loop_stall", description=__doc__.split("\n\n")[0])
    ap.add_argument("ports", type=int)
    ap.add_argument("--polls", type=int, default=3)
    a = ap.parse_args(argv)
    print(json.dumps({"ports": a.ports, **measure(Fabric(a.ports), a.polls)}))


if __name__ == "__main__":
    main()
