"""The bundled demo (``fabricmon demo``; ``python -m tools.scenarios --demo agent/demo/demo.jsonl.gz``).

One recording that shows everything fabricmon does within its first two minutes (polls 0-11 at
10 s), then does it again (a second storm, a second flap), so a dashboard opened at any time of
the ten-minute loop has something to show. Four Ethernet pods and one InfiniBand fat tree, each
fault taken from the scenario of the corpus that documents its physics:

- **pod A** (Arista leaf01, Onyx leaf02, Cisco spine01; gpu01-06, gpu05 a host target): incast
  into gpu01 (ECN marks: ``congestion``; :func:`~tools.scenarios.catalog.incast_congestion`), a
  NIC pause storm from gpu05 spreading upstream (``pfc_storm`` origin and victims;
  :func:`~tools.scenarios.catalog.nic_pause_storm_arista`), no-buffer drops on lossless TC3
  toward gpu03 (``packet_loss``; :func:`~tools.scenarios.catalog.lossless_drops_arista`);
- **pod B** (Cisco leaf03/leaf04/spine02; gpu07-12, gpu08 a host target): a storm from gpu08
  whose leaf's PFC watchdog cycles storm/restore through it (``pfc_storm`` origin, and
  ``watchdog``: the watchdog disagrees with the counters;
  :func:`~tools.scenarios.capabilities.wd_cycling_hidden_rx`): watchdog storms, restores and
  drops, link-level pause counters;
- **pod C** (Onyx leaf05/leaf06, Arista spine03; gpu13-18): a routing loop's PFC deadlock over
  four egresses (``pfc_deadlock`` members; :func:`~tools.scenarios.catalog.pfc_deadlock`);
- **pod D** (Cumulus leaf07/leaf08 over NVUE, spine04 over SNMP; gpu19-24): What Just Happened
  buffer drops on TC3 toward gpu21 (``packet_loss``;
  :func:`~tools.scenarios.catalog.wjh_buffer_drops_nvue`), and two lossless misconfigurations
  the NVUE leaves show (``misconfig``: PFC off on leaf07 swp1, the PFC watchdog off on leaf08
  swp2; :mod:`tools.scenarios.audit`), so the lossless checklist has passes, fails and
  unknowns; spine04 does not answer SNMP for a while (poll errors);
- **InfiniBand** (ib-spine01/02, ib-leaf01-03, HCAs node01-06 ``mlx5_0``): a credit loop over
  four switch egresses (``credit_deadlock`` members, their HOQ discards ``packet_loss``;
  :func:`~tools.scenarios.catalog.ib_credit_loop`), an HCA that stops returning credits
  (``credit_deadlock`` role ``stalled`` and its discards; :func:`~tools.scenarios.catalog.ib_stalled_port`),
  a flapping cable and a degrading one (``link_degraded``; ``link_flap_ib``, ``ber_creep_ib``).

The truth is what the physics says; what today's detector cannot find yet is listed in
tests/test_eval_corpus.py (KNOWN_FAILURES_ISSUE_27), never left out of the truth.
"""

from __future__ import annotations

import random

from tools.scenarios.capabilities import ROCE, WD_CYCLE_S
from tools.scenarios.catalog import EthFabric, IbFabric, Traffic, _merge, all_to_all, storm_tree, window
from tools.scenarios.converged import QosEthFabric
from tools.scenarios.qos import PortQos
from tools.scenarios.sim import Fabric, PortRef, StepPlan, pkt_size, propagate_pause
from tools.scenarios.writer import Scenario, Target

POLLS = 60
# Fault windows (poll indices, end exclusive): the first act fits in two minutes, the second
# repeats the storm and the flap.
INCAST = ((1, 9), (30, 38))
STORM = ((2, 12), (34, 46))
NOBUF = (3, 10)
WATCHDOG = (2, 14)
DEADLOCK = (2, 16)
WJH = (3, 11)
OUTAGE = (2, 5)
LOOP: tuple[int, int | None] = (2, None)  # a credit loop does not clear by itself (ib_credit_loop)
STALL = (2, 20)
FLAPS = (4, 40)
BER_FROM = 2


