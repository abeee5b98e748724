"""Persisted agent state: active findings and the last counter readings, across restarts.

Without it a restart forgets every series: the first poll after it has no delta (an
interval lost), a counter whose total had absorbed resets drops back to the device value
(Prometheus sees a counter reset), and every active finding starts again with a new start
time. With it, the first poll after a restart gives the delta over the whole downtime
(measured on the device clock when the source has one, so a device reboot in between is
still detected), totals continue, and findings keep their start.

File: ``<state_dir>/state.json.gz``, written atomically (temporary file, fsync, rename, fsync
of the directory) on shutdown and every :data:`SAVE_INTERVAL` seconds. Format
``fabricmon-state`` version 2: one gzip stream holding a JSON header line (format, version,
``saved_at``, the findings, the device clocks, the distinct series keys and port layouts, one
``[device, port, target, seen, layout]`` per port, and the manifest of the columns), then the
store's columns as raw little-endian arrays, in the manifest's order (the store's
:class:`~fabricmon.agent.store.StoreImage`). Version 1 (the whole store as one JSON document,
a Python list per series) took seconds per 100,000 ports to write and to read, longer than a
stop may last; a version 1 file is still read, once, after an upgrade.

Cost: at 100,000 ports (2.1 M series) the snapshot is a few array copies taken on the pipeline
worker (agent/worker.py: never concurrent with an ingest, never on the event loop); the
compression and the write run in a thread of their own. The final save at shutdown has a
deadline (:data:`FINAL_SAVE_DEADLINE_S`): a stop never waits past it for a slow disk, and the
previous file then stays as it was.

Reading: what the format is is the store's business (:meth:`CounterStore.restore_image`); this
module handles the file: format, atomic write, age, and the limits a file read at start-up must
respect. The file is opened like every file the agent reads (:mod:`fabricmon.core.files`: a
FIFO or a device is refused at once). A missing, corrupt, oversized, too deeply nested,
other-version or ill-typed file is logged once (naming the file and what was wrong) and
ignored: the agent starts fresh, never fails to start.

What is restored is bounded by the store's own forgetting rule: series not updated within
``stale_after`` of now are not restored (a running agent would have expired them), and
findings are restored only when the file is younger than ``stale_after``.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import itertools
import json
import logging
import math
import os
import threading
import time
import zlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from fabricmon.agent.detector import Detector
from fabricmon.agent.exporter.exposition import Family
from fabricmon.agent.gcpause import gc_paused
from fabricmon.agent.store import IMAGE_COLUMNS, CounterStore, StoreImage, valid_text
from fabricmon.core.files import FileRefused, read_regular
from fabricmon.core.model import Finding
from fabricmon.core.threads import in_daemon_thread
from fabricmon.core.vocabulary import NAMESPACE

log = logging.getLogger(__name__)
T = TypeVar("T")

FORMAT = "fabricmon-state"
VERSION = 2
FILENAME = "state.json.gz"
SAVE_INTERVAL = 60.0
# The stop budget: 5 s (issue 32; systemd's TimeoutStopSec is 15 s). The final save starts at
# SIGTERM, beside the polls' cancellation (1 s at most); the listener's close and the process's
# exit take well under half a second after it: so the save may take 3.8 s. Measured at 100,000
# ports (1.8 M series) on the shared 2-core test machine: 2.6 s (snapshot 1.3 s, write 1.3 s).
FINAL_SAVE_DEADLINE_S = 3.8
PARALLEL_ABOVE = 32 << 20  # bytes of a file above which two threads compress it
# Points of history per series the final save keeps when a full save would not fit its deadline:
# the last two give the restored series its last interval; the rules' windows refill after the
# restart. (1.8 M series: 316 MB of columns with 8 points, 144 MB with 2.)
FINAL_HISTORY = 2
SHORT_FINAL_ABOVE = 500_000  # series above which a final save with no earlier save to measure keeps FINAL_HISTORY points
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
# Decompressed bytes: the columns take about 170 B per series at history 8 (2.1 M series of
# 100,000 ports: 370 MB), so 1 GiB holds 250,000 ports; a bigger store's file is refused at
# start (the agent starts fresh) rather than taking gigabytes, and a gzip bomb stops here.
MAX_FILE_BYTES = 1 << 30
MAX_HEADER_BYTES = 256 << 20  # the JSON header line: about 60 B per port plus the findings
MAX_DEPTH = 16  # the format nests 5 levels; a finding's evidence a few more
MAX_EVIDENCE_CHARS = 64 << 10  # per finding, as JSON
SEVERITIES = ("warning", "critical")
MAX_SAVED_AT = 4102444800.0  # 2100-01-01: a later (or non-finite) saved_at is not a save time


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


@dataclass
class Snapshot:
    """What one save writes: the header's fields and the store's columns."""

    meta: dict[str, Any]  # format, version, saved_at, findings, device_clocks, keys, schemas, ports, big
    columns: dict[str, np.ndarray]


def snapshot(store: CounterStore, detector: Detector, now: float | None = None, history: int | None = None) -> Snapshot:
    """A copy of what to persist: call it where nothing changes the store meanwhile (the
    pipeline worker); the copy can then be written from any thread. ``history``: keep only the
    last that many points of each series."""
    img = store.image(history)
    meta = {
        "format": FORMAT,
        "version": VERSION,
        "saved_at": time.time() if now is None else now,
        "findings": [_finding_to_json(f) for f in detector.active],
        "device_clocks": img.device_clocks,
        "keys": img.keys,
        "schemas": img.schemas,
        "ports": img.ports,
        "big": [[row, v] for row, v in sorted(img.big.items())],
    }
    return Snapshot(meta, img.columns)


# History columns are written XOR-ed with the series' last value of the same kind (bit for bit,
# so exactly undone on reading): a series' history times are near its last poll time and its
# history totals near its last total, so their high bytes become zeros and compress several
# times faster (a 1.8 M-series history: 4.0 s of zlib on the loaded test machine, 2.3 s XOR-ed).
XOR_WITH = {"hist_t": "poll_t", "hist_v": "total"}


def _manifest(columns: dict[str, np.ndarray]) -> list[list[Any]]:
    return [[name, columns[name].dtype.str, list(columns[name].shape), *([f"xor:{XOR_WITH[name]}"] if name in XOR_WITH else [])]
            for name in IMAGE_COLUMNS]


def _xor(a: np.ndarray, base: np.ndarray) -> np.ndarray:
    """``a``'s 64-bit patterns XOR ``base``'s (one per row), as ``a``'s dtype."""
    return (np.ascontiguousarray(a).view(np.uint64) ^ np.ascontiguousarray(base).view(np.uint64)[:, None]).view(a.dtype)


