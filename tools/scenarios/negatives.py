"""Hard negatives: healthy converged fabrics at high load, on every vendor profile the simulator
renders, with everything a healthy fabric does that a careless detector takes for a fault.

``python -m tools.scenarios --negatives --out tests/scenarios_negatives`` writes them. They
carry **no truth lines**: every finding on them is false (issue 27: the floor is zero).

Each recording runs the fabric's normal (:mod:`tools.scenarios.converged`: DCQCN marking 1-3 %
of the RoCE packets with short queues, brief low-duty pauses, best-effort tail drops in every
counter shape the device exposes, InfiniBand credit waits) and adds what the device and the
agent do to counters in the field:

- **warm reboot** (:func:`warm_reboot`): the control plane restarts while the data plane keeps
  forwarding (SONiC "Warm Reboot" design, sonic-net/SONiC doc/warm-reboot; Cumulus Linux warm
  boot, ``nv action reboot system mode warm``): links stay up, the management agent does not
  answer for a poll, its clock (sysUpTime) restarts and its counters restart from zero
  (inferred: the counter tables are rebuilt);
- **counter clear**: ``perfquery -R`` / UFM "reset counters" on InfiniBand, a driver reload on
  a host (the mlx5 counters restart);
- **32-bit wraps**: Counter32 columns (IEEE8021-PFC requests/indications, IF-MIB
  ifInDiscards/ifOutDiscards: RFC 2863) placed a few thousand below 2^32, and a sysUpTime
  that wraps (TimeTicks, hundredths of a second: 2^32 of them is 497.1 days, RFC 2578);
- **irregular polling** (``Scenario.jitter``: each interval 10 +/- 3 s) with a **missed
  poll** (``Scenario.skipped``: no line at all) and a failed one (a timeout);
- the saturating 32-bit PortXmitWait of an old-firmware Switch-IB (IBA PortCounters saturate:
  rdma-core PR #695, fabric-reference.md section 1.1).
"""

from __future__ import annotations

import random
from collections.abc import Callable

from tools.scenarios.catalog import EthFabric, IbFabric, Traffic, all_to_all
from tools.scenarios.converged import QosEthFabric, autodetect, carrier_history, converged_flows, normal_plan
from tools.scenarios.physics import GEN_GBPS, _generations
from tools.scenarios.sim import Device, Fabric, StepPlan
from tools.scenarios.writer import Scenario, Target, poll_times

POLLS = 36  # six minutes at 10 s, the span of the healthy-fabric measurement
TICKS_PER_S = 100  # sysUpTime is TimeTicks: hundredths of a second


def _fabric(seed: int, profile: str, *, qos: bool = False, extras: frozenset[str] = frozenset()) -> tuple[Fabric, EthFabric, Traffic]:
    """Three leaves of three hosts and a spine, all ``profile``, carrying the converged load."""
    fab = Fabric(seed)
    cls = QosEthFabric if qos else EthFabric
    eth = cls(fab, [(f"leaf{i + 1:02d}", profile) for i in range(3)], ("spine01", profile))
    for d in (*eth.leaves, eth.spine):
        d.extras = extras
    tr = Traffic(fab, converged_flows(eth.all_hosts()))
    fab.seed_counters()
    return fab, eth, tr


def warm_reboot(sc: Scenario, dev: Device, k: int, clock: bool = True) -> None:
    """``dev``'s control plane restarts during interval ``k`` (module docstring): its agent
    does not answer poll ``k``, counters restart from zero, and (``clock``) its sysUpTime
    counts from the restart, 3 s after poll ``k-1``. Links stay up."""
    inner = sc.plan
    boot = poll_times(sc)[k - 1] + 3.0

    def plan(i: int) -> StepPlan:
        p = inner(i)
        if i == k:
            p.resets.add(dev.name)
            if clock:
                dev.boot_t = boot
        return p

    sc.plan = plan
    sc.outages.setdefault(dev.name, {})[k] = "timeout after 5.0 s"
    sc.notes[k] = f"{dev.name}: warm reboot (control plane restarts, data plane forwards, counters restart)"


