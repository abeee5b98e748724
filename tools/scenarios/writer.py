"""Run a scenario and write it as a recording (docs: recording-format.md), byte-for-byte deterministic."""

from __future__ import annotations

import datetime as _dt
import gzip
import io
import json
import random
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tools.scenarios import render
from tools.scenarios.sim import Fabric, StepPlan

T0 = 1764691200.0  # 2025-12-02T16:00:00Z


@dataclass
class Target:
    name: str
    source: str  # snmp | nvue | host | perfquery | ufm | ufm-telemetry | gnmi
    device: str = ""  # snmp / host: the simulated device it polls
    options: dict[str, Any] = field(default_factory=dict)
    counter32_offsets: dict[str, float] = field(default_factory=dict)
    memo: dict[str, float] = field(default_factory=dict)  # renderer state between polls (WJH windows)
    sysfs: bool = False  # host: render the full sysfs walk (attributes, PMA counters), not only hw_counters
    render: Callable[[float], dict[str, Any]] | None = None  # a source without a fabric device (a job scheduler): its payload at t
    pfcwd: bool = True  # gnmi (SONiC): the PFC watchdog is started on the lossless queues

    def header(self) -> dict[str, Any]:
        return {"name": self.name, "source": self.source, **self.options}


@dataclass
class Scenario:
    """A fabric, its targets, a per-step plan and the ground truth.

    ``plan(k)`` describes interval k (from poll k-1 to poll k); faults active in intervals
    ``s..e-1`` have truth ``start`` = time of poll s and ``end`` = time of poll e (null when
    e is past the last poll). ``outages[target]`` maps poll indices to the error recorded.
    """

    name: str
    description: str
    fabric: Fabric
    targets: list[Target]
    plan: Callable[[int], StepPlan]
    polls: int = 30
    interval: float = 10.0
    truth: list[dict[str, Any]] = field(default_factory=list)  # start/end given as poll indices
    notes: dict[int, str] = field(default_factory=dict)
    outages: dict[str, dict[int, str]] = field(default_factory=dict)
    seed: int = 0
    # Irregular polling: each interval is ``interval`` +/- up to ``jitter`` seconds (0: the
    # regular schedule, 50 ms of scheduling noise). ``skipped[target]``: polls the agent never
    # took (a scheduler that fell behind): no line at all, unlike an outage's failed poll.
    jitter: float = 0.0
    skipped: dict[str, set[int]] = field(default_factory=dict)
    # The operator's fabricmon config for this fabric ("" = defaults), e.g. a ``fabric:`` section
    # with a non-identity priority map: configuration the devices do not send, so not in the
    # recording. Written beside it as ``<name>.yml``, where ``fabricmon eval`` looks for it.
    config: str = ""

    def add_truth(self, kind: str, device: str, port: str | None, priority: int | None, role: str | None,
                  start: int, end: int | None, **extra: Any) -> None:
        self.truth.append({"kind": kind, "device": device, "port": port, "priority": priority, "role": role,
                           "start": start, "end": end, **extra})


def poll_times(sc: Scenario) -> list[float]:
    rng = random.Random(f"{sc.seed}-times")
    if not sc.jitter:
        return [round(T0 + k * sc.interval + rng.uniform(0.0, 0.05), 3) for k in range(sc.polls)]
    times = [T0 + rng.uniform(0.0, 0.05)]
    for _ in range(1, sc.polls):
        times.append(times[-1] + sc.interval + rng.uniform(-sc.jitter, sc.jitter))
    return [round(t, 3) for t in times]


def run(sc: Scenario) -> list[dict[str, Any]]:
    """Simulate and return the recording's lines (header, truth, polls and notes)."""
    times = poll_times(sc)
    rng = random.Random(f"{sc.seed}-durations")
    created = _dt.datetime.fromtimestamp(T0, tz=_dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    lines: list[dict[str, Any]] = [{
        "type": "header", "format": "fabricmon-recording", "version": 1, "created": created,
        "description": sc.description, "targets": [t.header() for t in sc.targets],
    }]
    for tr in sc.truth:
        end = tr["end"]
        lines.append({"type": "truth", **tr, "start": times[tr["start"]],
                      "end": times[end] if end is not None and end < sc.polls else None})
    last_topo: dict[str, str] = {}
    for k, t in enumerate(times):
        if k > 0:
            sc.fabric.step(sc.plan(k), t - times[k - 1])
        if k in sc.notes:
            lines.append({"type": "note", "t": t, "text": sc.notes[k]})
        for tg in sc.targets:
            if k in sc.skipped.get(tg.name, ()):
                continue
            err = sc.outages.get(tg.name, {}).get(k)
            if err is not None:
                lines.append({"type": "poll", "target": tg.name, "source": tg.source, "t": t,
                              "duration_s": 5.0, "ok": False, "error": err, "reason": "timeout"})
                continue
            payload = _payload(sc, tg, t, last_topo)
            lines.append({"type": "poll", "target": tg.name, "source": tg.source, "t": t,
                          "duration_s": round(rng.uniform(0.15, 0.9), 3), "ok": True, "payload": payload})
    return lines


def _payload(sc: Scenario, tg: Target, t: float, last_topo: dict[str, str]) -> dict[str, Any]:
    fab = sc.fabric
    if tg.render is not None:
        return tg.render(t)
    if tg.source == "snmp":
        return render.render_snmp(fab, fab.devices[tg.device], t, tg.counter32_offsets)
    if tg.source == "nvue":
        return render.render_nvue(fab.devices[tg.device], t, tg.memo)
    if tg.source == "host":
        return render.render_host(fab.devices[tg.device], tg.sysfs, fab)
    if tg.source == "ufm":
        return render.render_ufm(fab)
    if tg.source == "ufm-telemetry":
        # The endpoint serves its latest sample: taken a little before the poll, by the
        # telemetry clock (half a second, a few ms of jitter from the poll time; deterministic).
        return render.render_ufm_telemetry(fab, t - 0.5 - zlib.crc32(f"{tg.name}{t}".encode()) % 5000 / 1e6)
    if tg.source == "gnmi":
        return render.render_gnmi(fab, fab.devices[tg.device], t, tg.memo, pfcwd=tg.pfcwd)
    if tg.source == "perfquery":
        when = _dt.datetime.fromtimestamp(t, tz=_dt.UTC).strftime("%a %b %d %H:%M:%S %Y")
        topo = render.render_ibnetdiscover(fab, when)
        body = topo.split("\n", 3)[3]  # without the "generated on" banner
        payload: dict[str, Any] = {}
        if last_topo.get(tg.name) != body:
            payload["ibnetdiscover"] = topo
            last_topo[tg.name] = body
        payload["perfquery"] = render.render_perfquery_runs(fab)
        return payload
    raise ValueError(f"unknown source {tg.source}")


def encode(lines: list[dict[str, Any]]) -> bytes:
    text = "".join(json.dumps(line, separators=(",", ":"), ensure_ascii=False) + "\n" for line in lines)
    buf = io.BytesIO()
    with gzip.GzipFile(filename="", fileobj=buf, mode="wb", mtime=0, compresslevel=9) as gz:
        gz.write(text.encode())
    return buf.getvalue()


def write(sc: Scenario, path: Path) -> int:
    """Write the scenario's recording (gzip, fixed mtime) and its config beside it, if it has
    one (``X.yml`` for ``X.jsonl.gz``); returns the recording's size in bytes."""
    data = encode(run(sc))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    if sc.config:
        path.with_name(path.name.removesuffix(".gz").removesuffix(".jsonl") + ".yml").write_text(sc.config)
    return len(data)
