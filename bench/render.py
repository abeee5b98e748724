"""The exposition render alone: template render vs prometheus_client, body bytes, gzip levels, scrapes.

    python -m bench.render                   # 10k, 50k, 100k, 200k ports
    python -m bench.render --sizes 10000

Each size runs in its own process (``--one N``). The store is filled by two perfquery polls
of a Selene-shaped fabric (bench/fabric.py), then, in the same process: the first render
(which builds the family templates), a steady render after a third poll (same layout, new
values: what every poll costs), ``generate_latest`` on the same fabric series (its
families built before its clock starts) and our render of those same series, the body bytes (one body
serves both formats), gzip CPU and size at levels 1, 3 and 6 on that body, and /metrics
latency, plain and gzip, scraped from another process. Figures are printed, never asserted.
"""

from __future__ import annotations

import argparse
import gc
import json
import subprocess
import sys
import zlib
from pathlib import Path
from typing import Any

from bench.fabric import Fabric
from bench.size import CONFIG, INTERVAL, T0, Clock, peak_rss_mb, scrape_from_other_process, serve_in_thread
from fabricmon.agent.assemble import build_pipeline
from fabricmon.agent.exporter import metrics
from fabricmon.agent.exporter.exposition import GZIP_LEVEL, build
from fabricmon.agent.exporter.server import Exporter
from fabricmon.agent.gcpause import gc_paused
from fabricmon.agent.pipeline import Pipeline
from fabricmon.collectors.perfquery.parse import PerfqueryState
from fabricmon.collectors.perfquery.parse import parse_payload as parse_perfquery_payload
from fabricmon.core.model import TargetSpec

ROOT = Path(__file__).resolve().parent.parent
SIZES = [10_000, 50_000, 100_000, 200_000]
LEVELS = (1, 3, 6)


def poll(p: Pipeline, fab: Fabric, state: PerfqueryState, k: int) -> PerfqueryState:
    payload: dict[str, Any] = {"perfquery": fab.perfquery_texts(k)}
    if k == 0:
        payload["ibnetdiscover"] = fab.ibnetdiscover
    with gc_paused():
        r, state = parse_perfquery_payload(payload, state)
        t = T0 + INTERVAL * k
        p.store_result("ib", t, r)
    p.clock = t
    p.generation += 1
    return state


def one(ports: int) -> dict[str, Any]:
    fab = Fabric(ports)
    p = build_pipeline(CONFIG, [TargetSpec("ib", "perfquery")])
    state = PerfqueryState()
    for k in range(2):
        state = poll(p, fab, state, k)
    exporter = Exporter(p)
    gc.collect()
    with Clock() as first:
        exporter.render_now()
    state = poll(p, fab, state, 2)
    gc.collect()
    with Clock() as steady:
        expo = exporter.render_now()
    with gc_paused(), Clock() as alone:  # the same render without the web pages render_now also builds
        build(metrics.all_families(p, last_render_s=expo.render_seconds))
    out: dict[str, Any] = {"ports": len(p.store.ports), "series": p.store.series_count(),
                           "first_render_cpu_s": first.cpu, "steady_render_cpu_s": steady.cpu, "steady_render_wall_s": steady.wall,
                           "steady_exposition_cpu_s": alone.cpu}
    body = expo.body
    out["body_bytes"] = {"text": body.nbytes(False), "openmetrics": body.nbytes(True), "held_both_formats": body.held_bytes(),
                         "per_series": body.nbytes(False) / max(1, out["series"])}
    chunks = body.chunks(True)
    gz: dict[str, Any] = {}
    for level in LEVELS:
        with Clock() as c:
            z = zlib.compressobj(level, zlib.DEFLATED, -15)
            n = sum(len(z.compress(ch)) for ch in chunks) + len(z.flush())
        gz[str(level)] = {"cpu_s": c.cpu, "bytes": n}
    gz["chosen_level"] = GZIP_LEVEL
    out["gzip"] = gz
    del chunks
    port, loop, th = serve_in_thread(exporter)
    try:
        out["first_gzip_scrape_s"] = first_gzip_scrape(port)
        out["scrape"] = scrape_from_other_process(port, 4, 3)
    finally:
        loop.call_soon_threadsafe(loop.stop)
        th.join(30)
    out["peak_rss_mb"] = peak_rss_mb()
    del expo, body
    out["prometheus_client"] = prometheus_client_ratio(p)
    return out


