"""SONiC fabrics observed only over gNMI: storms, a deadlock and lossless loss.

``python -m tools.scenarios --out tests/scenarios_gnmi --gnmi`` writes them. Every switch is a
SONiC switch polled by the ``gnmi`` source alone (:func:`tools.scenarios.render.render_gnmi`:
COUNTERS_DB virtual paths sampled every poll, CONFIG_DB in the initial sync), so what the
detector finds here it finds from SONiC's documented counters:

- **Counters** (sonic-gnmi test data ``COUNTERS:Ethernet68{,:Queues,:Pfcwd}``; SAI names):
  PFC frames per priority (``SAI_PORT_STAT_PFC_<p>_RX/TX_PKTS``), XOFF->XON transitions
  (``..._ON2OFF_RX_PKTS``), pause time in microseconds (``..._RX_PAUSE_DURATION_US``, the
  counter SONiC's Mellanox storm detector reads, sonic-swss ``pfc_detect_mellanox.lua``), queue
  packets, bytes, drops, ECN marks and occupancy, the watchdog's per-queue statistics.
- **The PFC watchdog** (SONiC "PFC Watchdog" design; sonic-mgmt ``docs/pfcwd``): on a queue
  paused past the detection time (200 ms) it declares a storm, ``PFC_WD_STATUS`` turns
  ``stormed`` and, with the default ``drop`` action, every packet for the queue and every
  packet the matching priority group receives is discarded, so the pause stops spreading
  upstream; it restores only after the restoration time passes with **no** PFC frame
  received (``pfc_restore.lua``): a NIC that keeps sending XOFF keeps the queue stormed. The
  MAC keeps counting the pause frames it receives.
- **Without the watchdog** (``pfcwd start_default`` only runs when ``default_pfcwd_status``
  is enabled; sonic-utilities ``pfcwd/main.py``) a storm spreads hop by hop as in
  :mod:`tools.scenarios.physics` (Guo et al., SIGCOMM 2016, section 4), and a cyclic buffer
  dependency (Hu et al., HotNets 2016) stays deadlocked: every member's queue holds data and
  moves nothing on priority 3 while its pause time covers the whole interval.
- **Loss on a lossless queue**: ``SAI_QUEUE_STAT_DROPPED_PACKETS`` counts every drop of the
  queue (SONiC has no separate no-buffer counter per queue); on queue 3, which PFC protects,
  a drop is loss that must not happen (a headroom misconfiguration).
"""

from __future__ import annotations

import random
from collections.abc import Callable

from tools.scenarios.catalog import EthFabric, Traffic, all_to_all, storm_tree, window
from tools.scenarios.sim import Fabric, PortRef, StepPlan
from tools.scenarios.writer import Scenario, Target

SONIC = [("leaf01", "sonic"), ("leaf02", "sonic")]
SPINE = ("spine01", "sonic")


def _fabric(seed: int) -> tuple[Fabric, EthFabric]:
    fab = Fabric(seed)
    return fab, EthFabric(fab, SONIC, SPINE)


def _targets(eth: EthFabric, pfcwd: bool) -> list[Target]:
    """Every switch over gNMI only; the profile is left to the parser (it needs none)."""
    return [Target(d.name, "gnmi", d.name, pfcwd=pfcwd) for d in [*eth.leaves, eth.spine]]


def _storm_fabric(seed: int) -> tuple[Fabric, EthFabric, str, Traffic, PortRef]:
    """The storm scenarios' fabric: all-to-all RoCE plus every host sending to the third host
    behind leaf01, the NIC that will storm; returns it with the switch port facing that NIC."""
    fab, eth = _fabric(seed)
    hosts = eth.all_hosts()
    nic = hosts[2]
    tr = Traffic(fab, [*all_to_all(hosts, 0.45), *[(h, nic, 3, 0.06) for h in hosts if h != nic]])
    fab.seed_counters()
    return fab, eth, nic, tr, eth.port_to(nic)


