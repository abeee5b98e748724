"""Exposition bodies, rendered once per change and served as-is to every scrape.

**One body for both formats.** The Prometheus text (0.0.4) and OpenMetrics 1.0 bodies have
the same sample lines; they differ only in the HELP/TYPE headers of counters and info
metrics (OpenMetrics names the family without its ``_total``/``_info`` suffix and has an
``info`` type) and in the ``# EOF`` trailer. A :class:`Body` is a list of parts: sample
blocks and headers that agree are one shared ``bytes``, the headers that differ are a
(text, OpenMetrics) pair, so the two formats cost one body in memory, not two.

**Templates.** The fabric families are large (millions of series) and their label blocks
do not change from one poll to the next: a :class:`Template` holds, for each of one family's
series, references to the few strings its label block is made of (the port's
``{device="..",port=".."``, shared by every family, and the sub-labels' ``,priority="3"}``),
built once per series layout; :meth:`Template.fill` joins them with a poll's values in one
C-level ``str.join``, the values formatted in bulk by :func:`format_values` (numpy),
byte-identical to :func:`fmt_value`. The label text is held once, in those strings, and in
the body; no template holds it joined.

**Values** are written as integers when they are whole and below 10^15 (``12000``, not
``12000.0``: counters in base units are whole numbers, and the lines stay short), as
Python's shortest round-trip ``repr`` otherwise, and ``NaN``/``+Inf``/``-Inf`` as the text
format spells them. prometheus_client writes every value as a float (``12000.0``, and
``1.2e+07`` above 10^6 via its Go-style formatting); both are valid exposition values, and
ours are what the golden file pins.

**gzip** is applied at most once per body and format (lazily, on the first scrape that asks
for it, in a worker thread), never to the whole body per scrape: the pre-rendered part is
compressed once into a deflate stream ending at a sync flush, and each scrape compresses
only its small tail (the process metrics, see :mod:`fabricmon.agent.exporter.server`) as a
new deflate stream after it, with the CRC-32 continued over the tail: one valid gzip member
(RFC 1952).
"""

from __future__ import annotations

import asyncio
import math
import struct
import zlib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np

from fabricmon.core.slicing import SLICE
from fabricmon.core.threads import in_daemon_thread, lower_priority

TEXT_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
OPENMETRICS_CONTENT_TYPE = "application/openmetrics-text; version=1.0.0; charset=utf-8"
EOF = b"# EOF\n"

# Chosen by measurement (``python -m bench.render`` prints it at every size): on the
# 100,000-port body (2.1 M series, 212 MB of text), 2-core machine, level 1 took 0.45 s CPU
# for 12.24 MB, level 3 0.66 s for 12.14 MB, level 6 1.92 s for 10.74 MB. Level 1 costs a
# third less CPU than 3 for 0.8 % more bytes on the wire (a counter body is repetitive: the
# label blocks compress at any level), and 6 costs 4x the CPU for 12 % fewer bytes.
GZIP_LEVEL = 1
_GZIP_HEADER = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x04\xff"  # deflate, no name, mtime 0, fastest, OS unknown


def escape_label(v: str) -> str:
    if "\\" in v or '"' in v or "\n" in v:
        v = v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return v


def escape_help(v: str) -> str:
    return v.replace("\\", "\\\\").replace("\n", "\\n")


def fmt_value(v: float) -> str:
    if v != v:
        return "NaN"
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    if float(v).is_integer() and abs(v) < 1e15:
        return str(int(v))
    return short(v)


def short(v: float) -> str:
    """A value that is not whole, rounded to 16 significant digits, then printed as the shortest
    text that reads back as that float (Python's repr, Go's strconv 'g' -1 in client_golang and
    Prometheus). The rounding drops the 17th digit a sum of scaled deltas carries: 1751 ms
    counted as 1.751 s is stored as 1.7510000000000001, which a plain repr prints; a float64
    carries 15.95 decimal digits, so that digit is the arithmetic's noise, not the counter's.
    The shortest form is what Prometheus prints back for the value it parsed (16 fixed digits
    would print ``0.0009980039920141129`` where it prints ``0.000998003992014113``), and the
    rounding keeps every counter's order (no false reset). tests/test_dashboards_prometheus.py
    (test_exposed_floats_are_what_prometheus_stores) compares the text with a real Prometheus."""
    text = repr(float(f"{v:.16g}"))
    return text[:-2] if text.endswith(".0") else text  # a whole value from 10^15 on: 1412079363126402


