"""Soak: many SNMP switches on snmpsim and a large UFM Telemetry endpoint, polled together by
the real :class:`fabricmon.agent.runtime.Agent` for minutes, watching for leaks and lateness.

    python -m bench.soak [--minutes 10] [--targets 500] [--ports 100000]
                         [--snmp-interval 30] [--ufm-interval 60] [--sample-every 10]

* SNMP: one snmpsim process on 127.0.0.1 serves ``--targets`` communities, each a copy of one
  synthesized Arista-like switch (``bench.snmp_compare.snmprec`` with ``--switch-ports`` ports,
  8 PFC priorities each). snmpsim answers every community from one Python thread, so the
  interval must leave it time to answer all of them (its capacity, not the agent's, is the
  first limit on a 2-core machine).
* UFM Telemetry: an aiohttp stand-in in its own process serves a ``--ports``-port CSV of a
  Selene-shaped fabric (``bench.fabric.Fabric``) whose counters advance on every request.
* The agent runs in this process, serving /metrics; every ``--sample-every`` seconds the
  soak records the agent process's CPU (getrusage) and RSS (/proc/self/statm), polls done,
  failed polls, store series, and (every ``--scrape-every`` s) one /metrics scrape's time/size.

Poll lateness: the scheduler keeps each target on a fixed grid (first start + k x interval,
skipping missed slots); each successful poll's start time is compared with the grid slot it
belongs to, and slots skipped because a poll overran are counted as missed.

Prints a table and writes ``bench/results/soak.json``. It is a benchmark, not a test: it
asserts nothing, and it sends traffic only to 127.0.0.1.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import math
import multiprocessing
import os
import resource
import statistics
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"
CSV_PATH = "/csv/cset/converted_enterprise"
UFM_TARGET = "ufm-telemetry"


# ---------------------------------------------------------------------- process figures
def cpu_s() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() / 2**20


class LogTally(logging.Handler):
    """Counts the agent's log lines by level (one per failed poll is the contract), keeps a few."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.by_level: dict[str, int] = {}
        self.last: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.by_level[record.levelname] = self.by_level.get(record.levelname, 0) + 1
        if record.levelno >= logging.WARNING:
            self.last = [*self.last[-4:], record.getMessage()[:200]]


def _pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    s = sorted(values)
    return s[min(len(s) - 1, max(0, math.ceil(q * len(s)) - 1))]


# ---------------------------------------------------------------------- stand-ins
def switch_snmprec(ports: int) -> str:
    """One synthesized Arista-like switch with ``ports`` ports (bench.snmp_compare's layout)."""
    from bench import snmp_compare

    saved = snmp_compare.PORTS
    snmp_compare.PORTS = ports  # snmprec() reads the module's port count
    try:
        return snmp_compare.snmprec(0)
    finally:
        snmp_compare.PORTS = saved


def _serve_telemetry(nports: int, port_q: Any, stop: Any) -> None:
    """Child process: a UFM Telemetry endpoint whose counters advance on every request."""
    from aiohttp import web

    from bench.fabric import Fabric

    fabric = Fabric(nports)

    async def main() -> None:
        served = 0

        async def handle(request: web.Request) -> web.Response:
            nonlocal served
            k, served = served, served + 1
            body = await asyncio.get_running_loop().run_in_executor(None, fabric.ufm_csv, k, int(time.time() * 1e6))
            return web.Response(text=body, content_type="text/csv")

        app = web.Application()
        app.router.add_get(CSV_PATH, handle)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port_q.put((runner.addresses[0][1], fabric.nports))
        while not stop.is_set():
            await asyncio.sleep(0.5)
        await runner.cleanup()

    asyncio.run(main())


