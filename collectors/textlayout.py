"""Read the numbers of a poll's texts in bulk while the rest of the texts stays the same.

A device's text output (``perfquery -x``, snmprec) is the same poll after poll except for its
counter values, and those are decimal integers at the ends of lines
(``PortXmitData:....................36298026860928``). A parser reads such texts once with its
exact, line-by-line code and tells :meth:`TextLayout.build` what the number that ends each
line is to it (:data:`VALUE`, :data:`CHECKED`, :data:`FREE`, or by default :data:`FIXED`).
The next poll's texts are then read by :meth:`TextLayout.read` with a few numpy passes over
their bytes, without a Python object per line; the exact parse runs again only when the
texts no longer fit.

**What "fits" means, and why it gives the exact parse's result.** A line is its *prefix*
(everything before its trailing number) and its *number* (the longest run of ASCII digits
that ends it, possibly empty). Texts fit when they have the same lines, each line's prefix
is byte for byte the same (SHA-256 over every prefix, lines grouped by prefix length), and
each number meets its role:

* ``FIXED``: the same digits as when the layout was built (the default: header lines, LIDs,
  anything the parser reads that is not a counter value);
* ``FREE``: any digits (a line the parser skips without reading its value);
* ``CHECKED``: a plain decimal (no sign, no leading zero, after one of the parser's
  separators: ``.``, ``:`` or a space for perfquery's ``Name:....``, ``|`` for snmprec) below
  the line's limit, whose value the parser checks but does not use (a duplicate that a later
  line overrides): a valid value raises no warning, whatever it is;
* ``VALUE``: the same, and its value is returned.

A parser that reads lines by their prefix and their numbers sees the same lines, and the same
numbers where it reads them, so it would produce the same result with the new values where
:meth:`read` returns them. The prefix check is the cost: every byte of the texts is read once
more (a few ns a byte; ``python -m bench``).

Texts are joined with ``"\\n\\x00"`` (a text with a NUL does not fit) into batches of about
:data:`BATCH_BYTES`, so the arrays of one batch are a few megabytes at any size of poll.
"""

from __future__ import annotations

import hashlib
from array import array
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from itertools import repeat
from typing import Any

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from fabricmon.core.model import Counters, KeyColumn

FIXED, FREE, CHECKED, VALUE = 0, 1, 2, 3
# 2 MB: a batch's transient arrays (its bytes, twice while joined, a byte mask, the prefixes
# of a chunk of lines) are a few times its size, on top of the poll's texts, and they set
# the agent's peak RSS. Measured (python -m bench.size): 4 MB batches instead of 8 took about
# 15 MB off the peak at 100,000 ports, 2 MB another 7 MB on Selene; parse CPU did not move.
BATCH_BYTES = 2 << 20
SEP = b"\n\x00"
_DIGITS = 20  # 2^64 has 20 digits: shorter numbers are read in uint64 arrays, longer ones one by one
_CHUNK = 1 << 16  # lines gathered per hash update (their prefixes: a few MB)
# What may precede a plain value by default: the end of perfquery's ``Name:....`` or the
# whitespace after it (ASCII whitespace but the newline, Python's ``[^\S\n]``).
NAME_DOTS = b".: \t\x0b\x0c\r\x1c\x1d\x1e\x1f"


def same(a: object, b: object) -> bool:
    """``a == b``, with numpy arrays (also inside tuples) compared by dtype and content: the
    equality of layouts (a parse state holds one, and states are compared)."""
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return isinstance(a, np.ndarray) and isinstance(b, np.ndarray) and a.dtype == b.dtype and np.array_equal(a, b)
    if isinstance(a, tuple) and isinstance(b, tuple):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    return a == b


def fields_equal(a: object, b: object) -> bool:
    """Two dataclass instances of one type whose fields are :func:`same`."""
    return type(a) is type(b) and all(same(getattr(a, f.name), getattr(b, f.name)) for f in fields(a))  # type: ignore[arg-type]


class Marks:
    """What a parser says about the numbers of one text that are not FIXED, by line index in
    the text (the first line is 0), as packed columns: a 100,000-port poll has 2 million."""

    __slots__ = ("limit", "line", "role")

    def __init__(self) -> None:
        self.line = array("q")
        self.role = array("B")
        self.limit = array("Q")

    def extend(self, lines: Sequence[int], role: int, limits: Sequence[int] | None = None) -> None:
        """``lines`` have numbers of ``role``; ``limits``: a CHECKED number is below its own
        (0: any 64-bit value)."""
        self.line.extend(lines)
        self.role.extend(repeat(role, len(lines)))
        self.limit.extend(limits if limits is not None else repeat(0, len(lines)))


