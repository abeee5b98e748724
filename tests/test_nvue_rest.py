"""nvue collector: a real aiohttp stand-in on 127.0.0.1 with basic auth and TLS, plus parser tests.

The JSON bodies are the documented shapes: ``link/stats`` is the published NVUE API sample;
the others are derived from the ``nv show`` CLI samples in the public fixtures (testcase
``cli_derived``), since their JSON field names are unverified (fabric-reference 2.4 [I]).
"""

from __future__ import annotations

import json
from itertools import pairwise
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from fabricmon import collectors
from fabricmon.collectors.base import FetchError, ParseError
from fabricmon.collectors.nvue import NvueCollector, NvueOptions
from fabricmon.collectors.nvue.parse import NvueState, carrier_downs, classify, parse_payload, to_count
from fabricmon.core.model import ParseResult, TargetSpec
from tests.conftest import public_fixture
from tests.http_standins import BasicAuthRule, Reply, StandIn, fetch_once
from tests.pki import self_signed_cert

CASE = Path(__file__).resolve().parent.parent / "collectors" / "nvue" / "testcases" / "cli_derived"
USER, PASSWORD = "cumulus", "Nv-ue!pw 9"
LINK_STATS_FIXTURE = "eth/CumulusNetworks__docs/content__cumulus-linux-512__System-Configuration__NVIDIA-User-Experience-NVUE__NVUE-API.md.nvue_v1-interface-swp1-link-stats.json"


def routes_from_case() -> dict[str, Reply]:
    """The testcase's recorded responses as stand-in routes (path without query -> reply)."""
    out: dict[str, Reply] = {}
    for r in json.loads((CASE / "payload.json").read_text())["responses"]:
        out[r["path"].split("?", 1)[0]] = Reply(r["body"], status=r["status"])
    return out


@pytest.fixture(scope="module")
def cert(tmp_path_factory):
    return self_signed_cert(tmp_path_factory.mktemp("nvue-tls"))


def make(srv: StandIn, cert, **opts) -> NvueCollector:
    base = {"username": USER, "password_env": "NVUE_TEST_PW", "port": srv.port, "ca_file": str(cert[0])}
    base.update(opts)
    return NvueCollector("leaf01", "127.0.0.1", NvueOptions(**base))


def by_key(result: ParseResult) -> dict[tuple, int]:
    return {(s.port, s.counter, s.sub): s.value for s in result.counters}


async def test_full_poll_over_tls_with_basic_auth(cert, monkeypatch):
    monkeypatch.setenv("NVUE_TEST_PW", PASSWORD)
    routes = routes_from_case()
    routes["/nvue_v1/interface/swp1/link/stats"] = Reply(json.loads(public_fixture(LINK_STATS_FIXTURE).read_text()))
    async with StandIn(routes, auth={"/nvue_v1": BasicAuthRule(USER, PASSWORD)}, tls=cert) as srv:
        c = make(srv, cert)
        payload = await fetch_once(c)
    assert all(s.query.get("rev") == "operational" for s in srv.seen)
    # swp1, swp16, swp2 match ^swp\d; eth0 and lo are not polled.
    asked = {s.path_qs.split("?")[0] for s in srv.seen}
    assert "/nvue_v1/interface/swp2/link/stats" in asked and not any("eth0" in p or "/lo/" in p for p in asked)
    assert PASSWORD not in json.dumps(payload)
    res = NvueCollector.parse(payload, c.spec(), NvueCollector.new_state())[0]
    v = by_key(res)
    assert v[("swp1", "rx_bytes", ())] == 293771538 and v[("swp1", "tx_packets", ())] == 3536629  # published sample
    assert v[("swp16", "ecn_marked_packets", ("3",))] == 693777677344  # nv show ... qos roce counters
    assert v[("swp16", "queue_no_buffer_drops", ("3",))] == 663060754115
    assert v[("swp1", "pfc_watchdog_storms", (2,))] == 2 and v[("swp1", "pfc_watchdog_storms", (7,))] == 3
    stormed = {(g.port, g.sub): g.value for g in res.gauges if g.name == "pfc_watchdog_stormed"}
    assert stormed[("swp1", (2,))] == 1.0 and stormed[("swp1", (1,))] == 0.0
    assert v[("swp16", "wjh_drops", ("buffer", "503", "3"))] == 1200 and v[("swp8", "wjh_drops", ("l2", "209", ""))] == 283
    # Per-interface 404s: that interface's call is skipped with a warning, the rest is kept.
    assert any("RoCE counters: not found (HTTP 404) on swp1, swp2" in w for w in res.warnings)
    assert ("swp2", "rx_bytes", ()) not in v  # the stand-in has no swp2 link/stats route -> 404 too
    assert ("swp1", "rx_bytes", ()) in v