def config_text(snmp_port: int, tele_port: int, targets: int, a: argparse.Namespace) -> str:
    lines = [
        "global:",
        f"  poll_interval: {a.snmp_interval}s",
        f"  poll_timeout: {max(1.0, 0.9 * a.snmp_interval):g}s",
        f"  max_concurrency: {a.concurrency}",
        "  jitter: 1.0",  # spread first polls over a whole interval, as a long-running agent is
        f"  backoff_max: {a.snmp_interval * 4}s",
        f"  stale_after: {max(600, 10 * a.ufm_interval)}s",
        f"  history: {a.history}",
        "web: {listen_address: ''}",
        "targets:",
        f"  - {{name: {UFM_TARGET}, source: ufm-telemetry, address: 127.0.0.1, scheme: http, port: {tele_port},"
        f" interval: {a.ufm_interval}s, timeout: {max(5.0, 0.9 * a.ufm_interval):g}s}}",
    ]
    lines += [f"  - {{name: sw{i:03d}, source: snmp, address: 127.0.0.1, port: {snmp_port}, community: sw{i:03d},"
              f" snmp_timeout: 5s, retries: 1}}" for i in range(targets)]
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------- the run
def lateness(polls: list[tuple[str, float, float, bool]], intervals: dict[str, float]) -> dict[str, dict[str, float]]:
    """Per source kind: lateness of each poll start against its target's grid, and missed slots."""
    by_target: dict[str, list[float]] = {}
    for target, t, _d, _ok in polls:
        by_target.setdefault(target, []).append(t)
    out: dict[str, dict[str, Any]] = {}
    for kind in ("snmp", "ufm-telemetry"):
        late: list[float] = []
        missed = expected = 0
        for target, ts in by_target.items():
            if (target == UFM_TARGET) != (kind == "ufm-telemetry"):
                continue
            iv = intervals[target]
            t0 = ts[0]
            prev_slot = 0
            for t in ts[1:]:
                slot = int((t - t0) / iv + 1e-9)
                late.append(t - (t0 + slot * iv))
                missed += max(0, slot - prev_slot - 1)
                prev_slot = slot
            expected += prev_slot
        out[kind] = {"polls": len(late), "lateness_p50_s": _pct(late, 0.5), "lateness_p99_s": _pct(late, 0.99),
                     "lateness_max_s": max(late) if late else float("nan"), "missed_slots": missed, "slots": expected}
    return out


async def soak(loaded: Any, a: argparse.Namespace, listen_port: int) -> dict[str, Any]:
    from fabricmon.agent.runtime import Agent

    poll_log: list[tuple[str, float, float, bool]] = []

    class SoakAgent(Agent):
        def _on_poll(self, poll: Any) -> None:
            poll_log.append((poll.target, poll.t, poll.duration_s, poll.ok))
            super()._on_poll(poll)

    duration = a.minutes * 60
    agent = SoakAgent(loaded, listen=f"127.0.0.1:{listen_port}", duration=duration)
    samples: list[dict[str, Any]] = []
    t0, c0 = time.monotonic(), cpu_s()

    def scrape() -> tuple[float, int]:
        s = time.perf_counter()
        req = urllib.request.Request(f"http://127.0.0.1:{listen_port}/metrics", headers={"Accept-Encoding": "gzip"})  # as Prometheus
        with urllib.request.urlopen(req, timeout=300) as r:
            n = len(r.read())
        return time.perf_counter() - s, n

    async def sampler() -> None:
        last_w, last_c, last_scrape = t0, c0, -1e9
        while True:
            await asyncio.sleep(a.sample_every)
            now, c = time.monotonic(), cpu_s()
            row: dict[str, Any] = {
                "t_s": round(now - t0, 1), "cpu_pct": round(100 * (c - last_c) / max(now - last_w, 1e-9), 1),
                "cpu_total_s": round(c - c0, 1), "rss_mb": round(rss_mb(), 1),
                "polls": len(poll_log), "failed": sum(1 for p in poll_log if not p[3]),
            }
            pipeline = getattr(agent, "pipeline", None)
            row["series"] = pipeline.store.series_count() if pipeline is not None else 0
            if a.scrape_every and now - last_scrape >= a.scrape_every - 0.5:
                last_scrape = now
                with contextlib.suppress(OSError):
                    row["scrape_s"], row["scrape_bytes"] = await asyncio.to_thread(scrape)
            samples.append(row)
            print(_row_text(row), flush=True)
            last_w, last_c = now, c

    print(_HEAD, flush=True)
    task = asyncio.create_task(sampler())
    try:
        await agent.run()
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    wall = time.monotonic() - t0
    g = loaded.config.global_
    intervals = {t.name: t.interval or g.poll_interval for t in loaded.config.targets}
    errors: dict[str, dict[str, int]] = {}
    for st in agent.pipeline.targets.values():
        for reason, n in st.errors.items():
            errors.setdefault(reason, {}).setdefault(st.source, 0)
            errors[reason][st.source] += n
    durations = {kind: [d for tgt, _t, d, ok in poll_log if ok and (tgt == UFM_TARGET) == (kind == "ufm-telemetry")]
                 for kind in ("snmp", "ufm-telemetry")}
    return {
        "wall_s": round(wall, 1), "cpu_s": round(cpu_s() - c0, 1), "samples": samples,
        "lateness": lateness(poll_log, intervals), "errors_by_reason": errors,
        "poll_duration": {k: {"p50_s": _pct(v, 0.5), "p99_s": _pct(v, 0.99), "max_s": max(v) if v else float("nan")}
                          for k, v in durations.items()},
        "polls": len(poll_log), "failed": sum(1 for p in poll_log if not p[3]),
        "last_errors": sorted({st.last_error for st in agent.pipeline.targets.values() if st.last_error and not st.up})[:5],
    }