def encode_to(fh: Any, snap: Snapshot) -> None:
    """Write ``snap`` as a version 2 file (see the module docstring) to binary file ``fh``.

    Large files are compressed as two gzip members at once, one per core (zlib releases the
    GIL): the header and the first columns, then the rest. A gzip file may hold any number of
    members, read as one stream: what matters for the stop deadline is that the 300 MB of a
    100,000-port store compress in half the time."""
    header = json.dumps({**snap.meta, "columns": _manifest(snap.columns)}, separators=(",", ":")).encode() + b"\n"
    parts: list[memoryview] = [memoryview(header)]
    for name in IMAGE_COLUMNS:
        a = np.ascontiguousarray(snap.columns[name])
        if name in XOR_WITH and a.size:
            a = _xor(a, snap.columns[XOR_WITH[name]])
        if a.dtype.byteorder == ">":
            a = a.byteswap().view(a.dtype.newbyteorder("<"))
        if a.size:
            parts.append(memoryview(a.reshape(-1)).cast("B"))
    total = sum(len(p) for p in parts)
    if total < PARALLEL_ABOVE:
        fh.write(_member(parts))
        return
    half, acc, cut = total / 2, 0, len(parts)
    for i, part in enumerate(parts):  # the first columns up to half the bytes, then the rest
        acc += len(part)
        if acc >= half:
            cut = i + 1
            break
    second: list[bytes] = []
    helper = threading.Thread(target=lambda: second.append(_member(parts[cut:])), name="fabricmon-state-gzip", daemon=True)
    helper.start()
    first = _member(parts[:cut])
    helper.join()
    fh.write(first)
    fh.write(second[0])


