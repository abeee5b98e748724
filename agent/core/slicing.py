"""Big C-level work cut into slices, so a thread doing it lets the event loop run in between.

CPython hands the GIL over between bytecodes, never inside one C call: ``sorted()`` of 200,000
tuples, or a ``str.join`` of 100,000 lines, holds it for all of its 0.2-0.8 s (measured at
100,000 ports by ``python -m bench.loop_stall``, which names the line that held it), and the
event loop waits that long. :func:`sorted_in_slices` sorts runs of :data:`SLICE` items (each a
short C call) and merges them with ``heapq.merge`` (Python: the GIL changes hands as it goes);
:func:`in_blocks` joins lines into blocks of at most :data:`SLICE` lines, kept apart: one
string of a whole family (50 MB at 200,000 ports) would be a single copy, and on fresh memory
that is the longest C call of all (see below). :func:`sorted_in_slices` gives exactly what
``sorted`` gives; the blocks, joined with newlines, are ``"\n".join`` of the lines.

numpy lets go of the GIL inside most of its calls (ufuncs, ``take``, ``cumsum``, ``bincount``,
sorts), but ``np.repeat`` holds it throughout, page faults included: the first writes to
memory the process has not touched yet. Where such memory is expensive that is what stalled the
loop at 200,000 ports: on this project's bench VM (Firecracker, whose virtio-balloon reports
freed pages back to the host) a first touch costs about 5 ms per MB, and a per-reading column
at 200,000 ports is 35 MB, past glibc's largest dynamic mmap threshold (32 MB), so it is fresh
memory at every poll (measured: ``python -m bench.loop_stall 200000``, docs/scaling.md).
:func:`group_index` gives what ``np.repeat`` of group indices gives from calls that let go.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

import numpy as np

T = TypeVar("T")
SLICE = 16_384  # items per C call: a few milliseconds


def sorted_in_slices(items: Iterable[T], key: Callable[[T], Any] | None = None) -> list[T]:
    """``sorted(items, key=key)``, without one long C call (stable, like ``sorted``)."""
    seq = list(items)
    if len(seq) <= SLICE:
        return sorted(seq, key=key)  # type: ignore[type-var,arg-type]
    runs = [sorted(seq[i:i + SLICE], key=key) for i in range(0, len(seq), SLICE)]  # type: ignore[type-var,arg-type]
    return list(heapq.merge(*runs, key=key))


def in_blocks(lines: Sequence[str]) -> list[str]:
    """``lines`` as newline-joined blocks of at most :data:`SLICE` lines (an exposition family's
    ``lines``): no block for no lines."""
    return ["\n".join(lines[i:i + SLICE]) for i in range(0, len(lines), SLICE)]


def group_index(counts: Any) -> np.ndarray:
    """For groups of ``counts`` elements laid end to end, each element's group:
    ``np.repeat(np.arange(len(counts)), counts)``, built from ``cumsum`` and ``bincount``, which
    let go of the GIL (see the module docstring). ``values[group_index(counts)]`` is
    ``np.repeat(values, counts)``; several columns repeated by the same counts share one index."""
    ends = np.cumsum(np.asarray(counts, np.int64))
    n = int(ends[-1]) if len(ends) else 0
    # Each group's end is where the next group starts: one step up there (zero-sized groups
    # stack their steps on the same element; groups ending at n start nothing).
    return np.cumsum(np.bincount(ends[ends < n], minlength=n))
