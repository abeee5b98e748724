"""Shared code of the fake ``dcb`` and ``mlnx_qos`` in this folder (tests only).

They print recorded output from ``$FAKE_QOS_DIR``: ``dcb-pfc-<if>.out`` for ``dcb pfc show dev
<if>``, ``dcb-app-<if>.out`` for ``dcb app show dev <if>``, ``mlnx_qos-<if>.out`` for
``mlnx_qos -i <if>``. A missing file behaves like the real tool on an unknown device (a
message on stderr, exit 1). Each call appends its argv as a JSON line to ``$FAKE_QOS_LOG``
when set.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path


def main(tool: str) -> int:
    args = sys.argv[1:]
    log = os.environ.get("FAKE_QOS_LOG")
    if log:
        with open(log, "a") as f:
            f.write(json.dumps([tool, *args]) + "\n")
    if tool == "dcb" and len(args) == 4 and args[1:3] == ["show", "dev"] and args[0] in ("pfc", "app"):
        name, dev = f"dcb-{args[0]}-{args[3]}.out", args[3]
    elif tool == "mlnx_qos" and len(args) == 2 and args[0] == "-i":
        name, dev = f"mlnx_qos-{args[1]}.out", args[1]
    else:
        sys.stderr.write(f"{tool}: unsupported arguments {args}\n")
        return 2
    path = Path(os.environ.get("FAKE_QOS_DIR", ".")) / name
    if not path.is_file():
        sys.stderr.write(f'Cannot find device "{dev}"\n')
        return 1
    sys.stdout.write(path.read_text())
    return 0