_HEAD = f"{'t_s':>7} {'cpu%':>6} {'cpu_s':>7} {'rss_mb':>8} {'polls':>7} {'failed':>6} {'series':>9} {'scrape_s':>8} {'gzip_MB':>9}"


def _row_text(r: dict[str, Any]) -> str:
    sc = f"{r['scrape_s']:8.2f} {r['scrape_bytes'] / 1e6:9.1f}" if "scrape_s" in r else f"{'':8} {'':9}"
    return f"{r['t_s']:7.1f} {r['cpu_pct']:6.1f} {r['cpu_total_s']:7.1f} {r['rss_mb']:8.1f} {r['polls']:7d} {r['failed']:6d} {r['series']:9d} {sc}"


def rss_trend(samples: list[dict[str, Any]]) -> dict[str, float]:
    """RSS growth after warm-up (the first third of the run): least-squares slope in MB/min."""
    rows = samples[len(samples) // 3:]
    if len(rows) < 3:
        return {"slope_mb_per_min": float("nan"), "from_mb": float("nan"), "to_mb": float("nan")}
    xs, ys = [r["t_s"] / 60 for r in rows], [r["rss_mb"] for r in rows]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / max(sum((x - mx) ** 2 for x in xs), 1e-9)
    return {"slope_mb_per_min": round(slope, 2), "from_mb": ys[0], "to_mb": ys[-1], "peak_mb": max(r["rss_mb"] for r in samples)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.soak", description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument("--targets", type=int, default=500, help="SNMP switches (snmpsim communities)")
    ap.add_argument("--switch-ports", type=int, default=8, help="ports per SNMP switch (8 PFC priorities each)")
    ap.add_argument("--ports", type=int, default=100_000, help="ports in the UFM Telemetry CSV")
    ap.add_argument("--snmp-interval", type=float, default=300.0,
                    help="one snmpsim answers ~2.5 polls/s of this switch on a 2-core box: 500 need >= 200 s")
    ap.add_argument("--ufm-interval", type=float, default=30.0)
    ap.add_argument("--history", type=int, default=8, help="store history points per series (memory grows until full)")
    ap.add_argument("--concurrency", type=int, default=32, help="global max_concurrency of the agent")
    ap.add_argument("--sample-every", type=float, default=10.0)
    ap.add_argument("--scrape-every", type=float, default=30.0, help="seconds between /metrics scrapes (0: none)")
    ap.add_argument("--out", type=Path, default=RESULTS / "soak.json")
    a = ap.parse_args(argv)

    from fabricmon.agent.config import load
    from tests.conftest import free_port
    from tests.snmpsim_util import SNMPSIM, SnmpSim

    if SNMPSIM is None:
        print("snmpsim-command-responder is not installed (pip install snmpsim)", file=sys.stderr)
        return 2
    os.environ.setdefault("SNMPSIM_ALLOW_ROOT", "true")
    tally = LogTally()
    logging.getLogger().addHandler(tally)  # the agent's lines are counted, not printed over the table
    logging.getLogger().setLevel(logging.INFO)
    ctx = multiprocessing.get_context("fork")
    port_q, stop = ctx.Queue(), ctx.Event()
    tele = ctx.Process(target=_serve_telemetry, args=(a.ports, port_q, stop), daemon=True)
    tele.start()
    try:
        with tempfile.TemporaryDirectory(prefix="fabricmon-soak-") as tmp:
            rec = Path(tmp) / "switch.snmprec"
            rec.write_text(switch_snmprec(a.switch_ports))
            print(f"starting snmpsim with {a.targets} communities and a {a.ports}-port UFM Telemetry stand-in ...", flush=True)
            with SnmpSim({f"sw{i:03d}": rec for i in range(a.targets)}, start_timeout=600) as sim:
                tele_port, nports = port_q.get(timeout=300)
                cfg = Path(tmp) / "fabricmon.yml"
                cfg.write_text(config_text(sim.port, tele_port, a.targets, a))
                result = asyncio.run(soak(load(cfg), a, free_port()))
    finally:
        stop.set()
        tele.join(timeout=10)
        if tele.is_alive():
            tele.kill()
    result.update({
        "params": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(a).items()},
        "ufm_ports": nports, "snmp_oids_per_switch": rec_lines(a.switch_ports),
        "log_lines": tally.by_level, "last_log_lines": tally.last,
        "rss_trend": rss_trend(result["samples"]), "python": sys.version.split()[0], "cpus": os.cpu_count(),
    })
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(result, indent=1, default=float) + "\n")
    print(summary(result))
    print(f"wrote {a.out}")
    return 0


