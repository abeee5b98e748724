"""Replay: feed a recording's polls through the same pipeline as a live run.

The pipeline is driven by the recording's clock: with ``fast`` nothing sleeps; with a
``speed`` the replay waits so that recording time runs ``speed`` times faster than wall
time. The demo loops a bundled recording with its times mapped onto the wall clock.

A replay uses what is good and reports what it skipped (``ReplayResult.skipped``): malformed
lines, a torn last line, a truncated or corrupt gzip stream, lines over the size limit, and
polls of targets beyond ``Limits.max_targets``. Only a file that cannot be read at all raises.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fabricmon.agent.assemble import build_pipeline
from fabricmon.agent.config import LoadedConfig, in_shard
from fabricmon.agent.pipeline import Pipeline
from fabricmon.agent.recording import Limits, ReadReport, RecordingError, iter_lines, poll_from_line
from fabricmon.core.model import Finding, Poll, TargetSpec

log = logging.getLogger(__name__)


@dataclass
class ReplayResult:
    header: dict[str, Any]
    findings: list[Finding]  # ended ones, then those still open at the end (end None)
    truth: list[dict[str, Any]]
    polls: int
    poll_interval: float
    pipeline: Pipeline
    notes: list[dict[str, Any]] = field(default_factory=list)
    skipped: int = 0  # data errors skipped
    skipped_examples: list[str] = field(default_factory=list)  # the first of them, one message each
    warnings: list[str] = field(default_factory=list)


# A paced replay does not sleep out a gap longer than this (recording seconds) between two
# polls: a recording appended to a day later would otherwise look stalled.
MAX_PACED_GAP = 600.0


def specs_from_header(header: dict[str, Any], path: str | Path, max_targets: int | None = None) -> list[TargetSpec]:
    specs = []
    entries = header.get("targets") or []
    if max_targets is not None and len(entries) > max_targets:
        raise RecordingError(f"{path}:1: header lists {len(entries)} targets, more than the limit of {max_targets}")
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict) or "name" not in entry or "source" not in entry:
            raise RecordingError(f"{path}:1: header target #{i} needs a name and a source")
        specs.append(TargetSpec.from_header(entry))
    return specs


def keeps(config: LoadedConfig | None) -> Callable[[Poll], bool]:
    """Whether a poll belongs to this replay: with a config that has ``shard:``, what that
    agent would poll (:func:`fabricmon.agent.config.in_shard`: its hash share and every
    self-sharding source), so N sharded replays of one recording see what N agents would."""
    if config is None or config.config.shard.count <= 1:
        return lambda poll: True
    shard = config.config.shard
    return lambda poll: in_shard(poll.target, poll.source, shard)


def replay_pipeline(header: dict[str, Any], path: str | Path, config: LoadedConfig | None = None,
                    on_finding_end: Callable[[Finding], None] | None = None, limits: Limits | None = None,
                    exposition: bool = False) -> Pipeline:
    """The pipeline for a recording with this header: its targets (this shard's), the config's
    settings (the config model's defaults without one) and the replay's target limit.
    ``exposition``: export at the config's levels (``exposition:``), as the live agent does
    (``replay --serve``, so Prometheus scrapes what a live agent would serve)."""
    limits = limits or Limits()
    specs = specs_from_header(header, path, limits.max_targets)
    if config is not None:
        specs = [s for s in specs if in_shard(s.name, s.source, config.config.shard)]
    return build_pipeline(config.config if config is not None else None, specs, on_finding_end=on_finding_end,
                          max_targets=limits.max_targets, exposition=exposition)


class _Reader:
    """Streams a recording: header first, then polls; collects truth and note lines."""

    def __init__(self, path: str | Path, limits: Limits | None = None) -> None:
        self.path = path
        self.report = ReadReport()
        self._lines = iter_lines(path, self.report, limits)
        try:
            _, self.header = next(self._lines)
        except StopIteration:
            raise RecordingError(f"{path}: empty recording") from None
        self.truth: list[dict[str, Any]] = []
        self.notes: list[dict[str, Any]] = []

    def polls(self) -> Iterator[tuple[int, Poll]]:
        for lineno, line in self._lines:
            kind = line["type"]
            if kind == "poll":
                try:
                    yield lineno, poll_from_line(self.path, lineno, line)
                except RecordingError as exc:
                    self.report.skip(str(exc))
            elif kind == "truth":
                self.truth.append(line)
            elif kind == "note":
                self.notes.append(line)

    def ingest(self, lineno: int, poll: Poll, pipeline: Pipeline) -> bool:
        """Ingest a poll; one the pipeline refused (a target beyond its limit) is a skipped line."""
        pipeline.ingest(poll)
        if poll.target in pipeline.specs:
            return True
        self.report.skip(f"{self.path}:{lineno}: target {poll.target[:80]!r} refused: the recording already has "
                         f"{pipeline.max_targets} targets (the target limit)")
        return False


class _Progress:
    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self.last = time.monotonic()
        self.count = 0

    def tick(self, poll: Poll, pipeline: Pipeline) -> None:
        self.count += 1
        if not self.enabled:
            return
        now = time.monotonic()
        if now - self.last >= 1.0:
            self.last = now
            print(f"replay: {self.count} polls, recording time {time.strftime('%Y-%m-%d %H:%M:%S', time.gmtime(poll.t))}Z, "
                  f"{len(pipeline.detector.active)} active findings", file=sys.stderr, flush=True)


def _interval(polls_t: dict[str, list[float]]) -> float:
    gaps = [b - a for ts in polls_t.values() for a, b in itertools.pairwise(ts) if b > a]
    return statistics.median(gaps) if gaps else 10.0


def replay_recording(path: str | Path, config: LoadedConfig | None = None, *,
                     on_finding_end: Callable[[Finding], None] | None = None, progress: bool = False,
                     limits: Limits | None = None) -> ReplayResult:
    """Replay a whole recording as fast as possible (no sleeping)."""
    reader = _Reader(path, limits)
    pipeline = replay_pipeline(reader.header, path, config, on_finding_end, limits)
    prog = _Progress(progress)
    times: dict[str, list[float]] = {}
    mine = keeps(config)
    for lineno, poll in reader.polls():
        if not mine(poll) or not reader.ingest(lineno, poll, pipeline):
            continue
        times.setdefault(poll.target, []).append(poll.t)
        prog.tick(poll, pipeline)
    return _finish(reader, pipeline, prog.count, times)


def _finish(reader: _Reader, pipeline: Pipeline, count: int, times: dict[str, list[float]]) -> ReplayResult:
    ended = list(pipeline.ended)
    open_ = pipeline.detector.close_all()
    return ReplayResult(header=reader.header, findings=ended + open_, truth=reader.truth, polls=count,
                        poll_interval=_interval(times), pipeline=pipeline, notes=reader.notes,
                        skipped=reader.report.skipped, skipped_examples=reader.report.examples,
                        warnings=reader.report.warnings)


class _Pacer:
    """Paces polls by ``speed`` on the event loop (None: as fast as possible, yielding to the
    loop every 50 polls so a server keeps answering); with ``wall_clock`` each poll takes the
    wall time it is ingested at. A gap longer than :data:`MAX_PACED_GAP` is not waited out."""

    def __init__(self, speed: float | None, wall_clock: bool, report: ReadReport, path: str | Path) -> None:
        self.speed, self.wall_clock, self.report, self.path = speed, wall_clock, report, path
        self.wall0, self.epoch0 = time.monotonic(), time.time()
        self.t0: float | None = None
        self.shift = 0.0  # recording seconds of gaps not slept out
        self.last_t: float | None = None

    async def wait(self, lineno: int, poll: Poll, count: int) -> None:
        if self.t0 is None:
            self.t0 = poll.t
        if self.last_t is not None and poll.t - self.last_t > MAX_PACED_GAP:
            self.report.warn(f"{self.path}:{lineno}: a gap of {poll.t - self.last_t:.0f} s in the recording; not waiting it out")
            self.shift += poll.t - self.last_t  # the poll comes next, as if the gap were not there
        self.last_t = max(self.last_t or poll.t, poll.t)
        if not self.speed:
            if count % 50 == 0:
                await asyncio.sleep(0)
            return
        elapsed = (poll.t - self.shift - self.t0) / self.speed
        delay = self.wall0 + elapsed - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        if self.wall_clock:
            poll.t = round(self.epoch0 + elapsed, 6)


async def replay_paced(path: str | Path, config: LoadedConfig | None = None, *, speed: float | None,
                       pipeline: Pipeline | None = None, on_finding_end: Callable[[Finding], None] | None = None,
                       on_poll: Callable[[], None] | None = None, progress: bool = False, wall_clock: bool = False,
                       limits: Limits | None = None) -> ReplayResult:
    """Replay on the event loop, paced by ``speed`` (:class:`_Pacer`), into ``pipeline`` (a
    server already shows it) or one built for the recording (:func:`replay_pipeline`).
    ``wall_clock`` (with a speed) maps every poll time onto the wall clock: the first poll
    happens now, and recording time runs ``speed`` times faster (the demo). With a sharded
    ``config`` only that shard's polls are replayed."""
    reader = _Reader(path, limits)
    if pipeline is None:
        pipeline = replay_pipeline(reader.header, path, config, on_finding_end, limits)
    prog = _Progress(progress)
    pacer = _Pacer(speed, wall_clock, reader.report, path)
    times: dict[str, list[float]] = {}
    mine = keeps(config)
    for lineno, poll in reader.polls():
        if not mine(poll):
            continue
        await pacer.wait(lineno, poll, prog.count)
        if not reader.ingest(lineno, poll, pipeline):
            continue
        times.setdefault(poll.target, []).append(poll.t)
        prog.tick(poll, pipeline)
        if on_poll is not None:
            on_poll()
    return _finish(reader, pipeline, prog.count, times)
