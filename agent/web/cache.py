"""Pages rendered once per detection pass, so requests only copy bytes.

With 30,000 active findings, rebuilding ``/`` or ``/api/findings`` per request held the
event loop for the whole build each time (60 parallel GETs stretched the watchdog ping gap
to 41 s). :meth:`WebCache.render` runs in :meth:`Exporter.render_now`, which is coalesced
and paced like ``/metrics``; a request then slices pre-serialised findings (a page of
``?limit=`` items) or serves a cached page. Per-finding and per-target pages, and ``/fabric``
(whose picture of the whole fabric is the costly one), are rendered on first request and kept
until the next pass.
"""

from __future__ import annotations

import json
from collections import OrderedDict, deque
from typing import TYPE_CHECKING

from fabricmon.agent.jobs.page import job_page
from fabricmon.agent.jobs.view import job_view
from fabricmon.agent.web import views
from fabricmon.agent.web.ids import finding_id
from fabricmon.core.model import Finding

if TYPE_CHECKING:
    from fabricmon.agent.pipeline import Pipeline

# /api/findings page size when ?limit= is not given, and the largest allowed: a page of
# 1,000 findings is about 0.5 MB of JSON, built by joining pre-serialised items.
DEFAULT_LIMIT = 1000
MAX_LIMIT = 10_000
PAGE_CACHE = 256  # per-finding and per-target pages kept between passes
DURATIONS_KEPT = 60  # poll durations drawn per target


class WebCache:
    def __init__(self, pipeline: Pipeline, demo: bool = False) -> None:
        self.pipeline = pipeline
        self.demo = demo
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
        self._pages.clear()
        self.generation = p.generation

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

    def fabric(self) -> bytes:
        """``/fabric``, built on its first request after a pass: its picture of every switch and
        cable costs most of a render on a large fabric (0.7 s at 100,000 ports), which a poll
        should not pay when nobody looks."""
        return self._cached("fabric", lambda: views.fabric_page(self.pipeline, self.findings, self.demo))

    def finding(self, fid: str) -> bytes | None:
        f = self.by_id.get(fid)
        if f is None:
            return None
        return self._cached("f:" + fid, lambda: views.finding_page(self.pipeline, f, self.pool, self.demo))

    def target(self, name: str) -> bytes | None:
        s = self.pipeline.targets.get(name)
        if s is None:
            return None
        return self._cached("t:" + name, lambda: views.target_page(self.pipeline, s, list(self.durations.get(name, ())), self.demo))

    def job(self, name: str) -> bytes | None:
        """``/jobs/<id>``: None when no job source knows the job."""
        key = "j:" + name
        if key in self._pages:
            self._pages.move_to_end(key)
            return self._pages[key]
        v = job_view(self.pipeline, name)
        return None if v is None else self._cached(key, lambda: job_page(v, self.demo))

    def job_json(self, name: str, window: float | None = None) -> bytes | None:
        """``/api/jobs/<id>``: the job view as JSON (what ``fabricmon job --json`` prints)."""
        v = job_view(self.pipeline, name, window)
        return None if v is None else (json.dumps(v, indent=1) + "\n").encode()

    def _cached(self, key: str, build) -> bytes:
        body = self._pages.get(key)
        if body is None:
            body = self._pages[key] = build().encode()
            if len(self._pages) > PAGE_CACHE:
                self._pages.popitem(last=False)
        else:
            self._pages.move_to_end(key)
        return body