def near_wrap(target: Target, fab: Fabric, columns: tuple[str, ...], rng: random.Random, margin: tuple[int, int]) -> None:
    """Place ``columns`` (render_snmp offset names) of every port of the target's device a
    random ``margin`` below 2^32, so they wrap during the recording."""
    for port in fab.devices[target.device].ports.values():
        for col in columns:
            key = {"if_out_discards": "out_discards", "if_in_discards": "in_discards"}.get(col)
            now = port.c[key] if key else sum(
                s.tx_pause_frames if col == "pfc_requests" else s.rx_pause_frames for s in port.prio)
            target.counter32_offsets[f"{col}:{port.name}"] = 2**32 - now - rng.randint(*margin)


def _scenario(name: str, description: str, fab: Fabric, targets: list[Target], plan: Callable[[int], StepPlan],
              seed: int, **kw: object) -> Scenario:
    return Scenario(name, description, fab, targets, plan, polls=kw.pop("polls", POLLS), seed=seed, **kw)  # type: ignore[arg-type]


# ----------------------------------------------------------------------------- Ethernet, SNMP

def neg_arista_converged(seed: int) -> Scenario:
    """Arista leaves and spine: lossy drops per egress queue (ARISTA-QUEUE-MIB egress
    PktsDropped), per ingress queue (the VOQ table, Jericho-class buffering at ingress) and in
    IF-MIB; ECN marks per queue (ARISTA-QOS-MIB aristaEcnQueuePktsMarked); pause per priority
    (ARISTA-PFC-MIB). leaf02 warm-reboots; polling is irregular and spine01 misses a poll."""
    fab, eth, tr = _fabric(seed, "arista", extras=frozenset({"arista_ingress"}))
    rng = random.Random(seed)
    sc = _scenario("neg_arista_converged", "healthy converged Arista fabric at high load: DCQCN marking, brief pauses, "
                   "lossy drops per egress and ingress queue; a warm reboot, irregular polling, a missed poll",
                   fab, autodetect(eth.targets()), lambda k: normal_plan(fab, tr, rng), seed, jitter=3.0)
    sc.skipped["spine01"] = {22}
    warm_reboot(sc, eth.leaves[1], 14)
    return sc


def neg_cisco_converged(seed: int) -> Scenario:
    """Cisco NX-OS leaves and spine (CISCO-PFC-EXT-MIB: pause frames and pause time per
    priority, the PFC watchdog table quiet). The MIB has no per-queue drop counter, so lossy
    drops show only in IF-MIB ifOutDiscards / ifInDiscards (Counter32), placed to wrap on
    leaf02. leaf01 has been up 497 days: its sysUpTime (TimeTicks) wraps through 2^32 during
    the recording without a reboot. spine01 times out once."""
    fab, eth, tr = _fabric(seed, "cisco")
    rng = random.Random(seed)
    targets = autodetect(eth.targets())
    near_wrap(targets[1], fab, ("if_out_discards", "if_in_discards"), rng, (500, 20_000))
    sc = _scenario("neg_cisco_converged", "healthy converged Cisco fabric at high load; IF-MIB discards wrap through 2^32 "
                   "on leaf02, leaf01's sysUpTime wraps after 497 days, spine01 times out once",
                   fab, targets, lambda k: normal_plan(fab, tr, rng), seed)
    sc.outages["spine01"] = {20: "timeout after 5.0 s"}
    eth.leaves[0].boot_t = poll_times(sc)[12] + 4.0 - 2**32 / TICKS_PER_S  # wraps 4 s after poll 12
    sc.notes[13] = "leaf01 sysUpTime wraps through 2^32 hundredths of a second (497.1 days up)"
    return sc


def neg_sonic_converged(seed: int) -> Scenario:
    """SONiC leaves and spine through sonic-snmpagent: pause frames per priority (the
    per-interface row counts priority 3 only, the agent's known bug), lossy drops per unicast
    queue (CISCO-SWITCH-QOS-MIB csqIfQosGroupStats, counter 5) and in IF-MIB. spine01
    warm-reboots; polling is irregular."""
    fab, eth, tr = _fabric(seed, "sonic")
    rng = random.Random(seed)
    sc = _scenario("neg_sonic_converged", "healthy converged SONiC fabric at high load: lossy drops per queue; spine01 "
                   "warm-reboots, irregular polling", fab, autodetect(eth.targets()), lambda k: normal_plan(fab, tr, rng),
                   seed, jitter=2.5)
    warm_reboot(sc, eth.spine, 16)
    return sc


