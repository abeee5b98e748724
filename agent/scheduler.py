"""Scheduler: polls each target on its own interval, isolated from every other target.

One asyncio task per target, so polls of one target never overlap. Each poll runs under a
timeout (cancellation reaches the collector, which kills its subprocesses and closes its
sockets) and a global concurrency limit. A failing target backs off exponentially
(interval x 2^failures, capped), whether the fetch failed or its payload could not be
parsed, and waits at least as long as a server's Retry-After asked; a hanging one costs only its own timeout. Start times
are spread with jitter so a thousand targets do not fire in the same millisecond.
A target's task that dies of a bug is logged, counted (``restarts``), reported as a failed
poll (so the target shows down) and restarted after its backoff.

``on_poll`` may be a coroutine function (the live agent hands the poll to its pipeline worker
and awaits the ingest): a target's next poll is then planned once its previous one was
ingested, so at most one payload per target waits for the worker. Stopping cancels every
task at once and closes the collectors concurrently, within :data:`STOP_DEADLINE_S`.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from fabricmon.agent.config import GlobalConfig
from fabricmon.agent.exporter.exposition import Family
from fabricmon.collectors import POLL_DEADLINE, Collector, FetchError
from fabricmon.core.model import Poll
from fabricmon.core.vocabulary import NAMESPACE

log = logging.getLogger(__name__)
_GLOBAL = GlobalConfig()  # the config model's defaults, for a scheduler built without a config (tests)
# A task that dies at once on every start would otherwise restart in a tight loop, logging a
# traceback each time: at least this long between restarts (then the target's backoff).
RESTART_MIN_DELAY = 1.0
# Stopping: cancelled polls and closed sessions get this long together (2,000 targets took 15.8 s
# when each was stopped in turn); what is still closing then is abandoned, the process is ending.
STOP_DEADLINE_S = 1.0
PREPARE_TIMEOUT_S = 120.0  # a collector's one-time preparation (imports) before its first poll


@dataclass
class ScheduledTarget:
    collector: Collector
    interval: float
    timeout: float


@dataclass(frozen=True, slots=True)
class SchedulerStatus:
    """What :meth:`Scheduler.status` reports."""

    targets: int  # targets being polled
    restarts: int  # poll tasks that died of an internal error and were restarted


class Scheduler:
    def __init__(self, on_poll: Callable[[Poll], bool | Awaitable[bool | None] | None], max_concurrency: int = _GLOBAL.max_concurrency,
                 jitter: float = _GLOBAL.jitter, backoff_max: float = _GLOBAL.backoff_max, rng: random.Random | None = None) -> None:
        self.on_poll = on_poll
        self.semaphore = asyncio.Semaphore(max_concurrency)
        self.jitter = jitter
        self.backoff_max = backoff_max
        self.rng = rng or random.Random()
        self.tasks: dict[str, asyncio.Task] = {}
        self.targets: dict[str, ScheduledTarget] = {}
        self.failures: dict[str, int] = {}
        self.retry_after: dict[str, float] = {}  # target -> seconds its server asked us to wait
        self.restarts = 0  # poll tasks that died and were restarted

    def status(self) -> SchedulerStatus:
        return SchedulerStatus(len(self.targets), self.restarts)

    def families(self) -> list[Family]:
        restarts = Family(f"{NAMESPACE}_scheduler_task_restarts_total", "counter",
                          "Poll tasks that died of an internal error and were restarted (the target shows down meanwhile).")
        restarts.add("", self.status().restarts)
        return [restarts]

    def start(self, targets: list[ScheduledTarget]) -> None:
        for t in targets:
            self.add(t)

    def add(self, target: ScheduledTarget) -> None:
        name = target.collector.name
        target.collector.set_schedule(target.interval, target.timeout)
        self.targets[name] = target
        self.failures[name] = 0
        self.tasks[name] = asyncio.create_task(self._supervise(target), name=f"poll:{name}")

    async def remove(self, name: str) -> None:
        task = self.tasks.pop(name, None)
        target = self.targets.pop(name, None)
        self.failures.pop(name, None)
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        if target is not None:
            await _close(target.collector)

    async def stop(self, deadline: float = STOP_DEADLINE_S) -> None:
        """Cancel every poll at once, then close every collector concurrently, within ``deadline``."""
        tasks, targets = list(self.tasks.values()), list(self.targets.values())
        self.tasks, self.targets, self.failures = {}, {}, {}
        for task in tasks:
            task.cancel()
        t0 = time.monotonic()
        if tasks:
            await asyncio.wait(tasks, timeout=deadline)
        closing = [asyncio.ensure_future(_close(t.collector)) for t in targets]
        if closing:
            _, late = await asyncio.wait(closing, timeout=max(0.1, deadline - (time.monotonic() - t0)))
            for task in late:
                task.cancel()
            if late:
                log.warning("%d collector(s) did not close within %.0f s of the stop; abandoned", len(late), deadline)

    def next_delay(self, target: ScheduledTarget, failures: int) -> float:
        """The wait before the next poll: the interval, or the backoff while failing."""
        if failures <= 0:
            return target.interval
        return min(target.interval * (2 ** min(failures, 30)), max(self.backoff_max, target.interval))

    async def poll_once(self, target: ScheduledTarget) -> Poll:
        c = target.collector
        async with self.semaphore:
            t_start = round(time.time(), 6)  # as recorded: live and replay see the same clock
            m0 = time.monotonic()
            deadline = POLL_DEADLINE.set(m0 + target.timeout)  # the fetch's task inherits it
            try:
                payload = await asyncio.wait_for(c.fetch(), timeout=target.timeout)
                return Poll(c.name, c.source, t_start, _elapsed(m0), True, payload=payload)
            except TimeoutError:
                return Poll(c.name, c.source, t_start, _elapsed(m0), False,
                            error=f"timeout after {target.timeout:g} s polling {c.address or c.name}", reason="timeout")
            except FetchError as exc:
                if exc.retry_after is not None:
                    self.retry_after[c.name] = exc.retry_after
                return Poll(c.name, c.source, t_start, _elapsed(m0), False, error=str(exc), reason=exc.reason)
            except Exception as exc:  # a collector bug is this target's failure, never the agent's
                log.exception("collector %s crashed polling %s", c.source, c.name)
                return Poll(c.name, c.source, t_start, _elapsed(m0), False,
                            error=f"internal error in the {c.source} collector: {type(exc).__name__}: {exc}", reason="internal")
            finally:
                POLL_DEADLINE.reset(deadline)

    async def _supervise(self, target: ScheduledTarget) -> None:
        """Run the target's poll loop for ever: a crash is logged, shown as a failed poll, and restarted."""
        c = target.collector
        while True:
            try:
                await self._loop(target)
            except Exception as exc:  # CancelledError is not an Exception: remove() still stops the task
                self.restarts += 1
                self.failures[c.name] = self.failures.get(c.name, 0) + 1
                log.exception("the poll task of %s died; restarting it", c.name)
                down = Poll(c.name, c.source, round(time.time(), 6), 0.0, False, reason="internal",
                            error=f"internal error in the scheduler: {type(exc).__name__}: {exc}")
                try:
                    await _maybe_await(self.on_poll(down))
                except Exception:
                    log.exception("reporting the failure of %s failed", c.name)
                await asyncio.sleep(max(RESTART_MIN_DELAY, self.next_delay(target, self.failures[c.name])))

    async def _loop(self, target: ScheduledTarget) -> None:
        name = target.collector.name
        await asyncio.sleep(self.rng.uniform(0, self.jitter * target.interval))
        try:  # outside the poll's timeout; a failure shows in the first poll instead
            await asyncio.wait_for(target.collector.prepare(), PREPARE_TIMEOUT_S)
        except Exception as exc:
            log.warning("preparing the %s collector for %s failed: %s", target.collector.source, name, exc)
        next_due = time.monotonic()
        while True:
            poll = await self.poll_once(target)
            ok = poll.ok
            try:
                # on_poll may answer False: the payload arrived but could not be used (parse error).
                ok = await _maybe_await(self.on_poll(poll)) is not False and ok
            except Exception:
                log.exception("processing the poll of %s failed", name)
            self.failures[name] = 0 if ok else self.failures[name] + 1
            next_due += self.next_delay(target, self.failures[name])
            now = time.monotonic()
            asked = self.retry_after.pop(name, None)
            if asked is not None:  # the server's Retry-After, capped like the backoff
                next_due = max(next_due, now + min(asked, max(self.backoff_max, target.interval)))
            if next_due < now:  # the poll overran its interval: skip the missed slots, do not burst
                missed = int((now - next_due) // target.interval) + 1
                next_due += missed * target.interval
            await asyncio.sleep(next_due - now)


async def _maybe_await(result: Any) -> Any:
    return await result if inspect.isawaitable(result) else result


async def _close(collector: Collector) -> None:
    try:
        await collector.close()
    except Exception:
        log.exception("closing collector %s failed", collector.name)


def _elapsed(m0: float) -> float:
    return round(time.monotonic() - m0, 6)