def first_gzip_scrape(port: int) -> float:
    """Latency of the first OpenMetrics+gzip scrape after a render: it waits for the body's
    compression (done once per render, on demand), which every later scrape reuses."""
    code = "import bench.scrape as s, sys; print(s.one(int(sys.argv[1]), True)[0])"
    out = subprocess.run([sys.executable, "-c", code, str(port)], cwd=ROOT, capture_output=True, text=True, timeout=600, check=True)
    return float(out.stdout)


class _Prebuilt:
    """A prometheus_client collector that yields families built before the clock started."""

    def __init__(self, families: list[Any]) -> None:
        self.families = families

    def collect(self) -> Any:
        return iter(self.families)


def prometheus_client_ratio(p: Pipeline) -> dict[str, Any]:
    """``generate_latest`` vs our render, on the same fabric series (names, labels, values).

    prometheus_client's metric families are built from the store's bulk read API before its
    clock starts, so only its formatting is timed (the conservative ratio: an exporter that
    built them in ``collect()`` on every scrape would pay that too). Ours is a steady render
    of the fabric families (templates already built, as on every poll) into the body bytes.
    """
    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

    from fabricmon.core.vocabulary import COUNTERS, GAUGES, metric_name

    store = p.store
    totals = store.totals()
    fams: list[Any] = []
    for name, fr in store.family_rows().items():
        d = COUNTERS.get(name)
        if d is None:
            continue
        f = CounterMetricFamily(metric_name(d).removesuffix("_total"), d.help, labels=("device", "port", *d.labels))
        for (pk, sub), v in zip(fr.keys, totals[fr.rows].tolist(), strict=True):
            f.add_metric((*pk, *(str(x) for x in sub)), v)
        fams.append(f)
    gauges: dict[str, Any] = {}
    for pk in sorted(store.ports):
        for (name, sub), g in store.ports[pk].gauges.items():
            gd = GAUGES.get(name)
            if gd is None:
                continue
            f = gauges.get(name)
            if f is None:
                f = gauges[name] = GaugeMetricFamily(metric_name(gd), gd.help, labels=("device", "port", *gd.labels))
            f.add_metric((*pk, *(str(x) for x in sub)), g.value)
    fams.extend(gauges[k] for k in sorted(gauges))

    reg = CollectorRegistry(auto_describe=False)
    reg.register(_Prebuilt(fams))
    with gc_paused(), Clock() as c:
        theirs = generate_latest(reg)
    gl_series = sum(len(f.samples) for f in fams)
    del theirs, fams, gauges, reg
    metrics.fabric_families(p)  # as after every poll: the templates exist
    gc.collect()
    with gc_paused(), Clock() as c2:
        ours = build(metrics.fabric_families(p))
    our_series = sum(ch.count(b"\n") for ch in ours.chunks(False) if not ch.startswith(b"# HELP"))
    return {"generate_latest_cpu_s": c.cpu, "generate_latest_series": gl_series,
            "fabricmon_fabric_render_cpu_s": c2.cpu, "fabricmon_fabric_series": our_series,
            "ratio": c.cpu / c2.cpu if c2.cpu else None}


