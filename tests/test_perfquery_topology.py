"""ibnetdiscover topology parser: real captures (Selene, a PuTTY-mangled director fabric, ibdiagnet NDR)."""

from __future__ import annotations

from functools import cache

from hypothesis import given, settings
from hypothesis import strategies as st

from fabricmon.collectors.base import ParseError
from fabricmon.collectors.perfquery.parse import parse_ibnetdiscover
from tests.conftest import public_fixture

SELENE = "ib/Mellanox__ufm_sdk_3.0/topo__selene.compute.txt"
DIRECTOR = "ib/Mellanox__ufm_sdk_3.0/plugins__UFM_NDT_Plugin__tests__positive_flow_ibnetdiscover__ibnetdiscover_director.txt"
NDR = "ib/gary-minghuili__infiniband-exporter/data__ibdiagnet2__ibdiagnet2.ibnetdiscover"
SMALL = "ib/Mellanox__ufm_sdk_3.0/topo__small_topo_file"


@cache
def _topo(rel: str):
    # newline="" keeps the CR/LF of the PuTTY capture as they are in the file.
    with open(public_fixture(rel), newline="") as f:
        return parse_ibnetdiscover(f.read())


def _kinds(topo) -> dict[str, int]:
    out: dict[str, int] = {}
    for n in topo.nodes.values():
        out[n.kind] = out.get(n.kind, 0) + 1
    return out


def test_selene_scale():
    topo = _topo(SELENE)
    assert _kinds(topo) == {"switch": 666, "ca": 4341}
    assert sum(len(n.ports) for n in topo.nodes.values()) == 25704
    assert topo.unparsed == 0
    # Every node has a LID here, so every node is addressable by LID.
    assert len(topo.by_lid) == 666 + 4341


def test_director_putty_capture():
    topo = _topo(DIRECTOR)
    assert _kinds(topo) == {"switch": 400, "ca": 2328}
    assert topo.unparsed == 0
    # "Switch41 ..." lost its tab; first switch of the file.
    sw = topo.nodes["0x0c42a10300a9b026"]
    assert (sw.kind, sw.nports, sw.lid, sw.description) == ("switch", 41, 3894, "MF0;sat11-0101-0927-20ib0:MQM8700/U1")
    p1 = sw.ports[1]
    assert (p1.peer_guid, p1.peer_port, p1.peer_lid, p1.width, p1.speed) == ("0x1c34da03005503dc", 1, None, "4x", "HDR")  # lid 65535
    assert sw.ports[9].peer_lid == 4049
    # A director line card.
    assert sw.ports[21].peer_desc == "MF0;sat11-0101-0903-01ib1-A:MCS8500/L16/U2"
    # A CA whose GUID lost its leading zero in parentheses: "[1](43f720300b23c1c)".
    ca = topo.nodes["0x043f720300b23c1c"]
    assert ca.name == "SAT111092710037 ibp213s0f0"
    assert (ca.ports[1].guid, ca.ports[1].lid, ca.ports[1].peer_port) == ("0x043f720300b23c1c", 4052, 16)
    assert topo.by_lid[4052] == (ca, 1)
    # CAs with lid 65535 are not addressable: no LID index entry for 65535.
    assert 65535 not in topo.by_lid


def test_ndr_ibdiagnet_labels_and_duplicate_names():
    topo = _topo(NDR)
    assert _kinds(topo) == {"switch": 9, "ca": 263}
    assert sum(len(n.ports) for n in topo.nodes.values()) == 542
    assert topo.unparsed == 0
    sw = topo.nodes["0xb0cf0e0300d33fc0"]
    assert (sw.name, sw.lid, sw.nports) == ("MF0;ib-switch-sequoia:MQM9700/U1", 180, 65)
    assert (sw.ports[1].label, sw.ports[1].peer_guid, sw.ports[1].peer_port) == ("1/1/1", "0xfc6a1c030091cf00", 63)
    assert sw.ports[1].speed_bytes == 4 * 100e9 / 8
    # Eight leaves share the description "Quantum-2 Mellanox Technologies": the GUID makes them unique.
    leaf = topo.nodes["0xfc6a1c030091cf00"]
    assert leaf.name == "Quantum-2 Mellanox Technologies 0xfc6a1c030091cf00"
    assert len({n.name for n in topo.nodes.values()}) == len(topo.nodes)
    # A CA port with a label and its GUID: "[1](B9D0F0/0/0/1)(5c25730300d0dc72)".
    ca = topo.nodes["0x5c25730300d0dc72"]
    assert (ca.ports[1].label, ca.ports[1].guid, ca.ports[1].lid) == ("B9D0F0/0/0/1", "0x5c25730300d0dc72", 130)
    # An aggregation node: "[1](1)(b0cf0e0300e5b948)".
    agg = topo.nodes["0xb0cf0e0300e5b948"]
    assert (agg.ports[1].label, agg.ports[1].guid, agg.ports[1].peer_port) == ("1", "0xb0cf0e0300e5b948", 65)


