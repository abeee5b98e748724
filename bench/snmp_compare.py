"""fabricmon's SNMP poll vs prometheus-snmp-exporter on the same snmpsim agent.

64 synthesized Arista-like switches x 64 ports x 8 PFC priorities (IF-MIB ifXTable HC
counters, ifHighSpeed, ifOperStatus, ifName, ARISTA-PFC-MIB per-priority requests and
indications), all served by one snmpsim on 127.0.0.1, one community per switch.
fabricmon: 64 concurrent SnmpCollector fetches + parses in this process. snmp_exporter:
64 concurrent ``/snmp?target=...&module=swNN`` requests, with a hand-written snmp.yml that
walks the same tables (numeric OIDs). Both are timed on the wall clock and on their own
process CPU (ours: process_time; the exporter's: /proc/PID/stat utime+stime).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

SWITCHES, PORTS, PRIOS = 64, 64, 8
IFX = (1, 3, 6, 1, 2, 1, 31, 1, 1, 1)
IFT = (1, 3, 6, 1, 2, 1, 2, 2, 1)
PFC = (1, 3, 6, 1, 4, 1, 30065, 3, 11, 1, 1, 1)
EXPORTER = shutil.which("prometheus-snmp-exporter")


def snmprec(sw: int) -> str:
    rows: list[tuple[tuple[int, ...], str, str]] = [
        ((1, 3, 6, 1, 2, 1, 1, 1, 0), "4", f"Arista Networks EOS version 4.28 running on an Arista DCS-7060X bench{sw}"),
        ((1, 3, 6, 1, 2, 1, 1, 2, 0), "6", "1.3.6.1.4.1.30065.1.3011.7060"),
        ((1, 3, 6, 1, 2, 1, 1, 3, 0), "67", str(100000 + sw)),
    ]
    for i in range(1, PORTS + 1):
        rows.append(((*IFX, 1, i), "4", f"Ethernet{i}/1"))
        rows.append(((*IFT, 8, i), "2", "1"))
        for col in (6, 7, 10, 11):
            rows.append(((*IFX, col, i), "70", str(10**12 + sw * 10**9 + i * 10**6 + col)))
        rows.append(((*IFX, 15, i), "66", "400000"))
        for col in (3, 4):
            for prio in range(PRIOS):
                rows.append(((*PFC, col, i, prio), "65", str(sw * 1000 + i * 10 + prio + col)))
    rows.sort(key=lambda r: r[0])
    return "".join(f"{'.'.join(map(str, oid))}|{tag}|{value}\n" for oid, tag, value in rows)


def snmp_yml(switches: int = SWITCHES) -> str:
    metrics = [("sysUpTime", "1.3.6.1.2.1.1.3", "gauge", 0)]
    metrics += [(n, ".".join(map(str, (*IFX, c))), "counter", 1) for n, c in
                (("ifHCInOctets", 6), ("ifHCInUcastPkts", 7), ("ifHCOutOctets", 10), ("ifHCOutUcastPkts", 11))]
    metrics += [("ifHighSpeed", ".".join(map(str, (*IFX, 15))), "gauge", 1), ("ifOperStatus", ".".join(map(str, (*IFT, 8))), "gauge", 1)]
    metrics += [(n, ".".join(map(str, (*PFC, c))), "counter", 2) for n, c in
                (("aristaPfcPriorityRequests", 3), ("aristaPfcPriorityIndications", 4))]
    walk = sorted({m[1] for m in metrics} | {".".join(map(str, (*IFX, 1)))})
    body = ["  walk:"] + [f"  - {w}" for w in walk] + ["  metrics:"]
    for name, oid, typ, nidx in metrics:
        body += [f"  - name: {name}", f"    oid: {oid}", f"    type: {typ}", f"    help: {name}"]
        if nidx:
            body += ["    indexes:", "    - labelname: ifIndex", "      type: gauge"]
            if nidx == 2:
                body += ["    - labelname: priority", "      type: gauge"]
            body += ["    lookups:", "    - labels: [ifIndex]", "      labelname: ifName",
                     f"      oid: {'.'.join(map(str, (*IFX, 1)))}", "      type: DisplayString"]
    body += ["  version: 2", "  max_repetitions: 25", "  retries: 1", "  timeout: 10s"]
    common = "\n".join(body)
    return "".join(f"sw{s:02d}:\n{common}\n  auth:\n    community: sw{s:02d}\n" for s in range(switches))


def proc_cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def fabricmon_poll(port: int, switches: int = SWITCHES, concurrency: int = 4) -> tuple[int, float]:
    from agent.model import TargetSpec
    from collectors.snmp import SnmpCollector, SnmpOptions

    cols = [SnmpCollector(f"sw{s:02d}", "127.0.0.1", SnmpOptions(port=port, community=f"sw{s:02d}", snmp_timeout=10.0, retries=1))
            for s in range(switches)]
    gate = asyncio.Semaphore(concurrency)

    async def fetch(c: SnmpCollector) -> dict[str, Any]:
        async with gate:
            return await c.fetch()

    payloads = await asyncio.gather(*(fetch(c) for c in cols))
    t0 = time.process_time()
    n = 0
    for c, payload in zip(cols, payloads, strict=True):
        r = SnmpCollector.parse(payload, TargetSpec(c.name, "snmp"), {})
        n += len(r.samples) + len(r.gauges)
    for c in cols:
        await c.close()
    return n, time.process_time() - t0


def run(switches: int = SWITCHES, rounds: int = 1, concurrency: int = 4) -> dict[str, Any]:
    """The comparison on ``switches`` of the 64 devices, ``concurrency`` polls at a time on each side
    (snmpsim is one single-threaded Python process: more concurrency only makes both sides time out)."""
    from tests.conftest import free_port
    from tests.snmpsim_util import SnmpSim

    out: dict[str, Any] = {"switches": switches, "ports": PORTS, "priorities": PRIOS, "concurrency": concurrency}
    with tempfile.TemporaryDirectory(prefix="fabricmon-bench-snmp-") as tmp:
        data = {f"sw{s:02d}": snmprec(s) for s in range(switches)}
        out["oids_per_switch"] = data["sw00"].count("\n")
        with SnmpSim(data, start_timeout=300) as sim:
            ours = []
            for _ in range(rounds):
                w, c = time.perf_counter(), time.process_time()
                n, parse_cpu = asyncio.run(fabricmon_poll(sim.port, switches, concurrency))
                ours.append({"wall_s": time.perf_counter() - w, "cpu_s": time.process_time() - c, "parse_cpu_s": parse_cpu, "values": n})
            out["fabricmon"] = min(ours, key=lambda x: x["wall_s"])
            if EXPORTER is None:
                out["snmp_exporter"] = {"skipped": "prometheus-snmp-exporter is not installed (apt-get install prometheus-snmp-exporter)"}
                return out
            cfg = Path(tmp) / "snmp.yml"
            cfg.write_text(snmp_yml(switches))
            web = free_port()
            proc = subprocess.Popen([EXPORTER, f"--config.file={cfg}", f"--web.listen-address=127.0.0.1:{web}"],
                                    stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
            try:
                deadline = time.monotonic() + 30
                while True:
                    try:
                        urllib.request.urlopen(f"http://127.0.0.1:{web}/", timeout=1).read()
                        break
                    except OSError:
                        if proc.poll() is not None or time.monotonic() > deadline:
                            raise RuntimeError(f"snmp_exporter did not start: {proc.stderr.read().decode()[-2000:] if proc.stderr else ''}") from None
                        time.sleep(0.1)
                theirs = []
                for _ in range(rounds):
                    series: list[int] = []
                    lock = threading.Lock()

                    def get(s: int, series: list[int] = series, lock: threading.Lock = lock) -> None:
                        url = f"http://127.0.0.1:{web}/snmp?target=127.0.0.1:{sim.port}&module=sw{s:02d}"
                        body = urllib.request.urlopen(url, timeout=120).read().decode()
                        n = sum(1 for ln in body.splitlines() if ln.startswith(("if", "arista", "sysUpTime")))
                        with lock:
                            series.append(n)

                    c0, w = proc_cpu(proc.pid), time.perf_counter()
                    todo = list(range(switches))

                    def worker(todo: list[int] = todo, lock: threading.Lock = lock) -> None:
                        while True:
                            with lock:
                                if not todo:
                                    return
                                s = todo.pop(0)
                            get(s)

                    threads = [threading.Thread(target=worker) for _ in range(concurrency)]
                    for t in threads:
                        t.start()
                    for t in threads:
                        t.join()
                    theirs.append({"wall_s": time.perf_counter() - w, "cpu_s": proc_cpu(proc.pid) - c0, "values": sum(series)})
                out["snmp_exporter"] = min(theirs, key=lambda x: x["wall_s"])
            finally:
                proc.terminate()
                try:
                    proc.wait(10)
                except subprocess.TimeoutExpired:
                    proc.kill()
    f, s = out["fabricmon"], out["snmp_exporter"]
    out["wall_ratio"] = f["wall_s"] / s["wall_s"]  # < 1: fabricmon faster
    out["cpu_ratio"] = f["cpu_s"] / s["cpu_s"] if s["cpu_s"] else None
    return out


if __name__ == "__main__":
    import json
    import sys

    print(json.dumps(run(int(sys.argv[1]) if len(sys.argv) > 1 else 8), indent=1))
