"""Capability scenarios of issue 27: each capability the issue names, and the PFC-watchdog
cross-check, gets recordings of its own, written from documentation before the detector is
changed. ``python -m tools.scenarios --capabilities --out tests/scenarios_capabilities``.

Every recording runs on the fabric's normal (:mod:`tools.scenarios.converged`) and injects one
documented fault; its docstring names the physics and the public source. Truth conventions are
those of :mod:`tools.scenarios.catalog`, plus:

- a port stalled alone is ``credit_deadlock`` role ``stalled``; a switch PFC watchdog that
  disagrees with its port's own counters is ``pfc_storm`` role ``watchdog`` on the watchdog's
  queue (docs/recording-format.md, fabricmon's vocabulary additions);
- loss that evidence places on a lossless class carries that class's priority; loss the
  counters cannot place (a class-less counter on a port with lossy traffic, no corroboration)
  has no truth line, so a finding there is false;
- a lasting degradation (width, speed) is one ``link_degraded`` line per end for its whole
  duration: the evaluation's coverage figure says how much of it a finding covered;
- storm victims are graded: paused most of each poll, a required victim; paused part of it,
  optional; paused a few percent, no truth line (a busy fabric's normal).
"""

from __future__ import annotations

import random
from collections.abc import Callable

from tools.scenarios.catalog import EthFabric, Flow, IbFabric, Traffic, all_to_all, window
from tools.scenarios.converged import (
    ROCE,
    QosEthFabric,
    autodetect,
    bump,
    carrier_history,
    converged_flows,
    normal_plan,
)
from tools.scenarios.physics import HOQ_LIFETIME_S, _generations
from tools.scenarios.sim import Fabric, PortRef, StepPlan, pkt_size
from tools.scenarios.writer import Scenario, Target

POLLS = 32
LEAF_HOQ_S = 4.096e-6 * 2**16  # OpenSM leaf_head_of_queue_lifetime 0x10: 0.27 s toward CAs


def _eth(seed: int, leaves: list[tuple[str, str]], spine: tuple[str, str], *, qos: bool = False,
         flows: Callable[[list[str]], list[Flow]] = converged_flows) -> tuple[Fabric, EthFabric, Traffic]:
    fab = Fabric(seed)
    eth = (QosEthFabric if qos else EthFabric)(fab, leaves, spine)
    tr = Traffic(fab, flows(eth.all_hosts()))
    fab.seed_counters()
    return fab, eth, tr


def _leaf_of(eth: EthFabric, host: str) -> str:
    return next(leaf for leaf, hosts in eth.hosts.items() if host in hosts)


def _pause(p: StepPlan, ref: PortRef, frac: float, episode_us: float | None = None, occupancy: float | None = None) -> None:
    """Hold ``ref``'s RoCE priority paused ``frac`` of the step (replacing the normal's brief
    pause), with ``episode_us``-long episodes when partial; a paused queue holds data and
    marks nothing new."""
    p.paused.setdefault(ref, {})[ROCE] = frac
    if episode_us is not None:
        p.pause_episode_us.setdefault(ref, {})[ROCE] = episode_us
    if occupancy is not None:
        p.occupancy.setdefault(ref, {})[ROCE] = occupancy
    p.ecn.get(ref, {}).pop(ROCE, None)


# ----------------------------------------------------------------------------- pause direction

def storm_switch_emitted(seed: int) -> Scenario:
    """A switch port, not a NIC, emits the storm: leaf01's uplink sends XOFF on priority 3 without
    pause, and spine01's egress toward it is stuck.

    Physics: a Broadcom SAI bug left the PFC backpressure bit of a TD2 switch stuck after its
    PFC watchdog fired, "resulting in the device sending peer devices constant PFC pause
    frames, causing congestion in the whole network" (sonic-net/sonic-mgmt#14526; pause frames
    a SONiC switch should not have sent: sonic-buildimage#17886). leaf01 (SONiC, frames only)
    keeps transmitting at its normal rate: its own egress toward the spine is not paused. The
    spine's (Cisco: pause time per priority) egress toward leaf01 is paused all the time and
    sends nothing on priority 3; its ingress buffers fill with RoCE bound for leaf01, so it
    pauses leaf02's and leaf03's uplinks (Arista) most of each poll (required victims), and
    they pause their hosts' NICs part of the time (unpolled). Lossy priority 0 still flows.

    Truth: the pauser is polled, so the origin is named where it is: leaf01's uplink (it
    sends XOFF and is not paused itself). The egress it keeps stuck, spine01's port toward
    leaf01, is a victim like the leaf uplinks behind it: a polled device is never "not
    monitored", and the direction of the pause edge comes from both ends' counters.
    """
    fab, eth, tr = _eth(seed, [("leaf01", "sonic"), ("leaf02", "arista"), ("leaf03", "arista")], ("spine01", "cisco"))
    rng = random.Random(seed)
    stuck = (eth.spine.name, eth.down["leaf01"])
    victims = [(leaf.name, eth.uplink[leaf.name]) for leaf in eth.leaves[1:]]
    s, e = 10, 24

    def plan(k: int) -> StepPlan:
        p = normal_plan(fab, tr, rng)
        if window(k, s, e):
            _pause(p, stuck, rng.uniform(0.997, 1.0), occupancy=rng.uniform(1.5e6, 2.5e6))
            for v in victims:
                _pause(p, v, rng.uniform(0.85, 0.95), episode_us=rng.uniform(2000, 8000), occupancy=rng.uniform(1e6, 2e6))
            for leaf in eth.leaves[1:]:
                for h in eth.hosts[leaf.name]:
                    _pause(p, (h, "eth0"), rng.uniform(0.2, 0.5), episode_us=rng.uniform(300, 1500))
        return p

    sc = Scenario("storm_switch_emitted", "leaf01 (SONiC) uplink stuck in backpressure sends XOFF to spine01 (Cisco) "
                  "while transmitting normally; the spine pauses leaf02/leaf03 (Arista) uplinks", fab,
                  autodetect(eth.targets()), plan, polls=POLLS, seed=seed)
    sc.add_truth("pfc_storm", "leaf01", eth.uplink["leaf01"], ROCE, "origin", s, e)
    for v in (stuck, *victims):
        sc.add_truth("pfc_storm", v[0], v[1], ROCE, "victim", s, e)
    sc.notes[s] = "leaf01 uplink: PFC backpressure stuck on priority 3 (constant XOFF to spine01)"
    sc.notes[e] = "leaf01 rebooted: backpressure cleared"
    return sc


# ----------------------------------------------------------------------------- deadlock