def _member(parts: list[memoryview]) -> bytes:
    """One gzip member of the parts, at level 1 (zlib releases the GIL while it compresses)."""
    z = zlib.compressobj(1, zlib.DEFLATED, 31)
    out = [z.compress(p) for p in parts]
    out.append(z.flush())
    return b"".join(out)


def encode(snap: Snapshot) -> bytes:
    buf = io.BytesIO()
    encode_to(buf, snap)
    return buf.getvalue()


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


class RenameOrder:
    """Writes that may overlap (a periodic save still writing when the final one starts) put
    their files in place in the order they were started: a slower, older one that ends last is
    dropped instead of replacing the newer file."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._seq = itertools.count()
        self._placed = -1

    def ticket(self) -> int:
        return next(self._seq)

    def place(self, ticket: int, tmp: Path, path: Path) -> bool:
        with self._lock:
            if ticket < self._placed:
                return False
            os.replace(tmp, path)
            self._placed = ticket
            return True


def write_atomic(path: Path, write: Callable[[Any], None], order: tuple[RenameOrder, int] | None = None) -> int:
    """Write a file through ``write(fh)`` so a crash leaves either the old file or the new one;
    returns the bytes written (0 when ``order`` says a newer write was put in place meanwhile).

    The temporary file is created with O_EXCL|O_NOFOLLOW in the state directory: a file or
    symlink planted under its name makes the save fail instead of writing through it. The
    directory must exist (:func:`prepare_dir` at start): a save never creates it.
    """
    tmp = path.with_name(f"{_tmp_prefix(path)}{os.getpid()}-{next(_tmp_seq)}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)  # a planted name: FileExistsError
    try:
        with os.fdopen(fd, "wb") as fh:
            write(fh)
            fh.flush()
            size = fh.tell()
            os.fsync(fh.fileno())
        if order is None:
            os.replace(tmp, path)
        elif not order[0].place(order[1], tmp, path):
            tmp.unlink()
            return 0
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
    return size


def save(path: Path, store: CounterStore, detector: Detector) -> int:
    """Snapshot and write synchronously; returns the bytes written. OSError is the caller's to log."""
    snap = snapshot(store, detector)
    return write_atomic(path, lambda fh: encode_to(fh, snap))


# ---------------------------------------------------------------------- load / restore
V1_MAX_FILE_BYTES = 256 << 20  # a version 1 file is one JSON document: decoded whole, so bounded tighter
_INFLATE_SLICE = 16 << 20  # bytes decompressed per zlib call (see _decompressed)