def _join(texts: Sequence[str]) -> bytes | None:
    """The texts as one ASCII byte string, every line ended by ``\\n``; None when a text is not
    ASCII or holds a NUL (its boundaries would be ambiguous)."""
    try:
        data = SEP.join([t.encode("ascii") for t in texts]) + b"\n"
    except UnicodeEncodeError:
        return None
    return data if data.count(0) == len(texts) - 1 else None


def _lines(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(start, end) of every line; ``end`` is the position of its ``\\n``."""
    end = np.flatnonzero(a == 10)
    start = np.empty(len(end), np.int64)
    start[:1] = 0
    start[1:] = end[:-1] + 1
    return start, end


def _numbers(a: np.ndarray, start: np.ndarray, stop: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each run ``a[start:stop]`` (at least one byte) read as a decimal: (value as uint64, all
    digits, 2^64 or more). Runs of :data:`_DIGITS` digits or more are read one by one (rare: a
    counter reaches 10^19 after decades); a value of 2^64 or more reads as 0."""
    length = stop - start
    val = np.zeros(len(start), np.uint64)
    ok = np.ones(len(start), bool)
    big = np.zeros(len(start), bool)
    act = np.flatnonzero(length < _DIGITS)
    ten = np.uint64(10)
    for k in range(int(length[act].max()) if len(act) else 0):
        act = act[length[act] > k]
        d = a[start[act] + k] - np.uint8(48)
        bad = d >= 10
        if bad.any():
            ok[act[bad]] = False
        val[act] = val[act] * ten + d
    for i in np.flatnonzero(length >= _DIGITS).tolist():
        text = a[start[i]:stop[i]].tobytes()
        if not text.isdigit():
            ok[i] = False
        elif (v := int(text)) >> 64:
            big[i] = True
        else:
            val[i] = v
    return val, ok, big


def _prefix_digest(a: np.ndarray, start: np.ndarray, classes: Sequence[tuple[int, np.ndarray]]) -> bytes:
    """SHA-256 of every line's prefix, class by class (the lines of one prefix length together)."""
    h = hashlib.sha256()
    for width, lines in classes:
        h.update(width.to_bytes(4, "little") + len(lines).to_bytes(8, "little"))
        windows = sliding_window_view(a, width)
        for i in range(0, len(lines), _CHUNK):
            h.update(windows[start[lines[i:i + _CHUNK]]])
    return h.digest()


@dataclass(frozen=True, slots=True, eq=False)
class _Batch:
    """One batch of texts (``first`` to ``stop``) as it was when the layout was built."""

    first: int
    stop: int
    prefix: np.ndarray  # per line: bytes before its number (the whole line when it has none)
    has_number: np.ndarray  # per line: it ends with a number (the numbered lines, in order, are its nonzero)
    classes: tuple[tuple[int, np.ndarray], ...]  # (prefix length, its lines), lengths > 0
    digest: bytes
    role: np.ndarray  # per numbered line (uint8)
    limit: np.ndarray  # per numbered line: its limit's place in ``limits`` (CHECKED/VALUE numbers are below it)
    limits: np.ndarray  # the distinct limits (uint64; 0: 2^64)
    fixed: np.ndarray  # positions in ``numbered`` of the FIXED numbers
    fixed_value: np.ndarray  # their values (uint64; 0 for those of 2^64 or more: see ``huge``)
    fixed_len: np.ndarray  # their digit counts
    huge: Mapping[int, bytes]  # position -> digits, for FIXED numbers of 2^64 or more

    __eq__ = fields_equal


@dataclass(frozen=True, slots=True, eq=False)
class TextLayout:
    """Where the numbers are in a list of texts, and which ones :meth:`read` returns."""

    ntexts: int
    batches: tuple[_Batch, ...]
    out: np.ndarray  # per returned value: its position among all batches' numbered lines

    __eq__ = fields_equal

    @classmethod
    def build(cls, texts: Sequence[str], marks: Sequence[Marks], out_text: Sequence[int],
              out_line: Sequence[int], before: bytes = NAME_DOTS) -> TextLayout | None:
        """The layout of ``texts``, or None when they cannot be read in bulk.

        ``marks[i]``: text ``i``'s FREE and CHECKED numbers; a CHECKED number that is not a
        plain decimal below its limit stays FIXED. ``out_text``/``out_line``: (text, line) of
        each number :meth:`read` returns, in its order: each must be CHECKED in ``marks`` and
        plain, and becomes VALUE. None when one is not, or a text is not ASCII or holds a NUL.
        """
        if len(marks) != len(texts):
            raise ValueError(f"{len(marks)} marks for {len(texts)} texts")
        text_of, line_of = np.asarray(out_text, np.int64), np.asarray(out_line, np.int64)
        out_at = np.full(len(text_of), -1, np.int64)
        sep = np.zeros(256, bool)
        sep[list(before)] = True
        batches: list[_Batch] = []
        base = first = 0
        while first < len(texts):
            stop, size = first, 0
            while stop < len(texts) and (stop == first or size + len(texts[stop]) <= BATCH_BYTES):
                size += len(texts[stop]) + len(SEP)
                stop += 1
            batch = _build_batch(texts, first, stop, marks, text_of, line_of, out_at, base, sep)
            if batch is None:
                return None
            batches.append(batch)
            base += int(np.count_nonzero(batch.has_number))
            first = stop
        if (out_at < 0).any():
            return None
        return cls(len(texts), tuple(batches), out_at.astype(np.int32) if len(out_at) and out_at.max() < 1 << 31 else out_at)

    def read(self, texts: Sequence[str]) -> np.ndarray | None:
        """The VALUE numbers of ``texts`` (uint64, in ``out`` order), or None when the texts
        do not fit this layout (see the module docstring)."""
        if len(texts) != self.ntexts:
            return None
        numbered = np.empty(sum(len(b.role) for b in self.batches), np.uint64)  # every batch's, in one array
        at = 0
        for b in self.batches:
            values = _read_batch(b, texts[b.first:b.stop])
            if values is None:
                return None
            numbered[at:at + len(values)] = values
            at += len(values)
        return numbered[self.out]


@dataclass(frozen=True, slots=True, eq=False)
class CounterShape:
    """A poll's counter columns but for their values, kept from its line-by-line parse by a
    layout that reads the next poll in bulk (perfquery's, SNMP's): :meth:`counters` makes the
    same columns with the values :meth:`TextLayout.read` returns. Every poll gets the same
    ``ports``, ``port_of`` and ``keys`` objects, so the store reuses its row plan."""

    ports: list[tuple[str, str]]
    port_of: np.ndarray  # int32
    keys: list[tuple[str, tuple[Any, ...]]] | KeyColumn
    bits: np.ndarray  # int16
    saturating: np.ndarray  # bool
    scale: np.ndarray  # float32 when that is exact (the store reads it as float64), else float64
    distinct: tuple[tuple[str, tuple[Any, ...]], ...]

    __eq__ = fields_equal  # by content: parse states are compared

    @classmethod
    def of(cls, counters: Counters) -> CounterShape:
        """The shape of ``counters`` (numpy columns are kept when they have these dtypes)."""
        scale = np.asarray(counters.scale, np.float64)
        narrow = scale.astype(np.float32)
        return cls(counters.ports, np.asarray(counters.port_of, np.int32), counters.keys,
                   np.asarray(counters.bits, np.int16), np.asarray(counters.saturating, bool),
                   narrow if np.array_equal(narrow, scale) else scale, tuple(counters.distinct_keys()))

    def counters(self, values: np.ndarray) -> Counters:
        """The columns with ``values`` (one per key, in order)."""
        return Counters.bulk(self.ports, self.port_of, self.keys, values, self.bits, self.saturating, self.scale,
                             self.distinct)


def _build_batch(texts: Sequence[str], first: int, stop: int, marks: Sequence[Marks], out_text: np.ndarray,
                 out_line: np.ndarray, out_at: np.ndarray, base: int, before: np.ndarray) -> _Batch | None:
    """Texts ``first`` to ``stop`` as one batch; fills ``out_at`` for the ``out`` numbers in them."""
    data = _join(texts[first:stop])
    if data is None:
        return None
    a = np.frombuffer(data, np.uint8)
    start, end = _lines(a)
    if len(end) and int((end - start).max()) >= 1 << 31:
        return None
    # Each line's number: walk back from its end over the digits.
    num = end.copy()
    act = np.flatnonzero(end > start)
    while len(act):
        act = act[(a[num[act] - 1] - np.uint8(48)) < 10]
        num[act] -= 1
        act = act[num[act] > start[act]]
    prefix = num - start
    numbered = np.flatnonzero(num < end)
    n_start, n_end = num[numbered], end[numbered]
    values, _, big = _numbers(a, n_start, n_end)
    length = n_end - n_start
    # The first line of each text (texts are ASCII: characters are bytes), and each line's
    # place among the numbered lines (-1: it has no number).
    offsets = np.cumsum([0] + [len(t) + len(SEP) for t in texts[first:stop - 1]])
    first_line = np.searchsorted(start, offsets, "right") - 1  # the line that starts with the NUL before it
    place = np.full(len(end), -1, np.int64)
    place[numbered] = np.arange(len(numbered))
    # Plain: no leading zero, below 2^64, after "Name:..." or a space (so the parser's value
    # is these digits alone).
    plain = ~big & ((length == 1) | (a[n_start] != 48)) & (n_start > start[numbered]) & before[a[n_start - 1]]
    role = np.zeros(len(numbered), np.uint8)
    limit = np.zeros(len(numbered), np.uint64)
    for ti in range(first, stop):
        m = marks[ti]
        if not len(m.line):
            continue
        lines = np.frombuffer(m.line, np.int64) + first_line[ti - first]
        at = place[lines.clip(0, len(place) - 1)]
        r, lim = np.frombuffer(m.role, np.uint8), np.frombuffer(m.limit, np.uint64)
        ok = (lines < len(place)) & (at >= 0)
        ok[ok] &= (r[ok] == FREE) | (plain[at[ok]] & ((lim[ok] == 0) | (values[at[ok]] < lim[ok])))
        role[at[ok]], limit[at[ok]] = r[ok], lim[ok]
    mine = np.flatnonzero((out_text >= first) & (out_text < stop))
    lines = first_line[out_text[mine] - first] + out_line[mine]
    at = place[lines.clip(0, len(place) - 1)]
    if ((lines >= len(place)) | (at < 0)).any() or (role[at] != CHECKED).any():
        return None
    role[at] = VALUE
    out_at[mine] = base + at
    fixed = np.flatnonzero(role == FIXED)
    huge = {int(i): data[n_start[i]:n_end[i]] for i in fixed[big[fixed]].tolist()}
    widths = np.unique(prefix[prefix > 0])
    classes = tuple((int(w), np.flatnonzero(prefix == w).astype(np.int32)) for w in widths.tolist())
    limits, code = np.unique(limit, return_inverse=True)
    return _Batch(first, stop, prefix.astype(np.uint16 if len(prefix) and prefix.max() < 1 << 16 else np.int32),
                  num < end, classes, _prefix_digest(a, start, classes), role,
                  code.astype(np.uint8 if len(limits) <= 256 else np.int32), limits, fixed.astype(np.int32),
                  values[fixed], length[fixed].astype(np.int32), huge)


def _read_batch(b: _Batch, texts: Sequence[str]) -> np.ndarray | None:
    """Every numbered line's value (uint64; meaningful for CHECKED and VALUE), or None when the
    texts do not fit."""
    data = _join(texts)
    if data is None:
        return None
    a = np.frombuffer(data, np.uint8)
    start, end = _lines(a)
    if len(end) != len(b.prefix):
        return None
    width = end - start
    if not ((width >= b.prefix).all() and np.array_equal(width > b.prefix, b.has_number)):
        return None
    if _prefix_digest(a, start, b.classes) != b.digest:
        return None
    lines = np.flatnonzero(b.has_number)
    n_start = start[lines] + b.prefix[lines].astype(np.int64)
    n_end = end[lines]
    values, digits_only, big = _numbers(a, n_start, n_end)
    if not digits_only.all():
        return None
    length = n_end - n_start
    fixed = b.fixed
    if not (np.array_equal(length[fixed], b.fixed_len) and np.array_equal(values[fixed], b.fixed_value)):
        return None
    for i, text in b.huge.items():
        if data[n_start[i]:n_end[i]] != text:
            return None
    read = b.role >= CHECKED
    if (read & (big | ((length > 1) & (a[n_start] == 48)))).any():
        return None  # 2^64 or more, or a leading zero (int(text, 0) refuses it): not a plain value
    limit = b.limits[b.limit]
    bounded = read & (limit > 0)
    if (values[bounded] >= limit[bounded]).any():
        return None
    return values