def pfc_deadlock_forms_mid_poll(seed: int) -> Scenario:
    """A PFC deadlock that closes during a poll interval, with feeders paused behind it.

    Physics: a transient routing loop bounces RoCE traffic leaf01 -> spine01 -> leaf02 ->
    spine01 -> leaf01 (Hu et al., "Deadlocks in Datacenter Networks: Why Do They Form, and How
    to Avoid Them", HotNets 2016): the looping traffic grows until the four egresses of the
    cycle fill one after the other. In the interval it forms, the member paused first is
    paused 95-98 % of it and the last 45-60 %; from the next poll every member is paused all the
    time and sends nothing on priority 3. The hosts feeding the loop are paused 30-60 % once it
    has formed: they are pausers' victims, not pausers (their NICs send no pause), and no
    member is a storm origin (every member is itself paused). Cumulus NVUE everywhere (pause
    frames and durations per priority, transmit per queue); no PFC watchdog configured.
    """
    fab, eth, tr = _eth(seed, [("leaf01", "cumulus"), ("leaf02", "cumulus")], ("spine01", "cumulus"))
    carrier_history([*eth.leaves, eth.spine], random.Random(seed + 1))
    rng = random.Random(seed)
    members: list[PortRef] = [("leaf01", eth.uplink["leaf01"]), ("spine01", eth.down["leaf02"]),
                              ("leaf02", eth.uplink["leaf02"]), ("spine01", eth.down["leaf01"])]
    forming = (0.97, 0.93, 0.72, 0.52)
    s, e = 10, 24

    def plan(k: int) -> StepPlan:
        p = normal_plan(fab, tr, rng)
        if window(k, s, e):
            first = k == s
            for m, f in zip(members, forming, strict=True):
                _pause(p, m, f * rng.uniform(0.99, 1.0) if first else rng.uniform(0.998, 1.0),
                       episode_us=rng.uniform(5000, 20000), occupancy=rng.uniform(1.5e6, 2.2e6))
            for h in eth.all_hosts():
                _pause(p, (h, "eth0"), rng.uniform(0.3, 0.6) * (0.4 if first else 1.0), episode_us=rng.uniform(500, 3000))
        return p

    targets = [Target(d.name, "nvue", d.name) for d in (*eth.leaves, eth.spine)]
    sc = Scenario("pfc_deadlock_forms_mid_poll", "Cumulus/NVUE: a routing-loop PFC deadlock closes mid-interval "
                  "(members paused 52-97 % in the poll it forms, 100 % after); feeders paused 30-60 %", fab, targets,
                  plan, polls=POLLS, seed=seed)
    for m in members:
        sc.add_truth("pfc_deadlock", m[0], m[1], ROCE, "member", s, e)
    sc.notes[s] = "routing loop: the cycle leaf01 -> spine01 -> leaf02 -> spine01 -> leaf01 closes during this interval"
    sc.notes[e] = "routes converged: loop gone"
    return sc


# ----------------------------------------------------------------------------- lasting degradation

def _degrade(ends: tuple[PortRef, PortRef], fab: Fabric, *, lanes: int | None = None, gbps: float | None = None) -> None:
    for ref in ends:
        port = fab.port(ref)
        if lanes is not None:
            port.speed_gbps = port.speed_gbps * lanes / port.lanes
            port.lanes = lanes
        if gbps is not None:
            port.speed_gbps = gbps


def ib_width_degraded(seed: int) -> Scenario:
    """A Quantum-2 leaf-spine cable retrains from 4x to 2x NDR and stays there.

    Physics: an InfiniBand link trains to the widest width both ends support on working lanes
    (IBTA vol. 2, link training); after a lane fails, the retrain (LinkErrorRecovery) brings it
    back up narrower. NVIDIA UFM calls this a non-optimal link ("a link between two ports that
    is configured to operate at a certain speed and width and is operating at a lower rate",
    UFM Enterprise User Manual, "Non-Optimal Links"): a state that lasts until the cable is
    fixed, here to the end of the recording. ibnetdiscover shows ``2xNDR`` on both ends; the
    link carries half its rated 400 Gb/s. Seen through ibnetdiscover + perfquery."""
    fab = Fabric(seed)
    ib = IbFabric(fab, spines=2, leaves=2, hcas=3)
    _generations(fab, {s.name: "quantum2" for s in ib.switches})
    tr = Traffic(fab, all_to_all([c.name for c in ib.cas], 0.5))
    fab.seed_counters()
    leaf = ib.leaves[0]
    up = next(p for p in sorted(leaf.ports.values(), key=lambda x: x.index) if p.peer and p.peer[0] == ib.spines[1].name)
    assert up.peer is not None
    ends = (up.ref, up.peer)
    rng = random.Random(seed)
    s = 8

    def plan(k: int) -> StepPlan:
        if k == s:
            _degrade(ends, fab, lanes=2)
        p = normal_plan(fab, tr, rng)
        if k == s:
            for ref in ends:
                bump(p, ref, "link_error_recovery", 1)
        return p

    sc = Scenario("ib_width_degraded", f"{leaf.name} port {up.name} <-> {up.peer[0]} port {up.peer[1]} retrains from "
                  "4x to 2x NDR and stays at half its rated bandwidth", fab, [Target("ib-fabric", "perfquery")], plan,
                  polls=30, seed=seed)
    for ref in ends:
        sc.add_truth("link_degraded", ref[0], ref[1], None, None, s, None)
    sc.notes[s] = "a lane fails: the link retrains at 2x"
    return sc


def ib_speed_degraded_ufm(seed: int) -> Scenario:
    """A Quantum-2 leaf-spine cable runs at HDR instead of NDR, seen through UFM.

    Physics: link speed is negotiated at training (IBTA vol. 2); a marginal cable or optic
    that fails NDR training comes up at HDR, half the rate, and UFM lists it among the
    non-optimal links ("NDR links that operate in HDR ... mode", UFM Enterprise User Manual,
    "Non-Optimal Links"). Here the cable is replaced after 14 minutes and runs NDR again.
    UFM REST ``resources/ports`` gives ``active_speed`` per port; UFM Telemetry the counters
    (GUIDs only), both polled every 30 s (the telemetry's sampling interval)."""
    fab = Fabric(seed)
    ib = IbFabric(fab, spines=2, leaves=3, hcas=2, host_prefix="dgx")
    _generations(fab, {s.name: "quantum2" for s in ib.switches})
    tr = Traffic(fab, all_to_all([c.name for c in ib.cas], 0.5))
    fab.seed_counters()
    leaf = ib.leaves[2]
    up = next(p for p in sorted(leaf.ports.values(), key=lambda x: x.index) if p.peer and p.peer[0] == ib.spines[0].name)
    assert up.peer is not None
    ends = (up.ref, up.peer)
    rng = random.Random(seed)
    s, e = 6, 34

    def plan(k: int) -> StepPlan:
        if k in (s, e):
            _degrade(ends, fab, gbps=200.0 if k == s else 400.0)
        p = normal_plan(fab, tr, rng)
        if k in (s, e):  # the link goes down and trains again (a flap within the step)
            p.flaps.add(up.ref)
        return p

    sc = Scenario("ib_speed_degraded_ufm", f"UFM REST + Telemetry: {leaf.name} port {up.name} <-> {up.peer[0]} runs "
                  "HDR instead of NDR for 14 minutes, then the cable is replaced", fab,
                  [Target("ufm", "ufm"), Target("ufm-telemetry", "ufm-telemetry")], plan, polls=40, interval=30.0, seed=seed)
    for ref in ends:
        sc.add_truth("link_degraded", ref[0], ref[1], None, None, s, e + 1)
    sc.notes[s] = "the link retrains at HDR"
    sc.notes[e] = "cable replaced: the link trains at NDR again"
    return sc


