"""fabricmon.agent.state: persisted series and findings; restarts give correct deltas, continued totals, kept start times."""

from __future__ import annotations

import asyncio
import gzip
import json
import logging
import time

import pytest

from fabricmon.agent import state
from fabricmon.agent.detector import DetectContext, Detector
from fabricmon.agent.detector.rules.link_flap import LinkFlapRule
from fabricmon.agent.store import CLOCK, OK, RESET, WRAP, CounterStore
from fabricmon.core.model import Sample
from fabricmon.core.topology import Topology

T0 = time.time() - 100.0  # recent: inside stale_after (set again before each test: see _recent)


@pytest.fixture(autouse=True)
def _recent(monkeypatch):
    """T0 100 s before the test, not before collection: a long suite run reaches these tests
    more than stale_after (600 s) after collection, and the restore then rightly drops it all."""
    monkeypatch.setitem(globals(), "T0", time.time() - 100.0)


@pytest.fixture(autouse=True)
def _recent_t0() -> None:
    """T0 is recent for each test when it runs, not when the module was collected: a whole suite
    run takes longer than stale_after (600 s), and state older than that is rightly dropped."""
    global T0
    T0 = time.time() - 100.0


def _store() -> CounterStore:
    return CounterStore(history=4, stale_after=600.0)


def _detector() -> Detector:
    return Detector([LinkFlapRule()])


def _poll(store: CounterStore, det: Detector, t: float, xmit: int, downed: int, uptime: float | None = None) -> None:
    samples = [Sample("sw1", "3", "tx_bytes", xmit, bits=32), Sample("sw1", "3", "link_downed", downed, bits=32)]
    touched = store.update(samples, t, {"sw1": uptime} if uptime is not None else None, target="snmp-sw1")
    det.run(DetectContext(store, Topology(), t, touched, {"sw1"}))


def _roundtrip(tmp_path, store, det) -> tuple[CounterStore, Detector]:
    path = state.state_path(tmp_path)
    assert state.save(path, store, det) > 0
    store2, det2 = _store(), _detector()
    assert state.load_into(path, store2, det2)
    return store2, det2


def test_restart_continues_deltas_totals_and_findings(tmp_path):
    store, det = _store(), _detector()
    _poll(store, det, T0, 4_000_000_000, 5, uptime=1000.0)
    _poll(store, det, T0 + 10, 1_000, 6, uptime=1010.0)  # Counter32 wrap, and one link down -> finding
    assert store.get("sw1", "3", "tx_bytes").status == WRAP
    [finding] = det.active
    total_before = store.get("sw1", "3", "tx_bytes").total
    assert total_before == 4_000_000_000 + (1_000 + 2**32 - 4_000_000_000)

    store2, det2 = _roundtrip(tmp_path, store, det)
    se = store2.get("sw1", "3", "tx_bytes")
    assert se.total == total_before and se.delta is None and se.value == 1_000
    assert [f.start for f in det2.active] == [finding.start] == [T0 + 10]
    assert store2.ports[("sw1", "3")].target == "snmp-sw1"

    # First poll after the restart: 20 s later on the device clock, 3000 more bytes -> 150 B/s, not a spike.
    _poll(store2, det2, T0 + 30, 4_000, 6, uptime=1030.0)
    se = store2.get("sw1", "3", "tx_bytes")
    assert se.status == OK and se.delta == 3_000 and se.rate == pytest.approx(150.0)
    assert se.total == total_before + 3_000
    assert det2.active[0].start == T0 + 10  # still the same finding, same start


def test_device_reboot_while_down_is_still_seen(tmp_path):
    store, det = _store(), _detector()
    _poll(store, det, T0, 50_000, 0, uptime=5000.0)
    store2, det2 = _roundtrip(tmp_path, store, det)
    _poll(store2, det2, T0 + 60, 20, 0, uptime=30.0)  # the device clock went back: it rebooted
    se = store2.get("sw1", "3", "tx_bytes")
    assert se.status == CLOCK and se.rate is None and se.total == 50_000


def test_a_reset_absorbed_before_the_restart_stays_absorbed(tmp_path):
    store, det = _store(), _detector()
    _poll(store, det, T0, 1_000_000_000, 0)
    _poll(store, det, T0 + 10, 10, 0)  # cleared: far more than half the range -> reset, total kept
    assert store.get("sw1", "3", "tx_bytes").status == RESET
    store2, det2 = _roundtrip(tmp_path, store, det)
    _poll(store2, det2, T0 + 20, 110, 0)
    assert store2.get("sw1", "3", "tx_bytes").total == 1_000_000_000 + 100  # Prometheus never sees it go down


def test_stale_series_and_findings_are_not_restored(tmp_path):
    store, det = _store(), _detector()
    old = time.time() - 5000
    _poll(store, det, old, 1, 1)
    _poll(store, det, old + 10, 2, 2)
    assert det.active
    snap = state.snapshot(store, det, now=old + 10)
    store2, det2 = _store(), _detector()
    assert state.restore(snap, store2, det2) == (0, 0)
    assert not store2.ports and not det2.active


