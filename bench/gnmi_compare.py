"""CPU per value of the gNMI path beside the SNMP path, on the same values, in one run.

64 switches x 64 ports x 8 PFC priorities, 22 values per port on both paths: 4 port counters
(octets and unicast packets in and out), PFC frames received and sent per priority, link state
and speed.

- **gNMI**: a grpcio gNMI server in a separate process (``python -m bench.gnmi_compare --serve``,
  the tests' stand-in, TLS + password) streams each of the 64 switches in SONiC's shape: one
  notification per port per round with the ``COUNTERS/<port>`` hash (SAMPLE every
  ``interval``, default 10 s) after an initial sync that also carries APPL_DB ``PORT_TABLE``
  (link state and speed, ON_CHANGE: sent once, kept by the parser). fabricmon runs 64
  ``GnmiCollector`` streams on one event loop, and at each poll boundary ``fetch()`` ->
  ``parse()`` -> ``CounterStore.update_columns`` for every switch. Cost = this process's CPU
  over whole intervals (receiving and decoding the stream happens between polls, in the
  background tasks), steady state after the initial sync.
- **SNMP**: the same 64 switches as snmpsim agents (bench/snmp_compare.py's snmprec: IF-MIB
  ifXTable HC counters, ifHighSpeed, ifOperStatus, ARISTA-PFC-MIB per priority), fabricmon's
  default SNMP transport, fetch -> parse -> store, CPU over the poll.

Lost notifications: the server counts what it sent, the client what it received, handed to
polls, still waiting and dropped over the caps; "lost" = sent - received (after a quiet second)
plus dropped.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import snmp_compare

SWITCHES, PORTS, PRIOS = snmp_compare.SWITCHES, snmp_compare.PORTS, snmp_compare.PRIOS
T0_NS = 1_764_691_200_000_000_000


def port_hash(sw: int, i: int, k: int) -> dict[str, str]:
    """Port ``i`` of switch ``sw`` at round ``k``: the values snmp_compare.snmprec serves, advancing."""
    h = {"SAI_PORT_STAT_IF_IN_OCTETS": str(10**12 + sw * 10**9 + i * 10**6 + 6 + k * 10**9),
         "SAI_PORT_STAT_IF_IN_UCAST_PKTS": str(10**12 + sw * 10**9 + i * 10**6 + 7 + k * 10**6),
         "SAI_PORT_STAT_IF_OUT_OCTETS": str(10**12 + sw * 10**9 + i * 10**6 + 10 + k * 10**9),
         "SAI_PORT_STAT_IF_OUT_UCAST_PKTS": str(10**12 + sw * 10**9 + i * 10**6 + 11 + k * 10**6)}
    for p in range(PRIOS):
        h[f"SAI_PORT_STAT_PFC_{p}_TX_PKTS"] = str(sw * 1000 + i * 10 + p + 3 + k)
        h[f"SAI_PORT_STAT_PFC_{p}_RX_PKTS"] = str(sw * 1000 + i * 10 + p + 4 + k)
    return h


def switch_round(sw: int, k: int) -> list[dict[str, Any]]:
    return [{"timestamp": T0_NS + k * 10**10, "prefix": "/COUNTERS", "target": "COUNTERS_DB", "delete": [],
             "update": [{"path": f"/Ethernet{i}", "val": {"json_ietf_val": port_hash(sw, i, k)}}]} for i in range(1, PORTS + 1)]


def port_table() -> list[dict[str, Any]]:
    rows = {f"Ethernet{i}": {"oper_status": "up", "speed": "400000"} for i in range(1, PORTS + 1)}
    return [{"timestamp": T0_NS, "prefix": "/", "target": "APPL_DB", "delete": [],
             "update": [{"path": "/PORT_TABLE", "val": {"json_ietf_val": rows}}]}]


# ---------------------------------------------------------------------- the server process

def serve(cert: str, key: str, port_file: str, stats_file: str, switches: int) -> None:
    """The stand-in for every switch (the client's username names it: sw00..), until SIGTERM."""
    from tests.gnmi_standin import GnmiStandIn

    sent = {"notifications": 0}

    import grpc
    from pygnmi.spec.v080 import gnmi_pb2 as pb

    from fabricmon.collectors.gnmi import paths as gp

    def responses(notes: list[dict[str, Any]]) -> list[Any]:
        return [pb.SubscribeResponse(update=gp.notification_proto(n, pb)) for n in notes]

    class Server(GnmiStandIn):
        async def _auth(self, context: Any) -> None:  # every switch's user, one password
            if dict(context.invocation_metadata() or ()).get("password") != self.password:
                await context.abort(grpc.StatusCode.UNAUTHENTICATED, "authentication failed")

        async def Subscribe(self, request_iterator: Any, context: Any) -> Any:
            md = dict(context.invocation_metadata() or ())
            if md.get("password") != self.password:
                await context.abort(grpc.StatusCode.UNAUTHENTICATED, "authentication failed")
            user = md.get("username", "sw00")
            sw = int(user[2:]) if user[2:].isdigit() else 0
            first = await request_iterator.__anext__()
            target = first.subscribe.prefix.target
            initial = switch_round(sw, 0) if target == "COUNTERS_DB" else port_table() if target == "APPL_DB" else []
            for resp in responses(initial):
                sent["notifications"] += 1
                yield resp
            yield pb.SubscribeResponse(sync_response=True)
            if target != "COUNTERS_DB":  # the ON_CHANGE groups: nothing changes
                await asyncio.Event().wait()
            interval = max(s.sample_interval for s in first.subscribe.subscription) / 1e9
            start = time.monotonic()
            k = 1
            while True:
                await asyncio.sleep(max(0.0, start + k * interval - time.monotonic()))
                for resp in responses(switch_round(sw, k)):
                    sent["notifications"] += 1
                    yield resp
                k += 1

    async def main() -> None:
        srv = Server(tls=(Path(cert), Path(key)), password="bench")
        async with srv:
            Path(port_file).write_text(str(srv.port))
            stop = asyncio.Event()
            asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
            while not stop.is_set():
                Path(stats_file).write_text(json.dumps(sent))
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), 0.5)
            Path(stats_file).write_text(json.dumps(sent))

    asyncio.run(main())


