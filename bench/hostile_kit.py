"""The harness of ``python -m bench.attack_hostile``: a real ``fabricmon run`` in a process of its
own, a stand-in HTTP server in another, probes from this one.

- :class:`AgentProc` writes the config, starts the agent (optionally with a soft descriptor
  limit), and reads what the issue's figures are made of: RSS and peak RSS from
  ``/proc/<pid>/status``, the agent's own ``fabricmon_event_loop_lag_max_seconds``, metrics,
  the log (lines, bytes, tracebacks, MemoryErrors, "Event loop is closed"), the stop time.
- :class:`Probe` asks ``/healthz`` (and optionally ``/metrics``) every 100 ms from a thread and
  keeps the latencies and failures: "served within 1 s while the attack lasts".
- :func:`serve` starts a stand-in (aiohttp, in a child process, so it never shares the agent's
  nor the bench's interpreter) whose routes are files on disk, generated bodies, or an echo.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import re
import resource
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.conftest import free_port

_SERIES = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (\S+)$")


def get(url: str, headers: dict[str, str] | None = None, timeout: float = 10.0) -> tuple[int, float, bytes]:
    t0 = time.monotonic()
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers or {}), timeout=timeout) as r:
            return r.status, time.monotonic() - t0, r.read()
    except urllib.error.HTTPError as exc:
        return exc.code, time.monotonic() - t0, b""
    except (OSError, ValueError):
        return 0, time.monotonic() - t0, b""


def metric(text: str, name: str, **labels: str) -> float | None:
    for line in text.splitlines():
        m = _SERIES.match(line)
        if m and m.group(1) == name and all(f'{k}="{v}"' in (m.group(2) or "") for k, v in labels.items()):
            return float(m.group(3))
    return None


class AgentProc:
    """``fabricmon run`` on a config; stderr (the log) to a file."""

    def __init__(self, tmp: Path, config: str, *, web: str | None = None, nofile: int | None = None,
                 env: dict[str, str] | None = None, headers: dict[str, str] | None = None, log_level: str = "info") -> None:
        tmp.mkdir(parents=True, exist_ok=True)
        self.tmp = tmp
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.headers = headers or {}
        self.config = tmp / "fabricmon.yml"
        self.config.write_text(config.replace("LISTEN", f"127.0.0.1:{self.port}"))
        args = [sys.executable, "-m", "fabricmon.agent", "--log.level", log_level, "run", "--config.file", str(self.config)]
        if web is not None:
            self.web = tmp / "web.yml"
            self.web.write_text(web)
            args += ["--web.config.file", str(self.web)]
        self.log_path = tmp / "agent.log"
        self._log = open(self.log_path, "wb")  # noqa: SIM115 (closed in stop)
        hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
        limit = (lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, hard))) if nofile else None
        self.proc = subprocess.Popen(args, stdout=self._log, stderr=self._log, env={**os.environ, **(env or {})},
                                     preexec_fn=limit)
        self.stopped_s: float | None = None

    def wait_ready(self, timeout: float = 120.0, path: str = "/healthz") -> float:
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the agent exited ({self.proc.returncode}): {self.log_tail()}")
            if get(self.url + path, self.headers, 2)[0] == 200:
                return time.monotonic() - t0
            time.sleep(0.1)
        raise RuntimeError(f"no {path} within {timeout:g} s: {self.log_tail()}")

    def status(self, key: str) -> float:
        """VmRSS / VmHWM of the agent, MB."""
        try:
            for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
                if line.startswith(key + ":"):
                    return int(line.split()[1]) / 1024
        except OSError:
            pass
        return float("nan")

    def rss(self) -> float:
        return self.status("VmRSS")

    def peak(self) -> float:
        return self.status("VmHWM")

    def metrics(self) -> str:
        return get(self.url + "/metrics", self.headers, 30)[2].decode("utf-8", "replace")

    def value(self, name: str, **labels: str) -> float | None:
        return metric(self.metrics(), name, **labels)

    def lag(self) -> float:
        """The agent's own longest event-loop lag of the last 60 s."""
        return self.value("fabricmon_event_loop_lag_max_seconds") or 0.0

    def log(self) -> bytes:
        return self.log_path.read_bytes()

    def log_tail(self, n: int = 3) -> str:
        return " | ".join(self.log().decode("utf-8", "replace").strip().splitlines()[-n:])

    def log_figures(self) -> dict[str, int]:
        text = self.log()
        return {"lines": text.count(b"\n"), "bytes": len(text), "tracebacks": text.count(b"Traceback"),
                "memoryerrors": text.count(b"MemoryError"), "loop_closed": text.count(b"Event loop is closed")}

    def sighup(self) -> None:
        self.proc.send_signal(signal.SIGHUP)

    def stop(self, timeout: float = 60.0) -> float:
        if self.stopped_s is None:
            t0 = time.monotonic()
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            self.stopped_s = time.monotonic() - t0
            self._log.close()
        return self.stopped_s


