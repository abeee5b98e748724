"""What the agent holds once instead of once per port or per copy (docs/scaling.md, "Where
the memory goes"): each test checks one of those sharings and that the values read through
it are still the right ones."""

from __future__ import annotations

import asyncio

import numpy as np

from fabricmon.agent.core.guid import norm_guid
from fabricmon.agent.detector import linkrate
from fabricmon.agent.exporter import metrics
from fabricmon.agent.exporter.exposition import WRITE_SLICE, build, pieces, render
from fabricmon.agent.exporter.server import ChunksPayload
from fabricmon.agent.pipeline import Pipeline
from fabricmon.agent.store import CounterStore
from fabricmon.core.model import Gauge, Sample


def _pipeline() -> Pipeline:
    p = Pipeline([], [])
    p.store.update([Sample("sw1", str(i), "port_xmit_data", 100 * i) for i in range(1, 40)], 1.0, target="t1")
    return p


def test_port_info_block_is_one_bytes_object_shared_by_the_cache_and_the_body():
    p = _pipeline()
    first = metrics.topology_families(p)[1]
    block = first.lines[0]
    assert isinstance(block, bytes)
    assert metrics.topology_families(p)[1].lines[0] is block  # the cache's, not a new copy
    body = build([first])
    assert any(part is block for part in body.parts)  # the body holds that object
    text, _om = render([metrics.topology_families(p)[1]])
    lines = [ln for ln in text.decode().split("\n") if ln and not ln.startswith("#")]
    assert len(lines) == 39 and lines[0].startswith('fabricmon_port_info{device="sw1",port="1",')
    assert metrics.topology_families(p)[1].samples() == lines  # (build consumed the first family's lines)