@pytest.mark.parametrize("content", [
    b"\x1f\x8b\x08\x00garbage",  # truncated gzip
    b"{not json",
    json.dumps({"format": "something-else", "version": 1}).encode(),
    json.dumps({"format": "fabricmon-state", "version": 99}).encode(),
    json.dumps({"format": "fabricmon-state", "version": 1, "saved_at": time.time(), "ports": [["only", "three", "items"]]}).encode(),
    json.dumps({"format": "fabricmon-state", "version": 1, "saved_at": time.time(), "device_clocks": [1, 2]}).encode(),
    json.dumps([1, 2, 3]).encode(),
])
def test_bad_state_files_are_logged_and_ignored(tmp_path, caplog, content):
    path = state.state_path(tmp_path)
    path.write_bytes(gzip.compress(content) if content[:1] == b"{" else content)
    store, det = _store(), _detector()
    with caplog.at_level(logging.WARNING, logger="fabricmon.agent.state"):
        assert state.load_into(path, store, det) is False
    assert f"ignoring saved state: {path}:" in caplog.text
    assert not store.ports and not det.active


def test_missing_file_is_fine(tmp_path):
    assert state.load_into(state.state_path(tmp_path / "nothing-yet"), _store(), _detector()) is False


def test_atomic_write_leaves_one_private_file(tmp_path):
    store, det = _store(), _detector()
    _poll(store, det, T0, 1, 0)
    (tmp_path / "sub").mkdir(mode=0o700)
    path = state.state_path(tmp_path / "sub")
    state.save(path, store, det)
    state.save(path, store, det)
    assert [p.name for p in path.parent.iterdir()] == [state.FILENAME]
    assert path.stat().st_mode & 0o777 == 0o600


def test_default_state_dir(monkeypatch):
    monkeypatch.setenv("STATE_DIRECTORY", "/var/lib/fabricmon:/var/lib/other")
    assert state.default_state_dir(None) == "/var/lib/fabricmon"
    assert state.default_state_dir("/srv/fm") == "/srv/fm"
    monkeypatch.delenv("STATE_DIRECTORY")
    assert state.default_state_dir(None) is None


async def test_keeper_saves_periodically_and_at_close(tmp_path):
    store, det = _store(), _detector()
    path = state.state_path(tmp_path)
    keeper = state.StateKeeper(path, store, det, interval=0.05)
    keeper.start()
    for _ in range(100):
        if keeper.saves:
            break
        await asyncio.sleep(0.02)
    assert keeper.saves >= 1 and path.exists()
    _poll(store, det, T0, 42, 0)
    await keeper.close()
    data = state.read(path)
    assert data.meta["ports"][0][:2] == ["sw1", "3"]


async def test_the_final_save_has_a_deadline(tmp_path, monkeypatch, caplog):
    """A stop never waits past the deadline for a slow disk; the previous file stays."""
    import time as time_mod

    store, det = _store(), _detector()
    _poll(store, det, T0, 1, 0)
    path = state.state_path(tmp_path)
    state.save(path, store, det)
    before = path.read_bytes()
    monkeypatch.setattr(state, "write_atomic", lambda p, write, order=None: time_mod.sleep(3))  # a dead NFS server
    keeper = state.StateKeeper(path, store, det)
    t0 = time_mod.monotonic()
    with caplog.at_level(logging.ERROR, logger="fabricmon.agent.state"):
        await keeper.close(deadline=0.5)
    assert time_mod.monotonic() - t0 < 2.0
    assert keeper.save_errors == 1 and "did not finish within" in caplog.text
    assert path.read_bytes() == before


async def test_the_snapshot_is_taken_where_the_keeper_is_told(tmp_path):
    """The live agent passes its pipeline worker: the store is read there, never while it changes."""
    import threading

    store, det = _store(), _detector()
    _poll(store, det, T0, 1, 0)
    seen: list[str] = []

    async def run(fn):
        seen.append(threading.current_thread().name)
        return await asyncio.to_thread(fn)

    keeper = state.StateKeeper(state.state_path(tmp_path), store, det, run=run)
    assert await keeper.save()
    assert seen and state.read(state.state_path(tmp_path)).meta["ports"][0][:2] == ["sw1", "3"]


def test_a_large_file_is_compressed_as_two_members(tmp_path, monkeypatch):
    monkeypatch.setattr(state, "PARALLEL_ABOVE", 1)
    store, det = _store(), _detector()
    _poll(store, det, T0, 1, 0)
    _poll(store, det, T0 + 10, 2, 1)
    store2, _det2 = _roundtrip(tmp_path, store, det)
    assert store2.get("sw1", "3", "tx_bytes").total == store.get("sw1", "3", "tx_bytes").total
    assert state.state_path(tmp_path).read_bytes().count(b"\x1f\x8b\x08") >= 2


def test_an_older_write_that_ends_last_is_dropped(tmp_path):
    path = state.state_path(tmp_path)
    order = state.RenameOrder()
    old, new = order.ticket(), order.ticket()
    assert state.write_atomic(path, lambda fh: fh.write(b"new"), (order, new)) == 3
    assert state.write_atomic(path, lambda fh: fh.write(b"old"), (order, old)) == 0  # the slow periodic save
    assert path.read_bytes() == b"new" and [p.name for p in tmp_path.iterdir()] == [state.FILENAME]


