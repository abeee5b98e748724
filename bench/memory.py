"""Where the agent's memory goes at one fabric size: tracemalloc, by component.

    python -m bench.memory                 # 100,000 ports
    python -m bench.memory --ports 21363   # any size (the fabric of bench/fabric.py)

In a process of its own (so the interpreter and its libraries are the only other tenants),
another process writes the payloads (bench/fabric.py), then the agent path runs three polls of
a perfquery target as bench/size.py does, under tracemalloc (numpy reports its buffers to it).
After the third poll every allocation still held is put under the component whose code made
it (the innermost frame in fabricmon's code, matched by module and function: ``RULES``), and
each stage's peak above what was held before it is reported. The resident set size is read
at the same moments; what it holds beyond the traced bytes is the interpreter, its libraries,
and memory freed but not yet returned to the system.
"""

from __future__ import annotations

import argparse
import ast
import functools
import gc
import json
import resource
import sys
import tempfile
import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bench.size import CONFIG, INTERVAL, T0, Payloads, rss_mb
from fabricmon.agent.assemble import build_pipeline
from fabricmon.agent.exporter.server import Exporter
from fabricmon.agent.gcpause import gc_paused
from fabricmon.collectors.perfquery import PerfqueryCollector
from fabricmon.core.model import TargetSpec

ROOT = Path(__file__).resolve().parent.parent
# (file under the repository, function name prefix or "" for any) -> component; first match wins.
RULES: list[tuple[str, str, str]] = [
    ("agent/store.py", "_Table", "store: series table (numpy rows)"),
    ("agent/store.py", "_GaugeTable", "store: gauge table"),
    ("agent/store.py", "_Times", "store: poll times"),
    ("agent/store.py", "_PortColumns", "store: port columns"),
    ("agent/store.py", "PortEntry.view", "store: series views the detector holds"),
    ("agent/store.py", "CounterStore._families_of", "store: exposition order (family rows)"),
    ("agent/store.py", "CounterStore.port_order", "store: exposition order (family rows)"),
    ("agent/store.py", "CounterStore._note_moved", "store: change sets for the detector"),
    ("agent/store.py", "CounterStore._", "store: ports, row plans and the rest"),
    ("agent/store.py", "", "store: ports, row plans and the rest"),
    ("agent/exporter/exposition.py", "encoded", "exposition: fabricmon_port_info lines"),  # the one block cached as bytes
    ("agent/exporter/exposition.py", "build", "exposition: the body (both formats)"),
    ("agent/exporter/exposition.py", "_encoded", "exposition: the body (both formats)"),
    ("agent/exporter/exposition.py", "", "exposition: templates"),
    ("agent/exporter/metrics.py", "_RenderCache.template", "exposition: templates"),
    ("agent/exporter/metrics.py", "_cache_for", "exposition: port label blocks"),
    ("agent/exporter/metrics.py", "topology_families", "exposition: fabricmon_port_info lines"),
    ("agent/detector/families.py", "", "exposition: the rules' per-port label blocks"),
    ("agent/exporter/", "", "exposition: other"),
    ("collectors/perfquery/bulk.py", "", "perfquery state: counter layout"),
    ("collectors/textlayout.py", "", "perfquery state: text layout"),
    ("collectors/perfquery/parse.py", "_topology_facts", "perfquery state: devices, port infos, link gauges"),
    ("collectors/perfquery/parse.py", "", "perfquery state: ibnetdiscover topology"),
    ("agent/core/guid.py", "", "perfquery state: ibnetdiscover topology"),
    ("collectors/infiniband.py", "", "perfquery state: ibnetdiscover topology"),
    ("agent/detector/", "", "detector (its analyses, caches and rules)"),
    ("agent/core/topology.py", "", "pipeline: cables (topology)"),
    ("agent/", "", "agent: other"),
    ("collectors/", "", "collectors: other"),
]


@functools.cache
def _functions(path: str) -> list[tuple[int, int, str]]:
    """(first line, last line, qualified name) of every function in a source file."""
    try:
        tree = ast.parse(Path(path).read_text())
    except (OSError, SyntaxError):
        return []
    out: list[tuple[int, int, str]] = []

    def walk(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                name = f"{prefix}{child.name}"
                if not isinstance(child, ast.ClassDef):
                    out.append((child.lineno, child.end_lineno or child.lineno, name))
                walk(child, name + ".")

    walk(tree, "")
    return out


@functools.cache
def _component(filename: str, lineno: int) -> str | None:
    try:
        rel = str(Path(filename).resolve().relative_to(ROOT))
    except ValueError:
        return None
    inner = [name for a, b, name in _functions(filename) if a <= lineno <= b]
    func = max(inner, key=len) if inner else ""
    for path, prefix, component in RULES:
        if rel.startswith(path) and func.startswith(prefix):
            return component
    return None


def _classify(snapshot: tracemalloc.Snapshot) -> dict[str, float]:
    """Bytes held by component (MB): each allocation under its innermost fabricmon frame."""
    out: dict[str, float] = {}
    for trace in snapshot.traces:
        component = "other (outside fabricmon's code)"
        for frame in reversed(trace.traceback):  # tracemalloc lists the oldest frame first
            got = _component(frame.filename, frame.lineno)
            if got is not None:
                component = got
                break
        out[component] = out.get(component, 0.0) + trace.size / 2**20
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))