# ---------------------------------------------------------------------- the gNMI side

async def _gnmi(port: int, ca: str, switches: int, interval: float, rounds: int) -> dict[str, Any]:
    from bench.polling import fetch_and_parse
    from fabricmon.agent.store import CounterStore
    from fabricmon.collectors.gnmi import GnmiCollector, GnmiOptions

    cols = []
    for s in range(switches):
        c = GnmiCollector(f"sw{s:02d}", "127.0.0.1", GnmiOptions(port=port, username=f"sw{s:02d}", password="bench", ca_file=ca,
                                                                  profile="sonic", mode="stream"))
        c.set_schedule(interval, interval * 0.9)
        cols.append(c)
    store = CounterStore(history=8, stale_after=600.0)
    states = {c.name: GnmiCollector.new_state() for c in cols}

    async def poll(t: float) -> tuple[int, int, float]:
        return await fetch_and_parse(cols, GnmiCollector.parse, states, store, at=t)

    out: list[dict[str, Any]] = []
    try:
        start = time.monotonic()
        first = await poll(time.time())  # the initial sync: not measured
        c0, w0 = time.process_time(), time.perf_counter()
        for k in range(1, rounds + 1):
            await asyncio.sleep(max(0.0, start + k * interval + interval / 2 - time.monotonic()))  # between sample rounds
            values, errors, parse_cpu = await poll(time.time())
            c1, w1 = time.process_time(), time.perf_counter()
            out.append({"cpu_s": c1 - c0, "wall_s": w1 - w0, "values": values, "errors": errors, "parse_store_cpu_s": parse_cpu})
            c0, w0 = c1, w1
        await asyncio.sleep(1.0)  # anything still in flight arrives
        stats = {"received": sum(c._client.received for c in cols), "delivered": sum(c._client.delivered for c in cols),
                 "waiting": sum(c._client.waiting for c in cols), "dropped": sum(c._client.dropped for c in cols),
                 "first_poll_values": first[0], "first_poll_errors": first[1]}
    finally:
        for c in cols:
            await c.close()
    return {"polls": out, **stats}