class Demo:
    """The demo's fabric and traffic (see the module docstring)."""

    def __init__(self, seed: int) -> None:
        self.fab = fab = Fabric(seed)
        self.a = EthFabric(fab, [("leaf01", "arista"), ("leaf02", "onyx")], ("spine01", "cisco"))
        self.b = EthFabric(fab, [("leaf03", "cisco"), ("leaf04", "cisco")], ("spine02", "cisco"), host_offset=6)
        self.c = EthFabric(fab, [("leaf05", "onyx"), ("leaf06", "onyx")], ("spine03", "arista"), host_offset=12)
        self.d = QosEthFabric(fab, [("leaf07", "cumulus"), ("leaf08", "cumulus")], ("spine04", "cumulus"), host_offset=18)
        self.ib = IbFabric(fab, spines=2, leaves=3, hcas=2)
        fab.devices["gpu08"].extras = frozenset({"prio_stats"})  # its NIC prints per-priority pause (capabilities)
        fab.devices["gpu08"].guid = 0x1070FD0300B40000
        a, b, c, d = (x.all_hosts() for x in (self.a, self.b, self.c, self.d))
        self.incast_dst, self.nic, self.wd_nic = a[0], a[4], b[1]
        self.incast = [(h, self.incast_dst, 3, 0.6) for h in a[1:]]
        self.storm_feed = [(h, self.nic, 3, 0.06) for h in a if h not in (self.nic, self.incast_dst)]
        wd_feed = [(h, self.wd_nic, ROCE, 0.06) for h in b if h != self.wd_nic]
        cas = [x.name for x in self.ib.cas]
        flows = [*all_to_all(a, 0.35), *self.incast, *self.storm_feed, *all_to_all(b, 0.45), *wd_feed,
                 *all_to_all(c, 0.6), *all_to_all(d, 0.65), *all_to_all(cas, 0.7)]
        self.tr = Traffic(fab, flows)
        d_leaf = fab.devices["leaf07"]
        d_leaf.qos["swp1"] = PortQos(pfc=frozenset())  # type: ignore[attr-defined]
        fab.devices["leaf08"].qos["swp2"] = PortQos(watchdog=False)  # type: ignore[attr-defined]
        fab.seed_counters()
        self.origin = self.a.port_to(self.nic)
        self.paused, self.victims = storm_tree(fab, Traffic(fab, [*all_to_all(a, 0.35), *self.storm_feed]), self.origin, 0.998)
        self.nobuf = self.a.port_to(a[2])
        self.wd_port = self.b.port_to(self.wd_nic)
        self.members: list[PortRef] = [("spine03", self.c.down["leaf05"]), ("leaf05", self.c.uplink["leaf05"]),
                                       ("spine03", self.c.down["leaf06"]), ("leaf06", self.c.uplink["leaf06"])]
        self.deadlocked = propagate_pause(self.tr.paths.values(), dict.fromkeys(self.members, 1.0))
        self.wjh = self.d.port_to(d[2])
        # IbFabric ports: leaf uplink to spine s is hcas + 1 + s; spine port to leaf l is l + 1.
        self.loop: list[PortRef] = [("ib-leaf01", "3"), ("ib-spine01", "2"), ("ib-leaf02", "4"), ("ib-spine02", "1")]
        self.stalled = self.ib.port_to(self.ib.cas[4])
        self.flap = fab.port(("ib-leaf03", "3"))
        self.ber = ("ib-spine02", "3")

    def plan(self, rng: random.Random):
        def plan(k: int) -> StepPlan:
            storming = any(window(k, *w) for w in STORM)
            wd = window(k, *WATCHDOG)
            p, _ = self.tr.plan(rng, lambda f: (f not in self.incast or any(window(k, *w) for w in INCAST))
                                and not (storming and f[0] == self.nic) and not (wd and f[0] == self.wd_nic))
            if storming:
                self._storm(p, rng)
            if wd:
                self._watchdog(p, rng)
            if window(k, *NOBUF):
                _merge(p, "nobuf_drops", self.nobuf, 3, rng.randint(40, 900))
            if window(k, *DEADLOCK):
                for ref, frac in self.deadlocked.items():
                    _merge(p, "paused", ref, 3, frac)
                    _merge(p, "occupancy", ref, 3, rng.uniform(1.5e6, 2e6))
                    p.ecn.get(ref, {}).pop(3, None)
            if window(k, *WJH):
                _merge(p, "nobuf_drops", self.wjh, 3, rng.randint(30, 600))
            self._infiniband(p, k, rng)
            return p
        return plan

    def _storm(self, p: StepPlan, rng: random.Random) -> None:
        for ref, frac in self.paused.items():
            _merge(p, "paused", ref, 3, frac)
            _merge(p, "occupancy", ref, 3, rng.uniform(1.2e6, 1.6e6))
            p.ecn.get(ref, {}).pop(3, None)
        p.bump[(self.nic, "eth0")] = {"tx_pause_storm_warning": rng.randint(2, 4), "tx_pause_storm_error": rng.randint(1, 3)}

    def _watchdog(self, p: StepPlan, rng: random.Random, dt: float = 10.0) -> None:
        """wd_cycling_hidden_rx: the watchdog in drop mode stops the port counting PFC while
        stormed, restores after 200 ms, and detects again: ~16 cycles per poll."""
        heeded = rng.uniform(0.40, 0.55)
        n = round(dt / (WD_CYCLE_S * rng.uniform(0.95, 1.05)))
        stormed = rng.random() > heeded
        ref = self.wd_port
        p.paused.setdefault(ref, {})[ROCE] = heeded
        p.pause_episode_us.setdefault(ref, {})[ROCE] = WD_CYCLE_S * heeded * 1e6
        p.occupancy.setdefault(ref, {})[ROCE] = rng.uniform(1e6, 2e6)
        p.ecn.get(ref, {}).pop(ROCE, None)
        p.unheeded.setdefault(ref, {})[ROCE] = 1.0 - heeded
        p.cap.setdefault(ref, {})[ROCE] = 0.0
        load = p.load.get(ref, {}).get(ROCE, 0.0)
        drops = round(self.fab.port(ref).bytes_per_s * dt * (1 - heeded) * load / pkt_size(ROCE))
        p.watchdog[ref] = {ROCE: (n, n - (1 if stormed else 0), drops, stormed)}

    def _infiniband(self, p: StepPlan, k: int, rng: random.Random) -> None:
        if window(k, *LOOP):
            for m in self.loop:
                p.wait[m] = 1.0
                p.bump[m] = {"xmit_discards": rng.randint(300, 500)}
        if window(k, *STALL):
            p.wait[self.stalled] = 1.0
            p.bump[self.stalled] = {"xmit_discards": rng.randint(250, 400)}
        if k in FLAPS:
            p.flaps.add(self.flap.ref)
        if k >= BER_FROM:
            p.bump[self.ber] = {"symbol_errors": min(5000, int(3 * 1.6 ** (k - BER_FROM)) + rng.randint(0, 2))}

    def targets(self) -> list[Target]:
        d_leaves = [Target(leaf.name, "nvue", leaf.name) for leaf in self.d.leaves]
        return [*self.a.targets(), *self.b.targets(), *self.c.targets(), *d_leaves,
                Target("spine04", "snmp", "spine04", {"profile": "cumulus"}),
                Target(self.nic, "host", self.nic), Target(self.wd_nic, "host", self.wd_nic, sysfs=True),
                Target("ib-fabric", "perfquery")]


