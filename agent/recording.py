"""Recordings (recording-format.md, version 1): JSON Lines, optionally gzip-compressed.

The writer appends one line per finished poll and flushes it, so a recording cut short by a
crash is valid up to its last complete line (for ``.gz``, each line is sync-flushed). New
recordings are created mode 0600: they carry raw device payloads.

The reader tells each failure apart and names it: a file named ``.gz`` that is not gzip (read
as plain text, with a warning), a bad gzip checksum, a truncated or corrupt gzip stream, a torn
last line, malformed line N, an over-long line, an unknown version. Fatal problems (no header,
unknown version, not a recording) raise :class:`RecordingError`. Data problems are skipped and
collected in a :class:`ReadReport` when one is given (replay: "replay what is good, report what
was skipped"); without one, a malformed line raises. Memory stays bounded whatever the file
holds: lines longer than ``Limits.max_line_bytes`` are skipped without being held, and reading
stops after ``Limits.max_total_bytes`` decompressed bytes (a small gzip can expand 1000-fold).
"""

from __future__ import annotations

import gzip
import json
import logging
import math
import os
import time
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from fabricmon.core.model import Poll, TargetSpec

FORMAT = "fabricmon-recording"
VERSION = 1
GZIP_MAGIC = b"\x1f\x8b"
# Poll times are Unix seconds: never negative, and fabricmon has no polls after 2100; a later
# time (1e18, Infinity) would stall a paced replay for ever.
MAX_POLL_T = 4102444800.0

log = logging.getLogger(__name__)


class RecordingError(Exception):
    """A recording that cannot be read: the message names the file and line."""


@dataclass(frozen=True)
class Limits:
    """Bounds on what reading one recording may cost (``fabricmon replay --max-line-bytes`` etc.).

    ``max_line_bytes``: a perfquery poll line is about 1.25 KB per port (measured on the
    scenario recordings: 20 KB for 16 ports), so 64 MiB holds one poll of about 50,000 ports;
    parsing a line takes a few times its size in memory.
    ``max_total_bytes``: decompressed bytes read in all (a day of polls of a large fabric is
    tens of GB); it bounds the time a hostile gzip can cost. ``max_targets``: distinct target
    names a recording may create (each keeps status and series for ever in a replay).
    """

    max_line_bytes: int = 64 << 20
    max_total_bytes: int = 64 << 30
    max_targets: int = 10_000


@dataclass
class ReadReport:
    """What a lenient read skipped and warned about: every problem counted, the first
    ``KEEP`` kept and logged (a file of a million bad lines must not log a million lines)."""

    KEEP = 20
    skipped: int = 0
    examples: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def skip(self, message: str) -> None:
        self.skipped += 1
        if self.skipped <= self.KEEP:
            self.examples.append(message)
            log.warning("%s", message)
        elif self.skipped == self.KEEP + 1:
            log.warning("further data errors are counted, not logged")

    def warn(self, message: str) -> None:
        if len(self.warnings) < self.KEEP:
            self.warnings.append(message)
            log.warning("%s", message)


def _is_gz(path: str | Path) -> bool:
    return str(path).endswith(".gz")


