"""Work handed to a thread that must never hold the process at exit.

``asyncio.to_thread`` runs on the loop's default executor, whose threads ``asyncio.run`` and the
interpreter wait for at exit: a JSON decode of a large body, a topology parse or a state write
still running at SIGTERM delayed the stop by as long as it took (5 s on a loaded machine, past
the promise of a stop within 5 s). :func:`in_daemon_thread` runs one call in a daemon thread of
its own instead: at exit, nobody waits for it (a thread per call is cheap next to the calls it
is used for: seconds of CPU or a disk write).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")

# How much lower than the event loop's the CPU priority of the agent's heavy threads is (the
# pipeline worker, the gzip compression): nice +10 has about a tenth of the CPU weight of
# nice 0 under Linux's scheduler (sched(7), the CFS weight table), so when the cores are busy
# the loop (scrapes, /healthz, polls, the systemd watchdog) runs first and the heavy work waits.
BACKGROUND_NICE = 10
_lowered = threading.local()


def lower_priority() -> None:
    """Give the calling thread :data:`BACKGROUND_NICE` more niceness, once per thread. Linux
    schedules threads as tasks, so ``setpriority`` on the thread's own id lowers it alone (a
    task may always lower its own priority). Elsewhere, or if refused, nothing changes."""
    if getattr(_lowered, "done", False):
        return
    _lowered.done = True
    with contextlib.suppress(OSError, AttributeError):
        tid = threading.get_native_id()
        os.setpriority(os.PRIO_PROCESS, tid, min(19, os.getpriority(os.PRIO_PROCESS, tid) + BACKGROUND_NICE))


def in_daemon_thread(fn: Callable[..., T], *args: Any, name: str = "fabricmon-offload") -> asyncio.Future[T]:
    """``fn(*args)`` in a daemon thread, as a future of the running loop."""
    loop = asyncio.get_running_loop()
    fut: asyncio.Future[T] = loop.create_future()

    def settle(result: Any, error: BaseException | None) -> None:
        if not fut.done():
            fut.set_exception(error) if error is not None else fut.set_result(result)

    def run() -> None:
        result, error = None, None
        try:
            result = fn(*args)
        except BaseException as exc:
            error = exc
        with contextlib.suppress(RuntimeError):  # the loop is gone: nobody waits any more
            loop.call_soon_threadsafe(settle, result, error)

    threading.Thread(target=run, name=name, daemon=True).start()
    return fut
