"""``python -m bench.attack_hostile``: the breaks of issue 32 (hostile files, commands, clients,
payloads, recordings), each at full size against a real ``fabricmon run``, on loopback only.

Every attack prints one line: ``HELD`` or ``BROKE``, what was done, and its figure (peak RSS,
the agent's own longest event-loop lag, ``/healthz`` latency while it lasted, the error reason
or exit code). The bar, from the issue: ``/metrics`` and ``/healthz`` served within 1 s while the
attack lasts, no event-loop stall above 0.5 s from a payload, memory bounded (here: the agent's
peak RSS under 1 GB), one log line per cause and no traceback, nothing left running after a poll
or after exit, SIGTERM within 5 s at 2,000 targets and 100,000 ports with the state saved, no
secret in any encoding, and a crash or a full disk losing at most the poll in flight of a
recording. ``--only NAME`` runs one attack (``--list`` names them). A loaded machine stretches
latencies: the load average is printed with every figure.

``python -m bench.attack`` runs this after its own listener and file attacks.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import gzip
import html
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import bcrypt

from bench.hostile_kit import AgentProc, Probe, get, metric, processes_with, serve
from tests.conftest import ROOT, free_port

FAKEBIN = ROOT / "tests" / "fakebin_faults"
MEMORY_MB = 1024.0
SERVED_S = 1.0
STALL_S = 0.5
ATTACKS: dict[str, Callable[[Path], tuple[bool, str]]] = {}


def attack(name: str):
    def register(fn):
        ATTACKS[name] = fn
        return fn
    return register


def load() -> str:
    return "load " + " ".join(open("/proc/loadavg").read().split()[:3])


def _base(extra: str = "", interval: str = "1s", timeout: str = "10s", state: Path | None = None, recording: str = "") -> str:
    if state is not None:  # fabricmon run does not create a state_dir as root (StateDirectory= does under systemd)
        state.mkdir(mode=0o700, parents=True, exist_ok=True)
    return (f"global: {{poll_interval: {interval}, poll_timeout: {timeout}, jitter: 0, backoff_max: 2s"
            + (f", state_dir: {state}" if state else "") + "}\n"
            + "web: {listen_address: LISTEN}\n" + (f"recording: {{path: {recording}}}\n" if recording else "")
            + "targets:\n" + extra)


def _perfquery_target(perfquery: Path, name: str = "ib", ibnetdiscover: Path = FAKEBIN / "ibnetdiscover",
                      extra: str = "") -> str:
    return (f"  - {{name: {name}, source: perfquery, address: local, ibnetdiscover_path: {ibnetdiscover}, "
            f"perfquery_path: {perfquery}, include_cas: true, samples_control: false{extra}}}\n")


def _bounded(agent: AgentProc) -> tuple[bool, str]:
    peak, logs = agent.peak(), agent.log_figures()
    ok = peak < MEMORY_MB and logs["tracebacks"] == 0 and logs["memoryerrors"] == 0
    return ok, f"peak RSS {peak:.0f} MB, {logs['tracebacks']} tracebacks, {logs['memoryerrors']} MemoryErrors"


def _during(agent: AgentProc, seconds: float, scrape: bool = True) -> Probe:
    with Probe(agent, scrape=scrape) as probe:
        time.sleep(seconds)
    return probe


def _reason(agent: AgentProc, target: str) -> str:
    text = agent.metrics()
    reasons = sorted({line.split('reason="')[1].split('"')[0] for line in text.splitlines()
                      if line.startswith("fabricmon_target_poll_errors_total") and f'target="{target}"' in line})
    return ",".join(reasons) or "none"


@dataclass(slots=True)
class Watched:
    """What an agent showed under one attack: the probe of its endpoints, the attacked target's
    poll error reasons, its longest loop lag, its bounds (memory, tracebacks) and its stop."""

    probe: Probe
    reason: str
    lag: float
    bounded: bool
    bounds: str
    stop_s: float

    def held(self, reason: str) -> bool:
        """Bounded, the target failing for ``reason``, the endpoints served and the loop not stalled."""
        return self.bounded and self.reason == reason and self.probe.served_within(SERVED_S) and self.lag < STALL_S

    def figure(self) -> str:
        return f"{self.bounds}; reason {self.reason}; {self.probe.figure()}; loop lag max {self.lag:.3f} s"


def _watch(agent: AgentProc, target: str, seconds: float) -> Watched:
    """Start ``agent``, watch it ``seconds`` under the attack on ``target``, read what it showed, stop it."""
    try:
        agent.wait_ready()
        probe = _during(agent, seconds)
        reason, lag = _reason(agent, target), agent.lag()
        ok, fig = _bounded(agent)
    finally:
        stop_s = agent.stop()
    return Watched(probe, reason, lag, ok, fig, stop_s)


# ---------------------------------------------------------------------- files
@attack("fifo-state")
def fifo_state(tmp: Path) -> tuple[bool, str]:
    """A FIFO as the state file: start-up never reached /healthz and logged nothing."""
    state = tmp / "state"
    state.mkdir()
    os.mkfifo(state / "state.json.gz")
    agent = AgentProc(tmp, _base(state=state).replace("targets:\n", "targets: []\n"))
    try:
        took = agent.wait_ready(30)
        named = b"state.json.gz: cannot read state file: it is a FIFO" in agent.log()
    finally:
        agent.stop()
    return took < 10 and named, f"/healthz after {took:.1f} s; the log names the FIFO: {named}"


def _swap(path: Path, kind: str) -> bytes:
    keep = path.read_bytes()
    path.unlink()
    if kind == "fifo":
        os.mkfifo(path)
    else:
        os.symlink("/dev/zero", path)
    return keep


def _restore(path: Path, keep: bytes) -> None:
    path.unlink()
    path.write_bytes(keep)


@attack("web-config-fifo-and-dev-zero-on-sighup")
def web_config_swaps(tmp: Path) -> tuple[bool, str]:
    """The web config swapped for a FIFO (then /dev/zero), then SIGHUP: /metrics and /healthz timed
    out (the reload read it on the event loop); /dev/zero took it to 940 MB and a MemoryError."""
    agent = AgentProc(tmp, _base().replace("targets:\n", "targets: []\n"), web="http_server_config:\n  headers: {X-Frame-Options: deny}\n")
    figures, held = [], True
    try:
        agent.wait_ready()
        for kind in ("fifo", "zero"):
            keep = _swap(agent.web, kind)
            rss0 = agent.rss()
            with Probe(agent, scrape=True) as probe:
                agent.sighup()
                time.sleep(4)
            reload_ok = agent.value("fabricmon_config_last_reload_successful")
            growth = agent.rss() - rss0
            ok = probe.served_within(SERVED_S) and reload_ok == 0 and growth < 100
            held &= ok
            figures.append(f"{kind}: {probe.figure()}, reload_successful {reload_ok:g}, RSS +{growth:.0f} MB")
            _restore(agent.web, keep)
        agent.sighup()
        time.sleep(2)
        again = agent.value("fabricmon_config_last_reload_successful")
        held &= again == 1
        figures.append(f"restored: reload_successful {again:g}")
    finally:
        stop_s = agent.stop()
    return held and stop_s < 5, "; ".join(figures) + f"; stop {stop_s:.1f} s"


@attack("config-fifo-on-sighup")
def config_fifo(tmp: Path) -> tuple[bool, str]:
    """The main config swapped for a FIFO, then SIGHUP: the reader thread blocked, later reloads were
    ignored and SIGTERM no longer stopped the agent."""
    agent = AgentProc(tmp, _base().replace("targets:\n", "targets: []\n"))
    try:
        agent.wait_ready()
        keep = _swap(agent.config, "fifo")
        with Probe(agent) as probe:
            agent.sighup()
            time.sleep(3)
        failed = agent.value("fabricmon_config_last_reload_successful")
        _restore(agent.config, keep)
        agent.sighup()
        time.sleep(2)
        later = agent.value("fabricmon_config_last_reload_successful")
    finally:
        stop_s = agent.stop()
    held = probe.served_within(SERVED_S) and failed == 0 and later == 1 and stop_s < 5 and agent.proc.returncode == 0
    return held, f"{probe.figure()}; reload with the FIFO: {failed:g}, the next one: {later:g}; SIGTERM {stop_s:.1f} s"


@attack("check-config-fifo")
def check_config_fifo(tmp: Path) -> tuple[bool, str]:
    """`check-config` of a FIFO hung for ever."""
    fifo = tmp / "f.yml"
    os.mkfifo(fifo)
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "fabricmon.agent", "check-config", str(fifo)], capture_output=True,
                          text=True, timeout=60)
    took = time.monotonic() - t0
    return proc.returncode == 1 and took < 10, f"exit {proc.returncode} after {took:.1f} s: {proc.stderr.splitlines()[0]}"


# ---------------------------------------------------------------------- commands
@attack("perfquery-dev-zero")
def perfquery_zero(tmp: Path) -> tuple[bool, str]:
    """A perfquery printing /dev/zero took the agent to 2.58 GB in 20 s with 38,851 MemoryError tracebacks."""
    w = _watch(AgentProc(tmp, _base(_perfquery_target(FAKEBIN / "perfquery_zero"))), "ib", 20)
    return w.held("size"), w.figure()


@attack("perfquery-10e6-ports")
def perfquery_huge(tmp: Path) -> tuple[bool, str]:
    """A 10^6-port perfquery (about 150 MB) stalled /metrics 18 s at 1.9 GB."""
    case = json.loads((ROOT / "collectors/perfquery/testcases/edr_switch_topology/payload.json").read_text())["perfquery"][0]
    out = tmp / "huge.txt"
    with open(out, "w") as fh:
        n = 0
        while fh.tell() < 150_000_000:
            fh.write(case.replace("port 1 ", f"port {n % 250 + 1} ", 1))
            n += 1
    fake = tmp / "perfquery_huge"
    fake.write_text(f"#!/bin/sh\nexec cat {out}\n")
    fake.chmod(0o755)
    w = _watch(AgentProc(tmp, _base(_perfquery_target(fake))), "ib", 20)
    return w.held("size"), f"150 MB of counters per call: {w.figure()}"


@attack("setsid-orphans")
def orphans(tmp: Path) -> tuple[bool, str]:
    """setsid children holding stdout: every call timed out, 12 survived after 14 s and outlived the agent."""
    mark = f"fabricmon-bench-{os.getpid()}-orphan"
    agent = AgentProc(tmp, _base(_perfquery_target(FAKEBIN / "perfquery_orphans")), env={"FABRICMON_TEST_MARK": mark})
    try:
        agent.wait_ready()
        seen = []
        for _ in range(14):
            time.sleep(1)
            seen.append(processes_with(mark, older_than=2.0))  # a poll's own children live < PIPE_GRACE_S
        reason, polls = _reason(agent, "ib"), agent.value("fabricmon_target_polls_total", target="ib") or 0
        up = agent.value("fabricmon_target_up", target="ib")
    finally:
        stop_s = agent.stop()
    time.sleep(0.5)
    after = processes_with(mark)
    logs = agent.log_figures()
    held = up == 1 and reason == "none" and max(seen) == 0 and after == 0 and logs["loop_closed"] == 0 and logs["tracebacks"] == 0
    return held, (f"{polls:g} polls in 14 s, target up {up:g}, errors {reason}; leftovers older than 2 s, sampled each second: "
                  f"at most {max(seen)}; after exit {after}; 'Event loop is closed': {logs['loop_closed']}; stop {stop_s:.1f} s")


@attack("cancel-100k-queued-perfquery")
def cancel_queued(tmp: Path) -> tuple[bool, str]:
    """ibnetdiscover of 100k/200k CA ports: cancelling the queued perfquery tasks at the poll timeout
    froze the loop 27 s / 166 s (a task per port behind one semaphore: O(n^2))."""
    from bench.fabric import Fabric

    figures, held = [], True
    for ports in (100_000, 200_000):
        topo = tmp / f"topo{ports}.txt"
        topo.write_text(Fabric(ports).ibnetdiscover)
        ibnd = tmp / f"ibnetdiscover{ports}"
        ibnd.write_text(f"#!/bin/sh\nexec cat {topo}\n")
        ibnd.chmod(0o755)
        hang = tmp / "perfquery_sleep"
        hang.write_text("#!/bin/sh\nexec sleep 30\n")
        hang.chmod(0o755)
        w = _watch(AgentProc(tmp / f"a{ports}", _base(_perfquery_target(hang, ibnetdiscover=ibnd, extra=", command_timeout: 60"),
                                                      interval="20s", timeout="10s")), "ib", 25)
        held &= w.held("timeout")
        figures.append(f"{ports:,} ports: loop lag max {w.lag:.3f} s, {w.probe.figure()}, reason {w.reason}, {w.bounds}")
    return held, "; ".join(figures)


# ---------------------------------------------------------------------- clients
def _slowloris(port: int, source: str, stop: threading.Event, opened: list[int]) -> None:
    """Keeps one slow connection from ``source`` open (a header byte a second, never finishing)."""
    while not stop.is_set():
        try:
            s = socket.create_connection(("127.0.0.1", port), timeout=5, source_address=(source, 0))
        except OSError:
            time.sleep(0.2)
            continue
        opened[0] += 1
        try:
            s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Slow: ")
            while not stop.is_set():
                s.sendall(b"a")
                stop.wait(1.0)
        except OSError:
            pass
        finally:
            s.close()


def _flood(port: int, sources: list[str], per_source: int) -> tuple[threading.Event, list[threading.Thread], list[int]]:
    stop, opened = threading.Event(), [0]
    threads = [threading.Thread(target=_slowloris, args=(port, src, stop, opened), daemon=True)
               for src in sources for _ in range(per_source)]
    for t in threads:
        t.start()
    return stop, threads, opened


@attack("connections-4-addresses-x-64")
def connections_several(tmp: Path) -> tuple[bool, str]:
    """4 addresses x 64 half-sent requests filled the 256 slots: 39/39 scrapes reset for 40 s."""
    agent = AgentProc(tmp, _base().replace("targets:\n", "targets: []\n"), nofile=1024)
    try:
        agent.wait_ready()
        stop, threads, opened = _flood(agent.port, [f"127.0.0.{2 + i}" for i in range(4)], 64)
        time.sleep(3)
        scrapes = []
        for _ in range(40):
            status, took, _ = get(agent.url + "/metrics")
            scrapes.append((status, took))
            time.sleep(1)
        stop.set()
        for t in threads:
            t.join(5)
    finally:
        agent.stop()
    ok = [t for s, t in scrapes if s == 200]
    held = len(ok) == len(scrapes)
    return held, f"{opened[0]} slow connections from 4 addresses; scrapes {len(ok)}/{len(scrapes)} 200, max {max(ok, default=float('nan')):.3f} s"


@attack("connections-one-address-nofile-1024")
def connections_one_address(tmp: Path) -> tuple[bool, str]:
    """Under prlimit --nofile=1024:1024: 1,100 partial requests from one address, then a plain
    scrape from that same address 5 s later was reset."""
    agent = AgentProc(tmp, _base().replace("targets:\n", "targets: []\n"), nofile=1024)
    try:
        agent.wait_ready()
        socks = []
        for _ in range(1100):
            try:
                s = socket.create_connection(("127.0.0.1", agent.port), timeout=5)
                s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Partial: ")
                socks.append(s)
            except OSError:
                pass
        time.sleep(5)
        scrapes = [get(agent.url + "/metrics") for _ in range(10)]
        for s in socks:
            s.close()
        logs = agent.log_figures()
    finally:
        agent.stop()
    ok = [t for s, t, _ in scrapes if s == 200]
    held = len(ok) == len(scrapes) and logs["tracebacks"] == 0
    return held, f"{len(socks)} partial requests held; then {len(ok)}/{len(scrapes)} scrapes 200 (max {max(ok, default=float('nan')):.3f} s); {logs['tracebacks']} tracebacks"


def _auth(user: str, pw: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{pw}".encode()).decode()}


@attack("bcrypt-cold-cache-flood")
def bcrypt_cold(tmp: Path) -> tuple[bool, str]:
    """From a fresh start, 20 s of wrong passwords from 40 addresses: 17/17 good scrapes answered 503."""
    good = _auth("prometheus", "scrape-pw")
    web = f"basic_auth_users:\n  prometheus: '{bcrypt.hashpw(b'scrape-pw', bcrypt.gensalt(10)).decode()}'\n"
    agent = AgentProc(tmp, _base().replace("targets:\n", "targets: []\n"), web=web, headers=good)
    agent.headers = {}
    try:
        t0 = time.monotonic()
        while get(agent.url + "/healthz")[0] != 401 and time.monotonic() - t0 < 60:
            time.sleep(0.2)
        stop = threading.Event()
        tally: dict[int, int] = {}

        def bad(i: int) -> None:
            while not stop.is_set():
                status = _get_from(agent.url + "/metrics", f"127.0.1.{1 + i % 40}", _auth("prometheus", f"wrong-{i}"))
                tally[status] = tally.get(status, 0) + 1

        threads = [threading.Thread(target=bad, args=(i,), daemon=True) for i in range(80)]
        for t in threads:
            t.start()
        time.sleep(1)
        scrapes = []
        for _ in range(17):  # cold: the first verification happens under the flood
            status, took, _ = get(agent.url + "/metrics", good, 30)
            scrapes.append((status, took))
            time.sleep(1)
        stop.set()
        for t in threads:
            t.join(10)
    finally:
        agent.stop()
    ok = [t for s, t in scrapes if s == 200]
    held = len(ok) == len(scrapes) and max(ok) < SERVED_S
    return held, f"good scrapes {len(ok)}/{len(scrapes)} 200, max {max(ok, default=float('nan')):.3f} s; flood answers {dict(sorted(tally.items()))}"


def _get_from(url: str, source: str, headers: dict[str, str]) -> int:
    host, port = url.split("//")[1].split("/")[0].split(":")
    try:
        with socket.create_connection((host, int(port)), timeout=10, source_address=(source, 0)) as s:
            auth = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
            s.sendall(f"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n{auth}\r\n".encode())
            head = s.recv(64)
            return int(head.split()[1]) if head.startswith(b"HTTP/") else 0
    except (OSError, ValueError, IndexError):
        return 0


@attack("malformed-requests")
def malformed(tmp: Path) -> tuple[bool, str]:
    """3,000 bad requests in 1.8 s wrote 3,007 ERROR tracebacks (1.8 MB)."""
    agent = AgentProc(tmp, _base().replace("targets:\n", "targets: []\n"))
    try:
        agent.wait_ready()
        before = agent.log_figures()
        bad = [b"NOT HTTP AT ALL\r\n\r\n", b"GET /\x00 HTTP/1.1\r\n\r\n", b"GET / HTTP/9.9\r\n\r\n",
               b"GET / HTTP/1.1\r\nContent-Length: x\r\n\r\n", b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc"]
        t0 = time.monotonic()
        for i in range(3000):
            with socket.create_connection(("127.0.0.1", agent.port), timeout=5) as s:
                s.sendall(bad[i % len(bad)])
                s.recv(100)
        took = time.monotonic() - t0
        after = agent.log_figures()
    finally:
        agent.stop()
    lines, tb = after["lines"] - before["lines"], after["tracebacks"] - before["tracebacks"]
    return tb == 0 and lines <= 10, f"3,000 bad requests in {took:.1f} s: {lines} log lines, {after['bytes'] - before['bytes']} bytes, {tb} tracebacks"


@attack("finding-pages-20000-findings")
def finding_pages(tmp: Path) -> tuple[bool, str]:
    """With 20,000 findings, 60 parallel /findings/<id> pushed /healthz to 11-15.5 s; 60 x /fabric 4.6 s."""
    code = """
