"""Dashboards and rules against a REAL Prometheus scraping real `fabricmon replay --serve` agents.

One Prometheus (1 s scrape and rule evaluation, alerts.yml + rules.yml loaded) scrapes one
paced replay per scenario of tests/scenarios, all at once, each target labelled with its
scenario and exposition level: every scenario at the full level, and those of the panels
recommended for the health level (``dashboards.build.PANEL_LEVELS``, the level the README
recommends at scale) a second time at that level (``replay --serve`` with ``exposition: {level:
health}``, as a live agent would serve). Then, through the HTTP API:

* every dashboard query and every rule expression parses and evaluates without error;
* every panel returns data, restricted to the series of the scenario it is meant for
  (``dashboards.build.PANEL_SCENARIOS``), over the replay window, at each level it is
  recommended for; every recording rule has data at both levels (but the one said full-only);
* the alert of each injected fault kind (truth lines of the recording) goes pending or firing
  for that scenario, and no fabric alert fires in the benign one.

Replayed counters are served without timestamps, so Prometheus stamps them at scrape time;
the recordings' own clock is in the past, so staleness looks huge here (FabricmonTargetStale
is covered by the promtool unit tests instead).
"""

from __future__ import annotations

import gzip
import json
import re
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest
import yaml

from tests.conftest import free_port
from tests.prometheus_util import PrometheusServer, have_prometheus

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    build = pytest.importorskip("dashboards.build", reason="pip install 'grafana-foundation-sdk~=0.0.21'")

ROOT = Path(__file__).resolve().parent.parent
DASH = ROOT / "dashboards"
SCEN_DIR = ROOT / "tests" / "scenarios"
BENIGN = "benign_heavy_load"
SPEED = 15  # a 30-poll, 10 s-interval recording replays in 20 s
# Finding kind injected by a scenario -> the alert that must go pending or firing for it.
KIND_ALERT = {
    "pfc_storm": "FabricmonPfcStorm",
    "pfc_deadlock": "FabricmonPfcDeadlock",
    "credit_deadlock": "FabricmonCreditDeadlock",
    "packet_loss": "FabricmonPacketLoss",
}
ALERT_SCENARIOS = ["nic_pause_storm_arista", "switch_storm_watchdog", "pfc_deadlock", "lossless_drops_arista", "ib_credit_loop"]
LEVELS = ("full", "health")
# The one recording rule the health level cannot feed (rules.yml says why).
FULL_ONLY_RULES = {"device_port_priority:fabricmon_pfc_transmit_pause:ratio_rate1m"}

pytestmark = [
    pytest.mark.prometheus,
    pytest.mark.skipif(not have_prometheus(), reason="prometheus not installed (Debian package prometheus)"),
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
]


def scenario_file(name: str) -> Path:
    return SCEN_DIR / f"{name}.jsonl.gz"


def truth_kinds(name: str) -> set[str]:
    with gzip.open(scenario_file(name), "rt") as f:
        return {json.loads(line)["kind"] for line in f if '"type":"truth"' in line.replace(" ", "")}


def fabric_alerts() -> list[str]:
    groups = yaml.safe_load((DASH / "prometheus" / "alerts.yml").read_text())["groups"]
    return [r["alert"] for g in groups if g["name"] == "fabricmon.fabric" for r in g["rules"]]


LABEL_LISTS = {"by", "without", "on", "ignoring", "group_left", "group_right"}
KEYWORDS = {"and", "or", "unless", "bool", "offset", "inf", "nan", "sum", "min", "max", "avg", "count", "group", "stddev", "stdvar",
            "topk", "bottomk", "quantile", "count_values"}


def _brace_end(expr: str, j: int) -> int:
    """Index of the ``}`` closing the matcher list opened at ``expr[j]``, skipping quoted strings."""
    quoted = False
    k = j + 1
    while k < len(expr):
        c = expr[k]
        if quoted and c == "\\":
            k += 2
            continue
        if c == '"':
            quoted = not quoted
        elif c == "}" and not quoted:
            return k
        k += 1
    raise ValueError(f"unclosed {{ in {expr}")


