"""Running a local command for a collector: own session, timeout, bounded output, nothing left behind.

- **Session.** Every command runs in its own session (process group), so a timeout or a
  cancelled poll kills the whole group with SIGKILL (MAD tools stuck in the kernel, wrapper
  scripts and their children alike; peers' "runaway children", treydock#38) and reaps it.
- **Leftovers.** What leaves the group (``setsid`` children, daemons) is found and killed by
  :mod:`fabricmon.collectors.reaper`; a command whose pipes stay open after it exited (a child
  holding its stdout) is done :data:`PIPE_GRACE_S` later, with what it printed, instead of
  timing out.
- **Output cap.** stdout is read up to ``max_output`` bytes, like HTTP bodies are capped
  (collectors/http_util.py): a command that prints more (``/dev/zero``, a runaway loop) is
  killed and the poll fails with reason ``size``; memory stays bounded whatever it prints.
  Each caller picks its cap for what its command can legitimately print (the constants below);
  stderr is kept up to :data:`MAX_STDERR` and the rest discarded (only its first line is used).
- **Clean exit.** The subprocess transport is closed before the call returns, so nothing is
  left for the garbage collector to close after the event loop (no "Event loop is closed").

Used by the perfquery, host and slurm collectors.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from dataclasses import dataclass

from fabricmon.collectors.base import ErrorReason, FetchError
from fabricmon.collectors.reaper import REAPER

# Output caps per command, each ~100x what the command prints on the largest real system:
# ``perfquery -x`` of one switch (all its ports, extended and basic blocks) is ~1.5 KB a port,
# 200 KB for a 128-port NDR switch; ibnetdiscover is ~110 B a port, 22 MB for 200,000 ports
# (bench/fabric.py), so 128 MiB covers the store's 1 M ports; ``ethtool -S`` is a few hundred
# counters (~50 KB); ``dcb``/``mlnx_qos`` a page of text. ``squeue --json`` prints every queued
# job with about a hundred fields (~5 KB a job): 256 MiB, the HTTP body cap, is ~50,000 jobs.
PERFQUERY_MAX_OUTPUT = 16 << 20
SLURM_MAX_OUTPUT = 256 << 20
IBNETDISCOVER_MAX_OUTPUT = 128 << 20
ETHTOOL_MAX_OUTPUT = 4 << 20
QOS_TOOL_MAX_OUTPUT = 1 << 20
MAX_STDERR = 64 << 10
PIPE_GRACE_S = 0.5  # after the command exited, how long its pipes may stay open (a child still writing)
_EXIT_POLL_S = 0.05  # how often a running command's exit is checked while its pipes are open
_CHUNK = 1 << 16


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


class _TooLong(Exception):
    pass


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


async def _read(stream: asyncio.StreamReader | None, limit: int, fail: bool) -> bytes:
    """Everything ``stream`` sends until EOF, at most ``limit`` bytes (beyond: _TooLong when
    ``fail``, else the rest is read and dropped)."""
    if stream is None:
        return b""
    chunks: list[bytes] = []
    total = 0
    while True:
        chunk = await stream.read(_CHUNK)
        if not chunk:
            return b"".join(chunks)
        if total >= limit:
            if fail:
                chunks.clear()  # not kept alive by the exception's frame until the poll's error is dropped
                raise _TooLong()
            continue
        chunks.append(chunk[: limit - total])
        total += len(chunk)
        if total > limit and fail:
            chunks.clear()
            raise _TooLong()


async def _collect(proc: asyncio.subprocess.Process, max_output: int, token: str) -> tuple[bytes, bytes]:
    """stdout and stderr until both end; once the process has exited, its pipes get
    PIPE_GRACE_S to end before their holders (what the command left running) are killed."""
    out = asyncio.ensure_future(_read(proc.stdout, max_output, True))
    err = asyncio.ensure_future(_read(proc.stderr, MAX_STDERR, False))
    both = asyncio.gather(out, err)
    try:
        # asyncio's Process.wait() returns only once the pipes are closed too: the exit itself is
        # seen through returncode, checked between reads.
        while not both.done() and proc.returncode is None:
            await asyncio.wait({both}, timeout=_EXIT_POLL_S)
        if not both.done():
            try:
                await asyncio.wait_for(asyncio.shield(both), PIPE_GRACE_S)
            except TimeoutError:  # someone the command started still holds its stdout/stderr
                _kill_group(proc.pid)
                REAPER.retire(token)
                REAPER.sweep()
        return await both
    finally:
        for task in (out, err):
            task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await both


async def run_command(argv: list[str], timeout: float, max_output: int = PERFQUERY_MAX_OUTPUT) -> CommandResult:
    """Run ``argv`` with a timeout; FetchError(reason="command"/"timeout"/"size") when it cannot finish.

    A non-zero exit status is not an error here: the callers decide from stdout.
    """
    token = REAPER.token()
    proc: asyncio.subprocess.Process | None = None
    clean = False
    REAPER.spawning += 1
    try:
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                start_new_session=True,
                env=REAPER.environment(token),
            )
        except OSError as exc:
            raise FetchError(f"cannot run {argv[0]}: {exc.strerror or exc}", reason=ErrorReason.COMMAND) from exc
        finally:
            REAPER.spawning -= 1
        REAPER.started(proc.pid, token)
        try:
            out, err = await asyncio.wait_for(_collect(proc, max_output, token), timeout)
        except TimeoutError:
            raise FetchError(f"`{' '.join(argv)}` timed out after {timeout:g} s", reason=ErrorReason.TIMEOUT) from None
        except _TooLong:
            raise FetchError(f"`{' '.join(argv)}` printed more than {max_output} bytes, the limit for this command; killed",
                             reason=ErrorReason.SIZE) from None
        clean = True
    finally:
        try:
            if proc is not None:
                _kill_group(proc.pid)  # a finished command's group may still hold background children
                await _finish(proc)  # reaped before the sweep, which would otherwise count it as a leftover
        finally:
            REAPER.finished(proc.pid if proc is not None else None, token, clean)
    rc = proc.returncode if proc.returncode is not None else -1
    return CommandResult(argv, rc, out.decode("utf-8", "replace"), err.decode("utf-8", "replace"))


async def _finish(proc: asyncio.subprocess.Process) -> None:
    """Wait (bounded) until the killed command is reaped, then close the transport now, not by
    the garbage collector after the event loop is gone."""
    deadline = time.monotonic() + 5.0
    try:
        while proc.returncode is None and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
    finally:  # cancelled or not, the transport is closed
        transport = getattr(proc, "_transport", None)
        if transport is not None:
            transport.close()
