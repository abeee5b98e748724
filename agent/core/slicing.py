"""Big C-level work cut into slices, so a thread doing it lets the event loop run in between.

CPython hands the GIL over between bytecodes, never inside one C call: ``sorted()`` of 200,000
tuples, or a ``str.join`` of 100,000 lines, holds it for all of its 0.2-0.8 s (measured at
100,000 ports by ``python -m bench.loop_stall``, which names the line that held it), and the
event loop waits that long. :func:`sorted_in_slices` sorts runs of :data:`SLICE` items (each a
short C call) and merges them with ``heapq.merge`` (Python: the GIL changes hands as it goes);
:func:`join_in_slices` joins pieces of at most :data:`SLICE` lines. Both give exactly what
``sorted`` and ``str.join`` give.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

T = TypeVar("T")
SLICE = 16_384  # items per C call: a few milliseconds


def sorted_in_slices(items: Iterable[T], key: Callable[[T], Any] | None = None) -> list[T]:
    """``sorted(items, key=key)``, without one long C call (stable, like ``sorted``)."""
    seq = list(items)
    if len(seq) <= SLICE:
        return sorted(seq, key=key)  # type: ignore[type-var,arg-type]
    runs = [sorted(seq[i:i + SLICE], key=key) for i in range(0, len(seq), SLICE)]  # type: ignore[type-var,arg-type]
    return list(heapq.merge(*runs, key=key))


def join_in_slices(sep: str, parts: Iterable[str]) -> str:
    """``sep.join(parts)`` for a long iterable: joined a slice at a time, then the slices."""
    seq = parts if isinstance(parts, list) else list(parts)
    if len(seq) <= SLICE:
        return sep.join(seq)
    return sep.join([sep.join(seq[i:i + SLICE]) for i in range(0, len(seq), SLICE)])
