"""The lossless-fabric audit corpus: small RoCEv2 fabrics with planted misconfigurations.

``python -m tools.scenarios --audit --out tests/scenarios_audit`` writes them. Every switch and
host is a :class:`tools.scenarios.qos.QosDevice`: its configuration is rendered into the
payloads the way each source shows it (SNMP DCBX tables, NVUE ``qos roce status`` /
``pfc-watchdog`` / LLDP, host ECN sysfs and ``dcb``). Traffic is RoCE on priority 3 between all
hosts (plus a little best effort on 0) at a load that neither congests nor pauses, so every
switch egress on the path shows lossless-queue traffic ("carried lossless traffic": critical)
and no behaviour rule has anything to see.

Truth lines are ``kind: misconfig`` with the checklist item in ``check`` (see the agreed
vocabulary: ``{"kind": "misconfig", "check": ..., "device", "port", "priority", "role": null,
"start", "end": null}``), one per planted fault, on the port the operator has to fix.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from tools.scenarios.catalog import Traffic, all_to_all, window
from tools.scenarios.qos import PortQos, QosDevice
from tools.scenarios.render import SYS_DESCR, SYS_OID
from tools.scenarios.sim import Fabric, StepPlan
from tools.scenarios.writer import T0, Scenario, Target

HOST_GBPS = 200.0
UPLINK_GBPS = 800.0
LOAD = 0.4  # of a host link: no egress reaches the benign-pause or ECN-marking load of the traffic model
INCAST = 0.6  # per sender, of a host link: three senders overload the victim's leaf port (as in incast_congestion)
# The checklist calls PFC "sustained" after this many consecutive intervals (agent/detector/checklist.py
# SUSTAINED_INTERVALS): the behaviour is observable from the poll that ends the third one.
SUSTAINED = 3
POLLS = 12


class Lab:
    """leaf01 (Cumulus, NVUE) with gpu01/gpu02, leaf02 (Arista, SNMP) with gpu03/gpu04, spine01
    (Cumulus, NVUE); leaf uplinks swp51 / Ethernet3 to spine swp1 / swp2."""

    def __init__(self, seed: int) -> None:
        self.fab = Fabric(seed)
        rng = self.fab.rng
        self.leaf01 = self._switch("leaf01", "cumulus", rng)
        self.leaf02 = self._switch("leaf02", "arista", rng)
        self.spine = self._switch("spine01", "cumulus", rng)
        self.hosts: list[QosDevice] = []
        for leaf, ports, up in ((self.leaf01, ("swp1", "swp2"), "swp51"), (self.leaf02, ("Ethernet1", "Ethernet2"), "Ethernet3")):
            for port in ports:
                host = QosDevice(f"gpu{len(self.hosts) + 1:02d}", "host")
                self.fab.add(host)
                host.add_port("eth0", 1, HOST_GBPS)
                leaf.add_port(port, int("".join(c for c in port if c.isdigit())), HOST_GBPS)
                self.fab.connect((leaf.name, port), (host.name, "eth0"))
                self.hosts.append(host)
            leaf.add_port(up, int("".join(c for c in up if c.isdigit())), UPLINK_GBPS)
            sp = f"swp{len(self.spine.ports) + 1}"
            self.spine.add_port(sp, len(self.spine.ports) + 1, UPLINK_GBPS)
            self.fab.connect((leaf.name, up), (self.spine.name, sp))
        self.traffic = Traffic(self.fab, all_to_all([h.name for h in self.hosts], LOAD))
        self.fab.seed_counters()

    def _switch(self, name: str, profile: str, rng: random.Random) -> QosDevice:
        dev = QosDevice(name, "eth_switch", profile=profile, sys_oid=SYS_OID[profile], sys_descr=SYS_DESCR[profile],
                        boot_t=T0 - rng.uniform(5, 90) * 86400)
        self.fab.add(dev)
        return dev

    def targets(self, hosts: list[str] | None = None) -> list[Target]:
        polled = [h.name for h in self.hosts] if hosts is None else hosts
        return [Target("leaf01", "nvue", "leaf01"), Target("leaf02", "snmp", "leaf02", {"profile": "arista"}),
                Target("spine01", "nvue", "spine01"), *(Target(h, "host", h) for h in polled)]

    def plan(self, seed: int) -> Callable[[int], StepPlan]:
        rng = random.Random(seed)
        return lambda k: self.traffic.plan(rng)[0]


def _scenario(name: str, description: str, lab: Lab, seed: int, hosts: list[str] | None = None) -> Scenario:
    return Scenario(name, description, lab.fab, lab.targets(hosts), lab.plan(seed), polls=POLLS, seed=seed)


def audit_mixed_five(seed: int) -> Scenario:
    """Five planted misconfigurations in a mixed fabric, each a different check on a different port.

    Configuration facts (and the public source that says it is wrong):

    1. leaf01 swp2 (facing gpu02): PFC off on every priority, ``qos roce status`` pfc-priority
       empty: ``pfc_not_enabled`` on priority 3 (IEEE 802.1Qbb: a priority is lossless only where
       PFC is enabled for it; Cumulus RoCE lossless mode enables PFC on switch priority 3).
    2. leaf02 Ethernet3 (uplink): PFC on priorities 3 and 4, seen in its LLDP-EXT-DOT1-DCBX-MIB
       local table: ``pfc_on_lossy_priority`` on priority 4 (802.1Qbb pause blocks a whole
       priority: head-of-line blocking for a best-effort class).
    3. gpu03 eth0: ``/sys/class/net/eth0/ecn/roce_np/enable/3`` = 0, the NIC does not act as a
       DCQCN notification point on the RoCE priority: ``ecn_not_enabled`` on priority 3 (NVIDIA
       MLNX_OFED DCQCN; Zhu et al., SIGCOMM 2015).
    4. spine01 swp2 (toward leaf02): ``nv show interface swp2 qos pfc-watchdog`` state disabled:
       ``pfc_watchdog_off`` on priority 3 (SONiC PFC watchdog design; Cumulus PFC watchdog).
    5. gpu01 eth0: trusts PCP (``dcb app show`` has no DSCP entries) while leaf01 swp1 trusts
       DSCP: ``trust_mismatch`` (NVIDIA MLNX_OFED QoS: ``mlnx_qos --trust dscp`` for RoCEv2; both
       ends must classify alike). gpu01 is the end to fix.

    Everything else is the NVIDIA RoCE default (tools/scenarios/qos.py). The leaf02-spine01
    cable also differs in its PFC sets (3,4 against 3): that mismatch is explained by fault 2 and
    carries no truth line of its own; so do leaf01 swp2's watchdog and headroom (PFC is off).
    """
    lab = Lab(seed)
    lab.leaf01.qos["swp2"] = PortQos(pfc=frozenset())
    lab.leaf02.qos["Ethernet3"] = PortQos(pfc=frozenset({3, 4}))
    lab.hosts[2].qos["eth0"] = PortQos(nic_np=frozenset())
    lab.spine.qos["swp2"] = PortQos(watchdog=False)
    lab.hosts[0].qos["eth0"] = PortQos(trust_dscp=False)
    sc = _scenario("audit_mixed_five", "mixed NVUE/SNMP/host fabric with five lossless misconfigurations "
                   "(PFC off, PFC on a lossy priority, host ECN off, watchdog off, trust mismatch)", lab, seed)
    for device, port, check, prio in (("leaf01", "swp2", "pfc_not_enabled", 3), ("leaf02", "Ethernet3", "pfc_on_lossy_priority", 4),
                                      ("gpu03", "eth0", "ecn_not_enabled", 3), ("spine01", "swp2", "pfc_watchdog_off", 3),
                                      ("gpu01", "eth0", "trust_mismatch", None)):
        sc.add_truth("misconfig", device, port, prio, None, 0, None, check=check)
    return sc


def audit_clean(seed: int) -> Scenario:
    """The same fabric with every port at the NVIDIA RoCE defaults: PFC on priority 3 only, ECN on
    TCs 0 and 3 (153 KB / 1.43 MB), trust DSCP with 26 -> 3 and 48 -> 6, a reserved ingress pool
    for priority 3, the PFC watchdog on, DCQCN on priority 3 on every host (Cumulus Linux RoCE,
    the public ``qos roce status`` sample; NVIDIA MLNX_OFED DCQCN). No check may fail; what a
    source cannot show (ECN, watchdog and trust on the SNMP leaf) is ``unknown``."""
    lab = Lab(seed)
    return _scenario("audit_clean", "mixed NVUE/SNMP/host fabric configured at the RoCE defaults: nothing may fire", lab, seed)


def audit_one_end_visible(seed: int) -> Scenario:
    """Links where only one end is polled: gpu01 (on leaf01, NVUE) and gpu03 (on leaf02, SNMP)
    are not host targets. Configuration is the RoCE default everywhere. leaf01 swp1's link
    checks (PFC sets, trust) have one end only: ``unknown``, not ``pass`` and not ``fail``.
    gpu03 sends DCBX, so leaf02's LLDP-EXT-DOT1-DCBX-MIB remote table shows its PFC set
    (IEEE 802.1Qaz: the PFC TLV carries the sender's enable vector) and the PFC comparison on
    leaf02 Ethernet1 can still be made from the switch alone; its trust stays ``unknown``."""
    lab = Lab(seed)
    return _scenario("audit_one_end_visible", "one end of a link is not polled (gpu01, gpu03): link checks there are unknown",
                     lab, seed, hosts=["gpu02", "gpu04"])


def audit_headroom_missing(seed: int) -> Scenario:
    """A check the five-fault fabric leaves out: leaf01 swp51 (uplink) has no RoCE-reserved
    ingress pool; its ``qos roce status`` pool table shows only ``lossy-default-ingress`` for all
    eight priorities: ``headroom_missing`` on priority 3 (Linux mlxsw/mlx5e buffer documentation:
    the lossless PG needs XOFF + delay headroom to absorb what arrives after XOFF). Everything else
    is the RoCE default."""
    lab = Lab(seed)
    lab.leaf01.qos["swp51"] = PortQos(reserved=frozenset())
    sc = _scenario("audit_headroom_missing", "no RoCE-reserved ingress pool (headroom) on a leaf uplink", lab, seed)
    sc.add_truth("misconfig", "leaf01", "swp51", 3, None, 0, None, check="headroom_missing")
    return sc


def audit_ecn_after_pfc(seed: int) -> Scenario:
    """ECN that engages only after PFC: leaf01's global PFC profile (``nv show qos pfc
    default-global``) stops the sender at 100 000 B, below the 153 KB ECN minimum marking
    threshold of its lossless queue, so the ingress pauses the peer before the queue ever marks
    and PFC, not DCQCN, does the congestion control (Zhu et al., DCQCN, SIGCOMM 2015: ECN must be
    marked before PFC triggers). The profile is device-wide, so ``ecn_after_pfc`` fails on
    priority 3 of every leaf01 port. spine01's profile stops at 500 000 B, above the ECN
    minimum: there the check passes; leaf02 (SNMP) shows no XOFF threshold: unknown."""
    lab = Lab(seed)
    lab.leaf01.pfc_xoff = 100_000
    lab.spine.pfc_xoff = 500_000
    sc = _scenario("audit_ecn_after_pfc", "the leaf01 PFC XOFF threshold is below its ECN minimum threshold", lab, seed)
    for port in ("swp1", "swp2", "swp51"):
        sc.add_truth("misconfig", "leaf01", port, 3, None, 0, None, check="ecn_after_pfc")
    return sc


def audit_ecn_after_pfc_behaviour(seed: int) -> Scenario:
    """ECN after PFC seen from behaviour only: leaf02 (Arista, SNMP: no source shows its XOFF
    threshold) marks ECN above its PFC XOFF threshold. From poll 3 on, gpu01, gpu02 and gpu04
    send RoCE to gpu03 (3:1 incast on leaf02 Ethernet1). The traffic model pauses the egresses
    upstream of the bottleneck (spine01 swp2, gpu04 eth0), so leaf02 Ethernet3 and Ethernet2 send
    PFC on priority 3 in every interval; with XOFF below the marking threshold, PFC holds the queue
    below the threshold and leaf02 never marks (its queue-3 ECN mark counters, which the Arista
    ECN queue counter table shows, stay flat), while leaf02 itself is never paused. That is
    DCQCN's failure mode (Zhu et al., SIGCOMM 2015: ECN must mark before PFC triggers):
    ``ecn_after_pfc`` on priority 3 of both PFC-sending ports, observable once PFC has lasted
    ``SUSTAINED`` intervals. spine01 is paused by leaf02 (a victim, not a cause), so it is
    not named; the congestion on leaf02 Ethernet1 may be reported (optional truth)."""
    lab = Lab(seed)
    hosts = [h.name for h in lab.hosts]
    victim, start = "gpu03", 3
    incast = [(h, victim, 3, INCAST) for h in hosts if h != victim]
    traffic = Traffic(lab.fab, all_to_all(hosts, LOAD) + incast)
    rng = random.Random(seed)

    def plan(k: int) -> StepPlan:
        step, _ = traffic.plan(rng, lambda f: f not in incast or window(k, start, None))
        for ref in [r for r in step.ecn if r[0] == "leaf02"]:
            del step.ecn[ref]  # the queue never reaches the marking threshold: PFC stops it first
        return step

    sc = Scenario("audit_ecn_after_pfc_behaviour", "incast on leaf02, whose ECN marks above its (invisible) XOFF: "
                  "sustained PFC and no ECN marks", lab.fab, lab.targets(), plan, polls=POLLS, seed=seed)
    for port in ("Ethernet2", "Ethernet3"):
        sc.add_truth("misconfig", "leaf02", port, 3, None, start + SUSTAINED - 1, None, check="ecn_after_pfc")
    sc.add_truth("congestion", "leaf02", "Ethernet1", 3, None, start, None, optional=True)
    sc.notes[start] = f"incast starts: gpu01, gpu02, gpu04 to {victim}"
    return sc


AUDIT: dict[str, Callable[[int], Scenario]] = {
    "audit_mixed_five": audit_mixed_five,
    "audit_clean": audit_clean,
    "audit_one_end_visible": audit_one_end_visible,
    "audit_headroom_missing": audit_headroom_missing,
    "audit_ecn_after_pfc": audit_ecn_after_pfc,
    "audit_ecn_after_pfc_behaviour": audit_ecn_after_pfc_behaviour,
}
