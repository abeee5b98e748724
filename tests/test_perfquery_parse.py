"""perfquery output parser and the collector's parse (payload -> ParseResult)."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from fabricmon import collectors
from fabricmon.collectors.base import ParseError
from fabricmon.collectors.perfquery.parse import COUNTERS, PerfqueryState, parse_payload, parse_perfquery, port_counters
from fabricmon.core.model import Counters, Sample, TargetSpec
from fabricmon.core.vocabulary import COUNTERS as VOCAB
from tests.conftest import public_fixture

TREY = "ib/treydock__infiniband_exporter/collectors__fixtures__perfquery__"
CASES = Path(__file__).resolve().parent.parent / "collectors" / "perfquery" / "testcases"
SPEC = TargetSpec(name="ib-fabric", source="perfquery")


def _read(rel: str) -> str:
    return public_fixture(rel).read_text()


def port_samples(device, port, ext, basic) -> list[Sample]:
    """One port's readings from its blocks, as objects."""
    out = Counters()
    port_counters(out, device, port, ext, basic)
    return list(out)


def _by_counter(samples):
    return {s.counter: s for s in samples}


def _case(name: str) -> dict:
    return json.loads((CASES / name / "payload.json").read_text())


def test_every_mapping_targets_the_vocabulary():
    assert {d.counter for d in COUNTERS.values()} <= set(VOCAB)


def test_extended_switch_two_ports():
    blocks = parse_perfquery(_read(TREY + "0x7cfe9003009ce5b0.out"))
    assert [(b.lid, b.port, b.extended, b.cap_mask, b.cap_mask2) for b in blocks] == [
        (1719, 1, True, 0x5300, 0x2),
        (1719, 2, True, 0x5300, 0x2),
    ]
    s = _by_counter(port_samples("sw", "1", blocks[0], None))
    # PortXmitData is in 4-byte words: the raw value is kept, scale 4 makes it bytes.
    assert (s["tx_bytes"].value, s["tx_bytes"].scale, s["tx_bytes"].bits, s["tx_bytes"].saturating) == (36298026860928, 4.0, 64, False)
    assert (s["rx_bytes"].value, s["rx_bytes"].scale) == (12279028775751, 4.0)
    assert s["tx_packets"].value == 101733204203
    assert s["rx_packets"].value == 32262508468
    # CapMask2 bit 1 set: the 64-bit error counters and XmitWait are real.
    assert (s["xmit_wait"].value, s["xmit_wait"].bits) == (22730501, 64)
    assert s["symbol_errors"].value == 0
    assert len(s) == 18  # all mapped counters; Unicast/Multicast have no vocabulary entry
    s2 = _by_counter(port_samples("sw", "2", blocks[1], None))
    assert (s2["xmit_wait"].value, s2["tx_bytes"].value, s2["rx_bytes"].value) == (36510964, 26006570014026, 39078804993378)


def test_extended_nonzero_errors():
    (block,) = parse_perfquery(_read(TREY + "0x506b4b03005c2740.out"))
    s = _by_counter(port_samples("sw", "1", block, None))
    assert s["link_downed"].value == 1
    assert s["rx_switch_relay_errors"].value == 7
    assert s["tx_discards"].value == 20046
    assert s["xmit_wait"].value == 41864608
    assert all(x.bits == 64 and not x.saturating for x in s.values())


def test_capmask2_zero_hca_drops_extended_errors():
    (block,) = parse_perfquery(_read(TREY + "0x7cfe9003003b4b96.out"))
    assert (block.lid, block.cap_mask, block.cap_mask2) == (133, 0x5A00, 0)
    s = _by_counter(port_samples("hca", "1", block, None))
    # Only the data and packet counters survive; the printed zeros of the errors mean "not supported".
    assert set(s) == {"tx_bytes", "rx_bytes", "tx_packets", "rx_packets"}
    assert (s["tx_bytes"].value, s["rx_bytes"].value) == (37108676853855, 37225401952885)
    assert (s["tx_packets"].value, s["rx_packets"].value) == (96917117320, 100583719365)


def test_capmask2_zero_falls_back_to_basic_block():
    payload = _case("capmask2_zero_hca_basic")
    ext, basic = (parse_perfquery(t)[0] for t in payload["perfquery"])
    s = _by_counter(port_samples("o0001 HCA-1", "1", ext, basic))
    # Data and packets: the 64-bit values win over the basic (saturated) ones.
    assert (s["tx_bytes"].value, s["tx_bytes"].bits, s["tx_bytes"].saturating) == (9876543210987, 64, False)
    assert (s["tx_packets"].value, s["tx_packets"].bits) == (28825338611, 64)
    # Errors come from the basic block, with their basic widths, saturating.
    assert (s["symbol_errors"].value, s["symbol_errors"].bits, s["symbol_errors"].saturating) == (65535, 16, True)
    assert (s["link_error_recovery"].value, s["link_error_recovery"].bits) == (255, 8)
    assert (s["local_link_integrity_errors"].value, s["local_link_integrity_errors"].bits) == (15, 4)
    assert (s["xmit_wait"].value, s["xmit_wait"].bits, s["xmit_wait"].saturating) == (4294967295, 32, True)
    # CapMask 0x5A00 has no bit 15: QP1Dropped is not supported, so its value is not emitted.
    assert "qp1_dropped" not in s


