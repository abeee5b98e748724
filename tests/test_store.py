"""Counter store: every wrap, saturation, reset and clock case."""

from __future__ import annotations

import pytest

from fabricmon.agent.store import CLOCK, FIRST, OK, RESET, SATURATED, WRAP, CounterStore
from fabricmon.core.model import Gauge, Sample

D, P = "sw1", "1"


def feed(store: CounterStore, t: float, value: int, counter: str = "tx_bytes", clock: float | None = None, **kw):
    clocks = {D: clock} if clock is not None else None
    store.update([Sample(D, P, counter, value, **kw)], t, clocks)
    return store.get(D, P, counter)


def test_first_sample_has_no_rate_and_total_starts_at_value():
    s = CounterStore()
    se = feed(s, 100.0, 5000)
    assert se.status == FIRST
    assert se.rate is None and se.delta is None
    assert se.total == 5000


def test_counter64_rate_and_scale():
    s = CounterStore()
    feed(s, 100.0, 1000, scale=4)
    se = feed(s, 110.0, 3500, scale=4)
    assert se.status == OK
    assert se.delta == 10000  # 2500 words x 4 bytes
    assert se.rate == pytest.approx(1000.0)
    assert se.total == 14000


def test_counter32_wrap_is_one_wrap():
    s = CounterStore()
    feed(s, 0.0, 2**32 - 1000, bits=32)
    se = feed(s, 10.0, 500, bits=32)
    assert se.status == WRAP
    assert se.delta == 1500
    assert se.rate == pytest.approx(150.0)


def test_counter32_large_drop_is_reset_not_wrap():
    # Implied increase over half the range: a reset (device cleared its counters).
    s = CounterStore()
    feed(s, 0.0, 3_000_000_000, bits=32)
    se = feed(s, 10.0, 1_000_000_000, bits=32)
    assert se.status == RESET
    assert se.rate is None and se.delta is None
    # The next interval is measured from the new value.
    se = feed(s, 20.0, 1_000_000_100, bits=32)
    assert se.status == OK and se.delta == 100


def test_counter32_wrap_but_device_rebooted_is_reset():
    s = CounterStore()
    feed(s, 0.0, 2**32 - 10, bits=32, clock=5000.0)
    se = feed(s, 10.0, 5, bits=32, clock=3.0)  # sysUpTime went backwards: reboot
    assert se.status == CLOCK
    assert se.rate is None


def test_counter64_decrease_is_reset_without_spike():
    s = CounterStore()
    feed(s, 0.0, 10**12)
    total_before = s.get(D, P, "tx_bytes").total
    se = feed(s, 10.0, 42)
    assert se.status == RESET
    assert se.rate is None
    assert se.total == total_before  # no negative step, no spike
    se = feed(s, 20.0, 142)
    assert se.rate == pytest.approx(10.0)
    assert se.total == total_before + 100


def test_saturating_counter_at_cap_gives_no_rate():
    s = CounterStore()
    feed(s, 0.0, 65000, counter="symbol_errors", bits=16, saturating=True)
    se = feed(s, 10.0, 65535, counter="symbol_errors", bits=16, saturating=True)
    assert se.status == SATURATED
    assert se.rate is None
    assert se.total == 65535  # the observed rise is kept, the rate is not claimed
    se = feed(s, 20.0, 65535, counter="symbol_errors", bits=16, saturating=True)
    assert se.status == SATURATED and se.rate is None and se.total == 65535


def test_saturated_then_cleared_is_reset():
    s = CounterStore()
    feed(s, 0.0, 2**32 - 1, counter="xmit_wait", bits=32, saturating=True)
    se = feed(s, 10.0, 100, counter="xmit_wait", bits=32, saturating=True)
    assert se.status == RESET and se.rate is None
    se = feed(s, 20.0, 300, counter="xmit_wait", bits=32, saturating=True)
    assert se.status == OK and se.rate == pytest.approx(20.0)


def test_saturating_counter_never_wraps():
    s = CounterStore()
    feed(s, 0.0, 200, counter="link_downed", bits=8, saturating=True)
    se = feed(s, 10.0, 3, counter="link_downed", bits=8, saturating=True)
    assert se.status == RESET  # an 8-bit saturating counter going down was cleared, not wrapped


def test_width_change_is_reset():
    s = CounterStore()
    feed(s, 0.0, 1000, bits=32)
    se = feed(s, 10.0, 5000, bits=64)
    assert se.status == RESET and se.rate is None
    se = feed(s, 20.0, 6000, bits=64)
    assert se.rate == pytest.approx(100.0)


def test_device_clock_is_used_for_the_interval():
    s = CounterStore()
    feed(s, 100.0, 0, clock=1000.0)
    # The poll arrived 10 s later by the agent clock, but the device says 5 s passed.
    se = feed(s, 110.0, 500, clock=1005.0)
    assert se.dt == pytest.approx(5.0)
    assert se.rate == pytest.approx(100.0)


def test_poll_clock_when_device_clock_missing_on_one_side():
    s = CounterStore()
    feed(s, 100.0, 0)
    se = feed(s, 110.0, 500, clock=1005.0)
    assert se.dt == pytest.approx(10.0)


def test_duplicate_poll_time_is_invalid_interval():
    s = CounterStore()
    feed(s, 100.0, 0)
    se = feed(s, 100.0, 50)
    assert se.status == CLOCK and se.rate is None


