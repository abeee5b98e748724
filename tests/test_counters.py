"""Counters: the columns parsers write readings into (agent/core/model.py)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fabricmon.agent.store import CounterStore
from fabricmon.core.model import Counters, PortLayout, Sample, series_key

_SAMPLE = st.builds(
    Sample,
    device=st.sampled_from(["sw1", "sw2"]),
    port=st.sampled_from(["1", "2", "Ethernet0"]),
    counter=st.sampled_from(["tx_bytes", "rx_bytes", "pfc_rx_pause_frames"]),
    value=st.integers(0, 2**64 - 1),
    sub=st.sampled_from([(), (3,), ("buffer", "503")]),
    bits=st.sampled_from([8, 32, 64]),
    saturating=st.booleans(),
    scale=st.sampled_from([1.0, 4.0, 0.001]),
)


@given(st.lists(_SAMPLE, max_size=40))
def test_samples_round_trip_through_the_columns(samples):
    c = Counters.of(samples)
    assert list(c) == samples and len(c) == len(samples)
    # One group per run of readings of one port, in the order they came.
    runs = [(s.device, s.port) for i, s in enumerate(samples) if i == 0 or (samples[i - 1].device, samples[i - 1].port) != (s.device, s.port)]
    assert c.ports == runs
    assert all(k is series_key(*k) for k in c.keys)  # shared key tuples: the store compares references


def test_a_port_at_a_time_is_the_same_as_reading_by_reading():
    layout = PortLayout.of([("tx_bytes", (), 64, False, 4.0), ("link_downed", (), 8, True, 1.0),
                            ("pfc_rx_pause_frames", (3,), 64, False, 1.0)])
    by_port, by_reading = Counters(), Counters()
    for device, port, values in (("sw1", "1", [10, 1, 7]), ("sw1", "2", [20, 0, 0]), ("sw2", "1", [5, 255, 9])):
        by_port.add_port(device, port, layout, values)
        for (counter, sub), bits, sat, scale, v in zip(layout.keys, layout.bits, layout.saturating, layout.scale, values,
                                                       strict=True):
            by_reading.add(device, port, counter, v, sub, bits, sat, scale)
    assert list(by_port) == list(by_reading)
    assert (by_port.ports, by_port.port_of) == ([("sw1", "1"), ("sw1", "2"), ("sw2", "1")], [0, 0, 0, 1, 1, 1, 2, 2, 2])
    with pytest.raises(ValueError, match="2 values for a layout of 3 counters"):
        by_port.add_port("sw3", "1", layout, [1, 2])
    by_port.add_port("sw3", "1", PortLayout.of([]), [])  # a port without readings (a block of zeros it cannot use)
    assert by_port.ports[-1] == ("sw2", "1") and len(by_port) == 9


def test_relabel_maps_each_distinct_key_once_and_keeps_unchanged_lists():
    c = Counters.of([Sample("sw1", "1", "pfc_rx_pause_frames", 1, ("3",)), Sample("sw1", "1", "tx_bytes", 2),
                     Sample("sw1", "2", "pfc_rx_pause_frames", 3, ("3",))])
    keys = c.keys
    c.relabel(key=lambda name, sub: (name, sub))
    assert c.keys is keys  # nothing changed: not rebuilt
    seen: list[tuple] = []

    def numeric(name, sub):
        seen.append((name, sub))
        return name, tuple(int(x) for x in sub)

    c.relabel(key=numeric, port=lambda d, p: (d.upper(), p))
    assert sorted(seen) == [("pfc_rx_pause_frames", ("3",)), ("tx_bytes", ())]
    assert [(s.device, s.sub) for s in c] == [("SW1", (3,)), ("SW1", ()), ("SW1", (3,))]
    assert c.keys[0] is c.keys[2] is series_key("pfc_rx_pause_frames", (3,))


def test_the_store_takes_the_columns_as_the_objects():
    polls = [[Sample("sw1", "1", "tx_bytes", v, scale=4.0), Sample("sw1", "1", "link_downed", d, bits=8, saturating=True)]
             for v, d in ((100, 1), (300, 255), (50, 255))]
    by_objects, by_columns = CounterStore(), CounterStore()
    for k, samples in enumerate(polls):
        t = 1000.0 + 10 * k
        assert by_objects.update(samples, t, target="t") == by_columns.update_columns(Counters.of(samples).columns("t"), t)
    for name in ("tx_bytes", "link_downed"):
        a, b = by_objects.get("sw1", "1", name), by_columns.get("sw1", "1", name)
        assert (a.total, a.rate, a.status) == (b.total, b.rate, b.status)
    # 300 -> 50 on a 64-bit counter is a reset: no rate, and the total keeps what it had (the
    # next delta counts from 50); the 8-bit saturating counter sits at its cap.
    tx, downed = by_columns.get("sw1", "1", "tx_bytes"), by_columns.get("sw1", "1", "link_downed")
    assert (tx.status, tx.rate, tx.total) == ("reset", None, 300 * 4.0)
    assert (downed.status, downed.rate, downed.total) == ("saturated", None, 255.0)
