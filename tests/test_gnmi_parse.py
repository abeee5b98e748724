"""The gnmi parser on the public data (sonic-gnmi's COUNTERS test data, the Cumulus WJH gnmic
sample), against the SNMP parser on the same switch, and on paths in the recording's string form."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fabricmon import collectors
from fabricmon.agent.pipeline import _normalize_sub
from fabricmon.collectors.gnmi import paths as gp
from fabricmon.collectors.gnmi import profiles as prof
from fabricmon.core.model import TargetSpec
from tests.conftest import public_fixture
from tests.gnmi_standin import cumulus_wjh_notifications, sonic_port_notifications

GNMI = collectors.get("gnmi")
SPEC = TargetSpec("sw1", "gnmi")
T0 = 1_764_691_200_000_000_000


def parse(notes, state=None):
    return GNMI.parse_poll({"notifications": notes}, SPEC, GNMI.new_state() if state is None else state)


# ------------------------------------------------------------------ paths

_text = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=12)
_name = st.from_regex(r"[A-Za-z][A-Za-z0-9_:-]{0,10}", fullmatch=True).filter(lambda s: ":" not in s)


@given(st.lists(st.tuples(_name, st.dictionaries(_name, _text, max_size=3)), min_size=1, max_size=5),
       st.sampled_from(["", "eos_native", "openconfig"]))
@settings(max_examples=200, deadline=None)
def test_path_string_form_reads_back_to_the_same_path(elems, origin):
    path = gp.GPath(tuple((n, tuple(sorted(k.items()))) for n, k in elems), origin)
    text = gp.to_string(path)
    assert gp.parse(text) == path
    assert gp.to_string(gp.parse(text)) == text


def test_path_form_sorts_keys_and_escapes_slashes():
    p = gp.parse("interfaces/interface[name=swp8]/wjh/aggregate/l2/reasons/reason[severity=error][id=209]")  # as gnmic prints a prefix
    assert gp.to_string(p) == "/interfaces/interface[name=swp8]/wjh/aggregate/l2/reasons/reason[id=209][severity=error]"
    assert gp.to_string(gp.GPath((("a", (("k", "x/y]z"),)),))) == "/a[k=x\\/y\\]z]"
    for bad in ("/a[k=v", "/a]b", "/a[=v]", "/a[k]"):
        with pytest.raises(gp.PathError):
            gp.parse(bad)


# ------------------------------------------------------------------ public data

def test_sonic_gnmi_testdata_shapes():
    """COUNTERS/<port> (every PFC priority), Queues (unicast half only), Pfcwd (status as a
    gauge), and the wildcard-path map keyed by port (sonic-gnmi testdata)."""
    notes = sonic_port_notifications(public_fixture, ["Ethernet68"], T0)
    wild = json.loads(public_fixture("eth/sonic-net__sonic-gnmi/testdata__COUNTERS:Ethernet_wildcard_PFC_7_RX.txt").read_text())
    notes.append({"timestamp": T0, "prefix": "/", "target": "COUNTERS_DB", "delete": [],
                  "update": [{"path": "/COUNTERS/Ethernet*/SAI_PORT_STAT_PFC_7_RX_PKTS", "val": {"json_ietf_val": wild}}]})
    result, _ = parse(notes)
    s = {(x.port, x.counter, x.sub): x.value for x in result.counters}
    for p in range(8):
        for name in ("pfc_rx_pause_frames", "pfc_tx_pause_frames", "pfc_rx_pause_transitions"):
            assert ("Ethernet68", name, (p,)) in s
    assert s[("Ethernet68", "pfc_rx_pause_frames", (7,))] == 2 and s[("Ethernet1", "pfc_rx_pause_frames", (7,))] == 1
    queues = {x.sub[0] for x in result.counters if x.counter == "queue_tx_packets"}
    assert queues == {"1", "3", "4"}  # Ethernet68:10..19 are the multicast upper half; 0, 2, 5.. are empty hashes
    assert {(g.sub, g.value) for g in result.gauges if g.name == "pfc_watchdog_stormed"} == {((3,), 0.0), ((4,), 0.0)}
    assert result.clocks["sw1"] == T0 / 1e9
    assert not result.warnings


def test_cumulus_wjh_sample_counts_each_window_once():
    """The two notifications of the Cumulus Linux 5.12 gnmic WJH sample: a window of 283 drops,
    then the next of 287, counted into one monotonic total as the NVUE source does."""
    first, second = cumulus_wjh_notifications(public_fixture)
    r1, state = parse([first])
    assert [(x.port, x.sub, x.value) for x in r1.counters if x.counter == "wjh_drops"] == [("swp8", ("l2", "209", ""), 283)]
    again, _ = parse([first], state)  # the same window listed again: not counted twice
    assert [x.value for x in again.counters if x.counter == "wjh_drops"] == [283]
    r2, _ = parse([second], state)
    assert [x.value for x in r2.counters if x.counter == "wjh_drops"] == [283 + 287]


def test_same_names_labels_and_values_as_the_snmp_parser_on_one_sonic_switch():
    """One simulated SONiC leaf rendered as its SNMP agent serves it and as its gNMI server
    streams it: the PFC and queue series have the same names, ports, label values and values."""
    from tools.scenarios.catalog import EthFabric, Traffic, all_to_all
    from tools.scenarios.render import render_gnmi, render_snmp
    from tools.scenarios.sim import Fabric, StepPlan

    fab = Fabric(7)
    eth = EthFabric(fab, [("leaf01", "sonic"), ("leaf02", "sonic")], ("spine01", "sonic"))
    tr = Traffic(fab, all_to_all(eth.all_hosts(), 0.5))
    fab.seed_counters()
    plan: StepPlan = tr.plan(__import__("random").Random(1))[0]
    fab.step(plan, 10.0)
    leaf = fab.devices["leaf01"]
    names = ("pfc_rx_pause_frames", "pfc_tx_pause_frames", "queue_tx_packets", "queue_tx_bytes", "queue_drops")

    def series(source: str, payload: dict) -> dict:
        cls = collectors.get(source)
        result, _ = cls.parse_poll(payload, TargetSpec("leaf01", source), cls.new_state())
        _normalize_sub(result.counters, result.gauges)
        return {(x.port, x.counter, x.sub): x.value for x in result.counters if x.counter in names}

    snmp = series("snmp", render_snmp(fab, leaf, 1000.0))
    gnmi = series("gnmi", render_gnmi(fab, leaf, 1000.0, {}))
    assert snmp and gnmi == snmp


# ------------------------------------------------------------------ profiles

def test_every_shipped_path_says_where_it_comes_from():
    profiles = prof.load_profiles()
    assert {"sonic", "cumulus", "arista-eos", "broadcom-sonic", "openconfig"} <= set(profiles)
    for p in profiles.values():
        for t in p.tables:
            assert all(f.target.source.startswith(("verified: ", "inferred: ")) for f in t.fields)
        assert all(lf.target.source.startswith(("verified: ", "inferred: ")) for lf in p.leaves)


def test_profile_mistakes_name_the_file_and_the_problem(tmp_path):
    bad = tmp_path / "mine.yaml"
    bad.write_text("leaves:\n  - {path: '/a[name={port}]/b', counter: no_such_counter, verified: x}\n")
    with pytest.raises(prof.ProfileError, match=r"mine.yaml leaf 0: 'no_such_counter' is not a counter"):
        prof.load_profiles((str(tmp_path),))
    bad.write_text("leaves:\n  - {path: '/a[name={port}]/b', counter: rx_bytes}\n")
    with pytest.raises(prof.ProfileError, match="verified: <public source> or inferred"):
        prof.load_profiles((str(tmp_path),))


def test_profile_is_chosen_from_capabilities_or_the_option():
    profiles = prof.load_profiles()
    assert prof.select_profile(profiles, ["openconfig-interfaces", "openconfig-qos-ext"]).profile.name == "broadcom-sonic"
    assert prof.select_profile(profiles, ["arista-intf-augments", "openconfig-interfaces"]).profile.name == "arista-eos"
    assert prof.select_profile(profiles, ["openconfig-interfaces"]).profile.name == "openconfig"
    assert prof.select_profile(profiles, ["openconfig-qos-ext"], "sonic").match == "option profile"
    groups = prof.groups_of(profiles, "cumulus")
    assert any(g.target == "netq" for g in groups) and any(sp.path == "/interfaces/interface[name={port}]/state/counters"
                                                           for g in groups for sp in g.paths)
    assert prof.expand("/q/interface[interface-id={port}]/switch-priority[priority={priority}]", ["swp1"])[3] == \
        "/q/interface[interface-id=swp1]/switch-priority[priority=3]"
    assert prof.expand("/q/interface[interface-id={port}]/switch-priority[priority={priority}]", None) == \
        ["/q/interface[interface-id=*]/switch-priority[priority=*]"]
