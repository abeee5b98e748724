"""The scenario corpus: small fabrics with traffic and injected faults, and their ground truth.

Conventions for truth lines (docs: recording-format.md, finding vocabulary):

- **PFC storm origin** is the *switch port facing the storming NIC* (its egress is the one the
  NIC keeps paused), priority 3, role ``origin``. When the NIC is itself a ``host`` target,
  the truth line also carries ``peer_device``/``peer_port`` naming the NIC, and
  :mod:`fabricmon.agent.evaluate` accepts an origin finding on either end of that cable.
- **Victims** are the switch egress ports the storm pauses transitively (hop by hop upstream
  along the flows that cross the stuck egress), role ``victim``.
- **Deadlock / credit loop members** are the egress ports of the cycle, role ``member``.
- A stalled InfiniBand port outside any cycle is ``credit_deadlock`` with role ``stalled`` (a
  fabricmon addition to the vocabulary, docs/recording-format.md); its HOQ discards are also
  ``packet_loss``, as are the XmitDiscards on credit-loop members.
- ``congestion`` from ECN marks is reported on the bottleneck egress, priority 3, role null.
- Ethernet priorities are per traffic class (TC n = priority n; RoCE on 3).
- Counter resets, Counter32 wraps and target outages carry no truth: any finding is false.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from tools.scenarios.render import SYS_DESCR, SYS_OID
from tools.scenarios.sim import Device, Fabric, PortRef, StepPlan, pkt_size, propagate_pause
from tools.scenarios.writer import T0, Scenario, Target

HOST_GBPS = 200.0
UPLINK_GBPS = 800.0
IB_GBPS = 200.0  # 4x HDR

PORT_NAMES: dict[str, Callable[[int], tuple[str, int]]] = {
    "arista": lambda n: (f"Ethernet{n}", n),
    "cisco": lambda n: (f"Ethernet1/{n}", 436207616 + (n - 1) * 4096),
    "onyx": lambda n: (f"Eth1/{n}", n),
    "cumulus": lambda n: (f"swp{n}", n + 3),
    "sonic": lambda n: (f"Ethernet{4 * (n - 1)}", n),
    "ieee8021-pfc": lambda n: (f"ethernet1/1/{n}", n),
}


# ------------------------------------------------------------------------------- fabrics

class EthFabric:
    """2 leaves (or more) + 1 spine, ``hosts`` hosts per leaf; hosts gpu01.. in leaf order."""

    def __init__(self, fab: Fabric, leaves: list[tuple[str, str]], spine: tuple[str, str], hosts: int = 3,
                 host_offset: int = 0) -> None:
        self.fab = fab
        self.spine = self._switch(*spine)
        self.leaves = [self._switch(n, p) for n, p in leaves]
        self.hosts: dict[str, list[str]] = {}
        self.uplink: dict[str, str] = {}
        self.down: dict[str, str] = {}  # spine port toward each leaf
        h = host_offset
        for li, leaf in enumerate(self.leaves):
            names = []
            for j in range(hosts):
                h += 1
                host = fab.add(Device(f"gpu{h:02d}", "host"))
                host.add_port("eth0", 1, HOST_GBPS)
                pname, idx = PORT_NAMES[leaf.profile](j + 1)
                leaf.add_port(pname, idx, HOST_GBPS)
                fab.connect((leaf.name, pname), (host.name, "eth0"))
                names.append(host.name)
            self.hosts[leaf.name] = names
            up, uidx = PORT_NAMES[leaf.profile](hosts + 1)
            leaf.add_port(up, uidx, UPLINK_GBPS)
            sp, sidx = PORT_NAMES[self.spine.profile](li + 1)
            self.spine.add_port(sp, sidx, UPLINK_GBPS)
            fab.connect((leaf.name, up), (self.spine.name, sp))
            self.uplink[leaf.name] = up
            self.down[leaf.name] = sp

    def _switch(self, name: str, profile: str) -> Device:
        boot = T0 - self.fab.rng.uniform(5, 90) * 86400
        return self.fab.add(Device(name, "eth_switch", profile=profile, sys_oid=SYS_OID[profile],
                                   sys_descr=SYS_DESCR[profile], boot_t=boot))

    def targets(self) -> list[Target]:
        return [Target(d.name, "snmp", d.name, {"profile": d.profile}) for d in [*self.leaves, self.spine]]

    def port_to(self, host: str) -> PortRef:
        peer = self.fab.port((host, "eth0")).peer
        assert peer is not None
        return peer

    def all_hosts(self) -> list[str]:
        return [h for hs in self.hosts.values() for h in hs]


class IbFabric:
    """InfiniBand: a two-level fat tree or a ring of switches, HCAs named ``<host> mlx5_0``."""

    def __init__(self, fab: Fabric, *, spines: int = 2, leaves: int = 2, hcas: int = 2, ring: int = 0,
                 host_prefix: str = "node") -> None:
        self.fab = fab
        self.switches: list[Device] = []
        self.cas: list[Device] = []
        self._sw_guid = 0xB8599F0300FC0000 + fab.rng.randrange(1, 0xFF) * 0x100
        self._ca_guid = 0x1070FD0300A00000 + fab.rng.randrange(1, 0xFF) * 0x100
        self._lid = 1
        if ring:
            sw = [self._switch(f"ib-ring{i + 1:02d}") for i in range(ring)]
            for s in sw:
                s.add_port("1", 1, IB_GBPS)  # toward the next switch
                s.add_port("2", 2, IB_GBPS)  # from the previous one
            for i, s in enumerate(sw):
                self.fab.connect((s.name, "1"), (sw[(i + 1) % ring].name, "2"))
            self.leaves = sw
            self.spines: list[Device] = []
            for s in sw:
                self._hcas(s, hcas, host_prefix, first_port=10)
        else:
            self.spines = [self._switch(f"ib-spine{i + 1:02d}") for i in range(spines)]
            self.leaves = [self._switch(f"ib-leaf{i + 1:02d}") for i in range(leaves)]
            for li, leaf in enumerate(self.leaves):
                self._hcas(leaf, hcas, host_prefix, first_port=1)
                for si, spine in enumerate(self.spines):
                    lp, sp = str(hcas + 1 + si), str(li + 1)
                    leaf.add_port(lp, int(lp), IB_GBPS)
                    spine.add_port(sp, int(sp), IB_GBPS)
                    self.fab.connect((leaf.name, lp), (spine.name, sp))

    def _switch(self, name: str) -> Device:
        d = self.fab.add(Device(name, "ib_switch", guid=self._sw_guid + len(self.switches) * 0x40, lid=self._lid))
        self._lid += 1
        self.switches.append(d)
        return d

    def _hcas(self, leaf: Device, n: int, prefix: str, first_port: int) -> None:
        for _ in range(n):
            k = len(self.cas) + 1
            ca = self.fab.add(Device(f"{prefix}{k:02d} mlx5_0", "ib_ca", guid=self._ca_guid + k * 0x10, lid=100 + k))
            ca.add_port("1", 1, IB_GBPS)
            pn = first_port + len([p for p in leaf.ports.values() if int(p.name) >= first_port])
            leaf.add_port(str(pn), pn, IB_GBPS)
            self.fab.connect((leaf.name, str(pn)), (ca.name, "1"))
            self.cas.append(ca)

    def port_to(self, ca: Device) -> PortRef:
        peer = ca.ports["1"].peer
        assert peer is not None
        return peer


# ------------------------------------------------------------------------------- traffic

Flow = tuple[str, str, int, float]  # src device, dst device, priority, rate (fraction of the source's line rate)


class Traffic:
    """Flows over fixed routes -> per-egress load, with DCQCN-like rate control at bottlenecks."""

    def __init__(self, fab: Fabric, flows: list[Flow]) -> None:
        self.fab = fab
        self.flows = flows
        self.paths = {(s, d): fab.route(s, d) for s, d, _, _ in flows}

    def path(self, src: str, dst: str) -> list[PortRef]:
        return self.paths[(src, dst)]

    def plan(self, rng: random.Random, active: Callable[[Flow], bool] = lambda f: True) -> tuple[StepPlan, set[PortRef]]:
        """The step's loads plus benign side effects of load (brief pauses, a few ECN marks,
        small XmitWait); returns the plan and the set of congested (overloaded) egresses."""
        flows = [f for f in self.flows if active(f)]
        jitter = {f: rng.uniform(0.9, 1.05) for f in flows}

        def raw_loads(scale: dict[Flow, float]) -> dict[PortRef, dict[int, float]]:
            out: dict[PortRef, dict[int, float]] = {}
            for f in flows:
                src, dst, prio, rate = f
                src_bps = self.fab.devices[src].ports[self.paths[(src, dst)][0][1]].speed_gbps
                for e in self.paths[(src, dst)]:
                    e_bps = self.fab.port(e).speed_gbps
                    d = out.setdefault(e, {})
                    d[prio] = d.get(prio, 0.0) + rate * jitter[f] * scale[f] * src_bps / e_bps
            return out

        scale = dict.fromkeys(flows, 1.0)
        raw = raw_loads(scale)
        congested = {e for e, d in raw.items() if sum(d.values()) > 1.0}
        for f in flows:
            for e in self.paths[(f[0], f[1])]:
                if e in congested:
                    scale[f] = min(scale[f], 0.985 / sum(raw[e].values()))
        load = raw_loads(scale)
        congested = {e for e in congested if sum(load[e].values()) >= 0.95}
        plan = StepPlan(load=load)
        for e, d in load.items():
            dev = self.fab.devices[e[0]]
            u = sum(d.values())
            if dev.kind in ("ib_switch", "ib_ca"):
                if u > 0.5:
                    plan.wait[e] = rng.uniform(0.0005, 0.002)
                continue
            if e in congested:
                plan.ecn.setdefault(e, {})[3] = rng.uniform(0.15, 0.25)
                plan.occupancy.setdefault(e, {})[3] = rng.uniform(2.5e6, 4e6)
            elif u > 0.6:
                plan.ecn.setdefault(e, {})[3] = rng.uniform(0.0003, 0.002)
                plan.occupancy.setdefault(e, {})[3] = rng.uniform(1e4, 8e4)
                plan.paused.setdefault(e, {})[3] = rng.uniform(0.0005, 0.004)
        # Upstream of a bottleneck: brief pauses only (ECN keeps the queue under XOFF most of the time).
        for f in flows:
            path = self.paths[(f[0], f[1])]
            for i, e in enumerate(path):
                if e in congested and i > 0:
                    up = path[i - 1]
                    plan.paused.setdefault(up, {})[3] = max(plan.paused.get(up, {}).get(3, 0.0), rng.uniform(0.005, 0.015))
        return plan, congested


def all_to_all(hosts: list[str], rate: float, prio: int = 3) -> list[Flow]:
    """Each host sends to the host ``len/2`` positions away (a ring shift that crosses the spine)."""
    n = len(hosts)
    return [(h, hosts[(i + n // 2) % n], prio, rate) for i, h in enumerate(hosts)] + \
           [(h, hosts[(i + 1) % n], 0, rate * 0.1) for i, h in enumerate(hosts)]


def _merge(plan: StepPlan, attr: str, ref: PortRef, prio: int, value: float) -> None:
    getattr(plan, attr).setdefault(ref, {})[prio] = value


def storm_tree(fab: Fabric, traffic: Traffic, origin: PortRef, frac: float) -> tuple[dict[PortRef, float], list[PortRef]]:
    """Paused egresses of a storm seeded at ``origin`` and the victims a monitor can see."""
    paused = propagate_pause(traffic.paths.values(), {origin: frac})
    victims = sorted(e for e in paused if e != origin and fab.devices[e[0]].kind == "eth_switch")
    return paused, victims


def window(k: int, start: int, end: int | None) -> bool:
    return start <= k < (end if end is not None else 10**9)


# ------------------------------------------------------------------------------- scenarios

def _new(seed: int) -> Fabric:
    return Fabric(seed)


def benign_heavy_load(seed: int) -> Scenario:
    fab = _new(seed)
    eth = EthFabric(fab, [("leaf01", "arista"), ("leaf02", "arista")], ("spine01", "cisco"))
    ib = IbFabric(fab)
    flows = all_to_all(eth.all_hosts(), 0.8) + all_to_all([c.name for c in ib.cas], 0.75)
    tr = Traffic(fab, flows)
    fab.seed_counters()
    rng = random.Random(seed)
    sc = Scenario("benign_heavy_load", "benign: 2 Arista leaves + Cisco spine and an HDR fat tree at 75-85% load, "
                  "ECN marks and brief pauses only", fab, [*eth.targets(), Target("ib-fabric", "perfquery")],
                  lambda k: tr.plan(rng)[0], polls=30, seed=seed)
    return sc


def incast_congestion(seed: int) -> Scenario:
    fab = _new(seed)
    eth = EthFabric(fab, [("leaf01", "arista"), ("leaf02", "arista")], ("spine01", "arista"))
    hosts = eth.all_hosts()
    victim = hosts[0]
    base = all_to_all(hosts, 0.4)
    incast = [(h, victim, 3, 0.6) for h in hosts[1:]]
    tr = Traffic(fab, base + incast)
    fab.seed_counters()
    rng = random.Random(seed)
    s, e = 8, 22
    sc = Scenario("incast_congestion", f"5:1 incast into {victim} (RoCE, DCQCN): ECN marks on its leaf port",
                  fab, eth.targets(), lambda k: tr.plan(rng, lambda f: f not in incast or window(k, s, e))[0],
                  polls=30, seed=seed)
    leaf, port = eth.port_to(victim)
    sc.add_truth("congestion", leaf, port, 3, None, s, e)
    sc.notes[s] = f"incast starts: 5 senders to {victim}"
    return sc


def nic_storm_plan(tr: Traffic, rng: random.Random, nic: str, paused: dict[PortRef, float], s: int, e: int) -> Callable[[int], StepPlan]:
    """The plan of a NIC pause storm in intervals ``s..e-1``: the NIC stops sending and keeps its
    switch port paused, every egress of the storm tree (``paused``) holds its queue full on
    priority 3 with no ECN, and the NIC counts pause-storm events."""

    def plan(k: int) -> StepPlan:
        storming = window(k, s, e)
        p, _ = tr.plan(rng, lambda f: not (storming and f[0] == nic))
        if storming:
            for ref, frac in paused.items():
                _merge(p, "paused", ref, 3, frac)
                _merge(p, "occupancy", ref, 3, rng.uniform(1.2e6, 1.6e6))
                p.ecn.get(ref, {}).pop(3, None)
            p.bump[(nic, "eth0")] = {"tx_pause_storm_warning": rng.randint(2, 4), "tx_pause_storm_error": rng.randint(1, 3)}
        return p

    return plan


def _nic_storm(name: str, profile: str, seed: int, host_target: bool, spine_profile: str | None = None) -> Scenario:
    fab = _new(seed)
    eth = EthFabric(fab, [("leaf01", profile), ("leaf02", profile)], ("spine01", spine_profile or profile))
    hosts = eth.all_hosts()
    nic = hosts[2]  # third host on leaf01
    flows = [*all_to_all(hosts, 0.45), *[(h, nic, 3, 0.06) for h in hosts if h != nic]]
    tr = Traffic(fab, flows)
    fab.seed_counters()
    origin = eth.port_to(nic)
    paused, victims = storm_tree(fab, tr, origin, 0.998)
    rng = random.Random(seed)
    s, e = 10, 24
    plan = nic_storm_plan(tr, rng, nic, paused, s, e)
    targets = eth.targets()
    extra = {}
    if host_target:
        targets.append(Target(nic, "host", nic))
        extra = {"peer_device": nic, "peer_port": "eth0"}
    desc = f"NIC pause storm from {nic} behind leaf01 ({profile}), propagating upstream; " + \
           ("the NIC is a host target" if host_target else "switch counters only")
    sc = Scenario(name, desc, fab, targets, plan, polls=32, seed=seed)
    sc.add_truth("pfc_storm", origin[0], origin[1], 3, "origin", s, e, **extra)
    for v in victims:
        sc.add_truth("pfc_storm", v[0], v[1], 3, "victim", s, e)
    sc.notes[s] = f"storm injected: {nic} stalls and sends XOFF on priority 3 continuously"
    sc.notes[e] = "storm cleared"
    return sc


def nic_pause_storm_arista(seed: int) -> Scenario:
    return _nic_storm("nic_pause_storm_arista", "arista", seed, host_target=True)


def nic_pause_storm_onyx(seed: int) -> Scenario:
    return _nic_storm("nic_pause_storm_onyx", "onyx", seed, host_target=False)


def nic_pause_storm_sonic(seed: int) -> Scenario:
    return _nic_storm("nic_pause_storm_sonic", "sonic", seed, host_target=False, spine_profile="cisco")


def switch_storm_watchdog(seed: int) -> Scenario:
    """Storm on a Cisco leaf whose PFC watchdog shuts the queue: device-confirmed, no spreading."""
    fab = _new(seed)
    eth = EthFabric(fab, [("leaf01", "cisco"), ("leaf02", "cisco")], ("spine01", "cisco"))
    hosts = eth.all_hosts()
    nic = hosts[1]
    tr = Traffic(fab, [*all_to_all(hosts, 0.45), *[(h, nic, 3, 0.06) for h in hosts if h != nic]])
    fab.seed_counters()
    origin = eth.port_to(nic)
    rng = random.Random(seed)
    s, e = 9, 21

    def plan(k: int) -> StepPlan:
        p, _ = tr.plan(rng, lambda f: not (window(k, s, e) and f[0] == nic))
        if window(k, s, e):
            n = rng.randint(3, 6)
            _merge(p, "paused", origin, 3, 0.998)
            p.watchdog[origin] = {3: (n, n - 1 if k == s else n, rng.randint(150_000, 250_000), True)}
        elif k == e:
            p.watchdog[origin] = {3: (0, 1, 0, False)}
        return p

    sc = Scenario("switch_storm_watchdog", f"storm from {nic}: Cisco PFC watchdog on leaf01 shuts and restores "
                  "queue 3 repeatedly (drops instead of spreading)", fab, eth.targets(), plan, polls=30, seed=seed)
    sc.add_truth("pfc_storm", origin[0], origin[1], 3, "origin", s, e)
    sc.notes[s] = f"storm injected at {nic}; leaf01 watchdog in drop mode"
    return sc


def pfc_deadlock(seed: int) -> Scenario:
    """A transient routing loop makes leaf01 <-> spine01 <-> leaf02 bounce RoCE traffic: a
    cyclic buffer dependency over four egresses, all fully paused, nothing moves.

    Onyx leaves (pause durations, per-TC counters, queue depth) and an Arista spine (pause
    frames with per-queue TX): every member's "no progress on priority 3" is measurable. A
    fabric that exports only pause frames and port-level TX (Cumulus or SONiC SNMP) cannot
    show it while other priorities keep the ports busy, so a deadlock there is not provable
    from counters alone."""
    fab = _new(seed)
    eth = EthFabric(fab, [("leaf01", "onyx"), ("leaf02", "onyx")], ("spine01", "arista"))
    hosts = eth.all_hosts()
    tr = Traffic(fab, all_to_all(hosts, 0.6))
    fab.seed_counters()
    members: list[PortRef] = [
        ("spine01", eth.down["leaf01"]), ("leaf01", eth.uplink["leaf01"]),
        ("spine01", eth.down["leaf02"]), ("leaf02", eth.uplink["leaf02"]),
    ]
    paused = propagate_pause(tr.paths.values(), dict.fromkeys(members, 1.0))
    rng = random.Random(seed)
    s, e = 10, 23

    def plan(k: int) -> StepPlan:
        p, _ = tr.plan(rng)
        if window(k, s, e):
            for ref, frac in paused.items():
                _merge(p, "paused", ref, 3, frac)
                _merge(p, "occupancy", ref, 3, rng.uniform(1.5e6, 2e6))
                p.ecn.get(ref, {}).pop(3, None)
        return p

    sc = Scenario("pfc_deadlock", "Onyx leaves + Arista spine: routing loop creates a 4-egress PFC deadlock on priority 3",
                  fab, eth.targets(), plan, polls=32, seed=seed)
    for m in members:
        sc.add_truth("pfc_deadlock", m[0], m[1], 3, "member", s, e)
    sc.notes[s] = "transient routing loop: RoCE traffic bounces leaf01 -> spine01 -> leaf02 -> spine01 -> leaf01"
    sc.notes[e] = "routes converged: loop gone, buffers drain"
    return sc


def ib_credit_loop(seed: int) -> Scenario:
    fab = _new(seed)
    ib = IbFabric(fab, ring=4, hcas=1)
    cas = [c.name for c in ib.cas]
    tr = Traffic(fab, [(c, cas[(i + 1) % 4], 0, 0.5) for i, c in enumerate(cas)] +
                 [(c, cas[(i + 2) % 4], 0, 0.2) for i, c in enumerate(cas)])
    fab.seed_counters()
    members = [(s.name, "1") for s in ib.leaves]
    rng = random.Random(seed)
    s, e = 10, None

    def plan(k: int) -> StepPlan:
        p, _ = tr.plan(rng)
        if window(k, s, e):
            for m in members:
                p.wait[m] = 1.0
                p.bump[m] = {"xmit_discards": rng.randint(300, 500)}
        return p

    sc = Scenario("ib_credit_loop", "ring of 4 HDR switches: credit loop, every ring egress stalled (HOQ discards)",
                  fab, [Target("ib-fabric", "perfquery")], plan, polls=28, seed=seed)
    for m in members:
        sc.add_truth("credit_deadlock", m[0], m[1], None, "member", s, e)
        sc.add_truth("packet_loss", m[0], m[1], None, None, s, e)
    sc.notes[s] = "credit loop forms around the ring"
    return sc


def ib_stalled_port(seed: int) -> Scenario:
    fab = _new(seed)
    ib = IbFabric(fab, spines=2, leaves=2, hcas=2)
    cas = [c.name for c in ib.cas]
    tr = Traffic(fab, all_to_all(cas, 0.7))
    fab.seed_counters()
    stuck_ca = ib.cas[1]
    port = ib.port_to(stuck_ca)
    rng = random.Random(seed)
    s, e = 8, 20

    def plan(k: int) -> StepPlan:
        p, _ = tr.plan(rng)
        if window(k, s, e):
            p.wait[port] = 1.0
            p.bump[port] = {"xmit_discards": rng.randint(250, 400)}
        return p

    sc = Scenario("ib_stalled_port", f"HCA {stuck_ca.name} stops returning credits: its leaf port stalls (HOQ discards)",
                  fab, [Target("ib-fabric", "perfquery")], plan, polls=30, seed=seed)
    sc.add_truth("credit_deadlock", port[0], port[1], None, "stalled", s, e)
    sc.add_truth("packet_loss", port[0], port[1], None, None, s, e)
    sc.notes[s] = f"{stuck_ca.name} stalls"
    return sc


def _lossless_drops(name: str, profile: str, seed: int) -> Scenario:
    fab = _new(seed)
    eth = EthFabric(fab, [("leaf01", profile), ("leaf02", profile)], ("spine01", profile))
    hosts = eth.all_hosts()
    tr = Traffic(fab, all_to_all(hosts, 0.7))
    fab.seed_counters()
    port = eth.port_to(hosts[4])
    rng = random.Random(seed)
    s, e = 10, 18

    def plan(k: int) -> StepPlan:
        p, _ = tr.plan(rng)
        if window(k, s, e):
            _merge(p, "nobuf_drops", port, 3, rng.randint(40, 900))
        return p

    sc = Scenario(name, f"{profile}: PFC headroom misconfigured on {port[0]} {port[1]}: no-buffer drops on lossless TC3",
                  fab, eth.targets(), plan, polls=28, seed=seed)
    sc.add_truth("packet_loss", port[0], port[1], 3, None, s, e)
    return sc


def lossless_drops_onyx(seed: int) -> Scenario:
    return _lossless_drops("lossless_drops_onyx", "onyx", seed)


def lossless_drops_arista(seed: int) -> Scenario:
    return _lossless_drops("lossless_drops_arista", "arista", seed)


def wjh_buffer_drops_nvue(seed: int) -> Scenario:
    """Cumulus leaves read over NVUE REST (QoS counters with pause durations, WJH), a Cumulus
    spine over SNMP (frames only; its LLDP gives the topology)."""
    fab = _new(seed)
    eth = EthFabric(fab, [("leaf01", "cumulus"), ("leaf02", "cumulus")], ("spine01", "cumulus"))
    hosts = eth.all_hosts()
    tr = Traffic(fab, all_to_all(hosts, 0.65))
    fab.seed_counters()
    port = eth.port_to(hosts[4])
    rng = random.Random(seed)
    s, e = 9, 17

    def plan(k: int) -> StepPlan:
        p, _ = tr.plan(rng)
        if window(k, s, e):
            _merge(p, "nobuf_drops", port, 3, rng.randint(30, 600))
        return p

    targets = [Target(leaf.name, "nvue", leaf.name) for leaf in eth.leaves]
    targets.append(Target(eth.spine.name, "snmp", eth.spine.name, {"profile": eth.spine.profile}))
    sc = Scenario("wjh_buffer_drops_nvue", f"Cumulus/NVUE: shared-buffer misconfiguration on {port[0]}: tail drops "
                  f"(WJH 503) on lossless TC3 toward {hosts[4]}", fab, targets, plan, polls=28, seed=seed)
    sc.add_truth("packet_loss", port[0], port[1], 3, None, s, e)
    sc.notes[s] = f"{port[0]} {port[1]}: WJH buffer drops (tail drop) on TC3 begin"
    return sc


def counter_reset(seed: int) -> Scenario:
    fab = _new(seed)
    eth = EthFabric(fab, [("leaf01", "arista"), ("leaf02", "arista")], ("spine01", "arista"))
    ib = IbFabric(fab)
    tr = Traffic(fab, all_to_all(eth.all_hosts(), 0.6) + all_to_all([c.name for c in ib.cas], 0.6))
    fab.seed_counters()
    rng = random.Random(seed)
    r_eth, r_ib = 12, 18
    leaf02 = fab.devices["leaf02"]

    def plan(k: int) -> StepPlan:
        p, _ = tr.plan(rng)
        if k == r_eth:
            p.resets.add("leaf02")
            leaf02.boot_t = T0 + (k - 1) * 10.0 + 2.0
        if k == r_ib:
            p.resets.add("ib-leaf02")
        return p

    sc = Scenario("counter_reset", "leaf02's SNMP agent restarts with counters cleared (sysUpTime restarts); "
                  "ib-leaf02's counters are reset with perfquery -R", fab,
                  [*eth.targets(), Target("ib-fabric", "perfquery")], plan, polls=30, seed=seed)
    sc.outages["leaf02"] = {r_eth: "timeout after 5.0 s"}
    sc.notes[r_eth] = "leaf02: clear counters + snmpd restart"
    sc.notes[r_ib] = "perfquery -R on every port of ib-leaf02"
    return sc


def counter32_wrap(seed: int) -> Scenario:
    fab = _new(seed)
    eth = EthFabric(fab, [("leaf01", "ieee8021-pfc"), ("leaf02", "ieee8021-pfc")], ("spine01", "ieee8021-pfc"))
    tr = Traffic(fab, all_to_all(eth.all_hosts(), 0.8))
    fab.seed_counters()
    rng = random.Random(seed)
    targets = eth.targets()
    for tg in targets:
        for p in fab.devices[tg.device].ports.values():
            tx = sum(s.tx_pause_frames for s in p.prio)
            rx = sum(s.rx_pause_frames for s in p.prio)
            tg.counter32_offsets[f"pfc_requests:{p.name}"] = 2**32 - tx - rng.randint(300, 3_000)
            tg.counter32_offsets[f"pfc_indications:{p.name}"] = 2**32 - rx - rng.randint(300, 3_000)
    sc = Scenario("counter32_wrap", "IEEE8021-PFC Counter32 pause counters wrap through 2^32 under benign load",
                  fab, targets, lambda k: tr.plan(rng)[0], polls=30, seed=seed)
    return sc


def target_outage(seed: int) -> Scenario:
    fab = _new(seed)
    eth = EthFabric(fab, [("leaf01", "cisco"), ("leaf02", "cisco")], ("spine01", "cisco"))
    ib = IbFabric(fab)
    tr = Traffic(fab, all_to_all(eth.all_hosts(), 0.6) + all_to_all([c.name for c in ib.cas], 0.6))
    fab.seed_counters()
    rng = random.Random(seed)
    sc = Scenario("target_outage", "leaf02 does not answer SNMP for 3 polls; the perfquery target fails for 2",
                  fab, [*eth.targets(), Target("ib-fabric", "perfquery")], lambda k: tr.plan(rng)[0], polls=30, seed=seed)
    sc.outages["leaf02"] = dict.fromkeys(range(12, 15), "timeout after 5.0 s")
    sc.outages["ib-fabric"] = dict.fromkeys(range(20, 22), "perfquery: timeout after 5.0 s")
    return sc


def link_flap_ib(seed: int) -> Scenario:
    fab = _new(seed)
    ib = IbFabric(fab)
    tr = Traffic(fab, all_to_all([c.name for c in ib.cas], 0.6))
    fab.seed_counters()
    leaf = ib.leaves[0]
    lp = next(p for p in leaf.ports.values() if p.peer and fab.devices[p.peer[0]].kind == "ib_switch")
    assert lp.peer is not None
    rng = random.Random(seed)
    s = 12

    def plan(k: int) -> StepPlan:
        p, _ = tr.plan(rng)
        if k == s:
            p.flaps.add(lp.ref)
        return p

    sc = Scenario("link_flap_ib", f"the cable {leaf.name} port {lp.name} <-> {lp.peer[0]} port {lp.peer[1]} flaps once",
                  fab, [Target("ib-fabric", "perfquery")], plan, polls=28, seed=seed)
    for ref in (lp.ref, lp.peer):
        sc.add_truth("link_degraded", ref[0], ref[1], None, None, s, s + 1)
    return sc


def link_flap_eth(seed: int) -> Scenario:
    fab = _new(seed)
    eth = EthFabric(fab, [("leaf01", "sonic"), ("leaf02", "sonic")], ("spine01", "sonic"))
    tr = Traffic(fab, all_to_all(eth.all_hosts(), 0.5))
    fab.seed_counters()
    up = ("leaf01", eth.uplink["leaf01"])
    down = ("spine01", eth.down["leaf01"])
    rng = random.Random(seed)
    s = 14

    def plan(k: int) -> StepPlan:
        p, _ = tr.plan(rng)
        if k == s:
            p.down.add(up)
        return p

    sc = Scenario("link_flap_eth", "SONiC leaf01 uplink is down at one poll, then back", fab, eth.targets(), plan,
                  polls=28, seed=seed)
    for ref in (up, down):
        sc.add_truth("link_degraded", ref[0], ref[1], None, None, s, s + 1)
    return sc


def ber_creep_ib(seed: int) -> Scenario:
    fab = _new(seed)
    ib = IbFabric(fab)
    tr = Traffic(fab, all_to_all([c.name for c in ib.cas], 0.6))
    fab.seed_counters()
    spine = ib.spines[0]
    rx = spine.ports["1"]  # receives from ib-leaf01: its symbol error counter climbs
    rng = random.Random(seed)
    s = 10

    def plan(k: int) -> StepPlan:
        p, _ = tr.plan(rng)
        if k >= s:
            n = min(5000, int(3 * 1.6 ** (k - s)) + rng.randint(0, 2))
            p.bump[rx.ref] = {"symbol_errors": n}
        return p

    sc = Scenario("ber_creep_ib", f"a degrading cable: symbol errors on {spine.name} port 1 grow from ~3 per poll",
                  fab, [Target("ib-fabric", "perfquery")], plan, polls=30, seed=seed)
    sc.add_truth("link_degraded", spine.name, "1", None, None, s, None)
    return sc


def roce_oos_burst_host(seed: int) -> Scenario:
    """Silent loss seen only by a host NIC: leaf01's forwarding pipeline drops ~0.004 % of the
    frames to and from gpu02 for 6 polls (a table parity error: no switch counter sees it).

    RoCE RC is go-back-N: behind each lost data packet the responder receives the ~20-30
    packets still in flight (one RTT at 200 Gb/s) out of sequence (``out_of_sequence``, ~1e-3
    of the received packets) and NAKs once; as requester the host counts the NAKs for its own
    lost packets (``packet_seq_err``) and, when a tail packet or the NAK itself is lost, the
    ack timer expires (``local_ack_timeout_err``, a few % of the losses). gpu05 is a healthy
    host target on the other leaf. Host targets render the full sysfs walk, so every counter
    is on ``mlx5_0/1`` and the loss ratio per received packet is measurable."""
    fab = _new(seed)
    eth = EthFabric(fab, [("leaf01", "arista"), ("leaf02", "arista")], ("spine01", "cisco"))
    hosts = eth.all_hosts()
    sick, healthy = hosts[1], hosts[4]
    tr = Traffic(fab, all_to_all(hosts, 0.6))
    fab.seed_counters()
    for i, h in enumerate((sick, healthy)):
        fab.devices[h].guid = 0x1070FD0300C00000 + fab.rng.randrange(1, 0xFF) * 0x100 + i * 0x10
    to_host, from_host = eth.port_to(sick), (sick, "eth0")
    rng = random.Random(seed)
    s, e = 12, 18

    def pkts(p: StepPlan, ref: PortRef, dt: float = 10.0) -> float:
        port = fab.port(ref)
        return sum(min(u, 1.0) * port.bytes_per_s * dt / pkt_size(q) for q, u in p.load.get(ref, {}).items())

    def plan(k: int) -> StepPlan:
        p, _ = tr.plan(rng)
        if window(k, s, e):
            oos_ratio, in_flight, tail = rng.uniform(0.8e-3, 1.3e-3), rng.uniform(20, 30), rng.uniform(0.02, 0.05)
            lost_tx = pkts(p, from_host) * oos_ratio / in_flight  # same drop rate in both directions
            p.bump[from_host] = {"out_of_sequence": round(pkts(p, to_host) * oos_ratio),
                                 "packet_seq_err": round(lost_tx * (1 - tail)), "local_ack_timeout_err": round(lost_tx * tail)}
        return p

    targets = [*eth.targets(), *(Target(h, "host", h, sysfs=True) for h in (sick, healthy))]
    sc = Scenario("roce_oos_burst_host", f"silent drops in leaf01 toward and from {sick}: a burst of out-of-sequence "
                  f"packets, NAKs and ack timeouts on its NIC only ({healthy} is a healthy host target)",
                  fab, targets, plan, polls=30, seed=seed)
    sc.add_truth("packet_loss", sick, "mlx5_0/1", None, None, s, e)
    sc.notes[s] = f"leaf01 starts dropping ~0.004 % of the frames to and from {sick} silently"
    sc.notes[e] = "drops stop"
    return sc


def demo(seed: int) -> Scenario:
    """A small mixed fabric with real faults, for ``fabricmon run`` with no config."""
    fab = _new(seed)
    eth = EthFabric(fab, [("leaf01", "arista"), ("leaf02", "onyx")], ("spine01", "cisco"))
    ib = IbFabric(fab, spines=2, leaves=2, hcas=2)
    hosts = eth.all_hosts()
    incast_dst, nic = hosts[0], hosts[4]
    incast = [(h, incast_dst, 3, 0.6) for h in hosts[1:]]
    storm_feed = [(h, nic, 3, 0.06) for h in hosts if h not in (nic, incast_dst)]
    cas = [c.name for c in ib.cas]
    tr = Traffic(fab, [*all_to_all(hosts, 0.35), *incast, *storm_feed, *all_to_all(cas, 0.7)])
    fab.seed_counters()
    origin = eth.port_to(nic)
    paused, victims = storm_tree(fab, Traffic(fab, [*all_to_all(hosts, 0.35), *storm_feed]), origin, 0.998)
    stalled = ib.port_to(ib.cas[3])
    flap = next(p for p in ib.leaves[1].ports.values() if p.peer and fab.devices[p.peer[0]].kind == "ib_switch")
    assert flap.peer is not None
    rng = random.Random(seed)
    inc, storm, stall, flap_k = (6, 18), (24, 38), (30, 44), 50

    def plan(k: int) -> StepPlan:
        storming = window(k, *storm)
        p, _ = tr.plan(rng, lambda f: (f not in incast or window(k, *inc)) and not (storming and f[0] == nic))
        if storming:
            for ref, frac in paused.items():
                _merge(p, "paused", ref, 3, frac)
                _merge(p, "occupancy", ref, 3, rng.uniform(1.2e6, 1.6e6))
                p.ecn.get(ref, {}).pop(3, None)
            p.bump[(nic, "eth0")] = {"tx_pause_storm_warning": rng.randint(2, 4), "tx_pause_storm_error": rng.randint(1, 3)}
        if window(k, *stall):
            p.wait[stalled] = 1.0
            p.bump[stalled] = {"xmit_discards": rng.randint(250, 400)}
        if k == flap_k:
            p.flaps.add(flap.ref)
        return p

    targets = [*eth.targets(), Target(nic, "host", nic), Target("ib-fabric", "perfquery")]
    sc = Scenario("demo", "demo: Arista + Onyx leaves, Cisco spine, 6 GPU hosts; HDR fat tree with 4 HCAs. "
                  "Incast on leaf01, NIC pause storm from gpu05, a stalled HCA port and a link flap on InfiniBand",
                  fab, targets, plan, polls=60, seed=seed)
    leaf, port = eth.port_to(incast_dst)
    sc.add_truth("congestion", leaf, port, 3, None, *inc)
    sc.add_truth("pfc_storm", origin[0], origin[1], 3, "origin", *storm, peer_device=nic, peer_port="eth0")
    for v in victims:
        sc.add_truth("pfc_storm", v[0], v[1], 3, "victim", *storm)
    sc.add_truth("credit_deadlock", stalled[0], stalled[1], None, "stalled", *stall)
    sc.add_truth("packet_loss", stalled[0], stalled[1], None, None, *stall)
    for ref in (flap.ref, flap.peer):
        sc.add_truth("link_degraded", ref[0], ref[1], None, None, flap_k, flap_k + 1)
    sc.notes[inc[0]] = f"incast into {incast_dst} starts"
    sc.notes[storm[0]] = f"{nic} starts a PFC pause storm"
    sc.notes[stall[0]] = f"{ib.cas[3].name} stops returning credits"
    sc.notes[flap_k] = f"link {flap.device} {flap.name} flaps"
    return sc


SCENARIOS: dict[str, Callable[[int], Scenario]] = {
    "benign_heavy_load": benign_heavy_load,
    "incast_congestion": incast_congestion,
    "nic_pause_storm_arista": nic_pause_storm_arista,
    "nic_pause_storm_onyx": nic_pause_storm_onyx,
    "nic_pause_storm_sonic": nic_pause_storm_sonic,
    "switch_storm_watchdog": switch_storm_watchdog,
    "pfc_deadlock": pfc_deadlock,
    "ib_credit_loop": ib_credit_loop,
    "ib_stalled_port": ib_stalled_port,
    "lossless_drops_onyx": lossless_drops_onyx,
    "lossless_drops_arista": lossless_drops_arista,
    "wjh_buffer_drops_nvue": wjh_buffer_drops_nvue,
    "counter_reset": counter_reset,
    "counter32_wrap": counter32_wrap,
    "target_outage": target_outage,
    "link_flap_ib": link_flap_ib,
    "link_flap_eth": link_flap_eth,
    "ber_creep_ib": ber_creep_ib,
    "roce_oos_burst_host": roce_oos_burst_host,  # appended last: the seeds of the others stay put
}
