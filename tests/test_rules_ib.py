"""credit_deadlock (credit loops vs a stalled port) and InfiniBand congestion."""

from __future__ import annotations

import pytest

from fabricmon.core.model import DeviceInfo
from tests.test_rules_sim import G400, Fab

FULL_WAIT = G400 * 8 / 64  # ticks per second of a port that waits all the time (64-bit ticks)


def ib_ring(n: int = 4) -> Fab:
    """sw0..sw{n-1} in a ring (port 1 -> next switch's port 2) plus an HCA on each port 3."""
    links = [(f"sw{i}", "1", f"sw{(i + 1) % n}", "2") for i in range(n)]
    links += [(f"sw{i}", "3", f"hca{i}", "1") for i in range(n)]
    fab = Fab(links)
    for i in range(n):
        for p in ("1", "2", "3"):
            fab.ib_port(f"sw{i}", p)
        fab.ib_port(f"hca{i}", "1")
    return fab


def stall(fab: Fab, dev: str, port: str) -> None:
    """Blocked: waits all the time, sends nothing, so its cable peer receives nothing."""
    fab.rate(dev, port, "xmit_wait", FULL_WAIT)
    fab.rate(dev, port, "tx_bytes", 0.0, scale=4)
    peer = fab.topo.peer(dev, port)
    if peer is not None:
        fab.rate(*peer, "rx_bytes", 0.0, scale=4)


def test_credit_loop_members_and_no_congestion_duplicates():
    fab = ib_ring(4)
    fab.poll(n=2)
    for i in range(4):
        stall(fab, f"sw{i}", "1")
    fab.poll()
    assert fab.active() == {}
    fab.poll()
    got = fab.active("credit_deadlock")
    assert set(got) == {(f"sw{i}", "1", None, "member") for i in range(4)}
    assert got[("sw0", "1", None, "member")].evidence["cycle"] == ["sw0:1", "sw1:1", "sw2:1", "sw3:1"]
    fab.poll(n=3)
    assert fab.kinds() == {"credit_deadlock"}


def test_stalled_port_outside_a_cycle_is_a_stalled_credit_deadlock_and_the_port_behind_it_its_victim():
    """A port stalled alone toward a dead HCA is credit_deadlock role stalled (INTERFACES 4),
    never congestion. The port stalled behind it (its receiver's only blocked egress is the
    stalled one: a chain, not a cycle) is not a second root: a critical congestion victim that
    names the root and carries its incident."""
    fab = ib_ring(4)
    fab.poll(n=2)
    stall(fab, "sw1", "3")  # toward a dead HCA
    stall(fab, "sw0", "1")  # blocked behind it: sw0:1 -> sw1 -> sw1:3
    fab.poll(n=2)
    got = fab.active()
    assert set(got) == {("sw1", "3", None, "stalled")}
    f = got[("sw1", "3", None, "stalled")]
    assert f.kind == "credit_deadlock" and f.severity == "critical" and f.evidence["stalled"] is True
    assert f.peer_device == "hca1" and f.evidence["incident"] == "stall:sw1:3"
    assert "stalled toward hca1 1" in f.summary
    fab.poll()
    victim = fab.active("congestion")[("sw0", "1", None, None)]
    assert victim.severity == "critical" and victim.evidence["waiting_behind"] == ["sw1:3"]
    assert victim.evidence["incident"] == "stall:sw1:3" and "sends almost nothing" in victim.summary


def test_busy_ring_with_waits_but_data_moving_is_no_credit_loop():
    fab = ib_ring(3)
    fab.poll(n=2)
    for i in range(3):
        fab.rate(f"sw{i}", "1", "xmit_wait", FULL_WAIT * 0.3)  # 30 % waiting, still sending at 40 % of line rate
        fab.rate(f"sw{i}", "1", "tx_bytes", G400 * 0.4, scale=4)
    fab.poll(n=4)
    got = fab.active()
    assert {f.kind for f in got.values()} == {"congestion"}
    assert {(k[0], k[1]) for k in got} == {("sw0", "1"), ("sw1", "1"), ("sw2", "1")}
    # The 60 s window holds 5 intervals: one idle, four at 0.3 -> 1.2 / 5.
    assert all(f.severity == "warning" and f.evidence["xmit_wait_fraction"] == pytest.approx(0.24, abs=1e-3) for f in got.values())


