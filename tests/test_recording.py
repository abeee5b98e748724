"""Recording format: write, read back, gzip, torn lines, versions, malformed lines."""

from __future__ import annotations

import gzip
import json

import pytest

from fabricmon.agent.recording import RecordingError, RecordingWriter, read_header, read_polls
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
    w._fh.flush()
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
