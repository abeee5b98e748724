"""A state file never prevents start-up: hostile or broken content is dropped with one warning
naming the file and what was wrong, and the agent starts fresh. One test per attack."""

from __future__ import annotations

import gzip
import itertools
import json
import logging
import os
import time

import pytest

from fabricmon.agent import state
from fabricmon.agent.detector import DetectContext, Detector
from fabricmon.agent.detector.rules.link_flap import LinkFlapRule
from fabricmon.agent.store import CounterStore
from fabricmon.core.model import Sample
from fabricmon.core.topology import Topology


def _fresh() -> tuple[CounterStore, Detector]:
    return CounterStore(history=4, stale_after=600.0), Detector([LinkFlapRule()])


def _good_snapshot() -> state.Snapshot:
    """A real snapshot: one series and one active finding, saved now."""
    store, det = _fresh()
    t = time.time() - 20
    for i, (tx, downed) in enumerate([(1, 0), (2, 1), (3, 2)]):
        touched = store.update([Sample("sw1", "3", "tx_bytes", tx, bits=32), Sample("sw1", "3", "link_downed", downed, bits=32)],
                               t + 5 * i, target="snmp-sw1")
        det.run(DetectContext(store, Topology(), t + 5 * i, touched, {"sw1"}))
    assert det.active
    return state.snapshot(store, det)


def _load(tmp_path, caplog, raw: bytes) -> str:
    """Write ``raw`` as the state file, load it into a fresh agent, return the one warning."""
    path = state.state_path(tmp_path)
    path.write_bytes(raw)
    store, det = _fresh()
    with caplog.at_level(logging.WARNING, logger="fabricmon.agent.state"):
        assert state.load_into(path, store, det) is False
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1, warnings
    assert str(path) in warnings[0]
    assert not store.ports and not det.active and store.series_count() == 0
    return warnings[0]


def _finding_with(**change) -> bytes:
    snap = _good_snapshot()
    snap.meta["findings"][0].update(change)
    return state.encode(snap)


def test_the_good_snapshot_loads(tmp_path):
    path = state.state_path(tmp_path)
    path.write_bytes(state.encode(_good_snapshot()))
    store, det = _fresh()
    assert state.load_into(path, store, det) is True
    assert store.series_count() == 2 and len(det.active) == 1


def test_deep_nesting_beyond_the_recursion_limit(tmp_path, caplog):
    doc = b'{"format":"fabricmon-state","version":1,"x":' + b"[" * 200_000 + b"]" * 200_000 + b"}"
    assert "nested deeper" in _load(tmp_path, caplog, gzip.compress(doc))


def test_nesting_deeper_than_the_format_allows(tmp_path, caplog):
    snap = _good_snapshot()
    deep: list = []
    for _ in range(40):
        deep = [deep]
    snap.meta["findings"][0]["evidence"] = {"x": deep}
    assert "nested deeper" in _load(tmp_path, caplog, state.encode(snap))


def test_a_list_as_priority(tmp_path, caplog):
    assert "priority must be an integer" in _load(tmp_path, caplog, _finding_with(priority=[3]))


def test_an_integer_port_in_a_finding(tmp_path, caplog):
    assert "findings[0].port must be a string" in _load(tmp_path, caplog, _finding_with(port=3))


def test_a_lone_surrogate_in_a_finding_device(tmp_path, caplog):
    assert "lone surrogate" in _load(tmp_path, caplog, _finding_with(device="sw\ud800"))


def test_a_lone_surrogate_in_a_series_device(tmp_path, caplog):
    snap = _good_snapshot()
    snap.meta["ports"][0][0] = "sw\udfff"
    assert "lone surrogate" in _load(tmp_path, caplog, state.encode(snap))


def test_an_unknown_severity(tmp_path, caplog):
    assert "severity must be one of" in _load(tmp_path, caplog, _finding_with(severity={"a": 1}))


def test_non_finite_numbers_in_a_series(tmp_path, caplog):
    snap = _good_snapshot()
    snap.columns["total"][0] = float("nan")
    assert "finite number" in _load(tmp_path, caplog, state.encode(snap))


@pytest.mark.parametrize("saved_at", [float("nan"), float("inf"), -1.0, 1e18, "yesterday"])
def test_a_saved_at_that_is_not_a_time(tmp_path, caplog, saved_at):
    snap = _good_snapshot()
    snap.meta["saved_at"] = saved_at
    assert "saved_at must be a Unix time" in _load(tmp_path, caplog, state.encode(snap))


@pytest.mark.parametrize("change", [
    lambda s: s.columns.__setitem__("total", s.columns["total"][:1]),  # a column of the wrong length
    lambda s: s.meta["ports"][0].__setitem__(4, 7),  # a layout that does not exist
    lambda s: s.meta["keys"].__setitem__(0, ["x"]),  # a key without sub-labels
])
def test_inconsistent_columns_and_layouts(tmp_path, caplog, change):
    snap = _good_snapshot()
    change(snap)
    assert "ignoring saved state" in _load(tmp_path, caplog, state.encode(snap))


def test_a_column_cut_short(tmp_path, caplog):
    data = gzip.decompress(state.encode(_good_snapshot()))
    assert "cut short" in _load(tmp_path, caplog, gzip.compress(data[:-5]))


def test_a_version_1_file_still_loads(tmp_path):
    """The previous release wrote the whole store as one JSON document: an upgrade keeps it."""
    store, _det = _fresh()
    t = time.time() - 20
    store.update([Sample("sw1", "3", "tx_bytes", 7, bits=32)], t, target="snmp-sw1")
    doc = {"format": "fabricmon-state", "version": 1, "saved_at": t, "findings": [], **store.save()}
    path = state.state_path(tmp_path)
    path.write_bytes(gzip.compress(json.dumps(doc).encode()))
    store2, det2 = _fresh()
    assert state.load_into(path, store2, det2) is True
    assert store2.get("sw1", "3", "tx_bytes").value == 7