def eth_speed_downshift(seed: int) -> Scenario:
    """An 800G leaf uplink comes back from a retrain at 400G and stays there.

    Physics: an 800GBASE link over 8 lanes that loses lanes at training can come up at a lower
    speed where both ends allow it (IEEE 802.3 clause 73 auto-negotiation / link training;
    NVIDIA Spectrum ports with ``link speed auto``); IF-MIB ifHighSpeed then reports 400000
    on both ends (RFC 2863: the current bandwidth, in Mb/s). The operator's plan says 800G, and
    every other uplink of the fabric runs at 800G. Arista leaves and spine over SNMP."""
    fab, eth, tr = _eth(seed, [("leaf01", "arista"), ("leaf02", "arista"), ("leaf03", "arista")], ("spine01", "arista"),
                        flows=lambda hosts: converged_flows(hosts, roce=0.35, lossy=0.15))
    rng = random.Random(seed)
    ends = (("leaf02", eth.uplink["leaf02"]), ("spine01", eth.down["leaf02"]))
    s = 9

    def plan(k: int) -> StepPlan:
        if k == s:
            _degrade(ends, fab, gbps=400.0)
        p = normal_plan(fab, tr, rng)
        if k == s:
            p.flaps.add(ends[0])
        return p

    sc = Scenario("eth_speed_downshift", "Arista: leaf02's 800G uplink retrains at 400G and stays there", fab,
                  autodetect(eth.targets()), plan, polls=POLLS, seed=seed)
    for ref in ends:
        sc.add_truth("link_degraded", ref[0], ref[1], None, None, s, None)
    sc.notes[s] = "leaf02 uplink retrained: 400G"
    return sc


# ----------------------------------------------------------------------------- congestion

def congestion_incast_against_normal(seed: int) -> Scenario:
    """A real incast on top of a fabric whose normal is DCQCN marking 1-3 % with brief pauses.

    Physics: the whole fabric runs the converged normal (:mod:`tools.scenarios.converged`):
    that is congestion control working and is no finding. Then for two minutes six hosts send
    RoCE to gpu02 at half their line rate each, three times what its 200G port drains: DCQCN
    cannot keep that queue near Kmin (Zhu et al. 2015, section 5: an incast's queue sits above
    Kmax until the senders' rates converge), so it marks 15-35 % of the packets, holds several
    MB, and its leaf pauses the ports feeding it 3-10 % of the time. Arista (ECN marks per
    queue). Truth: congestion on the incast egress only."""
    fab, eth, tr0 = _eth(seed, [("leaf01", "arista"), ("leaf02", "arista"), ("leaf03", "arista")], ("spine01", "arista"))
    hosts = eth.all_hosts()
    dst = hosts[1]
    incast = [(h, dst, ROCE, 0.5) for h in hosts if h != dst and h not in ("gpu04", "gpu07")][:6]
    tr = Traffic(fab, [*tr0.flows, *incast])
    rng = random.Random(seed)
    root = eth.port_to(dst)
    s, e = 12, 24

    def plan(k: int) -> StepPlan:
        p = normal_plan(fab, tr, rng, lambda f: f not in incast or window(k, s, e))
        if window(k, s, e):
            p.ecn.setdefault(root, {})[ROCE] = rng.uniform(0.15, 0.35)
            p.occupancy.setdefault(root, {})[ROCE] = rng.uniform(2.5e6, 5e6)
            for src, _dst, _q, _r in incast:
                first = tr.path(src, dst)
                for hop in first[:-1]:
                    _pause(p, hop, rng.uniform(0.03, 0.10))
        return p

    sc = Scenario("congestion_incast_against_normal", f"converged Arista fabric at its DCQCN normal; a 6:1 incast into "
                  f"{dst} for two minutes", fab, autodetect(eth.targets()), plan, polls=36, seed=seed)
    sc.add_truth("congestion", root[0], root[1], ROCE, None, s, e)
    sc.notes[s] = f"incast into {dst} starts"
    sc.notes[e] = "incast ends"
    return sc


def storm_victims_frames_only(seed: int) -> Scenario:
    """A NIC storm on a fabric whose switches count pause frames only (no pause time).

    Physics: a NIC whose receive pipeline stalls sends XOFF continuously (Guo et al. 2016,
    section 4.1 "NIC PFC pause frame storm"); its leaf's egress toward it is paused all the
    time and the pause spreads upstream in grades (the project's issue 15 figures, as in
    :mod:`tools.scenarios.physics`). Cumulus leaves and a SONiC spine over SNMP expose only
    frame counts per priority: a continuously paused egress receives an XOFF refresh every half
    quanta (IEEE 802.1Qbb: a quanta is 512 bit times, 65535 quanta = 42 us at 800G), a partially
    paused one an XOFF, its refreshes and an XON per episode of hundreds of microseconds to a
    few milliseconds, and a busy healthy port an XOFF/XON pair per brief episode. Grades: the
    spine's egress to the storming leaf 88-92 % (required victim), the other leaves' uplinks
    40-70 % and the storming leaf's other hosts 30-60 % (optional), the other leaves' host ports
    3-8 % (no truth: the fabric's normal order of magnitude)."""
    fab, eth, tr = _eth(seed, [("leaf01", "cumulus"), ("leaf02", "cumulus"), ("leaf03", "cumulus")], ("spine01", "sonic"))
    hosts = eth.all_hosts()
    nic = hosts[2]
    storm_leaf = _leaf_of(eth, nic)
    origin = eth.port_to(nic)
    rng = random.Random(seed)
    s, e = 10, 24

    def plan(k: int) -> StepPlan:
        storming = window(k, s, e)
        p = normal_plan(fab, tr, rng, lambda f: not (storming and f[0] == nic))
        if storming:
            _pause(p, origin, rng.uniform(0.996, 1.0), occupancy=rng.uniform(1.5e6, 2e6))
            _pause(p, (eth.spine.name, eth.down[storm_leaf]), rng.uniform(0.88, 0.92), episode_us=rng.uniform(3000, 9000))
            for leaf in eth.leaves:
                if leaf.name != storm_leaf:
                    _pause(p, (leaf.name, eth.uplink[leaf.name]), rng.uniform(0.4, 0.7), episode_us=rng.uniform(800, 4000))
                    for h in eth.hosts[leaf.name]:
                        _pause(p, eth.port_to(h), rng.uniform(0.03, 0.08), episode_us=rng.uniform(100, 400))
            for h in eth.hosts[storm_leaf]:
                if h != nic:
                    _pause(p, (h, "eth0"), rng.uniform(0.3, 0.6), episode_us=rng.uniform(500, 3000))
        return p

    sc = Scenario("storm_victims_frames_only", f"Cumulus leaves + SONiC spine (pause frames only): NIC storm from {nic}, "
                  "victims graded by how long they are paused", fab, autodetect(eth.targets()), plan, polls=POLLS, seed=seed)
    sc.add_truth("pfc_storm", origin[0], origin[1], ROCE, "origin", s, e)
    sc.add_truth("pfc_storm", eth.spine.name, eth.down[storm_leaf], ROCE, "victim", s, e)
    for leaf in eth.leaves:
        if leaf.name != storm_leaf:
            sc.add_truth("pfc_storm", leaf.name, eth.uplink[leaf.name], ROCE, "victim", s, e, optional=True)
    sc.notes[s] = f"{nic} stalls and sends XOFF on priority 3"
    sc.notes[e] = "storm cleared"
    return sc


# ----------------------------------------------------------------------------- InfiniBand

def _stalled(p: StepPlan, port: PortRef, rng: random.Random, lifetime: float = LEAF_HOQ_S, dt: float = 10.0) -> None:
    """A port whose receiver returns no credits: it waits 97-100 % of the step, sends nothing,
    and discards the packets that reach the head of its queue and outlive the HOQ lifetime
    (IBTA vol. 1, HOQLife; OpenSM lifetimes, see LEAF_HOQ_S and physics.HOQ_LIFETIME_S)."""
    p.wait[port] = rng.uniform(0.97, 1.0)
    p.credit[port] = 0.0
    expiries = int(dt / lifetime)
    bump(p, port, "xmit_discards", sum(rng.randint(3, 40) for _ in range(expiries)))


