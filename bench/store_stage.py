"""The counter store alone: update CPU per poll and bytes per series, old vs new, one run.

    python -m bench.store_stage                       # 10k, 50k, 100k, 200k ports
    python -m bench.store_stage --sizes 10000 --polls 3
    python -m bench.store_stage --memory-sizes 10000,50000 --out /tmp/store.json

"old" is the object-per-series store the columnar one replaced (tests/store_reference.py,
kept as the equivalence test's oracle); "new" is agent/store.py, fed two ways: a list of
``Sample`` objects (``update``, the object API tests and tools use: conversion to columns
included), and columns with a stable layout token (``update_columns``: what the parsers hand
over since they write columns; the rows are mapped once). Readings are those of ``perfquery -x`` on a
Selene-shaped fabric (bench/fabric.py: 18 counters per port, deterministic growth), so
every run feeds identical data. Each (size, store, measurement) runs in its own process:
CPU time per steady poll (the first poll, which creates every series, is reported apart)
without tracing, and the store's bytes per series with tracemalloc after ``history`` polls
(the old store's history arrays are then full; numpy reports its buffers to tracemalloc).
Figures are printed, never asserted.
"""

from __future__ import annotations

import argparse
import gc
import json
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path
from typing import Any

import numpy as np

from bench.fabric import FIELDS, Fabric
from fabricmon.agent.store import CounterStore
from fabricmon.collectors.perfquery.parse import COUNTERS as PQ_COUNTERS
from fabricmon.core.model import CounterColumns, Sample

ROOT = Path(__file__).resolve().parent.parent
SIZES = [10_000, 50_000, 100_000, 200_000]
INTERVAL = 10.0
T0 = 1_700_000_000.0
KINDS = ("old", "new", "new_columns")


class Feed:
    """The fabric's readings per poll, as samples or as columns with one layout."""

    def __init__(self, fab: Fabric) -> None:
        self.fab = fab
        defs = [PQ_COUNTERS[f] for f in FIELDS]
        self.defs = [(d.counter, d.scale) for d in defs]
        self.ports = [(p.device, str(p.port)) for p in fab.ports]
        nf = len(defs)
        self.port_of = np.repeat(np.arange(len(self.ports)), nf)
        self.keys = [(name, ()) for _ in self.ports for name, _ in self.defs]
        self.bits = np.full(len(self.keys), 64, np.int64)  # extended counters: 64 bits, wrapping
        self.sat = np.zeros(len(self.keys), bool)
        self.scale = np.tile(np.array([s for _, s in self.defs]), len(self.ports))

    def values(self, k: int) -> np.ndarray:
        """Every reading of poll ``k``: :meth:`Fabric.value` of each (port, counter), on whole
        arrays (the same integers; generating them is not what is measured)."""
        i = np.repeat(np.arange(len(self.ports), dtype=np.int64), len(self.defs))
        j = np.tile(np.arange(len(self.defs), dtype=np.int64), len(self.ports))
        traffic = 10**9 + (i * 7919 + j * 104729) % 10**9 + k * (1_000_000 + (i * 31 + j) % 50_000)
        wait = (i * 7919) % 10**6 + k * ((i * 7) % 1000)
        errors = (i + j) % 3 + k * (i % 997 == 0)
        return np.where(j < 4, traffic, np.where(j == 4, wait, errors)).astype(np.uint64)

    def samples(self, k: int) -> list[Sample]:
        vals = iter(self.values(k).tolist())
        return [Sample(d, p, name, next(vals), (), 64, False, scale) for d, p in self.ports for name, scale in self.defs]

    def columns(self, k: int) -> CounterColumns:
        return CounterColumns("ib", self.ports, self.port_of, self.keys, self.values(k),
                              self.bits, self.sat, self.scale, layout="perfquery-layout")


def _store(kind: str) -> Any:
    if kind == "old":
        sys.path.insert(0, str(ROOT))
        from tests.store_reference import CounterStore as Old

        return Old(stale_after=3600.0)
    return CounterStore(stale_after=3600.0)


def _feed(store: Any, feed: Feed, kind: str, k: int) -> float:
    """Update the store with poll ``k``; CPU seconds of the update alone."""
    data = feed.columns(k) if kind == "new_columns" else feed.samples(k)
    gc.collect()
    t = T0 + INTERVAL * k
    c0 = time.process_time()
    if kind == "new_columns":
        store.update_columns(data, t)
    else:
        store.update(data, t, target="ib")
    cpu = time.process_time() - c0
    del data
    return cpu


