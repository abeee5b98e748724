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
    fab.rate(dev, port, "xmit_wait", FULL_WAIT)
    fab.rate(dev, port, "tx_bytes", 0.0, scale=4)


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


def test_stalled_port_outside_a_cycle_is_critical_congestion():
    fab = ib_ring(4)
    fab.poll(n=2)
    stall(fab, "sw1", "3")  # toward a dead HCA
    stall(fab, "sw0", "1")  # blocked behind it: sw0:1 -> sw1 -> sw1:3, a chain, not a cycle
    fab.poll(n=2)
    got = fab.active()
    assert set(got) == {("sw1", "3", None, None), ("sw0", "1", None, None)}
    f = got[("sw1", "3", None, None)]
    assert f.kind == "congestion" and f.severity == "critical" and f.evidence["stalled"] is True
    assert f.peer_device == "hca1"


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