import asyncio, sys
from fabricmon.agent.exporter.server import Exporter, make_app, start_server
from fabricmon.agent.looplag import LoopLag
from fabricmon.agent.assemble import build_pipeline
from fabricmon.agent.worker import PipelineWorker
from fabricmon.core.model import Finding
async def main():
    w = PipelineWorker(); p = build_pipeline(None, [])
    p.detector.restore([Finding("congestion", "warning", f"sw{i // 64:04d}", f"Ethernet{i % 64}", 3, None, 1000.0 + i,
                        summary=f"queue 3 congested on port {i}", evidence={"i": i}, rule="congestion") for i in range(20000)])
    e = Exporter(p, worker=w); e.loop_lag = LoopLag().start(); await w.call(e.render_now)
    await start_server(make_app(e), "127.0.0.1:" + sys.argv[1]); print("ready", flush=True)
    await asyncio.sleep(3600)
asyncio.run(main())
"""
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-c", code, str(port)], stdout=subprocess.PIPE, text=True)
    try:
        proc.stdout.readline()
        url = f"http://127.0.0.1:{port}"
        ids = _ids(url)
        figures, held = [], True
        for label, paths in (("60 parallel /findings/<id>", [f"/findings/{i}" for i in ids]), ("60 parallel /fabric", ["/fabric"] * 60)):
            agent_like = type("A", (), {"url": url, "headers": {}})()
            with Probe(agent_like) as probe:  # type: ignore[arg-type]
                threads = [threading.Thread(target=get, args=(url + p, None, 120)) for p in paths]
                for t in threads:
                    t.start()
                for t in threads:
                    t.join(180)
            ok, n, worst = Probe.summary(probe.health)
            statuses = {get(url + p)[0] for p in paths[:3]}
            held &= ok == n and worst <= SERVED_S and statuses == {200}
            figures.append(f"{label}: /healthz {ok}/{n} ok, max {worst:.3f} s (pages {sorted(statuses)})")
        lag = metric(get(url + "/metrics")[2].decode(), "fabricmon_event_loop_lag_max_seconds") or 0.0
    finally:
        proc.kill()
        proc.wait()
    return held and lag < STALL_S, "; ".join(figures) + f"; loop lag max {lag:.3f} s"


def _ids(url: str) -> list[str]:
    """60 different findings of the 20,000 (a page each, none rendered yet)."""
    page = json.loads(get(url + "/api/findings?limit=10000&page=2")[2])
    from fabricmon.agent.web.ids import finding_id
    from fabricmon.core.model import Finding

    ids = [finding_id(Finding(f["kind"], f["severity"], f["device"], f["port"], f["priority"], f["role"], f["start"]))
           for f in page[::160]]
    return ids[:60]


# ---------------------------------------------------------------------- payloads
def _ufm_target(port: int, name: str = "ufm", extra: str = "") -> str:
    return f"  - {{name: {name}, source: ufm, address: 127.0.0.1, scheme: http, port: {port}, username: u, password: pw{extra}}}\n"


def _payload_attack(tmp: Path, routes: dict, target: Callable[[int], str], seconds: float = 20, reason_want: str = "size",
                    interval: str = "5s", timeout: str = "60s") -> tuple[bool, str]:
    with serve(routes) as port:
        name = target(port).split("name: ")[1].split(",")[0]
        w = _watch(AgentProc(tmp, _base(target(port), interval=interval, timeout=timeout)), name, seconds)
    return w.held(reason_want) and w.stop_s < 5, f"{w.figure()}; SIGTERM {w.stop_s:.1f} s"


@attack("ufm-250mb-empty-objects")
def ufm_empty_objects(tmp: Path) -> tuple[bool, str]:
    """250 MB of [{},{},...]: 6.75 GB and /healthz blocked 81 s; gzipped (255 KB on the wire) 7.2 GB, 44.7 s a poll."""
    body = tmp / "empty.json"
    with open(body, "wb") as fh:
        fh.write(b"[")
        chunk = b"{}," * (1 << 20)
        for _ in range(250_000_000 // len(chunk)):
            fh.write(chunk)
        fh.write(b"{}]")
    gz = tmp / "empty.json.gz"
    with open(body, "rb") as src, gzip.open(gz, "wb", compresslevel=9) as dst:
        shutil.copyfileobj(src, dst, 1 << 24)
    figures, held = [], True
    for label, spec in (("plain 250 MB", ("file", str(body), "application/json", 200, None)),
                        (f"gzip {gz.stat().st_size // 1000} KB", ("file", str(gz), "application/json", 200, "gzip"))):
        routes = {"/ufmRest/resources/ports": spec}
        ok, fig = _payload_attack(tmp / label.split()[0], routes, lambda p: _ufm_target(p))
        held &= ok
        figures.append(f"{label}: {fig}")
    return held, " || ".join(figures)


@attack("ufm-700k-ports")
def ufm_700k(tmp: Path) -> tuple[bool, str]:
    """UFM with 700k ports: a 43.7 s stall."""
    body = tmp / "ports.json"
    with open(body, "w") as fh:  # the port object of collectors/ufm/testcases/v620_fabric (UFM 6.20), 700,000 times
        fh.write("[")
        for i in range(700_000):
            sw = f"b0cf0e03{i // 64:08x}"
            fh.write(("," if i else "") + json.dumps({
                "active_speed": "NDR", "active_width": "4x", "dname": f"1/{i % 64 // 2 + 1}/{i % 2 + 1}", "guid": sw, "lid": i // 64 + 1,
                "logical_state": "Active", "name": f"{sw}_{i % 64 + 1}", "node_description": f"MF0;sw{i // 64}:MQM9700/U1:1",
                "number": i % 64 + 1, "peer": f"fc6a1c03{i:08x}_1", "physical_state": "Link Up", "system_name": f"sw{i // 64}",
                "systemID": sw, "tier": 1}))
        fh.write("]")
    return _payload_attack(tmp, {"/ufmRest/resources/ports": ("file", str(body), "application/json", 200, None)},
                           lambda p: _ufm_target(p))


@attack("nvue-interfaces-30k-100k-10e6")
def nvue_interfaces(tmp: Path) -> tuple[bool, str]:
    """An NVUE listing of 30k interfaces froze the loop 79 s (SIGTERM 114 s); 100k: 12 minutes at 100 % CPU,
    SIGTERM ignored; 10^6: 7.4 GB and death."""
    figures, held = [], True
    for n in (30_000, 100_000, 1_000_000):
        body = tmp / f"if{n}.json"
        with open(body, "w") as fh:
            fh.write("{" + ",".join(f'"swp{i}":{{"type":"swp","link":{{"state":"up"}}}}' for i in range(n)) + "}")
        target = lambda p: f"  - {{name: leaf, source: nvue, address: 127.0.0.1, scheme: http, port: {p}, username: u, password: pw}}\n"  # noqa: E731
        ok, fig = _payload_attack(tmp / f"n{n}", {"/nvue_v1/interface": ("file", str(body), "application/json", 200, None)}, target,
                                  seconds=15)
        held &= ok
        figures.append(f"{n:,}: {fig}")
    return held, " || ".join(figures)


@attack("ufm-telemetry-10e6-ports")
def telemetry_million(tmp: Path) -> tuple[bool, str]:
    """UFM Telemetry with 10^6 ports: the loop blocked 113 s, 4.6 GB, the state save failed with MemoryError."""
    body = tmp / "tele.csv"
    with open(body, "w") as fh:
        fh.write("timestamp,node_guid,port_guid,port_num,node_description,Infiniband_MBOut_u_Gb,Infiniband_MBIn_u_Gb,"
                 "Infiniband_PckOut_u_Packets,Infiniband_PckIn_u_Packets,Infiniband_SymbolErrors_u_Errors\n")
        for i in range(1_000_000):
            fh.write(f"1709652347161873,0x{i // 64:016x},0x{i // 64:016x},{i % 64 + 1},sw{i // 64},{i},{i},{i},{i},0\n")
    state = tmp / "state"
    with serve({"/csv/cset/converted_enterprise": ("file", str(body), "text/csv", 200, None)}) as port:
        w = _watch(AgentProc(tmp, _base(f"  - {{name: tele, source: ufm-telemetry, address: 127.0.0.1, scheme: http, port: {port}}}\n",
                                        interval="10s", timeout="60s", state=state)), "tele", 25)
    saved = (state / "state.json.gz").exists()
    return w.held("parse") and w.stop_s < 5 and saved, f"{w.figure()}; SIGTERM {w.stop_s:.1f} s, state saved {saved}"


@attack("snmp-endless-walk-gufo")
def snmp_endless(tmp: Path) -> tuple[bool, str]:
    """A GETBULK walk that keeps increasing inside the subtree: with gufo the poll never ended (3 of 3),
    RSS grew 1.6 MB/s, the target's status froze."""
    code = ("import asyncio, sys\nsys.path.insert(0, sys.argv[2])\nfrom tests.snmp_hostile import serve\n"
            "async def main():\n    t, _ = await serve('endless', int(sys.argv[1]))\n    await asyncio.sleep(3600)\nasyncio.run(main())\n")
    udp = free_port()
    sim = subprocess.Popen([sys.executable, "-c", code, str(udp), str(ROOT)])
    try:
        time.sleep(1)
        agent = AgentProc(tmp, _base(f"  - {{name: sw, source: snmp, address: 127.0.0.1, port: {udp}, community: public, "
                                     f"snmp_timeout: 1, retries: 0}}\n", interval="5s", timeout="5s"))
        try:
            agent.wait_ready()
            rss0 = agent.rss()
            probe = _during(agent, 30)
            polls = agent.value("fabricmon_target_polls_total", target="sw") or 0
            reason, growth, lag = _reason(agent, "sw"), agent.rss() - rss0, agent.lag()
        finally:
            stop_s = agent.stop()
    finally:
        sim.kill()
        sim.wait()
    held = polls >= 3 and growth < 50 and probe.served_within(SERVED_S) and lag < STALL_S and stop_s < 5
    return held, f"{polls:g} polls in 30 s (errors {reason}), RSS +{growth:.0f} MB, {probe.figure()}, loop lag max {lag:.3f} s, SIGTERM {stop_s:.1f} s"


