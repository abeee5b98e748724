"""fabricmon's SNMP poll vs prometheus-snmp-exporter, same OIDs, same snmpsim agents.

64 synthesized Arista-like switches x 64 ports x 8 PFC priorities (IF-MIB ifXTable HC
counters, ifHighSpeed, ifOperStatus, ifName, ARISTA-PFC-MIB per-priority requests and
indications). snmpsim is single-threaded Python and cannot answer 64 concurrent pollers from
one process, so the switches are spread over several snmpsim processes (default 8), each
serving 8 communities on its own UDP port of 127.0.0.1.

Each full poll hits all 64 targets at once:

- fabricmon, once per transport (``backend: gufo``, the default, and ``backend: pysnmp``): 64
  ``SnmpCollector.fetch()`` gathered on one event loop (as the agent's scheduler does; each
  fetch runs up to 8 walks at a time), then ``parse_poll()`` of every payload with the
  target's parse state of the poll before, as the pipeline calls it (a payload with the last
  one's lines is read in bulk: collectors/snmp/layout.py). Cost = this process's CPU
  (``time.process_time``) over the poll. The gufo transport's first poll of a target learns
  each column's type through pysnmp (see collectors/snmp/transport_gufo.py): it is the warm-up,
  reported on its own as ``fabricmon_first_poll``.
- snmp_exporter 0.21: 64 concurrent ``/snmp?target=127.0.0.1:PORT&module=swNN`` requests. In
  0.21 the auth (community) is part of the module (the separate ``auths:`` section and the
  ``auth=`` URL parameter only arrived in 0.23), so snmp.yml has one module per community, all
  walking the subtrees fabricmon's planner picks for this device (same roots, same
  max_repetitions, timeout and retries). Cost = the exporter's utime+stime from /proc/PID/stat.

All three run in the same invocation on the same snmpsim processes, alternating poll by poll
(after a warm-up of each), and the mean over the polls is reported. Dropped datagrams: per
socket for the exporter and snmpsim (/proc/net/udp); gufo opens its sockets per poll, so for
fabricmon the count is the namespace's UDP RcvbufErrors over the poll (/proc/net/snmp), an
upper bound that includes any other process on the machine. snmpsim's own CPU over each poll is recorded too: when it is
near (cores x wall), the simulator, not the poller, sets the wall time.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import subprocess
import tempfile
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

SWITCHES, PORTS, PRIOS = 64, 64, 8
SIM_PROCS = 8
IFX = (1, 3, 6, 1, 2, 1, 31, 1, 1, 1)
IFT = (1, 3, 6, 1, 2, 1, 2, 2, 1)
PFC = (1, 3, 6, 1, 4, 1, 30065, 3, 11, 1, 1, 1)
SYS_OID = "1.3.6.1.4.1.30065.1.3011.7060"
EXPORTER = shutil.which("prometheus-snmp-exporter")
# Same request shape on both sides.
MAX_REPETITIONS, RETRIES, TIMEOUT_S = 25, 1, 10.0
BACKENDS = ("gufo", "pysnmp")  # fabricmon's SNMP transports, in SIDES order
SIDES = ("fabricmon", "fabricmon_pysnmp", "snmp_exporter")  # "fabricmon" is the default transport (gufo)
METRIC_PREFIXES = ("if", "arista", "sysUpTime")  # the exporter's value lines (not snmp_scrape_*)


def oid_text(oid: tuple[int, ...]) -> str:
    return ".".join(map(str, oid))


def snmprec(sw: int) -> str:
    """Switch ``sw`` as snmprec text (reads the module's PORTS: bench/soak.py changes it)."""
    rows: list[tuple[tuple[int, ...], str, str]] = [
        ((1, 3, 6, 1, 2, 1, 1, 1, 0), "4", f"Arista Networks EOS version 4.28 running on an Arista DCS-7060X bench{sw}"),
        ((1, 3, 6, 1, 2, 1, 1, 2, 0), "6", SYS_OID),
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
    return "".join(f"{oid_text(oid)}|{tag}|{value}\n" for oid, tag, value in rows)


def fabricmon_walks() -> list[str]:
    """The subtrees fabricmon's SNMP collector walks on these switches (its own planner)."""
    from fabricmon.collectors.snmp import SnmpCollector, SnmpOptions
    from fabricmon.collectors.snmp import parse as snmp_parse

    probe = SnmpCollector("plan", "127.0.0.1", SnmpOptions(community="plan"))
    rows = [(snmp_parse.SYS_OBJECT_ID, "6", SYS_OID), (snmp_parse.SYS_DESCR, "4", b"Arista Networks EOS")]
    return [oid_text(o) for o in probe._plan(rows)]


def snmp_yml(communities: list[str]) -> str:
    """snmp_exporter 0.21 config: one module per community (auth lives in the module in 0.21)."""
    from fabricmon.collectors.snmp import parse as snmp_parse

    if_name = oid_text((*IFX, 1))
    metrics = [("sysUpTime", oid_text(snmp_parse.SYS_UPTIME), "gauge", 0)]
    metrics += [(n, oid_text((*IFX, c)), "counter", 1) for n, c in
                (("ifHCInOctets", 6), ("ifHCInUcastPkts", 7), ("ifHCOutOctets", 10), ("ifHCOutUcastPkts", 11))]
    metrics += [("ifHighSpeed", oid_text((*IFX, 15)), "gauge", 1), ("ifOperStatus", oid_text((*IFT, 8)), "gauge", 1)]
    metrics += [(n, oid_text((*PFC, c)), "counter", 2) for n, c in
                (("aristaPfcPriorityRequests", 3), ("aristaPfcPriorityIndications", 4))]
    walks = fabricmon_walks()
    missing = {m[1] for m in metrics[1:]} - set(walks)
    if missing:
        raise RuntimeError(f"fabricmon no longer walks {sorted(missing)}: update the benchmark")
    scalars = [oid_text(o) for o in snmp_parse.SCALARS]
    body = ["  get:"] + [f"  - {g}" for g in scalars] + ["  walk:"] + [f"  - {w}" for w in walks] + ["  metrics:"]
    for name, oid, typ, nidx in metrics:
        body += [f"  - name: {name}", f"    oid: {oid}", f"    type: {typ}", f"    help: {name}"]
        if nidx:
            body += ["    indexes:", "    - labelname: ifIndex", "      type: gauge"]
            if nidx == 2:
                body += ["    - labelname: priority", "      type: gauge"]
            body += ["    lookups:", "    - labels: [ifIndex]", "      labelname: ifName",
                     f"      oid: {if_name}", "      type: DisplayString"]
    body += ["  version: 2", f"  max_repetitions: {MAX_REPETITIONS}", f"  retries: {RETRIES}", f"  timeout: {TIMEOUT_S:g}s"]
    common = "\n".join(body)
    return "".join(f"{c}:\n{common}\n  auth:\n    community: {c}\n" for c in communities)


def proc_cpu(pid: int) -> float:
    """utime+stime of a process (all its threads), seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def pids_cpu(pids: list[int]) -> float:
    return sum(proc_cpu(p) for p in pids)


def udp_drops(pids: list[int]) -> int:
    """Datagrams the kernel dropped on these processes' UDP sockets (receive buffer full):
    each one is a request or response lost, paid for by a retransmission after the timeout."""
    inodes: set[str] = set()
    for pid in pids:
        with contextlib.suppress(OSError):
            for fd in os.listdir(f"/proc/{pid}/fd"):
                with contextlib.suppress(OSError):
                    link = os.readlink(f"/proc/{pid}/fd/{fd}")
                    if link.startswith("socket:["):
                        inodes.add(link[8:-1])
    total = 0
    for table in ("/proc/net/udp", "/proc/net/udp6"):
        with contextlib.suppress(OSError):
            for line in Path(table).read_text().splitlines()[1:]:
                f = line.split()
                if f[9] in inodes:
                    total += int(f[-1])
    return total


def rcvbuf_errors() -> int:
    """UDP datagrams this network namespace dropped for a full receive buffer (all sockets)."""
    lines = [ln.split() for ln in Path("/proc/net/snmp").read_text().splitlines() if ln.startswith("Udp:")]
    return int(lines[1][lines[0].index("RcvbufErrors")])


class _Skipped(logging.Handler):
    """Counts the collector's "subtree skipped this poll" warnings (a walk that timed out)
    instead of printing hundreds of them."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.n = 0

    def emit(self, record: logging.LogRecord) -> None:
        self.n += 1


class Fabricmon:
    """The 64 collectors, built once, polled on one long-lived event loop (like the agent)."""

    def __init__(self, targets: list[tuple[str, int]], backend: str) -> None:
        from fabricmon.collectors.snmp import SnmpCollector, SnmpOptions
        from fabricmon.collectors.snmp import fetch as snmp_fetch

        self.skipped = _Skipped()
        snmp_fetch.log.addHandler(self.skipped)
        snmp_fetch.log.propagate = False
        self.runner = asyncio.Runner()
        self.cols = [SnmpCollector(c, "127.0.0.1", SnmpOptions(port=port, community=c, snmp_timeout=TIMEOUT_S, backend=backend,
                                                                retries=RETRIES, max_repetitions=MAX_REPETITIONS))
                     for c, port in targets]
        # Each target's parse state, carried from poll to poll as the agent's pipeline does
        # (it holds the last payload's layout: the next one is read in bulk).
        self.states = {c.name: SnmpCollector.new_state() for c in self.cols}

    async def _poll(self, cols: list[Any], store: Any = None) -> tuple[int, int, float]:
        """Fetch every target, parse every payload (and, given a CounterStore, store it: the
        path bench/gnmi_compare.py compares); (values, failed targets, CPU after the fetch)."""
        from bench.polling import fetch_and_parse
        from fabricmon.collectors.snmp import SnmpCollector

        return await fetch_and_parse(cols, SnmpCollector.parse_poll, self.states, store)

    def poll(self, sim_pids: list[int], only: list[tuple[str, int]] | None = None) -> dict[str, Any]:
        cols = [c for c in self.cols if only is None or c.name in dict(only)]
        d0, q0, s0 = rcvbuf_errors(), udp_drops(sim_pids), pids_cpu(sim_pids)
        k0, c0, w0 = self.skipped.n, time.process_time(), time.perf_counter()
        values, errors, parse_cpu = self.runner.run(self._poll(cols))
        wall, cpu = time.perf_counter() - w0, time.process_time() - c0
        return {"wall_s": wall, "cpu_s": cpu, "parse_cpu_s": parse_cpu, "values": values, "errors": errors,
                "walks_skipped": self.skipped.n - k0, "snmpsim_cpu_s": pids_cpu(sim_pids) - s0,
                "udp_drops": rcvbuf_errors() - d0, "snmpsim_udp_drops": udp_drops(sim_pids) - q0}

    def close(self) -> None:
        async def close_all() -> None:
            for c in self.cols:
                await c.close()

        from fabricmon.collectors.snmp import fetch as snmp_fetch

        self.runner.run(close_all())
        self.runner.close()
        snmp_fetch.log.removeHandler(self.skipped)
        snmp_fetch.log.propagate = True


class Exporter:
    """prometheus-snmp-exporter on a loopback port with the generated snmp.yml."""

    def __init__(self, targets: list[tuple[str, int]], tmp: Path) -> None:
        from tests.conftest import free_port

        assert EXPORTER is not None
        self.targets = targets
        cfg = tmp / "snmp.yml"
        cfg.write_text(snmp_yml([c for c, _ in targets]))
        self.web = free_port()
        self.proc = subprocess.Popen([EXPORTER, f"--config.file={cfg}", f"--web.listen-address=127.0.0.1:{self.web}"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
        self.pool = ThreadPoolExecutor(max_workers=len(targets))
        deadline = time.monotonic() + 30
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{self.web}/", timeout=1).read()
                return
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    err = self.proc.stderr.read().decode()[-2000:] if self.proc.stderr and self.proc.poll() is not None else ""
                    self.close()
                    raise RuntimeError(f"snmp_exporter did not start: {err}") from None
                time.sleep(0.1)

    def _get(self, community: str, port: int) -> int:
        url = f"http://127.0.0.1:{self.web}/snmp?target=127.0.0.1:{port}&module={community}"
        try:
            body = urllib.request.urlopen(url, timeout=120).read().decode()
        except OSError:
            return -1
        return sum(1 for ln in body.splitlines() if ln.startswith(METRIC_PREFIXES))

    def poll(self, sim_pids: list[int], only: list[tuple[str, int]] | None = None) -> dict[str, Any]:
        me = [self.proc.pid]
        d0, q0, s0 = udp_drops(me), udp_drops(sim_pids), pids_cpu(sim_pids)
        c0, w0 = proc_cpu(self.proc.pid), time.perf_counter()
        counts = list(self.pool.map(lambda t: self._get(*t), only or self.targets))
        wall = time.perf_counter() - w0
        return {"wall_s": wall, "cpu_s": proc_cpu(self.proc.pid) - c0, "values": sum(n for n in counts if n > 0),
                "errors": sum(1 for n in counts if n <= 0), "snmpsim_cpu_s": pids_cpu(sim_pids) - s0,
                "udp_drops": udp_drops(me) - d0, "snmpsim_udp_drops": udp_drops(sim_pids) - q0}

    def close(self) -> None:
        self.pool.shutdown()
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def _mean(polls: list[dict[str, Any]]) -> dict[str, Any]:
    """Each figure averaged over the measured polls; every poll's wall time kept."""
    out: dict[str, Any] = {k: sum(p[k] for p in polls) / len(polls) for k in polls[0]}
    out["polls"] = len(polls)
    out["wall_s_all"] = [round(p["wall_s"], 2) for p in polls]
    out["values_per_s"] = out["values"] / out["wall_s"] if out["wall_s"] else None
    out["values_per_cpu_s"] = out["values"] / out["cpu_s"] if out["cpu_s"] else None
    out["snmpsim_cores"] = out["snmpsim_cpu_s"] / out["wall_s"] if out["wall_s"] else None
    return out


def run(switches: int = SWITCHES, rounds: int = 2, sim_procs: int = SIM_PROCS) -> dict[str, Any]:
    """Poll ``switches`` targets (spread over ``sim_procs`` snmpsim processes) ``rounds`` times
    with each tool, alternating, after a warm-up; each side's figures averaged over its polls."""
    from tests.snmpsim_util import SnmpSim, probe

    sim_procs = max(1, min(sim_procs, switches))
    communities = [f"sw{s:02d}" for s in range(switches)]
    shards = [communities[i::sim_procs] for i in range(sim_procs)]
    out: dict[str, Any] = {"switches": switches, "ports": PORTS, "priorities": PRIOS, "concurrency": switches,
                           "snmpsim_processes": sim_procs, "rounds": rounds, "cpus": os.cpu_count(),
                           "max_repetitions": MAX_REPETITIONS, "walks_per_switch": len(fabricmon_walks())}
    out["oids_per_switch"] = snmprec(0).count("\n")
    out["loadavg_start"] = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="fabricmon-bench-snmp-") as tmp, contextlib.ExitStack() as stack:
        sims = [SnmpSim({c: snmprec(int(c[2:])) for c in shard}, start_timeout=120) for shard in shards]
        with ThreadPoolExecutor(len(sims)) as pool:  # index the data files in parallel
            for fut in [pool.submit(s.__enter__) for s in sims]:
                fut.result()
        for s in sims:
            stack.callback(s.__exit__, None, None, None)
        sim_pids = [s._proc.pid for s in sims if s._proc is not None]
        port_of = {c: sim.port for sim, shard in zip(sims, shards, strict=True) for c in shard}
        targets = [(c, port_of[c]) for c in communities]

        ours = {b: Fabricmon(targets, b) for b in BACKENDS}
        for f in ours.values():
            stack.callback(f.close)
        theirs = None
        if EXPORTER is None:
            out["snmp_exporter"] = {"skipped": "prometheus-snmp-exporter is not installed (apt-get install prometheus-snmp-exporter)"}
        else:
            theirs = Exporter(targets, Path(tmp))
            stack.callback(theirs.close)
        # Warm-up, not measured: snmpsim opens each community's data file on its first request,
        # fabricmon builds its SnmpEngine, loads its profiles and (gufo) learns the column types
        # of every target, the exporter opens its first session.
        for c, port in targets:
            probe(port, c, timeout=5.0)
        ours["pysnmp"].poll(sim_pids, targets[:1])
        out["fabricmon_first_poll"] = _mean([ours["gufo"].poll(sim_pids)])
        if theirs:
            theirs.poll(sim_pids, targets[:1])
        polls: dict[str, list[dict[str, Any]]] = {k: [] for k in SIDES}
        for _ in range(rounds):
            for b, f in ours.items():
                polls[SIDES[BACKENDS.index(b)]].append(f.poll(sim_pids))
            if theirs:
                polls["snmp_exporter"].append(theirs.poll(sim_pids))
        out.update({k: _mean(v) for k, v in polls.items() if v})
    out["loadavg_end"] = os.getloadavg()
    e = out["snmp_exporter"]
    if "cpu_s" in e:
        for side in SIDES[:2]:  # CPU per value over the exporter's: < 1 fabricmon cheaper
            f = out[side]
            out[f"{side}_cpu_per_value_ratio"] = (f["cpu_s"] / f["values"]) / (e["cpu_s"] / e["values"]) if e["cpu_s"] and f["values"] else None
    g, p = out["fabricmon"], out["fabricmon_pysnmp"]
    out["gufo_over_pysnmp_cpu_per_value"] = (g["cpu_s"] / g["values"]) / (p["cpu_s"] / p["values"]) if p["cpu_s"] and g["values"] else None
    return out


ROWS = [
    ("wall_s", "wall time per full poll (s)", "{:.2f}"),
    ("cpu_s", "poller CPU per poll (s)", "{:.2f}"),
    ("values", "values per poll", "{:,.0f}"),
    ("errors", "targets failed", "{:.0f}"),
    ("walks_skipped", "walks given up (timeout), values lost", "{:.0f}"),
    ("values_per_s", "values/s (wall)", "{:,.0f}"),
    ("values_per_cpu_s", "values per poller CPU-second", "{:,.0f}"),
    ("snmpsim_cpu_s", "snmpsim CPU per poll (s, all procs)", "{:.2f}"),
    ("snmpsim_cores", "snmpsim cores busy (CPU/wall)", "{:.2f}"),
    ("udp_drops", "UDP drops, poller (rcvbuf full)", "{:.0f}"),
    ("snmpsim_udp_drops", "UDP drops, snmpsim sockets", "{:.0f}"),
]


def table(r: dict[str, Any]) -> str:
    """The comparison as a text table: fabricmon (gufo) | fabricmon (pysnmp) | snmp_exporter, and
    each fabricmon column over the exporter's."""
    cols = [r.get(k, {}) for k in SIDES]
    for c in cols:
        if c.get("values") and "cpu_s" in c:
            c["cpu_us_per_value"] = c["cpu_s"] / c["values"] * 1e6
    head = (f"SNMP, {r['switches']} switches x {r['ports']} ports x {r['priorities']} priorities "
            f"({r['oids_per_switch']} OIDs, {r['walks_per_switch']} walks each), all {r['concurrency']} polled at once,\n"
            f"{r['snmpsim_processes']} snmpsim processes, {r['cpus']} CPUs, mean of {r['rounds']} polls per side, alternating, "
            f"load average {r['loadavg_start'][0]:.1f} at start, {r['loadavg_end'][0]:.1f} at end")
    rows = [("cpu_us_per_value", "poller CPU per value (us)", "{:.2f}"), *ROWS]
    w = max(len(x[1]) for x in rows)
    lines = [head, f"{'':<{w}}  {'gufo':>10}  {'pysnmp':>10}  {'exporter':>10}  {'gufo/e':>7}  {'pysnmp/e':>8}"]
    counts = ("errors", "walks_skipped", "udp_drops", "snmpsim_udp_drops")
    for key, label, fmt in rows:
        vals = [c.get(key) for c in cols]
        e = vals[2]
        ratios = [f"{v / e:.2f}" if isinstance(v, (int, float)) and isinstance(e, (int, float)) and e and key not in counts else ""
                  for v in vals[:2]]
        shown = [fmt.format(v) if v is not None else "-" for v in vals]
        lines.append(f"{label:<{w}}  {shown[0]:>10}  {shown[1]:>10}  {shown[2]:>10}  {ratios[0]:>7}  {ratios[1]:>8}")
    expected = r["switches"] * r["ports"] * (6 + 2 * r["priorities"])
    lines.append(f"(a complete poll is {expected:,} values: {6 + 2 * r['priorities']} per port; the exporter also "
                 "emits sysUpTime per switch, fabricmon keeps it as the device clock)")
    g, first = cols[0], r.get("fabricmon_first_poll", {})
    if "parse_cpu_s" in g:
        lines.append(f"(fabricmon CPU includes parse: gufo {g['parse_cpu_s']:.2f} s, pysnmp {cols[1].get('parse_cpu_s', 0):.2f} s; "
                     "the exporter's includes rendering its text exposition)")
        lines.append(f"(wall per poll: gufo {g['wall_s_all']}, pysnmp {cols[1].get('wall_s_all', '-')}, "
                     f"exporter {cols[2].get('wall_s_all', '-')})")
    if first:
        lines.append(f"(gufo's first poll, which learns column types through pysnmp: {first['cpu_s']:.2f} s CPU, "
                     f"{first['wall_s']:.2f} s wall; not in the means)")
    if r.get("gufo_over_pysnmp_cpu_per_value"):
        lines.append(f"gufo / pysnmp CPU per value: {r['gufo_over_pysnmp_cpu_per_value']:.3f}")
    ratio = r.get("fabricmon_cpu_per_value_ratio")
    if ratio is not None:  # the scale issue's SNMP target, on the default transport
        drops = g.get("udp_drops", 0) + g.get("snmpsim_udp_drops", 0)
        fetch_ratio = ratio * (1 - g["parse_cpu_s"] / g["cpu_s"])
        lines.append(f"target: SNMP CPU per value <= 1.0x snmp_exporter, 0 datagrams dropped: "
                     f"{'met' if ratio <= 1.0 and drops == 0 else 'GAP'} ({ratio:.2f}x, {drops:.0f} dropped; "
                     f"fetch alone, without fabricmon's parse, {fetch_ratio:.2f}x)")
    if "skipped" in cols[2]:
        lines.append(f"snmp_exporter: {cols[2]['skipped']}")
    lines.append("UDP drops for fabricmon: the whole namespace's RcvbufErrors during its poll (an upper bound)")
    return "\n".join(lines)


if __name__ == "__main__":
    import argparse
    import json

    ap = argparse.ArgumentParser(prog="python -m bench.snmp_compare", description=__doc__.split("\n\n")[0])
    ap.add_argument("--switches", type=int, default=SWITCHES)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--sim-procs", type=int, default=SIM_PROCS)
    ap.add_argument("--json", default=None, help="also write the figures to this path")
    a = ap.parse_args()
    result = run(a.switches, a.rounds, a.sim_procs)
    print(table(result))
    if a.json:
        Path(a.json).write_text(json.dumps(result, indent=1))
