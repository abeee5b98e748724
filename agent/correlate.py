"""Cross-shard correlation: one PFC storm tree and one origin when agents split the fabric.

With ``shard:``, each agent sees only its share of the switches. A storm that starts behind
one shard's leaf and pauses another shard's spine is then two partial views: the second
shard sees its ports paused by a device it does not monitor and cannot tell the origin.
``fabricmon correlate`` joins the shards again from what they already export, through
Prometheus' (or Thanos', VictoriaMetrics') HTTP API, with no agent-to-agent protocol:

* ``min_over_time(fabricmon_port_pfc_state[window])``: per (device, port, priority), the
  agent's own classification (1 paused by its peer, 2 stuck at the storm level: paused
  with no transmit progress and a backlog, or a watchdog event), at its lowest over the
  window, so a port counts only when it stayed so for the whole window (the persistence);
* ``fabricmon_port_info``: which ports exist (have telemetry) and their cable peers.

On the union it builds the same paused-by graph as the agent's PFC rules, with the same
code (:mod:`fabricmon.agent.detector.pausegraph`): port ``e`` paused by its peer depends on
every paused port of the peer's device except the peer itself. The sink of
the graph is where the pause starts; the origin is the pauser when it has telemetry,
else the paused port facing it. Stuck ports are the victims. Cycles of stuck ports that
do not drain into a sink are deadlocks.

Only trees and cycles that span two or more shards (Prometheus ``instance`` labels) are
reported: the shards report the others themselves. Each port's state is decided by the
agent that polls it, with its counters; what the correlator adds is only the graph across
the shard boundary. It reads state, not counters, so it has no hysteresis of its own
beyond the window, and a port whose agent is down drops out of the graph.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from aiohttp import web

from fabricmon.agent.detector.pausegraph import PausedBy, best_sinks, deadlock_cycles
from fabricmon.agent.exporter.exposition import Family, labels, render
from fabricmon.core.model import Finding

log = logging.getLogger(__name__)

PortKey = tuple[str, str]
Vector = list[tuple[dict[str, str], float]]

PAUSED, STUCK = 1.0, 2.0  # fabricmon_port_pfc_state values


class CorrelationError(Exception):
    """Prometheus could not be queried or answered something unusable."""


# --------------------------------------------------------------------------- queries
def parse_vector(url: str, query: str, payload: Any) -> Vector:
    """The samples of an instant-vector answer of ``/api/v1/query``."""
    if not isinstance(payload, dict) or payload.get("status") != "success":
        err = payload.get("error") if isinstance(payload, dict) else None
        raise CorrelationError(f"{url}: query {query!r} failed: {err or 'not a Prometheus API answer'}")
    data = payload.get("data")
    if not isinstance(data, dict) or data.get("resultType") != "vector" or not isinstance(data.get("result"), list):
        raise CorrelationError(f"{url}: query {query!r} did not return an instant vector")
    out: Vector = []
    for item in data["result"]:
        try:
            out.append(({str(k): str(v) for k, v in item["metric"].items()}, float(item["value"][1])))
        except (KeyError, IndexError, TypeError, ValueError, AttributeError) as exc:
            raise CorrelationError(f"{url}: query {query!r}: malformed sample {item!r}") from exc
    return out


async def query(session: aiohttp.ClientSession, url: str, promql: str) -> Vector:
    api = url.rstrip("/") + "/api/v1/query"
    try:
        async with session.get(api, params={"query": promql}) as resp:
            if resp.status >= 500 or resp.status in (401, 403, 404):
                raise CorrelationError(f"{api}: HTTP {resp.status} for {promql!r}")
            payload = await resp.json(content_type=None)
    except (TimeoutError, aiohttp.ClientError, json.JSONDecodeError) as exc:
        raise CorrelationError(f"{api}: {type(exc).__name__}: {exc or 'no answer'}") from exc
    return parse_vector(api, promql, payload)


async def fetch(url: str, window: str, timeout: float = 30.0) -> tuple[Vector, Vector]:
    """(PFC states at their lowest over ``window``, port info) from Prometheus at ``url``."""
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout)) as session:
        pauses = await query(session, url, f"min_over_time(fabricmon_port_pfc_state[{window}])")
        info = await query(session, url, "fabricmon_port_info")
    return pauses, info


# --------------------------------------------------------------------------- analysis
@dataclass(slots=True)
class _Fabric:
    peer: dict[PortKey, PortKey] = field(default_factory=dict)
    shard: dict[PortKey, str] = field(default_factory=dict)  # port -> instance that exports it
    # priority -> paused port -> PFC state (lowest over the window): PAUSED or STUCK
    paused: dict[int, dict[PortKey, float]] = field(default_factory=dict)


def _shard(lb: dict[str, str]) -> str:
    return lb.get("instance") or lb.get("job") or ""


def _build(pauses: Vector, info: Vector) -> _Fabric:
    fab = _Fabric()
    for lb, _ in info:
        pk = (lb.get("device", ""), lb.get("port", ""))
        if not pk[0] or not pk[1]:
            continue
        fab.shard.setdefault(pk, _shard(lb))
        if lb.get("peer_device") and lb.get("peer_port"):
            fab.peer[pk] = (lb["peer_device"], lb["peer_port"])
    for pk, pe in list(fab.peer.items()):
        fab.peer.setdefault(pe, pk)  # a cable seen from one end only is still a cable
    for lb, value in pauses:
        pk = (lb.get("device", ""), lb.get("port", ""))
        try:
            prio = int(lb.get("priority", ""))
        except ValueError:
            continue
        if not pk[0] or value != value or value < PAUSED:
            continue
        fab.shard.setdefault(pk, _shard(lb))
        fab.paused.setdefault(prio, {})[pk] = value
    return fab


def correlate(states: Vector, info: Vector, *, t: float) -> list[Finding]:
    """Cross-shard PFC storm trees and deadlocks from the shards' ``fabricmon_port_pfc_state``
    and ``fabricmon_port_info`` samples."""
    fab = _build(states, info)
    out: list[Finding] = []
    for prio in sorted(fab.paused):
        out.extend(_analyze(fab, prio, fab.paused[prio], STUCK, t))
    return out


def _analyze(fab: _Fabric, prio: int, nodes: dict[PortKey, float], storm: float, t: float) -> Iterable[Finding]:
    order = sorted(nodes)
    graph = PausedBy(order, fab.peer.get)
    stuck_graph = PausedBy(order, fab.peer.get, lambda q: nodes[q] >= storm)

    # Deadlocks: cycles of storm-level ports with no way out to a port that can drain.
    stuck = [pk for pk in order if nodes[pk] >= storm]
    in_deadlock: set[PortKey] = set()
    for comp in deadlock_cycles(stuck, lambda pk: stuck_graph.successors(pk, hairpin=True)):
        in_deadlock.update(comp)
        shards = sorted({fab.shard.get(pk, "") for pk in comp})
        if len(shards) < 2:
            continue
        names = [f"{d}:{p}" for d, p in sorted(comp)]
        for pk in sorted(comp):
            yield _finding("pfc_deadlock", pk, prio, "member", t, fab,
                           f"PFC deadlock on priority {prio} across {len(shards)} shards: {len(comp)} ports pause each other",
                           {"cycle": names, "shards": shards})
    # Storm trees: the best sink reachable from each port.
    best, _ = best_sinks(order, graph.successors, lambda pk: (nodes[pk], pk))
    trees: dict[PortKey, tuple[PortKey | None, list[PortKey]]] = {}
    for pk in sorted(nodes):
        sink = best[pk]
        if sink is None or pk in in_deadlock or nodes[pk] < storm:
            continue
        pauser = fab.peer.get(sink)
        origin, origin_peer = (pauser, sink) if pauser is not None and pauser in fab.shard else (sink, pauser)
        _, victims = trees.setdefault(origin, (origin_peer, []))
        if pk not in (origin, origin_peer):
            victims.append(pk)
    for origin, (origin_peer, victims) in sorted(trees.items()):
        ports = [origin, *victims] + ([origin_peer] if origin_peer in fab.shard else [])
        shards = sorted({fab.shard.get(pk, "") for pk in ports})
        if len(shards) < 2 or not victims:
            continue
        vnames = [f"{d}:{p}" for d, p in victims]
        ev = {"victims": len(victims), "victim_ports": vnames[:20], "shards": shards}
        if origin_peer is not None:
            ev["origin_peer"] = f"{origin_peer[0]}:{origin_peer[1]}"
        yield _finding("pfc_storm", origin, prio, "origin", t, fab,
                       f"PFC storm on priority {prio} originates at {origin[0]} {origin[1]}, "
                       f"{len(victims)} victim port(s) across {len(shards)} shards", ev)
        for v in victims:
            yield _finding("pfc_storm", v, prio, "victim", t, fab,
                           f"{v[0]} {v[1]} priority {prio} is stuck by a PFC storm from {origin[0]} {origin[1]} (another shard)",
                           {"origin": f"{origin[0]}:{origin[1]}", "shard": fab.shard.get(v, "")})


def _finding(kind: str, pk: PortKey, prio: int, role: str, t: float, fab: _Fabric, summary: str,
             evidence: dict[str, Any]) -> Finding:
    peer = fab.peer.get(pk)
    return Finding(kind=kind, severity="critical", device=pk[0], port=pk[1], priority=prio, role=role, start=t,
                   summary=summary, evidence=evidence, peer_device=peer[0] if peer else None,
                   peer_port=peer[1] if peer else None, rule="correlate")


# --------------------------------------------------------------------------- service
@dataclass(slots=True)
class Correlator:
    """Runs :func:`correlate` every ``interval`` seconds and keeps the last result."""

    url: str
    window: str = "1m"
    interval: float = 30.0
    findings: list[Finding] = field(default_factory=list)
    up: bool | None = None
    last_error: str | None = None
    last_success: float = 0.0
    duration: float = 0.0
    runs: int = 0
    errors: int = 0

    async def run_once(self) -> list[Finding]:
        t0 = time.monotonic()
        self.runs += 1
        try:
            pauses, info = await fetch(self.url, self.window)
        except CorrelationError as exc:
            self.up, self.last_error = False, str(exc)
            self.errors += 1
            log.warning("correlate: %s", exc)
            return self.findings  # the last good result stays visible, with its age
        finally:
            self.duration = time.monotonic() - t0
        self.findings = correlate(pauses, info, t=time.time())
        self.up, self.last_error, self.last_success = True, None, time.time()
        return self.findings

    async def loop(self) -> None:
        while True:
            await self.run_once()
            await asyncio.sleep(self.interval)

    def exposition(self) -> bytes:
        active = Family("fabricmon_cross_shard_finding_active", "gauge",
                        "1 for each finding that spans several shards, found by fabricmon correlate.")
        for f in self.findings:
            active.add(labels((("kind", f.kind), ("severity", f.severity), ("device", f.device), ("port", f.port or ""),
                               ("priority", "" if f.priority is None else str(f.priority)), ("role", f.role or ""))), 1)
        up = Family("fabricmon_correlation_up", "gauge", "1 when the last query of Prometheus succeeded.")
        up.add("", 1 if self.up else 0)
        last = Family("fabricmon_correlation_last_success_timestamp_seconds", "gauge",
                      "When the last correlation succeeded (Unix time; 0 before the first).")
        last.add("", self.last_success)
        dur = Family("fabricmon_correlation_duration_seconds", "gauge", "Duration of the last correlation run.")
        dur.add("", self.duration)
        runs = Family("fabricmon_correlation_runs_total", "counter", "Correlation runs.")
        runs.add("", self.runs)
        errs = Family("fabricmon_correlation_errors_total", "counter", "Correlation runs that could not query Prometheus.")
        errs.add("", self.errors)
        return render([active, up, last, dur, runs, errs])[0]


def make_app(c: Correlator) -> web.Application:
    async def metrics(_: web.Request) -> web.Response:
        return web.Response(body=c.exposition(), content_type="text/plain", charset="utf-8",
                            headers={"X-Content-Type-Options": "nosniff"})

    async def findings(_: web.Request) -> web.Response:
        return web.json_response({"up": c.up, "last_error": c.last_error, "last_success": c.last_success,
                                  "findings": [f.to_json() for f in c.findings]})

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/api/findings", findings)
    return app