def ib_ufm_two_sources(seed: int) -> Scenario:
    """One fabric, two sources: topology, states and link rates from UFM REST, counters from
    UFM Telemetry keyed by GUID only (the split the README recommends), with a credit loop, a
    stalled port and congestion at once.

    Physics: (1) a re-route after a failure, computed by a routing engine that is not
    deadlock-free, sends traffic leaf01 -> spine01 -> leaf02 -> spine02 -> leaf01 (a cyclic
    credit dependency, the case ibdiagnet ``-r`` reports as a credit loop); the four egresses
    of the cycle wait 80-100 % and leak a trickle through HOQ-lifetime discards on the
    switch-to-switch lifetime (physics.HOQ_LIFETIME_S). (2) dgx05's HCA stops returning credits:
    its leaf port stalls alone (:func:`_stalled`). (3) dgx02's host drains its HCA at about
    60-70 % of line rate (a slow receiver: PCIe or host memory bound) while two more senders
    offer it more than line rate, so the leaf port toward it waits 30-40 % of the time while
    sending the rest: congestion at the root of a tree
    whose feeders (the spine downlinks) wait 10-20 % (optional). Quantum-2 switches and
    ConnectX HCAs (one XmitWait tick per 8 bytes), telemetry's own 30 s sample clock."""
    fab = Fabric(seed)
    ib = IbFabric(fab, spines=2, leaves=3, hcas=2, host_prefix="dgx")
    _generations(fab, {s.name: "quantum2" for s in ib.switches})
    cas = [c.name for c in ib.cas]
    slow = cas[1]
    hot = [(src, slow, 0, 0.35) for src in (cas[3], cas[5])]  # more than the slow host drains
    tr = Traffic(fab, [*all_to_all(cas, 0.5), *hot])
    fab.seed_counters()
    rng = random.Random(seed)
    sp = {s.name: s for s in ib.spines}

    def uplink(leaf_i: int, spine: str) -> PortRef:
        leaf = ib.leaves[leaf_i]
        port = next(p for p in leaf.ports.values() if p.peer and p.peer[0] == spine)
        return port.ref

    def downlink(spine: str, leaf_i: int) -> PortRef:
        peer = fab.port(uplink(leaf_i, spine)).peer
        assert peer is not None
        return peer

    members = [uplink(0, "ib-spine01"), downlink("ib-spine01", 1), uplink(1, "ib-spine02"), downlink("ib-spine02", 0)]
    assert set(sp) == {"ib-spine01", "ib-spine02"}
    stalled = ib.port_to(ib.cas[4])
    root = ib.port_to(ib.cas[1])
    feeders = [downlink(s_name, 0) for s_name in sp]
    loop, stall, cong = (8, 30), (12, 26), (6, 20)
    dt = 30.0

    def plan(k: int) -> StepPlan:
        p = normal_plan(fab, tr, rng, lambda f: f not in hot or window(k, *cong))
        if window(k, *loop):
            for m in members:
                p.wait[m] = rng.uniform(0.80, 1.0)
                p.credit[m] = rng.uniform(0.001, 0.02)
                expiries = max(0, rng.randint(-int(dt / HOQ_LIFETIME_S), int(dt / HOQ_LIFETIME_S)))
                bump(p, m, "xmit_discards", sum(rng.randint(5, 300) for _ in range(expiries)))
        if window(k, *stall):
            _stalled(p, stalled, rng, dt=dt)
        if window(k, *cong):
            p.wait[root] = rng.uniform(0.30, 0.40)
            p.credit[root] = 1.0 - p.wait[root]
            for f in feeders:
                if f not in members:
                    p.wait[f] = max(p.wait.get(f, 0.0), rng.uniform(0.10, 0.20))
        return p

    sc = Scenario("ib_ufm_two_sources", "Quantum-2 fabric through UFM REST (topology, rates) + UFM Telemetry (counters "
                  "by GUID): a credit loop, a stalled HCA port and a slow receiver", fab,
                  [Target("ufm", "ufm"), Target("ufm-telemetry", "ufm-telemetry")], plan, polls=32, interval=dt, seed=seed)
    for m in members:
        sc.add_truth("credit_deadlock", m[0], m[1], None, "member", *loop)
        sc.add_truth("packet_loss", m[0], m[1], None, None, *loop, optional=True)
    sc.add_truth("credit_deadlock", stalled[0], stalled[1], None, "stalled", *stall)
    sc.add_truth("packet_loss", stalled[0], stalled[1], None, None, *stall)
    sc.add_truth("congestion", root[0], root[1], None, None, *cong)
    for f in feeders:
        if f not in members:
            sc.add_truth("congestion", f[0], f[1], None, None, *cong, optional=True)
    sc.notes[loop[0]] = "re-route closes a credit loop ib-leaf01 -> ib-spine01 -> ib-leaf02 -> ib-spine02 -> ib-leaf01"
    sc.notes[stall[0]] = f"{ib.cas[4].name} stops returning credits"
    sc.notes[cong[0]] = f"{ib.cas[1].name}'s host drains it at 60-70 % of line rate"
    return sc


def ib_congestion_tree_frozen_host(seed: int) -> Scenario:
    """A frozen host behind four HCAs: a congestion tree whose waits form topological cycles,
    not a credit loop.

    Physics: gpu03 hangs with its four HCAs (one per rail, each on its own leaf) still linked:
    they stop returning credits. Each leaf port toward gpu03 stalls alone: full wait, no data,
    HOQ-lifetime discards at the leaf lifetime (OpenSM ``leaf_head_of_queue_lifetime``
    0.27 s): the discards are at the roots. The all-to-all's packets for gpu03 back up behind
    them: spine downlinks toward the four leaves, leaf uplinks and the HCAs carrying gpu03's
    traffic wait 28-69 % of each poll, keep transmitting everything else, and discard nothing (switch-to-
    switch lifetime 1.07 s is never reached: the roots' discards keep the tree moving). Since
    the waits run up and down every leaf-spine cable they form cycles in the topology, but
    partial waits with data flowing, discards only at host-facing roots and stalled roots
    facing one host are a congestion tree (Gran et al., "On the relation between congestion
    control, switch arbitration and fairness", CCGrid 2011, on IB congestion trees; the
    project's issue 27, third held-back set). Quantum-2 over perfquery."""
    fab = Fabric(seed)
    ib = IbFabric(fab, spines=2, leaves=4, hcas=2)
    frozen = []
    for li, leaf in enumerate(ib.leaves):  # gpu03's four rails, one per leaf
        ca = fab.add(type(ib.cas[0])(f"gpu03 mlx5_{li}", "ib_ca", guid=0x1070FD0300F00000 + li * 0x10, lid=200 + li))
        ca.add_port("1", 1, 200.0)
        pn = 10 + li
        leaf.add_port(str(pn), pn, 200.0)
        fab.connect((leaf.name, str(pn)), (ca.name, "1"))
        ib.cas.append(ca)
        frozen.append((leaf.name, str(pn)))
    _generations(fab, {s.name: "quantum2" for s in ib.switches})
    others = [c.name for c in ib.cas if not c.name.startswith("gpu03")]
    flows = all_to_all(others, 0.5) + [(src, f"gpu03 mlx5_{i % 4}", 0, 0.15) for i, src in enumerate(others)]
    tr = Traffic(fab, flows)
    fab.seed_counters()
    rng = random.Random(seed)
    # Every hop of the traffic for gpu03 but the stalled roots: HCA egresses into their leaf,
    # leaf uplinks, spine downlinks (one virtual lane: what waits for gpu03 blocks the rest).
    tree = sorted({hop for src, dst, _q, _r in flows if dst.startswith("gpu03") for hop in tr.path(src, dst)[:-1]})
    s, e = 9, 23

    def plan(k: int) -> StepPlan:
        p = normal_plan(fab, tr, rng)
        if window(k, s, e):
            for port in frozen:
                _stalled(p, port, rng)
            for hop in tree:
                p.wait[hop] = rng.uniform(0.28, 0.69)
        return p

    sc = Scenario("ib_congestion_tree_frozen_host", "gpu03 (four HCAs, one per leaf) freezes: its edge ports stall and "
                  "discard, the spine links wait 28-69 % in cycles with no discards", fab,
                  [Target("ib-fabric", "perfquery")], plan, polls=POLLS, seed=seed)
    for port in frozen:
        sc.add_truth("credit_deadlock", port[0], port[1], None, "stalled", s, e)
        sc.add_truth("packet_loss", port[0], port[1], None, None, s, e)
    for hop in tree:
        sc.add_truth("congestion", hop[0], hop[1], None, None, s, e, optional=True)
    sc.notes[s] = "gpu03 hangs: its four HCAs stop returning credits"
    sc.notes[e] = "gpu03 rebooted"
    return sc