def _decompressed(path: Path) -> bytes:
    """The file's bytes, decompressed when gzip, never more than MAX_FILE_BYTES (a gzip bomb
    stops at the cap instead of filling memory). The file is opened without blocking and must
    be a regular file (fabricmon.core.files).

    Decompressed a slice at a time (zlib asked for the whole cap at once holds two copies of
    it), and refused as soon as the first line is longer than any state file's can be: a
    version 2 header is at most MAX_HEADER_BYTES, a version 1 file (one line) at most
    V1_MAX_FILE_BYTES, so a bomb without a newline stops there."""
    raw = read_regular(path, MAX_FILE_BYTES, "state file")
    if raw[:2] != b"\x1f\x8b":
        return raw
    d = zlib.decompressobj(wbits=31)
    out: list[bytes] = []
    total = 0
    first_line = True  # no newline seen yet
    view = memoryview(raw)
    while True:
        chunk = d.decompress(view, min(_INFLATE_SLICE, MAX_FILE_BYTES + 1 - total))
        total += len(chunk)
        out.append(chunk)
        if total > MAX_FILE_BYTES:
            raise StateError(f"{path}: state is larger than {MAX_FILE_BYTES >> 20} MiB decompressed")
        first_line = first_line and b"\n" not in chunk
        if first_line and total > max(MAX_HEADER_BYTES, V1_MAX_FILE_BYTES):
            raise StateError(f"{path}: corrupt state file: a header of more than {MAX_HEADER_BYTES >> 20} MiB")
        if d.eof:  # the next member, if any (gzip allows several)
            view = memoryview(d.unused_data)
            if not view:
                break
            d = zlib.decompressobj(wbits=31)
        else:
            view = memoryview(d.unconsumed_tail)
            if not view and not chunk:  # all input read and nothing more comes out
                break
    if not d.eof:
        raise StateError(f"{path}: corrupt state file: the gzip stream ends before its end marker (truncated)")
    return b"".join(out)


def _json(path: Path, text: bytes) -> Any:
    try:
        data = json.loads(text)
    except RecursionError:
        raise StateError(f"{path}: corrupt state file: nested deeper than {MAX_DEPTH} levels") from None
    except ValueError as exc:
        raise StateError(f"{path}: corrupt state file: {exc}") from None
    if _depth(data) > MAX_DEPTH:
        raise StateError(f"{path}: corrupt state file: nested deeper than {MAX_DEPTH} levels")
    return data


def read(path: Path) -> Snapshot | dict[str, Any] | None:
    """The decoded state (a :class:`Snapshot`, or a version 1 file's document), None when there
    is no file; StateError when it cannot be used."""
    try:
        data = _decompressed(path)
    except FileRefused as exc:
        if not os.path.lexists(path):
            return None
        raise StateError(str(exc)) from None
    except zlib.error as exc:
        raise StateError(f"{path}: corrupt state file: {exc}") from None
    nl = data.find(b"\n")
    if nl > MAX_HEADER_BYTES:
        raise StateError(f"{path}: corrupt state file: a header of more than {MAX_HEADER_BYTES >> 20} MiB")
    head = _json(path, data if nl < 0 else data[:nl])
    if isinstance(head, dict) and head.get("version") == VERSION:  # the header line, then the columns
        _check_format(path, head, VERSION)
        return Snapshot(head, _columns(path, head, memoryview(data)[nl + 1:] if nl >= 0 else memoryview(b"")))
    # Version 1: one JSON document (its compact form has no newline).
    if len(data) > V1_MAX_FILE_BYTES:
        raise StateError(f"{path}: state is larger than {V1_MAX_FILE_BYTES >> 20} MiB decompressed")
    doc = head if nl < 0 or not data[nl:].strip() else _json(path, data)
    _check_format(path, doc, 1)
    return doc


def _check_format(path: Path, doc: Any, version: int) -> None:
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise StateError(f"{path}: not a fabricmon state file")
    if doc.get("version") != version:
        raise StateError(f"{path}: state format version {doc.get('version')!r:.40}, this fabricmon reads versions 1 and {VERSION}")


