"""The pipeline worker: one thread owns the pipeline, so the event loop never parses, stores,
detects or renders (issue 29 item 4, issue 32).

**Why.** The event loop answers ``/metrics``, ``/healthz`` and ``/ready``, runs every poll's
I/O and feeds the systemd watchdog. Parsing a 100,000-port poll, a detection pass and a render
of 2 million series take seconds of CPU; on the loop, each froze everything else for that long
(7 s for the first render at 100k ports, 81 s for a hostile UFM body).

**The design: one owner.** Every change to the pipeline (``Pipeline.ingest``: record, parse,
store, detect; a reload's new targets and rules; restoring the state) and every read of it that
is more than a reference (the exposition render, the web pages, the state snapshot) runs as a
job on this one thread, in submission order. So the store is never mutated concurrently and
never read half-updated, with no lock in the store. The loop only submits jobs and awaits their
futures, and it reads only immutable results the worker publishes by swapping one reference:

- the pre-rendered exposition (``Exporter.exposition``): a scrape during a render gets the
  previous body, and before the first render finishes it gets the self metrics with
  ``fabricmon_exposition_ready 0``; it never waits for a build;
- ``/api/targets`` and ``/ready`` from a snapshot taken at each render;
- page renders (``/fabric``, ``/findings/<id>``, ``/targets/<name>``) are jobs too, coalesced
  per page, so 60 parallel requests cost one render each and ``/healthz`` is answered meanwhile.

**The GIL.** A thread only frees the loop if it lets go of the GIL: CPython hands it over every
``sys.getswitchinterval()`` (5 ms) between bytecodes, but not inside one long C call (a regex
over 150 MB, ``json.loads`` of 250 MB, ``str %`` over 2 million values). So the work the worker
does is bounded and sliced where it is big: payloads are bounded in objects, ports and
interfaces before they are decoded, JSON is decoded and encoded element by element
(:mod:`fabricmon.core.boundedjson`), command output is capped per command, exposition templates
are filled in slices. ``fabricmon_event_loop_lag_seconds`` (:mod:`fabricmon.agent.looplag`)
measures what is left.

**The switch interval.** Every system call the loop makes (accept, recv, send, a file read)
lets go of the GIL, and while the worker runs, getting it back takes up to
``sys.getswitchinterval()``: with CPython's default 5 ms, a loop callback that makes 30 system
calls (a scrape's response, the process metrics) can take 30 x 5 ms = 0.15 s, the convoy effect (Beazley,
"Understanding the Python GIL", 2010; bpo-7946). Measured at 200,000 ports
(``python -m bench.loop_stall 200000``, one run each, one after the other): with 5 ms, 8
stalls over 0.1 s, the four longest (0.17-0.23 s) each inside the loop's own request handler,
waiting for the GIL; with 1 ms, one (0.176 s, a C call of the worker), for the same CPU time
(57.5 s and 58.3 s for the run). So the worker sets
:data:`SWITCH_INTERVAL` when it starts (process-wide: the worker is what the loop competes with).

**The cyclic garbage collector.** A collection holds the GIL for as long as it traverses,
whichever thread runs it: with a 20,000-port store, the collections that followed the first
poll took 0.2-0.5 s each, and every full collection traverses the whole store again. So every
job runs with the collector paused (agent/gcpause.py: the pipeline builds no cycles), and
after a job that changed the layout (``layout``: the store's ports or series; the first poll,
a topology change) everything the pipeline now holds is moved out of the collector's reach
with ``gc.freeze()`` (O(1)), before the collector runs again: what stays collectable is what
is new since. Frozen objects are still freed by reference counting when dropped; the cost is
that cyclic garbage alive at that moment is never collected, a few objects per layout change.

**Why a thread, not a process.** The store is a few hundred MB of numpy columns and Python
indexes; a process would have to own the store and the detector and ship every body and page
back through a pipe, for a gain (a second core) the 0.25-core budget at 100k ports does not need.

**Readers beside the worker.** A job that only reads the pipeline (a render, a page, the state
snapshot) may overlap with another reader, never with a job that changes it (an ingest, a
reload): jobs say which they are (``mutates``), and :meth:`PipelineWorker.read` runs a
read-only call right away in a thread of its own, beside a render in progress rather than
behind it. The state saves use it, so the final save at SIGTERM does not wait for a render of
2 million series to end (at 100,000 ports a render takes seconds; the stop has a 5 s budget).

**Shutdown.** The thread is a daemon: a job still running when the agent must stop (a huge
parse) does not hold the process past its stop deadline; :meth:`PipelineWorker.call` with a
``timeout`` lets the caller give up waiting (the final state save does, see agent/state.py).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import gc
import logging
import queue
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from fabricmon.agent.gcpause import gc_paused
from fabricmon.core.threads import in_daemon_thread, lower_priority

log = logging.getLogger(__name__)
T = TypeVar("T")
_STOP = object()
SWITCH_INTERVAL = 0.001  # s: how long the loop waits at most for the GIL after a system call (see above)
# Objects a job may leave alive and still have them collected after it: a young collection
# traverses them all (about 1 s per million), holding the GIL. More are frozen instead.
FREEZE_ABOVE = 50_000


class _ReadWrite:
    """Readers together, a writer alone (threading.Condition; the writers are the worker's jobs)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._readers = 0
        self._writer = False

    @contextlib.contextmanager
    def hold(self, write: bool) -> Iterator[None]:
        with self._cond:
            while self._writer or (write and self._readers):
                self._cond.wait()
            if write:
                self._writer = True
            else:
                self._readers += 1
        try:
            yield
        finally:
            with self._cond:
                if write:
                    self._writer = False
                else:
                    self._readers -= 1
                self._cond.notify_all()


class PipelineWorker:
    """One daemon thread running submitted jobs in order (see the module docstring)."""

    def __init__(self, name: str = "fabricmon-pipeline") -> None:
        self._access = _ReadWrite()
        self._jobs: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._closed = False
        sys.setswitchinterval(min(sys.getswitchinterval(), SWITCH_INTERVAL))
        self._thread.start()

    def _run(self) -> None:
        lower_priority()  # the event loop first when the cores are busy (core/threads.py)
        while True:
            job = self._jobs.get()
            if job is _STOP:
                return
            fut, fn, args, mutates = job
            if not fut.set_running_or_notify_cancel():
                continue  # cancelled while queued
            try:
                with self._access.hold(mutates), gc_paused():
                    result = fn(*args)
                    if gc.get_count()[0] > FREEZE_ABOVE:
                        gc.freeze()
                fut.set_result(result)
            except BaseException as exc:  # the caller's await raises it; the worker goes on
                fut.set_exception(exc)

    def submit(self, fn: Callable[..., T], *args: Any, mutates: bool = True) -> concurrent.futures.Future[T]:
        """Queue ``fn(*args)``; its future (thread-safe). ``mutates=False``: it only reads the pipeline."""
        fut: concurrent.futures.Future[T] = concurrent.futures.Future()
        if self._closed:
            fut.set_exception(RuntimeError("the pipeline worker is stopped"))
            return fut
        self._jobs.put((fut, fn, args, mutates))
        return fut

    async def call(self, fn: Callable[..., T], *args: Any, timeout: float | None = None) -> T:
        """Run ``fn(*args)`` on the worker and await its result (TimeoutError after ``timeout``;
        the job itself is not interrupted: a job that started runs to its end)."""
        fut = asyncio.wrap_future(self.submit(fn, *args))
        if timeout is None:
            return await fut
        return await asyncio.wait_for(fut, timeout)

    async def read(self, fn: Callable[[], T]) -> T:
        """Run read-only ``fn()`` now, in a thread of its own, beside a read-only job in progress
        (never beside one that changes the pipeline)."""

        def run() -> T:
            with self._access.hold(False), gc_paused():
                return fn()

        return await in_daemon_thread(run, name="fabricmon-pipeline-read")

    def close(self) -> None:
        """Stop after the jobs already queued (does not wait: the thread is a daemon)."""
        if not self._closed:
            self._closed = True
            self._jobs.put(_STOP)