def _watchdog_off_truth(sc: Scenario, eth: EthFabric) -> None:
    """No watchdog on any port: the checklist's ``pfc_watchdog_off`` on every switch port,
    priority 3 (CONFIG_DB shows PFC on priority 3 and no PFC_WD row), for the whole recording."""
    for dev in [*eth.leaves, eth.spine]:
        for port in dev.ports:
            sc.add_truth("misconfig", dev.name, port, 3, None, 0, None, check="pfc_watchdog_off")


def gnmi_sonic_storm_watchdog(seed: int) -> Scenario:
    """A NIC behind leaf01 sends XOFF on priority 3 without end; leaf01's SONiC watchdog
    (drop action) declares the storm on the queue facing it within its 200 ms detection time,
    keeps it stormed while the pause frames keep coming, and drops what the queue would carry:
    the storm does not spread. Found from the watchdog's own counters and status, and from
    the port's pause time and queue counters."""
    fab, eth, nic, tr, origin = _storm_fabric(seed)
    rng = random.Random(seed)
    s, e = 10, 22

    def plan(k: int) -> StepPlan:
        storming = window(k, s, e)
        p, _ = tr.plan(rng, lambda f: not (storming and f[0] == nic))
        if storming:
            p.paused.setdefault(origin, {})[3] = 0.998
            p.occupancy.setdefault(origin, {})[3] = 0.0  # drop action: the queue is emptied
            p.watchdog[origin] = {3: (1 if k == s else 0, 0, rng.randint(120_000, 200_000), True)}
        elif k == e:
            p.watchdog[origin] = {3: (0, 1, 0, False)}
        return p

    sc = Scenario("gnmi_sonic_storm_watchdog", f"SONiC over gNMI: pause storm from {nic}; leaf01's PFC watchdog (drop) "
                  "holds queue 3 stormed until the storm ends", fab, _targets(eth, pfcwd=True), plan, polls=30, seed=seed)
    sc.add_truth("pfc_storm", origin[0], origin[1], 3, "origin", s, e)
    sc.notes[s] = f"storm injected: {nic} sends XOFF on priority 3 continuously"
    sc.notes[e] = "storm over: no PFC frames, the watchdog restores the queue"
    return sc


def gnmi_sonic_storm_spreading(seed: int) -> Scenario:
    """The same storm on a SONiC fabric whose watchdog was never started: the pause spreads
    upstream along the flows into the stuck egress (Guo et al. 2016), found from the pause time
    (``RX_PAUSE_DURATION_US``), the frames and the queues' lack of progress."""
    fab, eth, nic, tr, origin = _storm_fabric(seed)
    paused, victims = storm_tree(fab, tr, origin, 0.998)
    rng = random.Random(seed)
    s, e = 10, 24

    def plan(k: int) -> StepPlan:
        storming = window(k, s, e)
        p, _ = tr.plan(rng, lambda f: not (storming and f[0] == nic))
        if storming:
            for ref, frac in paused.items():
                p.paused.setdefault(ref, {})[3] = frac
                p.occupancy.setdefault(ref, {})[3] = rng.uniform(1.2e6, 1.6e6)
                p.ecn.get(ref, {}).pop(3, None)
        return p

    sc = Scenario("gnmi_sonic_storm_spreading", f"SONiC over gNMI, no PFC watchdog: pause storm from {nic} spreads upstream",
                  fab, _targets(eth, pfcwd=False), plan, polls=32, seed=seed)
    sc.add_truth("pfc_storm", origin[0], origin[1], 3, "origin", s, e)
    for v in victims:
        sc.add_truth("pfc_storm", v[0], v[1], 3, "victim", s, e)
    _watchdog_off_truth(sc, eth)
    sc.notes[s] = f"storm injected: {nic} stalls and sends XOFF on priority 3 continuously"
    sc.notes[e] = "storm cleared"
    return sc


