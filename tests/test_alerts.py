"""Prometheus alert and recording rules: promtool check/test, conventions, runbook anchors."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.prometheus_util import PROMTOOL, have_promtool

ROOT = Path(__file__).resolve().parent.parent
PROM = ROOT / "dashboards" / "prometheus"
RUNBOOKS = ROOT / "docs" / "runbooks.md"
# Fabric alerts link their finding's page (the series' url label) and its #runbook section; agent
# alerts the runbooks the agent serves under its external URL (fabricmon_web_info), else at the
# scrape address (tests/test_runbooks.py checks the agent serves both).
FINDING_RUNBOOK = "{{ $labels.url }}#runbook"
AGENT_RUNBOOK = "{{ with $labels.external_url }}{{ . }}{{ else }}http://{{ $labels.instance }}{{ end }}/runbooks#"

needs_promtool = pytest.mark.skipif(not have_promtool(), reason="promtool not installed (Debian package prometheus)")


def alerts() -> list[dict]:
    return [r for g in yaml.safe_load((PROM / "alerts.yml").read_text())["groups"] for r in g["rules"]]


def promtool(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([PROMTOOL, *args], capture_output=True, text=True, timeout=120, cwd=ROOT)


@needs_promtool
def test_promtool_check_rules() -> None:
    r = promtool("check", "rules", str(PROM / "alerts.yml"), str(PROM / "rules.yml"))
    assert r.returncode == 0, r.stdout + r.stderr


@needs_promtool
def test_promtool_unit_tests() -> None:
    files = sorted(str(p) for p in (PROM / "tests").glob("*.yml"))
    assert files
    r = promtool("test", "rules", *files)
    assert r.returncode == 0, r.stdout + r.stderr


@needs_promtool
def test_example_scrape_config(tmp_path: Path) -> None:
    cfg = yaml.safe_load((PROM / "prometheus.example.yml").read_text())
    assert [j["job_name"] for j in cfg["scrape_configs"]] == ["fabricmon"]  # FabricmonAgentDown relies on it
    assert cfg["scrape_configs"][0]["static_configs"][0]["targets"][0].endswith(":10117")
    for f in ("alerts.yml", "rules.yml"):
        shutil.copy(PROM / f, tmp_path / f)
    cfg["rule_files"] = [str(tmp_path / "rules.yml"), str(tmp_path / "alerts.yml")]
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(cfg))
    r = promtool("check", "config", str(tmp_path / "prometheus.yml"))
    assert r.returncode == 0, r.stdout + r.stderr


def test_alert_conventions_and_runbooks() -> None:
    text = RUNBOOKS.read_text()
    anchors = {re.sub(r"[^a-z0-9 -]", "", h.strip().lower()).replace(" ", "-") for h in re.findall(r"^#+ (.+)$", text, re.M)}
    names = [r["alert"] for r in alerts()]
    assert len(set(names)) == len(names)
    for r in alerts():
        name = r["alert"]
        assert re.fullmatch(r"Fabricmon[A-Z]\w+", name)
        assert r["labels"]["severity"] in ("warning", "critical", "{{ $labels.severity }}"), name
        ann = r["annotations"]
        assert ann["summary"] and ann["description"], name
        if "fabricmon_finding_active" in r["expr"]:
            assert ann["runbook_url"] == FINDING_RUNBOOK and ann["finding_url"] == "{{ $labels.url }}", name
        elif name == "FabricmonAgentDown":  # also fires with no agent at all (absent): no instance then
            assert ann["runbook_url"].endswith("/runbooks#" + name.lower()) and "external_url" in ann["runbook_url"], name
        else:
            assert ann["runbook_url"] == AGENT_RUNBOOK + name.lower(), name
            assert "group_left (external_url) fabricmon_web_info" in r["expr"], name
        assert name.lower() in anchors, f"docs/runbooks.md has no section '## {name}'"
        if r["labels"]["severity"].startswith("{{"):  # copied from the finding, which is warning|critical
            assert "fabricmon_finding_active" in r["expr"], name


def test_every_alert_has_firing_and_silent_unit_tests() -> None:
    firing: set[str] = set()
    silent: set[str] = set()
    for f in (PROM / "tests").glob("*.yml"):
        for t in yaml.safe_load(f.read_text())["tests"]:
            for a in t.get("alert_rule_test", []):
                (firing if a.get("exp_alerts") else silent).add(a["alertname"])
    names = {r["alert"] for r in alerts()}
    assert names <= firing, f"no firing test for {names - firing}"
    assert names <= silent, f"no not-firing test for {names - silent}"