# ---------------------------------------------------------------------- stop
@attack("sigterm-2000-targets-100k-ports")
def sigterm_many(tmp: Path) -> tuple[bool, str]:
    """SIGTERM took 15.8 s with 2,000 targets; with 20,000 ports the final state save did not finish in 4.9 s."""
    state = tmp / "state"
    targets = "".join(f"  - {{name: t{i}, source: ufm-telemetry, address: 127.0.0.1, scheme: http, port: PORT, path: /tele/{i}}}\n"
                      for i in range(2000))
    with serve({"/tele": ("telemetry", 50)}) as port:
        agent = AgentProc(tmp, _base(targets.replace("PORT", str(port)), interval="10s", timeout="9s", state=state)
                          .replace("jitter: 0", "jitter: 0.5, max_concurrency: 64"), log_level=os.environ.get("FABRICMON_BENCH_LOG", "info"))
        try:
            agent.wait_ready(300)
            t0 = time.monotonic()
            per_port = 18
            while time.monotonic() - t0 < 300:
                series = agent.value("fabricmon_store_series") or 0
                if series >= 2000 * 50 * per_port:
                    break
                time.sleep(2)
            time.sleep(11)  # a second poll of each: deltas, and polls in flight at the stop
            series = agent.value("fabricmon_store_series") or 0
            ports_held = series / per_port
            sent = time.time()
        finally:
            stop_s = agent.stop(60)
    from fabricmon.agent import state as state_mod

    try:
        snap = state_mod.read(state / "state.json.gz")
        saved_at, saved_ports = snap.meta["saved_at"], len(snap.meta["ports"])
    except Exception as exc:
        saved_at, saved_ports = 0.0, f"unreadable: {exc}"
    held = stop_s < 5 and agent.proc.returncode == 0 and saved_at >= sent - 1 and saved_ports == ports_held
    return held, (f"{ports_held:,.0f} ports ({series:,.0f} series) on 2,000 targets: SIGTERM -> exit {agent.proc.returncode} after "
                  f"{stop_s:.2f} s; state saved at the stop: {saved_at >= sent - 1} ({saved_ports} ports)")


