"""Shared code of the fake infiniband-diags commands in this folder (tests only).

They print recorded output from ``$FAKE_IB_DIR``:
``ibnetdiscover.out`` for ibnetdiscover; ``perfquery-x-<lid>.out`` (with ``-x``),
``perfquery-c-<lid>.out`` (with ``-c``, PortSamplesControl) or ``perfquery-<lid>.out`` for
perfquery. A missing file behaves like a MAD query failure, with perfquery's own message.
Each call appends its argv as a JSON line to ``$FAKE_IB_LOG`` when set.

Modes, from ``$FAKE_<TOOL>_MODE`` (TOOL = IBNETDISCOVER or PERFQUERY), optionally limited to
one LID by ``$FAKE_<TOOL>_LID``:
- ``hang``: start a child ``sleep``, write both PIDs to ``$FAKE_IB_PIDFILE``, sleep;
- ``noisy``: print warnings on stderr and exit 1, with good stdout;
- ``fail``: print an error on stderr and exit 255 with no stdout.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

_VALUE_OPTS = {"-C", "-P", "-t", "-y", "-G", "--Ca", "--Port", "--timeout"}


def _positional(args: list[str]) -> list[str]:
    out, skip = [], False
    for a in args:
        if skip:
            skip = False
        elif a in _VALUE_OPTS:
            skip = True
        elif not a.startswith("-"):
            out.append(a)
    return out


def _hang() -> None:
    child = subprocess.Popen(["sleep", "300"])  # same process group: it holds our stdout open too
    with open(os.environ["FAKE_IB_PIDFILE"], "a") as f:
        f.write(f"{os.getpid()}\n{child.pid}\n")
    time.sleep(300)


def main(tool: str) -> int:
    args = sys.argv[1:]
    log = os.environ.get("FAKE_IB_LOG")
    if log:
        with open(log, "a") as f:
            f.write(json.dumps([tool, *args]) + "\n")
    pos = _positional(args)
    lid = pos[0] if pos else ""
    mode = os.environ.get(f"FAKE_{tool.upper()}_MODE", "")
    only = os.environ.get(f"FAKE_{tool.upper()}_LID")
    if only and only != lid:
        mode = ""
    if mode == "hang":
        _hang()
    if mode == "fail":
        sys.stderr.write("ibwarn: [4242] mad_rpc_open_port: client_register for mgmt 1 failed\n")
        return 255
    if tool == "ibnetdiscover":
        name = "ibnetdiscover.out"
    elif "-c" in args:
        name = f"perfquery-c-{lid}.out"
    else:
        name = f"perfquery{'-x' if '-x' in args else ''}-{lid}.out"
    path = os.path.join(os.environ["FAKE_IB_DIR"], name)
    if not os.path.exists(path) and "-c" in args:
        # perfquery.c dump_portsamples_control: IBEXIT("sampctlquery") when the PMA Get fails;
        # ibdiag_common.c ibexit() prints that on stdout and exits -1.
        sys.stderr.write(f"ibwarn: [4242] _do_madrpc: recv failed: Connection timed out (Lid {lid})\n")
        sys.stdout.write("perfquery: iberror: failed: sampctlquery\n")
        return 255
    if not os.path.exists(path):
        port = pos[1] if len(pos) > 1 else "1"
        sys.stderr.write(f"ibwarn: [4242] query_and_dump: PortCounters query failed on Lid {lid} port {port}\n")
        sys.stderr.write(f"perfquery: iberror: failed: perfquery query failed on Lid {lid} port {port}\n")
        return 255
    with open(path) as f:
        sys.stdout.write(f.read())
    if mode == "noisy":
        sys.stderr.write("ibwarn: [4242] _do_madrpc: recv failed: Connection timed out\n")
        sys.stderr.write("src/query_smp.c:195; umad (DR path slid 0; dlid 0; 0,1,2) bad status 110; Connection timed out\n")
        return 1
    return 0
