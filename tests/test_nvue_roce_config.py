"""NVUE lossless configuration (collectors/nvue/roce_config.py) over a TLS + basic-auth stand-in.

The stand-in serves the JSON form of the public ``nv show interface swp16 qos roce status`` and
``nv show interface swp1 qos pfc-watchdog`` samples (NVIDIA Cumulus Linux 5.12 docs; the JSON
form is ours, tests/data/nvue/README.md) and variants with one setting broken.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from fabricmon.collectors.nvue import NvueCollector, NvueOptions
from fabricmon.core.model import ParseResult, TargetSpec
from tests.http_standins import BasicAuthRule, Reply, StandIn, fetch_once
from tests.pki import self_signed_cert

STATUS = json.loads((Path(__file__).parent / "data" / "nvue" / "roce-status-swp16.json").read_text())
PFC_PROFILE = json.loads((Path(__file__).parent / "data" / "nvue" / "pfc-default-global.json").read_text())
WATCHDOG = {"state": "enabled", "status": {str(tc): {"status": "OK", "deadlock-count": 0} for tc in range(8)}}
USER, PASSWORD = "cumulus", "Nv-ue!pw 9"
SPEC = TargetSpec("leaf01", "nvue")


@pytest.fixture(scope="module")
def cert(tmp_path_factory):
    return self_signed_cert(tmp_path_factory.mktemp("nvue-roce-tls"))


def routes(status: dict[str, Any], watchdog: dict[str, Any], profile: dict[str, Any] | None) -> dict[str, Reply]:
    out = {"/nvue_v1/interface": Reply({"swp1": {"type": "swp"}, "swp2": {"type": "swp"}, "eth0": {"type": "eth"}})}
    if profile is not None:
        out["/nvue_v1/qos/pfc/default-global"] = Reply(profile)
    for port in ("swp1", "swp2"):
        out[f"/nvue_v1/interface/{port}/qos/roce/status"] = Reply(status)
        out[f"/nvue_v1/interface/{port}/qos/pfc-watchdog"] = Reply(watchdog)
    return out


async def poll(cert, status: dict[str, Any], watchdog: dict[str, Any] = WATCHDOG,
               profile: dict[str, Any] | None = None) -> ParseResult:
    async with StandIn(routes(status, watchdog, profile), auth={"/nvue_v1": BasicAuthRule(USER, PASSWORD)}, tls=cert) as srv:
        c = NvueCollector("leaf01", "127.0.0.1", NvueOptions(
            username=USER, password=PASSWORD, port=srv.port, ca_file=str(cert[0])))
        payload = await fetch_once(c)
    asked = {s.path_qs.split("?")[0] for s in srv.seen}
    assert "/nvue_v1/interface/swp2/qos/roce/status" in asked
    assert PASSWORD not in json.dumps(payload)
    return NvueCollector.parse(payload, c.spec(), NvueCollector.new_state())[0]


def gauges(result: ParseResult, name: str, port: str = "swp1") -> dict[tuple, float]:
    return {g.sub: g.value for g in result.gauges if g.name == name and g.port == port}


def on(result: ParseResult, name: str, port: str = "swp1") -> list:
    return sorted(sub[0] for sub, v in gauges(result, name, port).items() if v == 1.0)


async def test_public_sample_configuration(cert):
    r = await poll(cert, STATUS)
    assert on(r, "pfc_enabled") == [3] and len(gauges(r, "pfc_enabled")) == 8
    assert on(r, "ecn_enabled") == ["0", "3"] and len(gauges(r, "ecn_enabled")) == 8
    assert gauges(r, "ecn_min_threshold_bytes") == {("0",): 153000.0, ("3",): 153000.0}
    assert gauges(r, "ecn_max_threshold_bytes")[("3",)] == 1430000.0
    assert gauges(r, "qos_trust_dscp") == {(): 1.0}  # pcp,dscp: IP traffic is classified by DSCP
    assert gauges(r, "dscp_priority") == {(26,): 3.0, (48,): 6.0}
    headroom = gauges(r, "headroom_bytes")
    assert headroom[(3,)] == 15160000.0 and headroom[(0,)] == 0.0  # only priority 3 has the reserved pool
    assert on(r, "pfc_watchdog_enabled") == list(range(8))
    assert on(r, "pfc_enabled", "swp2") == [3]
    assert not gauges(r, "pfc_xoff_threshold_bytes")  # not in this view: unknown, not 0
    assert not [w for w in r.warnings if "RoCE status" in w or "watchdog" in w]  # only the unserved calls' 404s


def broken(path: tuple[str, ...], value: Any) -> dict[str, Any]:
    body = copy.deepcopy(STATUS)
    node = body
    for key in path[:-1]:
        node = node[key]
    if value is None:
        del node[path[-1]]
    else:
        node[path[-1]] = value
    return body


@pytest.mark.parametrize(("path", "value", "check"), [
    (("pfc", "pfc-priority"), "3,4", lambda r: on(r, "pfc_enabled") == [3, 4]),
    (("pfc", "tx-enabled"), "no", lambda r: on(r, "pfc_enabled") == [3]),  # rx still on: PFC honoured
    (("congestion-control", "enabled-tc"), "0", lambda r: on(r, "ecn_enabled") == ["0"]),
    (("congestion-control", "congestion-mode"), "red, absolute", lambda r: on(r, "ecn_enabled") == []),
    (("trust", "trust-mode"), "pcp", lambda r: gauges(r, "qos_trust_dscp") == {(): 0.0}),
    (("pool",), {"0": {"name": "lossy-default-ingress", "switch-priorities": "0,1,2,3,4,5,6,7", "size": 15160000}},
     lambda r: gauges(r, "headroom_bytes")[(3,)] == 0.0),
    (("pfc",), None, lambda r: gauges(r, "pfc_enabled") == {}),  # not shown: unknown, never 0
])
async def test_one_setting_broken(cert, path, value, check):
    assert check(await poll(cert, broken(path, value)))


async def test_watchdog_disabled(cert):
    r = await poll(cert, STATUS, {**WATCHDOG, "state": "disabled"})
    assert set(gauges(r, "pfc_watchdog_enabled").values()) == {0.0}


async def test_public_pfc_profile_gives_the_xoff_threshold(cert):
    """The public ``nv show qos pfc default-global`` sample (XOFF 10000 B on switch priority 0)
    applies to every port whose PFC configuration was read."""
    r = await poll(cert, STATUS, profile=PFC_PROFILE)
    for port in ("swp1", "swp2"):
        assert gauges(r, "pfc_xoff_threshold_bytes", port) == {(0,): 10000.0}


@pytest.mark.parametrize(("change", "want", "warning"), [
    # The RoCE page's example: PFC on priority 3, stop at 1500 bytes.
    ({"switch-priority": {"3": {}}, "xoff-threshold": 1500}, {(3,): 1500.0}, None),
    ({"xoff-threshold": "9.77 KB"}, {}, "PFC profile xoff-threshold: humanised value (not exact) skipped on swp1, swp2"),
    ({"switch-priority": "all"}, {}, "PFC profile switch-priority 'all' is not a priority list"),
    ({"xoff-threshold": None}, {}, None),
])
async def test_pfc_profile_variants(cert, change, want, warning):
    profile = {k: v for k, v in {**PFC_PROFILE, **change}.items() if v is not None}
    r = await poll(cert, STATUS, profile=profile)
    assert gauges(r, "pfc_xoff_threshold_bytes") == want
    if warning:
        assert any(warning in w for w in r.warnings), r.warnings


@pytest.mark.parametrize(("path", "value", "warning"), [
    (("pfc", "pfc-priority"), "three", "swp1: RoCE status pfc-priority 'three' is not a priority list"),
    (("congestion-control", "enabled-tc"), [0, 99], "swp1: RoCE status enabled-tc '[0, 99]' is not a traffic-class list"),
    (("trust", "trust-mode"), "port", "swp1: RoCE status trust-mode 'port' is neither DSCP nor PCP"),
    (("congestion-control", "min-threshold"), "153.00 KB", "RoCE status min-threshold: humanised value (not exact) skipped on swp1, swp2"),
])
async def test_malformed_setting_is_named_and_left_unknown(cert, path, value, warning):
    r = await poll(cert, broken(path, value))
    assert any(warning in w for w in r.warnings), r.warnings
    assert gauges(r, "dscp_priority") == {(26,): 3.0, (48,): 6.0}  # the rest of the body is still read


@pytest.mark.parametrize("body", [[], "text", {"pfc": "x", "congestion-control": 3, "trust": [], "pool": 7}])
def test_hostile_bodies_never_raise(body):
    payload = {"responses": [{"path": "/nvue_v1/interface/swp1/qos/roce/status?rev=operational", "status": 200, "body": body},
                             {"path": "/nvue_v1/interface/swp1/qos/pfc-watchdog?rev=operational", "status": 200, "body": {"state": 5}}]}
    r = NvueCollector.parse(payload, SPEC, NvueCollector.new_state())[0]
    assert not [g for g in r.gauges if g.name in ("pfc_enabled", "ecn_enabled", "pfc_watchdog_enabled")]


@pytest.mark.parametrize(("body", "links"), [
    ({"spine01": {"remote-port": "swp1"}}, [("swp51", "spine01", "swp1")]),  # the CLI's Neighbor / Remote Port columns
    ({"44:38:39:00:00:01": {"chassis": {"system-name": "server01"}, "port": {"name": "eth0"}}}, [("swp51", "server01", "eth0")]),
    ({"server02": {"port": {"description": "ens1f0np0"}}}, [("swp51", "server02", "ens1f0np0")]),
    ({}, []),  # LLDP answered, no neighbour: the topology learns the port has none
    ({"x": "y", "z": {"remote-port": 7}}, []),
])
def test_lldp_neighbours_become_links(body, links):
    payload = {"responses": [{"path": "/nvue_v1/interface/swp51/lldp/neighbor?rev=operational", "status": 200, "body": body}]}
    r = NvueCollector.parse(payload, SPEC, NvueCollector.new_state())[0]
    assert r.links is not None
    assert [(ln.port, ln.peer_device, ln.peer_port) for ln in r.links] == links
    assert all(ln.device == "leaf01" for ln in r.links)


def test_no_lldp_call_means_no_topology_claim():
    r = NvueCollector.parse({"responses": []}, SPEC, NvueCollector.new_state())[0]
    assert r.links is None
