"""Recordings (recording-format.md, version 1): JSON Lines, optionally gzip-compressed.

**Writing.** The writer appends one line per finished poll. A ``.gz`` recording is written as
one gzip *member* per line (RFC 1952 allows any number of members one after the other, and
every gzip reader reads them as one stream): a member is complete on disk once its write
returns, so a crash (``kill -9``, power aside) loses at most the poll being written, and a
reader skips a damaged member and goes on with the next (:class:`_Members`). Before this, the
file was one deflate stream with sync flushes, and a crash cut it at a point no reader could
get past: a replay recovered 16 of 42 polls. New recordings are created mode 0600: they carry
raw device payloads. A line is encoded in slices (:func:`fabricmon.core.boundedjson.dumps_chunks`)
and redacted (every known secret in every encoding, :func:`fabricmon.core.secrets.redact_bytes`)
before it is written.

**Failures never stop the agent.** An existing file that is not a readable recording (a torn
gzip header, a torn first line, not a recording at all, not a regular file) is left as it is
and a new file is started beside it, with a warning naming both (it used to exit 1 on every
start: a restart loop). A write that fails (a full disk, at start-up or later) is logged once
per cause, counted (``fabricmon_recording_*``: :meth:`RecordingWriter.families`), and retried
every :data:`RETRY_S` seconds; polls go on being monitored meanwhile, they are only not
recorded.

**Reading.** The reader tells each failure apart and names it: a file named ``.gz`` that is not
gzip (read as plain text, with a warning), a damaged gzip member (skipped to the next, with the
bytes lost), a truncated last member, a torn last line, malformed line N, an over-long line, an
unknown version. Fatal problems (no header, unknown version, not a recording) raise
:class:`RecordingError`. Data problems are skipped and collected in a :class:`ReadReport` when
one is given (replay: "replay what is good, report what was skipped"); without one, a
malformed line raises. Memory stays bounded whatever the file holds: lines longer than
``Limits.max_line_bytes`` are skipped without being held, a line's JSON is bounded in values
(:mod:`fabricmon.core.boundedjson`), and reading stops after ``Limits.max_total_bytes``
decompressed bytes (a small gzip can expand 1000-fold).
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import math
import os
import stat
import time
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from fabricmon.core import boundedjson, secrets
from fabricmon.core.model import Poll, TargetSpec

FORMAT = "fabricmon-recording"
VERSION = 1
GZIP_MAGIC = b"\x1f\x8b"
_MEMBER_MAGIC = b"\x1f\x8b\x08"  # gzip magic and method 8 (deflate): where a member starts
# zlib level of each member. Like the exposition's gzip (agent/exporter/exposition.py), level 1:
# a poll of 100,000 ports is ~130 MB of text, level 6 would cost seconds of CPU per poll for
# ~10 % fewer bytes (the payloads are repetitive: labels, counter names, GUIDs).
GZIP_LEVEL = 1
RETRY_S = 30.0  # a recording that cannot be written is tried again this often
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


def _beside(path: Path) -> Path:
    """A new file name beside ``path``: ``rec.jsonl.gz`` -> ``rec.20250101T120000Z.jsonl.gz``."""
    suffix = ".jsonl.gz" if path.name.endswith(".jsonl.gz") else ".jsonl" if path.name.endswith(".jsonl") else path.suffix
    stem = path.name[: len(path.name) - len(suffix)] if suffix else path.name
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    for n in range(1, 1000):
        cand = path.with_name(f"{stem}.{stamp}{'' if n == 1 else f'-{n}'}{suffix}")
        if not os.path.lexists(cand):
            return cand
    raise OSError(f"no free name beside {path}")


class RecordingWriter:
    """Appends polls to a recording; writes the header when the file is new or empty.

    Never raises for a file or disk problem (see the module docstring): :attr:`up` says whether
    the last write worked; :meth:`families` exports it.
    """

    def __init__(self, path: str | Path, targets: list[TargetSpec], description: str = "") -> None:
        self.path = Path(path)
        self.targets = list(targets)
        self.description = description
        self.up = False
        self.errors = 0  # failed opens and writes
        self.lost = 0  # polls not recorded because the file could not be written
        self._fd: int | None = None
        self._retry_at = 0.0
        self._torn = False  # the last write to a plain file may have left half a line
        self._cause = ""  # the last failure's message, logged once per cause
        self._open()

    @property
    def gz(self) -> bool:
        return _is_gz(self.path)

    def _open(self) -> bool:
        self._retry_at = time.monotonic() + RETRY_S
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._check_existing()
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NONBLOCK | os.O_CLOEXEC, 0o600)
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                os.close(fd)
                raise OSError(f"{self.path} is not a regular file")
            os.set_blocking(fd, True)
            self._fd = fd
            if st.st_size == 0:
                self._write_bytes(self._encode({
                    "type": "header", "format": FORMAT, "version": VERSION,
                    "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                    "description": self.description,
                    "targets": [t.to_header() for t in self.targets],
                }))
        except OSError as exc:
            self._failed(f"cannot open {self.path}: {exc.strerror or exc}")
            return False
        if not self.up and self._cause:
            log.warning("recording to %s resumed; %d poll(s) were not recorded meanwhile", self.path, self.lost)
        self.up, self._cause = True, ""
        return True

    def _check_existing(self) -> None:
        """Keep appending to a good recording; start a new file beside a damaged one, and say so."""
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return
        problem = None
        if not stat.S_ISREG(st.st_mode):
            problem = "not a regular file"
        elif st.st_size > 0:
            try:
                header = read_header(self.path)
            except (RecordingError, OSError) as exc:
                problem = str(exc).removeprefix(f"{self.path}: ").removeprefix(f"{self.path}")
            else:
                known = {t["name"] for t in header.get("targets", []) if isinstance(t, dict)}
                missing = [t.name for t in self.targets if t.name not in known]
                if missing:
                    log.warning("appending to %s: target(s) %s are not in its header; a replay will parse them with "
                                "default options", self.path, ", ".join(missing))
        if problem is not None:
            new = _beside(self.path)
            log.warning("recording %s cannot be appended to (%s): left as it is; recording to %s instead", self.path,
                        problem.strip(": "), new)
            self.path = new

    def _failed(self, cause: str) -> None:
        self.errors += 1
        self.up = False
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = None
        if cause != self._cause:
            self._cause = cause
            log.error("recording: %s; monitoring goes on without recording, retrying every %.0f s", cause, RETRY_S)

    def _encode(self, line: dict[str, Any]) -> bytes:
        # backslashreplace: a lone surrogate from a payload is written as its JSON escape "\\ud800",
        # so the poll is recorded (and replays) exactly as the device sent it.
        data = "".join(boundedjson.dumps_chunks(line)).encode("utf-8", "backslashreplace") + b"\n"
        data = secrets.redact_bytes(data)
        if self.gz:  # one complete gzip member per line (zlib releases the GIL while it compresses)
            z = zlib.compressobj(GZIP_LEVEL, zlib.DEFLATED, 31)
            return z.compress(data) + z.flush()
        return data

    def _write_bytes(self, data: bytes) -> None:
        assert self._fd is not None
        if self._torn and not self.gz:
            data = b"\n" + data  # end the half line a failed write left: it is skipped as malformed, not glued to this one
        self._torn = True
        view = memoryview(data)
        while view:
            n = os.write(self._fd, view)
            view = view[n:]
        self._torn = False

    def write(self, line: dict[str, Any]) -> bool:
        """Append one line; False when it could not be written (counted and logged, retried later)."""
        if not self.up and (time.monotonic() < self._retry_at or not self._open()):
            return False
        data = self._encode(line)
        try:
            self._write_bytes(data)
        except OSError as exc:
            self._failed(f"cannot write to {self.path}: {exc.strerror or exc}")
            return False
        return True

    def write_poll(self, poll: Poll) -> None:
        if not self.write(poll.to_line()):
            self.lost += 1

    def families(self) -> list[Any]:
        """``fabricmon_recording_*`` for /metrics."""
        from fabricmon.agent.exporter.exposition import Family

        up = Family("fabricmon_recording_up", "gauge", "1 when the recording file was written by the last attempt, 0 while it "
                                                        "fails (a full disk, a damaged file; retried every 30 s).")
        up.add("", 1 if self.up else 0)
        errors = Family("fabricmon_recording_write_errors_total", "counter", "Failed opens and writes of the recording file.")
        errors.add("", self.errors)
        lost = Family("fabricmon_recording_polls_lost_total", "counter", "Polls not recorded because the recording could not be written.")
        lost.add("", self.lost)
        return [up, errors, lost]

    def close(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = None


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
    return io.BufferedReader(_Members(fh, path, report), buffer_size=1 << 20) if is_gzip else fh


def _zlib_problem(exc: zlib.error) -> str:
    text = str(exc)
    if "incorrect data check" in text or "incorrect length check" in text:
        return f"bad gzip checksum ({text}): the member's data may be corrupt"
    if "incorrect header check" in text or "unknown compression method" in text:
        return "data that is not gzip"
    return f"corrupt gzip data ({text})"


class _Members(io.RawIOBase):
    """The decompressed bytes of a gzip file, member after member. A damaged member (bad data,
    a bad checksum, bytes that are not gzip) is reported and skipped to the next member header;
    a newline is put in its place, so the half line it leaves is skipped as one malformed line
    and never glued to the next member's first line. A last member cut short (a crash while it
    was written) is reported; everything before it is returned."""

    _OUT = 1 << 20  # decompressed bytes per step: a small gzip may hold gigabytes

    def __init__(self, fh: IO[bytes], path: Path, report: ReadReport | None) -> None:
        self._fh, self._path, self._report = fh, path, report
        self._d = zlib.decompressobj(31)
        self._in = b""
        self._pos = 0  # file offset of self._in[0]
        self._start = 0  # file offset of the current member
        self._inside = False  # input of the current member was consumed and its end not seen yet
        self._out = memoryview(b"")
        self._eof = False

    def readable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:
        while not self._out:
            if self._eof:
                return 0
            self._step()
        n = min(len(b), len(self._out))
        b[:n] = self._out[:n]
        self._out = self._out[n:]
        return n

    def close(self) -> None:
        self._fh.close()
        super().close()

    def _step(self) -> None:
        if not self._in:
            self._in = self._fh.read(1 << 20)
            if not self._in:
                self._eof = True
                if self._inside:
                    _stream_problem(self._report, f"{self._path}: truncated gzip: the last member (from byte {self._start}) "
                                                  "ends before its end marker (a crash while it was written, or a copy cut "
                                                  "short); what it holds up to there is used")
                return
        try:
            out = self._d.decompress(self._in, self._OUT)
        except zlib.error as exc:
            self._resync(_zlib_problem(exc))
            return
        if self._d.eof:  # the member ended: the next one starts in unused_data
            rest = self._d.unused_data
            self._pos += len(self._in) - len(rest)
            self._in, self._start, self._inside = rest, self._pos, False
            self._d = zlib.decompressobj(31)
        else:
            tail = self._d.unconsumed_tail
            self._pos += len(self._in) - len(tail)
            self._in, self._inside = tail, True
        self._out = memoryview(out)

    def _resync(self, problem: str) -> None:
        """Find the next member header after the damaged member's start, and go on from there."""
        damaged = self._start
        self._fh.seek(damaged + 1)
        offset, carry = damaged + 1, b""
        while True:
            chunk = self._fh.read(1 << 20)
            if not chunk:
                _stream_problem(self._report, f"{self._path}: damaged gzip member at byte {damaged} ({problem}); "
                                              "nothing readable after it")
                self._eof = True
                self._out = memoryview(b"\n")
                return
            buf = carry + chunk
            i = buf.find(_MEMBER_MAGIC)
            if i >= 0:
                found = offset - len(carry) + i
                break
            carry = buf[-(len(_MEMBER_MAGIC) - 1):]
            offset += len(chunk)
        _stream_problem(self._report, f"{self._path}: damaged gzip member at byte {damaged} ({problem}); "
                                      f"resumed at the next member, byte {found} ({found - damaged} bytes skipped)")
        self._fh.seek(found)
        self._in, self._pos, self._start, self._inside = b"", found, found, False
        self._d = zlib.decompressobj(31)
        self._out = memoryview(b"\n")


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
        except OSError as exc:
            _stream_problem(report, f"{path}: after line {lineno}: cannot read: {exc.strerror or exc}; using the lines before it")


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
            if isinstance(line, str):
                _stream_problem(report, f"{path}:{lineno}: torn last line (no newline, not valid JSON) skipped; "
                                        "everything before it is used")
                break
            problem = None
        else:
            line = _decode(raw)
            problem = None if not isinstance(line, str) else f"{path}:{lineno}: malformed line: {line}"
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


def _decode(raw: bytes) -> dict[str, Any] | str:
    """The line's object, or why it is not one."""
    try:
        line = boundedjson.loads(raw, what="the line")  # bounded in values: 64 MiB of "[{},...]" would be gigabytes
    except boundedjson.JsonRefused as exc:
        return str(exc)
    except ValueError:
        return 'not a JSON object with a "type"'
    if not isinstance(line, dict) or not isinstance(line.get("type"), str):
        return 'not a JSON object with a "type"'
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