def test_wait_ratio_fallback_without_link_speed():
    fab = ib_ring(3)
    for i in range(3):
        del fab.gauges[(f"sw{i}", "1", "link_speed_bytes", ())]
    fab.poll(n=2)
    for i in range(3):
        stall(fab, f"sw{i}", "1")
    fab.poll(n=2)
    assert set(fab.active("credit_deadlock")) == {(f"sw{i}", "1", None, "member") for i in range(3)}


def test_saturated_xmit_wait_gives_no_finding():
    # A 32-bit saturating PortXmitWait stuck at all-ones: the true increase is unknown.
    fab = ib_ring(3)
    for i in range(3):
        fab.rate(f"sw{i}", "1", "xmit_wait", 0.0, bits=32, saturating=True)
        fab.set_value(f"sw{i}", "1", "xmit_wait", 2**32 - 1)
        fab.rate(f"sw{i}", "1", "tx_bytes", 0.0, scale=4)
    fab.poll(n=4)
    assert fab.active() == {}


# ----------------------------------------------------------------- tick-free stall, tick per generation
def test_blocked_ports_are_found_whatever_the_tick():
    # A tick assumed 8x too short makes f_wait 1/8: the tick-free test still finds the loop,
    # corroborated by each cable peer receiving nothing.
    fab = ib_ring(3)
    fab.det.configure(fab.det.rules, {"ib": {"xmit_wait_tick_bits": 8}})  # the ib analysis's parameter
    fab.poll(n=2)
    for i in range(3):
        stall(fab, f"sw{i}", "1")
    fab.poll(n=2)
    got = fab.active("credit_deadlock")
    assert set(got) == {(f"sw{i}", "1", None, "member") for i in range(3)}
    ev = got[("sw0", "1", None, "member")].evidence
    assert ev["xmit_wait_fraction"] == pytest.approx(0.125, abs=1e-3)
    assert ev["blocked_because"] == ["its cable peer sw1 2 received 0.00% of line rate"]


def test_held_and_silent_without_corroboration_is_not_a_stall():
    # XmitWait counts and nothing is sent, but the tick is unknown (no speed), the peer has no
    # receive counter, nothing was discarded: one signal alone is not enough.
    fab = ib_ring(3)
    for i in range(3):
        del fab.gauges[(f"sw{i}", "1", "link_speed_bytes", ())]
        del fab.rates[(f"sw{(i + 1) % 3}", "2", "rx_bytes", ())]
        del fab.values[(f"sw{(i + 1) % 3}", "2", "rx_bytes", ())]
    fab.poll(n=2)
    for i in range(3):
        fab.rate(f"sw{i}", "1", "xmit_wait", FULL_WAIT)
        fab.rate(f"sw{i}", "1", "tx_bytes", 0.0, scale=4)
    fab.poll(n=3)
    assert fab.active("credit_deadlock") == {}
    # Head-of-queue discards on each member corroborate: now it is a loop.
    for i in range(3):
        fab.rate(f"sw{i}", "1", "tx_discards", 50.0)
    fab.poll(n=2)
    got = fab.active("credit_deadlock")
    assert len(got) == 3
    assert "packets discarded at the head of the queue" in got[("sw0", "1", None, "member")].evidence["blocked_because"][0]


EDR = 12.5e9  # 4x EDR: 100 Gb/s in bytes/s