@dataclass
class Probe:
    """``/healthz`` every 100 ms (and ``/metrics`` every second when ``scrape``), from a thread."""

    agent: AgentProc
    scrape: bool = False
    health: list[tuple[int, float]] = field(default_factory=list)
    scrapes: list[tuple[int, float]] = field(default_factory=list)

    def __enter__(self) -> Probe:
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._loop, args=("/healthz", 0.1, self.health), daemon=True)]
        if self.scrape:
            self._threads.append(threading.Thread(target=self._loop, args=("/metrics", 1.0, self.scrapes), daemon=True))
        for t in self._threads:
            t.start()
        return self

    def _loop(self, path: str, every: float, out: list[tuple[int, float]]) -> None:
        while not self._stop.is_set():
            status, took, _ = get(self.agent.url + path, self.agent.headers, 30)
            out.append((status, took))
            self._stop.wait(every)

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(60)

    @staticmethod
    def summary(xs: list[tuple[int, float]]) -> tuple[int, int, float]:
        """(answered 200, asked, max latency of the 200s)."""
        ok = [t for s, t in xs if s == 200]
        return len(ok), len(xs), max(ok, default=float("nan"))

    def served_within(self, seconds: float) -> bool:
        ok, n, worst = self.summary(self.health)
        return n > 0 and ok == n and worst <= seconds

    def figure(self) -> str:
        ok, n, worst = self.summary(self.health)
        text = f"/healthz {ok}/{n} ok, max {worst:.2f} s"
        if self.scrape:
            ok, n, worst = self.summary(self.scrapes)
            text += f"; /metrics {ok}/{n} ok, max {worst:.2f} s"
        return text


# ---------------------------------------------------------------------- the stand-in
def _stand_in(routes: dict[str, tuple[Any, ...]], port_q: Any, stop: Any) -> None:
    """Child process. A route is ("file", path, content_type, status, content_encoding),
    ("telemetry", ports_per_path) for /tele/<n> (a UFM Telemetry CSV of its own ports), or
    ("json", body, status)."""
    import asyncio

    from aiohttp import web

    from bench.fabric import UFM_COLUMNS

    columns = list(UFM_COLUMNS.values())  # the 18 counters of the converted_enterprise CSV (bench/fabric.py)

    def telemetry(n: int, per: int) -> str:
        head = "timestamp,node_guid,port_guid,port_num,node_description," + ",".join(columns) + "\n"
        now = int(time.time() * 1e6)
        vals = ",".join(str(now // 1_000_000 * (j + 1)) for j in range(len(columns)))
        return head + "".join(f"{now},0x{n:08x}{p:08x},0x{n:08x}{p:08x},{p + 1},tsw{n}-{p // 64},{vals}\n" for p in range(per))

    async def handle(request: web.Request) -> web.StreamResponse:
        path = request.path
        if path.startswith("/tele/") and "/tele" in routes:
            return web.Response(text=telemetry(int(path.rsplit("/", 1)[1]), routes["/tele"][1]), content_type="text/csv")
        spec = routes.get(path)
        if spec is None:
            return web.json_response([], status=200)
        if spec[0] == "json":
            return web.json_response(spec[1], status=spec[2])
        _, file, ctype, status, encoding = spec
        headers = {"Content-Type": ctype, **({"Content-Encoding": encoding} if encoding else {})}
        return web.Response(body=Path(file).read_bytes(), status=status, headers=headers)

    async def main() -> None:
        app = web.Application(client_max_size=1 << 20)
        app.router.add_route("*", "/{tail:.*}", handle)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port_q.put(runner.addresses[0][1])
        while not stop.is_set():
            await asyncio.sleep(0.2)
        await runner.cleanup()

    asyncio.run(main())


@contextlib.contextmanager
def serve(routes: dict[str, tuple[Any, ...]]):
    """A stand-in in a child process; yields its port."""
    ctx = multiprocessing.get_context("fork")
    q, stop = ctx.Queue(), ctx.Event()
    proc = ctx.Process(target=_stand_in, args=(routes, q, stop), daemon=True)
    proc.start()
    try:
        yield q.get(timeout=60)
    finally:
        stop.set()
        proc.join(10)
        if proc.is_alive():
            proc.kill()


def processes_with(mark: str, older_than: float = 0.0) -> int:
    """Processes whose command line carries ``mark`` (leftovers of the fake commands), started
    more than ``older_than`` seconds ago."""
    hz = os.sysconf("SC_CLK_TCK")
    uptime = float(Path("/proc/uptime").read_text().split()[0])
    n = 0
    for d in os.listdir("/proc"):
        if d.isdigit():
            with contextlib.suppress(OSError, ValueError, IndexError):
                with open(f"/proc/{d}/cmdline", "rb") as fh:
                    if mark.encode() not in fh.read():
                        continue
                started = int(Path(f"/proc/{d}/stat").read_text().rsplit(")", 1)[1].split()[19]) / hz
                n += uptime - started >= older_than
    return n