def test_basic_counter_widths_and_saturation():
    text = (
        "# Port counters: Lid 1 port 1 (CapMask: 0x5A00)\n"
        "PortSelect:......................1\n"
        "SymbolErrorCounter:..............65535\n"
        "LinkDownedCounter:...............255\n"
        "ExcessiveBufferOverrunErrors:....15\n"
        "PortXmitData:....................4294967295\n"
        "PortXmitWait:....................4294967295\n"
    )
    (block,) = parse_perfquery(text)
    assert not block.extended
    s = _by_counter(port_samples("d", "1", None, block))
    assert (s["symbol_errors"].value, s["symbol_errors"].bits, s["symbol_errors"].saturating) == (65535, 16, True)
    assert (s["link_downed"].bits, s["excessive_buffer_overrun_errors"].bits) == (8, 4)
    assert (s["tx_bytes"].value, s["tx_bytes"].bits, s["tx_bytes"].scale, s["tx_bytes"].saturating) == (4294967295, 32, 4.0, True)
    assert (s["xmit_wait"].value, s["xmit_wait"].bits) == (4294967295, 32)


def test_basic_without_xmitwait_support():
    text = "# Port counters: Lid 1 port 1 (CapMask: 0x0100)\nPortXmitWait:....................0\nPortXmitData:....................5\n"
    (block,) = parse_perfquery(text)
    assert set(_by_counter(port_samples("d", "1", None, block))) == {"tx_bytes"}


def test_all_zero_extended_block_from_issue_16():
    (block,) = parse_perfquery(_read("ib/linux-rdma__infiniband-diags/issues__16__perfquery-x-output.txt"))
    assert (block.lid, block.port, block.cap_mask2) == (10, 1, 2)
    s = port_samples("d", "1", block, None)
    assert len(s) == 18 and all(x.value == 0 and x.bits == 64 for x in s)


def test_empty_output_and_detail_blocks():
    assert parse_perfquery(_read(TREY + "0x506b4b0300cc02a6.out")) == []
    assert parse_perfquery(_read("ib/treydock__infiniband_exporter/collectors__fixtures__perfquery-rcv-error__0x506b4b03005c2740-1.out")) == []


def test_noise_wrapped_header_aggregate_and_bad_values():
    text = (
        "ibwarn: [123] _do_madrpc: recv failed: Connection timed out\n"
        "# Port extended counters: Lid 7 port 3 (CapMask: 0x5300\n"
        "CapMask2: 0x0000002)\n"
        "PortXmitData:....................0x10\n"
        "PortRcvData:.....................banana\n"
        "src/query_smp.c:195; umad (DR path slid 0; dlid 0; 0,1) bad status 110; Connection timed out\n"
        "# Port counters: Lid 7 port 255 (CapMask: 0x5300)\n"
        "PortXmitData:....................99\n"
        "# Port counters: Lid 7 port 4 (CapMask: 0x5300)\n"
        "SymbolErrorCounter:..............65536\n"
    )
    blocks = parse_perfquery(text)
    assert [(b.lid, b.port, b.extended) for b in blocks] == [(7, 3, True), (7, 4, False)]
    assert blocks[0].cap_mask2 == 2
    assert blocks[0].values == {"PortXmitData": 16}
    assert blocks[0].invalid == ["PortRcvData"]
    assert blocks[1].invalid == ["SymbolErrorCounter"]  # above the 16-bit basic width


def test_collector_parse_with_topology_then_without():
    cls = collectors.get("perfquery")
    first, state = cls.parse(_case("edr_switch_topology"), SPEC, cls.new_state())
    assert first.links is not None and len(first.links) == 8
    s = {(x.device, x.port, x.counter): x for x in first.counters}
    assert s[("ib-i1l1s01", "10", "tx_discards")].value == 20046
    assert s[("o0002 HCA-1", "1", "xmit_wait")].value == 17
    kinds = {d.name: (d.kind, d.guid) for d in first.devices}
    assert kinds["ib-i1l1s01"] == ("switch", "0x7cfe9003009ce5b0")
    assert kinds["o0001 HCA-1"] == ("ca", "0x7cfe9003003b4bde")
    ports = {(p.device, p.port): p.lid for p in first.ports}
    assert ports[("ib-i1l1s01", "11")] == "1719" and ports[("o0002 HCA-1", "1")] == "133"
    g = {(x.device, x.port, x.name): x.value for x in first.gauges}
    assert g[("o0002 HCA-1", "1", "link_width_lanes")] == 2
    assert g[("o0002 HCA-1", "1", "link_speed_bytes")] == 2 * 25e9 / 8
    assert g[("ib-i1l1s01", "10", "link_up")] == 1
    assert first.warnings == []

    # The next poll carries no topology: the one in state names the devices; no links this time.
    later, _ = cls.parse({"perfquery": _case("capmask2_zero_hca_basic")["perfquery"]}, SPEC, state)
    assert later.links is None
    assert {x.device for x in later.counters} == {"o0001 HCA-1"}
    assert later.warnings == []