@pytest.mark.parametrize(("devid", "expected"), [
    ("0xcb20", 1.0),  # Switch-IB: one tick per 32 bytes of one lane (10.24 ns at 25 Gb/s per lane)
    ("0xcb84", 0.0625),  # Spectrum, an Ethernet ASIC: not an InfiniBand generation, the configured default
    ("0xd2f2", 0.0625),  # Quantum-2: one tick per 8 bytes of port time (0.64 ns at 100 Gb/s)
    ("", 0.0625),  # unknown device: the configured 64 bits of port time
])
def test_xmit_wait_tick_follows_the_device_generation(devid, expected):
    from fabricmon.core.model import DeviceInfo

    fab = ib_ring(3)
    fab.store.set_devices([DeviceInfo(name=f"sw{i}", model=devid) for i in range(3)])
    for i in range(3):
        fab.gauge(f"sw{i}", "1", "link_speed_bytes", EDR)
        fab.gauge(f"sw{i}", "1", "link_width_lanes", 4)
    fab.poll(n=2)
    full_wait_lane_ticks = (EDR / 4) / 32  # ticks per second of a Switch-IB port waiting all the time
    fab.rate("sw0", "1", "xmit_wait", full_wait_lane_ticks)
    fab.rate("sw0", "1", "tx_bytes", EDR * 0.5, scale=4)
    fab.poll(n=2)
    ratios = {m.name: dict(m.values) for m in fab.det.metrics()}["fabricmon_port_xmit_wait_ratio"]
    assert ratios[("sw0", "1")] == pytest.approx(expected, rel=1e-6)


def test_an_impossible_f_wait_flags_the_tick_instead_of_clipping():
    from fabricmon.core.model import DeviceInfo

    fab = ib_ring(3)
    fab.store.set_devices([DeviceInfo(name="sw0", model="0xcb20")])  # says Switch-IB (long lane ticks)
    for p in ("1", "2", "3"):
        fab.gauge("sw0", p, "link_width_lanes", 4)
    fab.poll(n=2)
    fab.rate("sw0", "1", "xmit_wait", FULL_WAIT)  # counts like a Quantum: 8-byte ticks at 400G, f would be 32
    fab.rate("sw0", "1", "tx_bytes", 0.0, scale=4)
    peer = fab.topo.peer("sw0", "1")
    fab.rate(*peer, "rx_bytes", 0.0, scale=4)
    fab.poll(n=2)
    suspect = {m.name: dict(m.values) for m in fab.det.metrics()}["fabricmon_port_xmit_wait_tick_suspect"]
    assert suspect == {("sw0", "1"): 1.0}
    [f] = fab.active().values()  # the tick-free test still sees the blocked port
    assert (f.kind, f.role) == ("credit_deadlock", "stalled") and "xmit_wait_fraction" not in f.evidence
    assert f.evidence["blocked_because"] == ["its cable peer sw1 2 received 0.00% of line rate"]


def test_discards_on_loop_members_are_linked_to_the_loop():
    fab = ib_ring(3)
    fab.poll(n=2)
    for i in range(3):
        stall(fab, f"sw{i}", "1")
        fab.rate(f"sw{i}", "1", "tx_discards", 40.0)  # head-of-queue lifetime drops
    fab.poll(n=2)
    got = fab.active()
    loop = {k: f for k, f in got.items() if f.kind == "credit_deadlock"}
    loss = {k: f for k, f in got.items() if f.kind == "packet_loss"}
    assert len(loop) == 3 and len(loss) == 3
    ids = {f.evidence["incident"] for f in [*loop.values(), *loss.values()]}
    assert ids == {"credit_loop:sw0:1"}
    assert loop[("sw0", "1", None, "member")].evidence["loop_discards"] == 120.0
    assert "part of the credit loop sw0:1, sw1:1, sw2:1" in loss[("sw1", "1", None, None)].summary
    # The metrics carry the same id per port, so a loss finding joins its loop by device and port.
    incident = {m.name: dict(m.values) for m in fab.det.metrics()}["fabricmon_port_incident"]
    assert incident == {(f"sw{i}", "1", "credit_loop:sw0:1"): 1.0 for i in range(3)}
    for i in range(3):  # the loop breaks: credits return, data moves, no more discards
        fab.rate(f"sw{i}", "1", "xmit_wait", 0.0)
        fab.rate(f"sw{i}", "1", "tx_bytes", 5e9, scale=4)
        fab.rate(f"sw{i}", "1", "tx_discards", 0.0)
    fab.poll(n=1)
    incident = {m.name: dict(m.values) for m in fab.det.metrics()}["fabricmon_port_incident"]
    assert set(incident.values()) == {0.0}  # exported as 0 once, so dashboards see it end


