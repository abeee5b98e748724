"""A tiny fabric simulator for the rule tests: counters advance at set rates, every poll
feeds the real CounterStore, Topology and Detector (no mocks)."""

from __future__ import annotations

from typing import Any

from fabricmon.agent.detector import DetectContext, Detector, Rule
from fabricmon.agent.detector.rules import build
from fabricmon.agent.store import CounterStore
from fabricmon.core.model import DeviceInfo, Finding, Gauge, Link, Sample
from fabricmon.core.topology import Topology
from fabricmon.core.vocabulary import PriorityMap

G100 = 12.5e9  # 100 Gb/s in bytes/s
G400 = 50e9


class Fab:
    """Counters as rates (base units per second); ``poll`` advances time and runs detection."""

    def __init__(self, links: list[tuple[str, str, str, str]] = (), rules: list[Rule] | None = None,
                 config: dict[str, Any] | None = None, t0: float = 1000.0, fabric: PriorityMap | None = None,
                 analyses: dict[str, Any] | None = None) -> None:
        self.store = CounterStore(history=8)
        self.fabric = fabric or PriorityMap()  # the config's fabric: layout
        self.topo = Topology()
        if links:
            self.topo.set_links("lldp", [Link(*ln) for ln in links])
        self.det = Detector(rules if rules is not None else build(config), analyses)
        self.t = t0
        self.values: dict[tuple, float] = {}  # (device, port, counter, sub) -> accumulated value
        self.rates: dict[tuple, float] = {}
        self.kw: dict[tuple, dict[str, Any]] = {}
        self.gauges: dict[tuple, float] = {}
        self.raised: list[Finding] = []

    # ---------------------------------------------------------------- setup
    def rate(self, dev: str, port: str, counter: str, per_s: float, sub: tuple = (), **kw: Any) -> None:
        key = (dev, port, counter, sub)
        self.rates[key] = per_s
        self.values.setdefault(key, 0.0)
        if kw:
            self.kw[key] = kw

    def gauge(self, dev: str, port: str, name: str, value: float, sub: tuple = ()) -> None:
        self.gauges[(dev, port, name, sub)] = value

    def bump(self, dev: str, port: str, counter: str, by: float, sub: tuple = ()) -> None:
        key = (dev, port, counter, sub)
        self.values[key] = self.values.get(key, 0.0) + by
        self.rates.setdefault(key, 0.0)

    def set_value(self, dev: str, port: str, counter: str, value: float, sub: tuple = ()) -> None:
        self.values[(dev, port, counter, sub)] = value

    def eth_port(self, dev: str, port: str, tx_rate: float = 1e9, speed: float = G100, prio: int = 3,
                 qtx: float | None = 1e5, occupancy: float | None = 0.0) -> None:
        """A healthy RoCE port: traffic, per-priority pause counters at 0, queue counters."""
        self.rate(dev, port, "tx_bytes", tx_rate)
        self.rate(dev, port, "rx_bytes", tx_rate)
        for c in ("pfc_rx_pause_frames", "pfc_tx_pause_frames", "pfc_rx_pause_seconds", "pfc_tx_pause_seconds"):
            self.rate(dev, port, c, 0.0, (prio,))
        if qtx is not None:
            self.rate(dev, port, "queue_tx_packets", qtx, (prio,))
            self.rate(dev, port, "ecn_marked_packets", 0.0, (prio,))
            self.rate(dev, port, "queue_drops", 0.0, (prio,))
        if occupancy is not None:
            self.gauge(dev, port, "queue_occupancy_bytes", occupancy, (prio,))
        self.gauge(dev, port, "link_up", 1)
        self.gauge(dev, port, "link_speed_bytes", speed)
        self.rate(dev, port, "link_downed", 0.0)

    def ib_port(self, dev: str, port: str, tx_rate: float = 1e9, speed: float = G400, wait: float = 0.0) -> None:
        self.rate(dev, port, "tx_bytes", tx_rate, scale=4)
        self.rate(dev, port, "rx_bytes", tx_rate, scale=4)
        self.rate(dev, port, "xmit_wait", wait)
        self.rate(dev, port, "tx_discards", 0.0)
        self.rate(dev, port, "symbol_errors", 0.0)
        self.rate(dev, port, "link_downed", 0.0)
        self.rate(dev, port, "link_error_recovery", 0.0)
        self.gauge(dev, port, "link_up", 1)
        self.gauge(dev, port, "link_speed_bytes", speed)

    # ---------------------------------------------------------------- run
    def poll(self, dt: float = 1.0, devices: set[str] | None = None, n: int = 1) -> list[Finding]:
        for _ in range(n):
            self.t += dt
            for key, r in self.rates.items():
                self.values[key] += r * dt
            samples, gauges = [], []
            for (dev, port, counter, sub), v in self.values.items():
                if devices is not None and dev not in devices:
                    continue
                kw = dict(self.kw.get((dev, port, counter, sub), {}))
                scale = kw.get("scale", 1.0)
                samples.append(Sample(dev, port, counter, int(v / scale) if scale != 1.0 else round(v, 6), sub, **kw))
            for (dev, port, name, sub), v in self.gauges.items():
                if devices is None or dev in devices:
                    gauges.append(Gauge(dev, port, name, v, sub))
            updated = self.store.update(samples, self.t, gauges=gauges)
            ctx = DetectContext(self.store, self.topo, self.t, updated, {d for d, _ in updated}, fabric=self.fabric)
            before = {id(f) for f in self.det.active}
            self.det.run(ctx)
            assert not self.det.last_errors, self.det.last_errors
            self.raised.extend(f for f in self.det.active if id(f) not in before)
        return self.det.active

    def active(self, kind: str | None = None) -> dict[tuple, Finding]:
        return {(f.device, f.port, f.priority, f.role): f for f in self.det.active if kind is None or f.kind == kind}

    def kinds(self) -> set[str]:
        return {f.kind for f in self.det.active}


