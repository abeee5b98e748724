"""The normal of a converged fabric at high load: what a busy, healthy fabric shows every poll.

Shared by the hard negatives (:mod:`tools.scenarios.negatives`) and the capability scenarios
(:mod:`tools.scenarios.capabilities`), so a fault is always injected on top of the same normal.
What is modelled, and where each fact comes from:

- **Converged Ethernet.** RoCEv2 on priority 3, made lossless by PFC (IEEE 802.1Qbb), shares
  every link with best-effort traffic on the lossy priority 0, about a third of the bytes
  (:func:`converged_flows`). That is why RoCE is deployed on Ethernet rather than InfiniBand
  (Guo et al., "RDMA over Commodity Ethernet at Scale", SIGCOMM 2016, section 2).
- **DCQCN doing its job** (Zhu et al., "Congestion Control for Large-Scale RDMA
  Deployments", SIGCOMM 2015): a busy egress marks ECN on the RoCE queue with a RED-like
  profile between Kmin and Kmax, receivers return CNPs, senders cut their rate, and the queue
  settles near Kmin. Per poll a busy RoCE egress marks 1-3 % of its RoCE packets (the normal
  the project's issue 27 measured on a healthy fabric) and holds 50-300 KB at the sample
  (around the Cumulus RoCE default Kmin of 146 KB, fabric-reference.md section 2.4). PFC is
  the backstop for bursts: the switch holding such a queue pauses the hops feeding it 0.1-1 %
  of the time in brief XOFF..XON episodes (Zhu et al. section 2: PFC triggers on bursts DCQCN
  has not yet absorbed), and NICs receiving at high rate pause their leaf 0.05-0.3 % of it
  (Guo et al. 2016, section 4.3, the "slow-receiver symptom").
- **Best effort is lossy by design.** Priority 0 has no PFC, so a busy egress tail-drops it
  (in 7 polls of 10, 1e-5 to 3e-4 of its packets: no public figure exists, a judgement call
  for a fabric at 80-95 % load), and bursts overflow ingress buffers (10-400 packets on a
  third of the host-facing ports per poll, same judgement). Each device counts them where its
  counters look: per egress queue (a tail drop; on Spectrum a "no buffer" discard, the way
  the Spectrum ASIC tail-drops: MELLANOX-QOS-MIB TC UnicastNoBufferDiscard, NVUE
  ``tx-uc-buffer-discards``), per ingress queue (Arista VOQ), per ingress priority group
  (MELLANOX-QOS-MIB PG SharedBufferDiscard), for the whole port (CUMULUS-COUNTERS-MIB
  clBufferOverflowDiscards / clEgressQOverflowDiscards) and in IF-MIB ifOutDiscards /
  ifInDiscards, which count every discard whatever its class (RFC 2863).
- **Hosts see DCQCN too** (``StepPlan.host_cnp_share``): CE marks counted by the receiving
  NIC, CNPs sent back for a share of them, handled by the senders (mlx5 hw_counters
  ``np_ecn_marked_roce_packets``, ``np_cnp_sent``, ``rp_cnp_handled``).
- **InfiniBand under load** is lossless by credits (IBTA vol. 1, 7.9 "Flow control"): a busy
  port waits for credits part of the time (PortXmitWait rises: NVIDIA ibdiagnet user manual,
  "Congestion Assessment on InfiniBand Links", treats XmitWait as the normal measure of
  congestion, not an error), here 2-12 % of each poll above half load, with no discards.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from itertools import pairwise

from tools.scenarios.catalog import EthFabric, Flow, Traffic
from tools.scenarios.qos import QosDevice
from tools.scenarios.render import SYS_DESCR, SYS_OID
from tools.scenarios.sim import Device, Fabric, PortRef, StepPlan, pkt_size
from tools.scenarios.writer import T0, Target

ROCE, LOSSY = 3, 0
SPECTRUM = frozenset({"onyx", "cumulus"})  # SNMP profiles of Spectrum switches (NVUE targets are Spectrum too)
ECN_MARKED = (0.01, 0.03)  # fraction of RoCE packets marked at a busy egress (DCQCN steady state)
QUEUE_BYTES = (5e4, 3e5)  # RoCE queue at the sample, around Kmin
BRIEF_PAUSE = (0.001, 0.01)  # fraction of the poll the RoCE priority is paused at a busy egress
LOSSY_DROP = (1e-5, 3e-4)  # tail-dropped fraction of best-effort packets at a busy egress
IB_WAIT = (0.02, 0.12)  # XmitWait share of a busy InfiniBand port
BUSY = 0.6  # an egress above this load shows the effects above
CNP_SHARE = 0.5  # CNPs per CE mark at the receiving NIC (coalescing; judgement call)


def converged_flows(hosts: list[str], roce: float = 0.55, lossy: float = 0.3) -> list[Flow]:
    """RoCE all-to-all (each host to the host half the fabric away and to its neighbour) and
    best effort to two other hosts: about ``roce + lossy`` of every host link."""
    n = len(hosts)
    flows: list[Flow] = []
    for i, h in enumerate(hosts):
        flows += [(h, hosts[(i + n // 2) % n], ROCE, roce * 0.7), (h, hosts[(i + 1) % n], ROCE, roce * 0.3),
                  (h, hosts[(i + n // 2 + 1) % n], LOSSY, lossy * 0.6), (h, hosts[(i + 2) % n], LOSSY, lossy * 0.4)]
    return flows


def normal_plan(fab: Fabric, tr: Traffic, rng: random.Random, active: Callable[[Flow], bool] = lambda f: True,
                host_dcqcn: bool = False) -> StepPlan:
    """One poll interval of the fabric's normal (module docstring): loads from ``tr`` (its
    DCQCN-like rate control keeps every egress at or below line rate), then marks, short
    queues, brief pauses, lossy drops and credit waits as a healthy busy fabric shows them.

    Pause comes from where buffers fill: a switch whose RoCE egress is busy (and marking)
    briefly pauses the hops feeding that egress, so every pauser also marks ECN (ECN below
    XOFF, the RoCE deployment rule); a NIC receiving RoCE at high rate briefly pauses its leaf
    (the "slow-receiver symptom" of Guo et al. 2016, section 4.3: receive-side cache misses)."""
    p, _ = tr.plan(rng, active)
    p.ecn.clear()
    p.occupancy.clear()
    p.paused.clear()
    p.wait.clear()
    marking: set[PortRef] = set()
    for e, by_prio in sorted(p.load.items()):
        dev = fab.devices[e[0]]
        if sum(by_prio.values()) < BUSY:
            continue
        if dev.kind in ("ib_switch", "ib_ca"):
            p.wait[e] = rng.uniform(*IB_WAIT)
            continue
        if dev.kind != "eth_switch":
            continue
        if by_prio.get(ROCE):
            marking.add(e)
            p.ecn.setdefault(e, {})[ROCE] = rng.uniform(*ECN_MARKED)
            p.occupancy.setdefault(e, {})[ROCE] = rng.uniform(*QUEUE_BYTES)
            peer = fab.port(e).peer
            if peer is not None and fab.devices[peer[0]].kind == "host":
                _brief(p, e, rng.uniform(0.0005, 0.003))  # the NIC pauses its leaf
        if by_prio.get(LOSSY) and rng.random() < 0.7:
            lossy_drops(fab, p, e, rng, by_prio[LOSSY])
    for flow in tr.flows:
        if flow[2] != ROCE or not active(flow):
            continue
        path = tr.path(flow[0], flow[1])
        for up, hop in pairwise(path):
            if hop in marking:
                _brief(p, up, rng.uniform(*BRIEF_PAUSE))
    for dev in fab.devices.values():
        if dev.kind != "eth_switch":
            continue
        for port in sorted(dev.ports.values(), key=lambda x: x.index):
            if port.peer is not None and fab.devices[port.peer[0]].kind == "host" and rng.random() < 0.33:
                ingress_drops(p, port.ref, rng.randint(10, 400))
    if host_dcqcn:
        p.host_cnp_share = CNP_SHARE
    return p


def _brief(p: StepPlan, egress: PortRef, frac: float) -> None:
    d = p.paused.setdefault(egress, {})
    d[ROCE] = max(d.get(ROCE, 0.0), frac)


def lossy_drops(fab: Fabric, p: StepPlan, egress: PortRef, rng: random.Random, load: float, dt: float = 10.0) -> int:
    """Tail drops of best-effort packets at ``egress`` for one poll (``load``: the lossy
    priority's share of line rate), counted per queue (a no-buffer discard on Spectrum) and in
    IF-MIB ifOutDiscards. Returns the count."""
    port = fab.port(egress)
    n = round(port.bytes_per_s * dt * load / pkt_size(LOSSY) * rng.uniform(*LOSSY_DROP))
    spectrum = fab.devices[egress[0]].profile in SPECTRUM
    d = (p.nobuf_drops if spectrum else p.q_drops).setdefault(egress, {})
    d[LOSSY] = d.get(LOSSY, 0.0) + n
    bump(p, egress, "out_discards", n)
    return n


def ingress_drops(p: StepPlan, port: PortRef, n: int) -> None:
    """A best-effort burst dropped at ``port``'s ingress, as each vendor counts it: the whole
    port (Cumulus clBufferOverflowDiscards, IF-MIB ifInDiscards), the lossy ingress queue
    (Arista VOQ) and the lossy priority group's shared buffer (Onyx)."""
    bump(p, port, "ingress_overflow", n)
    bump(p, port, "in_discards", n)
    p.ingress_q_drops.setdefault(port, {})[LOSSY] = p.ingress_q_drops.get(port, {}).get(LOSSY, 0.0) + n
    p.pg_shared_drops.setdefault(port, {})[LOSSY] = p.pg_shared_drops.get(port, {}).get(LOSSY, 0.0) + n


def bump(p: StepPlan, ref: PortRef, counter: str, n: float) -> None:
    d = p.bump.setdefault(ref, {})
    d[counter] = d.get(counter, 0.0) + n


class QosEthFabric(EthFabric):
    """:class:`EthFabric` whose switches carry the NVIDIA RoCE lossless configuration
    (:class:`tools.scenarios.qos.QosDevice`): NVUE targets then also show RoCE status and the
    PFC watchdog (state, per-TC status, deadlock count), SNMP targets the DCBX tables."""

    def _switch(self, name: str, profile: str) -> Device:
        boot = T0 - self.fab.rng.uniform(5, 90) * 86400
        return self.fab.add(QosDevice(name, "eth_switch", profile=profile, sys_oid=SYS_OID[profile],
                                      sys_descr=SYS_DESCR[profile], boot_t=boot))


def autodetect(targets: list[Target]) -> list[Target]:
    """SNMP targets without a pinned profile: the agent detects the vendor (sysObjectID/sysDescr)."""
    for t in targets:
        t.options.pop("profile", None)
    return targets


def carrier_history(devices: list[Device], rng: random.Random) -> None:
    """Give every port of ``devices`` the carrier changes of its past: the kernel counts the
    first carrier up after boot (1) and two per flap since, so a port that has been up since
    boot reads an odd number, never 0 (Linux ``carrier_changes``, sysfs-class-net ABI)."""
    for dev in devices:
        for port in sorted(dev.ports.values(), key=lambda x: x.index):
            port.c["carrier_changes"] = 1 + 2 * rng.randint(0, 3)