def _open_private(path: Path) -> IO[bytes]:
    """Append-open ``path``, creating it 0600 (payloads may name every device of a fabric)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | getattr(os, "O_CLOEXEC", 0), 0o600)
    return os.fdopen(fd, "ab")


class RecordingWriter:
    """Appends polls to a recording; writes the header when the file is new or empty."""

    def __init__(self, path: str | Path, targets: list[TargetSpec], description: str = "") -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        existing = self.path.exists() and self.path.stat().st_size > 0
        if existing:
            header = read_header(self.path)
            known = {t["name"] for t in header.get("targets", []) if isinstance(t, dict)}
            missing = [t.name for t in targets if t.name not in known]
            if missing:
                log.warning("appending to %s: target(s) %s are not in its header; a replay will parse them with default options",
                            self.path, ", ".join(missing))
        self._raw = _open_private(self.path)
        self._fh: IO[bytes] = gzip.GzipFile(fileobj=self._raw, mode="ab") if _is_gz(self.path) else self._raw
        if not existing:
            self.write({
                "type": "header", "format": FORMAT, "version": VERSION,
                "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "description": description,
                "targets": [t.to_header() for t in targets],
            })

    def write(self, line: dict[str, Any]) -> None:
        # backslashreplace: a lone surrogate from a payload is written as its JSON escape "\\ud800",
        # so the poll is recorded (and replays) exactly as the device sent it.
        self._fh.write(json.dumps(line, separators=(",", ":"), ensure_ascii=False).encode("utf-8", "backslashreplace") + b"\n")
        self._fh.flush()  # gzip: Z_SYNC_FLUSH, so everything written so far is readable after a crash
        if self._fh is not self._raw:
            self._raw.flush()

    def write_poll(self, poll: Poll) -> None:
        self.write(poll.to_line())

    def close(self) -> None:
        if not self._fh.closed:
            self._fh.close()
        if not self._raw.closed:
            self._raw.close()


class _TooLong:
    """A line over the limit, already discarded: only its size is kept."""

    def __init__(self, size: int) -> None:
        self.size = size


def _open(path: Path, report: ReadReport | None) -> IO[bytes]:
    try:
        with open(path, "rb") as probe:
            magic = probe.read(2)
        fh = open(path, "rb")  # noqa: SIM115 (closed by the caller's with)
    except OSError as exc:
        raise RecordingError(f"{path}: cannot open recording: {exc.strerror or exc}") from None
    except ValueError as exc:  # a NUL byte in the path
        raise RecordingError(f"{str(path)!r}: cannot open recording: {exc}") from None
    is_gzip = magic == GZIP_MAGIC
    if _is_gz(path) and not is_gzip and magic:
        msg = f"{path}: named .gz but not gzip-compressed; reading it as plain text"
        report.warn(msg) if report is not None else log.warning("%s", msg)
    return gzip.GzipFile(fileobj=fh, mode="rb") if is_gzip else fh


def _gzip_problem(exc: Exception) -> str:
    text = str(exc)
    if isinstance(exc, EOFError):
        return "truncated gzip: the compressed stream ends before its end marker (a copy cut short, or a crash)"
    if "CRC check failed" in text or "Incorrect length" in text:
        return f"bad gzip checksum ({text}): the data may be corrupt"
    if "Not a gzipped file" in text:
        return "data after the gzip stream is not gzip"
    return f"corrupt gzip data ({text}); the rest of the file cannot be read"


def _raw_lines(path: Path, limits: Limits, report: ReadReport | None) -> Iterator[tuple[int, bytes | _TooLong]]:
    """(line number, bytes or _TooLong) for every line; the stream's end problems are reported."""
    fh = _open(path, report)
    lineno, total = 0, 0
    with fh:
        try:
            while True:
                raw = fh.readline(limits.max_line_bytes + 1)
                if not raw:
                    return
                lineno += 1
                total += len(raw)
                if len(raw) > limits.max_line_bytes and not raw.endswith(b"\n"):
                    size = len(raw)
                    while True:  # drop the rest of the line without holding it
                        chunk = fh.readline(1 << 20)
                        size += len(chunk)
                        total += len(chunk)
                        if not chunk or chunk.endswith(b"\n") or total > limits.max_total_bytes:
                            break
                    yield lineno, _TooLong(size)
                else:
                    yield lineno, raw
                if total > limits.max_total_bytes:
                    _stream_problem(report, f"{path}:{lineno}: stopped reading: more than {limits.max_total_bytes} "
                                            "decompressed bytes (the recording size limit)")
                    return
        except (EOFError, zlib.error, gzip.BadGzipFile, OSError) as exc:
            _stream_problem(report, f"{path}: after line {lineno}: {_gzip_problem(exc)}; using the lines before it")


def _stream_problem(report: ReadReport | None, message: str) -> None:
    if report is not None:
        report.skip(message)
    else:
        log.warning("%s", message)