def test_topology_refresh_marks_vanished_ports_down():
    payload = _case("edr_switch_topology")
    _, state = parse_payload(payload, PerfqueryState())
    shrunk = "\n".join(ln for ln in payload["ibnetdiscover"].splitlines() if not ln.startswith("[11]"))
    res, _ = parse_payload({"ibnetdiscover": shrunk, "perfquery": []}, state)
    g = {(x.device, x.port, x.name): x.value for x in res.gauges}
    assert g[("ib-i1l1s01", "11", "link_up")] == 0
    assert g[("ib-i1l1s01", "10", "link_up")] == 1


def test_unknown_lid_and_empty_topology():
    _, state = parse_payload(_case("edr_switch_topology"), PerfqueryState())
    text = "# Port extended counters: Lid 4242 port 1 (CapMask: 0x5300 CapMask2: 0x0000002)\nPortXmitData:....................8\n"
    res, kept = parse_payload({"ibnetdiscover": "# nothing here\n", "perfquery": [text]}, state)
    assert [(x.device, x.port, x.counter, x.value) for x in res.counters] == [("lid-4242", "1", "tx_bytes", 8)]
    assert res.links is None
    assert any("holds no nodes" in w for w in res.warnings)
    assert any("4242" in w and "not in the ibnetdiscover topology" in w for w in res.warnings)
    assert kept.topology is state.topology and kept.topology is not None and kept.topology.nodes  # the previous topology was kept


def test_bad_payload_shapes_raise_parse_error():
    for bad in (None, [], {"perfquery": "text"}, {"perfquery": [1]}, {"ibnetdiscover": 5, "perfquery": []}):
        try:
            parse_payload(bad, PerfqueryState())
        except ParseError:
            continue
        raise AssertionError(f"{bad!r} should raise ParseError")


_PQ_LINE = st.sampled_from([
    "# Port extended counters: Lid 1719 port 1 (CapMask: 0x5300 CapMask2: 0x0000002)",
    "# Port extended counters: Lid 133 port 1 (CapMask: 0x5A00 CapMask2: 0x0000000)",
    "# Port counters: Lid 1 port 1 (CapMask: 0x5A00)",
    "# Port counters: Lid 1 port 255 (CapMask: 0x5A00)",
    "# Port counters: Lid 1 port 1 (CapMask: 0x5A00",
    "PortXmitData:....................36298026860928",
    "PortXmitWait:....................4294967295",
    "SymbolErrorCounter:..............65535",
    "QP1Dropped:......................0x10",
    "PortRcvData:.....................-1",
    "ibwarn: [1] query_and_dump: query failed",
])


@settings(max_examples=150, deadline=None)
@given(st.lists(st.one_of(_PQ_LINE, st.text(max_size=50)), max_size=20))
def test_fuzz_perfquery_only_parse_error(lines):
    try:
        for b in parse_perfquery("\n".join(lines)):
            port_samples("d", str(b.port), b if b.extended else None, None if b.extended else b)
    except ParseError:
        pass


_TOPO_LINE = st.sampled_from([
    'Switch\t36 "S-7cfe9003009ce5b0"\t\t# "ib-i1l1s01" enhanced port 0 lid 1719 lmc 0',
    '[10]\t"H-7cfe9003003b4bde"[1](7cfe9003003b4bde) \t\t# "o0001 HCA-1" lid 134 4xEDR',
    'Ca\t1 "H-7cfe9003003b4bde"\t\t# "o0001 HCA-1"',
    '[1](7cfe9003003b4bde) \t"S-7cfe9003009ce5b0"[10]\t\t# lid 134 lmc 7 "ib-i1l1s01" lid 1719 4xEDR',
])
_JSONISH = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=10,
)


@settings(max_examples=150, deadline=None)
@given(
    st.one_of(
        st.fixed_dictionaries(
            {"perfquery": st.lists(st.lists(st.one_of(_PQ_LINE, st.text(max_size=30)), max_size=8).map("\n".join), max_size=3)},
            optional={"ibnetdiscover": st.lists(st.one_of(_TOPO_LINE, st.text(max_size=30)), max_size=8).map("\n".join)},
        ),
        _JSONISH,
    )
)
def test_fuzz_collector_parse_only_parse_error(payload):
    with contextlib.suppress(ParseError):
        collectors.get("perfquery").parse(payload, SPEC, collectors.get("perfquery").new_state())
