"""One fabric size, in its own process (so its peak RSS is its own): prints one JSON object.

    python -m bench.size 100000 [--polls 3]
    python -m bench.size 25704 --switch-ports   # the real Selene fabric as the perfquery collector polls it

Phases, in order: another process builds the fabric and writes every poll's payload to a
temporary folder (bench/fabric.py ``write``), so this process holds what the agent holds: the
agent and one poll's payload, as it gets it from its fetcher (or a recording); run the agent
path (parse -> store -> detect -> render) for ``--polls`` polls of a perfquery target, through
the collector's own entry point (``parse_poll``: parse, then every string sanitised, as the
pipeline calls it); serve /metrics and scrape it concurrently from another process; record the
peak RSS; only then build the same series in prometheus_client for the comparison, and
measure each source format's parse (neither is counted in the agent's peak).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import resource
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from bench.detect_roce import timed_stages
from bench.fabric import read_texts
from fabricmon.agent.assemble import build_pipeline
from fabricmon.agent.config import Config
from fabricmon.agent.exporter.exposition import render
from fabricmon.agent.exporter.metrics import ExpositionPolicy
from fabricmon.agent.exporter.server import Exporter, make_app, start_server
from fabricmon.agent.gcpause import gc_paused
from fabricmon.agent.pipeline import Pipeline
from fabricmon.collectors.perfquery import PerfqueryCollector
from fabricmon.collectors.ufm_telemetry import UfmTelemetryCollector
from fabricmon.core.model import TargetSpec

ROOT = Path(__file__).resolve().parent.parent
T0 = 1_700_000_000.0
INTERVAL = 10.0
# The agent's configuration for the benchmarks: the defaults, with series kept an hour (a bench
# run's polls can be further apart on the poll clock than the default stale_after).
CONFIG = Config.model_validate({"global": {"stale_after": "1h"}})
PARSE_PORTS = 25_000
HOT_POLLS = 6  # polls with 1 % of ports congested: the congestion rule's 60 s window fills in 4 or 5


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def rss_mb() -> float:
    """Current resident set size."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() / 2**20


class Clock:
    """Wall and CPU seconds of a block."""

    def __enter__(self) -> Clock:
        self.w, self.c = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *exc: object) -> None:
        self.wall = time.perf_counter() - self.w
        self.cpu = time.process_time() - self.c


def series_count(chunks: list[bytes]) -> int:
    """Sample lines of a body given as its chunks (each starts a line), without joining them."""
    return sum(ch.count(b"\n") - ch.count(b"\n#") - ch.startswith(b"#") for ch in chunks)


class Payloads:
    """A run's payloads, written by another process (bench/fabric.py ``write``) and read back
    one poll at a time."""

    def __init__(self, folder: Path, ports: int, polls: int, switch_ports: bool, formats_ports: int) -> None:
        self.folder = folder
        argv = [sys.executable, "-m", "bench.fabric", str(folder), str(ports), "--polls", str(polls),
                "--hot-from", str(polls), "--hot-polls", str(HOT_POLLS), "--formats-ports", str(formats_ports)]
        subprocess.run([*argv, *(["--switch-ports"] if switch_ports else [])], cwd=ROOT, check=True)
        self.info = json.loads((folder / "fabric.json").read_text())
        self.ibnetdiscover = (folder / "ibnetdiscover.txt").read_text()

    def poll(self, k: int) -> list[str]:
        """Poll ``k``'s perfquery texts (the files are removed: each poll is read once)."""
        path = self.folder / f"poll-{k}"
        texts = read_texts(path)
        path.with_suffix(".txt").unlink()
        path.with_suffix(".json").unlink()
        return texts


def parse_formats(folder: Path) -> dict[str, Any]:
    """values/s of each source format's parser on one poll of a fabric (the collector's
    ``parse_poll``, as the pipeline calls it)."""
    out: dict[str, Any] = {}
    spec = TargetSpec("ib", "perfquery")
    _, state = PerfqueryCollector.parse_poll({"ibnetdiscover": (folder / "formats-ibnetdiscover.txt").read_text(),
                                             "perfquery": []}, spec, PerfqueryCollector.new_state())
    texts = read_texts(folder / "formats-perfquery")
    with Clock() as c:  # the line-by-line parse (a poll whose texts changed, or the first)
        r, state = PerfqueryCollector.parse_poll({"perfquery": texts}, spec, state)
    out["perfquery_line_by_line"] = {"values": len(r.counters), "cpu_s": c.cpu, "values_per_s": len(r.counters) / c.cpu}
    with Clock() as c:  # the same texts again: read in bulk
        r, state = PerfqueryCollector.parse_poll({"perfquery": texts}, spec, state)
    out["perfquery"] = {"values": len(r.counters), "cpu_s": c.cpu, "values_per_s": len(r.counters) / c.cpu}
    del texts, r, state
    spec = TargetSpec("ufm", "ufm-telemetry")
    for fmt, name in (("ufm-telemetry-csv", "formats-ufm.csv"), ("ufm-telemetry-prometheus", "formats-ufm.prom")):
        body = (folder / name).read_text()
        payload = {"responses": [{"method": "GET", "path": "/csv/cset/converted_enterprise" if fmt.endswith("csv") else "/metrics",
                                  "status": 200, "body": body}]}
        with Clock() as c:
            r, _ = UfmTelemetryCollector.parse_poll(payload, spec, UfmTelemetryCollector.new_state())
        out[fmt] = {"values": len(r.counters), "cpu_s": c.cpu, "values_per_s": len(r.counters) / c.cpu, "body_mb": len(body) / 1e6}
        del payload, body, r
        gc.collect()
    return out