@pytest.mark.parametrize("kind", ["fifo", "device", "directory"])
def test_a_state_path_that_is_not_a_regular_file_is_refused_at_once(tmp_path, caplog, kind):
    """Issue 32: a FIFO as the state file hung start-up before /healthz, logging nothing."""
    path = state.state_path(tmp_path)
    if kind == "fifo":
        os.mkfifo(path)  # nobody ever writes to it: an open() for reading would block for ever
    elif kind == "device":
        os.symlink("/dev/zero", path)
    else:
        path.mkdir()
    store, det = _fresh()
    with caplog.at_level(logging.WARNING, logger="fabricmon.agent.state"):
        assert state.load_into(path, store, det) is False
    [warning] = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert str(path) in warning and "not a regular file" in warning


def test_a_gzip_bomb_stops_at_the_size_cap(tmp_path, caplog, monkeypatch):
    # The mechanism at a small cap (the real cap is 1 GiB): 64 MiB of zeros in ~64 KB of gzip.
    monkeypatch.setattr(state, "MAX_FILE_BYTES", 1 << 20)
    raw = gzip.compress(b"0" * (64 << 20), compresslevel=9)
    assert len(raw) < 1 << 20
    assert "larger than 1 MiB decompressed" in _load(tmp_path, caplog, raw)


def test_truncated_gzip(tmp_path, caplog):
    raw = state.encode(_good_snapshot())
    assert "corrupt state file" in _load(tmp_path, caplog, raw[: len(raw) // 2])
    caplog.clear()
    assert "truncated" in _load(tmp_path, caplog, raw[:-9])  # only the gzip trailer missing


async def test_a_planted_symlink_at_the_temp_name_fails_the_save_and_is_counted(tmp_path, monkeypatch):
    store, det = _fresh()
    path = state.state_path(tmp_path)
    victim = tmp_path / "victim"
    victim.write_text("keep me")
    monkeypatch.setattr(state, "_tmp_seq", itertools.count(7))
    os.symlink(victim, tmp_path / f".{state.FILENAME}.tmp-{os.getpid()}-7")
    keeper = state.StateKeeper(path, store, det)
    assert await keeper.save() is False
    assert keeper.save_errors == 1 and victim.read_text() == "keep me" and not path.exists()
    assert await keeper.save() is True  # the next name is free: saving goes on
    assert keeper.save_errors == 1 and path.exists()


def test_stale_temp_files_are_removed_at_start(tmp_path):
    path = state.state_path(tmp_path)
    stale = tmp_path / f".{state.FILENAME}.tmp-999-0"
    stale.write_bytes(b"half a save")
    other = tmp_path / "unrelated"
    other.write_text("x")
    store, det = _fresh()
    state.StateKeeper(path, store, det).load()
    assert not stale.exists() and other.exists()


@pytest.mark.parametrize("ports", [{"not": "a list"}, [["d", "p", "t", 1.0, [["c", [], 1, 99, False, 1.0, 1, 1, None, []]]]],
                                   [[1, "p", "t", 1.0, 0]], [["d", "p", "t", float("nan"), 0]]])
def test_ill_typed_series_records(tmp_path, caplog, ports):
    snap = _good_snapshot()
    snap.meta["ports"] = ports
    assert "malformed state content" in _load(tmp_path, caplog, state.encode(snap))


async def test_save_error_metric_is_exported(tmp_path):
    from fabricmon.agent.exporter.exposition import render

    store, det = _fresh()
    keeper = state.StateKeeper(state.state_path(tmp_path / "not-a-dir-yet" / "x"), store, det)
    (tmp_path / "not-a-dir-yet").write_text("a file where the state directory should be")
    assert await keeper.save() is False and await keeper.save() is False
    assert keeper.status().save_errors == 2
    text = render(keeper.families())[0].decode()
    assert "fabricmon_state_save_errors_total 2" in text


def test_an_empty_store_round_trips(tmp_path):
    """A version 2 file with no series has no column bytes after its header: still version 2."""
    path = state.state_path(tmp_path)
    store, det = _fresh()
    state.save(path, store, det)
    assert isinstance(state.read(path), state.Snapshot)
    assert state.load_into(path, *_fresh()) is True


def test_a_gzip_bomb_without_a_newline_stops_at_the_longest_first_line(tmp_path, caplog, monkeypatch):
    """No state file's first line is longer than a version 2 header or a whole version 1 file:
    a bomb of one endless line is refused there, long before the size cap (the mechanism at
    small limits: 1 MiB lines, a 64 MiB cap, 16 MiB of spaces)."""
    monkeypatch.setattr(state, "MAX_HEADER_BYTES", 1 << 20)
    monkeypatch.setattr(state, "V1_MAX_FILE_BYTES", 1 << 20)
    monkeypatch.setattr(state, "_INFLATE_SLICE", 1 << 18)
    monkeypatch.setattr(state, "MAX_FILE_BYTES", 64 << 20)
    assert "a header of more than 1 MiB" in _load(tmp_path, caplog, gzip.compress(b" " * (16 << 20), compresslevel=9))


def test_a_state_decompressed_in_slices_reads_back_whole(tmp_path, monkeypatch):
    """Slices far smaller than the file (and than its gzip members) give the same bytes."""
    monkeypatch.setattr(state, "_INFLATE_SLICE", 1 << 10)
    raw = state.encode(_good_snapshot())
    path = tmp_path / "s.gz"
    path.write_bytes(raw + gzip.compress(b""))  # an empty member after: gzip allows several
    assert state._decompressed(path) == gzip.decompress(raw)