def _polls(run: Payloads, polls: int) -> Iterator[tuple[int, dict[str, Any]]]:
    for k in range(polls):
        payload: dict[str, Any] = {"perfquery": run.poll(k)}
        if k == 0:
            payload["ibnetdiscover"] = run.ibnetdiscover
        yield k, payload


def measure(ports: int, polls: int = 3) -> dict[str, Any]:
    out: dict[str, Any] = {"ports": ports}
    with tempfile.TemporaryDirectory(prefix="fabricmon-bench-memory-") as tmp:
        run = Payloads(Path(tmp), ports, polls, False, 0)
        out["fabric_ports"] = run.info["fabric_ports"]
        gc.collect()
        out["rss_before_agent_mb"] = rss_mb()
        tracemalloc.start(12)
        spec = TargetSpec("ib", "perfquery")
        p = build_pipeline(CONFIG, [spec])
        exporter = Exporter(p)
        state = PerfqueryCollector.new_state()
        stages: list[dict[str, Any]] = []
        for k, payload in _polls(run, polls):
            t = T0 + INTERVAL * k
            row: dict[str, Any] = {"poll": k, "payload_mb": sum(map(len, payload["perfquery"])) / 2**20}
            for stage in ("parse", "store", "detect", "render"):
                tracemalloc.reset_peak()
                held = tracemalloc.get_traced_memory()[0]
                with gc_paused():
                    if stage == "parse":
                        result, state = PerfqueryCollector.parse_poll(payload, spec, state)
                        del payload
                    elif stage == "store":
                        p.store_result("ib", t, result)
                        del result
                        p.clock, p.generation = t, p.generation + 1
                    elif stage == "detect":
                        p.detect(t)
                    else:
                        exporter.render_now()
                current, peak = tracemalloc.get_traced_memory()
                row[stage] = {"held_before_mb": held / 2**20, "peak_above_mb": (peak - held) / 2**20,
                              "held_after_mb": current / 2**20, "rss_mb": rss_mb()}
            gc.collect()
            stages.append(row)
        out["stages"] = stages
        snapshot = tracemalloc.take_snapshot()
        out["traced_mb"] = tracemalloc.get_traced_memory()[0] / 2**20
        tracemalloc.stop()
        out["components_mb"] = _classify(snapshot)
        out["rss_after_mb"] = rss_mb()
        out["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        out["series"] = p.store.series_count()
    return out


def table(r: dict[str, Any]) -> str:
    lines = [f"Memory at {r['fabric_ports']:,} ports ({r['series']:,} counter series), after {len(r['stages'])} polls "
             f"(tracemalloc; bench/memory.py):"]
    for name, mb in r["components_mb"].items():
        lines.append(f"  {name:<52} {mb:8.1f} MB")
    lines.append(f"  {'traced in all':<52} {r['traced_mb']:8.1f} MB")
    lines.append(f"  {'interpreter and libraries (RSS before the agent)':<52} {r['rss_before_agent_mb']:8.1f} MB")
    lines.append(f"  {'resident set size now / peak':<52} {r['rss_after_mb']:8.1f} / {r['peak_rss_mb']:.1f} MB")
    last = r["stages"][-1]
    lines.append(f"  a steady poll's peaks above what is held (payload {last['payload_mb']:.1f} MB held meanwhile): " +
                 ", ".join(f"{s} +{last[s]['peak_above_mb']:.0f} MB" for s in ("parse", "store", "detect", "render")))
    first = r["stages"][0]
    lines.append("  the first poll's (line-by-line parse, every series created, first render): " +
                 ", ".join(f"{s} +{first[s]['peak_above_mb']:.0f} MB" for s in ("parse", "store", "detect", "render")))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.memory", description=__doc__.split("\n\n")[0])
    ap.add_argument("--ports", type=int, default=100_000)
    ap.add_argument("--json", action="store_true", help="print the figures as JSON instead of the table")
    a = ap.parse_args(argv)
    r = measure(a.ports)
    print(json.dumps(r) if a.json else table(r))
    return 0


if __name__ == "__main__":
    sys.exit(main())
