"""Dashboards: generated JSON is committed and current, every panel has a unit and the
template variables, and every metric a dashboard or rule queries is one the agent exports."""

from __future__ import annotations

import json
import re
import warnings
from pathlib import Path

import pytest
import yaml

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    build = pytest.importorskip("dashboards.build", reason="pip install 'grafana-foundation-sdk~=0.0.21'")

ROOT = Path(__file__).resolve().parent.parent
DASH = ROOT / "dashboards"
SCENARIOS = ROOT / "tests" / "scenarios"

# Series Prometheus makes itself (scrape health, alert state).
PROMETHEUS_OWN = {"up", "ALERTS", "ALERTS_FOR_STATE", "scrape_duration_seconds", "scrape_samples_scraped"}
KEYWORDS = {"and", "or", "unless", "by", "without", "on", "ignoring", "group_left", "group_right", "bool", "offset", "inf", "nan"}


def dashboards() -> dict[str, dict]:
    return {p.stem: json.loads(p.read_text()) for p in sorted((DASH / "grafana").glob("*.json"))}


def panels(d: dict) -> list[dict]:
    return [p for p in d["panels"] if p["type"] != "row"]


def panel_exprs() -> list[tuple[str, str, str]]:
    """(dashboard uid, panel title, expr) of every panel target."""
    return [(d["uid"], p["title"], t["expr"]) for d in dashboards().values() for p in panels(d) for t in p["targets"]]


def rule_exprs() -> list[tuple[str, str]]:
    out = []
    for f in ("alerts.yml", "rules.yml"):
        for g in yaml.safe_load((DASH / "prometheus" / f).read_text())["groups"]:
            out += [(r.get("alert") or r["record"], r["expr"]) for r in g["rules"]]
    return out


def recorded_names() -> set[str]:
    return {r["record"] for g in yaml.safe_load((DASH / "prometheus" / "rules.yml").read_text())["groups"] for r in g["rules"]}


def metric_names(expr: str) -> set[str]:
    """Metric names a PromQL expression selects (no parser needed for our style of PromQL)."""
    s = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)  # string literals
    s = re.sub(r"\{[^}]*\}", "", s)  # label matchers
    s = re.sub(r"\[[^\]]*\]", "", s)  # range selectors
    s = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", s)  # label lists
    s = re.sub(r"\$\w+", "1", s)  # Grafana variables
    names = set()
    for m in re.finditer(r"(?<![\w.])([a-zA-Z_:][a-zA-Z0-9_:]*)\s*(\()?", s):
        name, call = m.group(1), m.group(2)
        if call or name.lower() in KEYWORDS or re.fullmatch(r"\d.*|e\d+", name):
            continue
        names.add(name)
    return names


def test_metric_name_extraction() -> None:
    e = 'sum by (device, port) (rate(fabricmon_x_total{device=~"$device", a="b c"}[$__rate_interval])) / on (instance) group_left (alias) fabricmon_port_info > bool 0'
    assert metric_names(e) == {"fabricmon_x_total", "fabricmon_port_info"}
    assert metric_names("count(up == 0) or vector(0) and time() - m:rec:rate1m offset 5m") == {"up", "m:rec:rate1m"}


@pytest.fixture(scope="module")
def exportable() -> set[str]:
    """Names the agent exports: vocabulary, every family of a pipeline after a replay, rule gauges,
    and the health level's per-port rates (exported instead of raw counters at that level)."""
    from fabricmon.agent.detector import rules as rules_mod
    from fabricmon.agent.exporter.metrics import HEALTH_RATES, all_families
    from fabricmon.agent.pipeline import Pipeline
    from fabricmon.core.vocabulary import COUNTERS, GAUGES, metric_name

    names = {metric_name(d) for d in [*COUNTERS.values(), *GAUGES.values()]}
    p = Pipeline([], rules_mod.build())
    rec = SCENARIOS / "nic_pause_storm_arista.jsonl.gz"
    if rec.exists():  # rule gauges appear once a rule has seen data
        from fabricmon.agent.replay import replay_recording

        p = replay_recording(str(rec), None).pipeline
    names |= {f.name for f in all_families(p)}
    names |= {m.name for r in p.detector.rules for m in r.metrics()}
    names |= {f"fabricmon_{metric}" for metric, _help in HEALTH_RATES.values()}
    return names