async def test_wrong_password_is_an_auth_error(cert, monkeypatch):
    monkeypatch.setenv("NVUE_TEST_PW", "wrong")
    async with StandIn(routes_from_case(), auth={"/nvue_v1": BasicAuthRule(USER, PASSWORD)}, tls=cert) as srv:
        c = make(srv, cert)
        try:
            with pytest.raises(FetchError) as err:
                await c.fetch()
        finally:
            await c.close()
    assert err.value.reason == "auth" and "wrong" not in str(err.value)


async def test_tls_verified_by_default_and_opt_out(cert, tmp_path):
    pwfile = tmp_path / "pw"
    pwfile.write_text(PASSWORD + "\n")
    async with StandIn(routes_from_case(), auth={"/nvue_v1": BasicAuthRule(USER, PASSWORD)}, tls=cert) as srv:
        c = make(srv, cert, ca_file=None, password_env=None, password_file=str(pwfile), interfaces=["swp1"])
        try:
            with pytest.raises(FetchError) as err:
                await c.fetch()
            assert err.value.reason == "tls"
        finally:
            await c.close()
        c = make(srv, cert, ca_file=None, tls_insecure_skip_verify=True, password_env=None,
                 password_file=str(pwfile), interfaces=["swp1"], wjh_path=None)
        payload = await fetch_once(c)
    paths = [r["path"] for r in payload["responses"]]
    assert paths[0].startswith("/nvue_v1/interface/swp1/") and not any(p.startswith("/nvue_v1/interface?") for p in paths)
    assert not any("wjh" in p for p in paths) and c.spec().options["wjh_path"] == ""


async def test_server_error_fails_the_poll(cert, monkeypatch):
    monkeypatch.setenv("NVUE_TEST_PW", PASSWORD)
    routes = routes_from_case()
    routes["/nvue_v1/interface/swp1/counters/qos"] = Reply({"error": "boom"}, status=500)
    async with StandIn(routes, auth={"/nvue_v1": BasicAuthRule(USER, PASSWORD)}, tls=cert) as srv:
        c = make(srv, cert, interfaces=["swp1"])
        try:
            with pytest.raises(FetchError) as err:
                await c.fetch()
        finally:
            await c.close()
    assert err.value.reason == "http" and "counters/qos" in str(err.value)


def test_options_and_registry():
    assert collectors.get("nvue") is NvueCollector
    with pytest.raises(ValidationError):
        NvueOptions(username="u")  # no password source
    with pytest.raises(ValidationError):
        NvueOptions(username="u", password="p", roce_counters_path="interface/qos")  # no {if}
    with pytest.raises(ValidationError):
        NvueOptions(username="u", password="p", interface_regex="(")
    spec = NvueCollector("leaf", "sw", NvueOptions(username="u", password="p", roce_tc=4)).spec()
    assert spec.options["roce_tc"] == 4 and "password" not in spec.options and "username" not in spec.options


def resp(path: str, body, status: int = 200) -> dict:
    return {"method": "GET", "path": f"/nvue_v1/{path}?rev=operational", "status": status, "body": body}


def wjh_poll(*records) -> dict:
    return {"responses": [resp("system/wjh/packet-buffer", list(records))]}