def neg_onyx_converged(seed: int) -> Scenario:
    """Onyx leaves and spine (MELLANOX-QOS-MIB): lossy tail drops as per-TC no-buffer discards on
    TC 0 (how Spectrum tail-drops), ingress drops per priority group (PG 0 shared-buffer
    discards), pause time per priority (ms), IF-MIB discards placed to wrap on leaf01; leaf03
    misses a poll."""
    fab, eth, tr = _fabric(seed, "onyx", extras=frozenset({"onyx_pg"}))
    rng = random.Random(seed)
    targets = autodetect(eth.targets())
    near_wrap(targets[0], fab, ("if_out_discards", "if_in_discards"), rng, (500, 20_000))
    sc = _scenario("neg_onyx_converged", "healthy converged Onyx fabric at high load: TC 0 no-buffer (tail) drops, PG 0 "
                   "shared-buffer drops, IF-MIB discards wrap; a missed poll", fab, targets,
                   lambda k: normal_plan(fab, tr, rng), seed)
    sc.skipped["leaf03"] = {19}
    return sc


def neg_cumulus_converged(seed: int) -> Scenario:
    """Cumulus leaves and spine over SNMP (CUMULUS-COUNTERS-MIB): pause frames per priority
    without durations, and lossy drops only in counters that name no class:
    clEgressQOverflowDiscards and clBufferOverflowDiscards (the whole port) and IF-MIB. This is
    the converged fabric of issue 27's first held-back set, where about a third of the traffic
    is best effort and its tail drops are normal every poll. leaf02 warm-reboots; polling is
    irregular and leaf01 misses a poll."""
    fab, eth, tr = _fabric(seed, "cumulus")
    rng = random.Random(seed)
    sc = _scenario("neg_cumulus_converged", "healthy converged Cumulus (SNMP) fabric at high load: best-effort drops in "
                   "class-less egress-queue and buffer-overflow counters; warm reboot, irregular polling, a missed poll",
                   fab, autodetect(eth.targets()), lambda k: normal_plan(fab, tr, rng), seed, jitter=3.0)
    sc.skipped["leaf01"] = {25}
    warm_reboot(sc, eth.leaves[1], 11)
    return sc


def neg_ieee_converged(seed: int) -> Scenario:
    """Dell OS10 leaves and spine, read through the IEEE8021-PFC-MIB fallback: pause requests
    and indications as Counter32 totals without a priority split, placed a few thousand below
    2^32 on every port so they wrap under load, with IF-MIB discards wrapping on the spine."""
    fab, eth, tr = _fabric(seed, "ieee8021-pfc")
    rng = random.Random(seed)
    targets = autodetect(eth.targets())
    for tg in targets:
        near_wrap(tg, fab, ("pfc_requests", "pfc_indications"), rng, (300, 3_000))
    near_wrap(targets[-1], fab, ("if_out_discards", "if_in_discards"), rng, (500, 20_000))
    return _scenario("neg_ieee_converged", "healthy converged Dell OS10 fabric (IEEE8021-PFC Counter32 totals) at high "
                     "load: pause and discard counters wrap through 2^32", fab, targets,
                     lambda k: normal_plan(fab, tr, rng), seed)


# ----------------------------------------------------------------------------- NVUE and hosts

