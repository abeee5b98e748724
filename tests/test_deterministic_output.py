"""Two replays of the same recording, in separate processes with different hash seeds, write
byte-identical ``--findings-out`` files and serve identical ``/api/findings`` bodies: output
order never depends on set or dict iteration order (``Finding.sort_key``)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tests.conftest import ROOT, free_port

# Recordings with findings that end in the same pass and several open at the end (a credit loop: one finding per
# member, raised and ended together, was the case that came out in a different order from run to run).
RECORDINGS = [ROOT / "agent" / "demo" / "demo.jsonl.gz", ROOT / "tests" / "scenarios" / "ib_credit_loop.jsonl.gz", ROOT / "tests" / "scenarios" / "pfc_deadlock.jsonl.gz",
              ROOT / "tests" / "scenarios" / "nic_pause_storm_arista.jsonl.gz"]


def _replay(recording: Path, out: Path, seed: str) -> bytes:
    """Replay with --serve; returns /api/findings?ended=1 after the replay finished, with the findings file written."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "fabricmon.agent", "--log.level", "warning", "replay", "--fast", "--quiet",
                             "--serve", f"127.0.0.1:{port}", "--findings-out", str(out), str(recording)],
                            cwd=ROOT, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONHASHSEED": seed})
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            line = proc.stderr.readline()
            if not line:
                raise AssertionError(f"replay exited early with {proc.wait()}")
            if "replay finished" in line:
                break
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/findings?ended=1", timeout=30) as r:
            return r.read().replace(f"127.0.0.1:{port}".encode(), b"AGENT")  # each finding's url names the listen port
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=15)
        out.write_bytes(out.read_bytes().replace(f"127.0.0.1:{port}".encode(), b"AGENT"))


@pytest.mark.parametrize("recording", RECORDINGS, ids=lambda p: p.name.split(".")[0])
def test_two_replays_give_byte_identical_findings(tmp_path, recording):
    a_api = _replay(recording, tmp_path / "a.jsonl", "1")
    b_api = _replay(recording, tmp_path / "b.jsonl", "4242")
    a, b = (tmp_path / "a.jsonl").read_bytes(), (tmp_path / "b.jsonl").read_bytes()
    assert a.count(b"\n") >= 2, "the recording should produce several findings"
    assert a == b
    assert a_api == b_api