def scrape_from_other_process(port: int, clients: int, rounds: int) -> dict[str, Any]:
    code = "import bench.scrape as s, sys; s.main(sys.argv[1:])"
    out = subprocess.run([sys.executable, "-c", code, str(port), str(clients), str(rounds)],
                         capture_output=True, text=True, timeout=600, check=True).stdout
    return json.loads(out)


def serve_in_thread(exporter: Exporter) -> tuple[int, asyncio.AbstractEventLoop, threading.Thread]:
    from tests.conftest import free_port

    port = free_port()
    loop = asyncio.new_event_loop()
    started = threading.Event()
    holder: dict[str, Any] = {}

    def run() -> None:
        asyncio.set_event_loop(loop)
        holder["runner"] = loop.run_until_complete(start_server(make_app(exporter), f"127.0.0.1:{port}"))
        started.set()
        loop.run_forever()
        loop.run_until_complete(holder["runner"].cleanup())

    th = threading.Thread(target=run, daemon=True)
    th.start()
    started.wait(30)
    return port, loop, th


def agent_path(run: Payloads, polls: int, clients: int, rounds: int) -> dict[str, Any]:
    spec = TargetSpec("ib", "perfquery")
    p = build_pipeline(CONFIG, [spec])
    exporter = Exporter(p)
    state = PerfqueryCollector.new_state()
    per_poll: list[dict[str, float]] = []
    gc.collect()
    rss = {"before_agent": rss_mb()}

    def one_poll(k: int) -> dict[str, float]:
        """Poll ``k`` through the agent path; CPU seconds per stage."""
        nonlocal state
        t = T0 + INTERVAL * k
        payload: dict[str, Any] = {"perfquery": run.poll(k)}
        if k == 0:
            payload["ibnetdiscover"] = run.ibnetdiscover
        # The collector paused as in Pipeline._parse_into_store (agent/gcpause.py).
        with gc_paused(), Clock() as c_parse:
            r, state = PerfqueryCollector.parse_poll(payload, spec, state)
        del payload
        with gc_paused(), Clock() as c_store:  # as Pipeline._parse_into_store
            p.store_result("ib", t, r)
        del r
        p.clock = t
        p.generation += 1
        with gc_paused(), Clock() as c_detect:  # as the pipeline worker runs every job (agent/worker.py)
            p.detect(t)
        with Clock() as c_render:
            exporter.render_now()
        gc.collect()
        return {"parse": c_parse.cpu, "store": c_store.cpu, "detect": c_detect.cpu, "render": c_render.cpu,
                "render_wall": c_render.wall}

    for k in range(polls):
        per_poll.append(one_poll(k))
        if k == 0:
            rss["store_filled"] = rss_mb()
    expo = exporter.exposition
    steady = per_poll[1:] or per_poll  # poll 0 builds every object: not the steady state
    avg = {k: sum(x[k] for x in steady) / len(steady) for k in steady[0]}
    chunks = expo.body.chunks(False)
    with Clock() as c_gz:  # what Prometheus asks for: OpenMetrics, gzip (the body compressed once per render)
        gz = b"".join(expo.response(True, True, exporter.process_tail(True)))
    result: dict[str, Any] = {
        "ports": len(p.store.ports), "counter_series": p.store.series_count(), "polls": polls,
        "steady_poll_cpu_s": avg, "first_poll_cpu_s": per_poll[0],
        "cycle_cpu_s": sum(avg[k] for k in ("parse", "store", "detect", "render")) + c_gz.cpu,
        "exposition_full": {"series": series_count(chunks), "bytes": expo.body.nbytes(False), "gzip_bytes": len(gz),
                            "gzip_cpu_s": c_gz.cpu},
        "rules": [r.name for r in p.detector.rules],
    }
    del chunks, gz
    port, loop, th = serve_in_thread(exporter)
    try:
        result["scrape"] = scrape_from_other_process(port, clients, rounds)
    finally:
        loop.call_soon_threadsafe(loop.stop)
        th.join(30)
    result["peak_rss_mb_full"] = peak_rss_mb()
    rss["after_scrapes"] = rss_mb()
    result["rss_mb"] = rss
    result["exposition_full"]["held_mb"] = expo.held_bytes() / 2**20
    # Health level: the same store, rendered for Prometheus at the health level.
    p.exposition_policy = ExpositionPolicy(level="health")
    with Clock() as c_h:
        text, _om = render(exporter_families(exporter))
    result["exposition_health"] = {"series": series_count([text]), "bytes": len(text), "render_cpu_s": c_h.cpu}
    del text, _om
    p.exposition_policy = None
    # 1 % of the ports congested at once (bench/fabric.py HOT_EVERY): the detection pass when
    # the congestion rule has findings to build, not only ports to clear.
    stages = timed_stages(p)  # CPU per analysis and rule, so the worst pass says where it went
    hot, by_stage = [], []
    for k in range(polls, polls + HOT_POLLS):
        for s in stages.values():
            s.cpu = 0.0
        hot.append(one_poll(k))
        by_stage.append({n: round(s.cpu, 3) for n, s in sorted(stages.items(), key=lambda kv: -kv[1].cpu) if s.cpu >= 0.005})
    kinds: dict[str, int] = {}
    for f in p.detector.active:
        kinds[f.kind] = kinds.get(f.kind, 0) + 1
    result["congested"] = {"ports": run.info["hot_ports"], "polls": HOT_POLLS,
                           "detect_cpu_s": [x["detect"] for x in hot], "active_findings": kinds,
                           "by_stage_worst_pass": by_stage[max(range(len(hot)), key=lambda i: hot[i]["detect"])]}
    result["_pipeline"] = p
    return result


