"""Recordings (recording-format.md, version 1): JSON Lines, optionally gzip-compressed.

The writer appends one line per finished poll and flushes it, so a recording cut short by a
crash is valid up to its last complete line (for ``.gz``, each line is sync-flushed). The
reader refuses unknown versions, skips unknown line types, skips a torn last line with a
warning, and names the file and line of anything malformed.
"""

from __future__ import annotations

import gzip
import json
import logging
import time
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from fabricmon.core.model import Poll, TargetSpec

FORMAT = "fabricmon-recording"
VERSION = 1

log = logging.getLogger(__name__)


class RecordingError(Exception):
    """A recording that cannot be read: the message names the file and line."""


def _is_gz(path: str | Path) -> bool:
    return str(path).endswith(".gz")


class RecordingWriter:
    """Appends polls to a recording; writes the header when the file is new or empty."""

    def __init__(self, path: str | Path, targets: list[TargetSpec], description: str = "") -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        existing = self.path.exists() and self.path.stat().st_size > 0
        if existing:
            header = read_header(self.path)
            known = {t["name"] for t in header.get("targets", [])}
            missing = [t.name for t in targets if t.name not in known]
            if missing:
                log.warning("appending to %s: target(s) %s are not in its header; a replay will parse them with default options",
                            self.path, ", ".join(missing))
        self._fh: IO[bytes] = gzip.open(self.path, "ab") if _is_gz(self.path) else open(self.path, "ab")  # noqa: SIM115
        if not existing:
            self.write({
                "type": "header", "format": FORMAT, "version": VERSION,
                "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "description": description,
                "targets": [t.to_header() for t in targets],
            })

    def write(self, line: dict[str, Any]) -> None:
        self._fh.write(json.dumps(line, separators=(",", ":"), ensure_ascii=False).encode() + b"\n")
        self._fh.flush()  # gzip: Z_SYNC_FLUSH, so everything written so far is readable after a crash

    def write_poll(self, poll: Poll) -> None:
        self.write(poll.to_line())

    def close(self) -> None:
        if not self._fh.closed:
            self._fh.close()


def _raw_lines(path: Path) -> Iterator[tuple[int, bytes, bool]]:
    """(line number, bytes, complete) for every line; a gzip stream cut short ends quietly."""
    opener = gzip.open if _is_gz(path) else open
    try:
        fh = opener(path, "rb")
    except OSError as exc:
        raise RecordingError(f"{path}: cannot open recording: {exc.strerror or exc}") from None
    lineno = 0
    with fh:
        try:
            for raw in fh:
                lineno += 1
                yield lineno, raw, raw.endswith(b"\n")
        except (EOFError, zlib.error, gzip.BadGzipFile) as exc:
            log.warning("%s: compressed stream ends early after line %d (%s); using what came before", path, lineno, exc)


def iter_lines(path: str | Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, object) for every line of a recording, header first. Raises RecordingError."""
    path = Path(path)
    header_seen = False
    for lineno, raw, complete in _raw_lines(path):
        if not raw.strip():
            continue
        if not complete:  # only the last line can lack its newline: a torn write
            try:
                line = json.loads(raw)
            except (ValueError, RecursionError):  # RecursionError: nesting deeper than the decoder's stack
                log.warning("%s:%d: torn last line (no newline, not valid JSON) skipped; everything before it is used", path, lineno)
                break
        else:
            line = _decode_one(path, lineno, raw)
        if not isinstance(line, dict) or not isinstance(line.get("type"), str):
            raise RecordingError(f"{path}:{lineno}: malformed line: expected a JSON object with a \"type\"")
        if not header_seen:
            _check_header(path, lineno, line)
            header_seen = True
        yield lineno, line
    if not header_seen:
        raise RecordingError(f"{path}: empty recording (no header line)")


def iter_recording(path: str | Path) -> Iterator[dict[str, Any]]:
    for _, line in iter_lines(path):
        yield line


def _decode_one(path: Path, lineno: int, raw: bytes) -> dict[str, Any]:
    try:
        line = json.loads(raw)
    except (ValueError, RecursionError) as exc:  # RecursionError: nesting deeper than the decoder's stack
        raise RecordingError(f"{path}:{lineno}: malformed line, not JSON: {exc}") from None
    if not isinstance(line, dict) or not isinstance(line.get("type"), str):
        raise RecordingError(f"{path}:{lineno}: malformed line: expected a JSON object with a \"type\"")
    return line


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


def poll_from_line(path: str | Path, lineno: int, line: dict[str, Any]) -> Poll:
    """A Poll from a ``poll`` line, with a clear error for missing or mistyped fields."""
    try:
        ok = bool(line["ok"])
        payload = line.get("payload") if ok else None
        if ok and not isinstance(payload, dict):
            raise ValueError("an ok poll needs an object payload")
        return Poll(
            target=str(line["target"]), source=str(line["source"]), t=float(line["t"]),
            duration_s=float(line.get("duration_s", 0.0)), ok=ok, payload=payload,
            error=None if ok else str(line.get("error", "unknown error")), reason=line.get("reason"),
        )
    except (KeyError, TypeError, ValueError, OverflowError) as exc:  # OverflowError: an integer t beyond float range
        raise RecordingError(f"{path}:{lineno}: malformed poll line: {exc}") from None


def read_polls(path: str | Path) -> tuple[dict[str, Any], list[Poll], list[dict[str, Any]]]:
    """Header, polls in file order, and truth lines."""
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