def rec(count: int, end: int, reason: int = 209, port: str = "swp8") -> dict:
    return {"AggCount": count, "DropType": "L2", "ReasonId": reason, "IngressPort": port, "EndTimestamp": end, "FirstTimestamp": end - 30}


class Target:
    """One target's polls in turn: the state each parse returns goes into the next parse."""

    def __init__(self, spec: TargetSpec) -> None:
        self.spec, self.state = spec, NvueState()

    def poll(self, payload: dict) -> ParseResult:
        result, self.state = parse_payload(payload, self.spec, self.state)
        return result


def test_wjh_windows_become_a_monotonic_counter():
    t = Target(TargetSpec("leaf", "nvue"))
    key = ("swp8", "wjh_drops", ("l2", "209", ""))  # an L2 record carries no traffic class
    # The two gNMI sample windows (AggCount 283 then 287, EndTimestamps 30 s apart).
    assert by_key(t.poll(wjh_poll(rec(283, 1677695102))))[key] == 283
    after_first = t.state
    assert by_key(t.poll(wjh_poll(rec(283, 1677695102), rec(287, 1677695132))))[key] == 570
    # The same windows listed again: nothing new.
    assert by_key(t.poll(wjh_poll(rec(287, 1677695132))))[key] == 570
    # No WJH response at all this poll: the total is still exported (no false reset).
    assert by_key(t.poll({"responses": []}))[key] == 570
    # Two records of one new window (different flows) both count.
    assert by_key(t.poll(wjh_poll(rec(5, 1677695162), rec(7, 1677695162))))[key] == 582
    # Parsing never changed a state it was given: the first poll's state still counts 283 only.
    assert after_first.wjh == {("swp8", "l2", "209", ""): (283, 1677695102.0)}


def test_wjh_gnmi_string_leaf_and_missing_timestamp():
    leaf = json.dumps([rec(283, 1677695102)])
    body = {"updates": [{"values": {"state/drop": leaf}}]}
    res, _ = parse_payload({"responses": [resp("system/wjh/packet-buffer", body)]}, TargetSpec("l", "nvue"), NvueState())
    assert by_key(res)[("swp8", "wjh_drops", ("l2", "209", ""))] == 283
    no_ts = {"AggCount": 4, "DropType": "Buffer", "ReasonId": 503, "IngressPort": "swp1"}
    res, _ = parse_payload({"responses": [resp("system/wjh/packet-buffer", [no_ts])]}, TargetSpec("l", "nvue"), NvueState())
    assert not res.counters and "without EndTimestamp" in res.warnings[0]


def test_wjh_buffer_drops_split_by_traffic_class():
    """Buffer drop records carry ``traffic_class`` (the congested egress class): one counter per
    class, "" when the record has none or a value that is not a class number."""
    def buf(count: int, end: int, tc) -> dict:
        r = {"AggCount": count, "DropType": "Buffer", "ReasonId": 503, "IngressPort": "swp1", "EgressPort": "swp16",
             "EndTimestamp": end, "FirstTimestamp": end - 30}
        if tc is not ...:
            r["traffic_class"] = tc
        return r

    t = Target(TargetSpec("leaf", "nvue"))
    v = by_key(t.poll(wjh_poll(buf(10, 100, 3), buf(4, 100, 0), buf(2, 100, ...), buf(1, 100, "n/a"),
                               buf(5, 100, "3"), buf(6, 100, 99))))
    assert v[("swp16", "wjh_drops", ("buffer", "503", "3"))] == 15  # 3 and "3" are one class
    assert v[("swp16", "wjh_drops", ("buffer", "503", "0"))] == 4
    assert v[("swp16", "wjh_drops", ("buffer", "503", ""))] == 2 + 1 + 6  # absent, not a number, out of range
    # The next window of class 3 adds to class 3 only.
    v = by_key(t.poll(wjh_poll(buf(7, 130, 3))))
    assert v[("swp16", "wjh_drops", ("buffer", "503", "3"))] == 22 and v[("swp16", "wjh_drops", ("buffer", "503", "0"))] == 4