def test_a_leaky_loop_stays_one_loop_across_polls():
    # A loop broken by head-of-queue lifetime: after the first frozen polls each member waits
    # 80 %, sends 3 % of line rate and discards in bursts on alternate polls.
    fab = ib_ring(3)
    fab.poll(n=2)
    for i in range(3):
        stall(fab, f"sw{i}", "1")
    fab.poll(n=2)
    members = {(f"sw{i}", "1", None, "member") for i in range(3)}
    assert set(fab.active("credit_deadlock")) == members
    start = fab.active("credit_deadlock")[("sw0", "1", None, "member")].start
    for n in range(6):
        for i in range(3):
            fab.rate(f"sw{i}", "1", "xmit_wait", FULL_WAIT * 0.8)
            fab.rate(f"sw{i}", "1", "tx_bytes", G400 * 0.03, scale=4)
            fab.rate(f"sw{i}", "1", "tx_discards", 30.0 if (n + i) % 2 else 0.0)
        fab.poll()
        got = fab.active("credit_deadlock")
        assert set(got) == members, n
    assert got[("sw0", "1", None, "member")].start == start  # the same finding, not a new one per burst
    assert fab.kinds() <= {"credit_deadlock", "packet_loss"}
    # Traffic recovers (waits stop, no discards): beyond the window the loop clears.
    for i in range(3):
        fab.rate(f"sw{i}", "1", "xmit_wait", 0.0)
        fab.rate(f"sw{i}", "1", "tx_bytes", G400 * 0.4, scale=4)
        fab.rate(f"sw{i}", "1", "tx_discards", 0.0)
    fab.poll(n=3)
    assert fab.active("credit_deadlock") == {}


# ----------------------------------------------------------------- congestion trees and the fabric's normal
def fat_tree(healthy: int = 4) -> Fab:
    """Two leaves under two spines (every leaf-spine cable carries waits both ways, so waits form
    cycles in the topology), ``healthy`` HCAs per leaf, and host hx with one HCA on each leaf."""
    links = [("L1", "1", "S1", "1"), ("L1", "2", "S2", "1"), ("L2", "1", "S1", "2"), ("L2", "2", "S2", "2"),
             ("L1", "9", "hx0", "1"), ("L2", "9", "hx1", "1")]
    links += [(f"L{leaf}", str(10 + i), f"h{leaf}{i}", "1") for leaf in (1, 2) for i in range(healthy)]
    fab = Fab(links)
    for a, pa, b, pb in links:
        fab.ib_port(a, pa, tx_rate=G400 / 4 * 0.8, wait=FULL_WAIT * 0.02)
        fab.ib_port(b, pb, tx_rate=G400 / 4 * 0.8, wait=FULL_WAIT * 0.02)
    fab.store.set_devices([DeviceInfo(d, "ca") for d in {b for _, _, b, _ in links} if not b.startswith("S")])
    return fab


