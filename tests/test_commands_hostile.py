"""Hostile local commands (issue 32): endless output, setsid children holding stdout, daemonised
leftovers, a hang; and the fan-out that must not queue a task per port.

Each fake command lives in tests/fakebin_faults/. Survivors are looked for in /proc by a mark
the fake children carry in their argv (``FABRICMON_TEST_MARK``, unique per test).
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
import uuid

import pytest

from fabricmon.collectors import command, fanout
from fabricmon.collectors.base import ErrorReason, FetchError
from fabricmon.collectors.command import run_command
from fabricmon.collectors.reaper import REAPER
from tests.conftest import ROOT

FAKEBIN = ROOT / "tests" / "fakebin_faults"


@pytest.fixture
def mark(monkeypatch) -> str:
    m = f"fabricmon-test-{uuid.uuid4().hex}"
    monkeypatch.setenv("FABRICMON_TEST_MARK", m)
    return m


def survivors(mark: str) -> list[int]:
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/cmdline", "rb") as fh:
                    if mark.encode() in fh.read():
                        out.append(int(d))
            except OSError:
                pass
    return out


def gone(mark: str, within: float = 3.0) -> bool:
    deadline = time.monotonic() + within
    while survivors(mark):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


async def test_endless_output_is_cut_at_the_cap():
    t0 = time.monotonic()
    with pytest.raises(FetchError) as exc:
        await run_command([str(FAKEBIN / "perfquery_zero")], timeout=30, max_output=1 << 20)
    assert exc.value.reason == ErrorReason.SIZE and "more than 1048576 bytes" in str(exc.value)
    assert time.monotonic() - t0 < 30  # cut at the cap, not at the timeout


async def test_setsid_children_holding_stdout_neither_stall_the_command_nor_survive_it(mark):
    res = await run_command([str(FAKEBIN / "perfquery_orphans"), "-x", "-l", "7", "1"], timeout=30)
    assert res.returncode == 0 and "Lid 7 " in res.stdout  # finished with its output, not timed out
    REAPER.after_poll()
    assert gone(mark), survivors(mark)


async def test_a_daemonised_child_does_not_outlive_the_poll(mark):
    res = await run_command([str(FAKEBIN / "perfquery_daemon"), "-x", "-l", "7", "1"], timeout=30)
    assert res.returncode == 0
    REAPER.after_poll()
    assert gone(mark), survivors(mark)


async def test_a_hanging_command_times_out_with_everything_it_started(mark):
    with pytest.raises(FetchError) as exc:
        await run_command([str(FAKEBIN / "perfquery_hang")], timeout=1.5)
    assert exc.value.reason == ErrorReason.TIMEOUT
    assert gone(mark), survivors(mark)


async def test_a_cancelled_command_leaves_nothing(mark):
    task = asyncio.create_task(run_command([str(FAKEBIN / "perfquery_hang")], timeout=30))
    await asyncio.sleep(1.0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert gone(mark), survivors(mark)


def test_no_event_loop_closed_traceback_at_exit(mark):
    """The orphans hold the pipes past the loop's end unless the transports are closed first."""
    code = ("import asyncio, sys; from fabricmon.collectors.command import run_command; "
            "r = asyncio.run(run_command([sys.argv[1], '-x', '-l', '7', '1'], 30)); print(r.returncode)")
    proc = subprocess.run([sys.executable, "-c", code, str(FAKEBIN / "perfquery_orphans")], capture_output=True,
                          text=True, timeout=60)
    assert proc.stdout.strip() == "0"
    assert "Traceback" not in proc.stderr and "Event loop is closed" not in proc.stderr, proc.stderr
    assert gone(mark), survivors(mark)


def test_the_agent_process_is_the_subreaper_of_its_commands(mark):
    """In `fabricmon run` (strict mode) a leftover is a child of the agent and is killed and
    reaped, even one that cleared its environment (no tag); checked in a process of its own."""
    code = ("import asyncio, os, subprocess, sys, time\n"
            "from fabricmon.collectors.reaper import REAPER\n"
            "assert REAPER.enable(strict=True)\n"
            "subprocess.run(['sh', '-c', 'env -i setsid sleep 60 ' + sys.argv[1] + ' & exit 0'])\n"
            "time.sleep(0.3)\n"
            "print(REAPER.sweep())\n")
    proc = subprocess.run([sys.executable, "-c", code, mark], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "1"
    assert gone(mark), survivors(mark)


async def test_fan_out_runs_a_few_workers_not_a_task_per_item():
    """One task per port behind one semaphore made a poll timeout O(n^2) to cancel (issue 32)."""
    seen: list[int] = []

    async def call(i: int, item: int) -> None:
        seen.append(len(asyncio.all_tasks()))
        await asyncio.sleep(0)

    await fanout.for_each(list(range(20_000)), call, 4)
    assert max(seen) <= 4 + 1  # the workers and this test's own task

    started = asyncio.Event()

    async def slow(i: int, item: int) -> None:
        started.set()
        await asyncio.sleep(60)

    task = asyncio.create_task(fanout.for_each(list(range(200_000)), slow, 8))
    await started.wait()
    assert len(asyncio.all_tasks()) <= 8 + 2
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


def test_caps_are_ordered_by_what_each_command_prints():
    assert command.QOS_TOOL_MAX_OUTPUT < command.ETHTOOL_MAX_OUTPUT < command.PERFQUERY_MAX_OUTPUT < command.IBNETDISCOVER_MAX_OUTPUT