def test_a_short_history_image_restores_the_last_points(tmp_path):
    store, det = _store(), _detector()
    for i in range(6):
        _poll(store, det, T0 + 10 * i, 100 * i, 0)
    full = store.get("sw1", "3", "tx_bytes").history
    snap = state.snapshot(store, det, history=2)
    path = state.state_path(tmp_path)
    state.write_atomic(path, lambda fh: state.encode_to(fh, snap))
    store2, det2 = _store(), _detector()
    assert state.load_into(path, store2, det2)
    se = store2.get("sw1", "3", "tx_bytes")
    assert se.history == full[-2:] and se.total == store.get("sw1", "3", "tx_bytes").total


# ---------------------------------------------------------------- the state directory (issue 31)
def test_a_missing_state_dir_is_created_for_an_ordinary_user_and_logged(tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(state.os, "geteuid", lambda: 4242)
    d = tmp_path / "state"
    error, note = state.dir_problem(str(d))
    assert error is None and note.startswith(f"state_dir {d} does not exist: fabricmon run creates it, owned by ") and "mode 0700" in note
    assert not d.exists()  # dir_problem (check-config) changes nothing
    with caplog.at_level(logging.INFO, logger="fabricmon.agent.state"):
        assert state.prepare_dir(str(d)) is None
    assert d.is_dir() and d.stat().st_mode & 0o777 == 0o700
    assert f"created the state directory {d}" in caplog.text
    assert state.dir_problem(str(d)) == (None, None)


def test_root_never_creates_a_state_dir(tmp_path, monkeypatch):
    monkeypatch.setattr(state.os, "geteuid", lambda: 0)
    d = tmp_path / "state"
    error = state.prepare_dir(str(d))
    assert error is not None and error.startswith(f"state_dir {d} does not exist, and fabricmon does not create it as root")
    assert "StateDirectory=" in error and not d.exists()


@pytest.mark.parametrize("what", ["file", "no-parent"])
def test_a_state_dir_that_cannot_be_used_is_an_error(tmp_path, monkeypatch, what):
    monkeypatch.setattr(state.os, "geteuid", lambda: 4242)
    d = tmp_path / "state"
    if what == "file":
        d.write_text("x")
        assert state.dir_problem(str(d))[0] == f"state_dir {d} is not a directory"
    else:
        d = tmp_path / "missing-parent" / "state"
        assert state.dir_problem(str(d))[0].startswith(f"state_dir {d} does not exist, and ")


def test_a_save_does_not_create_the_directory(tmp_path):
    with pytest.raises(FileNotFoundError):
        state.save(state.state_path(tmp_path / "never-made"), _store(), _detector())
    assert not (tmp_path / "never-made").exists()


def test_run_refuses_a_missing_state_dir_as_root_before_starting(tmp_path, monkeypatch, capsys):
    from fabricmon.agent.cli import main

    monkeypatch.setattr(state.os, "geteuid", lambda: 0)
    cfg = tmp_path / "f.yml"
    cfg.write_text(f"global:\n  state_dir: {tmp_path / 'state'}\ntargets: []\n")
    assert main(["run", "--config.file", str(cfg)]) == 1
    assert f"{cfg}: state_dir {tmp_path / 'state'} does not exist, and fabricmon does not create it as root" in capsys.readouterr().err


def test_record_neither_restores_nor_writes_the_daemons_state(tmp_path, monkeypatch, capsys):
    """`fabricmon record` writes a recording only: the state file of a daemon using the same
    config (state_dir, or $STATE_DIRECTORY under systemd) stays as it was, and nothing is added."""
    from fabricmon.agent.cli import main
    from fabricmon.agent.recording import read_polls

    configured, systemd_dir = tmp_path / "state", tmp_path / "systemd-state"
    for d in (configured, systemd_dir):
        d.mkdir(mode=0o700)
        (d / state.FILENAME).write_bytes(b"the daemon's state")
    monkeypatch.setenv("STATE_DIRECTORY", str(systemd_dir))
    out = tmp_path / "rec.jsonl"
    for state_dir in (configured, None):
        cfg = tmp_path / "f.yml"
        glob = "global:\n  poll_interval: 200ms\n" + (f"  state_dir: {state_dir}\n" if state_dir else "")
        cfg.write_text(glob + f"targets:\n  - {{name: gpu01, source: host, sysfs_root: {tmp_path / 'no-sysfs'}, ethtool: false, dcb: false}}\n")
        assert main(["record", "--config.file", str(cfg), "--out", str(out), "--duration", "1s"]) == 0, capsys.readouterr().err
    assert len(list(read_polls(out))) >= 2  # both runs polled (and failed: no sysfs here) and recorded
    for d in (configured, systemd_dir):
        assert [p.name for p in d.iterdir()] == [state.FILENAME]
        assert (d / state.FILENAME).read_bytes() == b"the daemon's state"