def test_window_over_history():
    s = CounterStore(history=4)
    for i in range(6):
        feed(s, 10.0 * i, 100 * i)
    se = s.get(D, P, "tx_bytes")
    assert len(se.history) == 4
    inc, elapsed = se.window(20.0)
    assert inc == 200 and elapsed == 20.0
    inc, elapsed = se.window(1000.0)  # longer than the history: the oldest kept point
    assert elapsed == 30.0 and inc == 300


def test_priority_series_are_separate():
    s = CounterStore()
    s.update([Sample(D, P, "pfc_rx_pause_frames", 10, sub=(3,)), Sample(D, P, "pfc_rx_pause_frames", 20, sub=(4,))], 0.0)
    s.update([Sample(D, P, "pfc_rx_pause_frames", 15, sub=(3,)), Sample(D, P, "pfc_rx_pause_frames", 20, sub=(4,))], 10.0)
    assert s.delta(D, P, "pfc_rx_pause_frames", (3,)) == 5
    assert s.delta(D, P, "pfc_rx_pause_frames", (4,)) == 0


def test_gauges_and_expiry():
    s = CounterStore(stale_after=60.0)
    s.update([Sample(D, P, "tx_bytes", 1)], 0.0, gauges=[Gauge(D, P, "link_up", 1)], target="t1")
    s.update([Sample("sw2", P, "tx_bytes", 1)], 50.0, target="t2")
    assert s.gauge(D, P, "link_up") == 1.0
    assert s.expire(100.0) == 1  # sw1 last seen at 0 < 100 - 60
    assert s.get(D, P, "tx_bytes") is None
    assert s.get("sw2", P, "tx_bytes") is not None
    assert s.series_count() == 1


def test_memory_is_proportional_to_series():
    s = CounterStore(history=3)
    for t in range(50):
        s.update([Sample(D, str(p), "tx_bytes", t * 10) for p in range(20)], float(t))
    assert s.series_count() == 20
    assert all(len(se.history) <= 3 for _, _, se in s.iter_series())


def test_changes_list_exactly_the_counters_that_moved_and_the_gauges_that_changed():
    """The detector starts from these sets, so they must be exact: a counter whose total
    went up (valid delta or a rise to a saturating cap), never a reset, a first reading
    or a traffic counter; a state gauge whose value changed, with its previous value."""
    s = CounterStore()
    ports = [(f"sw{i}", str(p)) for i in range(3) for p in range(4)]

    def poll(t: float, step: dict[tuple[str, str], int], up: dict[tuple[str, str], float]) -> None:
        samples = []
        for d, p in ports:
            n = step.get((d, p), 0)
            samples += [Sample(d, p, "tx_bytes", int(t) * 1000), Sample(d, p, "symbol_errors", n, bits=16, saturating=True),
                        Sample(d, p, "pfc_rx_pause_frames", n, sub=(3,))]
        s.update(samples, t, gauges=[Gauge(d, p, "link_up", up.get((d, p), 1.0)) for d, p in ports]
                 + [Gauge(d, p, "temperature_celsius", t) for d, p in ports])

    poll(10.0, {}, {})
    first = s.take_changes()
    assert first.moved == {}  # first readings have no interval
    assert set(first.gauges) == {"link_up"} and all(v is None for v in first.gauges["link_up"].values())
    poll(20.0, {("sw0", "1"): 5, ("sw2", "3"): 65535}, {("sw1", "2"): 0.0})
    ch = s.take_changes()
    assert ch.ports(["symbol_errors"]) == {("sw0", "1"), ("sw2", "3")}  # incl. the rise to the 16-bit cap
    assert ch.ports(["pfc_rx_pause_frames"]) == {("sw0", "1"), ("sw2", "3")}
    assert ch.moved["symbol_errors"][("sw0", "1")] is s.get("sw0", "1", "symbol_errors")
    assert "tx_bytes" not in ch.moved  # traffic moves everywhere: not tracked
    assert ch.gauges == {"link_up": {("sw1", "2"): 1.0}}  # temperature is not a state gauge
    poll(30.0, {("sw2", "3"): 65535}, {})  # stuck at the cap: no increase; sw0 cleared: a reset
    ch = s.take_changes()
    assert ch.ports(["symbol_errors", "pfc_rx_pause_frames"]) == set()
    assert ch.gauges == {"link_up": {("sw1", "2"): 0.0}}
    assert s.take_changes().moved == {}  # taken: empty until the next update


def test_bounds_refuse_new_ports_and_series_and_count_them():
    """A device (or recording) inventing ports or sub-labels without end cannot grow the store."""
    store = CounterStore(max_ports=2, max_series_per_port=3)
    samples = [Sample(f"sw{i}", "p1", "rx_bytes", 10) for i in range(5)]
    samples += [Sample("sw0", "p1", "rx_pfc_frames", 1, sub=(prio,)) for prio in range(6)]
    store.update(samples, 1.0)
    assert sorted(store.ports) == [("sw0", "p1"), ("sw1", "p1")]
    assert store.port(("sw0", "p1")).series_count() == 3  # rx_bytes + 2 priorities
    assert store.refused == {"port": 3, "series": 4}
    store.update([Sample("sw0", "p1", "rx_bytes", 20)], 2.0)  # known series keep updating
    assert store.port(("sw0", "p1")).counter("rx_bytes").delta == 10