def measure(ports: int, kind: str, mode: str, polls: int) -> dict[str, Any]:
    """One (size, store, measurement) in this process."""
    feed = Feed(Fabric(ports))
    gc.disable()  # as the pipeline does around a poll (agent/gcpause.py); collected between polls
    if mode == "cpu":
        store = _store(kind)
        cpus = [_feed(store, feed, kind, k) for k in range(polls)]
        return {"first_poll_cpu_s": cpus[0], "poll_cpu_s": sum(cpus[1:]) / max(1, len(cpus) - 1),
                "series": store.series_count()}
    tracemalloc.start()
    store = _store(kind)
    for k in range(store.history):
        _feed(store, feed, kind, k)
    gc.collect()
    used = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    return {"bytes": used, "series": store.series_count(), "bytes_per_series": used / max(1, store.series_count())}


def run_one(ports: int, kind: str, mode: str, polls: int) -> dict[str, Any]:
    proc = subprocess.run([sys.executable, "-m", "bench.store_stage", "--one", f"{ports},{kind},{mode}", "--polls", str(polls)],
                          cwd=ROOT, capture_output=True, text=True, timeout=3600)
    if proc.returncode != 0:
        return {"error": proc.stderr[-2000:]}
    return json.loads(proc.stdout)


def run(sizes: list[int], polls: int, memory_sizes: list[int] | None = None) -> dict[str, Any]:
    """Every size, store and measurement (bytes per series only at ``memory_sizes``, default
    every size: it takes ``history`` polls under tracemalloc); the figures by size."""
    out: dict[str, Any] = {}
    for n in sizes:
        row: dict[str, Any] = {}
        modes = ("cpu", "memory") if memory_sizes is None or n in memory_sizes else ("cpu",)
        for kind in KINDS:
            for mode in modes:
                print(f"[bench] store: {n:,} ports, {kind}, {mode} ...", file=sys.stderr, flush=True)
                row[f"{kind}_{mode}"] = run_one(n, kind, mode, polls)
        out[str(n)] = row
    return out


def table(res: dict[str, Any]) -> str:
    head = (f"{'ports':>9} {'series':>10} | {'old s/poll':>10} {'new s/poll':>10} {'ratio':>6} | {'cols s/poll':>11} {'ratio':>6} | "
            f"{'old B/ser':>9} {'new B/ser':>9} {'ratio':>6} | {'old fill s':>10} {'new fill s':>10}")
    lines = ["Counter store, update CPU per poll (steady) and bytes per series; old = object per series, "
             "new = columnar (samples in / columns in)", head, "-" * len(head)]
    for n, r in res.items():
        try:
            o, s, c = r["old_cpu"], r["new_cpu"], r["new_columns_cpu"]
            if "old_memory" in r:
                ob, nb = r["old_memory"]["bytes_per_series"], r["new_memory"]["bytes_per_series"]
                memory = f"{ob:>9.0f} {nb:>9.0f} {ob / nb:>5.1f}x"
            else:
                memory = f"{'-':>9} {'-':>9} {'-':>6}"
            lines.append(
                f"{int(n):>9,} {s['series']:>10,} | {o['poll_cpu_s']:>10.3f} {s['poll_cpu_s']:>10.3f} "
                f"{o['poll_cpu_s'] / s['poll_cpu_s']:>5.1f}x | {c['poll_cpu_s']:>11.3f} {o['poll_cpu_s'] / c['poll_cpu_s']:>5.1f}x | "
                f"{memory} | {o['first_poll_cpu_s']:>10.2f} {s['first_poll_cpu_s']:>10.2f}")
        except (KeyError, ZeroDivisionError) as exc:
            lines.append(f"{int(n):>9,} failed: {exc!r} {json.dumps(r)[:300]}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.store_stage", description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", type=lambda v: [int(x) for x in v.split(",")], default=SIZES)
    ap.add_argument("--polls", type=int, default=4, help="polls in the CPU measurement (the first fills the store)")
    ap.add_argument("--memory-sizes", type=lambda v: [int(x) for x in v.split(",")], default=None,
                    help="sizes at which bytes per series are measured (default: every size)")
    ap.add_argument("--out", help="also write the figures as JSON here")
    ap.add_argument("--one", help=argparse.SUPPRESS)  # ports,kind,mode: one measurement in this process
    a = ap.parse_args(argv)
    if a.one:
        ports, kind, mode = a.one.split(",")
        print(json.dumps(measure(int(ports), kind, mode, a.polls)))
        return 0
    res = run(a.sizes, a.polls, a.memory_sizes)
    if a.out:
        Path(a.out).write_text(json.dumps(res, indent=1))
    print(table(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
