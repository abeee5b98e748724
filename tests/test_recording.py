"""Recording format: write, read back, gzip, torn lines, versions, malformed lines."""

from __future__ import annotations

import gzip
import json
import os
import stat

import pytest

from fabricmon.agent.recording import ReadReport, RecordingError, RecordingWriter, iter_lines, poll_from_line, read_header, read_polls
from fabricmon.core.model import Poll, TargetSpec

SPECS = [TargetSpec("leaf01", "snmp", {"profile": "arista"}), TargetSpec("ib", "perfquery")]


def write_sample(path):
    w = RecordingWriter(path, SPECS, description="test")
    w.write_poll(Poll("leaf01", "snmp", 100.0, 0.4, True, payload={"snmprec": "1.3.6.1.2.1.1.3.0|67|100\n"}))
    w.write_poll(Poll("ib", "perfquery", 100.5, 5.0, False, error="timeout after 5 s", reason="timeout"))
    w.write({"type": "note", "t": 101.0, "text": "hello"})
    w.write({"type": "truth", "kind": "pfc_storm", "device": "leaf01", "port": "Ethernet5", "priority": 3,
             "role": "origin", "start": 100.0, "end": None})
    w.close()


@pytest.mark.parametrize("name", ["rec.jsonl", "rec.jsonl.gz"])
def test_round_trip(tmp_path, name):
    path = tmp_path / name
    write_sample(path)
    header, polls, truth = read_polls(path)
    assert header["format"] == "fabricmon-recording" and header["version"] == 1
    assert header["targets"] == [{"name": "leaf01", "source": "snmp", "profile": "arista"}, {"name": "ib", "source": "perfquery"}]
    assert [p.target for p in polls] == ["leaf01", "ib"]
    assert polls[0].payload == {"snmprec": "1.3.6.1.2.1.1.3.0|67|100\n"}
    assert not polls[1].ok and polls[1].error == "timeout after 5 s" and polls[1].reason == "timeout"
    assert truth[0]["role"] == "origin"


def test_append_keeps_one_header(tmp_path):
    path = tmp_path / "rec.jsonl.gz"
    write_sample(path)
    w = RecordingWriter(path, SPECS)
    w.write_poll(Poll("leaf01", "snmp", 110.0, 0.4, True, payload={"snmprec": ""}))
    w.close()
    with gzip.open(path) as fh:
        lines = [json.loads(x) for x in fh.read().splitlines()]
    assert sum(1 for x in lines if x["type"] == "header") == 1
    assert len(read_polls(path)[1]) == 3


def test_torn_last_line_is_skipped_with_warning(tmp_path, caplog):
    path = tmp_path / "rec.jsonl"
    write_sample(path)
    with open(path, "ab") as fh:
        fh.write(b'{"type": "poll", "target": "leaf01", "sou')
    _, polls, _ = read_polls(path)
    assert len(polls) == 2
    assert "torn last line" in caplog.text


def test_gzip_cut_short_keeps_complete_lines(tmp_path, caplog):
    path = tmp_path / "rec.jsonl.gz"
    w = RecordingWriter(path, SPECS)
    for i in range(50):
        w.write_poll(Poll("leaf01", "snmp", 100.0 + i, 0.1, True, payload={"snmprec": "x" * 200}))
    data = path.read_bytes()  # as left by a crash: no gzip trailer, cut mid-stream
    w.close()
    cut = tmp_path / "cut.jsonl.gz"
    cut.write_bytes(data[: len(data) - 7])
    _, polls, _ = read_polls(cut)
    assert 40 <= len(polls) <= 50


def test_unknown_version_is_refused(tmp_path):
    path = tmp_path / "v9.jsonl"
    path.write_text(json.dumps({"type": "header", "format": "fabricmon-recording", "version": 9, "targets": []}) + "\n")
    with pytest.raises(RecordingError, match=r"v9.jsonl: recording version 9 is not supported"):
        read_header(path)


def test_malformed_line_names_file_and_line(tmp_path):
    path = tmp_path / "bad.jsonl"
    write_sample(path)
    lines = path.read_text().splitlines()
    lines.insert(2, "{not json")
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(RecordingError, match=r"bad.jsonl:3: malformed line"):
        read_polls(path)


def test_bad_poll_fields_name_the_line(tmp_path):
    path = tmp_path / "bad.jsonl"
    write_sample(path)
    with open(path, "a") as fh:
        fh.write(json.dumps({"type": "poll", "target": "x", "source": "snmp", "ok": True}) + "\n")
    with pytest.raises(RecordingError, match=r"bad.jsonl:6: malformed poll line"):
        read_polls(path)


