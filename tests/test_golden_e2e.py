"""Golden end-to-end test in the style of node_exporter's.

Runs the real CLI (``fabricmon replay --fast --serve``) on a committed recording, scrapes
/metrics over HTTP, and diffs it against a committed golden file. ``pytest
--update-golden`` rewrites the golden file after a deliberate change. ``promtool check
metrics`` lints the same body.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tests.conftest import ROOT, free_port

RECORDING = ROOT / "agent" / "demo" / "demo.jsonl.gz"
GOLDEN = ROOT / "tests" / "golden" / "demo.metrics.txt"
# Lines whose values depend on the machine, not on the recording.
VOLATILE = ("fabricmon_exposition_render_seconds", "fabricmon_build_info", "fabricmon_config_last_reload_success_timestamp_seconds",
            # the serving process's own metrics (prometheus_client's collectors): memory, CPU, fds, GC, Python version
            "process_virtual_memory_bytes", "process_resident_memory_bytes", "process_start_time_seconds",
            "process_cpu_seconds_total", "process_open_fds", "process_max_fds", "python_gc_objects_collected_total",
            "python_gc_objects_uncollectable_total", "python_gc_collections_total", "python_info")


def scrape_replay(recording: Path, extra: list[str] | None = None, accept: str | None = None, hash_seed: str = "0") -> str:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "fabricmon.agent", "--log.level", "warning", "replay", "--fast", "--quiet",
         "--serve", f"127.0.0.1:{port}", *(extra or []), str(recording)],
        cwd=ROOT, stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONHASHSEED": hash_seed},
    )
    try:
        deadline = time.monotonic() + 120
        lines = []
        while time.monotonic() < deadline:
            line = proc.stderr.readline()
            if not line:
                raise AssertionError(f"replay exited early: {proc.wait()} {''.join(lines)}")
            lines.append(line)
            if "replay finished" in line:
                break
        req = urllib.request.Request(f"http://127.0.0.1:{port}/metrics", headers={"Accept": accept} if accept else {})
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.read().decode()
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()


def stable(body: str) -> str:
    out = []
    for line in body.splitlines():
        name = line.split(" ", 3)[2] if line.startswith("# ") else line.split("{", 1)[0].split(" ", 1)[0]
        if name in VOLATILE and not line.startswith("# "):
            continue
        out.append(line)
    return "\n".join(out) + "\n"


@pytest.fixture(scope="module")
def body() -> str:
    if not RECORDING.exists():
        pytest.skip(f"{RECORDING} missing: generate it with python -m tools.scenarios --demo {RECORDING}")
    return scrape_replay(RECORDING)


def test_metrics_match_golden(body, request):
    got = stable(body)
    if request.config.getoption("--update-golden"):
        GOLDEN.write_text(got)
    assert GOLDEN.exists(), f"{GOLDEN} missing: run pytest {__file__} --update-golden"
    expected = GOLDEN.read_text()
    if got != expected:
        import difflib

        diff = "".join(difflib.unified_diff(expected.splitlines(True), got.splitlines(True), "golden", "scraped", n=1))
        pytest.fail(f"/metrics differs from {GOLDEN} (pytest --update-golden to accept):\n{diff[:6000]}")


def test_promtool_check_metrics(body):
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool not installed (Debian package prometheus)")
    r = subprocess.run([promtool, "check", "metrics"], input=body, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_replay_is_deterministic(body):
    # Another process with another string-hash seed: set and dict orders differ, findings must not.
    assert stable(scrape_replay(RECORDING, hash_seed="4242")) == stable(body)


def test_findings_are_present(body):
    """The demo's faults (a NIC pause storm, a stalled InfiniBand port, a link flap) were found."""
    raised = {}
    for line in body.splitlines():
        if line.startswith("fabricmon_findings_total{"):
            kind = line.split('kind="', 1)[1].split('"', 1)[0]
            raised[kind] = raised.get(kind, 0) + float(line.rsplit(" ", 1)[1])
    for kind in ("pfc_storm", "credit_deadlock", "congestion", "link_degraded"):
        assert raised.get(kind, 0) >= 1, f"no {kind} finding raised on the demo recording: {raised}"