# ---------------------------------------------------------------------- recordings
@attack("recording-kill-9")
def recording_kill9(tmp: Path) -> tuple[bool, str]:
    """kill -9 of an agent writing a .jsonl.gz recording: replay recovered 16 of 42 polls."""
    rec = tmp / "rec.jsonl.gz"
    agent = AgentProc(tmp, _base(_perfquery_target(FAKEBIN / "perfquery_orphans"), interval="0.3s", recording=str(rec)))
    agent.wait_ready()
    t0 = time.monotonic()
    while (agent.value("fabricmon_target_polls_total", target="ib") or 0) < 42 and time.monotonic() - t0 < 120:
        time.sleep(0.2)
    polls = agent.value("fabricmon_target_polls_total", target="ib") or 0
    agent.proc.send_signal(signal.SIGKILL)
    agent.proc.wait()
    agent.stopped_s = 0.0
    out = subprocess.run([sys.executable, "-m", "fabricmon.agent", "replay", "--fast", "--quiet", str(rec)], capture_output=True,
                         text=True, timeout=300)
    replayed = int(out.stderr.split("replayed ")[1].split()[0]) if "replayed " in out.stderr else 0
    held = replayed >= polls - 1
    return held, f"{polls:g} polls counted before kill -9; replay recovered {replayed} (exit {out.returncode})"


