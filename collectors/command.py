"""Running a local command for a collector: own process group, timeout, kill on cancel.

Every command runs in its own session (process group), so a timeout or a cancelled poll
kills the whole group with SIGKILL (MAD tools stuck in the kernel, wrapper scripts and
their children alike; peers' "runaway children", treydock#38) and reaps it. Used by the
perfquery and host collectors.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from dataclasses import dataclass

from fabricmon.collectors.base import ErrorReason, FetchError


@dataclass(slots=True)
class CommandResult:
    argv: list[str]
    returncode: int
    stdout: str
    stderr: str

    def describe_failure(self, what: str) -> str:
        first = next((ln.strip() for ln in self.stderr.splitlines() if ln.strip()), "")
        detail = f": {first}" if first else ""
        return f"`{' '.join(self.argv)}` {what} (exit status {self.returncode}){detail}"


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


async def run_command(argv: list[str], timeout: float) -> CommandResult:
    """Run ``argv`` with a timeout; FetchError(reason="command"/"timeout") when it cannot finish.

    A non-zero exit status is not an error here: the callers decide from stdout.
    """
    try:
        proc = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            start_new_session=True,
        )
    except OSError as exc:
        raise FetchError(f"cannot run {argv[0]}: {exc.strerror or exc}", reason=ErrorReason.COMMAND) from exc
    finished = False
    try:
        try:
            out, err = await asyncio.wait_for(proc.communicate(), timeout)
        except TimeoutError:
            raise FetchError(f"`{' '.join(argv)}` timed out after {timeout:g} s", reason=ErrorReason.TIMEOUT) from None
        finished = True
    finally:
        if not finished:
            # Timeout or cancellation: the group may hold children that keep our pipes open.
            _kill_group(proc.pid)
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await asyncio.wait_for(proc.wait(), 5.0)
    rc = proc.returncode if proc.returncode is not None else -1
    return CommandResult(argv, rc, out.decode("utf-8", "replace"), err.decode("utf-8", "replace"))