def neg_nvue_converged(seed: int) -> Scenario:
    """Cumulus 5.x switches read over NVUE REST: pause frames and durations per priority,
    egress queue stats (lossy no-buffer discards on TC 0), WJH buffer records for the lossy TC
    (reason 503 tail drop, traffic class 0), link-stats ``out-drops`` for all classes, the PFC
    watchdog enabled and quiet. leaf02 warm-reboots: its counters restart, and the kernel
    recreates its netdevs, so each port's ``carrier-transitions`` restarts at 1 (the carrier
    came up once, inferred from Linux ``carrier_changes``); irregular polling, a missed poll."""
    fab, eth, tr = _fabric(seed, "cumulus", qos=True)
    rng = random.Random(seed)
    carrier_history([*eth.leaves, eth.spine], rng)
    targets = [Target(d.name, "nvue", d.name) for d in (*eth.leaves, eth.spine)]
    leaf02 = eth.leaves[1]
    k_reboot = 15

    def plan(k: int) -> StepPlan:
        p = normal_plan(fab, tr, rng)
        if k == k_reboot:
            for port in leaf02.ports.values():
                p.bump.setdefault(port.ref, {})["carrier_changes"] = 1
        return p

    sc = _scenario("neg_nvue_converged", "healthy converged Cumulus/NVUE fabric at high load: lossy drops per queue, in "
                   "WJH (TC 0) and link stats; a warm reboot, irregular polling, a missed poll", fab, targets, plan, seed,
                   jitter=2.0)
    sc.skipped["spine01"] = {27}
    warm_reboot(sc, leaf02, k_reboot, clock=False)
    return sc


def neg_hosts_converged(seed: int) -> Scenario:
    """The converged Arista fabric with four host NICs polled as well (sysfs + ethtool, per-
    priority counters): DCQCN seen from the hosts (CE marks received, CNPs sent and handled),
    brief pauses received and sent on priority 3, and best-effort drops in the NIC's receive
    buffer on priority 0 (``rx_prio0_buf_discard``, also in the class-less ``rx_discards_phy``).
    gpu02's driver is reloaded (its counters restart) and gpu07 misses a poll."""
    fab, eth, tr = _fabric(seed, "arista")
    hosts = ["gpu01", "gpu02", "gpu05", "gpu07"]
    for i, h in enumerate(hosts):
        dev = fab.devices[h]
        dev.extras = frozenset({"prio_stats", "prio_buf_discard"})
        dev.guid = 0x1070FD0300E00000 + fab.rng.randrange(1, 0xFF) * 0x100 + i * 0x10
    rng = random.Random(seed)
    k_reload = 17

    def plan(k: int) -> StepPlan:
        p = normal_plan(fab, tr, rng, host_dcqcn=True)
        for h in hosts:
            if rng.random() < 0.5:
                p.pg_nobuf_drops.setdefault((h, "eth0"), {})[0] = rng.randint(5, 300)
        if k == k_reload:
            p.resets.add("gpu02")
        return p

    targets = [*autodetect(eth.targets()), *(Target(h, "host", h, sysfs=True) for h in hosts)]
    sc = _scenario("neg_hosts_converged", "healthy converged Arista fabric with four host NICs polled: DCQCN counters, "
                   "brief pauses, best-effort NIC buffer drops on priority 0; a driver reload, a missed poll",
                   fab, targets, plan, seed)
    sc.skipped["gpu07"] = {9}
    sc.notes[k_reload] = "gpu02: mlx5 driver reloaded (NIC counters restart)"
    return sc


# ----------------------------------------------------------------------------- InfiniBand

def _alltoall_burst(fab: Fabric, ib: IbFabric, p: StepPlan, rng: random.Random) -> None:
    """One poll of a collective's all-to-all phase: every spine downlink and leaf uplink waits
    15-35 % of the poll for credits while still moving data; the waits run both ways on every
    leaf-spine cable, so they form cycles in the topology, but every port transmits and none
    discards (a congestion that is not a credit loop)."""
    for leaf in ib.leaves:
        for port in leaf.ports.values():
            if port.peer and fab.devices[port.peer[0]].kind == "ib_switch":
                p.wait[port.ref] = rng.uniform(0.15, 0.35)
                p.wait[port.peer] = rng.uniform(0.15, 0.35)


def _ib_plan(fab: Fabric, ib: IbFabric, tr: Traffic, rng: random.Random, phase_every: int,
             clear: tuple[int, str]) -> Callable[[int], StepPlan]:
    """The fabric's normal, an all-to-all phase every ``phase_every`` polls, and the counters of
    device ``clear[1]`` cleared during interval ``clear[0]``."""
    def plan(k: int) -> StepPlan:
        p = normal_plan(fab, tr, rng)
        if k % phase_every == 0:
            _alltoall_burst(fab, ib, p, rng)
        if k == clear[0]:
            p.resets.add(clear[1])
        return p

    return plan