@attack("recording-damaged-existing-file")
def recording_damaged(tmp: Path) -> tuple[bool, str]:
    """A damaged existing recording made `fabricmon run` exit 1 with a RecordingError on every start."""
    figures, held = [], True
    for label, damage in (("torn gzip header", b"\x1f\x8b\x08\x00"), ("torn first line", b'{"type": "header", "forma'),
                          ("not a recording", b"hello\n")):
        d = tmp / label.replace(" ", "-")
        d.mkdir()
        rec = d / "rec.jsonl.gz"
        rec.write_bytes(damage)
        agent = AgentProc(d, _base(_perfquery_target(FAKEBIN / "perfquery_orphans"), recording=str(rec)))
        try:
            took = agent.wait_ready(30)
            time.sleep(2)
            said = b"recording to" in agent.log() and b"instead" in agent.log()
        finally:
            agent.stop()
        beside = [p.name for p in d.iterdir() if p.name.startswith("rec.") and p.name != "rec.jsonl.gz"]
        ok = agent.proc.returncode == 0 and said and len(beside) == 1 and rec.read_bytes() == damage
        held &= ok
        figures.append(f"{label}: served after {took:.1f} s, new file {beside[0] if beside else None}, said so {said}")
    return held, "; ".join(figures)


@attack("recording-full-disk-at-start")
def recording_full_disk(tmp: Path) -> tuple[bool, str]:
    """A full disk at start-up exited 1 ("No space left on device", the file not named): a restart loop."""
    mnt = tmp / "small"
    mnt.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mnt)], capture_output=True).returncode != 0:
        return False, "cannot mount a small tmpfs here (not root?): not measured"
    try:
        filler = mnt / "filler"
        with contextlib.suppress(OSError), open(filler, "wb", buffering=0) as fh:
            while True:
                fh.write(b"\0" * 4096)
        rec = mnt / "rec.jsonl.gz"
        agent = AgentProc(tmp / "agent", _base(_perfquery_target(FAKEBIN / "perfquery_orphans"), recording=str(rec)))
        try:
            agent.wait_ready(30)
            time.sleep(3)
            up0 = agent.value("fabricmon_recording_up")
            errors = agent.value("fabricmon_recording_write_errors_total") or 0
            polling = agent.value("fabricmon_target_up", target="ib")
            named = str(rec).encode() in agent.log() and b"No space left on device" in agent.log()
            filler.unlink()
            t0 = time.monotonic()
            while agent.value("fabricmon_recording_up") != 1 and time.monotonic() - t0 < 45:
                time.sleep(1)
            up1, took = agent.value("fabricmon_recording_up"), time.monotonic() - t0
            lost = agent.value("fabricmon_recording_polls_lost_total") or 0
        finally:
            agent.stop()
        held = up0 == 0 and errors >= 1 and polling == 1 and named and up1 == 1
        return held, (f"disk full: monitoring on (target up {polling:g}), recording_up {up0:g}, {errors:g} write errors, "
                      f"the file named {named}; space freed: recording again after {took:.0f} s ({lost:g} polls not recorded)")
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