def test_a_frozen_host_makes_a_congestion_tree_not_a_credit_loop():
    """hx freezes: the leaf ports toward its HCAs stall and discard (the roots). Everything queued
    for it backs up: the leaf-spine ports wait 60 % and send little (under the loop level's 5 % of
    line rate), in cycles along the cables, but discard nothing: the roots' HOQ lifetime keeps
    them moving. Not a loop: the roots are stalled, the rest are congestion victims naming them."""
    fab = fat_tree()
    fab.poll(n=3)
    for leaf in ("L1", "L2"):
        stall(fab, leaf, "9")
        fab.rate(leaf, "9", "tx_discards", 30.0)
    tree = [("L1", "1"), ("L1", "2"), ("L2", "1"), ("L2", "2"), ("S1", "1"), ("S1", "2"), ("S2", "1"), ("S2", "2")]
    for dev, port in tree:
        fab.rate(dev, port, "xmit_wait", FULL_WAIT * 0.6)
        fab.rate(dev, port, "tx_bytes", G400 * 0.03, scale=4)
        fab.rate(*fab.topo.peer(dev, port), "rx_bytes", G400 * 0.03, scale=4)
    fab.poll(n=4)
    assert "credit_deadlock" in fab.kinds() and not any(r == "member" for *_, r in fab.active("credit_deadlock"))
    assert set(fab.active("credit_deadlock")) == {("L1", "9", None, "stalled"), ("L2", "9", None, "stalled")}
    root = fab.active("credit_deadlock")[("L1", "9", None, "stalled")]
    assert root.evidence["congestion_tree"] == sorted(f"{d}:{p}" for d, p in tree) and "not a credit loop" in root.summary
    victims = fab.active("congestion")
    assert {(d, p) for d, p, _, _ in victims} == set(tree)
    s1 = victims[("S1", "1", None, None)].evidence  # spine S1 toward L1: behind L1's stalled port
    assert s1["waiting_behind"] == ["L1:9"] and s1["incident"] == "stall:L1:9"
    for up in ("1", "2"):  # L1's uplinks carry what L1's hosts send to hx1: behind L2's stalled port
        assert victims[("L1", up, None, None)].evidence["waiting_behind"] == ["L2:9"]


def test_a_leaking_loop_stays_a_loop_beside_a_stalled_host_port():
    """The members discard at their own heads (the loop leaks through its lifetime): a loop, even
    when a stalled port toward a dead HCA hangs off one of its switches."""
    fab = ib_ring(4)
    fab.store.set_devices([DeviceInfo(f"hca{i}", "ca") for i in range(4)])
    fab.poll(n=2)
    for i in range(4):
        fab.rate(f"sw{i}", "1", "xmit_wait", FULL_WAIT * 0.8)
        fab.rate(f"sw{i}", "1", "tx_bytes", G400 * 0.01, scale=4)
        fab.rate(f"sw{(i + 1) % 4}", "2", "rx_bytes", G400 * 0.01, scale=4)
        fab.rate(f"sw{i}", "1", "tx_discards", 50.0)
    stall(fab, "sw1", "3")
    fab.poll(n=3)
    got = fab.active("credit_deadlock")
    assert set(got) == {*((f"sw{i}", "1", None, "member") for i in range(4)), ("sw1", "3", None, "stalled")}


def test_waits_are_judged_against_the_fabric_s_normal():
    """An all-to-all that makes every port wait 15 % is the fabric's normal, not 40 findings; a
    port that waits 45 % among them, for long, is congested (and tells the normal it stood out of)."""
    fab = fat_tree()
    for (dev, port, counter, _sub) in list(fab.rates):
        if counter == "xmit_wait":
            fab.rate(dev, port, "xmit_wait", FULL_WAIT * 0.15)
    fab.poll(n=8)
    assert fab.active() == {}
    fab.rate("L2", "11", "xmit_wait", FULL_WAIT * 0.45)
    fab.poll(n=5)
    [f] = fab.active().values()
    assert (f.kind, f.device, f.port, f.severity) == ("congestion", "L2", "11", "warning")
    assert f.evidence["fabric_normal"] == pytest.approx(0.15, abs=0.01) and "usual being 15.0%" in f.summary


