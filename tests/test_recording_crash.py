"""Recordings survive crashes, damage and full disks (issue 32): one gzip member per line, a
reader that resumes after a damaged member, a new file beside a damaged one, and a writer that
keeps the agent monitoring (and counts, and retries) when the disk is full."""

from __future__ import annotations

import errno
import gzip
import json
import logging
import os
import signal
import subprocess
import sys
import time

import pytest

from fabricmon.agent import recording
from fabricmon.agent.recording import ReadReport, RecordingWriter, iter_lines, read_polls
from fabricmon.core.model import Poll, TargetSpec

SPECS = [TargetSpec("t", "ufm-telemetry")]


def _poll(i: int) -> Poll:
    return Poll("t", "ufm-telemetry", 100.0 + i, 0.1, True, payload={"responses": [{"path": "/x", "status": 200, "body": "y" * 3000}]})


def _lenient(path) -> tuple[list[dict], ReadReport]:
    report = ReadReport()
    return [line for _, line in iter_lines(path, report)], report


def test_every_line_is_a_complete_gzip_member(tmp_path):
    path = tmp_path / "rec.jsonl.gz"
    w = RecordingWriter(path, SPECS)
    for i in range(3):
        w.write_poll(_poll(i))
    w.close()
    raw = path.read_bytes()
    assert raw.count(b"\x1f\x8b\x08") >= 4  # the header and three polls, each its own member
    assert len(gzip.decompress(raw).splitlines()) == 4  # any gzip reader reads them as one stream


def test_kill_9_while_recording_loses_at_most_the_poll_in_flight(tmp_path):
    """The original break: replay recovered 16 of 42 polls of a recording cut by kill -9."""
    path = tmp_path / "rec.jsonl.gz"
    code = ("import sys, time\n"
            "from fabricmon.agent.recording import RecordingWriter\n"
            "from fabricmon.core.model import Poll, TargetSpec\n"
            "w = RecordingWriter(sys.argv[1], [TargetSpec('t', 'ufm-telemetry')])\n"
            "i = 0\n"
            "while True:\n"
            "    w.write_poll(Poll('t', 'ufm-telemetry', 100.0 + i, 0.1, True, payload={'csv': 'x' * 200000}))\n"
            "    print(i, flush=True)\n"
            "    i += 1\n")
    proc = subprocess.Popen([sys.executable, "-c", code, str(path)], stdout=subprocess.PIPE, text=True)
    written = -1
    deadline = time.monotonic() + 60
    while written < 40 and time.monotonic() < deadline:
        written = int(proc.stdout.readline())
    os.kill(proc.pid, signal.SIGKILL)  # in the middle of a later write, or between two
    proc.wait()
    proc.stdout.close()
    lines, report = _lenient(path)
    polls = [ln for ln in lines if ln["type"] == "poll"]
    assert len(polls) >= written + 1  # every poll whose write had returned
    assert report.skipped <= 2, report.examples  # at most the member in flight (and its half line)


def test_replay_resumes_after_a_damaged_member(tmp_path, caplog):
    path = tmp_path / "rec.jsonl.gz"
    w = RecordingWriter(path, SPECS)
    for i in range(10):
        w.write_poll(_poll(i))
    w.close()
    raw = bytearray(path.read_bytes())
    starts = [i for i in range(len(raw)) if raw.startswith(b"\x1f\x8b\x08", i)]
    victim = starts[5]  # the fifth poll's member: its deflate data is overwritten
    raw[victim + 20: victim + 60] = b"\xff" * 40
    path.write_bytes(bytes(raw))
    header, polls, _ = read_polls_lenient(path)
    assert [p.t for p in polls] == [100.0 + i for i in range(10) if i != 4]  # only the damaged one is lost
    assert header["format"] == "fabricmon-recording"


def read_polls_lenient(path):
    lines, report = _lenient(path)
    assert report.skipped >= 1 and any("damaged gzip member" in e for e in report.examples), report.examples
    polls = [recording.poll_from_line(path, 0, ln) for ln in lines if ln["type"] == "poll"]
    return lines[0], polls, report


def test_a_cut_old_style_stream_keeps_what_was_decompressed(tmp_path):
    """Recordings written before the member framing: a sync-flushed stream cut short."""
    path = tmp_path / "old.jsonl.gz"
    with open(path, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb") as gz:
        gz.write(json.dumps({"type": "header", "format": "fabricmon-recording", "version": 1, "targets": []}).encode() + b"\n")
        for i in range(42):
            gz.write(json.dumps(_poll(i).to_line()).encode() + b"\n")
            gz.flush()
        data_so_far = raw.tell()
    path.write_bytes(path.read_bytes()[: data_so_far - 5])  # cut inside the last flushed block, as kill -9 would
    lines, _report = _lenient(path)
    assert sum(ln["type"] == "poll" for ln in lines) >= 41


@pytest.mark.parametrize("damage", [b"\x1f\x8b\x08\x00\x00", b'{"type": "header", "form', b"just some text\n", b"\x00" * 64])
def test_a_damaged_existing_recording_gets_a_new_file_beside_it(tmp_path, caplog, damage):
    """It used to exit 1 with a RecordingError traceback on every start: a restart loop."""
    path = tmp_path / "rec.jsonl.gz"
    path.write_bytes(damage)
    caplog.set_level(logging.WARNING, logger="fabricmon.agent.recording")
    w = RecordingWriter(path, SPECS)
    w.write_poll(_poll(0))
    w.close()
    assert path.read_bytes() == damage  # left as it was
    [new] = [p for p in tmp_path.iterdir() if p != path]
    assert new.name.startswith("rec.") and new.name.endswith(".jsonl.gz")
    assert len(read_polls(new)[1]) == 1
    assert str(path) in caplog.text and str(new) in caplog.text


def test_a_fifo_as_recording_is_left_alone(tmp_path):
    path = tmp_path / "rec.jsonl"
    os.mkfifo(path)
    w = RecordingWriter(path, SPECS)
    w.write_poll(_poll(0))
    w.close()
    assert w.up and w.path != path and len(read_polls(w.path)[1]) == 1


def test_a_full_disk_is_counted_and_retried_while_monitoring_goes_on(tmp_path, monkeypatch, caplog):
    path = tmp_path / "rec.jsonl.gz"
    full = {"on": True}
    real_write = os.write

    def write(fd, data):
        if full["on"]:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write(fd, data)

    monkeypatch.setattr(recording.os, "write", write)
    monkeypatch.setattr(recording, "RETRY_S", 0.0)
    caplog.set_level(logging.ERROR, logger="fabricmon.agent.recording")
    w = RecordingWriter(path, SPECS)  # at start-up: the header cannot be written
    assert not w.up and w.errors == 1
    for i in range(3):
        w.write_poll(_poll(i))  # each poll: a retry that fails again, the poll counted as lost
    assert w.lost == 3
    assert len([r for r in caplog.records if "No space left on device" in r.getMessage()]) == 1  # once per cause
    assert str(path) in caplog.text
    full["on"] = False
    w.write_poll(_poll(3))
    w.close()
    assert w.up
    fams = {f.name: f.lines for f in w.families()}
    assert fams["fabricmon_recording_up"] == ["fabricmon_recording_up 1"]
    assert fams["fabricmon_recording_polls_lost_total"] == ["fabricmon_recording_polls_lost_total 3"]
    lines, _report = _lenient(path)
    assert [ln["t"] for ln in lines if ln["type"] == "poll"] == [103.0]
