"""One poll of many targets as the benchmarks measure it: fetch all, then parse (and store) each.

bench/snmp_compare.py and bench/gnmi_compare.py time the same loop for different collectors,
so the figures they put side by side (CPU per value) count values, failed targets and parse
CPU the same way.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from fabricmon.core.model import ParseResult, TargetSpec

if TYPE_CHECKING:  # the benches import fabricmon's heavier modules only where they run them
    from fabricmon.agent.store import CounterStore
    from fabricmon.collectors.base import Collector

Parse = Callable[[dict[str, Any], TargetSpec, Any], tuple[ParseResult, Any]]


async def fetch_and_parse(cols: Sequence[Collector], parse: Parse, states: dict[str, Any], store: CounterStore | None = None,
                          at: float | None = None) -> tuple[int, int, float]:
    """Fetch every target at once (as the agent's scheduler does), then ``parse`` each payload
    with the target's state of the poll before (``states``, by target name, updated) and, given
    a store, store its columns at ``at`` (None: the time each is stored).

    Returns (counters and gauges read, targets whose fetch failed, CPU seconds after the fetch:
    parse and store, without the fetch)."""
    payloads = await asyncio.gather(*(c.fetch() for c in cols), return_exceptions=True)
    t0 = time.process_time()
    values = errors = 0
    for c, payload in zip(cols, payloads, strict=True):
        if isinstance(payload, BaseException):
            errors += 1
            continue
        r, states[c.name] = parse(payload, TargetSpec(c.name, c.source), states[c.name])
        if store is not None:
            store.update_columns(r.counters.columns(c.name, r.clocks, r.gauges), time.time() if at is None else at)
        values += len(r.counters) + len(r.gauges)
    return values, errors, time.process_time() - t0
