"""Scenarios built from documented fabric behaviour, not from the detector's rules.

``python -m tools.scenarios --out tests/scenarios_physics --physics`` writes them. Each one
states its physics and where each fact comes from. What they share, and why:

- **XmitWait tick by ASIC generation** (:data:`tools.scenarios.sim.XMIT_WAIT_TICK`, NVIDIA
  ibdiagnet user manual, "Congestion Assessment on InfiniBand Links"): Quantum, Quantum-2
  and Quantum-3 count one tick per 8 bytes of port transmit time, Switch-IB 2, Switch-IB and
  SwitchX one per 32 bytes per lane. No scenario here uses the 64-bit-time tick of the rule
  corpus, and ``ibnetdiscover`` carries each switch's real ``devid``.
- **A port's transmit is its cable peer's receive** (by construction in the simulator).
- **Link rate is negotiated**: a cable between generations runs at the slower end's rate
  (IBTA auto-negotiation; a Quantum-2 NDR port facing a Switch-IB 2 runs 4x EDR).
- **Storms spread in grades**, not all-or-nothing: the storming NIC's leaf pauses its
  uplinks about 90 % of the time, the other leaves' uplinks are paused 40-70 %, the other
  hosts on the storming leaf 30-60 % (figures as given in the project's detector issue 15;
  the spreading itself is described by Guo et al., "RDMA over Commodity Ethernet at Scale",
  SIGCOMM 2016, section 4 "NIC PFC pause frame storm"). Partially paused victims are
  ``"optional": true`` truth: a detector may name them.
- **Vendor profiles are left to detection**: no SNMP target pins ``profile``; the agent picks
  it from sysObjectID / sysDescr as it would on a real fabric.
- **Watchdogs act on their documented timers** (SONiC ``pfcwd``: 200 ms detection, 200 ms
  restoration): a deadlock they break re-forms while its routes remain, so per poll its
  members are paused about half the time with dozens of watchdog events.
- **Configuration the devices do not send** (a non-identity priority map) is the operator's
  config, written beside the recording as ``<name>.yml`` (``Scenario.config``), which
  ``fabricmon eval`` reads.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from tools.scenarios.catalog import EthFabric, IbFabric, Traffic, all_to_all, window
from tools.scenarios.sim import Fabric, PortRef, StepPlan
from tools.scenarios.writer import Scenario, Target

# 4x link rate per generation, Gb/s (IBTA data rates FDR 56, EDR 100, HDR 200, NDR 400, XDR 800).
GEN_GBPS = {"switchx": 56.0, "switchib": 100.0, "switchib2": 100.0, "quantum": 200.0, "quantum2": 400.0,
            "quantum3": 800.0, "connectx": 400.0}

# OpenSM's default head-of-queue lifetime for switch-to-switch ports, opensm.conf
# ``head_of_queue_lifetime 0x12``: 4.096 us x 2^18 = 1.07 s. A packet stuck longer at the head
# of an output queue is discarded (PortXmitDiscards) and its buffer credit returns upstream:
# that is what makes a real credit loop leak instead of freezing.
HOQ_LIFETIME_S = 4.096e-6 * 2**18


def _generations(fab: Fabric, asics: dict[str, str]) -> None:
    """Give devices their ASIC and every cable the rate both ends support (the slower end)."""
    for name, asic in asics.items():
        fab.devices[name].asic = asic
    for dev in fab.devices.values():
        if dev.kind == "ib_ca" and not dev.asic:
            dev.asic = "connectx"
    for p, q in fab.links():
        a, b = fab.devices[p.device], fab.devices[q.device]
        if a.kind.startswith("ib") and b.kind.startswith("ib"):
            p.speed_gbps = q.speed_gbps = min(GEN_GBPS[a.asic], GEN_GBPS[b.asic])


def _autodetect(targets: list[Target]) -> list[Target]:
    """SNMP targets without a pinned profile: the agent must detect the vendor."""
    for t in targets:
        t.options.pop("profile", None)
    return targets


# ----------------------------------------------------------------------------- InfiniBand

def ib_leaky_credit_loop(seed: int) -> Scenario:
    """A credit loop on a ring of Quantum-2 and Quantum switches that leaks.

    Physics: a cyclic credit dependency holds every ring egress full; head-of-queue
    lifetime (OpenSM default about 1.07 s on switch ports, see HOQ_LIFETIME_S) discards the
    packet at the head after it waited that long, which frees one buffer and lets a few
    packets through. Per 10 s poll each member therefore waits 70-100 % of the time, sends a
    trickle (0.1-2 % of line rate) and shows discards in bursts (several HOQ expiries per
    poll on some polls, none on others). The generations differ around the ring (Quantum-2
    ticks per 8 bytes at NDR on the Quantum-2 pair, per 8 bytes at HDR where a Quantum end
    sets the rate). The loss on members is real but explained by the loop: optional truth.
    """
    fab = Fabric(seed)
    ib = IbFabric(fab, ring=4, hcas=1)
    _generations(fab, {s.name: asic for s, asic in zip(ib.leaves, ("quantum2", "quantum2", "quantum", "quantum"), strict=True)})
    cas = [c.name for c in ib.cas]
    tr = Traffic(fab, [(c, cas[(i + 1) % 4], 0, 0.5) for i, c in enumerate(cas)] +
                 [(c, cas[(i + 2) % 4], 0, 0.2) for i, c in enumerate(cas)])
    fab.seed_counters()
    members = [(s.name, "1") for s in ib.leaves]
    rng = random.Random(seed)
    s, e = 9, None
    dt = 10.0  # the poll interval

    def plan(k: int) -> StepPlan:
        p, _ = tr.plan(rng)
        if window(k, s, e):
            for m in members:
                p.wait[m] = rng.uniform(0.70, 1.00)
                p.credit[m] = rng.uniform(0.001, 0.02)
                # HOQ expiries this poll (at most one per lifetime per stuck queue), each
                # discarding the head packets of the blocked queue; some polls see none.
                expiries = max(0, rng.randint(-int(dt / HOQ_LIFETIME_S), int(dt / HOQ_LIFETIME_S)))
                p.bump[m] = {"xmit_discards": sum(rng.randint(5, 300) for _ in range(expiries))}
        return p

    sc = Scenario("ib_leaky_credit_loop", "ring of 2 Quantum-2 + 2 Quantum switches: a credit loop that leaks through "
                  "HOQ-lifetime discards (70-100 % wait, a trickle of data, discard bursts)",
                  fab, [Target("ib-fabric", "perfquery")], plan, polls=28, seed=seed)
    for m in members:
        sc.add_truth("credit_deadlock", m[0], m[1], None, "member", s, e)
        sc.add_truth("packet_loss", m[0], m[1], None, None, s, e, optional=True)
    sc.notes[s] = "credit loop forms around the ring; HOQ lifetime keeps it leaking"
    return sc


def _stall(p: StepPlan, port: PortRef, rng: random.Random) -> None:
    """A port whose peer returns no credits: it holds data (97-100 % XmitWait), sends nothing,
    and drops what outlives the head-of-queue lifetime in bursts (IBTA vol. 1, HOQLife)."""
    p.wait[port] = rng.uniform(0.97, 1.0)
    p.credit[port] = 0.0
    p.bump[port] = {"xmit_discards": rng.randint(100, 900)}


def _stall_truth(sc: Scenario, port: PortRef, s: int, e: int) -> None:
    """A port stalled alone is ``credit_deadlock`` with role ``stalled`` (not part of a loop),
    and its head-of-queue drops are loss."""
    sc.add_truth("credit_deadlock", port[0], port[1], None, "stalled", s, e)
    sc.add_truth("packet_loss", port[0], port[1], None, None, s, e)


def ib_stalled_hca_mixed_generations(seed: int) -> Scenario:
    """A fat tree of Quantum-2 spines, a Switch-IB 2 leaf (EDR) and a Quantum leaf (HDR):
    an HCA behind the Switch-IB 2 leaf stops returning credits.

    Physics: the leaf port facing the HCA waits the whole interval and sends nothing; its
    XmitWait counts one tick per 32 bytes per lane (Switch-IB 2, ibdiagnet manual), so a
    fully blocked 4x EDR port gains 12.5e9 / (32 x 4) = 9.8e7 ticks per second, an eighth
    of what an 8-byte-tick device would count at the same rate. Packets that sit at the head
    of the queue past the leaf lifetime (OpenSM ``leaf_head_of_queue_lifetime 0x10``,
    4.096 us x 2^16 = 0.27 s) are discarded: PortXmitDiscards rise, loss is real.
    """
    fab = Fabric(seed)
    ib = IbFabric(fab, spines=2, leaves=2, hcas=2)
    _generations(fab, {ib.spines[0].name: "quantum2", ib.spines[1].name: "quantum2",
                       ib.leaves[0].name: "switchib2", ib.leaves[1].name: "quantum"})
    cas = [c.name for c in ib.cas]
    tr = Traffic(fab, all_to_all(cas, 0.6))
    fab.seed_counters()
    port = ib.port_to(ib.cas[1])
    rng = random.Random(seed)
    s, e = 8, 20

    def plan(k: int) -> StepPlan:
        p, _ = tr.plan(rng)
        if window(k, s, e):
            _stall(p, port, rng)
        return p

    sc = Scenario("ib_stalled_hca_mixed_generations", f"mixed Quantum-2 / Switch-IB 2 / Quantum fat tree: "
                  f"{ib.cas[1].name} stops returning credits behind the EDR leaf", fab,
                  [Target("ib-fabric", "perfquery")], plan, polls=30, seed=seed)
    _stall_truth(sc, port, s, e)
    sc.notes[s] = f"{ib.cas[1].name} stalls"
    return sc


def ib_old_firmware_counter_clear(seed: int) -> Scenario:
    """A Switch-IB leaf on old firmware, its counters cleared in the middle of a stall.

    Physics: without CapMask2 bit 1 ``perfquery -x`` prints zeros for the 64-bit error
    counters and XmitWait (rdma-core PR #695), so only the basic 32-bit PortXmitWait exists,
    and it saturates at 2^32 - 1 (IBA PortCounters saturate, they do not wrap). At 4x EDR
    with 32 bytes per lane per tick a blocked port counts 9.8e7 ticks/s: saturated within
    about 44 s. An operator clears the counters (``perfquery -R``) mid-episode; the stall
    goes on, XmitWait climbs from 0 and saturates again. 64-bit data counters stay valid.
    """
    fab = Fabric(seed)
    ib = IbFabric(fab, spines=2, leaves=2, hcas=2)
    _generations(fab, {ib.spines[0].name: "quantum", ib.spines[1].name: "quantum",
                       ib.leaves[0].name: "switchib", ib.leaves[1].name: "quantum"})
    ib.leaves[0].firmware = "old"
    cas = [c.name for c in ib.cas]
    tr = Traffic(fab, all_to_all(cas, 0.6))
    fab.seed_counters()
    port = ib.port_to(ib.cas[0])
    rng = random.Random(seed)
    s, e, clear = 8, 22, 14

    def plan(k: int) -> StepPlan:
        p, _ = tr.plan(rng)
        if window(k, s, e):
            _stall(p, port, rng)
        if k == clear:
            p.resets.add(ib.leaves[0].name)
        return p

    sc = Scenario("ib_old_firmware_counter_clear", f"old-firmware Switch-IB {ib.leaves[0].name}: 32-bit saturating "
                  f"XmitWait only; {ib.cas[0].name} stalls and the counters are cleared mid-stall", fab,
                  [Target("ib-fabric", "perfquery")], plan, polls=30, seed=seed)
    _stall_truth(sc, port, s, e)
    sc.notes[s] = f"{ib.cas[0].name} stalls"
    sc.notes[clear] = f"perfquery -R on every port of {ib.leaves[0].name}"
    return sc


# ----------------------------------------------------------------------------- Ethernet

def _graded_storm(fab: Fabric, eth: EthFabric, nic: str, rng: random.Random, p: StepPlan) -> None:
    """One interval of a NIC storm with graded spreading (see the module docstring)."""
    storm_leaf = next(leaf for leaf, hosts in eth.hosts.items() if nic in hosts)
    origin = eth.port_to(nic)
    paused: dict[PortRef, float] = {origin: rng.uniform(0.995, 1.0)}
    paused[(eth.spine.name, eth.down[storm_leaf])] = rng.uniform(0.88, 0.92)
    for leaf in eth.leaves:
        if leaf.name != storm_leaf:
            paused[(leaf.name, eth.uplink[leaf.name])] = rng.uniform(0.40, 0.70)
    for h in eth.hosts[storm_leaf]:
        if h != nic:
            paused[(h, "eth0")] = rng.uniform(0.30, 0.60)
    for ref, frac in paused.items():
        p.paused.setdefault(ref, {})[3] = frac
        p.occupancy.setdefault(ref, {})[3] = fab.port(ref).bytes_per_s * 1e-4 * frac  # ~100 us of line rate
        p.ecn.get(ref, {}).pop(3, None)
    p.bump[(nic, "eth0")] = {"tx_pause_storm_warning": rng.randint(1, 3), "tx_pause_storm_error": rng.randint(0, 2)}


def _storm_truth(sc: Scenario, eth: EthFabric, nic: str, s: int, e: int | None) -> None:
    storm_leaf = next(leaf for leaf, hosts in eth.hosts.items() if nic in hosts)
    origin = eth.port_to(nic)
    sc.add_truth("pfc_storm", origin[0], origin[1], 3, "origin", s, e)
    sc.add_truth("pfc_storm", eth.spine.name, eth.down[storm_leaf], 3, "victim", s, e)
    for leaf in eth.leaves:
        if leaf.name != storm_leaf:
            sc.add_truth("pfc_storm", leaf.name, eth.uplink[leaf.name], 3, "victim", s, e, optional=True)
    for h in eth.hosts[storm_leaf]:
        if h != nic:
            sc.add_truth("pfc_storm", h, "eth0", 3, "victim", s, e, optional=True)


def _storm(name: str, profiles: tuple[str, str, str, str], seed: int, description: str) -> Scenario:
    fab = Fabric(seed)
    eth = EthFabric(fab, [("leaf01", profiles[0]), ("leaf02", profiles[1]), ("leaf03", profiles[2])],
                    ("spine01", profiles[3]))
    hosts = eth.all_hosts()
    nic = hosts[1]
    tr = Traffic(fab, [*all_to_all(hosts, 0.4), *[(h, nic, 3, 0.05) for h in hosts if h != nic]])
    fab.seed_counters()
    rng = random.Random(seed)
    s, e = 10, 24

    def plan(k: int) -> StepPlan:
        storming = window(k, s, e)
        p, _ = tr.plan(rng, lambda f: not (storming and f[0] == nic))
        if storming:
            _graded_storm(fab, eth, nic, rng, p)
        return p

    sc = Scenario(name, description.format(nic=nic), fab, _autodetect(eth.targets()), plan, polls=32, seed=seed)
    _storm_truth(sc, eth, nic, s, e)
    sc.notes[s] = f"{nic} stalls and sends XOFF on priority 3"
    sc.notes[e] = "storm cleared"
    return sc


def storm_graded_spreading(seed: int) -> Scenario:
    """A NIC pause storm behind an Arista leaf, spreading in grades through a Cisco spine to
    an Onyx and a SONiC leaf (profiles detected, not pinned). Physics and sources: module
    docstring (graded spreading)."""
    return _storm("storm_graded_spreading", ("arista", "onyx", "sonic", "cisco"), seed,
                  "NIC storm from {nic} on leaf01 (Arista) spreading in grades: spine->leaf01 ~90 %, other "
                  "leaves' uplinks 40-70 %, leaf01's other hosts 30-60 %")


def cisco_watchdog_alert_only(seed: int) -> Scenario:
    """A storm on an all-Cisco fabric whose PFC watchdog only alerts.

    Physics: a watchdog in alert-only mode (SONiC's PFC watchdog action ``alert``, sonic-net
    SONiC "PFC Watchdog" design: detect and log, neither drop nor forward; the NX-OS
    equivalent is inferred) does not shut the stuck queue, so CISCO-PFC-EXT-MIB shutdown,
    restore and drop counters stay flat and the queue state stays active while the storm
    spreads in grades as without a watchdog."""
    sc = _storm("cisco_watchdog_alert_only", ("cisco", "cisco", "cisco", "cisco"), seed,
                "NIC storm from {nic} on a Cisco fabric whose PFC watchdog is alert-only: no shutdown, "
                "graded spreading")
    # From the counters alone an alert-only watchdog is one silent through a storm the port's own
    # counters show (the mode is configuration SNMP does not expose): a detector that cross-checks
    # watchdogs may name it (role ``watchdog``, docs/recording-format.md), but need not.
    origin = next(t for t in sc.truth if t["role"] == "origin")
    sc.add_truth("pfc_storm", origin["device"], origin["port"], 3, "watchdog", origin["start"], origin["end"], optional=True)
    return sc


def concurrent_storm_and_incast(seed: int) -> Scenario:
    """Two independent faults at once: a NIC storm behind leaf01 and a 4:1 incast into a host
    on leaf03 (RoCE with DCQCN: ECN marks at the incast egress, pause only brief there).

    Physics: DCQCN keeps an incast queue under its PFC threshold with ECN (Zhu et al.,
    "Congestion Control for Large-Scale RDMA Deployments", SIGCOMM 2015), so the incast is
    congestion, not a storm; the storm spreads in grades (module docstring). The incast
    senders are on leaf02 and leaf03, so part of their traffic crosses paused links."""
    fab = Fabric(seed)
    eth = EthFabric(fab, [("leaf01", "onyx"), ("leaf02", "arista"), ("leaf03", "arista")], ("spine01", "arista"))
    hosts = eth.all_hosts()
    nic, dst = hosts[1], hosts[6]
    incast = [(h, dst, 3, 0.6) for h in (*eth.hosts["leaf02"], *eth.hosts["leaf03"]) if h != dst][:4]
    tr = Traffic(fab, [*all_to_all(hosts, 0.35), *[(h, nic, 3, 0.05) for h in hosts if h != nic], *incast])
    fab.seed_counters()
    rng = random.Random(seed)
    storm, inc = (10, 24), (14, 26)

    def plan(k: int) -> StepPlan:
        storming = window(k, *storm)
        p, _ = tr.plan(rng, lambda f: (f not in incast or window(k, *inc)) and not (storming and f[0] == nic))
        if storming:
            _graded_storm(fab, eth, nic, rng, p)
        return p

    sc = Scenario("concurrent_storm_and_incast", f"NIC storm from {nic} on leaf01 and, overlapping, a 4:1 incast "
                  f"into {dst} on leaf03", fab, _autodetect(eth.targets()), plan, polls=32, seed=seed)
    _storm_truth(sc, eth, nic, *storm)
    leaf, port = eth.port_to(dst)
    sc.add_truth("congestion", leaf, port, 3, None, *inc)
    sc.notes[storm[0]] = f"{nic} starts a pause storm"
    sc.notes[inc[0]] = f"incast into {dst} starts"
    return sc


def ingress_pg_drops_onyx(seed: int) -> Scenario:
    """Undersized PFC headroom on an Onyx leaf's uplink: priority-group no-buffer drops at
    ingress, nothing at any egress queue.

    Physics: Spectrum implements lossless service on ingress priority-group buffers; after
    the PG crosses XOFF the headroom must absorb what is in flight on the cable (twice the
    cable delay at line rate plus an MTU: NVIDIA "Understanding Buffer Headroom" for
    Spectrum). A long 800G uplink with a headroom sized for a short cable overflows it, so
    MELLANOX-QOS-MIB mlnxQosPgTable NoBufferDiscard counts drops on PG 3 of the ingress port
    (the leaf's uplink), while the egress TC counters stay clean."""
    fab = Fabric(seed)
    eth = EthFabric(fab, [("leaf01", "onyx"), ("leaf02", "onyx")], ("spine01", "onyx"))
    for d in (*eth.leaves, eth.spine):
        d.extras = frozenset({"onyx_pg"})
    hosts = eth.all_hosts()
    tr = Traffic(fab, all_to_all(hosts, 0.7))
    fab.seed_counters()
    port = ("leaf01", eth.uplink["leaf01"])
    rng = random.Random(seed)
    s, e = 10, 18

    def plan(k: int) -> StepPlan:
        p, _ = tr.plan(rng)
        if window(k, s, e):
            p.pg_nobuf_drops[port] = {3: rng.randint(20, 1500)}
            p.pg_occupancy[port] = {3: rng.uniform(1.0e5, 1.6e5)}
        return p

    sc = Scenario("ingress_pg_drops_onyx", "Onyx leaf01 uplink: PFC headroom too small for the cable, PG 3 "
                  "no-buffer drops at ingress", fab, _autodetect(eth.targets()), plan, polls=28, seed=seed)
    sc.add_truth("packet_loss", port[0], port[1], 3, None, s, e)
    sc.notes[s] = "headroom overflow on leaf01's uplink PG 3"
    return sc


def less_common_loss_counters(seed: int) -> Scenario:
    """Lossless loss seen only in less common counters, on three devices at once.

    - Cumulus leaf01: CUMULUS-COUNTERS-MIB discardClCounters clBufferOverflowDiscards on a
      host port (ingress buffer overflow, no priority split), selected by sysObjectID
      1.3.6.1.4.1.40310.
    - Arista leaf02: ARISTA-QUEUE-MIB ingress queue (VOQ) PktsDropped on queue 3: on
      Jericho-class switches buffering is on ingress, so lossless drops appear there.
    - Host gpu06: mlx5 ``rx_discards_phy`` (NIC port-buffer drops: lossless violation per the
      kernel's mlx5 counters.rst) and gpu03 ``rx_out_of_buffer`` (receive queue empty: the host
      is too slow; loss all the same).
    The spine is a Dell OS10 switch, left to the IEEE8021-PFC fallback profile.
    """
    fab = Fabric(seed)
    eth = EthFabric(fab, [("leaf01", "cumulus"), ("leaf02", "arista")], ("spine01", "ieee8021-pfc"))
    fab.devices["leaf02"].extras = frozenset({"arista_ingress"})
    hosts = eth.all_hosts()
    tr = Traffic(fab, all_to_all(hosts, 0.6))
    fab.seed_counters()
    cum_port = eth.port_to(hosts[0])
    ari_port = eth.port_to(hosts[4])
    slow, discarding = hosts[2], hosts[5]
    for i, h in enumerate((slow, discarding)):
        fab.devices[h].guid = 0x1070FD0300D00000 + fab.rng.randrange(1, 0xFF) * 0x100 + i * 0x10
    rng = random.Random(seed)
    windows = {"cumulus": (9, 16), "arista": (12, 19), "phy": (15, 22), "oob": (18, 25)}

    def plan(k: int) -> StepPlan:
        p, _ = tr.plan(rng)
        if window(k, *windows["cumulus"]):
            p.bump[cum_port] = {"ingress_overflow": rng.randint(30, 800)}
        if window(k, *windows["arista"]):
            p.ingress_q_drops[ari_port] = {3: rng.randint(30, 800)}
        if window(k, *windows["phy"]):
            p.bump[(discarding, "eth0")] = {"rx_discards_phy": rng.randint(50, 2000)}
        if window(k, *windows["oob"]):
            p.bump[(slow, "eth0")] = {"rx_out_of_buffer": rng.randint(50, 2000)}
        return p

    targets = [*_autodetect(eth.targets()), *(Target(h, "host", h, sysfs=True) for h in (slow, discarding))]
    sc = Scenario("less_common_loss_counters", "lossless loss in Cumulus clBufferOverflowDiscards, Arista ingress "
                  "queue drops, mlx5 rx_discards_phy and rx_out_of_buffer", fab, targets, plan, polls=28, seed=seed)
    # The Arista drops are on ingress queue 3, mapped to the lossless priority: loss a detector
    # must find. The other three counters name no class, and the ports and NICs behind them also
    # carry best effort (all_to_all's priority-0 flows) that no counter here separates: loss of
    # an unknown class, which a detector may report (at most as a warning) but need not
    # (issue 27 item 1; docs/recording-format.md, fabricmon's vocabulary notes).
    sc.add_truth("packet_loss", cum_port[0], cum_port[1], None, None, *windows["cumulus"], optional=True)
    sc.add_truth("packet_loss", ari_port[0], ari_port[1], 3, None, *windows["arista"])
    sc.add_truth("packet_loss", discarding, "mlx5_0/1", None, None, *windows["phy"], optional=True)
    sc.add_truth("packet_loss", slow, "mlx5_0/1", None, None, *windows["oob"], optional=True)
    return sc


def nonidentity_priority_map(seed: int) -> Scenario:
    """RoCE priority 3 carried in traffic class 5 (and lossy priority 5 in TC 3) on Arista.

    Physics: the priority -> traffic class map is configuration (Arista EOS ``qos map cos 3
    to traffic-class 5``), so an egress queue number says nothing about the priority until
    the map is known. Here leaf01 drops lossless traffic for lack of buffer in TC 5 (its
    priority 3 PFC counters are normal), while TC 3, now lossy, tail-drops under load as
    lossy queues do. The map is ``fabric: {priority_to_queue: {3: 5, 5: 3}}``; a detector
    that assumes identity reports the wrong queue and misses the loss. Neither SNMP MIB the
    Arista profile walks exposes the map, so it is the operator's config, written beside the
    recording (``nonidentity_priority_map.yml``)."""
    fab = Fabric(seed)
    eth = EthFabric(fab, [("leaf01", "arista"), ("leaf02", "arista")], ("spine01", "arista"))
    for d in (*eth.leaves, eth.spine):
        d.queue_map = {3: 5, 5: 3}
    hosts = eth.all_hosts()
    tr = Traffic(fab, [*all_to_all(hosts, 0.6), *[(h, hosts[(i + 2) % len(hosts)], 5, 0.1) for i, h in enumerate(hosts)]])
    fab.seed_counters()
    port = eth.port_to(hosts[4])
    lossy_port = eth.port_to(hosts[1])
    rng = random.Random(seed)
    s, e = 10, 18

    def plan(k: int) -> StepPlan:
        p, _ = tr.plan(rng)
        if window(k, s, e):
            p.nobuf_drops.setdefault(port, {})[3] = rng.randint(40, 900)  # priority 3 -> TC 5
        p.q_drops.setdefault(lossy_port, {})[5] = rng.randint(0, 300)  # priority 5 (lossy) -> TC 3
        return p

    sc = Scenario("nonidentity_priority_map", "Arista with priority 3 -> TC 5: lossless no-buffer drops in TC 5 on "
                  f"{port[0]} {port[1]}, normal lossy tail drops in TC 3", fab, _autodetect(eth.targets()), plan,
                  polls=28, seed=seed)
    sc.config = "fabric:\n  lossless_priorities: [3]\n  priority_to_queue: {3: 5, 5: 3}\n"
    sc.add_truth("packet_loss", port[0], port[1], 3, None, s, e)
    return sc


# SONiC's PFC watchdog defaults (sonic-utilities ``pfcwd start``: detection time 200 ms,
# restoration time 200 ms, action drop). A deadlocked queue is detected after it has been
# paused with packets queued for the detection time; the watchdog then drops what the queue
# holds and ignores pause until the restoration time has passed. The routes that formed the
# cycle are still there, so the cycle re-forms as soon as pause is honoured again.
WD_DETECT_S, WD_RESTORE_S = 0.2, 0.2


def pfc_deadlock_watchdog_cycling(seed: int) -> Scenario:
    """A PFC deadlock on a Cisco fabric whose watchdogs keep breaking it, and it re-forms.

    Physics: a transient routing loop bounces RoCE traffic leaf01 -> spine01 -> leaf02 ->
    spine01 -> leaf01, a cyclic buffer dependency over four egresses (Hu et al., "Deadlocks
    in Datacenter Networks: Why Do They Form, and How to Avoid Them", HotNets 2016). Each
    member's watchdog (timings as SONiC documents them, see WD_DETECT_S; the NX-OS PFC
    watchdog behaves alike, inferred) fires after the detection time, drops the queue's
    packets for the restoration time, then honours pause again and the loop closes within
    microseconds. A cycle lasts a little over 0.4 s, so a 10 s poll sees 18-25 detections
    and as many restorations per member, the queue paused for about half the interval (the
    detection phases) and watchdog drops in the tens of thousands. Nothing the loop carries
    is delivered: the drops are the loss, explained by the deadlock (optional truth). The
    hosts sending into the loop are paused part of the time, behind the deadlock: not a
    storm. CISCO-PFC-EXT-MIB has no per-queue transmit counter, so progress on the
    priority is not measurable: the watchdogs and the cycle decide."""
    fab = Fabric(seed)
    eth = EthFabric(fab, [("leaf01", "cisco"), ("leaf02", "cisco")], ("spine01", "cisco"))
    hosts = eth.all_hosts()
    tr = Traffic(fab, all_to_all(hosts, 0.6))
    fab.seed_counters()
    members: list[PortRef] = [
        ("spine01", eth.down["leaf01"]), ("leaf01", eth.uplink["leaf01"]),
        ("spine01", eth.down["leaf02"]), ("leaf02", eth.uplink["leaf02"]),
    ]
    rng = random.Random(seed)
    s, e = 10, 23
    dt = 10.0

    def plan(k: int) -> StepPlan:
        p, _ = tr.plan(rng)
        if window(k, s, e):
            for m in members:
                cycle = WD_DETECT_S + WD_RESTORE_S + rng.uniform(0.0, 0.15)  # + the time the loop takes to close
                n = int(dt / cycle)
                stormed = rng.random() < WD_DETECT_S / cycle  # polled in a detection phase or not
                p.paused.setdefault(m, {})[3] = n * WD_DETECT_S / dt * rng.uniform(0.95, 1.05)
                p.occupancy.setdefault(m, {})[3] = rng.uniform(1.5e6, 2e6)
                p.ecn.get(m, {}).pop(3, None)
                p.watchdog[m] = {3: (n, n - (1 if stormed else 0), rng.randint(10_000, 60_000), stormed)}
            for h in hosts:  # senders into the loop: paused behind it part of the time
                p.paused.setdefault((h, "eth0"), {})[3] = rng.uniform(0.2, 0.45)
        return p

    sc = Scenario("pfc_deadlock_watchdog_cycling", "Cisco leaves + spine: routing loop PFC deadlock on priority 3 that "
                  "SONiC-timed watchdogs break every ~0.4 s and that re-forms", fab, _autodetect(eth.targets()), plan,
                  polls=32, seed=seed)
    for m in members:
        sc.add_truth("pfc_deadlock", m[0], m[1], 3, "member", s, e)
        sc.add_truth("packet_loss", m[0], m[1], 3, None, s, e, optional=True)
    sc.notes[s] = "transient routing loop: RoCE traffic bounces leaf01 -> spine01 -> leaf02 -> spine01 -> leaf01"
    sc.notes[e] = "routes converged: loop gone, watchdogs quiet"
    return sc


PHYSICS: dict[str, Callable[[int], Scenario]] = {
    "ib_leaky_credit_loop": ib_leaky_credit_loop,
    "ib_stalled_hca_mixed_generations": ib_stalled_hca_mixed_generations,
    "ib_old_firmware_counter_clear": ib_old_firmware_counter_clear,
    "storm_graded_spreading": storm_graded_spreading,
    "cisco_watchdog_alert_only": cisco_watchdog_alert_only,
    "concurrent_storm_and_incast": concurrent_storm_and_incast,
    "ingress_pg_drops_onyx": ingress_pg_drops_onyx,
    "less_common_loss_counters": less_common_loss_counters,
    "nonidentity_priority_map": nonidentity_priority_map,
    "pfc_deadlock_watchdog_cycling": pfc_deadlock_watchdog_cycling,
}
