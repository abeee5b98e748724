"""ufm collector: a real aiohttp UFM stand-in on 127.0.0.1 (basic auth on /ufmRest, token on
/ufmRestV3, TLS with a certificate made in the test), plus parser unit tests and a fuzz."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from fabricmon.collectors import get
from fabricmon.collectors.base import FetchError, ParseError
from fabricmon.collectors.ufm import UfmCollector, UfmOptions
from fabricmon.collectors.ufm.names import lookup, to_int
from fabricmon.collectors.ufm.parse import lane_gbps, link_up, node_description, parse_payload, rated_gauges, width_lanes
from fabricmon.core.guid import norm_guid
from fabricmon.core.model import TargetSpec
from tests.conftest import free_port
from tests.http_standins import BasicAuthRule, Reply, StandIn, TokenAuthRule, fetch_once
from tests.pki import self_signed_cert

CASES = Path(__file__).resolve().parent.parent / "collectors" / "ufm" / "testcases"
USER, PASSWORD, TOKEN = "admin", "s3cret-Pw!", "czQYeCfKIeXqlwSqtorunOPysaSp2r"
COUNTERS_PATH = "monitoring/pm_counters"


def recorded_bodies(case: str) -> dict[str, object]:
    """Bodies of a testcase payload by resource: ports, links, systems (and counters)."""
    payload = json.loads((CASES / case / "payload.json").read_text())
    out = {}
    for r in payload["responses"]:
        bare = r["path"].split("?")[0]
        out[bare.rsplit("/", 1)[-1]] = r["body"]
    return out


def ufm_routes(bodies: dict[str, object], counters: Reply | None = None) -> dict[str, Reply]:
    routes = {}
    for prefix in ("/ufmRest", "/ufmRestV3"):
        for res in ("ports", "links", "systems"):
            routes[f"{prefix}/resources/{res}"] = Reply(bodies[res])
        if counters is not None:
            routes[f"{prefix}/{COUNTERS_PATH}"] = counters
    return routes


AUTH = {"/ufmRest": BasicAuthRule(USER, PASSWORD), "/ufmRestV3": TokenAuthRule(TOKEN)}


@pytest.fixture(scope="module")
def cert(tmp_path_factory) -> tuple[Path, Path]:
    return self_signed_cert(tmp_path_factory.mktemp("tls"))


def collector(srv: StandIn, **opts) -> UfmCollector:
    return UfmCollector("ufm01", "127.0.0.1", UfmOptions(port=srv.port, **opts))


async def test_basic_auth_over_tls_with_ca_file(cert, tmp_path):
    pw_file = tmp_path / "pw"
    pw_file.write_text(PASSWORD + "\n")
    bodies = recorded_bodies("v620_fabric")
    counters = Reply(recorded_bodies("pm_counters")["pm_counters"])
    async with StandIn(ufm_routes(bodies, counters), AUTH, tls=cert) as srv:
        c = collector(srv, username=USER, password_file=str(pw_file), ca_file=str(cert[0]), pm_counters_path=COUNTERS_PATH)
        payload = await fetch_once(c)
    paths = [r["path"] for r in payload["responses"]]
    assert paths == [
        "/ufmRest/resources/ports",
        "/ufmRest/resources/links?page_number=1&rpp=1000000000",
        "/ufmRest/resources/systems",
        f"/ufmRest/{COUNTERS_PATH}",
    ]
    assert all(r["status"] == 200 and r["method"] == "GET" for r in payload["responses"])
    assert payload["responses"][0]["body"] == bodies["ports"]  # parsed JSON, recorded as received
    assert {s.query.get("rpp") for s in srv.seen if "links" in s.path_qs} == {"1000000000"}
    assert PASSWORD not in json.dumps(payload) and USER not in json.dumps(payload)

    res = UfmCollector.parse(payload, c.spec(), UfmCollector.new_state())[0]
    assert c.spec().options == {"pm_counters_path": COUNTERS_PATH, "device_name": "node_description"}
    up = {(g.device, g.port): g.value for g in res.gauges if g.name == "link_up"}
    assert up[("MF0;r-ufm-sw95:MQM8700/U1", "23")] == 1.0
    assert up[("MF0;r-ufm-sw95:MQM8700/U1", "1")] == 0.0  # Polling / Down
    speed = {(g.device, g.port): g.value for g in res.gauges if g.name == "link_speed_bytes"}
    assert speed[("r-dcs96 HCA-1", "1")] == 25e9 * 4 / 8  # 4x EDR: 25 Gb/s effective per lane
    assert speed[("r-dcs97 HCA-1", "1")] == 50e9 * 4 / 8  # 4x HDR
    assert res.links is not None and len(res.links) == 4
    # The counters body names ports of another fabric: none match, and that is said.
    assert len(res.counters) == 0 and any("not matched" in w for w in res.warnings)


async def test_token_auth_uses_basic_scheme_on_v3(cert, monkeypatch):
    monkeypatch.setenv("UFM_TEST_TOKEN", TOKEN)
    async with StandIn(ufm_routes(recorded_bodies("v620_fabric")), AUTH, tls=cert) as srv:
        payload = await fetch_once(collector(srv, auth="token", token_env="UFM_TEST_TOKEN", ca_file=str(cert[0])))
    assert [r["path"].split("?")[0] for r in payload["responses"]] == [
        "/ufmRestV3/resources/ports", "/ufmRestV3/resources/links", "/ufmRestV3/resources/systems"]
    assert {s.headers["Authorization"] for s in srv.seen} == {f"Basic {TOKEN}"}
    assert TOKEN not in json.dumps(payload)


async def test_wrong_password_is_auth_error(cert):
    async with StandIn(ufm_routes(recorded_bodies("v620_fabric")), AUTH, tls=cert) as srv:
        with pytest.raises(FetchError) as ei:
            await fetch_once(collector(srv, username=USER, password="wrong", ca_file=str(cert[0])))
    assert ei.value.reason == "auth"
    assert "401" in str(ei.value) and "wrong" not in str(ei.value)


async def test_untrusted_certificate_is_tls_error_and_opt_out_works(cert):
    async with StandIn(ufm_routes(recorded_bodies("v620_fabric")), AUTH, tls=cert) as srv:
        with pytest.raises(FetchError) as ei:
            await fetch_once(collector(srv, username=USER, password=PASSWORD))
        assert ei.value.reason == "tls"
        assert "ca_file" in str(ei.value)
        payload = await fetch_once(collector(srv, username=USER, password=PASSWORD, tls_insecure_skip_verify=True))
    assert len(payload["responses"]) == 3


async def test_plain_http_to_a_tls_port_fails_cleanly(cert):
    async with StandIn(ufm_routes(recorded_bodies("v620_fabric")), AUTH, tls=cert) as srv:
        with pytest.raises(FetchError) as ei:
            await fetch_once(collector(srv, username=USER, password=PASSWORD, scheme="http"))
    assert ei.value.reason in ("http", "connection", "protocol")


async def test_connection_refused():
    c = UfmCollector("ufm01", "127.0.0.1", UfmOptions(port=free_port(), scheme="http", username=USER, password=PASSWORD))
    with pytest.raises(FetchError) as ei:
        await fetch_once(c)
    assert ei.value.reason == "connection"


async def test_unreadable_secret_names_the_option_not_a_value(tmp_path):
    c = UfmCollector("ufm01", "127.0.0.1", UfmOptions(username=USER, password_file=str(tmp_path / "missing")))
    with pytest.raises(FetchError) as ei:
        await fetch_once(c)
    assert ei.value.reason == "auth" and "password_file" in str(ei.value)
    c = UfmCollector("ufm01", "127.0.0.1", UfmOptions(auth="token", token_env="FABRICMON_UNSET_VAR_X"))
    with pytest.raises(FetchError, match="FABRICMON_UNSET_VAR_X"):
        await fetch_once(c)


async def test_counters_path_error_is_a_warning_not_a_failed_poll(cert):
    routes = ufm_routes(recorded_bodies("v620_fabric"))  # no counters route -> 404
    async with StandIn(routes, AUTH, tls=cert) as srv:
        c = collector(srv, username=USER, password=PASSWORD, ca_file=str(cert[0]), pm_counters_path=COUNTERS_PATH)
        payload = await fetch_once(c)
    assert payload["responses"][3]["status"] == 404
    res = UfmCollector.parse(payload, c.spec(), UfmCollector.new_state())[0]
    assert res.ports and any("HTTP 404" in w for w in res.warnings)


async def test_html_instead_of_json_is_protocol_error(cert):
    routes = ufm_routes(recorded_bodies("v620_fabric"))
    routes["/ufmRest/resources/ports"] = Reply("<html><body>Login</body></html>", content_type="text/html")
    async with StandIn(routes, AUTH, tls=cert) as srv:
        with pytest.raises(FetchError) as ei:
            await fetch_once(collector(srv, username=USER, password=PASSWORD, ca_file=str(cert[0])))
    assert ei.value.reason == "protocol" and "expected JSON" in str(ei.value)


async def test_body_over_limit_is_size_error(cert):
    async with StandIn(ufm_routes(recorded_bodies("v620_fabric")), AUTH, tls=cert) as srv:
        with pytest.raises(FetchError) as ei:
            await fetch_once(collector(srv, username=USER, password=PASSWORD, ca_file=str(cert[0]), max_body_bytes=100))
    assert ei.value.reason == "size"


def test_registry_and_options():
    assert get("ufm") is UfmCollector
    with pytest.raises(ValidationError):
        UfmOptions(password="x")  # basic without username
    with pytest.raises(ValidationError):
        UfmOptions(auth="token")  # no token source
    with pytest.raises(ValidationError):
        UfmOptions(username="a", password="b", bogus=1)
    assert UfmOptions(username="a", password_env="X").tls_insecure_skip_verify is False


# ---------------------------------------------------------------- parser units

def test_node_description_strips_the_port_suffix_only():
    assert node_description({"node_description": "mtlx-cai-ubuntu mlx5_0:1"}, "1") == "mtlx-cai-ubuntu mlx5_0"
    assert node_description({"node_description": "MF0;r-ufm-sw95:MQM8700/U1:23"}, "23") == "MF0;r-ufm-sw95:MQM8700/U1"
    # no port suffix: the colon belongs to the description
    assert node_description({"node_description": "MF0;r-ufm-sw95:MQM8700/U1"}, "23") == "MF0;r-ufm-sw95:MQM8700/U1"
    assert node_description({"node_description": "h mlx4_0:HCA-1/2", "dname": "HCA-1/2"}, "2") == "h mlx4_0"


def test_width_speed_and_state():
    assert width_lanes("4x") == 4 and width_lanes("IB_4x") == 4 and width_lanes("12X") == 12
    assert width_lanes("N/A") is None and width_lanes(None) is None
    assert lane_gbps("NDR") == 100.0 and lane_gbps("IB_FDR10") == 10.0 and lane_gbps(None) is None
    assert link_up({"physical_state": "Link Up", "logical_state": "Active"}) == 1
    assert link_up({"physical_state": "Link Up", "logical_state": "Init"}) == 0
    assert link_up({"physical_state": "Link Up", "logical_state": "N/A"}) == 1
    assert link_up({"physical_state": "Polling", "logical_state": "N/A"}) == 0
    assert link_up({}) is None


def test_rated_width_and_speed_from_supported_and_enabled():
    """UFM's supported/enabled width and speed (the v6.22.1 guide's port fields) give what a port
    can train to: the best in both lists; one list alone when the other is empty; nothing from
    empty lists (the guide's down port) or names it does not know."""
    ndr = {"supported_width": ["1x", "2x", "4x"], "enabled_width": ["1x", "4x"],
           "supported_speed": ["SDR", "EDR", "HDR", "NDR"], "enabled_speed": "HDR, NDR"}
    got = {g.name: g.value for g in rated_gauges("sw", "1", ndr)}
    assert got == {"link_width_rated_lanes": 4.0, "link_speed_rated_bytes": 4 * 100e9 / 8}
    capped = {**ndr, "enabled_speed": ["HDR"]}  # the operator enabled HDR only: HDR is what it should run at
    assert {g.name: g.value for g in rated_gauges("sw", "1", capped)}["link_speed_rated_bytes"] == 4 * 50e9 / 8
    assert rated_gauges("sw", "1", {"supported_width": [], "enabled_width": [], "supported_speed": []}) == []
    assert rated_gauges("sw", "1", {"supported_width": ["wide"], "supported_speed": ["NDR"]}) == []
    only_width = {g.name for g in rated_gauges("sw", "1", {"supported_width": "IB_4x"})}
    assert only_width == {"link_width_rated_lanes"}


def test_system_name_option_and_string_numbers():
    bodies = recorded_bodies("v620_fabric")
    payload = {"responses": [{"method": "GET", "path": "/ufmRest/resources/ports", "status": 200, "body": bodies["ports"]}]}
    res = parse_payload(payload, TargetSpec("u", "ufm", {"device_name": "system_name"}))
    assert {p.device for p in res.ports} == {"r-ufm-sw95", "r-dcs96", "r-dcs97"}
    assert res.links is None  # no links call in this payload: no topology claim


def test_names_table():
    assert lookup("PortXmitDataExtended") == ("tx_bytes", 4.0)
    assert lookup("Infiniband_MBIn_u_Gb") == ("rx_bytes", 4.0)
    assert lookup("Infiniband_VL15Dropped_u_Drops") == ("vl15_dropped", 1.0)
    assert lookup("Infiniband_LinkIntegrityErrors_u_Errors") == ("local_link_integrity_errors", 1.0)
    assert lookup("Infiniband_Normalized_MBOut_f_u_Percent") is None
    assert lookup("Infiniband_MBOutRate") is None
    assert norm_guid("2c90300f172a0") == "0x0002c90300f172a0" == norm_guid("0x0002C90300F172A0")
    assert norm_guid("zz") == "" and norm_guid("1" * 17) == ""
    assert to_int("0x10") == 16 and to_int(3.0) == 3 and to_int(3.5) is None and to_int(-1) is None and to_int(True) is None
    assert to_int(2**64) is None


def test_missing_ports_is_parse_error():
    with pytest.raises(ParseError):
        parse_payload({"responses": []}, TargetSpec("u", "ufm"))
    with pytest.raises(ParseError):
        parse_payload({"responses": [{"path": "/ufmRest/resources/ports", "status": 200, "body": "<html>"}]}, TargetSpec("u", "ufm"))


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=12),
    lambda kids: st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=10), kids, max_size=5),
    max_leaves=10,
)
_field = st.sampled_from(["guid", "number", "name", "node_description", "system_name", "dname", "active_speed", "active_width",
                          "logical_state", "physical_state", "lid", "source_guid", "source_port", "destination_guid",
                          "destination_port", "ports", "system_guid", "type", "port_name", "port", "counters",
                          "PortXmitDataExtended", "Infiniband_MBOut"])
_obj = st.dictionaries(_field, _json | st.sampled_from(["b8599f0300fc6de4", "1", "23", "4x", "EDR", "Active", "a_1", "x:1"]), max_size=8)
_body = st.lists(_obj, max_size=5) | st.fixed_dictionaries({"data": st.lists(_obj, max_size=5)}) | _json
_resp = st.fixed_dictionaries({
    "method": st.just("GET"),
    "path": st.sampled_from(["/ufmRest/resources/ports", "/ufmRestV3/resources/links?rpp=1", "/ufmRest/resources/systems",
                             "/ufmRest/monitoring/pm_counters", "/other"]),
    "status": st.sampled_from([200, 404, "200", None]),
    "body": _body,
})


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_resp, max_size=5) | _json)
def test_fuzz_parser_raises_only_parse_error(responses):
    payload = {"responses": responses} if isinstance(responses, list) else responses
    spec = TargetSpec("u", "ufm", {"pm_counters_path": "monitoring/pm_counters"})
    with contextlib.suppress(ParseError):
        UfmCollector.parse(payload, spec, UfmCollector.new_state())
