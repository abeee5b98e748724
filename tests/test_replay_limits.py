"""Replays with bounded memory and clear limits (issue 20 item 8), at CI scale: a 64 MiB line
against a 16 MiB cap, a decompressed-size cap, a target cap with its metric, poll times that
would stall a paced replay, mistyped fields as data errors, and the exit codes 0/1/2."""

from __future__ import annotations

import asyncio
import gzip
import json
import tracemalloc
from pathlib import Path

from fabricmon.agent.cli import main
from fabricmon.agent.exporter.server import Exporter
from fabricmon.agent.recording import FORMAT, VERSION, Limits
from fabricmon.agent.replay import replay_paced, replay_recording

T0 = 1764691200.0
HEADER = {"type": "header", "format": FORMAT, "version": VERSION, "targets": [{"name": "leaf01", "source": "snmp"}]}


def poll(i: int, target: str = "leaf01", **extra) -> dict:
    return {"type": "poll", "target": target, "source": "snmp", "t": T0 + 10 * i, "duration_s": 0.1,
            "ok": False, "error": "timeout after 5 s", "reason": "timeout", **extra}


def write(path: Path, lines: list[dict | bytes]) -> Path:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "wb") as fh:
        for line in lines:
            fh.write(line if isinstance(line, bytes) else json.dumps(line).encode() + b"\n")
    return path


def replay_cli(capsys, path: Path, *args: str) -> tuple[int, str]:
    code = main(["replay", "--quiet", *args, str(path)])
    return code, capsys.readouterr().err


def test_clean_recording_exits_0(tmp_path, capsys):
    code, err = replay_cli(capsys, write(tmp_path / "ok.jsonl", [HEADER, poll(0), poll(1)]))
    assert code == 0 and "replayed 2 polls of 1 target(s)" in err and "skipped" not in err


def test_64_mib_line_against_a_16_mib_cap(tmp_path, capsys):
    """The line is skipped without being held: the read's peak memory stays near the cap, not the line."""
    path = tmp_path / "bomb.jsonl.gz"
    with gzip.open(path, "wb", compresslevel=1) as fh:
        fh.write(json.dumps(HEADER).encode() + b"\n" + json.dumps(poll(0)).encode() + b"\n")
        fh.write(b'{"type":"poll","payload":"')
        chunk = b"a" * (1 << 20)
        for _ in range(64):
            fh.write(chunk)
        fh.write(b'"}\n' + json.dumps(poll(1)).encode() + b"\n")
    assert path.stat().st_size < 1 << 20  # under 1 MB on disk
    tracemalloc.start()
    try:
        result = replay_recording(path, limits=Limits(max_line_bytes=16 << 20))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert result.polls == 2 and result.skipped == 1
    assert result.skipped_examples == [f"{path}:3: line of {64 * (1 << 20) + 29} bytes is longer than the {16 << 20}-byte limit; skipped"]
    assert peak < 40 << 20, f"peak {peak >> 20} MiB for a 64 MiB line"
    code, err = replay_cli(capsys, path, "--max-line-bytes", str(16 << 20))
    assert code == 1 and "1 data error(s) skipped" in err and f"{path}:3: line of" in err


def test_decompressed_size_cap_stops_and_reports(tmp_path, capsys):
    path = write(tmp_path / "many.jsonl.gz", [HEADER, *(poll(i) for i in range(100))])
    code, err = replay_cli(capsys, path, "--max-total-bytes", "5000")
    assert code == 1 and "stopped reading: more than 5000 decompressed bytes" in err
    assert "replayed 100 polls" not in err


def test_target_cap_refuses_and_counts(tmp_path):
    path = write(tmp_path / "names.jsonl", [HEADER, *(poll(i, target=f"t{i:05d}") for i in range(50))])
    result = replay_recording(path, limits=Limits(max_targets=10))
    assert len(result.pipeline.targets) == 10 and result.pipeline.refused_targets == 41  # leaf01 from the header + 9
    assert result.skipped == 41 and "target 't00009' refused" in result.skipped_examples[0]
    body = Exporter(result.pipeline).render_now().text.decode()
    assert "\nfabricmon_refused_targets_total 41\n" in body


def test_header_with_too_many_targets_cannot_replay(tmp_path, capsys):
    header = {**HEADER, "targets": [{"name": f"t{i}", "source": "snmp"} for i in range(20)]}
    code, err = replay_cli(capsys, write(tmp_path / "h.jsonl", [header, poll(0)]), "--max-targets", "10")
    assert code == 2 and "header lists 20 targets, more than the limit of 10" in err


async def test_paced_replay_rejects_far_future_times_instead_of_stalling(tmp_path):
    path = write(tmp_path / "t.jsonl", [HEADER, poll(0), {**poll(1), "t": 1e18}, b'{"type":"poll","target":"leaf01",'
                b'"source":"snmp","t":Infinity,"ok":false}\n', poll(2)])
    result = await asyncio.wait_for(replay_paced(path, speed=1000.0), timeout=60)
    assert result.polls == 2 and result.skipped == 2
    assert "t 1e+18 is not a Unix time" in result.skipped_examples[0]
    assert "t must be finite" in result.skipped_examples[1]


async def test_paced_replay_does_not_wait_out_a_long_gap(tmp_path):
    path = write(tmp_path / "gap.jsonl", [HEADER, poll(0), {**poll(1), "t": T0 + 86400}])
    result = await asyncio.wait_for(replay_paced(path, speed=1.0), timeout=60)
    assert result.polls == 2 and result.skipped == 0
    assert result.warnings == [f"{path}:3: a gap of 86400 s in the recording; not waiting it out"]


def test_mistyped_fields_are_data_errors_for_that_line(tmp_path, capsys):
    path = write(tmp_path / "typed.jsonl", [HEADER, poll(0), poll(1, reason=["timeout"]), poll(2, ok="false"), poll(3)])
    code, err = replay_cli(capsys, path)
    assert code == 1
    assert "replayed 2 polls" in err and "2 data error(s) skipped" in err
    assert f"{path}:3: malformed poll line: reason must be a string, not list" in err


def test_unknown_version_and_non_recordings_cannot_replay(tmp_path, capsys):
    code, err = replay_cli(capsys, write(tmp_path / "v2.jsonl", [{**HEADER, "version": 2}]))
    assert code == 2 and "recording version 2 is not supported" in err
    code, err = replay_cli(capsys, write(tmp_path / "x.jsonl", [b"hello\n"]))
    assert code == 2 and "not a fabricmon recording" in err
    code, err = replay_cli(capsys, tmp_path / "missing.jsonl")
    assert code == 2 and "cannot open recording: No such file or directory" in err


def test_unwritable_findings_out_is_a_message(tmp_path, capsys):
    path = write(tmp_path / "ok.jsonl", [HEADER, poll(0)])
    code, err = replay_cli(capsys, path, "--findings-out", str(tmp_path / "no" / "such" / "dir" / "f.jsonl"))
    assert code == 2 and err.startswith("error: cannot write findings to ") and "Traceback" not in err


def test_exit_codes_are_in_the_help(capsys):
    import pytest

    with pytest.raises(SystemExit):
        main(["replay", "--help"])
    out = capsys.readouterr().out
    assert "0  replayed every line" in out and "1  replayed, with data errors skipped" in out and "2  could not replay" in out