def test_small_topo_self_loops_and_speeds():
    topo = _topo(SMALL)
    assert _kinds(topo) == {"switch": 2, "ca": 13}
    sx = topo.nodes["0x0002c903007b78b0"]
    # Self-looped ports 25<->26 at FDR10 (10.3125 Gb/s raw, 64/66 coding -> 10 Gb/s a lane).
    assert (sx.ports[25].peer_guid, sx.ports[25].peer_port, sx.ports[25].speed) == (sx.guid, 26, "FDR10")
    assert sx.ports[25].speed_bytes == 4 * 10e9 / 8
    links = topo.links()
    assert len(links) == 32
    assert any(ln.device == ln.peer_device == "MF0;r-ufm-sw226:SX6036/U1" and (ln.port, ln.peer_port) == ("25", "26") for ln in links)
    # "[8]\t"H-0c42a103008b40d0"[1](c42a103008b40d0)": the peer GUID is padded back to 16 digits.
    assert sx.ports[8].peer_guid == "0x0c42a103008b40d0"
    hca = topo.nodes["0x0c42a103008b40d0"]
    assert (hca.name, hca.ports[1].lid, hca.ports[1].speed) == ("r-dmz-ufm134 HCA-1", 101, "FDR")
    assert topo.by_lid[101] == (hca, 1)
    assert topo.by_lid[19] == (sx, None)
    assert hca.ports[1].speed_bytes == 4 * 14.0625e9 * 64 / 66 / 8


def test_empty_description_named_by_guid_and_unknown_width():
    text = (
        'Switch\t8 "S-0000000000000abc"\t\t# "" base port 0 lid 4 lmc 0\n'
        '[1]\t"S-0000000000000abc"[2]\t\t# "" lid 4 ??\n'
        '[3]  "H-00000000000000de"[1](de)    # "node 7 HCA-1" lid 5 4x???\n'
        '[4]\tgarbage line\n'
    )
    topo = parse_ibnetdiscover(text)
    sw = topo.nodes["0x0000000000000abc"]
    assert sw.name == "0x0000000000000abc"
    assert (sw.ports[1].width, sw.ports[1].speed, sw.ports[1].lanes, sw.ports[1].speed_bytes) == ("", "", None, None)
    assert (sw.ports[3].width, sw.ports[3].speed, sw.ports[3].speed_bytes) == ("4x", "", None)
    assert topo.unparsed == 1
    # The CA has no section of its own: its LID 5 cannot be tied to a node.
    assert 5 not in topo.by_lid


def test_ports_of_an_unreadable_header_are_not_credited_to_the_previous_node():
    text = (
        'Switch\t8 "S-0000000000000abc"\t\t# "sw-a" base port 0 lid 4 lmc 0\n'
        '[1]\t"S-0000000000000abd"[1]\t\t# "sw-b" lid 6 4xHDR\n'
        "\nvendid=0x2c9\n"
        'Switch\t8 "S-0000000000000abd00"\t\t# "sw-b" base port 0 lid 6 lmc 0\n'
        '[1]\t"S-0000000000000abc"[1]\t\t# "sw-a" lid 4 4xHDR\n'
    )
    topo = parse_ibnetdiscover(text)
    assert list(topo.nodes) == ["0x0000000000000abc"]
    assert list(topo.nodes["0x0000000000000abc"].ports) == [1]
    assert topo.unparsed == 1


def test_router_and_unquoted_names():
    text = 'Rt\t2 R-0000000000000001\t\t# "gw router"\n[1](1) \tS-0000000000000002[7]\t\t# lid 9 lmc 0 spine lid 3 4xHDR\n'
    topo = parse_ibnetdiscover(text)
    rt = topo.nodes["0x0000000000000001"]
    assert (rt.kind, rt.name) == ("router", "gw router")
    assert (rt.ports[1].peer_desc, rt.ports[1].peer_lid, rt.ports[1].lid, rt.ports[1].guid) == ("spine", 3, 9, "0x0000000000000001")


def test_not_text_is_parse_error():
    try:
        parse_ibnetdiscover(b"Switch")  # type: ignore[arg-type]
    except ParseError:
        return
    raise AssertionError("bytes must be refused with ParseError")


_LINE = st.sampled_from([
    'Switch\t36 "S-0002c903007b78b0"\t\t# "sw" enhanced port 0 lid 19 lmc 0',
    'Ca\t1 "H-ec0d9a03007d7d0b"\t\t# "r-dcs96 HCA-2"',
    '[1](ec0d9a03007d7d0b) \t"S-b8599f0300fc6de4"[24]\t\t# lid 28 lmc 0 "sw" lid 13 4xEDR',
    '[3]\t"S-0002c903007b78b0"[1]\t\t# "sw" lid 19 4xFDR',
    '[63](1/32/1) "S-b0cf0e0300d33fc0"[1]      # "MF0;x:MQM9700/U1" lid 180 4xNDR',
    "vendid=0x2c9", "#", "", "Switch", "[", "[1]", '"S-', "lid 65535",
])


@settings(max_examples=150, deadline=None)
@given(st.lists(st.one_of(_LINE, st.text(max_size=60)), max_size=20))
def test_fuzz_only_parse_error(lines):
    try:
        topo = parse_ibnetdiscover("\n".join(lines))
        topo.links()
    except ParseError:
        pass
