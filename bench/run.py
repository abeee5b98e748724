"""fabricmon scale benchmark: one command, a table on stdout, every figure in JSON.

    python -m bench                  # 10k, 50k, 100k and 200k ports + SNMP comparison (64 switches)
    python -m bench --quick          # 10k and 50k ports, 2 polls, SNMP on 16 switches
    python -m bench --sizes 100000 --snmp-switches 0 --out /tmp/b.json
    python -m bench.render           # the render stage alone, 10k-200k ports (also part of python -m bench)
    python -m bench --store-sizes 0  # without the counter store stage (old vs new store)
    python -m bench.loop_stall 100000  # the longest event-loop stall of the live design at one size

Each fabric size runs in its own process (bench/size.py) so its peak RSS is its own. The
targets of the scale issue (``TARGETS``, ``SELENE_TARGETS``, ``DETECT_ROCE_LIMIT_S``) are
checked on the size each names and printed as met / GAP, each with the figures of the same
run that make it up; the SNMP comparison and the event-loop stage print their own target lines.
Besides the InfiniBand sizes, a RoCE fabric of 100,000 ports where pause moves on every port
measures the Ethernet side of detection (bench/detect_roce.py; not with --quick).
Benchmarks print figures; they are not tests and nothing here fails on a slow machine.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench import render as render_stage
from bench import store_stage

ROOT = Path(__file__).resolve().parent.parent
INTERVAL = 10.0
SELENE_PORTS = 25_704  # every cabled port of the Selene file: with --switch-ports, its 21,363 switch ports
# The targets of issue 29 ("Scale, second pass"), checked on one fabric size each:
# name: (ports it is judged at, limit, unit, higher is better).
TARGETS = {
    "cycle_cores": (100_000, 0.25, "cores", False),
    "peak_rss_mb": (100_000, 1024.0, "MB", False),
    "cycle_cores@200k": (200_000, 0.5, "cores", False),
    "render_vs_generate_latest": (100_000, 30.0, "x", True),
    "scrape_plain_p50_s": (100_000, 0.3, "s", False),
    "scrape_p50_s": (100_000, 0.1, "s", False),
    "detect_s": (100_000, 0.2, "s", False),
    "detect_congested_s": (100_000, 0.2, "s", False),
}


def run_size(ports: int, polls: int, *extra: str) -> dict[str, Any]:
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "bench.size", str(ports), "--polls", str(polls), *extra], cwd=ROOT,
                          capture_output=True, text=True, timeout=1800)
    if proc.returncode != 0:
        return {"error": proc.stderr[-3000:], "requested_ports": ports}
    out = json.loads(proc.stdout)
    out["bench_wall_s"] = time.perf_counter() - t0
    return out


# The real Selene fabric (switch ports, as the perfquery collector polls it): name: (limit, unit).
SELENE_TARGETS = {"selene_cpu_s_per_poll": (0.4, "CPU s"), "selene_peak_rss_mb": (300.0, "MB")}
# Detection on a RoCE fabric where pause moves on every port (bench/detect_roce.py), judged
# against the same per-pass limit as the InfiniBand fabric's detection.
DETECT_ROCE_LIMIT_S = 0.2
DETECT_ROCE_PORTS = 100_000


def run_stage(module: str, ports: int, polls: int) -> dict[str, Any]:
    """``python -m bench.<module> PORTS --polls N`` in a process of its own: its JSON, or why not."""
    proc = subprocess.run([sys.executable, "-m", f"bench.{module}", str(ports), "--polls", str(polls)], cwd=ROOT,
                          capture_output=True, text=True, timeout=3600)
    if proc.returncode != 0:
        return {"error": proc.stderr[-3000:], "ports": ports}
    return json.loads(proc.stdout)


# Issue 29 item 4: the longest event-loop stall, first render included, at any size.
LOOP_STALL_TARGET_S = 0.1


def run_loop_stall(ports: int, polls: int) -> dict[str, Any]:
    """bench/loop_stall.py at one size, in its own process (the live agent's worker design)."""
    out = run_stage("loop_stall", ports, polls)
    return out if "error" in out else {**out, "loadavg": os.getloadavg()}


def loop_stall_table(rows: list[dict[str, Any]]) -> str:
    lines = [f"Event-loop stall, live design (bench/loop_stall.py; target {LOOP_STALL_TARGET_S:g} s at any size):"]
    for r in rows:
        if "error" in r:
            lines.append(f"  {r['ports']:>9,} ports: failed: {r['error'][-300:]}")
            continue
        h = r["healthz"]
        met = "met" if r["loop_lag_max_s"] <= LOOP_STALL_TARGET_S else "GAP"
        lines.append(f"  {met:<4}{r['ports']:>9,} ports: longest stall {r['loop_lag_max_s']:.3f} s "
                     f"({r['loop_lag_over_0_1_s']} of {r['loop_lag_samples']} wake-ups over 0.1 s); /healthz max {h['max_s']:.3f} s "
                     f"({h['ok']}/{h['n']} ok); first render {r['first_render_wall_s']:.1f} s on the worker; "
                     f"load {' '.join(f'{x:.1f}' for x in r['loadavg'])}")
        lines.extend(f"        {_stall_cause(c)}" for c in r.get("stall_causes", [])[:3])
    return "\n".join(lines)


def _stall_cause(c: dict[str, Any]) -> str:
    """One stall's measured cause (bench/loop_stall.py measures both threads over its window
    and times the loop's callbacks). The loop thread off the CPU while the worker ran is the
    GIL: either the loop sat in one of its own callbacks, waiting for the GIL back after each
    system call (the convoy effect), or in its selector while one C call of the worker held it."""
    if "window_s" not in c:
        return f"{c['lag_s']:.3f} s: the thread sampler has no rows around it; worker at {c['line']}"
    if c["worker_cpu_s"] < 0.8 * c["window_s"] or c["loop_cpu_s"] > 0.2 * c["window_s"]:
        what = "not the GIL alone"
    elif c["loop_callback_s"] >= 0.5 * c["lag_s"]:
        what = f"the loop's own callback {c['loop_callback']} ran {c['loop_callback_s']:.3f} s, off the CPU, waiting for the GIL after its system calls"
    else:
        what = "the loop waited for the GIL while one C call of the worker held it"
    return (f"{c['lag_s']:.3f} s: {what} (worker on a CPU {c['worker_cpu_s']:.3f} s of {c['window_s']:.3f}, "
            f"waiting for one {c['worker_cpu_wait_s']:.3f} s, {c['worker_page_faults']:,} page faults; loop thread "
            f"{c['loop_cpu_s']:.3f} s; worker at {c['line']})")


def run_snmp(switches: int) -> dict[str, Any]:
    """The SNMP comparison, or why it could not run: a missing tool skips this stage only."""
    from tests.snmpsim_util import SNMPSIM

    if SNMPSIM is None:
        why = "snmpsim-command-responder is not installed (pip install -e '.[test]')"
        print(f"[bench] SNMP comparison skipped: {why}", file=sys.stderr, flush=True)
        return {"skipped": why}
    print(f"[bench] SNMP: fabricmon vs prometheus-snmp-exporter on {switches} switches ...", file=sys.stderr, flush=True)
    from bench import snmp_compare

    try:
        return snmp_compare.run(switches)
    except Exception as exc:  # a broken simulator or exporter: report, keep the sizes already measured
        return {"error": f"{type(exc).__name__}: {exc}"}


def summary(r: dict[str, Any]) -> dict[str, Any]:
    a, pc = r["agent"], r["prometheus_client"]
    s = a["steady_poll_cpu_s"]
    return {
        "why": causes(r),
        "ports": r["fabric_ports"], "series_full": a["exposition_full"]["series"], "series_health": a["exposition_health"]["series"],
        "parse_perfquery_vps": r["parse"]["perfquery"]["values_per_s"] if "parse" in r else float("nan"),
        "parse_ufm_csv_vps": r["parse"]["ufm-telemetry-csv"]["values_per_s"] if "parse" in r else float("nan"),
        "parse_ufm_prom_vps": r["parse"]["ufm-telemetry-prometheus"]["values_per_s"] if "parse" in r else float("nan"),
        "parse_s": s["parse"], "store_s": s["store"], "detect_s": s["detect"], "render_s": s["render"],
        "render_health_s": a["exposition_health"]["render_cpu_s"],
        "body_mb": a["exposition_full"]["bytes"] / 1e6, "gzip_mb": a["exposition_full"]["gzip_bytes"] / 1e6,
        "scrape_p50_s": a["scrape"]["gzip"]["p50_s"], "scrape_max_s": a["scrape"]["gzip"]["max_s"],
        "scrape_plain_p50_s": a["scrape"]["plain"]["p50_s"],
        "cycle_cores": a["cycle_cpu_s"] / INTERVAL, "peak_rss_mb": a["peak_rss_mb_full"],
        "detect_congested_s": max(a["congested"]["detect_cpu_s"]),
        "congested_findings": sum(a["congested"]["active_findings"].values()),
        "render_vs_generate_latest": pc["ratio"] or float("nan"),
        "generate_latest_s": pc["generate_latest_cpu_s"], "fabric_render_s": pc["fabricmon_fabric_render_cpu_s"],
    }


def causes(r: dict[str, Any]) -> dict[str, str]:
    """Per target, the figures of the same run that make it up: what to look at when it is a gap."""
    a, pc = r["agent"], r["prometheus_client"]
    s, rss, full = a["steady_poll_cpu_s"], a["rss_mb"], a["exposition_full"]
    stages = {"parse": s["parse"], "store": s["store"], "detection": s["detect"], "render": s["render"], "gzip": full["gzip_cpu_s"]}
    top = max(stages, key=stages.__getitem__)
    cycle = ", ".join(f"{k} {v:.2f}" for k, v in stages.items()) + f" CPU s; largest: {top}"
    detect = f"a pass over {r['fabric_ports']:,} ports ({', '.join(a['rules'])})"
    return {
        "cycle_cores": cycle,
        "peak_rss_mb": (f"RSS {rss['before_agent']:.0f} MB before the agent, {rss['store_filled']:.0f} once the store is "
                        f"filled, {rss['after_scrapes']:.0f} after the scrapes; exposition held {full['held_mb']:.0f} MB"),
        "render_vs_generate_latest": (f"render {pc['fabricmon_fabric_render_cpu_s']:.2f} CPU s vs generate_latest "
                                      f"{pc['generate_latest_cpu_s']:.2f} on the same series"),
        "scrape_plain_p50_s": f"a {full['bytes'] / 1e6:.0f} MB text body to a client in another process (read into a reused buffer)",
        "scrape_p50_s": f"a {full['gzip_bytes'] / 1e6:.1f} MB gzip body, 4 clients at once",
        "detect_s": detect,
        "detect_congested_s": (f"{detect}, {sum(a['congested']['active_findings'].values())} findings active; worst pass, CPU s by stage: "
                               + ", ".join(f"{n} {c:.3f}" for n, c in list(a["congested"].get("by_stage_worst_pass", {}).items())[:4])),
    }


ROWS = [
    ("ports", "fabric ports", "{:,.0f}"),
    ("series_full", "series at level full", "{:,.0f}"),
    ("series_health", "series at level health", "{:,.0f}"),
    ("parse_perfquery_vps", "parse perfquery (values/s)", "{:,.0f}"),
    ("parse_ufm_csv_vps", "parse UFM Telemetry CSV (values/s)", "{:,.0f}"),
    ("parse_ufm_prom_vps", "parse UFM Telemetry Prometheus (values/s)", "{:,.0f}"),
    ("parse_s", "parse one poll, perfquery (CPU s)", "{:.2f}"),
    ("store_s", "store update one poll (CPU s)", "{:.2f}"),
    ("detect_s", "detection pass, all ports (CPU s)", "{:.2f}"),
    ("detect_congested_s", "detection pass, 1 % of ports congested (CPU s, max)", "{:.2f}"),
    ("congested_findings", "findings active then", "{:,.0f}"),
    ("render_s", "exposition render, full (CPU s)", "{:.2f}"),
    ("render_health_s", "exposition render, health (CPU s)", "{:.2f}"),
    ("body_mb", "exposition size, text (MB)", "{:.1f}"),
    ("gzip_mb", "exposition size, gzip (MB)", "{:.1f}"),
    ("scrape_p50_s", "/metrics p50, OpenMetrics+gzip, 4 concurrent (s)", "{:.3f}"),
    ("scrape_max_s", "/metrics max, gzip, 4 concurrent (s)", "{:.3f}"),
    ("scrape_plain_p50_s", "/metrics p50, plain text, alone (s)", "{:.3f}"),
    ("cycle_cores", "cost per 10 s poll cycle (cores)", "{:.2f}"),
    ("peak_rss_mb", "peak RSS (MB)", "{:,.0f}"),
    ("generate_latest_s", "prometheus_client generate_latest (CPU s)", "{:.2f}"),
    ("fabric_render_s", "fabricmon render, same series (CPU s)", "{:.2f}"),
    ("render_vs_generate_latest", "render speed vs generate_latest (x)", "{:.1f}"),
]


def table(sums: list[dict[str, Any]]) -> str:
    w = max(len(r[1]) for r in ROWS)
    head = f"{'':<{w}}  " + "  ".join(f"{int(s['ports']):>12,}" for s in sums)
    lines = [head, "-" * len(head)]
    for key, label, fmt in ROWS:
        lines.append(f"{label:<{w}}  " + "  ".join(f"{fmt.format(s[key]):>12}" for s in sums))
    return "\n".join(lines)


def verdicts(sums: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each target on the size it is judged at (skipped when that size was not run)."""
    by_ports = {int(s["ports"]): s for s in sums}
    out = []
    for name, (ports, limit, unit, higher) in TARGETS.items():
        s = by_ports.get(ports)
        if s is None:
            continue
        key = name.split("@")[0]
        v = s[key]
        met = v >= limit if higher else v <= limit
        out.append({"target": name, "ports": ports, "value": v, "limit": limit, "unit": unit, "met": bool(met),
                    "why": s["why"].get(key, "")})
    return out


def selene_verdicts(sel: dict[str, Any]) -> list[dict[str, Any]]:
    """The Selene targets (``SELENE_TARGETS``) on the real fabric's run."""
    a = sel["agent"]
    values = {"selene_cpu_s_per_poll": a["cycle_cpu_s"], "selene_peak_rss_mb": a["peak_rss_mb_full"]}
    why = causes(sel)
    whys = {"selene_cpu_s_per_poll": why["cycle_cores"], "selene_peak_rss_mb": why["peak_rss_mb"]}
    return [{"target": name, "ports": sel["fabric_ports"], "value": values[name], "limit": limit, "unit": unit,
             "met": bool(values[name] <= limit), "why": whys[name]} for name, (limit, unit) in SELENE_TARGETS.items()]


def detect_roce_verdict(r: dict[str, Any]) -> dict[str, Any]:
    """Detection on the RoCE fabric (bench/detect_roce.py) against the detection target."""
    v = max(r["detect_cpu_s"])
    top = ", ".join(f"{k} {c:.2f}" for k, c in list(r["by_stage_worst_pass"].items())[:4])
    return {"target": "detect_roce_s", "ports": r["ports"], "value": v, "limit": DETECT_ROCE_LIMIT_S, "unit": "s",
            "met": bool(v <= DETECT_ROCE_LIMIT_S), "why": f"CPU s by stage, worst pass: {top}; {r['findings']} findings"}


def print_verdict(v: dict[str, Any]) -> None:
    print(f"  {'met ' if v['met'] else 'GAP '} {v['target']:<28} {v['ports']:>8,} ports {v['value']:>10.3f} {v['unit']:<5} "
          f"(limit {v['limit']})\n        {v['why']}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="10k and 50k ports, 2 polls, SNMP on 16 switches")
    ap.add_argument("--sizes", type=lambda v: [int(x) for x in v.split(",")], default=None, help="comma-separated port counts")
    ap.add_argument("--polls", type=int, default=None, help="polls per size (the first is warm-up)")
    ap.add_argument("--snmp-switches", type=int, default=None, help="switches in the SNMP comparison (0: skip)")
    ap.add_argument("--store-sizes", type=lambda v: [int(x) for x in v.split(",") if int(x)], default=None,
                    help="port counts of the counter store stage, old vs new store (0: skip; bench/store_stage.py)")
    ap.add_argument("--no-render", action="store_true", help="skip the render stage (bench/render.py)")
    ap.add_argument("--no-loop-stall", action="store_true", help="skip the event-loop stall stage (bench/loop_stall.py)")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results.json"), help="JSON output path")
    a = ap.parse_args(argv)
    sizes = a.sizes or ([10_000, 50_000] if a.quick else [10_000, 50_000, 100_000, 200_000])
    polls = a.polls or (2 if a.quick else 3)
    snmp_n = a.snmp_switches if a.snmp_switches is not None else (16 if a.quick else 64)
    results: dict[str, Any] = {"machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                                           "loadavg_start": os.getloadavg()}, "sizes": {}}
    out_path = Path(a.out)

    def save() -> None:  # after every stage: a later stage that fails never loses what was measured
        out_path.write_text(json.dumps(results, indent=1))

    for n in sizes:
        print(f"[bench] {n:,} ports ...", file=sys.stderr, flush=True)
        results["sizes"][str(n)] = run_size(n, polls)
        save()
    # The real Selene compute fabric, unscaled, as the perfquery collector polls it (switch ports).
    print("[bench] Selene, switch ports ...", file=sys.stderr, flush=True)
    results["selene"] = run_size(SELENE_PORTS, polls, "--switch-ports")
    save()
    if not a.quick:  # the Ethernet side of detection (pfc analysis, misconfig checklist)
        print("[bench] detection on a RoCE fabric ...", file=sys.stderr, flush=True)
        results["detect_roce"] = run_stage("detect_roce", DETECT_ROCE_PORTS, polls)
        save()
    if not a.no_loop_stall:  # the live design: pipeline worker, server, loop-lag monitor
        results["loop_stall"] = [run_loop_stall(n, polls) for n in sizes]
        save()
    if not a.no_render:  # the exposition alone: templates vs generate_latest, gzip levels, scrapes
        results["render"] = render_stage.run(a.sizes or (sizes if a.quick else render_stage.SIZES))  # 10k-200k ports
        save()
    if snmp_n > 0:
        results["snmp"] = run_snmp(snmp_n)
        save()
    store_sizes = a.store_sizes if a.store_sizes is not None else ([10_000, 50_000] if a.quick else store_stage.SIZES)
    if store_sizes:
        results["store"] = store_stage.run(store_sizes, polls)
        save()
    results["machine"]["loadavg_end"] = os.getloadavg()
    ok = [r for r in results["sizes"].values() if "error" not in r]
    sums = [summary(r) for r in ok]
    for n, r in results["sizes"].items():
        if "error" in r:
            print(f"size {n} failed:\n{r['error']}")
    if sums:
        print(table(sums))
        results["targets"] = verdicts(sums)
        print(f"\nTargets (poll interval {INTERVAL:.0f} s; each at the size it names):" if results["targets"] else
              "\nTargets: none judged (they are judged at 100,000 and 200,000 ports)")
        for v in results["targets"]:
            print_verdict(v)
    sel = results.get("selene", {})
    if "agent" in sel:
        print(f"\nSelene compute fabric, switch ports only ({sel['fabric_ports']:,} ports, perfquery -x, a 10 s poll):")
        results["selene_targets"] = selene_verdicts(sel)
        for v in results["selene_targets"]:
            print_verdict(v)
    elif sel:
        print(f"\nSelene run failed:\n{sel.get('error')}")
    roce = results.get("detect_roce")
    if roce and "error" not in roce:
        print("\nDetection on a RoCE fabric, pause moving on every port (bench/detect_roce.py):")
        results["detect_roce_target"] = detect_roce_verdict(roce)
        print_verdict(results["detect_roce_target"])
    elif roce:
        print(f"\nRoCE detection run failed:\n{roce['error'][-1000:]}")
    if results.get("loop_stall"):
        print("\n" + loop_stall_table(results["loop_stall"]))
    rendered = [render_stage.row(r) for r in results.get("render", {}).values() if "error" not in r]
    if rendered:
        print("\nRender stage (bench/render.py):\n" + render_stage.table(rendered))
    snmp = results.get("snmp")
    if snmp and "fabricmon" in snmp:
        from bench import snmp_compare

        print("\n" + snmp_compare.table(snmp))
    elif snmp:
        print(f"\nSNMP comparison: {snmp.get('skipped') or snmp.get('error')}")
    if results.get("store"):
        print("\n" + store_stage.table(results["store"]))
    save()
    print(f"\nJSON: {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
