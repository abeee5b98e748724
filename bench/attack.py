"""``python -m bench.attack``: the hostile-client attacks of issue 20 at full size, against a real ``fabricmon run``.

On loopback only. The agent runs as a subprocess with the soft descriptor limit a unit
without ``LimitNOFILE`` gets (1024, ``--nofile``), basic auth (a cost-10 and a cost-12
user), ``--web.enable-lifecycle``, and two targets: ``ib-a``, a perfquery target on the
fake ``perfquery``/``ibnetdiscover`` of tests/fakebin (a subprocess per poll: the first
thing descriptor exhaustion breaks), and ``tele``, a UFM Telemetry stand-in in a child
process: ``--attack-ports`` (2,000) ports for the agent under attack, ``--ports`` (30,000) for a
second agent that only measures the stop. Phases, each with bounded counts and times:

1. connections: ``--slow`` (1,100) slowloris connections from 127.0.0.2 for ``--seconds``,
   while an authenticated scrape from 127.0.0.1 runs every second;
2. auth: ``--bad`` (100) clients from 100 addresses sending wrong passwords, a SIGHUP in the
   middle, then the time of the first good scrape; and the timing of known-cost-10,
   known-cost-12 and unknown users with a wrong password (quiet, median of 5);
3. lifecycle: a cross-site form post and a non-simple POST to ``/-/reload``;
4. stop: SIGTERM with the 30,000-port target polled, against ``TimeoutStopSec=15s``.

Prints what held: scrape success and latency, polls during and after each attack, log lines,
tracebacks and EMFILE errors, recovery time, stop time.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import json
import multiprocessing
import os
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
import bcrypt

from bench.soak import CSV_PATH, _serve_telemetry
from tests.conftest import free_port
from tests.test_daemon import _counters, _fabric, _wrappers

GOOD_USER, GOOD_PW = "prometheus", "scrape-pw"  # cost 10
SLOW_USER, SLOW_PW = "grafana", "dash-pw"  # cost 12
TIMEOUT_STOP_S = 15.0  # packaging/systemd/*.service TimeoutStopSec


def _auth(user: str, pw: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{pw}".encode()).decode()}


class Agent:
    """``fabricmon run`` as a subprocess; stderr (the log) goes to a file we count lines in."""

    def __init__(self, tmp: Path, port: int, tele_port: int, nofile: int) -> None:
        data = _fabric(tmp / "ib", "sw-a", "0002c90300000a00", 10)
        _counters(data, 10, 1000, 0)
        ibnet, perfq = _wrappers(tmp / "bin", data)
        (tmp / "state").mkdir(mode=0o700)  # the agent never creates a state directory as root
        (tmp / "fabricmon.yml").write_text(f"""global:
  poll_interval: 1s
  poll_timeout: 10s
  jitter: 0
  backoff_max: 5s
  state_dir: {tmp / 'state'}
web:
  listen_address: 127.0.0.1:{port}
targets:
  - {{name: ib-a, source: perfquery, address: local, include_cas: false, topology_interval: 1h,
      ibnetdiscover_path: {ibnet}, perfquery_path: {perfq}}}
  - {{name: tele, source: ufm-telemetry, address: 127.0.0.1, scheme: http, port: {tele_port}, interval: 5s, timeout: 20s}}
""")
        (tmp / "web.yml").write_text(f"""basic_auth_users:
  {GOOD_USER}: '{bcrypt.hashpw(GOOD_PW.encode(), bcrypt.gensalt(10)).decode()}'
  {SLOW_USER}: '{bcrypt.hashpw(SLOW_PW.encode(), bcrypt.gensalt(12)).decode()}'