def gnmi_sonic_pfc_deadlock(seed: int) -> Scenario:
    """A transient routing loop bounces RoCE traffic leaf01 -> spine01 -> leaf02 -> spine01 ->
    leaf01 on a SONiC fabric without watchdogs: four egresses pause each other for good. Over
    gNMI every member shows what the deadlock rule needs: pause time over the whole interval,
    data queued on priority 3 and no packet leaving queue 3 (the SNMP view of SONiC, without
    per-queue pause time, cannot prove it)."""
    fab, eth = _fabric(seed)
    hosts = eth.all_hosts()
    tr = Traffic(fab, all_to_all(hosts, 0.6))
    fab.seed_counters()
    members: list[PortRef] = [
        ("spine01", eth.down["leaf01"]), ("leaf01", eth.uplink["leaf01"]),
        ("spine01", eth.down["leaf02"]), ("leaf02", eth.uplink["leaf02"]),
    ]
    rng = random.Random(seed)
    s, e = 10, 23

    def plan(k: int) -> StepPlan:
        p, _ = tr.plan(rng)
        if window(k, s, e):
            for m in members:
                p.paused.setdefault(m, {})[3] = 1.0
                p.occupancy.setdefault(m, {})[3] = rng.uniform(1.5e6, 2e6)
                p.ecn.get(m, {}).pop(3, None)
        return p

    sc = Scenario("gnmi_sonic_pfc_deadlock", "SONiC over gNMI, no PFC watchdog: routing loop creates a 4-egress PFC "
                  "deadlock on priority 3", fab, _targets(eth, pfcwd=False), plan, polls=32, seed=seed)
    for m in members:
        sc.add_truth("pfc_deadlock", m[0], m[1], 3, "member", s, e)
    _watchdog_off_truth(sc, eth)
    sc.notes[s] = "transient routing loop: RoCE traffic bounces leaf01 -> spine01 -> leaf02 -> spine01 -> leaf01"
    sc.notes[e] = "routes converged: loop gone, buffers drain"
    return sc


def gnmi_sonic_lossless_drops(seed: int) -> Scenario:
    """Headroom too small on one leaf port: lossless queue 3 drops packets
    (``SAI_QUEUE_STAT_DROPPED_PACKETS``) while PFC is on for priority 3 (PORT_QOS_MAP)."""
    fab, eth = _fabric(seed)
    hosts = eth.all_hosts()
    tr = Traffic(fab, all_to_all(hosts, 0.7))
    fab.seed_counters()
    port = eth.port_to(hosts[4])
    rng = random.Random(seed)
    s, e = 10, 18

    def plan(k: int) -> StepPlan:
        p, _ = tr.plan(rng)
        if window(k, s, e):
            p.q_drops.setdefault(port, {})[3] = rng.randint(40, 900)
        return p

    sc = Scenario("gnmi_sonic_lossless_drops", f"SONiC over gNMI: drops on lossless queue 3 of {port[0]} {port[1]}",
                  fab, _targets(eth, pfcwd=True), plan, polls=28, seed=seed)
    sc.add_truth("packet_loss", port[0], port[1], 3, None, s, e)
    return sc


def gnmi_sonic_benign(seed: int) -> Scenario:
    """Heavy all-to-all RoCE load with the brief pauses and ECN marks of a healthy fabric: a
    hard negative (no truth), so the gNMI path invents nothing."""
    fab, eth = _fabric(seed)
    tr = Traffic(fab, all_to_all(eth.all_hosts(), 0.8))
    fab.seed_counters()
    rng = random.Random(seed)
    return Scenario("gnmi_sonic_benign", "SONiC over gNMI: heavy healthy load, no fault", fab, _targets(eth, pfcwd=True),
                    lambda k: tr.plan(rng)[0], polls=24, seed=seed)


GNMI: dict[str, Callable[[int], Scenario]] = {
    "gnmi_sonic_storm_watchdog": gnmi_sonic_storm_watchdog,
    "gnmi_sonic_storm_spreading": gnmi_sonic_storm_spreading,
    "gnmi_sonic_pfc_deadlock": gnmi_sonic_pfc_deadlock,
    "gnmi_sonic_lossless_drops": gnmi_sonic_lossless_drops,
    "gnmi_sonic_benign": gnmi_sonic_benign,
}
