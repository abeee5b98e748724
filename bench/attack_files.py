"""``python -m bench.attack_files``: the hostile-file attacks of issue 20 at full size.

``bench/attack.py`` floods a running agent's listener; this runs what a file can do, each
against the real CLI in its own process, and prints what held: exit status, peak RSS of the
process, wall time, tracebacks on stderr.

- replay of one 3 GiB line inside a small gzip (was: 9.5 GB RSS, exit 0);
- replay of 10^6 distinct target names (was: up to 1.8 GB and 18 s per /api/targets);
- paced replays with ``t`` of 1e18 and Infinity (were: a silent stall);
- check-config of a 1 KB "billion laughs" YAML (was: 4 GB, 57 s);
- ``fabricmon run`` starting on a state file that is a gzip bomb, and one nested 10^5 deep
  (were: gigabytes at start, RecursionError).

``python -m bench.attack`` runs this after its listener attacks. The other two attacks of the
issue run at full size in the test suite already: a lone surrogate in UFM and NVUE strings
(tests/test_hostile_strings.py, through the real stand-ins) and 30,000 active findings under 60
parallel GETs (tests/test_web_stall.py). Nothing here fails on a slow machine: the limits
checked are the ones the issue named (1 GB peak RSS, no traceback, no stall).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from tests.conftest import free_port

HEADER = {"type": "header", "format": "fabricmon-recording", "version": 1, "targets": [{"name": "t", "source": "ufm-telemetry"}]}
MEMORY_BOUND_MB = 1024.0  # the agent's peak RSS target (docs/scaling.md)
# The CLI, with its own peak RSS written to stderr at exit (RUSAGE_CHILDREN keeps the largest
# child so far, so it cannot tell the runs apart).
WRAP = ("import atexit, resource, runpy, sys\n"
        "atexit.register(lambda: sys.stderr.write('\\nMAXRSS_KB %d\\n' % resource.getrusage(resource.RUSAGE_SELF).ru_maxrss))\n"
        "sys.argv = ['fabricmon', *sys.argv[1:]]\n"
        "runpy.run_module('fabricmon.agent', run_name='__main__')\n")


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-c", WRAP, *args]


def _split_rss(err: str) -> tuple[float, str]:
    lines = err.rstrip().splitlines()
    kb = next((int(ln.split()[1]) for ln in reversed(lines) if ln.startswith("MAXRSS_KB ")), 0)
    return kb / 1024, "\n".join(ln for ln in lines if not ln.startswith("MAXRSS_KB ")).strip()


def _last(err: str) -> str:
    return err.splitlines()[-1] if err else ""


def _fabricmon(*args: str, timeout: float = 600.0) -> tuple[int, float, float, str]:
    """(exit status, wall seconds, peak RSS MB of the child, stderr) of one CLI run."""
    t0 = time.monotonic()
    proc = subprocess.run(_cli(*args), capture_output=True, text=True, timeout=timeout)
    rss, err = _split_rss(proc.stderr)
    return proc.returncode, time.monotonic() - t0, rss, err


def _header_line() -> bytes:
    from fabricmon.agent.recording import FORMAT, VERSION

    return json.dumps({**HEADER, "format": FORMAT, "version": VERSION}).encode() + b"\n"


def huge_line(path: Path, size: int) -> None:
    """A gzip recording whose second line is one JSON poll of ``size`` bytes (zeros compress ~1000:1)."""
    chunk = b"0" * (1 << 24)
    with gzip.open(path, "wb", compresslevel=1) as f:
        f.write(_header_line())
        f.write(b'{"type":"poll","target":"t","source":"ufm-telemetry","t":1.0,"duration_s":0.1,"ok":true,"payload":{"csv":"')
        for _ in range(size // len(chunk)):
            f.write(chunk)
        f.write(b'"}}\n')


def many_targets(path: Path, n: int) -> None:
    with gzip.open(path, "wb", compresslevel=1) as f:
        f.write(_header_line())
        for i in range(n):
            f.write(b'{"type":"poll","target":"t%d","source":"ufm-telemetry","t":%d.0,"duration_s":0.1,"ok":false,'
                    b'"error":"x","reason":"timeout"}\n' % (i, 1 + i // 1000))


def bad_times(path: Path, t: str) -> None:
    path.write_bytes(_header_line() + b'{"type":"poll","target":"t","source":"ufm-telemetry","t":1.0,"duration_s":0.1,'
                     b'"ok":false,"error":"x","reason":"timeout"}\n{"type":"poll","target":"t","source":"ufm-telemetry",'
                     b'"t":' + t.encode() + b',"duration_s":0.1,"ok":false,"error":"x","reason":"timeout"}\n')


LAUGHS = "a: &a [x,x,x,x,x,x,x,x,x]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [*{chr(97 + i)},*{chr(97 + i)},*{chr(97 + i)},*{chr(97 + i)},*{chr(97 + i)},"
    f"*{chr(97 + i)},*{chr(97 + i)},*{chr(97 + i)},*{chr(97 + i)}]\n" for i in range(8)) + "targets: *i\n"


def _run_with_state(tmp: Path, state_bytes: bytes) -> tuple[float, float, str, bool]:
    """Start `fabricmon run` on a state file: (seconds to the first /metrics, peak RSS MB, stderr, served)."""
    state = tmp / "state"
    state.mkdir(parents=True, exist_ok=True)
    (state / "state.json.gz").write_bytes(state_bytes)
    cfg = tmp / "c.yml"
    cfg.write_text(f"global: {{state_dir: {state}}}\ntargets: []\n")
    port = free_port()
    t0 = time.monotonic()
    proc = subprocess.Popen(_cli("run", "--config.file", str(cfg), "--web.listen-address", f"127.0.0.1:{port}"),
                            stderr=subprocess.PIPE, text=True)
    served = False
    while time.monotonic() - t0 < 120 and proc.poll() is None:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as r:
                served = r.status == 200
                break
        except OSError:
            time.sleep(0.2)
    took = time.monotonic() - t0
    proc.terminate()
    rss, err = _split_rss(proc.communicate(timeout=30)[1])
    return took, rss, err, served


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.attack_files", description=__doc__.split("\n\n")[0])
    ap.add_argument("--line-gib", type=float, default=3.0, help="size of the one huge line (original: 3 GiB)")
    ap.add_argument("--targets", type=int, default=1_000_000, help="distinct target names (original: 10^6)")
    a = ap.parse_args(argv)
    checks: dict[str, bool] = {}
    with tempfile.TemporaryDirectory(prefix="fabricmon-attack-files-") as d:
        tmp = Path(d)
        rec = tmp / "huge.jsonl.gz"
        huge_line(rec, int(a.line_gib * (1 << 30)))
        code, took, rss, err = _fabricmon("replay", "--fast", "--quiet", str(rec))
        print(f"replay, one {a.line_gib:g} GiB line in a {rec.stat().st_size / 1e6:.1f} MB gzip: exit {code}, {took:.1f} s, "
              f"peak RSS {rss:.0f} MB; stderr: {_last(err)}")
        checks["huge line: exit 1 (data error), bounded memory, no traceback"] = (
            code == 1 and rss < MEMORY_BOUND_MB and "Traceback" not in err)
        rec.unlink()

        rec = tmp / "targets.jsonl.gz"
        many_targets(rec, a.targets)
        code, took, rss, err = _fabricmon("replay", "--fast", "--quiet", str(rec))
        print(f"replay, {a.targets:,} distinct targets: exit {code}, {took:.1f} s, peak RSS {rss:.0f} MB; "
              f"stderr: {_last(err)}")
        checks["many targets: refused beyond the cap, bounded memory, no traceback"] = (
            code in (0, 1) and rss < MEMORY_BOUND_MB and "Traceback" not in err)

        for t in ("1e18", "Infinity"):
            bad = tmp / f"t-{t}.jsonl"
            bad_times(bad, t)
            code, took, rss, err = _fabricmon("replay", "--speed", "1", "--quiet", str(bad), timeout=120)
            print(f"paced replay with t={t}: exit {code} after {took:.1f} s")
            checks[f"paced t={t}: a data error, no stall"] = code == 1 and took < 30 and "Traceback" not in err

        laughs = tmp / "laughs.yml"
        laughs.write_text(LAUGHS)
        code, took, rss, err = _fabricmon("check-config", str(laughs))
        print(f"check-config of a {len(LAUGHS)} B billion-laughs file: exit {code}, {took:.1f} s, peak RSS {rss:.0f} MB; "
              f"{err.splitlines()[0] if err else ''}")
        checks["billion laughs: refused fast, bounded memory"] = code == 1 and took < 30 and rss < MEMORY_BOUND_MB

        bomb = tmp / "bomb.gz"
        with gzip.open(bomb, "wb", compresslevel=1) as f:  # written in chunks: this process stays small too
            for _ in range(128):
                f.write(b" " * (16 << 20))
        took, rss, err, served = _run_with_state(tmp / "bomb", bomb.read_bytes())
        print(f"run on a {bomb.stat().st_size / 1e6:.1f} MB state gzip bomb (2 GiB inside): served /metrics after {took:.1f} s: {served}, "
              f"peak RSS {rss:.0f} MB")
        checks["state gzip bomb: starts, bounded memory"] = served and rss < MEMORY_BOUND_MB and "Traceback" not in err

        deep = gzip.compress(b"[" * 100_000 + b"]" * 100_000)
        took, rss, err, served = _run_with_state(tmp / "deep", deep)
        print(f"run on a state file nested 100,000 deep: served /metrics after {took:.1f} s: {served}")
        checks["deep state: starts, no traceback"] = served and "Traceback" not in err
    for name, ok in checks.items():
        print(f"  {'HELD' if ok else 'FAILED'}: {name}")
    return 0 if all(checks.values()) else 1


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
