"""Pages rendered once per detection pass, so requests only copy bytes.

With 30,000 active findings, rebuilding ``/`` or ``/api/findings`` per request held the
event loop for the whole build each time (60 parallel GETs stretched the watchdog ping gap
to 41 s). :meth:`WebCache.render` runs in :meth:`Exporter.render_now`, which is coalesced
and paced like ``/metrics``; a request then slices pre-serialised findings (a page of
``?limit=`` items) or serves a cached page. Per-finding and per-target pages, and ``/fabric``
(whose picture of the whole fabric is the costly one), are rendered on first request and kept
until the next pass.

With the live agent's pipeline worker (agent/worker.py), those page renders are jobs on the
worker, not on the event loop: concurrent requests for one page share one render (60 parallel
GETs of ``/findings/<id>`` cost one render, and ``/healthz`` is answered meanwhile), and at most
:data:`MAX_PENDING_PAGES` different pages wait for the worker (more answer 503 at once), so a
flood of page requests cannot queue unbounded work in front of the polls.
"""

from __future__ import annotations

import asyncio
import json
from collections import OrderedDict, deque
from collections.abc import Callable
from typing import TYPE_CHECKING

from fabricmon.agent.jobs.page import job_page
from fabricmon.agent.jobs.view import job_view
from fabricmon.agent.web import views
from fabricmon.agent.web.ids import finding_id
from fabricmon.core.model import Finding

if TYPE_CHECKING:
    from fabricmon.agent.pipeline import Pipeline
    from fabricmon.agent.worker import PipelineWorker

# /api/findings page size when ?limit= is not given, and the largest allowed: a page of
# 1,000 findings is about 0.5 MB of JSON, built by joining pre-serialised items.
DEFAULT_LIMIT = 1000
MAX_LIMIT = 10_000
PAGE_CACHE = 256  # per-finding and per-target pages kept between passes
DURATIONS_KEPT = 60  # poll durations drawn per target
MAX_PENDING_PAGES = 16  # different pages waiting for the pipeline worker at once; more answer 503


class Busy(Exception):
    """Too many page renders waiting for the pipeline worker: answer 503, try again."""


