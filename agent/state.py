"""Persisted agent state: active findings and the last counter readings, across restarts.

Without it a restart forgets every series: the first poll after it has no delta (an
interval lost), a counter whose total had absorbed resets drops back to the device value
(Prometheus sees a counter reset), and every active finding starts again with a new start
time. With it, the first poll after a restart gives the delta over the whole downtime
(measured on the device clock when the source has one, so a device reboot in between is
still detected), totals continue, and findings keep their start.

File: ``<state_dir>/state.json.gz`` (gzip JSON, format ``fabricmon-state`` version 1),
written atomically (temporary file, fsync, rename, fsync of the directory) on shutdown and
every :data:`SAVE_INTERVAL` seconds. A missing, corrupt or other-version file is logged
and ignored: the agent starts fresh, it never fails to start because of it.

What is restored is bounded by the store's own forgetting rule: series not updated within
``stale_after`` of now are not restored (a running agent would have expired them), and
findings are restored only when the file is younger than ``stale_after``.
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import itertools
import json
import logging
import os
import time
from pathlib import Path
from typing import Any

from fabricmon.agent.detector import Detector
from fabricmon.agent.store import FIRST, CounterStore, PortEntry, Series
from fabricmon.core.model import Finding, Sample

log = logging.getLogger(__name__)

FORMAT = "fabricmon-state"
VERSION = 1
FILENAME = "state.json.gz"
SAVE_INTERVAL = 60.0
_tmp_seq = itertools.count()


class StateError(ValueError):
    """A state file that cannot be used (corrupt, another format or version)."""


def state_path(state_dir: str | os.PathLike[str]) -> Path:
    return Path(state_dir) / FILENAME


def default_state_dir(configured: str | None) -> str | None:
    """The configured state_dir, else systemd's ``$STATE_DIRECTORY`` (StateDirectory=), else None (no state)."""
    if configured:
        return configured
    env = os.environ.get("STATE_DIRECTORY", "")
    return env.split(":")[0] or None


# ---------------------------------------------------------------------- snapshot
def _finding_to_json(f: Finding) -> dict[str, Any]:
    d = f.to_json()
    d["rule"] = f.rule
    d["peer_device"] = f.peer_device
    d["peer_port"] = f.peer_port
    return d


def _finding_from_json(d: dict[str, Any]) -> Finding:
    return Finding(
        kind=str(d["kind"]), severity=str(d["severity"]), device=str(d["device"]), port=d.get("port"),
        priority=d.get("priority"), role=d.get("role"), start=float(d["start"]), end=None,
        summary=str(d.get("summary", "")), evidence=dict(d.get("evidence") or {}),
        peer_device=d.get("peer_device"), peer_port=d.get("peer_port"), rule=str(d.get("rule", "")),
    )


def snapshot(store: CounterStore, detector: Detector, now: float | None = None) -> dict[str, Any]:
    """A JSON-able copy of what to persist (cheap: plain lists; call it in the event loop)."""
    ports = []
    for (device, port), entry in store.ports.items():
        series = [
            [counter, list(sub), se.value, se.bits, se.saturating, se.scale, se.total, se.poll_t, se.device_t,
             [list(h) for h in se.history]]
            for (counter, sub), se in entry.series.items()
        ]
        if series:
            ports.append([device, port, entry.target, entry.seen, series])
    return {
        "format": FORMAT,
        "version": VERSION,
        "saved_at": time.time() if now is None else now,
        "findings": [_finding_to_json(f) for f in detector.active],
        "device_clocks": {d: list(v) for d, v in store._device_clock.items()},
        "ports": ports,
    }


def encode(snap: dict[str, Any]) -> bytes:
    return gzip.compress(json.dumps(snap, separators=(",", ":")).encode(), compresslevel=1)