# ----------------------------------------------------------------------------- host-only storm

def host_nic_storm_host_only(seed: int) -> Scenario:
    """A NIC storm seen only from the hosts' own counters: no switch is polled.

    Physics: gpu02's NIC receive pipeline stalls and it sends XOFF on priority 3 continuously
    (Guo et al. 2016, section 4.1): ``tx_prio3_pause_duration`` grows by about the whole
    interval every poll while it drains almost nothing (its port's received data stays flat).
    This ConnectX has no ``tx_pause_storm_*`` counters (they need the ``pfcc_mask`` and
    ``stall_detect`` capabilities: kernel mlx5 counters.rst), so nothing on the NIC says
    "storm"; its pause and its traffic do. The other hosts' NICs are paused 30-60 % by the
    leaf behind it (optional victims). Four RoCE hosts polled with sysfs and ethtool."""
    fab, eth, tr = _eth(seed, [("leaf01", "arista"), ("leaf02", "arista")], ("spine01", "arista"),
                        flows=lambda hosts: [f for f in all_to_all(hosts, 0.6) if f[2] == ROCE])  # RoCE hosts
    hosts = ["gpu01", "gpu02", "gpu04", "gpu05"]
    nic = "gpu02"
    for i, h in enumerate(hosts):
        dev = fab.devices[h]
        dev.extras = frozenset({"no_storm_counters", "prio_stats"})
        dev.guid = 0x1070FD0300B10000 + i * 0x10
    origin = eth.port_to(nic)
    rng = random.Random(seed)
    s, e = 9, 22

    def plan(k: int) -> StepPlan:
        storming = window(k, s, e)
        p = normal_plan(fab, tr, rng, lambda f: not (storming and f[0] == nic), host_dcqcn=True)
        if storming:
            _pause(p, origin, rng.uniform(0.997, 1.0), occupancy=rng.uniform(1.5e6, 2e6))
            for h in hosts:
                if h != nic:
                    _pause(p, (h, "eth0"), rng.uniform(0.3, 0.6), episode_us=rng.uniform(500, 3000))
        return p

    sc = Scenario("host_nic_storm_host_only", f"host NICs only (no switch polled, no storm counters): {nic} sends "
                  "XOFF ~100 % of each poll and drains almost nothing", fab,
                  [Target(h, "host", h, sysfs=True) for h in hosts], plan, polls=30, seed=seed)
    sc.add_truth("pfc_storm", nic, "mlx5_0/1", ROCE, "origin", s, e)
    for h in hosts:
        if h != nic:
            sc.add_truth("pfc_storm", h, "mlx5_0/1", ROCE, "victim", s, e, optional=True)
    sc.notes[s] = f"{nic}'s receive pipeline stalls: continuous XOFF on priority 3"
    return sc


# ----------------------------------------------------------------------------- NVUE carrier

def nvue_peer_reboot(seed: int) -> Scenario:
    """A host behind a Cumulus leaf (NVUE) reboots: its link goes down for three polls.

    Physics: NVUE's link stats ``carrier-transitions`` is the kernel's carrier change count
    (inferred: the field name and the public sample; Linux sysfs-class-net ABI
    ``carrier_changes``: "number of times the link has seen a change from UP to DOWN and vice
    versa"), so the poll that sees the link down has one more transition (the down) and the
    poll that sees it up again one more (the up): one reboot, one down, two transitions in two
    different polls. The interface list shows ``oper-status`` down in between. Truth: the
    link is degraded (down) from the first poll that shows it down to the first that shows it
    up again."""
    fab, eth, tr = _eth(seed, [("leaf01", "cumulus"), ("leaf02", "cumulus")], ("spine01", "cumulus"))
    carrier_history([*eth.leaves, eth.spine], random.Random(seed + 1))
    rng = random.Random(seed)
    host = "gpu05"
    port = eth.port_to(host)
    s, e = 11, 14

    def plan(k: int) -> StepPlan:
        p = normal_plan(fab, tr, rng, lambda f: not (window(k, s, e) and host in (f[0], f[1])))
        if window(k, s, e):
            p.down.add(port)
        return p

    targets = [Target(d.name, "nvue", d.name) for d in (*eth.leaves, eth.spine)]
    sc = Scenario("nvue_peer_reboot", f"Cumulus/NVUE: {host} reboots, {port[0]} {port[1]} is down for three polls "
                  "(one carrier transition down, one up)", fab, targets, plan, polls=28, seed=seed)
    sc.add_truth("link_degraded", port[0], port[1], None, None, s, e)
    sc.notes[s] = f"{host} reboots: link down"
    sc.notes[e] = f"{host} back: link up"
    return sc


# ----------------------------------------------------------------------------- loss attribution

def loss_queue_lossless_sonic(seed: int) -> Scenario:
    """Lossless loss on a per-queue counter mapped to the lossless priority, among lossy drops.

    Physics: SONiC's sonic-snmpagent serves per-queue unicast drops (CISCO-SWITCH-QOS-MIB
    csqIfQosGroupStats counter 5, SAI_QUEUE_STAT_DROPPED_PACKETS). Every busy egress tail-drops
    best effort on queue 0 (the fabric's normal). On leaf02's port toward gpu05 an egress
    threshold left on the lossless queue (a buffer profile applied to the wrong queue) drops
    RoCE on queue 3 for 90 s: priority 3 maps to queue 3 (the identity map), PFC (IEEE
    802.1Qbb) should have made that loss impossible. Truth: that loss only."""
    fab, eth, tr = _eth(seed, [("leaf01", "sonic"), ("leaf02", "sonic")], ("spine01", "sonic"))
    rng = random.Random(seed)
    port = eth.port_to("gpu05")
    s, e = 10, 19

    def plan(k: int) -> StepPlan:
        p = normal_plan(fab, tr, rng)
        if window(k, s, e):
            n = rng.randint(40, 900)
            p.q_drops.setdefault(port, {})[ROCE] = n
            bump(p, port, "out_discards", n)
        return p

    sc = Scenario("loss_queue_lossless_sonic", "SONiC converged fabric: best-effort drops on queue 0 everywhere, lossless "
                  f"drops on queue 3 of {port[0]} {port[1]}", fab, autodetect(eth.targets()), plan, polls=30, seed=seed)
    sc.add_truth("packet_loss", port[0], port[1], ROCE, None, s, e)
    sc.notes[s] = f"{port[0]} {port[1]}: queue 3 starts dropping"
    return sc


