"""Benchmark: the job-impact stage on a large cluster.

A fat tree of ``--hosts`` hosts (40 per leaf, LLDP naming each host's port), 8 spines, jobs of
``--job-size`` hosts, and ``--findings`` active findings (storm origins whose evidence lists
victims and 20 paused hosts, and degraded uplinks that reach every host of their leaf). Prints
the time of: the first pass (placing every job host, building the index, every finding's
impact), a steady pass (nothing changed), a pass after the inventory changed (one job ended),
one job view, and the job metric families; each the median of ``--repeat`` runs.

    python bench/jobs.py [--hosts 10000] [--job-size 8] [--findings 2000] [--repeat 5]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from fabricmon.agent.assemble import build_pipeline  # noqa: E402
from fabricmon.agent.jobs.export import job_families  # noqa: E402
from fabricmon.agent.jobs.view import job_view  # noqa: E402
from fabricmon.agent.pipeline import Pipeline  # noqa: E402
from fabricmon.core.model import DeviceInfo, Finding, JobInfo, Link, ParseResult  # noqa: E402

T0 = 1764691200.0
PER_LEAF = 40
SPINES = 8


def build(hosts: int, job_size: int) -> tuple[Pipeline, list[JobInfo]]:
    p = build_pipeline(None, [])
    leaves = (hosts + PER_LEAF - 1) // PER_LEAF
    links = [Link(f"leaf{h // PER_LEAF:04d}", f"Ethernet{h % PER_LEAF + 1}", f"gpu{h:05d}", "eth0") for h in range(hosts)]
    links += [Link(f"leaf{lf:04d}", f"Ethernet{PER_LEAF + 1 + s}", f"spine{s:02d}", f"Ethernet{lf + 1}")
              for lf in range(leaves) for s in range(SPINES)]
    devices = [DeviceInfo(f"leaf{lf:04d}", "switch") for lf in range(leaves)] + [DeviceInfo(f"spine{s:02d}", "switch") for s in range(SPINES)]
    p.store_result("lldp", T0, ParseResult(devices=devices, links=links))
    jobs = [JobInfo(str(100000 + j), tuple(f"gpu{h:05d}" for h in range(j * job_size, min(hosts, (j + 1) * job_size))), T0 - 3600)
            for j in range((hosts + job_size - 1) // job_size)]
    p.store_result("slurm", T0, ParseResult(inventory=jobs))
    return p, jobs


def findings(n: int, hosts: int) -> list[Finding]:
    out = []
    leaves = (hosts + PER_LEAF - 1) // PER_LEAF
    for i in range(n):
        lf = i % leaves
        if i % 2 == 0:
            h = lf * PER_LEAF + (i // leaves) % PER_LEAF
            paused = {f"gpu{(h + k * 37) % hosts:05d}:eth0": "paused" for k in range(1, 21)}
            ev = {"origin_peer": f"gpu{h:05d}:eth0", "victim_ports": [f"spine{s:02d}:Ethernet{lf + 1}" for s in range(4)],
                  "also_paused": paused}
            out.append(Finding("pfc_storm", "critical", f"leaf{lf:04d}", f"Ethernet{h % PER_LEAF + 1}", 3, "origin", T0 + i,
                               evidence=ev, peer_device=f"gpu{h:05d}", peer_port="eth0"))
        else:
            s = (i // leaves) % SPINES
            out.append(Finding("link_degraded", "warning", f"leaf{lf:04d}", f"Ethernet{PER_LEAF + 1 + s}", None, None, T0 + i,
                               evidence={"symbol_errors": 12}, peer_device=f"spine{s:02d}", peer_port=f"Ethernet{lf + 1}"))
    return out


def timed(fn, repeat: int) -> float:
    runs = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        runs.append(time.perf_counter() - t)
    return statistics.median(runs)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hosts", type=int, default=10_000)
    ap.add_argument("--job-size", type=int, default=8)
    ap.add_argument("--findings", type=int, default=2_000)
    ap.add_argument("--repeat", type=int, default=5)
    a = ap.parse_args(argv)
    fs = findings(a.findings, a.hosts)
    never = lambda: False  # noqa: E731 - no unmatched host is reported during the benchmark

    firsts = []
    for _ in range(a.repeat):  # a fresh pipeline each time; only the pass is timed
        fresh, _ = build(a.hosts, a.job_size)
        t = time.perf_counter()
        fresh.jobs.annotate(fs, [], fresh.store, fresh.topology, T0, never)
        firsts.append(time.perf_counter() - t)
    p, jobs = build(a.hosts, a.job_size)
    p.jobs.annotate(fs, [], p.store, p.topology, T0, never)
    for f in fs:
        f.evidence = {k: v for k, v in f.evidence.items() if not k.startswith("jobs")}  # what a detection pass hands over
    p.detector.restore(fs)
    first_s = statistics.median(firsts)
    steady_s = timed(lambda: p.jobs.annotate(fs, [], p.store, p.topology, T0, never), a.repeat)
    toggle = [jobs, jobs[1:]]

    def changed() -> None:
        toggle.reverse()
        p.jobs.set_inventory("slurm", T0, toggle[0])
        p.jobs.annotate(fs, [], p.store, p.topology, T0, never)

    changed_s = timed(changed, a.repeat)
    view_s = timed(lambda: job_view(p, jobs[len(jobs) // 2].id), a.repeat)
    families_s = timed(lambda: job_families(p), a.repeat)
    touched = sum(1 for f in fs if f.evidence.get("jobs_affected"))
    print(f"job stage: {a.hosts} hosts, {len(jobs)} jobs of {a.job_size}, {a.findings} active findings "
          f"({touched} touch a job), median of {a.repeat}")
    for label, s in (("first pass (place every host, index, every impact)", first_s), ("steady pass (nothing changed)", steady_s),
                     ("pass after an inventory change", changed_s), ("one job view", view_s), ("job metric families", families_s)):
        print(f"  {label:<52} {s * 1000:9.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
