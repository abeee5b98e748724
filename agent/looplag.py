"""How late the event loop runs: ``fabricmon_event_loop_lag_seconds``.

A task sleeps :data:`INTERVAL` and records how much later than asked it woke up: that delay is
the time the loop spent on something else without yielding (a stall). Nothing else in the agent
can see a stall from inside: a scrape that waits for the loop only reports itself as slow.

**The Prometheus shape, and why.**

- ``fabricmon_event_loop_lag_seconds``, a histogram of every wake-up's lag (buckets from 1 ms to
  10 s around the two thresholds that matter: 0.1 s, the stall budget of issue 29, and 0.5 s of
  issue 32). It counts stalls by size over any range (``increase(..._bucket{le="0.5"}[1h])``
  against ``_count``) and aggregates across agents; ``_sum`` is the total lag.
- ``fabricmon_event_loop_lag_max_seconds``, a gauge: the longest lag in the last
  :data:`WINDOW` seconds. A histogram cannot say how long the worst stall was, and a "max
  since the last scrape" would depend on who scrapes (a Prometheus HA pair, a curl by hand, each
  resetting it for the other). A trailing window that is longer than any sane scrape interval
  is the same for every reader and misses no stall between two scrapes.

Both are rendered per scrape (a few lines), after the pre-rendered body.
"""

from __future__ import annotations

import asyncio
import bisect
import time
from collections import deque

INTERVAL = 0.02  # s between wake-ups: finer than the 0.1 s budget, cheap (50 wake-ups a second)
WINDOW = 60.0  # s over which the max gauge looks back
BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
NAME = "fabricmon_event_loop_lag_seconds"


class LoopLag:
    def __init__(self) -> None:
        self.counts = [0] * (len(BUCKETS) + 1)  # per bucket (not cumulative); the last is +Inf
        self.total = 0.0
        self.n = 0
        self.peak = 0.0  # the longest lag since start (bench and tests; the metric is the windowed max)
        self._peaks: deque[tuple[float, float]] = deque()  # (monotonic second, max lag in it)
        self._task: asyncio.Task[None] | None = None

    def start(self) -> LoopLag:
        self._task = asyncio.get_running_loop().create_task(self._watch(), name="loop-lag")
        return self

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()

    async def _watch(self) -> None:
        while True:
            t0 = time.monotonic()
            await asyncio.sleep(INTERVAL)
            self.observe(max(0.0, time.monotonic() - t0 - INTERVAL))

    def observe(self, lag: float, now: float | None = None) -> None:
        self.counts[bisect.bisect_left(BUCKETS, lag)] += 1
        self.total += lag
        self.n += 1
        self.peak = max(self.peak, lag)
        second = float(int(time.monotonic() if now is None else now))
        peaks = self._peaks
        if peaks and peaks[-1][0] == second:
            if lag > peaks[-1][1]:
                peaks[-1] = (second, lag)
        else:
            peaks.append((second, lag))
        while peaks and peaks[0][0] < second - WINDOW:
            peaks.popleft()

    def max_recent(self, now: float | None = None) -> float:
        """The longest lag of the last WINDOW seconds."""
        limit = (time.monotonic() if now is None else now) - WINDOW
        return max((lag for second, lag in self._peaks if second >= limit), default=0.0)

    def text(self) -> str:
        """Both families in the text format (the same lines in OpenMetrics)."""
        lines = [f"# HELP {NAME} How late the event loop woke up from a {INTERVAL:g} s sleep: time it spent without yielding.",
                 f"# TYPE {NAME} histogram"]
        cum = 0
        for bound, c in zip(BUCKETS, self.counts, strict=False):
            cum += c
            lines.append(f'{NAME}_bucket{{le="{bound:g}"}} {cum}')
        lines.append(f'{NAME}_bucket{{le="+Inf"}} {self.n}')
        lines.append(f"{NAME}_sum {self.total!r}")
        lines.append(f"{NAME}_count {self.n}")
        mx = "fabricmon_event_loop_lag_max_seconds"
        lines.append(f"# HELP {mx} The longest event-loop lag of the last {WINDOW:g} s.")
        lines.append(f"# TYPE {mx} gauge")
        lines.append(f"{mx} {self.max_recent()!r}")
        return "\n".join(lines) + "\n"