def _columns(path: Path, meta: dict[str, Any], body: memoryview) -> dict[str, np.ndarray]:
    """The columns the manifest names, as arrays over ``body`` (no copy), every size checked."""
    manifest = meta.get("columns")
    if not isinstance(manifest, list) or [c[0] if isinstance(c, list) and c else None for c in manifest] != list(IMAGE_COLUMNS):
        raise StateError(f"{path}: corrupt state file: the column manifest must list {', '.join(IMAGE_COLUMNS)}")
    out: dict[str, np.ndarray] = {}
    offset = 0
    for (name, dtype_str, shape, *encoding), want in zip(manifest, IMAGE_COLUMNS.values(), strict=True):
        dtype = np.dtype(want).newbyteorder("<")
        if dtype_str != dtype.str or not isinstance(shape, list) or not 1 <= len(shape) <= 2 or \
                not all(type(d) is int and 0 <= d < 1 << 40 for d in shape):
            raise StateError(f"{path}: corrupt state file: column {name!r}: expected {dtype.str}, got {dtype_str!r:.20} {shape!r:.40}")
        if encoding != ([f"xor:{XOR_WITH[name]}"] if name in XOR_WITH else []):
            raise StateError(f"{path}: corrupt state file: column {name!r}: unknown encoding {encoding!r:.40}")
        count = math.prod(shape)
        size = count * dtype.itemsize
        if offset + size > len(body):
            raise StateError(f"{path}: corrupt state file: column {name} is cut short ({len(body) - offset} of {size} bytes)")
        out[name] = np.frombuffer(body, dtype, count, offset).reshape(shape).astype(want, copy=False)
        offset += size
    if offset != len(body):
        raise StateError(f"{path}: corrupt state file: {len(body) - offset} bytes after the last column")
    for name, base in XOR_WITH.items():
        if out[name].size:
            if out[name].ndim != 2 or len(out[base]) != len(out[name]):
                raise StateError(f"{path}: corrupt state file: column {name} does not fit column {base}")
            out[name] = _xor(out[name], out[base])
    return out


def restore(data: Snapshot | dict[str, Any], store: CounterStore, detector: Detector, now: float | None = None) -> tuple[int, int]:
    """Put a read state into an empty store and detector; returns (series, findings) restored.

    Raises StateError when the content is malformed; the caller then starts fresh (the
    store is only touched once everything parsed).
    """
    now = time.time() if now is None else now
    meta = data.meta if isinstance(data, Snapshot) else data
    saved_at = meta.get("saved_at", 0.0)
    if not isinstance(saved_at, int | float) or isinstance(saved_at, bool) or not 0 <= saved_at <= MAX_SAVED_AT:
        raise StateError(f"saved_at must be a Unix time, not {saved_at!r:.40}")
    findings_in = meta.get("findings", [])
    if not isinstance(findings_in, list):
        raise StateError("findings must be a list")
    fresh = float(saved_at) >= now - store.stale_after
    try:
        findings = [_finding_from_json(f, i) for i, f in enumerate(findings_in)] if fresh else []
        if isinstance(data, Snapshot):
            n_series = store.restore_image(_image(meta, data.columns), now)
        else:
            n_series = store.restore(data, now)
    except ValueError as exc:
        raise StateError(f"malformed state content: {exc}") from None
    detector.restore(findings)
    return n_series, len(findings)


def _image(meta: dict[str, Any], columns: dict[str, np.ndarray]) -> StoreImage:
    keys, schemas, ports, clocks, big = (meta.get(k) for k in ("keys", "schemas", "ports", "device_clocks", "big"))
    if not isinstance(keys, list) or not isinstance(schemas, list) or not isinstance(ports, list):
        raise ValueError("keys, schemas and ports must be lists")
    if not isinstance(clocks, dict) or not isinstance(big, list) or not all(isinstance(b, list) and len(b) == 2 for b in big):
        raise ValueError("device_clocks must be an object and big a list of [row, value] pairs")
    return StoreImage(keys, schemas, ports, clocks, columns, {row: v for row, v in big})


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
    meta = data.meta if isinstance(data, Snapshot) else data
    age = time.time() - float(meta.get("saved_at", 0.0))
    log.info("restored state from %s (saved %.0f s ago): %d series, %d active findings", path, age, n_series, n_findings)
    return True


@dataclass(frozen=True, slots=True)
class StateStatus:
    """What :meth:`StateKeeper.status` reports."""

    saves: int  # saves that succeeded
    save_errors: int  # saves that failed (the last good file stays)


async def _inline(fn: Callable[[], T]) -> T:
    return fn()


