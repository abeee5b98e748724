"""Run a real Prometheus (Debian's /usr/bin/prometheus) on 127.0.0.1 for tests.

Usage::

    with PrometheusServer(scrape_configs=[...], rule_files=[...]) as prom:
        prom.query("up")

Each instance gets a temp config and TSDB directory, a free loopback port, 1 s scrape and
evaluation intervals by default, and is stopped (its own process only) on exit.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import yaml

from tests.conftest import free_port

PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"
PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"


def have_prometheus() -> bool:
    return os.access(PROMETHEUS, os.X_OK)


def have_promtool() -> bool:
    return os.access(PROMTOOL, os.X_OK)


class PrometheusError(RuntimeError):
    pass


class PrometheusServer:
    def __init__(self, scrape_configs: list[dict[str, Any]], rule_files: list[Path | str] = (),
                 interval: str = "1s", startup_timeout: float = 30.0) -> None:
        self.scrape_configs = scrape_configs
        self.rule_files = [str(Path(p).resolve()) for p in rule_files]
        self.interval = interval
        self.startup_timeout = startup_timeout
        self.port = 0
        self.proc: subprocess.Popen | None = None
        self._tmp: tempfile.TemporaryDirectory | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> PrometheusServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        self._tmp = tempfile.TemporaryDirectory(prefix="fabricmon-prom-")
        tmp = Path(self._tmp.name)
        config = {
            "global": {"scrape_interval": self.interval, "evaluation_interval": self.interval, "scrape_timeout": self.interval},
            "rule_files": self.rule_files,
            "scrape_configs": self.scrape_configs,
        }
        (tmp / "prometheus.yml").write_text(yaml.safe_dump(config, sort_keys=False))
        self.port = free_port()
        self._log = open(tmp / "prometheus.log", "wb")  # noqa: SIM115 (closed in stop)
        self.proc = subprocess.Popen(
            [PROMETHEUS, f"--config.file={tmp / 'prometheus.yml'}", f"--storage.tsdb.path={tmp / 'data'}",
             f"--web.listen-address=127.0.0.1:{self.port}", "--log.level=warn",
             "--storage.tsdb.retention.time=1h", "--web.enable-lifecycle"],
            stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True,
        )
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise PrometheusError(f"prometheus exited with {self.proc.returncode}: {self.log()[-2000:]}")
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=1) as r:
                    if r.status == 200:
                        return
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            time.sleep(0.1)
        self.stop()
        raise PrometheusError("prometheus did not become ready")

    def log(self) -> str:
        if self._tmp is None:
            return ""
        p = Path(self._tmp.name) / "prometheus.log"
        return p.read_text(errors="replace") if p.exists() else ""

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None
        if getattr(self, "_log", None) is not None:
            self._log.close()
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    # ------------------------------------------------------------ HTTP API

    def api(self, path: str, **params: Any) -> Any:
        """GET /api/v1/<path>; returns ``data`` or raises PrometheusError with the server's error."""
        url = f"{self.url}/api/v1/{path}?{urllib.parse.urlencode(params)}"
        try:
            with urllib.request.urlopen(url, timeout=30) as r:
                body = json.load(r)
        except urllib.error.HTTPError as e:
            body = json.loads(e.read() or b"{}")
        if body.get("status") != "success":
            raise PrometheusError(f"{body.get('errorType')}: {body.get('error')}")
        return body["data"]

    def query(self, expr: str, t: float | None = None) -> list[dict[str, Any]]:
        params = {"query": expr}
        if t is not None:
            params["time"] = f"{t:.3f}"
        return self.api("query", **params)["result"]

    def query_range(self, expr: str, start: float, end: float, step: float = 1.0) -> list[dict[str, Any]]:
        return self.api("query_range", query=expr, start=f"{start:.3f}", end=f"{end:.3f}", step=step)["result"]

    def rule_health(self) -> list[tuple[str, str, str]]:
        """(rule name, health, last error) of every loaded rule."""
        out = []
        for g in self.api("rules")["groups"]:
            for r in g["rules"]:
                out.append((r["name"], r.get("health", ""), r.get("lastError", "")))
        return out
