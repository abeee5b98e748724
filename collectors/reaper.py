"""Nothing a command starts outlives it: find and kill what a finished command left behind.

A command runs in a session (process group) of its own, and a timeout kills that group. That
is not enough: a child that calls ``setsid()`` (a daemonising helper, a hostile wrapper) leaves
the group, keeps the command's stdout open so the poll never sees its end, and survives the
poll and the agent (issue 32: 12 such children after 14 s, every poll timing out).

**What systemd does, and why fabricmon does something else.** ``KillMode=control-group`` (the
unit default) kills every process of the unit's cgroup on stop: a cgroup is the one grouping a
process cannot leave by ``setsid`` or double-fork. It acts at stop only, though, and per unit,
not per poll; a per-poll cgroup needs a delegated subtree (``Delegate=yes``, a cgroup v2 mount
the agent may write) and moving the child before it runs (``preexec_fn``, unsafe with threads),
which the agent cannot count on when it runs as a plain process. So:

- **Subreaper.** The agent marks itself ``PR_SET_CHILD_SUBREAPER`` (Linux 3.4+, no privilege):
  a process whose parent dies is re-parented to the agent instead of init, so everything a
  command starts stays among the agent's children, whatever ``setsid()`` or double-fork it does.
- **Tag.** Every command runs with ``FABRICMON_COMMAND=<agent pid>.<random>`` in its environment,
  inherited by every descendant (``setsid`` keeps the environment). A token stays active while
  its command runs; a process carrying this agent's token of a finished command is a leftover
  (another agent's tokens are never touched).
- **Sweep.** After a command that ended badly (timeout, cancellation, output over its cap, its
  pipes still held after it exited) its leftovers are killed at once; after every poll that ran
  commands (:meth:`Reaper.after_poll`, however it ended) and once more when the agent stops, all
  leftovers are. A sweep reads ``/proc/self/task/*/children`` (the agent's children: a few
  small reads) and each unknown child's ``/proc/<pid>/environ``; SIGKILL and reap; repeat until
  none is left (a killed process's own children are re-parented to the agent in turn). Without
  the subreaper (another OS, a prctl refused, a test process) the sweep scans every process of
  ``/proc`` for the tag instead.
- **Strict mode** (``fabricmon run``: the daemon starts no other processes): a re-parented child
  that carries no token (it cleared its environment) is killed too, and zombies are reaped.
  Other processes embedding the collectors (tests, tools) keep strict mode off, so their own
  children are never touched.

Under systemd, ``KillMode=control-group`` stays the last line: anything that escaped even this
(a process that cleared its environment while the agent was not strict) dies with the unit.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import secrets
import signal
import time

log = logging.getLogger(__name__)

TAG = "FABRICMON_COMMAND"
_TAG_PREFIX = TAG.encode() + b"="
_PR_SET_CHILD_SUBREAPER = 36
_MAX_ROUNDS = 50  # a sweep repeats while it kills something (each round kills one generation)


class Reaper:
    """The process-wide bookkeeping of commands in flight (one per process: ``REAPER``)."""

    def __init__(self) -> None:
        self.subreaper = False
        self.strict = False
        self.running: dict[int, str] = {}  # pid of a command in flight -> its token
        self.active: set[str] = set()  # tokens of commands in flight
        self.spawning = 0  # commands being started: their child has no tag until it execs

    def enable(self, strict: bool = False) -> bool:
        """Become the subreaper of every descendant (once per process); ``strict``: see the module doc."""
        self.strict = self.strict or strict
        if self.subreaper:
            return True
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            self.subreaper = libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
        except (OSError, AttributeError):
            self.subreaper = False
        if not self.subreaper:
            log.info("cannot become the subreaper of commands' children (prctl PR_SET_CHILD_SUBREAPER); "
                     "their leftovers are found by scanning /proc")
        return self.subreaper

    def token(self) -> str:
        """A new command's token: this agent's pid, then random (another agent's tokens are not ours)."""
        tok = f"{os.getpid()}.{secrets.token_hex(8)}"
        self.active.add(tok)
        return tok

    def environment(self, token: str) -> dict[str, str]:
        return {**os.environ, TAG: token}

    def started(self, pid: int, token: str) -> None:
        self.running[pid] = token

    def finished(self, pid: int | None, token: str, clean: bool) -> None:
        """The command of ``token`` is over: its leftovers are swept now when it ended badly."""
        if pid is not None:
            self.running.pop(pid, None)
        self.active.discard(token)
        if not clean:
            self.sweep()

    def retire(self, token: str) -> None:
        """The command of ``token`` exited: what still carries its token is a leftover."""
        self.active.discard(token)

    def after_poll(self) -> None:
        """A poll that ran commands is over: nothing they started may outlive it."""
        self.sweep()

    def sweep(self, scan_all: bool | None = None) -> int:
        """Kill and reap every leftover of a finished command; returns how many were killed.
        ``scan_all``: every process of /proc, not only the agent's children (default: without the subreaper)."""
        if scan_all is None:
            scan_all = not self.subreaper
        total = 0
        for _ in range(_MAX_ROUNDS):
            pids = _all_pids() if scan_all else _children()
            victims = [pid for pid in pids if pid not in self.running and self._leftover(pid, scan_all)]
            if not victims:
                break
            for pid in victims:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            total += len(victims)
            self._reap(victims)
        if total:
            log.warning("killed %d process(es) that commands of finished polls left running (setsid or daemonised children)", total)
        return total

    def _leftover(self, pid: int, scan_all: bool) -> bool:
        tag = _tag(pid)
        if tag is not None:
            return tag.startswith(f"{os.getpid()}.") and tag not in self.active
        # An untagged child of ours: in strict mode an orphan too, unless a command is being started
        # (between fork and exec its child still has the agent's environment; the next sweep decides).
        return self.strict and not scan_all and not self.spawning

    def _reap(self, pids: list[int]) -> None:
        """Collect the killed processes that are our children (SIGKILL is delivered at once, but
        the exit takes a moment); the others are reaped by their own parent or init."""
        deadline = time.monotonic() + 0.5
        left = set(pids)
        while left and time.monotonic() < deadline:
            for pid in list(left):
                try:
                    done, _status = os.waitpid(pid, os.WNOHANG)
                except ChildProcessError:  # not our child (re-parented to init): not ours to reap
                    left.discard(pid)
                    continue
                if done:
                    left.discard(pid)
            if left:
                time.sleep(0.002)


def _children() -> list[int]:
    out: list[int] = []
    with contextlib.suppress(OSError):
        for tid in os.listdir("/proc/self/task"):
            with contextlib.suppress(OSError), open(f"/proc/self/task/{tid}/children", "rb") as fh:
                out.extend(int(x) for x in fh.read().split())
    return out


def _all_pids() -> list[int]:
    me = os.getpid()
    with contextlib.suppress(OSError):
        return [int(d) for d in os.listdir("/proc") if d.isdigit() and int(d) != me]
    return []


def _tag(pid: int) -> str | None:
    """The token in a process's environment, or None (none, a zombie, not readable)."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as fh:
            env = fh.read()
    except OSError:
        return None
    for item in env.split(b"\0"):
        if item.startswith(_TAG_PREFIX):
            return item[len(_TAG_PREFIX):].decode("ascii", "replace")
    return None


REAPER = Reaper()