def format_values(values: np.ndarray | Sequence[float]) -> list[int | float | str]:
    """Each value as an object whose ``str()`` is :func:`fmt_value` of it, for ``%s``.

    Whole values below 10^15 become ints (one numpy cast for the whole column), other finite
    values stay floats (``str(float)`` is ``repr``), NaN and infinities become their text.
    A value beyond the float range raises, as :func:`fmt_value` does.
    """
    v = np.asarray(values, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        whole = (np.abs(v) < 1e15) & (v == np.trunc(v))
    if whole.all():
        return v.astype(np.int64).tolist()
    out: list[int | float | str] = v.tolist()
    idx = np.flatnonzero(whole)
    for i, x in zip(idx.tolist(), v[idx].astype(np.int64).tolist(), strict=True):
        out[i] = x
    finite = np.isfinite(v)
    for i in np.flatnonzero(finite & ~whole).tolist():
        out[i] = short(out[i])
    for i in np.flatnonzero(~finite).tolist():
        out[i] = fmt_value(out[i])
    return out


def labels(pairs: tuple[tuple[str, str], ...] | list[tuple[str, str]]) -> str:
    if not pairs:
        return ""
    return "{" + ",".join(f'{k}="{escape_label(str(v))}"' for k, v in pairs) + "}"


class Template:
    """One family's sample lines with the values left out: ``name{labels} value``, per series.

    Series ``i``'s label block is the concatenation of every column's ``i``-th string (say the
    port's ``{device=..,port=..`` and the sub-labels' ``,priority=..}``); a column is a list
    of references to a few distinct strings, or one string for every series. :meth:`fill`
    interleaves them with the values and joins them, a block of series at a time: the template
    holds references (8 bytes a series and column), not the label text.
    """

    __slots__ = ("_columns", "_name", "size")

    def __init__(self, name: str, *columns: Sequence[str] | str, size: int | None = None) -> None:
        lists = [c for c in columns if not isinstance(c, str)]
        n = len(lists[0]) if lists else (size or 0)
        for col in lists:
            if len(col) != n:
                raise ValueError(f"template columns of {n} and {len(col)} series")
        # The space before the value goes at the end of the last column (one string each of
        # the few distinct ones), so a series is its columns and its value's text.
        cols = list(columns) or [""]
        last = cols[-1]
        if isinstance(last, str):
            cols[-1] = last + " "
        else:
            spaced = {t: t + " " for t in set(last)}
            cols[-1] = list(map(spaced.__getitem__, last))
        self._name = name
        self._columns = cols
        self.size = n

    def fill(self, values: np.ndarray | Sequence[float]) -> list[str]:
        """The family's lines with ``values`` (one per label block, same order): a
        :attr:`Family.lines` block per :data:`~fabricmon.core.slicing.SLICE` series, each made
        by C calls over that many (on the pipeline worker, a C call over every series of a
        family held the GIL up to 0.26 s at 200,000 ports: core/slicing.py)."""
        n = self.size
        if len(values) != n:
            raise ValueError(f"template of {n} series given {len(values)} values")
        k = len(self._columns) + 2  # per series: newline and name, the columns, the value
        blocks = []
        for lo in range(0, n, SLICE):
            m = min(n - lo, SLICE)
            parts: list[str] = [f"\n{self._name}"] * (m * k)
            parts[0] = self._name
            for j, col in enumerate(self._columns, 1):
                parts[j::k] = [col] * m if isinstance(col, str) else col[lo:lo + m]
            parts[k - 1::k] = map(str, format_values(values[lo:lo + m]))
            blocks.append("".join(parts))
        return blocks


def sample_blocks(fmt: str, label_blocks: Sequence[str], values: np.ndarray | Sequence[float]) -> list[str]:
    """``fmt % (label block, value)`` lines (``fmt``: the sample name, already ``%``-escaped,
    then ``%s %s``), as :attr:`Family.lines` blocks of at most ``SLICE`` series like
    :meth:`Template.fill`: for families rendered without a template."""
    return ["\n".join(map(fmt.__mod__, zip(label_blocks[lo:lo + SLICE], format_values(values[lo:lo + SLICE]), strict=True)))
            for lo in range(0, len(label_blocks), SLICE)]


@dataclass(slots=True)
class Family:
    """One metric family: ``name`` is the sample name (``..._total`` for counters,
    ``..._info`` for info metrics); ``lines`` are rendered sample lines without newline
    (a block of several newline-joined lines counts as one entry). A block may be ``bytes``,
    already UTF-8: one a cache keeps from render to render, which the body then holds as the
    same object instead of a second copy (``fabricmon_port_info``: 16 MB at 100,000 ports)."""

    name: str
    type: str  # counter | gauge | info
    help: str
    lines: list[str | bytes] = field(default_factory=list)

    def add(self, label_block: str, value: float) -> None:
        self.lines.append(f"{self.name}{label_block} {fmt_value(value)}")

    def samples(self) -> list[str]:
        """Every sample line, one string each (the blocks split, ``bytes`` ones decoded)."""
        return [ln for b in self.lines for ln in (b if isinstance(b, str) else b.decode()).split("\n") if ln]


def _om_name(f: Family) -> str:
    if f.type == "counter" and f.name.endswith("_total"):
        return f.name[: -len("_total")]
    if f.type == "info" and f.name.endswith("_info"):
        return f.name[: -len("_info")]
    return f.name


Part = bytes | tuple[bytes, bytes]  # shared by both formats, or (text, OpenMetrics)


# The most one ``write`` hands the transport. asyncio's socket transport (Python 3.11) copies
# what the socket does not take at once into its buffer, so a client that reads slower than
# we write holds up to one write's bytes: the gzip body (12 MB at 100,000 ports) or a 16 MB
# cached block per scraper otherwise (4 concurrent scrapers: 128 MB more peak RSS, measured).
WRITE_SLICE = 1 << 20


def pieces(chunks: Iterable[bytes], limit: int = WRITE_SLICE) -> Iterator[bytes | memoryview]:
    """``chunks`` as pieces of at most ``limit`` bytes, in order: runs of small chunks (below
    ``limit // 16``) joined while they fit, each larger chunk as it is, or sliced (views) when
    above ``limit``: no copy of a body's blocks per scrape. Few pieces, because each is a
    system call on the event loop, after which the loop waits for the GIL while the pipeline
    worker is busy (up to the switch interval, agent/worker.py): a gzip body kept as the
    compressor's many small outputs, written one by one, held the loop in one request handler
    for 0.51 s at 200,000 ports (asyncio's slow-callback log)."""
    small = limit // 16
    pending: list[bytes] = []
    held = 0
    for c in chunks:
        if pending and (len(c) >= small or held + len(c) > limit):
            yield b"".join(pending)  # (one chunk alone: that same object)
            pending, held = [], 0
        if len(c) < small:
            pending.append(c)
            held += len(c)
        elif len(c) <= limit:
            yield c
        else:
            view = memoryview(c)
            yield from (view[i:i + limit] for i in range(0, len(c), limit))
    if pending:
        yield b"".join(pending)


class Body:
    """The exposition as parts shared by both formats where they agree (see the module doc).

    Without ``# EOF``: the server appends the per-scrape tail, then the trailer.
    """

    __slots__ = ("parts", "size")

    def __init__(self, parts: list[Part]) -> None:
        self.parts = parts
        self.size = (sum(len(p) for p in parts if isinstance(p, bytes)),
                     sum(len(p[0]) for p in parts if not isinstance(p, bytes)),
                     sum(len(p[1]) for p in parts if not isinstance(p, bytes)))

    def chunks(self, openmetrics: bool) -> list[bytes]:
        k = 1 if openmetrics else 0
        return [p if isinstance(p, bytes) else p[k] for p in self.parts]

    def nbytes(self, openmetrics: bool) -> int:
        return self.size[0] + self.size[2 if openmetrics else 1]

    def held_bytes(self) -> int:
        """Bytes this body keeps in memory for both formats."""
        return sum(self.size)


# Characters encoded per C call. The renderer's blocks are at most SLICE lines each
# (core/slicing.py); this bounds any other block: a 50 MB string encoded whole held the
# interpreter 0.1 s on the pipeline worker (an event-loop stall).
ENCODE_SLICE = 1 << 22


def encoded(block: str) -> bytes:
    """``block`` as UTF-8, as the body encodes it: for a cache that keeps it as bytes."""
    return b"".join(_encoded(block, b""))


def _encoded(block: str, end: bytes = b"\n") -> list[bytes]:
    """``block`` and ``end`` as UTF-8, in slices of at most :data:`ENCODE_SLICE` characters
    (UTF-8 encodes each code point alone, so the slices' bytes are the whole's)."""
    if len(block) <= ENCODE_SLICE:
        return [block.encode("utf-8", "replace") + end]
    out = [block[i:i + ENCODE_SLICE].encode("utf-8", "replace") for i in range(0, len(block), ENCODE_SLICE)]
    out[-1] += end
    return out


def build(families: list[Family]) -> Body:
    """One :class:`Body` for both formats. Empty families are still declared.

    Consumes the families' lines (each block's string is dropped once its bytes exist), so
    the strings and the bytes of a large family are not both held for the whole body.
    """
    parts: list[Part] = []
    for f in families:
        h = escape_help(f.help)
        ptype = "gauge" if f.type == "info" else f.type
        text = f"# HELP {f.name} {h}\n# TYPE {f.name} {ptype}\n"
        omn = _om_name(f)
        om = f"# HELP {omn} {h}\n# TYPE {omn} {f.type}\n"
        parts.append(text.encode("utf-8", "replace") if text == om else (text.encode("utf-8", "replace"), om.encode("utf-8", "replace")))
        for block in f.lines:
            # Payload strings are cleaned at the parse boundary (collectors/sanitize.py); "replace" is
            # the backstop that keeps one string no code point can encode (a lone surrogate from a
            # config or a bug) from failing the whole body for every target: it costs that one "?".
            parts.extend(_encoded(block) if isinstance(block, str) else (block, b"\n"))
        f.lines = []  # the strings are freed as soon as their bytes exist: one body in memory, not two
    return Body(parts)


def render(families: list[Family]) -> tuple[bytes, bytes]:
    """(Prometheus text 0.0.4, OpenMetrics 1.0) bodies, complete: for callers that want bytes."""
    body = build(families)
    return b"".join(body.chunks(False)), b"".join(body.chunks(True)) + EOF


@dataclass(slots=True)
class _Deflated:
    """A body's gzip member up to a sync flush, with the CRC-32 and length of what it holds."""

    head: list[bytes]  # in pieces of at most WRITE_SLICE, each a write: not one copy of it all (a GIL hold)
    crc: int
    size: int


def _deflate(chunks: list[bytes]) -> _Deflated:
    z = zlib.compressobj(GZIP_LEVEL, zlib.DEFLATED, -15)
    out, crc, size = [_GZIP_HEADER], 0, 0
    for c in chunks:
        if piece := z.compress(c):
            out.append(piece)
        crc = zlib.crc32(c, crc)
        size += len(c)
    out.append(z.flush(zlib.Z_SYNC_FLUSH))
    return _Deflated([bytes(p) for p in pieces(out)], crc, size)


def _gzip_tail(d: _Deflated, tail: bytes) -> bytes:
    """The rest of the gzip member after ``d.head``: ``tail`` deflated, the final block, the trailer."""
    z = zlib.compressobj(GZIP_LEVEL, zlib.DEFLATED, -15)
    return z.compress(tail) + z.flush() + struct.pack("<II", zlib.crc32(tail, d.crc), (d.size + len(tail)) & 0xFFFFFFFF)


class Exposition:
    """A rendered body plus its lazily-built gzip heads, one per format."""

    def __init__(self, body: Body, generation: int, rendered_at: float, render_seconds: float) -> None:
        self.body = body
        self.generation = generation
        self.rendered_at = rendered_at
        self.render_seconds = render_seconds
        self._gz: dict[bool, _Deflated] = {}
        self._compressing: dict[bool, asyncio.Future[_Deflated]] = {}

    @property
    def text(self) -> bytes:
        """The pre-rendered Prometheus text body (without the per-scrape tail), joined."""
        return b"".join(self.body.chunks(False))

    @property
    def openmetrics(self) -> bytes:
        """The pre-rendered OpenMetrics body with its ``# EOF`` (without the per-scrape tail), joined."""
        return b"".join(self.body.chunks(True)) + EOF

    def gzip_head(self, openmetrics: bool) -> list[bytes]:
        """The compressed pre-rendered body of one format, built on first use and kept."""
        return self._deflated(openmetrics).head

    async def compressed(self, openmetrics: bool) -> None:
        """Make sure one format's gzip head exists, compressing it in a worker thread (zlib
        releases the GIL): a second of deflate on a large fabric does not stop the event loop
        (polls, other scrapes), and concurrent scrapes wait for the same compression."""
        if openmetrics in self._gz:
            return
        task = self._compressing.get(openmetrics)
        if task is None:
            task = self._compressing[openmetrics] = in_daemon_thread(self._deflated, openmetrics, name="fabricmon-gzip")
        await asyncio.shield(task)  # a scrape that gives up does not cancel it for the others

    def _deflated(self, openmetrics: bool) -> _Deflated:
        lower_priority()  # (a thread of its own: the loop first when the cores are busy)
        d = self._gz.get(openmetrics)
        if d is None:
            d = self._gz[openmetrics] = _deflate(self.body.chunks(openmetrics))
        return d

    def response(self, openmetrics: bool, gzipped: bool, tail: bytes = b"") -> list[bytes]:
        """What one scrape sends, as chunks: the body, ``tail`` (rendered per scrape) and ``# EOF``."""
        tail = tail + EOF if openmetrics else tail
        if not gzipped:
            return [*self.body.chunks(openmetrics), tail]
        d = self._deflated(openmetrics)
        return [*d.head, _gzip_tail(d, tail)]

    def held_bytes(self) -> int:
        """Bytes kept: the body (both formats) and the gzip heads built so far."""
        return self.body.held_bytes() + sum(len(c) for d in self._gz.values() for c in d.head)


EMPTY = Exposition(Body([]), -1, 0.0, 0.0)