# ----------------------------------------------------------------- the whole-array pass against the per-port formulas
@pytest.mark.parametrize("seed", range(6))
def test_wait_fractions_on_columns_match_the_per_port_formulas(seed):
    """The ib analysis computes f_wait, r_wait, the tick self-check and the fabric's normal as
    whole arrays over the moved ports. On random ports (every tick source: configured, the
    device's reported Tick in and out of range, each generation's device ID and UFM model, an
    unknown model; link speed, width and tx bytes missing or zero; XmitWait at its 32-bit cap,
    reset or wrapping) they agree with the per-port formulas of ib_wait (tick_s, fractions),
    port by port, and the normal with the median of those (but the ports an incident held)."""
    import random
    import statistics

    from fabricmon.agent.detector.analyses import ib_wait
    from fabricmon.core.model import DeviceInfo

    rng = random.Random(seed)
    models = ["0xd2f2", "devid=0xd2f0", "54002", "MQM9700", "SB7800", "0xcb20", "0xc738", "MSN4600", ""]
    fab = Fab(analyses={"ib": {"xmit_wait_tick_s": 2e-8}} if seed == 5 else None)
    devices = [f"sw{i}" for i in range(12)]
    fab.store.set_devices([DeviceInfo(d, rng.choice(models)) for d in devices], "t")
    for d in devices:
        for p in range(1, 9):
            port = str(p)
            fab.rate(d, port, "xmit_wait", rng.choice([0.0, 1e3, 2e6, 5e8, 6e9, 4e10]), bits=rng.choice([32, 64]), saturating=True)
            if rng.random() < 0.8:
                fab.rate(d, port, "tx_bytes", rng.choice([0.0, 1e6, 2e10]), scale=4)
            for name, choices in (("link_speed_bytes", [0.0, G400, G400 / 2, 3.125e9]), ("link_width_lanes", [0.0, 1.0, 4.0]),
                                  ("samples_control_tick", [0.0, 7.0, 31.0, 300.0])):
                if rng.random() < 0.7:
                    fab.gauge(d, port, name, rng.choice(choices))
    ib = fab.det.analysis("ib")
    for step in range(6):
        if step == 3:  # a reset on some ports: their interval has no delta
            for key in [k for k in fab.values if k[2] == "xmit_wait" and rng.random() < 0.3]:
                fab.set_value(key[0], key[1], key[2], 0.0, key[3])
        held = set(ib.incidents)  # the last pass's incidents: not the fabric's normal
        fab.poll(dt=rng.choice([1.0, 10.0]))
        f_ref, r_ref = [], []
        for pk, f in ib.fractions.items():
            entry = fab.store.port(pk)
            model = fab.store.devices[pk[0]].model
            tick = ib_wait.tick_s(entry, ib.p, model)
            want_f = ib_wait.wait_last(entry, tick)[0]
            if want_f is not None and entry.counter("xmit_wait").delta * tick / entry.counter("xmit_wait").dt > ib_wait.MAX_PLAUSIBLE_F_WAIT:
                assert pk in ib.suspect and f is None, (seed, step, pk)
                want_f = None
            else:
                assert pk not in ib.suspect
            assert f == pytest.approx(want_f, rel=1e-12) if want_f is not None else f is None, (seed, step, pk, f, want_f)
            if pk in held:
                continue
            if want_f is not None:
                f_ref.append(want_f)
            elif pk not in ib.suspect and (r := ib_wait.wait_last(entry, None)[1]) is not None:
                r_ref.append(r)
        idle = sum(1 for pk, e in fab.store.ports.items() if pk not in ib.fractions and e.counter("xmit_wait").delta == 0)
        for measure, ref in (("f_wait", f_ref), ("r_wait", r_ref)):
            if ref:
                last = ib.normal[measure].points[-1]
                assert last[0] == fab.t and last[1] == pytest.approx(statistics.median([*ref, *[0.0] * idle]), rel=1e-12)