def scope(expr: str, label: str, value: str) -> str:
    """Add ``label="value"`` to every series selector of a PromQL expression."""
    out: list[str] = []
    i, n = 0, len(expr)
    matcher = f'{label}="{value}"'
    while i < n:
        c = expr[i]
        if c == '"':
            j = i + 1
            while expr[j] != '"':
                j += 2 if expr[j] == "\\" else 1
            out.append(expr[i:j + 1])
            i = j + 1
            continue
        if c == "[":
            j = expr.index("]", i)
            out.append(expr[i:j + 1])
            i = j + 1
            continue
        m = re.match(r"[a-zA-Z_:][a-zA-Z0-9_:]*", expr[i:]) if (i == 0 or not re.match(r"[\w.$]", expr[i - 1])) else None
        if not m:
            out.append(c)
            i += 1
            continue
        word = m.group()
        j = i + len(word)
        rest = expr[j:].lstrip()
        if word in LABEL_LISTS and rest.startswith("("):
            k = expr.index(")", j)
            out.append(expr[i:k + 1])
            i = k + 1
        elif rest.startswith("(") or word.lower() in KEYWORDS:
            out.append(word)
            i = j
        elif expr[j:].startswith("{"):
            k = _brace_end(expr, j)
            inner = expr[j + 1:k].strip()
            out.append(f"{word}{{{matcher}{', ' + inner if inner else ''}}}")
            i = k + 1
        else:
            out.append(f"{word}{{{matcher}}}")
            i = j
    return "".join(out)


def test_scope() -> None:
    e = 'sum by (device) (rate(a_total{x="}"}[1m])) / on (instance) group_left (p) b_info > bool 1e-12 or vector(0)'
    assert scope(e, "s", "v") == ('sum by (device) (rate(a_total{s="v", x="}"}[1m])) / on (instance) group_left (p) b_info{s="v"} '
                                  "> bool 1e-12 or vector(0)")


def substitute(expr: str, window_s: int) -> str:
    """Grafana's variables as Grafana would expand them for a 1 s scrape and this window."""
    for var, val in (("$__rate_interval", "5s"), ("$__interval", "1s"), ("$__range_s", str(window_s)),
                     ("$__range", f"{window_s}s"), ("$datasource", "fabricmon-prometheus")):
        expr = expr.replace(var, val)
    return re.sub(r'=~"\$(device|port|target)"', '=~".*"', expr)


def _needed_runs() -> list[tuple[str, str]]:
    """(scenario, level) of every replay the panels and alerts need."""
    build.render_all()
    runs = {(s, "full") for s in build.PANEL_SCENARIOS.values() if s} | {(s, "full") for s in (*ALERT_SCENARIOS, BENIGN)}
    runs |= {(s, "health") for k, s in build.PANEL_SCENARIOS.items() if s and "health" in build.PANEL_LEVELS[k]}
    return sorted(runs)


@pytest.fixture(scope="module")
def live():
    """Prometheus + one paced replay per needed (scenario, level); yields (prom, instances, start, end, missing)."""
    needed = _needed_runs()
    missing = sorted({s for s, _ in needed if not scenario_file(s).exists()})
    if len(missing) == len({s for s, _ in needed}):
        pytest.skip(f"no scenario recordings under {SCEN_DIR} (generated by the scenario corpus)")
    needed = [(s, lvl) for s, lvl in needed if s not in missing]
    ports = {run: free_port() for run in needed}
    scrape = [{"job_name": "fabricmon", "static_configs": [
        {"targets": [f"127.0.0.1:{port}"], "labels": {"scenario": s, "level": lvl}} for (s, lvl), port in ports.items()]}]
    procs: dict[tuple[str, str], subprocess.Popen] = {}
    logs: dict[tuple[str, str], Path] = {}
    prom = PrometheusServer(scrape, rule_files=[DASH / "prometheus" / "rules.yml", DASH / "prometheus" / "alerts.yml"])
    prom.start()
    try:
        start = time.time()
        tmp = Path(prom._tmp.name)
        health = tmp / "health.yml"
        health.write_text("exposition:\n  level: health\n")
        for (s, lvl), port in ports.items():
            logs[(s, lvl)] = tmp / f"{s}.{lvl}.log"
            config = ["--config.file", str(health)] if lvl == "health" else []
            procs[(s, lvl)] = subprocess.Popen(
                [sys.executable, "-m", "fabricmon.agent", "replay", "--serve", f"127.0.0.1:{port}", "--speed", str(SPEED), *config,
                 str(scenario_file(s))],
                stdout=subprocess.DEVNULL, stderr=open(logs[(s, lvl)], "wb"), cwd=ROOT, start_new_session=True)  # noqa: SIM115
        deadline = time.monotonic() + 240
        pending = set(procs)
        while pending and time.monotonic() < deadline:
            for s in list(pending):
                if procs[s].poll() is not None:
                    pytest.fail(f"replay of {s} exited {procs[s].returncode}: {logs[s].read_text()[-2000:]}")
                if "replay finished" in logs[s].read_text(errors="replace"):
                    pending.discard(s)
            time.sleep(0.5)
        assert not pending, f"replays still running after 240 s: {sorted(pending)}"
        time.sleep(3)  # final scrape and rule evaluation
        end = time.time()
        instances = {f"127.0.0.1:{port}": run for run, port in ports.items()}
        yield prom, instances, start, end, missing
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.terminate()
        for p in procs.values():
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
        prom.stop()


