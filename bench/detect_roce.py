"""Detection on a RoCE fabric where PFC pause moves on every port: CPU per pass, per stage.

    python -m bench.detect_roce [PORTS] [--polls N]     # default 100,000 switch ports, 4 polls

The perfquery bench fabric (bench/size.py) is InfiniBand: its detection is the ib analysis.
This stage measures the Ethernet side, where the pfc analysis and the misconfig checklist
work, on the busiest shape it can take: every port of a lossless fabric pausing a little on
its lossless priority every poll.

The fabric: ``PORTS`` switch ports of 64-port switches (SONiC-shaped: per-priority PFC frame
counters rx and tx for priorities 0-7, port byte counters, link speed and state gauges, as
SONiC's COUNTERS_DB gives them: docs/fabric-reference.md, SNMP and gNMI sections), cabled in
pairs (port j of switch 2k to port j of switch 2k+1), ``fabric: lossless_priorities: [3]``.
Load: every port sends and receives at 40 % of 400 Gb/s, and on priority 3 it receives and
sends about 2,000 pause frames a poll (200 a second). That is the pause level the threshold
table of docs/fabric-reference.md gives for Microsoft's RoCE fabric, "up to 60k pauses per 5
min" (after Guo et al., "RDMA over Commodity Ethernet at Scale", SIGCOMM 2016): 200 a second.
At 400 Gb/s a frame holds a port at most 84 us, so that is at most 1.7 % of the time paused:
no storm, no deadlock, and the run reports how many findings were raised (none, on this
load). Inferred as a load shape, not recorded from a fabric.

Each pass runs with the collector paused, as the pipeline worker runs it (agent/worker.py);
the CPU of every analysis and rule is measured by wrapping its entry point. Prints one JSON
object.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from fabricmon.agent.assemble import build_pipeline
from fabricmon.agent.config import Config
from fabricmon.agent.detector.analyses import ANALYSES
from fabricmon.agent.gcpause import gc_paused
from fabricmon.core.model import Counters, Gauge, Link, ParseResult, TargetSpec

if TYPE_CHECKING:
    from fabricmon.agent.pipeline import Pipeline

T0 = 1_700_000_000.0
INTERVAL = 10.0
SPEED = 400e9 / 8  # bytes/s
LOAD = 0.4  # share of line rate each port sends and receives
PAUSE_PER_POLL = 2_000  # pause frames a port receives and sends on the lossless priority per poll
LOSSLESS = 3
CONFIG = Config.model_validate({"global": {"stale_after": "1h"}, "fabric": {"lossless_priorities": [LOSSLESS]}})


class Timed:
    """CPU seconds spent in one callable, summed per pass."""

    def __init__(self, fn: Callable[..., Any]) -> None:
        self.fn, self.cpu = fn, 0.0

    def __call__(self, *args: Any) -> Any:
        c = time.process_time()
        try:
            out = self.fn(*args)
            return None if out is None else list(out)  # a rule's observations come from a generator
        finally:
            self.cpu += time.process_time() - c


def timed_stages(p: Pipeline) -> dict[str, Timed]:
    """Wrap every analysis' update and every rule's evaluation of ``p``'s detector in a
    :class:`Timed`, by stage name ("analysis pfc", "rule congestion"); reset ``cpu`` per pass."""
    stages: dict[str, Timed] = {}
    for name in ANALYSES:
        a = p.detector.analysis(name)
        a.update = stages.setdefault(f"analysis {name}", Timed(a.update))  # type: ignore[method-assign]
    for rule in p.detector.rules:
        rule.evaluate = stages.setdefault(f"rule {rule.name}", Timed(rule.evaluate))  # type: ignore[method-assign]
    return stages


def fabric(ports: int) -> tuple[list[tuple[str, str]], list[Link]]:
    names = [(f"sw{i // 64:05d}", f"Ethernet{i % 64}") for i in range(ports)]
    by_switch = [names[i:i + 64] for i in range(0, ports, 64)]
    links = [Link(a[0], a[1], b[0], b[1]) for sa, sb in zip(by_switch[0::2], by_switch[1::2], strict=False)
             for a, b in zip(sa, sb, strict=False)]
    return names, links


def run(ports: int, polls: int) -> dict[str, Any]:
    p = build_pipeline(CONFIG, [TargetSpec("fabric", "snmp")])
    names, links = fabric(ports)
    gauges = [Gauge(d, pt, g, v) for d, pt in names for g, v in (("link_speed_bytes", SPEED), ("link_up", 1.0))]
    stages = timed_stages(p)
    rng = random.Random(29)
    totals: dict[tuple[int, str, int], int] = {}
    passes: list[dict[str, Any]] = []
    for k in range(polls + 1):
        t = T0 + INTERVAL * k
        c = Counters()
        for i, (d, pt) in enumerate(names):
            for name in ("tx_bytes", "rx_bytes"):
                v = totals[(i, name, -1)] = totals.get((i, name, -1), 0) + int(SPEED * INTERVAL * LOAD)
                c.add(d, pt, name, v)
            for prio in range(8):
                for name in ("pfc_rx_pause_frames", "pfc_tx_pause_frames"):
                    step = rng.randint(PAUSE_PER_POLL // 2, PAUSE_PER_POLL * 3 // 2) if prio == LOSSLESS else 0
                    v = totals[(i, name, prio)] = totals.get((i, name, prio), 0) + step
                    c.add(d, pt, name, v, (prio,))
        with gc_paused():  # as Pipeline._parse_into_store
            p.store_result("fabric", t, ParseResult(counters=c, gauges=gauges, links=links if k == 0 else None))
        del c
        p.clock = t
        p.generation += 1
        for s in stages.values():
            s.cpu = 0.0
        with gc_paused():
            c0 = time.process_time()
            p.detect(t)
            cpu = time.process_time() - c0
        passes.append({"cpu_s": cpu, "by_stage": {n: s.cpu for n, s in stages.items() if s.cpu >= 0.001}})
    steady = passes[1:]  # the first pass meets every port and series for the first time
    worst = max(steady, key=lambda x: x["cpu_s"])
    return {"ports": ports, "polls": polls, "detect_cpu_s": [x["cpu_s"] for x in steady], "first_pass_cpu_s": passes[0]["cpu_s"],
            "by_stage_worst_pass": dict(sorted(worst["by_stage"].items(), key=lambda kv: -kv[1])),
            "by_stage": [{n: round(c, 3) for n, c in x["by_stage"].items()} for x in passes],
            "findings": len(p.detector.active)}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.detect_roce", description=__doc__.split("\n\n")[0])
    ap.add_argument("ports", type=int, nargs="?", default=100_000)
    ap.add_argument("--polls", type=int, default=4)
    a = ap.parse_args(argv)
    json.dump(run(a.ports, a.polls), sys.stdout)
    print()


if __name__ == "__main__":
    main()