def row(r: dict[str, Any]) -> dict[str, float]:
    pc, gz, sc = r["prometheus_client"], r["gzip"], r["scrape"]
    return {"ports": r["ports"], "series": r["series"], "first": r["first_render_cpu_s"], "steady": r["steady_render_cpu_s"],
            "glser": pc["generate_latest_series"], "ourser": pc["fabricmon_fabric_series"],
            "gl": pc["generate_latest_cpu_s"], "ours": pc["fabricmon_fabric_render_cpu_s"], "ratio": pc["ratio"] or float("nan"),
            "mb": r["body_bytes"]["text"] / 1e6, "held": r["body_bytes"]["held_both_formats"] / 1e6,
            "bps": r["body_bytes"]["per_series"],
            **{f"gz{lv}_s": gz[str(lv)]["cpu_s"] for lv in LEVELS}, **{f"gz{lv}_mb": gz[str(lv)]["bytes"] / 1e6 for lv in LEVELS},
            "expo": r["steady_exposition_cpu_s"], "gzip_first": r["first_gzip_scrape_s"],
            "plain_p50": sc["plain"]["p50_s"], "gzip_p50": sc["gzip"]["p50_s"], "gzip_max": sc["gzip"]["max_s"], "rss": r["peak_rss_mb"]}


ROWS = [
    ("ports", "fabric ports", "{:,.0f}"), ("series", "counter series", "{:,.0f}"),
    ("first", "first render, builds templates (CPU s)", "{:.2f}"), ("steady", "steady render with web pages (CPU s)", "{:.2f}"),
    ("expo", "steady render, /metrics body alone (CPU s)", "{:.2f}"),
    ("glser", "fabric series, generate_latest", "{:,.0f}"), ("ourser", "fabric series, fabricmon", "{:,.0f}"),
    ("gl", "generate_latest, fabric series (CPU s)", "{:.2f}"), ("ours", "fabricmon, same series (CPU s)", "{:.2f}"),
    ("ratio", "render speed vs generate_latest (x)", "{:.1f}"),
    ("mb", "body, text (MB)", "{:.1f}"), ("held", "held for both formats (MB)", "{:.1f}"), ("bps", "bytes per series", "{:.0f}"),
    *[(f"gz{lv}_s", f"gzip level {lv} (CPU s)", "{:.2f}") for lv in LEVELS],
    *[(f"gz{lv}_mb", f"gzip level {lv} (MB)", "{:.1f}") for lv in LEVELS],
    ("gzip_first", "/metrics first gzip scrape, compresses (s)", "{:.3f}"),
    ("plain_p50", "/metrics p50, plain, alone (s)", "{:.3f}"), ("gzip_p50", "/metrics p50, OpenMetrics+gzip, 4 concurrent (s)", "{:.3f}"),
    ("gzip_max", "/metrics max, gzip (s)", "{:.3f}"), ("rss", "peak RSS (MB)", "{:,.0f}"),
]


def table(rows: list[dict[str, float]]) -> str:
    w = max(len(r[1]) for r in ROWS)
    lines = [f"{'':<{w}}  " + "  ".join(f"{int(r['ports']):>12,}" for r in rows)]
    lines.append("-" * len(lines[0]))
    lines += [f"{label:<{w}}  " + "  ".join(f"{fmt.format(r[key]):>12}" for r in rows) for key, label, fmt in ROWS]
    return "\n".join(lines)


def run(sizes: list[int]) -> dict[str, Any]:
    """Each size in its own process; a size that fails is reported, the others still run."""
    results: dict[str, Any] = {}
    for n in sizes:
        print(f"[bench] render stage, {n:,} ports ...", file=sys.stderr, flush=True)
        proc = subprocess.run([sys.executable, "-m", "bench.render", "--one", str(n)], cwd=ROOT,
                              capture_output=True, text=True, timeout=1800)
        results[str(n)] = json.loads(proc.stdout) if proc.returncode == 0 else {"error": proc.stderr[-3000:]}
    return results


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.render", description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", type=lambda v: [int(x) for x in v.split(",")], default=SIZES)
    ap.add_argument("--one", type=int, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--out", default=None, help="JSON output path")
    a = ap.parse_args(argv)
    if a.one is not None:
        json.dump(one(a.one), sys.stdout)
        return 0
    results = run(a.sizes)
    ok = [row(r) for r in results.values() if "error" not in r]
    for n, r in results.items():
        if "error" in r:
            print(f"size {n} failed:\n{r['error']}")
    if ok:
        print(table(ok))
    if a.out:
        Path(a.out).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