def loss_pg_headroom_onyx(seed: int) -> Scenario:
    """Lossless loss at the lossless priority group's headroom, among lossy ingress drops.

    Physics: on Spectrum the lossless service lives in ingress priority-group buffers: after
    XOFF the PG's headroom absorbs what is still in flight on the cable (NVIDIA "Understanding
    Buffer Headroom"), and only a lossless PG has headroom. MELLANOX-QOS-MIB mlnxQosPgTable
    NoBufferDiscard on PG 3 therefore counts lossless drops (headroom too small for an 800G
    uplink's cable), while best effort overflowing the shared pool shows as SharedBufferDiscard
    on PG 0 (the fabric's normal). Truth: the PG 3 headroom drops on leaf01's uplink."""
    fab, eth, tr = _eth(seed, [("leaf01", "onyx"), ("leaf02", "onyx")], ("spine01", "onyx"))
    for d in (*eth.leaves, eth.spine):
        d.extras = frozenset({"onyx_pg"})
    rng = random.Random(seed)
    port = ("leaf01", eth.uplink["leaf01"])
    s, e = 11, 20

    def plan(k: int) -> StepPlan:
        p = normal_plan(fab, tr, rng)
        if window(k, s, e):
            p.pg_nobuf_drops[port] = {ROCE: rng.randint(20, 1500)}
            p.pg_occupancy[port] = {ROCE: rng.uniform(1.0e5, 1.6e5)}
        return p

    sc = Scenario("loss_pg_headroom_onyx", "Onyx converged fabric: PG 0 shared-buffer drops everywhere, PG 3 headroom "
                  "drops on leaf01's uplink", fab, autodetect(eth.targets()), plan, polls=30, seed=seed)
    sc.add_truth("packet_loss", port[0], port[1], ROCE, None, s, e)
    sc.notes[s] = "leaf01 uplink: PG 3 headroom overflows"
    return sc


def loss_port_all_lossless_host(seed: int) -> Scenario:
    """Class-less NIC drops, on a port whose traffic is all lossless and on one that is not.

    Physics: mlx5 ``rx_discards_phy`` counts packets the NIC's port buffer dropped, whatever
    their priority (kernel mlx5 counters.rst); PFC protects a lossless priority by pausing the
    switch before that buffer fills, so a drop on a PFC priority means the NIC's PFC failed
    (disabled or its buffer misconfigured), while a drop of best effort is that class's normal
    under host congestion. The per-priority traffic counters (en_stats.c ``rx_prio%d_bytes``)
    tell the two apart: gpu04 receives only RoCE (priority 3; ``rx_prio0_bytes`` flat), and its
    ``rx_discards_phy`` rises for 80 s: lossless loss. gpu01 receives RoCE and best effort and
    drops best effort in its buffer all along: not a finding. Neither NIC breaks drops out per
    priority."""
    def flows(hosts: list[str]) -> list[Flow]:
        return [f for f in converged_flows(hosts) if not (f[2] != ROCE and "gpu04" in (f[0], f[1]))]

    fab, eth, tr = _eth(seed, [("leaf01", "arista"), ("leaf02", "arista")], ("spine01", "arista"), flows=flows)
    hosts = ["gpu01", "gpu04"]
    for i, h in enumerate(hosts):
        dev = fab.devices[h]
        dev.extras = frozenset({"prio_stats"})
        dev.guid = 0x1070FD0300B20000 + i * 0x10
    rng = random.Random(seed)
    s, e = 10, 18

    def plan(k: int) -> StepPlan:
        p = normal_plan(fab, tr, rng, host_dcqcn=True)
        if rng.random() < 0.7:
            p.pg_nobuf_drops.setdefault(("gpu01", "eth0"), {})[0] = rng.randint(20, 600)
        if window(k, s, e):
            bump(p, ("gpu04", "eth0"), "rx_discards_phy", rng.randint(50, 2000))
        return p

    targets = [*autodetect(eth.targets()), *(Target(h, "host", h, sysfs=True) for h in hosts)]
    sc = Scenario("loss_port_all_lossless_host", "rx_discards_phy on a RoCE-only NIC (gpu04: lossless loss) and on a "
                  "converged NIC dropping best effort (gpu01: normal)", fab, targets, plan, polls=28, seed=seed)
    sc.add_truth("packet_loss", "gpu04", "mlx5_0/1", ROCE, None, s, e)
    sc.notes[s] = "gpu04's NIC buffer starts dropping RoCE (its PFC is not working)"
    return sc


def loss_corroborated_by_host(seed: int) -> Scenario:
    """A class-less drop counter corroborated by RoCE's own loss signals at the hosts.

    Physics: CUMULUS-COUNTERS-MIB clEgressQOverflowDiscards counts egress-queue overflow for
    the whole port. Every busy port overflows best effort (the fabric's normal), so the counter
    alone cannot say RoCE was lost. On leaf01's port toward gpu02 an egress buffer
    misconfiguration also drops RoCE for 70 s: RoCE RC is go-back-N, so behind each lost
    packet the receiver gets the ~20-30 packets still in flight out of sequence
    (``out_of_sequence`` at gpu02) and NAKs; the senders count the NAKs (``packet_seq_err`` at
    gpu07, the main RoCE sender to gpu02) and retransmit (mlx5 hw_counters, kernel
    counters.rst; as in catalog.roce_oos_burst_host). That corroboration on the lossless class
    itself puts the drops on priority 3. gpu05, a healthy host target behind a port with the
    same best-effort overflow, corroborates nothing. Truth: the RoCE loss at leaf01's port
    (the hosts' transport loss is optional: a detector may name it too)."""
    fab, eth, tr = _eth(seed, [("leaf01", "cumulus"), ("leaf02", "cumulus"), ("leaf03", "cumulus")], ("spine01", "cumulus"))
    hosts = ["gpu02", "gpu05", "gpu07"]
    for i, h in enumerate(hosts):
        fab.devices[h].guid = 0x1070FD0300B30000 + i * 0x10
    rng = random.Random(seed)
    port = eth.port_to("gpu02")
    s, e = 12, 19

    def plan(k: int) -> StepPlan:
        p = normal_plan(fab, tr, rng, host_dcqcn=True)
        if window(k, s, e):
            lost = rng.randint(20, 300)
            p.q_drops.setdefault(port, {})[ROCE] = lost
            bump(p, port, "out_discards", lost)
            bump(p, ("gpu02", "eth0"), "out_of_sequence", round(lost * rng.uniform(20, 30)))
            bump(p, ("gpu07", "eth0"), "packet_seq_err", round(lost * 0.7 * rng.uniform(0.9, 1.0)))
        return p

    targets = [*autodetect(eth.targets()), *(Target(h, "host", h, sysfs=True) for h in hosts)]
    sc = Scenario("loss_corroborated_by_host", "Cumulus SNMP converged fabric: class-less egress overflow everywhere; "
                  "RoCE dropped on leaf01 toward gpu02, corroborated by gpu02's out-of-sequence and gpu07's NAKs",
                  fab, targets, plan, polls=30, seed=seed)
    sc.add_truth("packet_loss", port[0], port[1], ROCE, None, s, e)
    for h in ("gpu02", "gpu07"):
        sc.add_truth("packet_loss", h, "mlx5_0/1", None, None, s, e, optional=True)
    sc.notes[s] = f"{port[0]} {port[1]}: RoCE egress overflow begins"
    return sc


