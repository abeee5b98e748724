"""Persisted agent state: active findings and the last counter readings, across restarts.

Without it a restart forgets every series: the first poll after it has no delta (an
interval lost), a counter whose total had absorbed resets drops back to the device value
(Prometheus sees a counter reset), and every active finding starts again with a new start
time. With it, the first poll after a restart gives the delta over the whole downtime
(measured on the device clock when the source has one, so a device reboot in between is
still detected), totals continue, and findings keep their start.

File: ``<state_dir>/state.json.gz`` (gzip JSON, format ``fabricmon-state`` version 1),
written atomically (temporary file, fsync, rename, fsync of the directory) on shutdown and
every :data:`SAVE_INTERVAL` seconds. What the counters are is the store's business
(:meth:`CounterStore.save`/``restore``); this module handles the file: format, atomic
write, age, and the limits a file read at start-up must respect. A missing, corrupt,
oversized, too deeply nested, other-version or ill-typed file is logged once (naming the
file and what was wrong) and ignored: the agent starts fresh, never fails to start.

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
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fabricmon.agent.detector import Detector
from fabricmon.agent.exporter.exposition import Family
from fabricmon.agent.gcpause import gc_paused
from fabricmon.agent.store import CounterStore, valid_text
from fabricmon.core.model import Finding
from fabricmon.core.vocabulary import NAMESPACE

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


# ---------------------------------------------------------------------- the directory
# Who owns the state directory: the user the agent runs as, mode 0700, which is what systemd's
# StateDirectory= gives a unit (created before ExecStartPre=, owned by its User= or DynamicUser=,
# StateDirectoryMode=0700 in the shipped units). So the agent creates a missing directory only
# when it runs as an ordinary user, who then owns it, and says so in the log; as root it never
# does: a root-owned directory left by a manual run is one the service user cannot write.
DIR_MODE = 0o700


def _user() -> str:
    try:
        import pwd

        return f"{pwd.getpwuid(os.geteuid()).pw_name} (uid {os.geteuid()})"
    except (ImportError, KeyError):
        return f"uid {os.geteuid()}"


def dir_problem(state_dir: str) -> tuple[str | None, str | None]:
    """(error, note) about ``state_dir`` before the agent starts, without changing anything:
    an error when it cannot be used or created with the right owner; a note when ``fabricmon
    run`` will create it."""
    p = Path(state_dir)
    if p.is_dir():
        if not os.access(p, os.W_OK | os.X_OK):
            return f"state_dir {p} is not writable by {_user()}", None
        return None, None
    if p.exists() or p.is_symlink():
        return f"state_dir {p} is not a directory", None
    if os.geteuid() == 0:
        return (f"state_dir {p} does not exist, and fabricmon does not create it as root: create it for the user that "
                f"runs the agent (install -d -m 0700 -o USER {p}), or under systemd leave state_dir unset and let "
                "StateDirectory= create it"), None
    parent = p.parent
    if not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK):
        return f"state_dir {p} does not exist, and {_user()} cannot create it in {parent}", None
    return None, f"state_dir {p} does not exist: fabricmon run creates it, owned by {_user()}, mode 0700"


def prepare_dir(state_dir: str) -> str | None:
    """Make ``state_dir`` ready at start (:func:`dir_problem`'s rules): None when it can be used
    (created, and logged, when missing), else the error."""
    error, note = dir_problem(state_dir)
    if error is not None:
        return error
    if note is not None:
        try:
            Path(state_dir).mkdir(mode=DIR_MODE)
        except OSError as exc:
            return f"state_dir {state_dir}: cannot create it: {exc.strerror or exc}"
        log.info("created the state directory %s, owned by %s, mode 0700", state_dir, _user())
    return None


# ---------------------------------------------------------------------- limits
# A state file is ours, but it sits on a disk others can write and may be truncated,
# hand-edited or crafted: reading it must never stop the agent from starting.
MAX_FILE_BYTES = 256 << 20  # decompressed JSON; about 1 M series (~200 B each) plus findings
MAX_DEPTH = 16  # the format nests 5 levels; a finding's evidence a few more
MAX_EVIDENCE_CHARS = 64 << 10  # per finding, as JSON
SEVERITIES = ("warning", "critical")


# ---------------------------------------------------------------------- snapshot
def _finding_to_json(f: Finding) -> dict[str, Any]:
    d = f.to_json()
    d["rule"] = f.rule
    d["peer_device"] = f.peer_device
    d["peer_port"] = f.peer_port
    return d


def _opt_text(d: dict[str, Any], key: str, i: int) -> str | None:
    v = d.get(key)
    return None if v is None else valid_text(v, f"findings[{i}].{key}")


def _depth(obj: Any) -> int:
    """Nesting depth of decoded JSON, iteratively (a deep document must not recurse here)."""
    deepest, stack = 0, [(obj, 1)]
    while stack:
        o, d = stack.pop()
        if isinstance(o, dict | list):
            deepest = max(deepest, d)
            if deepest > MAX_DEPTH:
                return deepest
            stack.extend((x, d + 1) for x in (o.values() if isinstance(o, dict) else o))
    return deepest


def _finding_from_json(d: Any, i: int) -> Finding:
    """A persisted finding, every field checked: the restored finding is rendered on ``/``
    and ``/metrics``, so a wrong type there would break every page, not only the load."""
    if not isinstance(d, dict):
        raise StateError(f"findings[{i}] must be an object")
    severity = d.get("severity")
    if severity not in SEVERITIES:
        raise StateError(f"findings[{i}].severity must be one of {', '.join(SEVERITIES)}, not {severity!r:.40}")
    priority = d.get("priority")
    if priority is not None and (not isinstance(priority, int) or isinstance(priority, bool) or not 0 <= priority <= 7):
        raise StateError(f"findings[{i}].priority must be an integer 0..7 or null, not {priority!r:.40}")
    start = d.get("start")
    if not isinstance(start, int | float) or isinstance(start, bool) or not 0 <= start < 1e11:
        raise StateError(f"findings[{i}].start must be a Unix time, not {start!r:.40}")
    evidence = d.get("evidence") or {}
    if not isinstance(evidence, dict) or not all(isinstance(k, str) for k in evidence):
        raise StateError(f"findings[{i}].evidence must be an object")
    try:
        size = len(json.dumps(evidence))
    except (TypeError, ValueError, UnicodeEncodeError) as exc:
        raise StateError(f"findings[{i}].evidence cannot be rendered: {exc}") from None
    if size > MAX_EVIDENCE_CHARS:
        raise StateError(f"findings[{i}].evidence is {size} characters (limit {MAX_EVIDENCE_CHARS})")
    try:
        json.dumps(evidence, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        raise StateError(f"findings[{i}].evidence holds a lone surrogate") from None
    return Finding(
        kind=valid_text(d.get("kind"), f"findings[{i}].kind"), severity=severity,
        device=valid_text(d.get("device"), f"findings[{i}].device"),
        port=_opt_text(d, "port", i), priority=priority, role=_opt_text(d, "role", i), start=float(start), end=None,
        summary=valid_text(d.get("summary", ""), f"findings[{i}].summary"), evidence=dict(evidence),
        peer_device=_opt_text(d, "peer_device", i), peer_port=_opt_text(d, "peer_port", i),
        rule=valid_text(d.get("rule", ""), f"findings[{i}].rule"),
    )


def snapshot(store: CounterStore, detector: Detector, now: float | None = None) -> dict[str, Any]:
    """A JSON-able copy of what to persist (cheap: plain lists; call it in the event loop)."""
    return {
        "format": FORMAT,
        "version": VERSION,
        "saved_at": time.time() if now is None else now,
        "findings": [_finding_to_json(f) for f in detector.active],
        **store.save(),
    }


def encode(snap: dict[str, Any]) -> bytes:
    return gzip.compress(json.dumps(snap, separators=(",", ":")).encode(), compresslevel=1)


def _tmp_prefix(path: Path) -> str:
    return f".{path.name}.tmp-"


def remove_stale_temp_files(path: Path) -> int:
    """Delete temporary files a crashed save left beside ``path``; returns how many."""
    n = 0
    with contextlib.suppress(OSError):
        for p in path.parent.iterdir():
            if p.name.startswith(_tmp_prefix(path)):
                with contextlib.suppress(OSError):
                    p.unlink()
                    n += 1
    return n


def write_atomic(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` so a crash leaves either the old file or the new one.

    The temporary file is created with O_EXCL|O_NOFOLLOW in the state directory: a file or
    symlink planted under its name makes the save fail instead of writing through it. The
    directory must exist (:func:`prepare_dir` at start): a save never creates it.
    """
    tmp = path.with_name(f"{_tmp_prefix(path)}{os.getpid()}-{next(_tmp_seq)}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)  # a planted name: FileExistsError
    try:
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
def _read_bounded(path: Path) -> bytes:
    """The file's JSON bytes, decompressed when gzip, never more than MAX_FILE_BYTES (a gzip
    bomb stops at the cap instead of filling memory)."""
    with path.open("rb") as raw:
        head = raw.read(2)
        raw.seek(0)
        fh: Any = gzip.GzipFile(fileobj=raw) if head == b"\x1f\x8b" else raw
        data = fh.read(MAX_FILE_BYTES + 1)
    if len(data) > MAX_FILE_BYTES:
        raise StateError(f"{path}: state is larger than {MAX_FILE_BYTES >> 20} MiB decompressed")
    return data


def read(path: Path) -> dict[str, Any] | None:
    """The decoded state, None when there is no file; StateError when it cannot be used."""
    try:
        text = _read_bounded(path)
    except FileNotFoundError:
        return None
    except (EOFError, gzip.BadGzipFile, zlib.error) as exc:
        raise StateError(f"{path}: corrupt state file: {exc}") from None
    except OSError as exc:
        raise StateError(f"{path}: cannot read: {exc.strerror or exc}") from None
    try:
        data = json.loads(text)
    except RecursionError:
        raise StateError(f"{path}: corrupt state file: nested deeper than {MAX_DEPTH} levels") from None
    except ValueError as exc:
        raise StateError(f"{path}: corrupt state file: {exc}") from None
    if _depth(data) > MAX_DEPTH:
        raise StateError(f"{path}: corrupt state file: nested deeper than {MAX_DEPTH} levels")
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise StateError(f"{path}: not a fabricmon state file")
    if data.get("version") != VERSION:
        raise StateError(f"{path}: state format version {data.get('version')!r:.40}, this fabricmon reads version {VERSION}")
    return data


def restore(data: dict[str, Any], store: CounterStore, detector: Detector, now: float | None = None) -> tuple[int, int]:
    """Put a read state into an empty store and detector; returns (series, findings) restored.

    Raises StateError when the content is malformed; the caller then starts fresh (the
    store is only touched once everything parsed).
    """
    now = time.time() if now is None else now
    saved_at = data.get("saved_at", 0.0)
    if not isinstance(saved_at, int | float) or isinstance(saved_at, bool):
        raise StateError(f"saved_at must be a Unix time, not {saved_at!r:.40}")
    findings_in = data.get("findings", [])
    if not isinstance(findings_in, list):
        raise StateError("findings must be a list")
    fresh = float(saved_at) >= now - store.stale_after
    try:
        findings = [_finding_from_json(f, i) for i, f in enumerate(findings_in)] if fresh else []
        n_series = store.restore(data, now)
    except ValueError as exc:
        raise StateError(f"malformed state content: {exc}") from None
    detector.restore(findings)
    return n_series, len(findings)


def load_into(path: Path, store: CounterStore, detector: Detector) -> bool:
    """Read and restore; logs one warning and returns False on any problem (never raises for a bad file)."""
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


@dataclass(frozen=True, slots=True)
class StateStatus:
    """What :meth:`StateKeeper.status` reports."""

    saves: int  # saves that succeeded
    save_errors: int  # saves that failed (the last good file stays)


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
        self.save_errors = 0  # failed writes (exported as fabricmon_state_save_errors_total)

    def status(self) -> StateStatus:
        return StateStatus(self.saves, self.save_errors)

    def families(self) -> list[Family]:
        fam = Family(f"{NAMESPACE}_state_save_errors_total", "counter",
                     "Saves of the agent state file that failed (disk full, permissions, a planted file).")
        fam.add("", self.status().save_errors)
        return [fam]

    def load(self) -> bool:
        n = remove_stale_temp_files(self.path)
        if n:
            log.info("removed %d stale temporary file(s) of %s", n, self.path)
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
        # Snapshot and encoding build millions of acyclic lists: with the cyclic collector paused
        # they cost 5-7x less (30,000 ports: snapshot 9.5 s -> 1.4-1.9 s on a loaded 2-core
        # machine), which is what keeps the final save at shutdown inside TimeoutStopSec.
        with gc_paused():
            snap = snapshot(self.store, self.detector)
        t0 = time.perf_counter()
        self._write = asyncio.ensure_future(asyncio.to_thread(self._encode_and_write, snap))
        try:
            await asyncio.shield(self._write)
        except OSError as exc:
            self.save_errors += 1
            log.error("cannot save state to %s: %s", self.path, exc.strerror or exc)
            return False
        self.saves += 1
        log.debug("state saved to %s in %.3f s", self.path, time.perf_counter() - t0)
        return True

    def _encode_and_write(self, snap: dict[str, Any]) -> None:
        with gc_paused():
            data = encode(snap)
        write_atomic(self.path, data)

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
