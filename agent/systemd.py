"""sd_notify without libsystemd: READY, RELOADING, STOPPING, STATUS and WATCHDOG pings.

Does nothing when ``NOTIFY_SOCKET`` is unset (not under systemd). The watchdog ping is sent
from the event loop, and only while the agent reports itself healthy, so a wedged loop or
a dead scheduler lets systemd restart the service.
"""

from __future__ import annotations

import asyncio
import os
import socket
from collections.abc import Callable


def notify(*messages: str) -> bool:
    addr = os.environ.get("NOTIFY_SOCKET")
    if not addr or not messages:
        return False
    if addr.startswith("@"):
        addr = "\0" + addr[1:]
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as s:
            s.connect(addr)
            s.sendall("\n".join(messages).encode())
        return True
    except OSError:
        return False


def watchdog_interval() -> float | None:
    """Half of WATCHDOG_USEC in seconds, when the watchdog is on and meant for this process."""
    usec = os.environ.get("WATCHDOG_USEC")
    pid = os.environ.get("WATCHDOG_PID")
    if not usec or (pid and pid != str(os.getpid())):
        return None
    try:
        return int(usec) / 2e6
    except ValueError:
        return None


async def watchdog_loop(healthy: Callable[[], bool]) -> None:
    interval = watchdog_interval()
    if interval is None:
        return
    while True:
        if healthy():
            notify("WATCHDOG=1")
        await asyncio.sleep(interval)