class StateKeeper:
    """Loads the state at start, saves it every ``interval`` seconds and once more at shutdown.

    ``run`` runs a function where the store is not changed meanwhile and returns its result
    (the live agent: its pipeline worker, agent/worker.py; default: inline, for tests and
    tools). The snapshot is taken there; compressing and writing run in a thread of their own.
    Writes never overlap, and the final save always comes last, within its deadline.
    """

    def __init__(self, path: Path, store: CounterStore, detector: Detector, interval: float = SAVE_INTERVAL,
                 run: Callable[[Callable[[], Any]], Awaitable[Any]] | None = None) -> None:
        self.path = path
        self.store = store
        self.detector = detector
        self.interval = interval
        self._run = run or _inline
        self._write: asyncio.Future[int] | None = None
        self._task: asyncio.Task[None] | None = None
        self.saves = 0
        self.save_errors = 0  # failed writes (exported as fabricmon_state_save_errors_total)
        self.last_save = (0.0, 0.0, 0)  # seconds of snapshot, seconds of compress and write, bytes
        self._order = RenameOrder()

    def status(self) -> StateStatus:
        return StateStatus(self.saves, self.save_errors)

    def families(self) -> list[Family]:
        fam = Family(f"{NAMESPACE}_state_save_errors_total", "counter",
                     "Saves of the agent state file that failed (disk full, permissions, a planted file).")
        fam.add("", self.status().save_errors)
        return [fam]

    def load(self) -> bool:
        """Read and restore the file (file I/O and store changes: on the pipeline worker)."""
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

    def _snapshot(self, history: int | None = None) -> Snapshot:
        with gc_paused():
            return snapshot(self.store, self.detector, history=history)

    async def save(self, final: bool = False) -> bool:
        """One save; a periodic one is skipped while the previous write still runs (a slow disk),
        the final one is not (its file goes in place last, RenameOrder)."""
        if not final and self._write is not None and not self._write.done():
            return False
        t0 = time.perf_counter()
        ticket = self._order.ticket()
        # The final save must fit the stop's deadline: when the last save took more than half of it
        # (or there was none yet and the store is large), it keeps the last FINAL_HISTORY points of
        # each series (the periodic saves keep them all).
        short = final and (sum(self.last_save[:2]) > FINAL_SAVE_DEADLINE_S / 2
                           or (not self.saves and self.store.series_count() > SHORT_FINAL_ABOVE))
        snap = await self._run(lambda: self._snapshot(FINAL_HISTORY if short else None))
        t1 = time.perf_counter()
        log.debug("state snapshot taken in %.2f s%s", t1 - t0, " (the final save)" if final else "")
        self._write = in_daemon_thread(write_atomic, self.path, lambda fh: encode_to(fh, snap), (self._order, ticket),
                                       name="fabricmon-state-write")
        try:
            size = await asyncio.shield(self._write)
        except OSError as exc:
            self.save_errors += 1
            log.error("cannot save state to %s: %s", self.path, exc.strerror or exc)
            return False
        self.saves += 1
        self.last_save = (t1 - t0, time.perf_counter() - t1, size)
        log.debug("state saved to %s: snapshot %.2f s, compress and write %.2f s, %d bytes", self.path, *self.last_save)
        return True

    async def close(self, deadline: float = FINAL_SAVE_DEADLINE_S) -> None:
        """Stop the periodic saves and write the final state at once (a periodic write still in
        flight goes on, and is dropped if it ends last), giving up after ``deadline`` seconds: the
        previous file then stays as it was."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        t0 = time.monotonic()
        try:
            ok = await asyncio.wait_for(self.save(final=True), deadline)
        except TimeoutError:
            self.save_errors += 1
            log.error("the final state save did not finish within %.0f s; %s keeps the previous save", deadline, self.path)
            return
        if ok:
            log.info("state saved to %s in %.2f s (snapshot %.2f s, compress and write %.2f s, %d bytes)", self.path,
                     time.monotonic() - t0, *self.last_save)