def test_helpers():
    assert to_count(12) == 12 and to_count("12") == 12 and to_count("0 Bytes") == 0 and to_count(3.0) == 3
    assert to_count("56.52 MB") is None and to_count("n/a") is None and to_count(True) is None and to_count(-1) is None
    paths = {"link_stats_path": "interface/{if}/link/stats"}
    assert classify("/nvue_v1/interface/swp1s0/link/stats?rev=operational", paths) == ("link_stats_path", "swp1s0")
    assert classify("/nvue_v1/interface?rev=operational", paths) == ("interfaces", None)
    assert classify("/nvue_v1/system", paths) is None


def test_carrier_transitions_count_each_down_once():
    """Linux carrier_changes counts both directions and transitions alternate: back from the state
    now, the downs are ceil(n/2) when down and floor(n/2) when up, whatever the state at boot. A
    reboot of the peer (up -> down -> up) is one down, in the poll that shows the link down."""
    up_at_boot = [(0, True), (1, False), (2, True), (3, False), (4, True)]  # transitions, up now
    down_at_boot = [(1, True), (2, False), (3, True)]  # the kernel's own start: no carrier until the first up
    for history in (up_at_boot, down_at_boot):
        downs = [carrier_downs(None, n, up) for n, up in history]
        assert [b - a for a, b in pairwise(downs)] == [0 if up else 1 for _, up in history[1:]]
    assert carrier_downs(None, 7, None) == 3  # no state: the kernel's start (odd while up)
    assert carrier_downs(5, 99, True) == 5  # a down count, when shown, is taken as it is
    assert carrier_downs(None, "56.52 MB", True) is None


@pytest.mark.parametrize("payload", [[], {}, {"responses": {}}, {"responses": [1]}, {"responses": [{"path": 3}]}])
def test_bad_payloads_raise_parse_error(payload):
    with pytest.raises(ParseError):
        parse_payload(payload, TargetSpec("l", "nvue"), NvueState())


def test_bad_parse_option_raises_parse_error():
    with pytest.raises(ParseError, match="roce_priority"):
        parse_payload({"responses": []}, TargetSpec("l", "nvue", {"roce_priority": 9}), NvueState())


_leaf = st.one_of(st.integers(-5, 2**70), st.floats(allow_nan=True), st.text(max_size=12), st.none(), st.booleans(),
                  st.sampled_from(["12 Bytes", "1.5 MB", "DEADLOCK", "OK", "n/a", "[{\"AggCount\": 3}]"]))
_keys = st.sampled_from(["0", "3", "7", "99", "status", "deadlock-count", "pfc-stats", "egress-queue-stats", "tx-stats",
                         "tx-roce-stats", "AggCount", "ReasonId", "DropType", "EndTimestamp", "IngressPort", "count",
                         "link", "oper-status", "speed", "in-bytes", "carrier-transitions", "swp1", "traffic-class"])
_json = st.recursive(_leaf, lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(_keys, inner, max_size=5)),
                     max_leaves=25)
_path = st.sampled_from(["interface", "interface/swp1/link/stats", "interface/swp1/counters/qos", "interface/swp1/qos/roce/counters",
                         "interface/swp1/qos/pfc-watchdog", "system/wjh/packet-buffer", "interface/swp2/other"])


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(_path, _json, st.sampled_from([200, 404, 500, None])), max_size=6),
       st.dictionaries(st.sampled_from(["roce_tc", "cnp_tc", "wjh_path", "link_stats_path"]), _leaf, max_size=2))
def test_fuzz_parse(responses, options):
    payload = {"responses": [{"method": "GET", "path": f"/nvue_v1/{p}", "status": s, "body": b} for p, b, s in responses]}
    t = Target(TargetSpec("l", "nvue", options))
    try:
        for _ in range(2):
            res = t.poll(payload)
    except ParseError:
        return
    for s in res.counters:
        assert isinstance(s.value, int) and s.value >= 0
