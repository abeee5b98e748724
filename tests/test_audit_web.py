"""The landing page's lossless checklist in a real browser: headless Chromium against
``fabricmon replay --serve`` of the five-fault audit recording (tests/scenarios_audit).

The page loads without console output, and the checklist section, as the browser built the
DOM, lists exactly the five planted (device, port, check) of the recording's truth lines as
failing, with per-check pass/fail/unknown counts equal to those of ``fabricmon audit --json``
on the same recording (the rule on the live path and the one-shot audit run one checklist).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys

from tests.test_browser import ROOT, _require_chromium, chromium, serve, truth

RECORDING = ROOT / "tests" / "scenarios_audit" / "audit_mixed_five.jsonl.gz"


def _section(dom: str) -> str:
    start = dom.index('<h2 id="checklist">')
    end = dom.index("<h2", start + 1)
    return dom[start:end]


def _rows(html: str) -> list[list[str]]:
    return [[re.sub(r"<[^>]+>", "", c).strip() for c in re.findall(r"<td>(.*?)</td>", row, re.S)]
            for row in re.findall(r"<tr[^>]*>(.*?)</tr>", html, re.S) if "<td>" in row]


def test_landing_page_lists_the_planted_failures_and_the_audit_counts() -> None:
    _require_chromium()
    audit = subprocess.run([sys.executable, "-m", "fabricmon.agent", "--log.level", "error", "audit", "--json", str(RECORDING)],
                           cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert audit.returncode == 1, audit.stderr  # checks fail in this recording
    summary = json.loads(audit.stdout)["summary"]
    with serve(RECORDING) as base:
        dom, console = chromium(f"{base}/")
    assert not console, f"console output {console}"
    section = _section(dom)
    counts_html, failing_html = section.split("<h3>", 1)
    counts = {r[0]: {"pass": int(r[1]), "fail": int(r[2]), "unknown": int(r[3])} for r in _rows(counts_html)}
    assert counts == summary
    planted = {(t["device"], t["port"], t["check"]) for t in truth(RECORDING) if t["kind"] == "misconfig"}
    assert len(planted) == 5
    assert failing_html.startswith("Failing (5)</h3>")
    shown = {(r[1], r[2], r[0]) for r in _rows(failing_html)}
    assert shown == planted