def test_generated_files_are_current(tmp_path: Path) -> None:
    written = build.write_all(tmp_path)
    assert len(written) == len(build.DASHBOARDS) + 1
    stale = [str(p.relative_to(tmp_path)) for p in written if not (DASH / p.relative_to(tmp_path)).exists()
             or (DASH / p.relative_to(tmp_path)).read_text() != p.read_text()]
    assert not stale, f"committed files differ from dashboards/build.py output: {stale}; run python -m dashboards.build"


def test_build_is_deterministic() -> None:
    assert build.render_all() == build.render_all()


def test_dashboard_structure() -> None:
    build.render_all()  # fills PANEL_SCENARIOS
    ds = dashboards()
    assert set(ds) == set(build.DASHBOARDS)
    uids = [d["uid"] for d in ds.values()]
    assert len(set(uids)) == len(uids) and all(u.startswith("fabricmon-") for u in uids)
    for name, d in ds.items():
        names = [v["name"] for v in d["templating"]["list"]]
        assert {"datasource", "device", "port"} <= set(names), name
        ids = [p["id"] for p in d["panels"]]
        assert len(set(ids)) == len(ids) and 0 not in ids, f"{name}: panel ids must be unique and set"
        for p in panels(d):
            assert p["fieldConfig"]["defaults"].get("unit"), f"{name}/{p['title']}: no unit"
            assert p["datasource"]["uid"] == "${datasource}", f"{name}/{p['title']}"
            assert p["targets"], f"{name}/{p['title']}: no query"
            assert (d["uid"], p["title"]) in build.PANEL_SCENARIOS, f"{name}/{p['title']}: titles must be unique per dashboard"
            for t in p["targets"]:
                assert "fabricmon_" in t["expr"] or "up{" in t["expr"], t["expr"]


def test_fabric_panels_honour_device_and_port_variables() -> None:
    for uid, title, expr in panel_exprs():
        if uid == "fabricmon-agent" or ("fabricmon_port_" not in expr and "fabricmon_pfc" not in expr):
            continue
        assert '=~"$device"' in expr, f"{uid}/{title}: {expr}"


def test_every_queried_metric_is_exported(exportable: set[str]) -> None:
    allowed = exportable | recorded_names() | PROMETHEUS_OWN
    missing = {}
    for where, expr in [*((f"{u}/{t}", e) for u, t, e in panel_exprs()), *rule_exprs()]:
        for name in metric_names(expr) - allowed:
            missing.setdefault(name, []).append(where)
    assert not missing, f"metrics not exported by the agent: {missing}"


def test_grafana_alerting_mirrors_prometheus_alerts() -> None:
    prom = {r["alert"]: r for g in yaml.safe_load((DASH / "prometheus" / "alerts.yml").read_text())["groups"] for r in g["rules"]}
    graf = {r["title"]: r for g in yaml.safe_load((DASH / "provisioning" / "alerting" / "fabricmon-alerts.yaml").read_text())["groups"]
            for r in g["rules"]}
    assert set(graf) == set(prom)
    ds = yaml.safe_load((DASH / "provisioning" / "datasources" / "fabricmon-prometheus.yaml").read_text())["datasources"][0]
    for name, r in graf.items():
        assert r["data"][0]["model"]["expr"] == prom[name]["expr"].strip()
        assert r["data"][0]["datasourceUid"] == ds["uid"]
        assert r["for"] == prom[name].get("for", "0s")
        assert r["labels"]["severity"] and r["annotations"]["runbook_url"] == prom[name]["annotations"]["runbook_url"]


def test_provisioning_files() -> None:
    prov = yaml.safe_load((DASH / "provisioning" / "dashboards" / "fabricmon.yaml").read_text())
    assert prov["apiVersion"] == 1 and prov["providers"][0]["type"] == "file"
    ds = yaml.safe_load((DASH / "provisioning" / "datasources" / "fabricmon-prometheus.yaml").read_text())
    assert ds["datasources"][0]["type"] == "prometheus"
