"""Pause Python's cyclic garbage collector around the hot paths that build no cycles.

Parsing a poll and rendering the exposition allocate millions of short-lived container
objects (samples, tuples). Each allocation burst triggers collections, and the older
generations hold every store series, so on a 100,000-port fabric (millions of tracked
objects) the collector's traversals cost as much as the work itself: measured with
``bench/``, parsing a perfquery poll of 100,000 ports took 6.5-7.1 CPU-s with the collector
running and 3.8-3.9 s with it paused. These paths create no reference cycles, so reference
counting frees everything they drop; pausing only postpones the collector's own work on
objects made elsewhere until the block ends. Reentrant, and the collector is restored to
whatever state it was in.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def gc_paused() -> Iterator[None]:
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()