def test_rules_load_and_evaluate_cleanly(live) -> None:
    prom, *_ = live
    health = prom.rule_health()
    assert len(health) == sum(len(g["rules"]) for f in ("alerts.yml", "rules.yml")
                              for g in yaml.safe_load((DASH / "prometheus" / f).read_text())["groups"])
    bad = [(n, h, e) for n, h, e in health if h != "ok"]
    assert not bad, bad


@pytest.mark.parametrize("level", LEVELS)
def test_recording_rules_produce_data(live, level: str) -> None:
    """At the health level too (but the one rule that says it is full-only): the rules group by
    instance, and each instance is one replay at one level."""
    prom, instances, start, end, _ = live
    records = [r["record"] for g in yaml.safe_load((DASH / "prometheus" / "rules.yml").read_text())["groups"] for r in g["rules"]]
    empty = []
    for r in records:
        if level == "health" and r in FULL_ONLY_RULES:
            continue
        series = prom.query_range(r, start, end, 1)
        at_level = [x for x in series if instances.get(x["metric"].get("instance", ""), ("", level))[1] == level]
        if not at_level:
            empty.append(r)
    assert not empty, f"recording rules without data in any scenario at the {level} level: {empty}"


def test_every_panel_query_returns_data_in_its_scenario_at_its_levels(live) -> None:
    prom, _, start, end, missing = live
    window = int(end - start) + 1
    errors, empty, checked = [], [], {lvl: 0 for lvl in LEVELS}
    for path in sorted((DASH / "grafana").glob("*.json")):
        d = json.loads(path.read_text())
        for p in d["panels"]:
            if p["type"] == "row":
                continue
            scen = build.PANEL_SCENARIOS[(d["uid"], p["title"])]
            levels = build.PANEL_LEVELS[(d["uid"], p["title"])]
            has_data = dict.fromkeys(levels, False)
            for t in p["targets"]:
                expr = substitute(t["expr"], window)
                try:
                    prom.query(expr)  # parses and evaluates as-is
                    for lvl in levels:
                        if scen and scen not in missing and not has_data[lvl]:
                            has_data[lvl] = bool(prom.query_range(scope(scope(expr, "scenario", scen), "level", lvl), start, end, 1))
                except Exception as exc:  # collect all failures, not just the first
                    errors.append(f"{d['uid']} / {p['title']}: {exc}: {expr}")
            if scen and scen not in missing:
                for lvl in levels:
                    checked[lvl] += 1
                    if not has_data[lvl]:
                        empty.append(f"{d['uid']} / {p['title']} in {scen} at the {lvl} level: {[t['expr'] for t in p['targets']]}")
    assert not errors, "\n".join(errors)
    assert checked["full"] > 40 and checked["health"] > 30, checked
    assert not empty, "panels without data in their scenario:\n" + "\n".join(empty)


def test_every_rule_expression_parses(live) -> None:
    prom, *_ = live
    for f in ("alerts.yml", "rules.yml"):
        for g in yaml.safe_load((DASH / "prometheus" / f).read_text())["groups"]:
            for r in g["rules"]:
                prom.query(r["expr"])


def _alerts_by_scenario(prom, instances, start, end) -> dict[str, set[tuple[str, str]]]:
    out: dict[str, set[tuple[str, str]]] = {}
    for series in prom.query_range("ALERTS", start, end, 1):
        m = series["metric"]
        scen = instances.get(m.get("instance", ""), (m.get("scenario", "?"), ""))[0]
        out.setdefault(scen, set()).add((m["alertname"], m["alertstate"]))
    return out


@pytest.mark.parametrize("scenario", ALERT_SCENARIOS)
def test_fault_alerts_go_pending_or_firing(live, scenario: str) -> None:
    from fabricmon.agent.detector.rules import RULES

    prom, instances, start, end, missing = live
    if scenario in missing:
        pytest.skip(f"{scenario_file(scenario)} not generated yet")
    seen = {a for a, _ in _alerts_by_scenario(prom, instances, start, end).get(scenario, set())}
    detectable = {k for cls in RULES.values() for k in cls.kinds}
    expected = {KIND_ALERT[k] for k in truth_kinds(scenario) if k in KIND_ALERT and k in detectable}
    assert expected, f"{scenario}: no detector rule for its fault kinds {truth_kinds(scenario)}"
    assert expected <= seen, f"{scenario}: expected {sorted(expected)} pending or firing, saw {sorted(seen)}"


def test_benign_scenario_raises_no_fabric_alert(live) -> None:
    prom, instances, start, end, _ = live
    seen = _alerts_by_scenario(prom, instances, start, end).get(BENIGN, set())
    fabric = {a for a, _ in seen} & set(fabric_alerts())
    assert not fabric, f"benign scenario raised {sorted(fabric)}"