def rec_lines(ports: int) -> int:
    return switch_snmprec(ports).count("\n")


def summary(r: dict[str, Any]) -> str:
    tr, lat, pd = r["rss_trend"], r["lateness"], r["poll_duration"]
    out = [
        f"\n{r['params']['targets']} SNMP switches ({r['snmp_oids_per_switch']} OIDs each) every {r['params']['snmp_interval']:g} s"
        f" + UFM Telemetry {r['ufm_ports']} ports every {r['params']['ufm_interval']:g} s, {r['wall_s'] / 60:.1f} min:",
        f"  agent CPU {r['cpu_s']:.0f} s = {100 * r['cpu_s'] / max(r['wall_s'], 1e-9):.0f}% of one core;"
        f" RSS {tr.get('from_mb', float('nan')):.0f} -> {tr.get('to_mb', float('nan')):.0f} MB after warm-up"
        f" (slope {tr['slope_mb_per_min']:+.2f} MB/min, peak {tr.get('peak_mb', float('nan')):.0f} MB)",
        f"  polls {r['polls']} ({r['failed']} failed); errors by reason {r['errors_by_reason'] or '{}'}; log lines {r['log_lines']}",
    ]
    for kind, v in lat.items():
        out.append(f"  {kind}: lateness p50 {v['lateness_p50_s']:.3f} s, p99 {v['lateness_p99_s']:.3f} s, max {v['lateness_max_s']:.3f} s;"
                   f" missed slots {v['missed_slots']} of {v['slots']}; poll duration p50 {pd[kind]['p50_s']:.2f} s,"
                   f" p99 {pd[kind]['p99_s']:.2f} s")
    if r.get("last_errors"):
        out.append("  last errors: " + " | ".join(r["last_errors"]))
    return "\n".join(out)


if __name__ == "__main__":
    sys.exit(main())