def run(switches: int = SWITCHES, rounds: int = 3, interval: float = 10.0) -> dict[str, Any]:
    from fabricmon.agent.store import CounterStore
    from tests.pki import self_signed_cert
    from tests.snmpsim_util import SnmpSim, probe

    res: dict[str, Any] = {"switches": switches, "ports": PORTS, "priorities": PRIOS, "rounds": rounds, "interval_s": interval,
                           "cpus": os.cpu_count(), "loadavg_start": os.getloadavg()}
    with tempfile.TemporaryDirectory(prefix="fabricmon-bench-gnmi-") as tmp:
        cert, key = self_signed_cert(Path(tmp))
        port_file, stats_file = Path(tmp) / "port", Path(tmp) / "stats"
        root = Path(__file__).resolve().parent.parent
        proc = subprocess.Popen([sys.executable, "-m", "bench.gnmi_compare", "--serve", str(cert), str(key), str(port_file), str(stats_file),
                                 str(switches)], cwd=root)
        try:
            for _ in range(300):
                if port_file.exists() and port_file.read_text():
                    break
                time.sleep(0.1)
            g = asyncio.run(_gnmi(int(port_file.read_text()), str(cert), switches, interval, rounds))
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=30)
        sent = json.loads(stats_file.read_text())["notifications"]
        polls = g.pop("polls")
        res["gnmi"] = {**_mean(polls), **g, "server_sent": sent, "lost": sent - g["received"] + g["dropped"]}

        # SNMP: the same switches and values through snmpsim, fetch -> parse -> store.
        communities = [f"sw{s:02d}" for s in range(switches)]
        procs = max(1, min(snmp_compare.SIM_PROCS, switches))
        shards = [communities[i::procs] for i in range(procs)]
        with contextlib.ExitStack() as stack:
            sims = [stack.enter_context(SnmpSim({c: snmp_compare.snmprec(int(c[2:])) for c in shard}, start_timeout=120)) for shard in shards]
            targets = [(c, sim.port) for sim, shard in zip(sims, shards, strict=True) for c in shard]
            for c, port in targets:
                probe(port, c, timeout=5.0)
            ours = snmp_compare.Fabricmon(targets, "gufo")
            stack.callback(ours.close)
            store = CounterStore(history=8, stale_after=600.0)

            def snmp_poll() -> dict[str, Any]:
                c0, w0 = time.process_time(), time.perf_counter()
                values, errors, _parse = ours.runner.run(ours._poll(ours.cols, store))
                return {"cpu_s": time.process_time() - c0, "wall_s": time.perf_counter() - w0, "values": values, "errors": errors}

            snmp_poll()  # warm-up (gufo learns the column types), not measured
            res["snmp"] = _mean([snmp_poll() for _ in range(rounds)])
    res["loadavg_end"] = os.getloadavg()
    g, s = res["gnmi"], res["snmp"]
    if g["values"] and s["values"] and s["cpu_s"]:
        res["gnmi_over_snmp_cpu_per_value"] = (g["cpu_s"] / g["values"]) / (s["cpu_s"] / s["values"])
    return res


def _mean(polls: list[dict[str, Any]]) -> dict[str, Any]:
    out = {k: sum(p[k] for p in polls) / len(polls) for k in polls[0]}
    out["cpu_us_per_value"] = out["cpu_s"] / out["values"] * 1e6 if out["values"] else None
    return out


def table(r: dict[str, Any]) -> str:
    g, s = r["gnmi"], r["snmp"]
    lines = [f"gNMI vs SNMP, {r['switches']} switches x {r['ports']} ports x {r['priorities']} priorities, gNMI SAMPLE every "
             f"{r['interval_s']:g} s, mean of {r['rounds']} polls each, {r['cpus']} CPUs, load {r['loadavg_start'][0]:.1f} -> {r['loadavg_end'][0]:.1f}",
             f"{'':<44}{'gNMI':>12}{'SNMP':>12}"]
    for key, label, fmt in (("cpu_s", "CPU per poll, fetch+parse+store (s)", "{:.3f}"), ("values", "values per poll", "{:,.0f}"),
                            ("cpu_us_per_value", "CPU per value (us)", "{:.2f}"), ("errors", "targets failed", "{:.0f}")):
        lines.append(f"{label:<44}{fmt.format(g[key]):>12}{fmt.format(s[key]):>12}")
    lines.append(f"(gNMI CPU covers whole intervals: the stream is received and decoded between polls; of it, parse+store "
                 f"{g['parse_store_cpu_s']:.3f} s per poll)")
    if r.get("gnmi_over_snmp_cpu_per_value") is not None:
        lines.append(f"gNMI / SNMP CPU per value: {r['gnmi_over_snmp_cpu_per_value']:.2f}")
    lines.append(f"{g['lost']} notifications lost (server sent {g['server_sent']:,}, received {g['received']:,}, "
                 f"handed to polls {g['delivered']:,}, waiting {g['waiting']}, dropped over the caps {g['dropped']})")
    return "\n".join(lines)


if __name__ == "__main__":
    import argparse

    if len(sys.argv) > 1 and sys.argv[1] == "--serve":
        serve(*sys.argv[2:6], int(sys.argv[6]))
        sys.exit(0)
    ap = argparse.ArgumentParser(prog="python -m bench.gnmi_compare", description=__doc__.split("\n\n")[0])
    ap.add_argument("--switches", type=int, default=SWITCHES)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--interval", type=float, default=10.0)
    ap.add_argument("--json", default=None, help="also write the figures to this path")
    a = ap.parse_args()
    result = run(a.switches, a.rounds, a.interval)
    print(table(result))
    if a.json:
        Path(a.json).write_text(json.dumps(result, indent=1))
