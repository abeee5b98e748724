"""Pause Python's cyclic garbage collector around the hot paths that build no cycles.

Parsing a poll and rendering the exposition allocate millions of short-lived container
objects (samples, tuples). Each allocation burst triggers collections, and the older
generations hold every store series, so on a 100,000-port fabric (millions of tracked
objects) the collector's traversals cost as much as the work itself: measured with
``bench/``, parsing a perfquery poll of 100,000 ports took 6.5-7.1 CPU-s with the collector
running and 3.8-3.9 s with it paused. These paths create no reference cycles, so reference
counting frees everything they drop; pausing only postpones the collector's own work on
objects made elsewhere until the block ends. Reentrant, across threads too (the pipeline
worker and a state snapshot beside it, agent/worker.py): the collector is paused while any
block is open and restored, when the last one ends, to the state it was in before the first.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

_lock = threading.Lock()
_open = 0  # blocks open, in every thread
_was = True  # the collector's state when the first of them opened


@contextmanager
def gc_paused() -> Iterator[None]:
    global _open, _was
    with _lock:
        if _open == 0:
            _was = gc.isenabled()
            gc.disable()
        _open += 1
    try:
        yield
    finally:
        with _lock:
            _open -= 1
            if _open == 0 and _was:
                gc.enable()