def neg_ib_perfquery(seed: int) -> Scenario:
    """An InfiniBand fat tree read with ibnetdiscover + perfquery: Quantum-2 spines, a Quantum
    leaf and an old-firmware Switch-IB leaf (only the basic 32-bit PortXmitWait, which
    saturates at 2^32 - 1 under this load within minutes: 4x EDR, one tick per 32 bytes per
    lane). A training job's all-to-all at 70-85 % load waits a few percent of the time, and
    every sixth poll its all-to-all phase makes the spine links wait 15-35 %
    (:func:`_alltoall_burst`). ``perfquery -R`` clears ib-spine01's counters; polling is
    irregular and the target misses a poll."""
    fab = Fabric(seed)
    ib = IbFabric(fab, spines=2, leaves=2, hcas=3)
    _generations(fab, {ib.spines[0].name: "quantum2", ib.spines[1].name: "quantum2",
                       ib.leaves[0].name: "quantum", ib.leaves[1].name: "switchib"})
    ib.leaves[1].firmware = "old"
    tr = Traffic(fab, all_to_all([c.name for c in ib.cas], 0.8))
    fab.seed_counters()
    k_clear = 20
    plan = _ib_plan(fab, ib, tr, random.Random(seed), 6, (k_clear, ib.spines[0].name))
    sc = _scenario("neg_ib_perfquery", "healthy InfiniBand fat tree (Quantum-2, Quantum, old-firmware Switch-IB): "
                   "all-to-all waits, periodic all-to-all phases, a saturating 32-bit XmitWait, perfquery -R, "
                   "irregular polling, a missed poll", fab, [Target("ib-fabric", "perfquery")], plan, seed, jitter=2.0)
    sc.skipped["ib-fabric"] = {26}
    sc.notes[k_clear] = f"perfquery -R on every port of {ib.spines[0].name}"
    return sc


def neg_ib_ufm(seed: int) -> Scenario:
    """A Quantum-2 NDR fat tree seen through UFM only: topology, link state and rates from UFM
    REST, counters from UFM Telemetry (CSV, GUIDs only, its own sample clock), both polled at
    the telemetry's 30 s sampling interval (UFM Enterprise User Manual, "Telemetry": the
    primary instance samples every 30 s). An all-to-all at 75-85 % with credit waits, all-to-all
    phases every fourth poll (:func:`_alltoall_burst`), and UFM's counter reset on ib-leaf02
    (all of its ports restart from zero)."""
    fab = Fabric(seed)
    ib = IbFabric(fab, spines=2, leaves=2, hcas=3, host_prefix="dgx")
    _generations(fab, {s.name: "quantum2" for s in ib.switches})
    assert all(p.speed_gbps == GEN_GBPS["quantum2"] for d in ib.switches for p in d.ports.values())
    tr = Traffic(fab, all_to_all([c.name for c in ib.cas], 0.8))
    fab.seed_counters()
    k_clear = 12
    plan = _ib_plan(fab, ib, tr, random.Random(seed), 4, (k_clear, ib.leaves[1].name))
    sc = _scenario("neg_ib_ufm", "healthy Quantum-2 fabric through UFM REST (topology, rates) and UFM Telemetry "
                   "(counters by GUID): all-to-all waits and phases, a counter reset", fab,
                   [Target("ufm", "ufm"), Target("ufm-telemetry", "ufm-telemetry")],
                   plan, seed, polls=24, interval=30.0)
    sc.notes[k_clear] = f"UFM: reset counters of every port of {ib.leaves[1].name}"
    return sc


NEGATIVES: dict[str, Callable[[int], Scenario]] = {
    "neg_arista_converged": neg_arista_converged,
    "neg_cisco_converged": neg_cisco_converged,
    "neg_sonic_converged": neg_sonic_converged,
    "neg_onyx_converged": neg_onyx_converged,
    "neg_cumulus_converged": neg_cumulus_converged,
    "neg_ieee_converged": neg_ieee_converged,
    "neg_nvue_converged": neg_nvue_converged,
    "neg_hosts_converged": neg_hosts_converged,
    "neg_ib_perfquery": neg_ib_perfquery,
    "neg_ib_ufm": neg_ib_ufm,
}
