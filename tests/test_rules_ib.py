"""credit_deadlock (credit loops vs a stalled port) and InfiniBand congestion."""

from __future__ import annotations

import pytest

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


def test_stalled_port_outside_a_cycle_is_a_stalled_credit_deadlock():
    """A port stalled alone is credit_deadlock role stalled (INTERFACES 4), never congestion."""
    fab = ib_ring(4)
    fab.poll(n=2)
    stall(fab, "sw1", "3")  # toward a dead HCA
    stall(fab, "sw0", "1")  # blocked behind it: sw0:1 -> sw1 -> sw1:3, a chain, not a cycle
    fab.poll(n=2)
    got = fab.active()
    assert set(got) == {("sw1", "3", None, "stalled"), ("sw0", "1", None, "stalled")}
    f = got[("sw1", "3", None, "stalled")]
    assert f.kind == "credit_deadlock" and f.severity == "critical" and f.evidence["stalled"] is True
    assert f.peer_device == "hca1" and f.evidence["incident"] == "stall:sw1:3"
    assert "stalled toward hca1 1" in f.summary


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
