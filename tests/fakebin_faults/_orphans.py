"""Shared by the fake perfquery commands that leave processes behind (issue 32, "orphaned children").

``spawn(n, keep_stdout)`` starts ``n`` children in new sessions (``setsid``: outside the
command's process group) that sleep for a minute; with ``keep_stdout`` they hold the command's
stdout open, as a careless daemon or a hostile wrapper would. Each child's argv carries
``$FABRICMON_TEST_MARK`` so a test can find survivors in /proc.
"""
import json
import os
import subprocess
import sys
from pathlib import Path

CASE = Path(__file__).resolve().parents[2] / "collectors" / "perfquery" / "testcases" / "edr_switch_topology" / "payload.json"


def spawn(n: int, keep_stdout: bool) -> None:
    mark = os.environ.get("FABRICMON_TEST_MARK", "fabricmon-orphan")
    out = None if keep_stdout else subprocess.DEVNULL
    for _ in range(n):
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", mark], start_new_session=True,
                         stdout=out, stderr=out, stdin=subprocess.DEVNULL)


def block() -> str:
    """The recorded ``perfquery -x`` block, for the LID asked about."""
    text = json.loads(CASE.read_text())["perfquery"][0]
    args = sys.argv[1:]
    if "-l" in args and len(args) > args.index("-l") + 1:
        text = text.replace("Lid 1719 ", f"Lid {args[args.index('-l') + 1]} ", 1)
    return text
