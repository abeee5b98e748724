"""Recording reader fuzz: whatever bytes a recording file holds (plain or gzip), reading it
raises only RecordingError -- never a bare ValueError, OverflowError or RecursionError -- so
``fabricmon replay``/``eval`` name the file and line instead of crashing with a traceback.

The per-source payload parsers are fuzzed next to their collectors (tests/test_perfquery_parse.py,
test_perfquery_topology.py, test_snmp_parse.py, test_ufm_rest.py, test_ufm_telemetry_rest.py,
test_nvue_rest.py, test_host_sysfs.py); this file covers the recording lines that carry those payloads.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fabricmon.agent.recording import FORMAT, VERSION, ReadReport, RecordingError, iter_lines, read_header, read_polls
from fabricmon.agent.replay import replay_recording, specs_from_header

HEADER = {"type": "header", "format": FORMAT, "version": VERSION, "targets": [{"name": "leaf01", "source": "snmp"}]}

_scalars = st.one_of(
    st.none(), st.booleans(), st.text(max_size=12),
    st.integers(), st.integers(min_value=10**300, max_value=10**320),  # beyond float range: float() overflows
    st.floats(allow_nan=False, allow_infinity=False),
)
_json = st.recursive(_scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
                     max_leaves=12)
_poll_like = st.fixed_dictionaries(
    {"type": st.sampled_from(["poll", "truth", "note", "header", "weird"])},
    optional={"target": _json, "source": _json, "t": _json, "duration_s": _json, "ok": _json,
              "payload": _json, "error": _json, "reason": _json, "format": st.just(FORMAT), "version": _json, "targets": _json},
)


def _encode(obj: object) -> bytes:
    return json.dumps(obj).encode()


_line = st.one_of(
    _poll_like.map(_encode),
    _json.map(_encode),
    st.binary(max_size=40),  # not JSON, not UTF-8
    st.integers(1, 3000).map(lambda n: b"[" * n + b"]" * n),  # deep nesting: the JSON decoder recurses
    st.integers(1, 3000).map(lambda n: b'{"type":"poll","payload":' + b"[" * n + b"]" * n + b"}"),
    st.just(b'{"type":"poll","target":"x","source":"snmp","t":1e999,"ok":true,"payload":{}}'),
    st.just(b'{"type":"poll","target":"x","source":"snmp","t":' + b"9" * 400 + b',"ok":false}'),
)


@pytest.fixture(scope="module")
def rec_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("fuzzrec")


def _file(d: Path, name: str, raw: bytes) -> Path:
    """The one file of this example (each example overwrites the previous one's)."""
    path = d / name
    path.write_bytes(raw)
    return path


def _read_everything(path: Path) -> None:
    """Every reader entry point a command uses, strict and lenient; only RecordingError may come out."""
    try:
        report = ReadReport()
        for _ in iter_lines(path, report):
            pass
        result = replay_recording(path)
        assert result.skipped >= report.skipped  # the replay also skips mistyped poll fields
    except RecordingError:
        pass
    try:
        for _ in iter_lines(path):
            pass
        header, _polls, _truth = read_polls(path)
        specs_from_header(read_header(path), path)
        assert header.get("type") == "header"
    except RecordingError:
        pass


_settings = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@_settings
@given(body=st.binary(max_size=300), gz=st.booleans(), raw_gz_name=st.booleans())
def test_any_bytes_raise_only_recording_error(rec_dir, body, gz, raw_gz_name):
    if gz:
        path = _file(rec_dir, "rec.jsonl.gz", gzip.compress(body))
    else:  # raw_gz_name: bytes that are not gzip in a file named .gz
        path = _file(rec_dir, "rec.jsonl.gz" if raw_gz_name else "rec.jsonl", body)
    _read_everything(path)


@_settings
@given(lines=st.lists(_line, max_size=8), header=st.booleans(), newline_at_end=st.booleans(), gz=st.booleans(),
       cut=st.integers(0, 40))
def test_recording_lines_raise_only_recording_error(rec_dir, lines, header, newline_at_end, gz, cut):
    parts = ([_encode(HEADER)] if header else []) + lines
    body = b"\n".join(parts) + (b"\n" if newline_at_end else b"")
    if gz:
        raw = gzip.compress(body)
        path = _file(rec_dir, "rec.jsonl.gz", raw[: max(1, len(raw) - cut)])  # cut: the stream a crash leaves
    else:
        path = _file(rec_dir, "rec.jsonl", body)
    _read_everything(path)


@_settings
@given(targets=_json)
def test_header_targets_raise_only_recording_error(rec_dir, targets):
    path = _file(rec_dir, "rec.jsonl", _encode({**HEADER, "targets": targets}) + b"\n")
    _read_everything(path)