# ----------------------------------------------------------------------------- PFC watchdog cross-check

# Watchdog timers as SONiC documents them (sonic-utilities ``pfcwd start``): detection 200 ms,
# restoration 200 ms; sonic-buildimage#29203 measured one storm/restore cycle every ~624 ms.
WD_CYCLE_S = 0.624


def _storm_setup(seed: int, leaves: list[tuple[str, str]], spine: tuple[str, str], nic: str, *, qos: bool = False,
                 host_target: bool = False) -> tuple[Fabric, EthFabric, Traffic, PortRef]:
    fab, eth, tr = _eth(seed, leaves, spine, qos=qos)
    if host_target:
        dev = fab.devices[nic]
        dev.extras = frozenset({"prio_stats"})
        dev.guid = 0x1070FD0300B40000
    return fab, eth, tr, eth.port_to(nic)


def wd_cycling_hidden_rx(seed: int) -> Scenario:
    """A PFC watchdog that cycles storm/restore through a storm that never stops
    (sonic-buildimage#29203).

    Physics, as the issue documents it: with the watchdog in drop mode, detecting a storm
    disables PFC on the priority; the ASIC then stops counting received PFC frames, the
    restoration check sees no new PFC frames and restores after 200 ms, PFC is enabled again,
    the storm is detected again: "170 storm/restore cycles in 20 minutes, ~624 ms per cycle,
    against a storm that never stopped". Per 10 s poll: ~16 detections and restorations; the
    port honours and counts pause only in the operational phases (40-55 % of the time), drops
    the queue's packets in the stormed phases, and transmits nothing on priority 3 either way.
    The storming NIC (gpu02, a host target) shows its own pause sent for the whole interval.
    Modelled on Cisco NX-OS (CISCO-PFC-EXT-MIB watchdog table and pause time): the mechanism is
    SONiC-on-Broadcom's, its transfer to this MIB inferred. Truth: the storm's origin, and the
    watchdog (its cycling disagrees with a storm the NIC's and the port's counters show)."""
    nic = "gpu02"
    fab, eth, tr, origin = _storm_setup(seed, [("leaf01", "cisco"), ("leaf02", "cisco")], ("spine01", "cisco"), nic,
                                        host_target=True)
    rng = random.Random(seed)
    s, e = 9, 23
    dt = 10.0

    def plan(k: int) -> StepPlan:
        storming = window(k, s, e)
        p = normal_plan(fab, tr, rng, lambda f: not (storming and f[0] == nic))
        if storming:
            heeded = rng.uniform(0.40, 0.55)
            n = round(dt / (WD_CYCLE_S * rng.uniform(0.95, 1.05)))
            stormed = rng.random() > heeded
            _pause(p, origin, heeded, episode_us=WD_CYCLE_S * heeded * 1e6, occupancy=rng.uniform(1e6, 2e6))
            p.unheeded.setdefault(origin, {})[ROCE] = 1.0 - heeded
            p.cap.setdefault(origin, {})[ROCE] = 0.0
            load = p.load.get(origin, {}).get(ROCE, 0.0)
            drops = round(fab.port(origin).bytes_per_s * dt * (1 - heeded) * load / pkt_size(ROCE))
            p.watchdog[origin] = {ROCE: (n, n - (1 if stormed else 0), drops, stormed)}
        return p

    targets = [*autodetect(eth.targets()), Target(nic, "host", nic, sysfs=True)]
    sc = Scenario("wd_cycling_hidden_rx", f"Cisco: NIC storm from {nic}; leaf01's watchdog cycles storm/restore ~16 times "
                  "a poll (PFC RX not counted while stormed, sonic-buildimage#29203)", fab, targets, plan, polls=30, seed=seed)
    sc.add_truth("pfc_storm", origin[0], origin[1], ROCE, "origin", s, e, peer_device=nic, peer_port="mlx5_0/1")
    sc.add_truth("pfc_storm", origin[0], origin[1], ROCE, "watchdog", s, e)
    sc.notes[s] = f"{nic} stalls and sends XOFF continuously; leaf01's watchdog starts cycling"
    return sc


def wd_spurious_cycling(seed: int) -> Scenario:
    """A PFC watchdog that keeps detecting storms its port's counters do not show.

    Physics: watchdogs have declared storms that were not there (SONiC's detection declared
    storms on flapping ports until it moved from quanta to microsecond pause counters,
    sonic-swss#1586; the OR-logic false storms fixed by sonic-swss PR #3036, fabric-reference.md
    section 3). On leaf01 (Arista, action notify-only so nothing is dropped) the watchdog of
    queue 3 toward gpu02 counts 5-12 stuck and recovered events a poll for two and a half
    minutes, while the port is paused only briefly (its normal), transmits its RoCE and
    receives no more pause frames than its neighbours. Truth: the watchdog only."""
    fab, eth, tr = _eth(seed, [("leaf01", "arista"), ("leaf02", "arista")], ("spine01", "arista"))
    rng = random.Random(seed)
    port = eth.port_to("gpu02")
    s, e = 10, 25

    def plan(k: int) -> StepPlan:
        p = normal_plan(fab, tr, rng)
        if window(k, s, e):
            n = rng.randint(5, 12)
            p.watchdog[port] = {ROCE: (n, n, 0, False)}
        return p

    sc = Scenario("wd_spurious_cycling", "Arista: leaf01's PFC watchdog on queue 3 toward gpu02 reports 5-12 stuck/"
                  "recovered events a poll while the port's own counters show its normal", fab, autodetect(eth.targets()),
                  plan, polls=32, seed=seed)
    sc.add_truth("pfc_storm", port[0], port[1], ROCE, "watchdog", s, e)
    sc.notes[s] = "leaf01 watchdog starts reporting storms"
    return sc


def wd_counters_frozen(seed: int) -> Scenario:
    """A PFC watchdog that shuts the queue through a real storm while its counters never move
    (sonic-buildimage#19067: "PFCWD counters are not incrementing although pfc storms is
    detected and restored").

    Physics: gpu05's NIC storms; leaf02's egress toward it is paused all the time and sends
    nothing on priority 3. The watchdog acts: CISCO-PFC-EXT-MIB cpfcWatchdogIfQueueState reads
    shutdown(2) while the storm lasts and active(1) after, but its shutdown, restore and drop
    counters stay where they were. Cisco NX-OS (the mechanism is SONiC's; its transfer to this
    MIB inferred). Truth: the storm's origin, and the watchdog (its counters contradict its
    own state and the port's pause counters)."""
    nic = "gpu05"
    fab, eth, tr, origin = _storm_setup(seed, [("leaf01", "cisco"), ("leaf02", "cisco")], ("spine01", "cisco"), nic)
    rng = random.Random(seed)
    s, e = 10, 22

    def plan(k: int) -> StepPlan:
        storming = window(k, s, e)
        p = normal_plan(fab, tr, rng, lambda f: not (storming and f[0] == nic))
        if storming:
            _pause(p, origin, rng.uniform(0.996, 1.0), occupancy=rng.uniform(1e6, 2e6))
            p.watchdog[origin] = {ROCE: (0, 0, 0, True)}
        return p

    sc = Scenario("wd_counters_frozen", f"Cisco: NIC storm from {nic}; leaf02's watchdog holds the queue shut but its "
                  "counters never move (sonic-buildimage#19067)", fab, autodetect(eth.targets()), plan, polls=30, seed=seed)
    sc.add_truth("pfc_storm", origin[0], origin[1], ROCE, "origin", s, e)
    sc.add_truth("pfc_storm", origin[0], origin[1], ROCE, "watchdog", s, e)
    sc.notes[s] = f"{nic} storms; the watchdog shuts queue 3, its counters stay flat"
    return sc