def test_a_large_part_is_written_in_slices_that_add_up_to_it():
    big = bytes(range(256)) * (3 * WRITE_SLICE // 256 + 7)
    parts = [b"# HELP x\n", big, b"tail\n"]

    class Writer:
        def __init__(self) -> None:
            self.writes: list[bytes] = []

        async def write(self, data: bytes | memoryview) -> None:
            self.writes.append(bytes(data))

    w = Writer()
    asyncio.run(ChunksPayload(parts, "text/plain").write(w))  # type: ignore[arg-type]
    assert max(len(c) for c in w.writes) <= WRITE_SLICE
    assert len(w.writes) == 2 + -(-len(big) // WRITE_SLICE)
    assert b"".join(w.writes) == b"".join(parts)


def test_small_parts_are_written_together_up_to_a_slice():
    """Each write is a system call after which the loop waits for the GIL: a body of many
    small blocks goes out in few writes, none above WRITE_SLICE, in order."""
    parts = [bytes([i % 251]) * (1000 + i) for i in range(3000)]  # about 7.5 MB in 3,000 parts
    got = [bytes(p) for p in pieces(parts)]
    assert b"".join(got) == b"".join(parts)
    assert max(map(len, got)) <= WRITE_SLICE
    assert len(got) <= 2 * -(-sum(map(len, parts)) // WRITE_SLICE)
    assert list(pieces([])) == [] and [bytes(p) for p in pieces([b"", b"a", b""])] == [b"a"]
    block = bytes(WRITE_SLICE // 2)
    sent = list(pieces([b"# HELP x\n", block, b"\n", block]))
    assert [len(p) for p in sent] == [9, len(block), 1, len(block)]
    assert sent[1] is block and sent[3] is block  # a body's block goes out as it is held: no copy per scrape


def test_device_clock_columns_exist_only_once_a_series_has_a_device_time():
    store = CounterStore()
    ports = [str(i) for i in range(1, 9)]
    for k in range(3):
        store.update([Sample("sw1", pn, "port_xmit_data", 1000 * k + i) for i, pn in enumerate(ports)], 10.0 * k)
    assert store._t.dev_t is None and store._t.has_dev is None
    se = store.port(("sw1", "3")).counter("port_xmit_data")
    assert se.device_t is None and se.dt == 10.0
    # Another device starts reporting its clock: the columns appear, the first device's rows read none.
    store.update([Sample("sw2", "1", "port_xmit_data", 5)], 30.0, clocks={"sw2": 500.0})
    store.update([Sample("sw2", "1", "port_xmit_data", 9), *(Sample("sw1", pn, "port_xmit_data", 5000) for pn in ports)],
                 40.0, clocks={"sw2": 502.5})
    assert store._t.dev_t is not None
    other = store.port(("sw2", "1")).counter("port_xmit_data")
    assert other.device_t == 502.5 and other.dt == 2.5 and other.delta == 4
    assert se.device_t is None and se.dt == 20.0  # the poll clock: sw1 was last read at 20
    saved = store.save()
    again = CounterStore()
    again.restore(saved, 40.0)
    assert again.port(("sw2", "1")).counter("port_xmit_data").device_t == 502.5
    assert again.port(("sw1", "3")).counter("port_xmit_data").device_t is None


def test_rates_and_guids_already_in_form_are_not_copied_per_port():
    store = CounterStore()
    gauges = [Gauge("sw1", str(i), name, v) for i in range(1, 5)
              for name, v in (("link_width_lanes", 4.0), ("link_speed_bytes", 2.5e10))]
    store.update([Sample("sw1", str(i), "port_xmit_data", i) for i in range(1, 5)], 1.0, gauges=gauges)
    rates = [linkrate.active(store.port(("sw1", str(i)))) for i in range(1, 5)]
    assert rates[0] == linkrate.Rate(4.0, 2.5e10) and all(r is rates[0] for r in rates)
    guid = "0x0c42a103008b40d0"
    assert norm_guid(guid) is guid
    assert norm_guid("0C42A103008B40D0") == guid and norm_guid(np.uint64(1).item()) == "0x0000000000000001"


def test_a_port_keeps_its_one_view_alone_and_the_same_objects_when_it_has_more():
    store = CounterStore()
    store.update([Sample("sw1", "1", name, 7) for name in ("port_xmit_data", "port_xmit_wait", "symbol_errors")], 1.0)
    e = store.port(("sw1", "1"))
    wait = e.counter("port_xmit_wait")
    assert e.views is wait and e.counter("port_xmit_wait") is wait  # one view: no dict
    errors = e.counter("symbol_errors")
    assert isinstance(e.views, dict) and e.counter("port_xmit_wait") is wait and e.counter("symbol_errors") is errors
    assert e.series[("port_xmit_wait", ())] is wait and e.series[("port_xmit_data", ())] is not e.series[("port_xmit_data", ())]
    store.update([Sample("sw1", "1", "port_xmit_wait", 9)], 11.0)
    assert wait.total == 9 and wait.delta == 2


def test_the_newest_point_is_the_reading_itself_and_the_ring_holds_the_others():
    store = CounterStore(history=4)
    for k in range(6):
        store.update([Sample("sw1", "1", "port_xmit_wait", 10 * k * k)], 10.0 * k)
    assert store._t.hist_v.shape[1] == 3  # history - 1 slots: the newest point is (poll_i, total)
    se = store.port(("sw1", "1")).counter("port_xmit_wait")
    assert se.history == [(20.0, 40.0), (30.0, 90.0), (40.0, 160.0), (50.0, 250.0)]
    assert se.moved_in_history() and se.increases(3) == 3
    img = store.image(history=2)
    assert img.columns["hist_v"].tolist() == [[160.0, 250.0]] and img.columns["npts"].tolist() == [2]
    again = CounterStore(history=4)
    again.restore(store.save(), 50.0)
    assert again.port(("sw1", "1")).counter("port_xmit_wait").history == se.history


def test_a_key_column_reads_as_the_list_of_keys_it_codes():
    from array import array

    from fabricmon.core.model import Counters, KeyColumn

    a, b, c = ("port_xmit_data", ()), ("port_rcv_data", ()), ("port_xmit_wait", ())
    listed = [a, b, a, c, b, a]
    col = KeyColumn((a, b, c), array("H", [0, 1, 0, 2, 1, 0]))
    assert col == listed and listed == col and list(col) == listed and len(col) == 6
    assert col[3] == c and tuple(col[1:4]) == (b, a, c) and col[1:4] == listed[1:4]
    assert col != listed[:5] and col != [*listed[:5], b]
    assert KeyColumn((a, b, c, a), np.array([0, 1, 3, 2, 1, 0], np.uint16)) == col  # another table, the same keys
    cnt = Counters.bulk([("sw1", "1")], [0] * 6, col, list(range(6)), [64] * 6, [False] * 6, [1.0] * 6, (a, b, c))
    cnt.relabel(key=lambda name, sub: (name.upper(), sub))
    assert isinstance(cnt.keys, KeyColumn) and cnt.keys.codes is col.codes
    assert list(cnt.keys) == [(k[0].upper(), k[1]) for k in listed]