def exporter_families(exporter: Exporter) -> list:
    from fabricmon.agent.exporter import metrics

    return metrics.all_families(exporter.pipeline)


def prometheus_client_ratio(p: Pipeline, our_render_cpu: float) -> dict[str, Any]:
    """generate_latest on the same fabric series (same names, labels and values) vs our render.

    ``ratio``: prometheus_client as an exporter built on it runs, a collector reading the
    store on every scrape (``collect()`` timed with ``generate_latest``), against our render of
    the same families into both formats' bytes. ``conservative_ratio``: bench/render.py's, with
    prometheus_client's families built before its clock starts (only its formatting timed).
    """
    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

    from bench.render import prometheus_client_ratio as conservative
    from fabricmon.core.vocabulary import COUNTERS, GAUGES, metric_name

    store = p.store

    class StoreCollector:
        def collect(self):
            cfams: dict[str, CounterMetricFamily] = {}
            gfams: dict[str, GaugeMetricFamily] = {}
            for (device, port), entry in store.ports.items():
                for (counter, sub), se in entry.series.items():
                    d = COUNTERS.get(counter)
                    if d is None:
                        continue
                    f = cfams.get(counter)
                    if f is None:
                        f = cfams[counter] = CounterMetricFamily(metric_name(d).removesuffix("_total"), d.help,
                                                                 labels=("device", "port", *d.labels))
                    f.add_metric((device, port, *(str(x) for x in sub)), se.total)
                for (name, sub), g in entry.gauges.items():
                    gd = GAUGES.get(name)
                    if gd is None:
                        continue
                    f2 = gfams.get(name)
                    if f2 is None:
                        f2 = gfams[name] = GaugeMetricFamily(metric_name(gd), gd.help, labels=("device", "port", *gd.labels))
                    f2.add_metric((device, port, *(str(x) for x in sub)), g.value)
            yield from cfams.values()
            yield from gfams.values()

    reg = CollectorRegistry()
    reg.register(StoreCollector())
    gc.collect()
    rss0 = peak_rss_mb()
    with Clock() as c:
        body = generate_latest(reg)
    gl_series = series_count([body])
    del body
    # our side, same series only (fabric families): render them again
    from fabricmon.agent.exporter import metrics

    gc.collect()
    with gc_paused(), Clock() as c2:  # as Exporter.render_now renders
        text, _ = render(metrics.fabric_families(p))
    out = {"generate_latest_cpu_s": c.cpu, "generate_latest_series": gl_series,
           "fabricmon_fabric_render_cpu_s": c2.cpu, "fabricmon_fabric_series": series_count([text]),
           "ratio": c.cpu / c2.cpu if c2.cpu else None, "peak_rss_growth_mb": peak_rss_mb() - rss0,
           "full_render_cpu_s": our_render_cpu}
    del text, _
    out["conservative"] = conservative(p)
    out["conservative_ratio"] = out["conservative"]["ratio"]
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("ports", type=int)
    ap.add_argument("--polls", type=int, default=3)
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--no-parse", action="store_true")
    ap.add_argument("--switch-ports", action="store_true", help="poll only the switches' ports (bench/fabric.py)")
    a = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="fabricmon-bench-") as tmp:
        with Clock() as c:
            run = Payloads(Path(tmp), a.ports, a.polls, a.switch_ports, 0 if a.no_parse else PARSE_PORTS)
        out: dict[str, Any] = {"requested_ports": a.ports, **run.info, "build_s": c.wall}
        agent = agent_path(run, a.polls, a.clients, a.rounds)  # first: its peak RSS is the agent's alone
        p = agent.pop("_pipeline")
        out["agent"] = agent
        out["prometheus_client"] = prometheus_client_ratio(p, agent["steady_poll_cpu_s"]["render"])
        del p
        gc.collect()
        if not a.no_parse:
            # Throughput is per value: measured on at most PARSE_PORTS ports to keep the run short.
            out["parse"] = parse_formats(Path(tmp))
            out["parse"]["measured_on_ports"] = run.info["formats_ports"]
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