# ---------------------------------------------------------------------- secrets
PASSWORD = 'p@ss"w\\rd/+=Zq9'


@attack("password-echoed-in-json")
def password_echo(tmp: Path) -> tuple[bool, str]:
    """A UFM echoing the credentials in a JSON error body: the JSON-escaped form reached the log,
    /api/targets, /, /targets/<name>, the recording and replay output."""
    pair = base64.b64encode(f"u:{PASSWORD}".encode()).decode()
    echo = {"error": f"bad credentials u/{PASSWORD} (Authorization: Basic {pair})",
            "forms": [PASSWORD, quote(PASSWORD, safe=""), html.escape(PASSWORD), json.dumps(PASSWORD)]}
    (tmp / "pw").write_text(PASSWORD)
    (tmp / "pw").chmod(0o600)
    rec = tmp / "rec.jsonl.gz"
    with serve({"/ufmRest/resources/ports": ("json", echo, 500), "/ufmRest/resources/systems": ("json", [{"description": echo}], 200)}) as port:
        agent = AgentProc(tmp, _base(f"  - {{name: ufm, source: ufm, address: 127.0.0.1, scheme: http, port: {port}, username: u, "
                                     f"password_file: {tmp / 'pw'}}}\n", recording=str(rec)))
        try:
            agent.wait_ready()
            time.sleep(4)
            shown = {p: get(agent.url + p)[2].decode("utf-8", "replace") for p in ("/api/targets", "/", "/targets/ufm", "/metrics")}
        finally:
            agent.stop()
    shown["log"] = agent.log().decode("utf-8", "replace")
    shown["recording"] = gzip.decompress(rec.read_bytes()).decode("utf-8", "replace") if rec.exists() else ""
    out = subprocess.run([sys.executable, "-m", "fabricmon.agent", "replay", "--fast", str(rec)], capture_output=True, text=True, timeout=120)
    shown["replay output"] = out.stdout + out.stderr
    forms = ("Zq9", pair, base64.b64encode(PASSWORD.encode()).decode().rstrip("="))
    leaks = sorted(where for where, text in shown.items() if any(f in text for f in forms))
    return not leaks and "last_error" in shown["/api/targets"], f"checked {', '.join(shown)}: leaks in {leaks or 'none'}"