def write_atomic(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` so a crash leaves either the old file or the new one."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}-{next(_tmp_seq)}")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    with contextlib.suppress(OSError):
        dfd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)


def save(path: Path, store: CounterStore, detector: Detector) -> int:
    """Snapshot and write synchronously; returns the bytes written. OSError is the caller's to log."""
    data = encode(snapshot(store, detector))
    write_atomic(path, data)
    return len(data)


# ---------------------------------------------------------------------- load / restore
def read(path: Path) -> dict[str, Any] | None:
    """The decoded state, None when there is no file; StateError when it cannot be used."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise StateError(f"{path}: cannot read: {exc.strerror or exc}") from None
    try:
        text = gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw
        data = json.loads(text)
    except (OSError, EOFError, ValueError) as exc:
        raise StateError(f"{path}: corrupt state file: {exc}") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise StateError(f"{path}: not a fabricmon state file")
    if data.get("version") != VERSION:
        raise StateError(f"{path}: state format version {data.get('version')!r}, this fabricmon reads version {VERSION}")
    return data


def _series(rec: list[Any], history: int) -> tuple[tuple[str, tuple[Any, ...]], Series]:
    counter, sub, value, bits, saturating, scale, total, poll_t, device_t, hist = rec
    se = Series(Sample("", "", str(counter), value, tuple(sub), int(bits), bool(saturating), float(scale)),
                float(poll_t), None if device_t is None else float(device_t))
    se.total = float(total)
    se.status = FIRST  # no delta until the next reading: the restored one is the "previous" reading
    se.history = [(float(t), float(v)) for t, v in hist][-history:] or [(float(poll_t), float(total))]
    return (str(counter), tuple(sub)), se


def restore(data: dict[str, Any], store: CounterStore, detector: Detector, now: float | None = None) -> tuple[int, int]:
    """Put a read state into an empty store and detector; returns (series, findings) restored.

    Raises StateError when the content is malformed; the caller then starts fresh (the
    store is only touched once everything parsed).
    """
    now = time.time() if now is None else now
    limit = now - store.stale_after
    try:
        entries: dict[tuple[str, str], PortEntry] = {}
        for device, port, target, seen, series in data.get("ports", []):
            entry = PortEntry(target=str(target), seen=float(seen))
            for rec in series:
                key, se = _series(rec, store.history)
                if se.poll_t >= limit:
                    entry.series[key] = se
            if entry.series:
                entries[(str(device), str(port))] = entry
        clocks = {str(d): (float(v[0]), float(v[1])) for d, v in (data.get("device_clocks") or {}).items() if float(v[1]) >= limit}
        fresh = float(data.get("saved_at", 0.0)) >= limit
        findings = [_finding_from_json(f) for f in data.get("findings", [])] if fresh else []
    except (TypeError, ValueError, KeyError, IndexError, AttributeError) as exc:
        raise StateError(f"malformed state content: {type(exc).__name__}: {exc}") from None
    store.ports.update(entries)
    store._device_clock.update(clocks)
    for (device, _port), entry in entries.items():
        store.device_seen[device] = max(store.device_seen.get(device, 0.0), entry.seen)
        if entry.target:
            store.device_target.setdefault(device, entry.target)
    detector.restore(findings)
    return sum(len(e.series) for e in entries.values()), len(findings)


def load_into(path: Path, store: CounterStore, detector: Detector) -> bool:
    """Read and restore; logs and returns False on any problem (never raises for a bad file)."""
    try:
        data = read(path)
        if data is None:
            log.info("no saved state at %s: starting fresh", path)
            return False
        n_series, n_findings = restore(data, store, detector)
    except StateError as exc:
        msg = str(exc)
        log.warning("ignoring saved state: %s", msg if str(path) in msg else f"{path}: {msg}")
        return False
    age = time.time() - float(data.get("saved_at", 0.0))
    log.info("restored state from %s (saved %.0f s ago): %d series, %d active findings", path, age, n_series, n_findings)
    return True


class StateKeeper:
    """Loads the state at start, saves it every ``interval`` seconds and once more at shutdown.

    Snapshots are taken in the event loop (consistent with the store); compressing and
    writing run in a thread. Writes never overlap, and the final save always comes last.
    """

    def __init__(self, path: Path, store: CounterStore, detector: Detector, interval: float = SAVE_INTERVAL) -> None:
        self.path = path
        self.store = store
        self.detector = detector
        self.interval = interval
        self._write: asyncio.Future[None] | None = None
        self._task: asyncio.Task[None] | None = None
        self.saves = 0

    def load(self) -> bool:
        return load_into(self.path, self.store, self.detector)

    def start(self) -> None:
        self._task = asyncio.create_task(self._periodic())

    async def _periodic(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            try:
                await self.save()
            except Exception:  # a bug here must not stop the periodic saves or the agent
                log.exception("saving state failed")

    async def save(self) -> bool:
        if self._write is not None and not self._write.done():
            return False  # the previous write is still running (a slow disk): skip this one
        snap = snapshot(self.store, self.detector)
        t0 = time.perf_counter()
        self._write = asyncio.ensure_future(asyncio.to_thread(lambda: write_atomic(self.path, encode(snap))))
        try:
            await asyncio.shield(self._write)
        except OSError as exc:
            log.error("cannot save state to %s: %s", self.path, exc.strerror or exc)
            return False
        self.saves += 1
        log.debug("state saved to %s in %.3f s", self.path, time.perf_counter() - t0)
        return True

    async def close(self) -> None:
        """Stop the periodic saves and write the final state (after any write in flight)."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self._write is not None and not self._write.done():
            with contextlib.suppress(Exception):
                await self._write
        if await self.save():
            log.info("state saved to %s", self.path)