def iter_lines(path: str | Path, report: ReadReport | None = None,
               limits: Limits | None = None) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, object) for every line of a recording, header first.

    Raises RecordingError for what makes the file unreadable; data errors go to ``report``
    (skipped) or, without one, raise.
    """
    path = Path(path)
    limits = limits or Limits()
    header_seen = False
    for lineno, raw in _raw_lines(path, limits, report):
        if isinstance(raw, _TooLong):
            problem = f"{path}:{lineno}: line of {raw.size} bytes is longer than the {limits.max_line_bytes}-byte limit; skipped"
        elif not raw.strip():
            continue
        elif not raw.endswith(b"\n"):  # only the last line can lack its newline: a torn write
            line = _decode(raw)
            if line is None:
                _stream_problem(report, f"{path}:{lineno}: torn last line (no newline, not valid JSON) skipped; "
                                        "everything before it is used")
                break
            problem = None
        else:
            line = _decode(raw)
            problem = None if line is not None else f"{path}:{lineno}: malformed line: not a JSON object with a \"type\""
        if problem is None and not header_seen:
            _check_header(path, lineno, line)
            header_seen = True
        elif problem is None and line.get("type") == "header":
            problem = f"{path}:{lineno}: a second header line (a recording has exactly one); skipped"
        if problem is not None:
            if not header_seen:
                raise RecordingError(f"{path}:{lineno}: not a fabricmon recording: the first line must be a header with format {FORMAT!r}")
            if report is None:
                raise RecordingError(problem)
            report.skip(problem)
            continue
        yield lineno, line
    if not header_seen:
        raise RecordingError(f"{path}: empty recording (no header line)")


def _decode(raw: bytes) -> dict[str, Any] | None:
    try:
        line = json.loads(raw)
    except (ValueError, RecursionError):  # RecursionError: nesting deeper than the decoder's stack
        return None
    if not isinstance(line, dict) or not isinstance(line.get("type"), str):
        return None
    return line


def iter_recording(path: str | Path) -> Iterator[dict[str, Any]]:
    for _, line in iter_lines(path):
        yield line


def _check_header(path: Path, lineno: int, line: dict[str, Any]) -> None:
    if line.get("type") != "header" or line.get("format") != FORMAT:
        raise RecordingError(f"{path}:{lineno}: not a fabricmon recording: the first line must be a header with format {FORMAT!r}")
    if line.get("version") != VERSION:
        raise RecordingError(f"{path}: recording version {line.get('version')!r} is not supported (this fabricmon reads version {VERSION})")
    if not isinstance(line.get("targets", []), list):
        raise RecordingError(f"{path}:{lineno}: header: targets must be a list")


def read_header(path: str | Path) -> dict[str, Any]:
    for line in iter_recording(path):
        return line
    raise RecordingError(f"{path}: empty recording")


def _number(line: dict[str, Any], key: str, default: float | None = None) -> float:
    v = line.get(key, default)
    if isinstance(v, bool) or not isinstance(v, int | float):
        raise ValueError(f"{key} must be a number, not {type(v).__name__}")
    f = float(v)
    if not math.isfinite(f):
        raise ValueError(f"{key} must be finite")
    return f


def _text(line: dict[str, Any], key: str, required: bool) -> str | None:
    v = line.get(key)
    if v is None and not required:
        return None
    if not isinstance(v, str) or (required and not v):
        raise ValueError(f"{key} must be a{' non-empty' if required else ''} string, not {type(v).__name__}")
    return v


def poll_from_line(path: str | Path, lineno: int, line: dict[str, Any]) -> Poll:
    """A Poll from a ``poll`` line; RecordingError naming the line for a missing or mistyped field."""
    try:
        ok = line.get("ok")
        if not isinstance(ok, bool):
            raise ValueError(f"ok must be true or false, not {json.dumps(ok)[:40]}")
        t = _number(line, "t")
        if not 0.0 <= t <= MAX_POLL_T:
            raise ValueError(f"t {t:g} is not a Unix time between 1970 and 2100")
        duration = _number(line, "duration_s", 0.0)
        if duration < 0:
            raise ValueError("duration_s cannot be negative")
        payload = line.get("payload") if ok else None
        if ok and not isinstance(payload, dict):
            raise ValueError("an ok poll needs an object payload")
        error = None if ok else (_text(line, "error", False) or "unknown error")
        return Poll(target=_text(line, "target", True), source=_text(line, "source", True), t=t, duration_s=duration,
                    ok=ok, payload=payload, error=error, reason=_text(line, "reason", False))
    except (TypeError, ValueError, OverflowError) as exc:  # OverflowError: an integer beyond float range
        raise RecordingError(f"{path}:{lineno}: malformed poll line: {exc}") from None


def read_polls(path: str | Path) -> tuple[dict[str, Any], list[Poll], list[dict[str, Any]]]:
    """Header, polls in file order, and truth lines (strict: a malformed line raises)."""
    header: dict[str, Any] = {}
    polls: list[Poll] = []
    truth: list[dict[str, Any]] = []
    for lineno, line in iter_lines(path):
        kind = line["type"]
        if kind == "header":
            header = line
        elif kind == "poll":
            polls.append(poll_from_line(path, lineno, line))
        elif kind == "truth":
            truth.append(line)
    return header, polls, truth