# ---------------------------------------------------------------------- the low ones
@attack("low-items")
def low_items(tmp: Path) -> tuple[bool, str]:
    """Control characters in the log, a 4 MiB config reload, 1e400/-1/NaN/1.5 counters, a 100k-deep
    body, three duplicate keys, saved_at NaN, a non-increasing gufo walk, the backend of a decode error."""
    figures, held = [], True
    # Control characters and bad counters, through one UFM Telemetry stand-in and the live log.
    csv = ("timestamp,node_guid,port_guid,port_num,node_description,Infiniband_SymbolErrors_u_Errors,Infiniband_MBOut_u_Gb\n"
           "1709652347161873,0x1,0x1,1,sw1,1e400,5\n1709652347161873,0x1,0x1,2,sw1,-1,5\n"
           "1709652347161873,0x1,0x1,3,sw1,NaN,5\n1709652347161873,0x1,0x1,4,sw1,1.5,5\n")
    (tmp / "tele.csv").write_text(csv)
    (tmp / "esc.txt").write_bytes(b"error \x1b[2J\x1b[31mred\r\x00forged line\n")
    (tmp / "deep.json").write_bytes(b"[" * 100_000 + b"]" * 100_000)
    routes = {"/csv/cset/converted_enterprise": ("file", str(tmp / "tele.csv"), "text/csv", 200, None),
              "/esc/csv/cset/converted_enterprise": ("file", str(tmp / "esc.txt"), "text/plain", 500, None),
              "/ufmRest/resources/ports": ("file", str(tmp / "deep.json"), "application/json", 200, None)}
    with serve(routes) as port:
        cfg = (f"  - {{name: tele, source: ufm-telemetry, address: 127.0.0.1, scheme: http, port: {port}}}\n"
               f"  - {{name: esc, source: ufm-telemetry, address: 127.0.0.1, scheme: http, port: {port}, path: /esc/csv/cset/converted_enterprise}}\n"
               + _ufm_target(port, "deep"))
        agent = AgentProc(tmp / "agent", _base(cfg))
        try:
            agent.wait_ready()
            time.sleep(4)
            deep_reason = _reason(agent, "deep")
            lines = (tmp / "agent" / "agent.log").read_bytes()
            # A 4 MiB config: reload time and memory.
            big = "".join(f"  - {{name: sw{i:06d}, source: snmp, address: 10.{i // 65536 % 256}.{i // 256 % 256}.{i % 256}, "
                          f"community: public, enabled: false}}\n" for i in range(40_000))
            agent.config.write_text(agent.config.read_text() + big)
            rss0 = agent.rss()
            t0 = time.monotonic()
            agent.sighup()
            while b"configuration reloaded" not in agent.log() and time.monotonic() - t0 < 120:
                time.sleep(0.5)
            reload_s, reload_mb = time.monotonic() - t0, agent.peak() - rss0
        finally:
            agent.stop()
    ctrl = sum(lines.count(c) for c in (b"\x1b", b"\r", b"\x00"))
    warned = all(f.encode() in lines for f in ("target tele:", "field Infiniband_SymbolErrors_u_Errors: 4 value(s)"))
    held &= ctrl == 0 and warned and deep_reason == "protocol" and reload_s < 20
    figures.append(f"control characters in the log: {ctrl}; bad counters warned with target and field: {warned}; "
                   f"100k-deep body: reason {deep_reason}; 4 MiB config reload {reload_s:.1f} s, peak RSS +{max(0, reload_mb):.0f} MB")
    # Three duplicate keys, one check-config.
    dup = tmp / "dup.yml"
    dup.write_text("global:\n  poll_interval: 10s\n  poll_interval: 1d\nweb:\n  listen_address: :1\n  listen_address: :2\nglobal: {}\n")
    out = subprocess.run([sys.executable, "-m", "fabricmon.agent", "check-config", str(dup)], capture_output=True, text=True, timeout=60)
    n_dup = out.stderr.count("duplicate key")
    held &= n_dup == 3
    figures.append(f"three duplicate keys: {n_dup} reported")
    # saved_at NaN.
    from fabricmon.agent import state as state_mod
    from fabricmon.agent.detector import Detector
    from fabricmon.agent.store import CounterStore

    snap = state_mod.snapshot(CounterStore(), Detector([]))
    snap.meta["saved_at"] = float("nan")
    (tmp / "state").mkdir()
    (tmp / "state" / "state.json.gz").write_bytes(state_mod.encode(snap))
    refused = not state_mod.load_into(tmp / "state" / "state.json.gz", CounterStore(), Detector([]))
    held &= refused
    figures.append(f"saved_at NaN refused: {refused}")
    # A gufo walk that does not increase; a decode error's backend.
    got = asyncio.run(_gufo_loop())
    held &= got.startswith("protocol")
    figures.append(f"gufo walk that does not increase: {got}")
    from gufo.snmp import SnmpDecodeError

    from fabricmon.collectors.snmp.fetch import Credentials, Session
    from fabricmon.collectors.snmp.transport_gufo import GufoAgent

    msg = str(GufoAgent(Session("127.0.0.1", 161, Credentials("2c", community="x"), 1, 0, 10))._fail("SNMP GET", SnmpDecodeError("x")))
    named = "gufo-snmp backend" in msg and "PySnmp" not in msg
    held &= named
    figures.append(f"decode error names the backend: {named}")
    return held, "; ".join(figures)