class WebCache:
    def __init__(self, pipeline: Pipeline, demo: bool = False, worker: PipelineWorker | None = None) -> None:
        self.pipeline = pipeline
        self.demo = demo
        self.worker = worker
        self._pending: dict[str, asyncio.Future[bytes]] = {}  # page renders on the worker, by page
        self.generation = -1  # the pipeline generation the pages below were rendered at
        self.summary = b""
        self.findings: list[Finding] = []  # the active findings of the last pass
        self.active_json: list[str] = []
        self.ended_json: list[str] = []
        self.by_id: dict[str, Finding] = {}
        self.pool: list[Finding] = []
        self.durations: dict[str, deque[tuple[float, float]]] = {}
        self._polls: dict[str, int] = {}
        self._pages: OrderedDict[str, bytes] = OrderedDict()

    def render(self) -> None:
        """Rebuild the pre-rendered pages from the pipeline (one detection pass's results)."""
        p = self.pipeline
        findings = p.findings()
        ended = list(reversed(p.ended))
        self.pool = findings + ended
        self.by_id = {finding_id(f): f for f in reversed(self.pool)}  # an active finding wins over an ended one
        dumps = json.dumps
        self.active_json = [dumps(f.to_json(), indent=1) for f in findings]
        self.ended_json = [dumps(f.to_json(), indent=1) for f in ended]
        self._record_durations()
        self.summary = views.summary_page(p, findings, self.demo).encode()
        self.findings = findings
        self.generation = p.generation
        self._pages = OrderedDict()  # a new dict, not clear(): the loop may be reading the old one

    def _record_durations(self) -> None:
        for name, s in self.pipeline.targets.items():
            if self._polls.get(name) != s.polls and s.polls:
                self._polls[name] = s.polls
                self.durations.setdefault(name, deque(maxlen=DURATIONS_KEPT)).append((float(s.polls), s.last_duration_s))
        for name in [n for n in self.durations if n not in self.pipeline.targets]:
            del self.durations[name]
            self._polls.pop(name, None)

    def findings_page(self, page: int, limit: int, ended: bool) -> tuple[bytes, int]:
        """One page of ``/api/findings`` (1-based) and the total: active findings, then ended ones."""
        items = self.active_json + self.ended_json if ended else self.active_json
        chunk = items[(page - 1) * limit: page * limit]
        return ("[\n" + ",\n".join(chunk) + "\n]\n").encode() if chunk else b"[]\n", len(items)

    async def fabric(self) -> bytes:
        """``/fabric``, built on its first request after a pass: its picture of every switch and
        cable costs most of a render on a large fabric (0.7 s at 100,000 ports), which a poll
        should not pay when nobody looks."""
        return await self._cached("fabric", lambda: views.fabric_page(self.pipeline, self.findings, self.demo))

    async def finding(self, fid: str) -> bytes | None:
        f = self.by_id.get(fid)
        if f is None:
            return None
        pool = self.pool
        return await self._cached("f:" + fid, lambda: views.finding_page(self.pipeline, f, pool, self.demo))

    async def target(self, name: str) -> bytes | None:
        if name not in self._polls and name not in self.pipeline.specs:
            return None
        try:
            return await self._cached("t:" + name, lambda: self._target_page(name))
        except KeyError:  # the target left the config meanwhile
            return None

    def _target_page(self, name: str) -> str:
        s = self.pipeline.targets.get(name)
        if s is None:
            raise KeyError(name)
        return views.target_page(self.pipeline, s, list(self.durations.get(name, ())), self.demo)

    async def job(self, name: str) -> bytes | None:
        """``/jobs/<id>``: None when no job source knows the job. Built like every page (on the
        worker when there is one), kept until the next pass."""
        try:
            return await self._cached("j:" + name, lambda: self._job_page(name))
        except KeyError:
            return None

    def _job_page(self, name: str) -> str:
        v = job_view(self.pipeline, name)
        if v is None:
            raise KeyError(name)
        return job_page(v, self.demo)

    async def job_json(self, name: str, window: float | None = None) -> bytes | None:
        """``/api/jobs/<id>``: the job view as JSON (what ``fabricmon job --json`` prints)."""
        try:
            return await self._cached(f"J:{window}:{name}", lambda: self._job_json(name, window))
        except KeyError:
            return None

    def _job_json(self, name: str, window: float | None) -> str:
        v = job_view(self.pipeline, name, window)
        if v is None:
            raise KeyError(name)
        return json.dumps(v, indent=1) + "\n"

    async def _cached(self, key: str, build: Callable[[], str]) -> bytes:
        """The page from the cache, else rendered (on the worker when there is one) and kept."""
        pages = self._pages
        body = pages.get(key)
        if body is not None:
            if key in pages:
                pages.move_to_end(key)
            return body
        if self.worker is None:
            return self._keep(key, self.generation, build().encode())
        pending = self._pending.get(key)
        if pending is None:
            if len(self._pending) >= MAX_PENDING_PAGES:
                raise Busy()
            generation = self.generation
            pending = self._pending[key] = asyncio.wrap_future(self.worker.submit(lambda: build().encode(), mutates=False))
            pending.add_done_callback(lambda f: self._done(key, generation, f))
        return await asyncio.shield(pending)

    def _done(self, key: str, generation: int, fut: asyncio.Future[bytes]) -> None:
        self._pending.pop(key, None)
        if not fut.cancelled() and fut.exception() is None:
            self._keep(key, generation, fut.result())

    def _keep(self, key: str, generation: int, body: bytes) -> bytes:
        if generation == self.generation:  # not a page of a pass that has been replaced meanwhile
            self._pages[key] = body
            if len(self._pages) > PAGE_CACHE:
                self._pages.popitem(last=False)
        return body
