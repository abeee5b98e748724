"""The detector's evaluation on the whole scenario corpus, as `fabricmon eval` runs it.

Exits non-zero below the floors of the Detector issue: precision and recall >= 0.95 per
kind, zero false deadlocks, storms and deadlocks within 2 polls, hardware-counted events
within 1 poll, storm origin top-1 >= 0.9.
"""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import ROOT


def test_fabricmon_eval_passes_on_the_corpus():
    r = subprocess.run([sys.executable, "-m", "fabricmon.agent", "--log.level", "error", "eval", str(ROOT / "tests" / "scenarios")],
                       cwd=ROOT, capture_output=True, text=True, timeout=600)
    print(r.stdout)
    assert r.returncode == 0, f"fabricmon eval failed:\n{r.stdout}\n{r.stderr[-3000:]}"
    assert "PASS" in r.stdout
    for kind in ("pfc_storm", "pfc_deadlock", "credit_deadlock", "congestion", "packet_loss", "link_degraded"):
        assert kind in r.stdout