async def _gufo_loop() -> str:
    from fabricmon.collectors.base import FetchError
    from fabricmon.collectors.snmp.fetch import Credentials, Session
    from fabricmon.collectors.snmp.transport_gufo import GufoAgent
    from tests.snmp_hostile import serve as snmp_serve

    transport, _ = await snmp_serve("loop")
    try:
        agent = GufoAgent(Session("127.0.0.1", transport.get_extra_info("sockname")[1], Credentials("2c", community="x"), 1, 0, 25))
        agent.types[(1, 3, 6, 1, 2, 1, 2, 2, 1, 10)] = "70"
        try:
            await asyncio.wait_for(agent.walk((1, 3, 6, 1, 2, 1, 2, 2, 1, 10)), 30)
        except FetchError as exc:
            return f"{exc.reason} ({exc})"
        return "no error"
    finally:
        transport.close()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.attack_hostile", description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", action="append", help="run this attack only (repeatable)")
    ap.add_argument("--list", action="store_true", help="list the attacks")
    a = ap.parse_args(argv)
    if a.list:
        for name, fn in ATTACKS.items():
            print(f"{name}: {(fn.__doc__ or '').split(chr(10))[0]}")
        return 0
    names = a.only or list(ATTACKS)
    results = []
    for name in names:
        t0 = time.monotonic()
        with tempfile.TemporaryDirectory(prefix=f"fabricmon-{name}-") as d:
            try:
                held, figure = ATTACKS[name](Path(d))
            except Exception as exc:
                held, figure = False, f"could not run: {type(exc).__name__}: {exc}"
        results.append((name, held))
        print(f"{'HELD ' if held else 'BROKE'} {name} ({time.monotonic() - t0:.0f} s, {load()}): {figure}", flush=True)
    print(f"\n{sum(h for _, h in results)}/{len(results)} held")
    return 0 if all(h for _, h in results) else 1


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