def wd_stale_state(seed: int) -> Scenario:
    """A PFC watchdog stuck in storm state after an XOFF storm turns into an XON storm
    (sonic-swss#4581: "PFCWD remains in 'stormed' state after XOFF storm becomes XON storm").

    Physics: gpu03's NIC sends XOFF continuously for a minute: leaf01's egress toward it is
    paused, the watchdog (Cumulus NVUE ``qos pfc-watchdog``, enabled) goes to DEADLOCK and its
    deadlock count rises by one. Then the NIC sends XON frames at the same rate for 80 s:
    nothing pauses the port any more (its pause time stays flat) but every XON counts as a
    received PFC frame, so a restoration check that counts PFC frames never fires: the
    watchdog stays DEADLOCK and keeps dropping the queue (no priority-3 transmit) until the
    frames stop. Truth: the storm's origin while XOFF lasts, the watchdog while its state is
    stale."""
    nic = "gpu03"
    fab, eth, tr, origin = _storm_setup(seed, [("leaf01", "cumulus"), ("leaf02", "cumulus")], ("spine01", "cumulus"), nic,
                                        qos=True)
    carrier_history([*eth.leaves, eth.spine], random.Random(seed + 1))
    rng = random.Random(seed)
    s, m, e = 9, 15, 23
    refresh_frames = 10.0 / (65535 * 512 / (fab.port(origin).speed_gbps * 1e9) / 2)  # XOFF every half quanta, per 10 s

    def plan(k: int) -> StepPlan:
        storming = window(k, s, e)
        p = normal_plan(fab, tr, rng, lambda f: not (storming and f[0] == nic))
        if window(k, s, m):
            _pause(p, origin, rng.uniform(0.996, 1.0), occupancy=rng.uniform(1e6, 2e6))
            p.watchdog[origin] = {ROCE: (1 if k == s else 0, 0, 0, True)}
        elif window(k, m, e):
            p.paused.get(origin, {}).pop(ROCE, None)
            p.xon_frames.setdefault(origin, {})[ROCE] = round(refresh_frames * rng.uniform(0.98, 1.02))
            p.cap.setdefault(origin, {})[ROCE] = 0.0
            p.watchdog[origin] = {ROCE: (0, 0, 0, True)}
        elif k == e:
            p.watchdog[origin] = {ROCE: (0, 1, 0, False)}
        return p

    targets = [Target(d.name, "nvue", d.name) for d in (*eth.leaves, eth.spine)]
    sc = Scenario("wd_stale_state", f"Cumulus/NVUE: XOFF storm from {nic}, then XON frames at the same rate; leaf01's "
                  "watchdog stays DEADLOCK through the XON phase (sonic-swss#4581)", fab, targets, plan, polls=30, seed=seed)
    sc.add_truth("pfc_storm", origin[0], origin[1], ROCE, "origin", s, m)
    sc.add_truth("pfc_storm", origin[0], origin[1], ROCE, "watchdog", m, e)
    sc.notes[s] = f"{nic} sends XOFF continuously"
    sc.notes[m] = f"{nic} sends XON at the same rate instead"
    sc.notes[e] = f"{nic} stops; the watchdog restores"
    return sc


def wd_silent_through_storm(seed: int) -> Scenario:
    """A PFC watchdog that stays silent through a storm its port's counters show.

    Physics: gpu07's NIC storms for two minutes; leaf03's egress toward it is paused all the
    time, holds its queue and sends nothing on priority 3, and the spine's egress toward leaf03
    is paused 88-92 % (a required victim). The watchdog is configured on (NVUE ``qos
    pfc-watchdog`` state enabled; Cumulus detects after 3 polls of 100 ms, fabric-reference.md
    section 3) yet its status stays OK and its deadlock count flat: a watchdog that misses a
    storm, as on Broadcom TH6 where "the other ports stay operational for the whole duration
    of the storm, even though PFC frames are arriving on them continuously"
    (sonic-buildimage#29221; its transfer to Cumulus inferred). Truth: the storm (origin and
    victim) and the watchdog."""
    nic = "gpu07"
    fab, eth, tr, origin = _storm_setup(seed, [("leaf01", "cumulus"), ("leaf02", "cumulus"), ("leaf03", "cumulus")],
                                        ("spine01", "cumulus"), nic, qos=True)
    carrier_history([*eth.leaves, eth.spine], random.Random(seed + 1))
    rng = random.Random(seed)
    victim = (eth.spine.name, eth.down[_leaf_of(eth, nic)])
    s, e = 10, 22

    def plan(k: int) -> StepPlan:
        storming = window(k, s, e)
        p = normal_plan(fab, tr, rng, lambda f: not (storming and f[0] == nic))
        if storming:
            _pause(p, origin, rng.uniform(0.996, 1.0), occupancy=rng.uniform(1e6, 2e6))
            _pause(p, victim, rng.uniform(0.88, 0.92), episode_us=rng.uniform(3000, 9000), occupancy=rng.uniform(1e6, 2e6))
        return p

    targets = [Target(d.name, "nvue", d.name) for d in (*eth.leaves, eth.spine)]
    sc = Scenario("wd_silent_through_storm", f"Cumulus/NVUE: NIC storm from {nic}; leaf03's enabled watchdog stays OK "
                  "throughout", fab, targets, plan, polls=30, seed=seed)
    sc.add_truth("pfc_storm", origin[0], origin[1], ROCE, "origin", s, e)
    sc.add_truth("pfc_storm", victim[0], victim[1], ROCE, "victim", s, e)
    sc.add_truth("pfc_storm", origin[0], origin[1], ROCE, "watchdog", s, e)
    sc.notes[s] = f"{nic} storms; leaf03's watchdog does not react"
    return sc


CAPABILITIES: dict[str, Callable[[int], Scenario]] = {
    "storm_switch_emitted": storm_switch_emitted,
    "pfc_deadlock_forms_mid_poll": pfc_deadlock_forms_mid_poll,
    "ib_width_degraded": ib_width_degraded,
    "ib_speed_degraded_ufm": ib_speed_degraded_ufm,
    "eth_speed_downshift": eth_speed_downshift,
    "congestion_incast_against_normal": congestion_incast_against_normal,
    "storm_victims_frames_only": storm_victims_frames_only,
    "ib_ufm_two_sources": ib_ufm_two_sources,
    "ib_congestion_tree_frozen_host": ib_congestion_tree_frozen_host,
    "host_nic_storm_host_only": host_nic_storm_host_only,
    "nvue_peer_reboot": nvue_peer_reboot,
    "loss_queue_lossless_sonic": loss_queue_lossless_sonic,
    "loss_pg_headroom_onyx": loss_pg_headroom_onyx,
    "loss_port_all_lossless_host": loss_port_all_lossless_host,
    "loss_corroborated_by_host": loss_corroborated_by_host,
    "wd_cycling_hidden_rx": wd_cycling_hidden_rx,
    "wd_spurious_cycling": wd_spurious_cycling,
    "wd_counters_frozen": wd_counters_frozen,
    "wd_stale_state": wd_stale_state,
    "wd_silent_through_storm": wd_silent_through_storm,
}