def two_leaf_fabric(hosts: bool = True, **kw: Any) -> Fab:
    """leaf1/leaf2 with two hosts each, both uplinked to one spine (all 100G RoCE, priority 3).
    ``hosts``: the host NICs have telemetry of their own (no per-queue counters)."""
    links = [
        ("leaf1", "Ethernet1", "h1", "eth0"), ("leaf1", "Ethernet2", "h2", "eth0"),
        ("leaf2", "Ethernet1", "h3", "eth0"), ("leaf2", "Ethernet2", "h4", "eth0"),
        ("leaf1", "Ethernet49", "spine", "Ethernet1"), ("leaf2", "Ethernet49", "spine", "Ethernet2"),
    ]
    fab = Fab(links, **kw)
    for dev, port, _, _ in links:
        fab.eth_port(dev, port)
    for port in ("Ethernet1", "Ethernet2"):
        fab.eth_port("spine", port)
    if hosts:
        for h in ("h1", "h2", "h3", "h4"):
            fab.eth_port(h, "eth0", qtx=None, occupancy=None)
        fab.store.set_devices([DeviceInfo(h, "host") for h in ("h1", "h2", "h3", "h4")], "hosts")  # as the host collector does
    return fab


def test_sim_feeds_store_with_rates():
    fab = two_leaf_fabric()
    fab.poll(n=2)
    se = fab.store.get("leaf1", "Ethernet1", "tx_bytes")
    assert se.delta == 1e9 and se.rate == 1e9
    assert fab.det.active == []


def test_fabric_layout_reaches_the_rules_through_the_fabric_analysis():
    """The config's ``fabric:`` section, as a PriorityMap, is the fabric analysis's layout in every pass."""
    from fabricmon.agent.detector.analyses.fabric import FabricAnalysis
    from fabricmon.agent.pipeline import Pipeline

    seen: list[Any] = []

    class Probe(Rule):
        name = "probe"
        kinds = ()
        needs = ("fabric",)

        def evaluate(self, ctx: DetectContext):
            seen.append(ctx.analysis(FabricAnalysis).layout)
            return ()

    layout = PriorityMap((3, 4), {3: 5}, {3: 2})
    pipe = Pipeline([], [Probe()], fabric=layout)
    pipe.detect(1000.0)
    Pipeline([], [Probe()]).detect(1000.0)
    assert seen == [layout, PriorityMap()] and seen[1].lossless == (3,)
