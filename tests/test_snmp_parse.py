"""snmp parser and profile engine, on synthesized and recorded snmprec (no network)."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fabricmon.collectors import get
from fabricmon.collectors.base import ParseError
from fabricmon.collectors.snmp import SnmpCollector, SnmpOptions
from fabricmon.collectors.snmp import profiles as prof
from fabricmon.collectors.snmp.parse import SnmpState, parse_payload
from fabricmon.collectors.snmp.snmprec import format_snmprec, parse_snmprec
from fabricmon.core.model import Link, TargetSpec
from tests.conftest import public_fixture

DATA = Path(__file__).parent / "data" / "snmp"
LIBRENMS = "eth/Jellyfrog__librenms/tests__snmpsim__{}.snmprec"


def run(text: str, name: str = "sw1", **options) -> object:
    return parse_payload({"snmprec": text}, TargetSpec(name, "snmp", options), SnmpState())[0]


def samples(result, counter=None) -> dict:
    return {(s.port, s.counter, s.sub): s for s in result.counters if counter is None or s.counter == counter}


def gauges(result, name) -> dict:
    return {(g.port, g.sub): g.value for g in result.gauges if g.name == name}


# --- snmprec format -----------------------------------------------------------------------

def test_snmprec_types_and_hex():
    vb = parse_snmprec("1.3.6.1.2.1.1.1.0|4x|68697c\n.1.3.6.1.2.1.1.2.0|6|1.3.6.1.4.1.9\n"
                       "1.3.6.1.2.1.1.3.0|67|100\n1.3.6.1.2.1.4.20.1.1.1|64|10.0.0.1\n1.3.6.1.2.1.9.0|4|a|b\n")
    assert vb.get((1, 3, 6, 1, 2, 1, 1, 1, 0)) == b"hi|"
    assert vb.get((1, 3, 6, 1, 2, 1, 1, 2, 0)) == "1.3.6.1.4.1.9"
    assert vb.get((1, 3, 6, 1, 2, 1, 9, 0)) == b"a|b"  # a value may contain the separator
    assert vb.warnings == []


def test_snmprec_bad_lines_are_skipped_with_a_warning():
    vb = parse_snmprec("1.3.6.1.2.1.2.2.1.10.1|65|4294967296\n1.3.6|70:numeric|rate=1\nnot a line\n1.3.6.1|2|5\n")
    assert vb.get((1, 3, 6, 1)) == 5
    assert vb.skipped == 3 and len(vb.warnings) == 3
    assert "out of range" in vb.warnings[0]


def test_snmprec_round_trip_hex_for_unprintable():
    rows = [((1, 3, 2), "4", b"\x00\x01|\n"), ((1, 3, 1), "4", b"Ethernet1/1"), ((1, 3, 3), "70", 2**64 - 1)]
    text = format_snmprec(rows)
    assert text.splitlines() == ["1.3.1|4|Ethernet1/1", "1.3.2|4x|00017c0a", "1.3.3|70|18446744073709551615"]
    assert {o: v for o, (_t, v) in parse_snmprec(text).table.items()} == {o: v for o, _t, v in rows}


def test_payload_shape_errors_are_parse_errors():
    with pytest.raises(ParseError):
        parse_payload({"snmp": ""}, TargetSpec("x", "snmp"), SnmpState())
    with pytest.raises(ParseError, match="unknown SNMP profile 'nope'"):
        run("1.3.6.1.2.1.1.3.0|67|1\n", profile="nope")


# --- IF-MIB, clocks, selection --------------------------------------------------------------

def test_ieee_fallback_profile_counter32_and_warning():
    r = run((DATA / "ieee_pfc.snmprec").read_text())
    assert r.warnings == ["no vendor profile matches sysObjectID 1.3.6.1.4.1.99999.1.2; using IF-MIB + IEEE8021-PFC"]
    s = samples(r)
    assert s[("swp1", "pause_tx_frames", ())].value == 4294967000 and s[("swp1", "pause_tx_frames", ())].bits == 32
    assert s[("swp2", "pause_rx_frames", ())].value == 24690
    assert r.clocks == {"sw1": 42.42}


def test_if_mib_hc_preferred_and_32bit_fallback():
    # ifIndex 1 has HC counters; ifIndex 2 only the 32-bit ifTable ones; 3 has no ifName.
    text = "\n".join([
        "1.3.6.1.2.1.2.2.1.2.1|4|Ethernet1", "1.3.6.1.2.1.2.2.1.2.2|4|Ethernet2",
        "1.3.6.1.2.1.2.2.1.5.2|66|4294967295", "1.3.6.1.2.1.2.2.1.5.3|66|1000000000",
        "1.3.6.1.2.1.2.2.1.8.1|2|1", "1.3.6.1.2.1.2.2.1.8.2|2|7",
        "1.3.6.1.2.1.2.2.1.10.1|65|5", "1.3.6.1.2.1.2.2.1.10.2|65|6", "1.3.6.1.2.1.2.2.1.14.3|65|9",
        "1.3.6.1.2.1.31.1.1.1.1.1|4|swp1", "1.3.6.1.2.1.31.1.1.1.6.1|70|123456789012",
        "1.3.6.1.2.1.31.1.1.1.15.1|66|400000",
    ]) + "\n"
    r = run(text)
    s = samples(r)
    assert (s[("swp1", "rx_bytes", ())].value, s[("swp1", "rx_bytes", ())].bits) == (123456789012, 64)
    assert (s[("Ethernet2", "rx_bytes", ())].value, s[("Ethernet2", "rx_bytes", ())].bits) == (6, 32)
    assert s[("ifIndex3", "rx_errors", ())].value == 9
    assert gauges(r, "link_up") == {("swp1", ()): 1.0, ("Ethernet2", ()): 0.0}
    # 400000 Mb/s = 50e9 B/s; ifSpeed 4294967295 means "unknown, > 4G": no gauge; 1e9 bit/s = 125e6 B/s
    assert gauges(r, "link_speed_bytes") == {("swp1", ()): 50e9, ("ifIndex3", ()): 125e6}
    assert r.warnings[0].startswith("no vendor profile matches sysObjectID (none)")
    assert r.links is None


def test_selection_sysdescr_beats_sysobjectid_and_longest_prefix():
    ps = prof.load_profiles()
    assert prof.select_profile(ps, (1, 3, 6, 1, 4, 1, 9, 1, 5), "")[0].name == "cisco"
    assert prof.select_profile(ps, (1, 3, 6, 1, 4, 1, 99, 1), "")[0].name == "ieee8021-pfc"  # 9 is not a prefix of 99
    assert prof.select_profile(ps, (1, 3, 6, 1, 4, 1, 9, 1, 5), "SONiC Software Version: x")[0].name == "sonic"
    assert prof.select_profile(ps, None, "", "onyx")[0].name == "onyx"


# --- vendor profiles on synthesized recordings ----------------------------------------------

def test_cisco_profile():
    r = run((DATA / "cisco_pfc.snmprec").read_text(), "leaf01")
    s = samples(r)
    assert s[("Ethernet1/2", "pfc_tx_pause_frames", (3,))].value == 2000
    assert s[("Ethernet1/1", "pfc_rx_pause_frames", (3,))].value == 70000
    assert s[("Ethernet1/1", "pause_tx_frames", ())].value == 1000  # cpfcIfRequests = sum over priorities
    wait = s[("Ethernet1/1", "pfc_rx_pause_seconds", (3,))]
    assert (wait.value, wait.scale) == (70000 * 250, 1e-6)
    assert s[("Ethernet1/1", "pfc_watchdog_storms", (3,))].value == 2
    assert s[("Ethernet1/1", "pfc_watchdog_drops", (3,))].value == 41507426
    # shutdown(2) -> 1, active(1) -> 0, notApplicable(3) (queue 4) -> no gauge at all
    stormed = gauges(r, "pfc_watchdog_stormed")
    assert stormed[("Ethernet1/1", (3,))] == 1.0 and stormed[("Ethernet1/2", (3,))] == 0.0
    assert not any(sub == (4,) for _p, sub in stormed)
    assert r.warnings == [] and r.clocks == {"leaf01": 1234567.89}
    # LLDP local port numbers 1..4 are not ifIndexes: matched through lldpLocPortId = ifName
    assert r.links == [Link("leaf01", "Ethernet1/1", "spine01", "Ethernet1/49"),
                       Link("leaf01", "Ethernet1/2", "gpu-node-07", "enp65s0f0np0")]


def test_onyx_profile_units_and_labels():
    s = samples(run((DATA / "onyx.snmprec").read_text()))
    rx = s[("Eth1/2", "pfc_rx_pause_seconds", (3,))]
    assert (rx.value, rx.scale) == (3000, 0.001)
    assert s[("Eth1/1", "pfc_rx_pause_frames", (3,))].value == 5000
    assert s[("Eth1/2", "queue_no_buffer_drops", ("3",))].value == 17
    assert s[("Eth1/3", "pg_no_buffer_drops", (3,))].value == 9  # ingress PG: its own counter, never an egress queue
    assert not any(name == "queue_no_buffer_drops" and str(sub[0]).startswith("pg") for _p, name, sub in s)
    assert s[("Eth1/1", "wred_drops", ("7",))].value == 35
    assert s[("Eth1/1", "pause_tx_frames", ())].value == 22


def test_sonic_uses_per_priority_table_only():
    db_path = public_fixture("eth/sonic-net__sonic-snmpagent/tests__mock_tables__counters_db.json")
    db = json.loads(db_path.read_text())
    r = run((DATA / "sonic_cpfc.snmprec").read_text())
    s = samples(r)
    assert not samples(r, "pause_tx_frames") and not samples(r, "pause_rx_frames")  # cpfcIf = priority 3 only
    checked = 0
    for name, oid in db["COUNTERS_PORT_NAME_MAP"].items():
        counters = db.get("COUNTERS:" + oid)
        if counters is None:
            continue
        for p in range(8):
            tx = int(counters[f"SAI_PORT_STAT_PFC_{p}_TX_PKTS"]) & (2**64 - 1)
            assert s[(name, "pfc_tx_pause_frames", (p,))].value == tx
            assert s[(name, "pfc_rx_pause_frames", (p,))].value == int(counters[f"SAI_PORT_STAT_PFC_{p}_RX_PKTS"])
            checked += 1
    assert checked >= 8 * 30


def test_sonic_egress_queue_counters_by_traffic_class():
    """csqIfQosGroupStatsTable rows of sonic_cpfc.snmprec were built from the sonic-snmpagent
    mock COUNTERS_DB as its agent serves them (SNMP queue = q mod pq_count + 1, pq_count =
    ceil((max queue index + 1) / 2), unicast counter ids 1/2/5). Expected here straight from the
    mock: unicast queue q -> traffic class q, as long as q < pq_count."""
    db = json.loads(public_fixture("eth/sonic-net__sonic-snmpagent/tests__mock_tables__counters_db.json").read_text())
    r = run((DATA / "sonic_cpfc.snmprec").read_text())
    s = samples(r)
    queues: dict[str, dict[int, str]] = {}
    for key, oid in db["COUNTERS_QUEUE_NAME_MAP"].items():
        port, q = key.split(":")
        queues.setdefault(port, {})[int(q)] = oid
    checked = 0
    for port, by_q in queues.items():
        pq_count = -(-(max(by_q) + 1) // 2)
        unicast = {q: db["COUNTERS:" + oid] for q, oid in by_q.items()
                   if db["COUNTERS_QUEUE_TYPE_MAP"][oid] == "SAI_QUEUE_TYPE_UNICAST"}
        for q, stats in unicast.items():
            key = (port, "queue_tx_packets", (str(q),))
            if q >= pq_count:  # the agent folds it onto SNMP queue q mod pq_count + 1: not ours to see
                assert key not in s or (q % pq_count) not in unicast
                continue
            assert s[key].value == int(stats["SAI_QUEUE_STAT_PACKETS"]) and s[key].bits == 64
            assert s[(port, "queue_tx_bytes", (str(q),))].value == int(stats["SAI_QUEUE_STAT_BYTES"])
            assert s[(port, "queue_drops", (str(q),))].value == int(stats["SAI_QUEUE_STAT_DROPPED_PACKETS"])
            checked += 1
    assert checked >= 3 * 8 + 4 + 5 + 8  # Ethernet0/4/8, Ethernet16 q0-3, Ethernet32, Ethernet78 q1-8
    assert s[("Ethernet0", "queue_tx_bytes", ("0",))].value == 23492723984237432  # SNMP queue 1 = class 0
    assert ("Ethernet0", "queue_tx_packets", ("8",)) not in s  # multicast ids 3/4/7/8 are not read
    assert not [k for k in s if k[0] == "Ethernet24" and k[1].startswith("queue_")]  # multicast queues only
    # Ethernet16 (unicast 0-4, 6; pq_count 4): queues 4 and 6 fold onto SNMP 1 and 3, which
    # queues 0 and 2 already hold; the agent keeps the first, so classes 4 and 6 are not served.
    assert sorted(k[2] for k in s if k[:2] == ("Ethernet16", "queue_tx_packets")) == [("0",), ("1",), ("2",), ("3",)]
    # Documented limit: Ethernet78 has no unicast queue 0 and pq_count 9, so its unicast queue 9
    # is served as SNMP queue 1 and read as class 0; SNMP alone cannot tell.
    assert ("Ethernet78", "queue_tx_packets", ("0",)) in s
    assert not [w for w in r.warnings if "csqIfQosGroupStats" in w]


def test_selector_profile_schema_errors(tmp_path):
    def load(body: str) -> None:
        (tmp_path / "x.yaml").write_text(body)
        prof.load_profiles.cache_clear()
        try:
            prof.load_profiles((str(tmp_path),))
        finally:
            prof.load_profiles.cache_clear()

    head = "tables:\n  - entry: 1.3.6.1.4.1.9.9.580.1.5.5.1\n"
    with pytest.raises(prof.ProfileError, match="needs select columns"):
        load(head + "    index: [ifIndex, queue, selector]\n    columns: {4: {counter: queue_drops}}\n")
    with pytest.raises(prof.ProfileError, match="needs a selector index part"):
        load(head + "    index: [ifIndex, queue]\n    columns: {4: {select: {5: {counter: queue_drops}}}}\n")
    with pytest.raises(prof.ProfileError, match="at most one selector"):
        load(head + "    index: [ifIndex, selector, selector]\n    columns: {4: {select: {5: {counter: rx_bytes}}}}\n")
    with pytest.raises(prof.ProfileError, match=r"select 5.*queue_drops needs a 'queue' label"):
        load(head + "    index: [ifIndex, selector]\n    columns: {4: {select: {5: {counter: queue_drops}}}}\n")
    with pytest.raises(prof.ProfileError, match="select goes alone"):
        load(head + "    index: [ifIndex, queue, selector]\n    columns: {4: {select: {5: {counter: queue_drops}}, scale: 2}}\n")


# --- recorded devices (LibreNMS) --------------------------------------------------------------

def test_cumulus_recording():
    r = run(public_fixture(LIBRENMS.format("cumulus_bgp")).read_text(), "leaf-cl")
    s = samples(r)
    assert s[("swp1", "rx_bytes", ())].value == 3320181240056 and s[("swp1", "rx_bytes", ())].bits == 64
    assert s[("swp1", "rx_discards", ())].value == 3144990 and s[("swp1", "rx_discards", ())].bits == 32
    assert s[("swp1", "pfc_rx_pause_frames", (3,))].value == 0
    assert len(samples(r, "pfc_rx_pause_frames")) == 64 * 8
    assert gauges(r, "link_speed_bytes")[("swp1", ())] == 25e9  # ifHighSpeed 200000 Mb/s
    assert r.clocks == {"leaf-cl": 3626233.18} and r.warnings == []


def test_arista_recording_without_ifxtable():
    r = run(public_fixture(LIBRENMS.format("arista_eos_7280r")).read_text())
    s = samples(r)
    assert s[("Ethernet47", "queue_tx_packets", ("1",))].value == 150124  # .6.1.2.1.4.47.1.0
    assert s[("Ethernet47", "rx_bytes", ())].bits == 32  # no ifHC in this recording
    assert len(samples(r, "pfc_tx_pause_frames")) == 73 * 8
    assert not samples(r, "pfc_watchdog_storms")  # no watchdog rows recorded


def test_dell_sonic_recording_lldp():
    r = run(public_fixture(LIBRENMS.format("dell-sonic")).read_text(), "dsw")
    assert Link("dsw", "Eth1/53", "xxxxx-xxx-xxx-sw-dist01", "Eth1/54") in r.links  # subtype local(7)
    assert Link("dsw", "eth0", "xxxxx-xxx-xxx-sw-acc-warehouse01", "Gi1/0/42") in r.links  # interfaceName(5)
    assert not samples(r, "pfc_tx_pause_frames")  # this SONiC build serves no cpfc rows


def test_collector_registry_and_options():
    assert get("snmp") is SnmpCollector
    with pytest.raises(ValueError, match="community"):
        SnmpOptions()
    with pytest.raises(ValueError, match="auth_key"):
        SnmpOptions(version="3", user="u", priv_key_env="X")
    with pytest.raises(ValueError, match="unknown profile"):
        SnmpOptions(community="c", profile="juniper")
    c = SnmpCollector("sw", "127.0.0.1", SnmpOptions(community_env="C", profile="arista"))
    assert c.spec().to_header() == {"name": "sw", "source": "snmp", "profile": "arista", "profile_dirs": []}


def test_user_profile_dir(tmp_path):
    (tmp_path / "acme.yaml").write_text(
        "match: {sys_object_id: [1.3.6.1.4.1.4242]}\n"
        "tables:\n  - name: t\n    entry: 1.3.6.1.4.1.4242.1.1\n    index: [ifIndex, {role: queue, offset: -1}]\n"
        "    columns:\n      2: {counter: ecn_marked_packets}\n")
    text = "1.3.6.1.2.1.1.2.0|6|1.3.6.1.4.1.4242.7\n1.3.6.1.4.1.4242.1.1.2.5.1|70|77\n"
    r = run(text, profile_dirs=[str(tmp_path)])
    assert samples(r)[("ifIndex5", "ecn_marked_packets", ("0",))].value == 77
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "x.yaml").write_text("tables:\n  - {entry: 1.3, index: [priority], columns: {1: {counter: rx_bytes}}}\n")
    with pytest.raises(ParseError, match="exactly one ifIndex"):
        run(text, profile_dirs=[str(bad)])


# --- fuzz -----------------------------------------------------------------------------------

_oids = st.lists(st.integers(0, 2**32 + 5), min_size=1, max_size=14).map(lambda c: ".".join(map(str, c)))
_known_prefixes = st.sampled_from([
    "1.3.6.1.2.1.31.1.1.1.", "1.3.6.1.2.1.2.2.1.", "1.0.8802.1.1.2.1.4.1.1.", "1.0.8802.1.1.2.1.3.7.1.",
    "1.3.6.1.4.1.9.9.813.1.3.1.", "1.3.6.1.4.1.30065.3.11.1.2.1.", "1.3.6.1.4.1.40310.2.2.3.1.", "1.3.6.1.2.1.1.",
])
_line = st.one_of(
    st.tuples(st.one_of(_oids, st.builds(lambda p, o: p + o, _known_prefixes, _oids)),
              st.sampled_from(["2", "4", "4x", "5", "6", "64", "65", "66", "67", "70", "68", "99", "65:numeric", ""]),
              st.one_of(st.integers(-(2**65), 2**65).map(str), st.text(max_size=20), _oids))
    .map(lambda t: "|".join(t)),
    st.text(max_size=40),
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_line, max_size=40), st.sampled_from([None, "cisco", "arista", "cumulus", "onyx", "sonic"]))
def test_fuzz_only_parse_error_escapes(lines, profile):
    payload = {"snmprec": "\n".join(lines)}
    spec = TargetSpec("fz", "snmp", {"profile": profile} if profile else {})
    try:
        r = SnmpCollector.parse(payload, spec, SnmpCollector.new_state())[0]
    except ParseError:
        return
    for s in r.counters:
        assert isinstance(s.value, int) and 0 <= s.value < 2**s.bits


@settings(max_examples=100, deadline=None)
@given(st.one_of(st.none(), st.integers(), st.text(), st.dictionaries(st.text(max_size=8), st.text(max_size=8))))
def test_fuzz_payload_shapes(payload):
    with contextlib.suppress(ParseError):
        SnmpCollector.parse(payload, TargetSpec("fz", "snmp"), SnmpCollector.new_state())