""")
        self.log_path = tmp / "agent.log"
        self.url = f"http://127.0.0.1:{port}"
        exe = Path(sys.executable).with_name("fabricmon")
        self.log = open(self.log_path, "wb")  # noqa: SIM115 (closed in stop)
        hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
        self.proc = subprocess.Popen(
            [str(exe), "run", "--config.file", str(tmp / "fabricmon.yml"), "--web.config.file", str(tmp / "web.yml"),
             "--web.enable-lifecycle"],
            stdout=self.log, stderr=self.log, preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, hard)))

    def log_figures(self) -> dict[str, int]:
        text = self.log_path.read_bytes()
        return {"log_lines": text.count(b"\n"), "log_bytes": len(text), "tracebacks": text.count(b"Traceback"),
                "emfile": text.count(b"Too many open files"), "overload_lines": text.count(b"HTTP listener overloaded")}

    def stop(self) -> float:
        t0 = time.monotonic()
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()
        return time.monotonic() - t0


async def _get(url: str, source: str = "127.0.0.1", headers: dict[str, str] | None = None,
               timeout: float = 10.0) -> tuple[int, float, bytes]:
    t0 = time.monotonic()
    try:
        conn = aiohttp.TCPConnector(local_addr=(source, 0), force_close=True)
        async with aiohttp.ClientSession(connector=conn) as s, s.get(url, headers=headers,
                                                                     timeout=aiohttp.ClientTimeout(total=timeout)) as r:
            body = await r.read()
            return r.status, time.monotonic() - t0, body
    except (aiohttp.ClientError, OSError, TimeoutError):
        return 0, time.monotonic() - t0, b""


async def _targets(agent: Agent) -> dict[str, dict[str, Any]]:
    status, _, body = await _get(agent.url + "/api/targets", headers=_auth(GOOD_USER, GOOD_PW), timeout=30)
    return {t["target"]: t for t in json.loads(body)} if status == 200 else {}


async def _wait(what: str, cond, timeout: float) -> float:
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if await cond():
            return time.monotonic() - t0
        await asyncio.sleep(0.5)
    raise SystemExit(f"timed out after {timeout:g} s waiting for {what}")


async def _scraper(agent: Agent, stop: asyncio.Event, results: list[tuple[int, float]]) -> None:
    while not stop.is_set():
        status, took, _ = await _get(agent.url + "/metrics", headers=_auth(GOOD_USER, GOOD_PW))
        results.append((status, took))
        await asyncio.sleep(1.0)


async def _slowloris(port: int, stop: asyncio.Event, counts: dict[str, int]) -> None:
    """Keeps reconnecting: a request line, then a header byte a second, never finishing."""
    while not stop.is_set():
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port, local_addr=("127.0.0.2", 0))
        except OSError:
            counts["connect_failed"] += 1
            await asyncio.sleep(0.5)
            continue
        counts["connected"] += 1
        try:
            writer.write(b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Slow: ")
            while not stop.is_set():
                writer.write(b"a")
                await writer.drain()
                with contextlib.suppress(TimeoutError):
                    if await asyncio.wait_for(reader.read(1), 1.0) == b"":
                        counts["closed_by_server"] += 1
                        break
        except (ConnectionError, OSError):
            counts["closed_by_server"] += 1
        finally:
            writer.close()


def _pct(values: list[float], q: float) -> float:
    return sorted(values)[min(len(values) - 1, int(q * len(values)))] if values else float("nan")


def _scrape_summary(results: list[tuple[int, float]]) -> str:
    ok = [t for s, t in results if s == 200]
    return (f"{len(ok)}/{len(results)} scrapes 200, latency p50 {_pct(ok, 0.5):.3f} s, max {max(ok, default=float('nan')):.3f} s")


async def phase_connections(agent: Agent, port: int, a: argparse.Namespace) -> dict[str, Any]:
    before = await _targets(agent)
    log0 = agent.log_figures()
    stop = asyncio.Event()
    counts = {"connected": 0, "connect_failed": 0, "closed_by_server": 0}
    scrapes: list[tuple[int, float]] = []
    slow = [asyncio.create_task(_slowloris(port, stop, counts)) for _ in range(a.slow)]
    scraper = asyncio.create_task(_scraper(agent, stop, scrapes))
    await asyncio.sleep(a.seconds)
    during = await _targets(agent)
    stop.set()
    await asyncio.gather(*slow, scraper)

    async def recovered() -> bool:
        now = await _targets(agent)
        return all(now.get(n, {}).get("up") and now[n]["polls"] > during.get(n, {}).get("polls", 0) for n in ("ib-a", "tele"))

    recovery = await _wait("the targets to poll again after the flood", recovered, 60)
    log1 = agent.log_figures()
    polls = {n: during.get(n, {}).get("polls", 0) - before.get(n, {}).get("polls", 0) for n in ("ib-a", "tele")}
    print(f"connections: {a.slow} slow clients for {a.seconds:g} s: {counts['connected']} connections made, "
          f"{counts['closed_by_server']} closed by the server, {counts['connect_failed']} connect failures")
    print(f"  scrapes from 127.0.0.1 during the flood: {_scrape_summary(scrapes)}")
    print(f"  polls during the flood: ib-a {polls['ib-a']} (1 s interval), tele {polls['tele']} (5 s interval); "
          f"both up and polling again {recovery:.1f} s after it")
    print(f"  log during the flood: {log1['log_lines'] - log0['log_lines']} lines, {log1['log_bytes'] - log0['log_bytes']} bytes, "
          f"{log1['tracebacks'] - log0['tracebacks']} tracebacks, {log1['emfile'] - log0['emfile']} 'Too many open files', "
          f"{log1['overload_lines'] - log0['overload_lines']} overload lines")
    return {"counts": counts, "scrapes": scrapes, "polls": polls, "recovery_s": recovery, "log": log1}


async def phase_auth(agent: Agent, a: argparse.Namespace) -> dict[str, Any]:
    await _get(agent.url + "/metrics", headers=_auth(GOOD_USER, GOOD_PW))  # verified once, as Prometheus would have
    stop = asyncio.Event()
    tally = {"401": 0, "429": 0, "503": 0, "other": 0}

    async def bad(i: int) -> None:
        while not stop.is_set():
            status, _, _ = await _get(agent.url + "/metrics", f"127.0.1.{1 + i % 250}", _auth(GOOD_USER, f"wrong-{i}"))
            tally[str(status) if str(status) in tally else "other"] += 1

    flood = [asyncio.create_task(bad(i)) for i in range(a.bad)]
    await asyncio.sleep(3)
    agent.proc.send_signal(signal.SIGHUP)  # the reload that used to clear the credential cache
    await asyncio.sleep(0.5)
    good = [await _get(agent.url + "/metrics", headers=_auth(GOOD_USER, GOOD_PW)) for _ in range(5)]
    uncached = await _get(agent.url + "/metrics", headers=_auth(SLOW_USER, SLOW_PW), timeout=30)
    await asyncio.sleep(2)
    stop.set()
    await asyncio.gather(*flood)
    print(f"auth: {a.bad} wrong-password clients on {min(a.bad, 250)} addresses, SIGHUP after 3 s: answers {tally}")
    print(f"  good scrapes right after the SIGHUP: {[(s, round(t, 3)) for s, t, _ in good]} (status, seconds)")
    print(f"  a correct but not yet cached credential during the flood: status {uncached[0]} after {uncached[1]:.3f} s")
    await asyncio.sleep(max(1.0, 2 * 5))  # let the per-address failure buckets of 127.0.0.1 refill
    timing: dict[str, list[float]] = {"known cost 10": [], "known cost 12": [], "unknown user": []}
    for _ in range(5):
        for label, user in (("known cost 10", GOOD_USER), ("known cost 12", SLOW_USER), ("unknown user", "nobody")):
            _status, took, _ = await _get(agent.url + "/healthz", f"127.0.2.{len(timing[label]) + 1}", _auth(user, "nope"))
            timing[label].append(took)
    med = {k: statistics.median(v) for k, v in timing.items()}
    print("  wrong-password latency (median of 5): " + ", ".join(f"{k} {v * 1000:.0f} ms" for k, v in med.items())
          + f"; max/min ratio {max(med.values()) / min(med.values()):.2f}")
    return {"tally": tally, "good": [(s, t) for s, t, _ in good], "uncached": uncached[:2], "timing_ms": med}


async def phase_lifecycle(agent: Agent) -> dict[str, int]:
    out = {}
    async with aiohttp.ClientSession() as s:
        for label, kw in (("form post", {"data": {"x": "1"}}), ("X-Requested-With", {"headers": {"X-Requested-With": "bench"}})):
            async with s.post(agent.url + "/-/reload", headers={**_auth(GOOD_USER, GOOD_PW), **kw.pop("headers", {})}, **kw) as r:
                out[label] = r.status
    print(f"lifecycle: POST /-/reload as a cross-site form -> {out['form post']}, with X-Requested-With -> {out['X-Requested-With']}")
    return out


def _stand_in(ctx: Any, nports: int) -> tuple[Any, Any, Any]:
    port_q, stop = ctx.Queue(), ctx.Event()
    proc = ctx.Process(target=_serve_telemetry, args=(nports, port_q, stop), daemon=True)
    proc.start()
    return proc, stop, port_q


async def _start(tmp: Path, tele_port: int, nports: int, a: argparse.Namespace) -> Agent:
    tmp.mkdir()
    agent = Agent(tmp, free_port(), tele_port, a.nofile)
    print(f"fabricmon run on {agent.url} (soft RLIMIT_NOFILE {a.nofile}), targets ib-a (fake perfquery) and "
          f"tele ({nports} ports at 127.0.0.1:{tele_port}{CSV_PATH})", flush=True)
    print(f"  both targets up after {await _wait('both targets up', lambda: _both_up(agent), 300):.1f} s", flush=True)
    return agent


async def _both_up(agent: Agent) -> bool:
    t = await _targets(agent)
    return bool(t) and all(t.get(n, {}).get("up") for n in ("ib-a", "tele"))


async def run(a: argparse.Namespace) -> int:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))  # the attacker needs more descriptors than the agent
    ctx = multiprocessing.get_context("fork")
    # The attacks run against a small fabric, so what they measure is the attack, not the render of a big one
    # on a shared 2-core box; the stop is measured on its own agent with --ports ports.
    small, big = _stand_in(ctx, a.attack_ports), _stand_in(ctx, a.ports)
    try:
        (small_port, small_n), (big_port, big_n) = small[2].get(timeout=300), big[2].get(timeout=300)
        with tempfile.TemporaryDirectory(prefix="fabricmon-attack-") as tmpdir:
            agent = await _start(Path(tmpdir) / "attacked", small_port, small_n, a)
            base: list[tuple[int, float]] = []
            for _ in range(5):
                status, took, _ = await _get(agent.url + "/metrics", headers=_auth(GOOD_USER, GOOD_PW))
                base.append((status, took))
            print(f"baseline, no attack: {_scrape_summary(base)}")
            c = await phase_connections(agent, int(agent.url.rsplit(":", 1)[1]), a)
            au = await phase_auth(agent, a)
            lc = await phase_lifecycle(agent)
            agent.stop()
            log = agent.log_figures()
            print(f"attacked agent, whole run: {log['log_lines']} log lines, {log['tracebacks']} tracebacks, "
                  f"{log['emfile']} 'Too many open files'")
            big_agent = await _start(Path(tmpdir) / "big", big_port, big_n, a)
            await asyncio.sleep(6)  # one more poll of tele: the store holds every port's history
            stop_s = big_agent.stop()
            print(f"stop: SIGTERM with {big_n} ports polled: exited {big_agent.proc.returncode} after {stop_s:.2f} s "
                  f"(TimeoutStopSec {TIMEOUT_STOP_S:g} s)")
            checks = {
                "scrapes mostly served during the flood": sum(s == 200 for s, _ in c["scrapes"]) >= 0.8 * len(c["scrapes"]),
                "polls kept running during the flood": c["polls"]["ib-a"] >= a.seconds / 2 and c["polls"]["tele"] >= 1,
                "no EMFILE, no traceback": log["emfile"] == 0 and log["tracebacks"] == 0,
                "good scrapes after SIGHUP under attack all 200 within 1 s": all(s == 200 and t < 1.0 for s, t in au["good"]),
                "wrong-password timing within 1.5x across users": max(au["timing_ms"].values()) < 1.5 * min(au["timing_ms"].values()),
                "reload refused for a form, accepted otherwise": lc == {"form post": 403, "X-Requested-With": 200},
                f"stop inside TimeoutStopSec ({TIMEOUT_STOP_S:g} s)": stop_s < TIMEOUT_STOP_S and big_agent.proc.returncode == 0,
            }
            for name, ok in checks.items():
                print(f"  {'HELD' if ok else 'FAILED'}: {name}")
            held = all(checks.values())
    finally:
        for proc, stop, _q in (small, big):
            stop.set()
            proc.join(10)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    return 0 if held else 1


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.attack", description=__doc__.split("\n\n")[0])
    ap.add_argument("--slow", type=int, default=1100, help="slow connections (the original attack: 1,100)")
    ap.add_argument("--seconds", type=float, default=40.0, help="how long the connection flood lasts (original: 40 s)")
    ap.add_argument("--bad", type=int, default=100, help="wrong-password clients (original: 100)")
    ap.add_argument("--ports", type=int, default=30_000, help="ports of the UFM Telemetry target of the stop agent")
    ap.add_argument("--attack-ports", type=int, default=2000, help="ports of the UFM Telemetry target of the attacked agent")
    ap.add_argument("--nofile", type=int, default=1024, help="the agent's soft RLIMIT_NOFILE (a unit without LimitNOFILE: 1024)")
    ap.add_argument("--no-files", action="store_true", help="skip the hostile-file attacks (bench/attack_files.py)")
    a = ap.parse_args(argv)
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    held = asyncio.run(run(a))
    if a.no_files:
        return held
    from bench import attack_files  # replays, YAML and state files at full size, each in its own process

    print("\nhostile files:")
    return max(held, attack_files.main([]))


if __name__ == "__main__":
    sys.exit(main())