def demo(seed: int) -> Scenario:
    """A mixed fabric in which every kind of finding happens within two minutes (the module docstring)."""
    dm = Demo(seed)
    rng = random.Random(seed)
    sc = Scenario("demo", "demo: four RoCE pods (Arista, Onyx, Cisco, Cumulus/NVUE) and an HDR fat tree; incast, two PFC "
                  "storms (one a watchdog fights), a PFC deadlock, lossless drops and WJH drops, two misconfigurations, a "
                  "credit loop, a stalled HCA, a flapping and a degrading cable, an SNMP outage", dm.fab, dm.targets(),
                  dm.plan(rng), polls=POLLS, seed=seed)
    sc.outages["spine04"] = {k: "timeout after 5.0 s" for k in range(*OUTAGE)}
    leaf, port = dm.a.port_to(dm.incast_dst)
    for w in INCAST:
        sc.add_truth("congestion", leaf, port, 3, None, *w)
    for w in STORM:
        sc.add_truth("pfc_storm", dm.origin[0], dm.origin[1], 3, "origin", *w, peer_device=dm.nic, peer_port="eth0")
        for v in dm.victims:
            sc.add_truth("pfc_storm", v[0], v[1], 3, "victim", *w)
    sc.add_truth("packet_loss", dm.nobuf[0], dm.nobuf[1], 3, None, *NOBUF)
    sc.add_truth("pfc_storm", dm.wd_port[0], dm.wd_port[1], ROCE, "origin", *WATCHDOG, peer_device=dm.wd_nic, peer_port="mlx5_0/1")
    sc.add_truth("pfc_storm", dm.wd_port[0], dm.wd_port[1], ROCE, "watchdog", *WATCHDOG)
    for m in dm.members:
        sc.add_truth("pfc_deadlock", m[0], m[1], 3, "member", *DEADLOCK)
    sc.add_truth("packet_loss", dm.wjh[0], dm.wjh[1], 3, None, *WJH)
    sc.add_truth("misconfig", "leaf07", "swp1", 3, None, 0, None, check="pfc_not_enabled")
    sc.add_truth("misconfig", "leaf08", "swp2", 3, None, 0, None, check="pfc_watchdog_off")
    for m in dm.loop:
        sc.add_truth("credit_deadlock", m[0], m[1], None, "member", *LOOP)
        sc.add_truth("packet_loss", m[0], m[1], None, None, *LOOP)
    sc.add_truth("credit_deadlock", dm.stalled[0], dm.stalled[1], None, "stalled", *STALL)
    sc.add_truth("packet_loss", dm.stalled[0], dm.stalled[1], None, None, *STALL)
    assert dm.flap.peer is not None
    for k in FLAPS:
        for ref in (dm.flap.ref, dm.flap.peer):
            sc.add_truth("link_degraded", ref[0], ref[1], None, None, k, k + 1)
    sc.add_truth("link_degraded", dm.ber[0], dm.ber[1], None, None, BER_FROM, None)
    for k, text in ((INCAST[0][0], f"incast into {dm.incast_dst} starts"), (STORM[0][0], f"{dm.nic} starts a PFC pause storm; "
                    f"{dm.wd_nic} storms behind a cycling watchdog; a routing loop deadlocks pod C; a credit loop forms on "
                    f"InfiniBand and {dm.ib.cas[4].name} stops returning credits"), (FLAPS[0], f"link {dm.flap.device} "
                    f"{dm.flap.name} flaps"), (STORM[1][0], f"{dm.nic} storms again"), (FLAPS[1], "the same link flaps again")):
        sc.notes[k] = text
    return sc