def test_unknown_line_types_are_skipped(tmp_path):
    path = tmp_path / "fwd.jsonl"
    write_sample(path)
    with open(path, "a") as fh:
        fh.write(json.dumps({"type": "future-thing", "x": 1}) + "\n")
    assert len(read_polls(path)[1]) == 2


def test_not_a_recording(tmp_path):
    path = tmp_path / "x.jsonl"
    path.write_text('{"type": "poll"}\n')
    with pytest.raises(RecordingError, match="not a fabricmon recording"):
        read_header(path)


def _lenient(path) -> tuple[list[dict], ReadReport]:
    report = ReadReport()
    return [line for _, line in iter_lines(path, report)], report


@pytest.mark.parametrize("name", ["rec.jsonl", "rec.jsonl.gz"])
def test_new_recordings_are_private(tmp_path, name):
    """Issue 20 item 9: recordings carry raw device payloads; created 0600 whatever the umask."""
    old = os.umask(0o022)
    try:
        write_sample(tmp_path / name)
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / name).stat().st_mode) == 0o600


def test_plain_text_named_gz_is_read_with_a_warning(tmp_path):
    write_sample(tmp_path / "rec.jsonl")
    misnamed = tmp_path / "misnamed.jsonl.gz"
    misnamed.write_bytes((tmp_path / "rec.jsonl").read_bytes())
    lines, report = _lenient(misnamed)
    assert len(lines) == 5 and report.skipped == 0
    assert report.warnings == [f"{misnamed}: named .gz but not gzip-compressed; reading it as plain text"]


def test_bad_gzip_checksum_is_named(tmp_path):
    path = tmp_path / "rec.jsonl.gz"
    write_sample(path)
    raw = bytearray(path.read_bytes())
    raw[-8] ^= 0xFF  # the CRC32 in the gzip trailer
    path.write_bytes(bytes(raw))
    lines, report = _lenient(path)
    assert report.skipped == 1 and "bad gzip checksum" in report.examples[0], report.examples
    assert lines[0]["type"] == "header"


def test_truncated_gzip_is_named_and_counted(tmp_path):
    path = tmp_path / "rec.jsonl.gz"
    write_sample(path)
    raw = path.read_bytes()
    path.write_bytes(raw[:-8])  # trailer gone: the stream ends before its end marker
    lines, report = _lenient(path)
    assert report.skipped == 1 and "truncated gzip" in report.examples[0], report.examples
    assert len(lines) == 5  # every line was complete before the trailer


def test_malformed_lines_are_skipped_and_counted_when_lenient(tmp_path):
    path = tmp_path / "bad.jsonl"
    write_sample(path)
    lines = path.read_text().splitlines()
    lines[2:2] = ["{not json", "[1, 2]"]
    path.write_text("\n".join(lines) + "\n")
    good, report = _lenient(path)
    assert len(good) == 5
    assert report.examples == [f"{path}:3: malformed line: not a JSON object with a \"type\"",
                               f"{path}:4: malformed line: not a JSON object with a \"type\""]


@pytest.mark.parametrize(("field", "value", "message"), [
    ("reason", ["timeout"], "reason must be a string, not list"),
    ("ok", "false", 'ok must be true or false, not "false"'),
    ("t", 1e18, "not a Unix time between 1970 and 2100"),
    ("t", None, "t must be a number, not NoneType"),
    ("target", "", "target must be a non-empty string"),
    ("duration_s", -1, "duration_s cannot be negative"),
])
def test_mistyped_poll_fields_are_data_errors(field, value, message):
    line = {"type": "poll", "target": "x", "source": "snmp", "t": 100.0, "ok": False, "error": "e", field: value}
    with pytest.raises(RecordingError, match=rf"r.jsonl:7: malformed poll line: .*{message}"):
        poll_from_line("r.jsonl", 7, line)


def test_unwritable_record_out_is_a_message(tmp_path, capsys):
    from fabricmon.agent.cli import main

    cfg = tmp_path / "f.yml"
    cfg.write_text("targets: []\n")
    (tmp_path / "file").write_text("a file, not a folder")  # unwritable as a parent, for root too
    code = main(["record", "--config.file", str(cfg), "--out", str(tmp_path / "file" / "x.jsonl"), "--duration", "1s"])
    err = capsys.readouterr().err
    assert code == 2 and f"error: cannot record to {tmp_path / 'file' / 'x.jsonl'}: " in err and "Traceback" not in err
