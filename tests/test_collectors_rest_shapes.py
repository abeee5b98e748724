"""REST shapes as NVIDIA's own references publish them, served by aiohttp stand-ins on
127.0.0.1, and every error status a REST client must survive (401, 403, 404, 429 with
Retry-After, 503) for the ufm, ufm-telemetry and nvue collectors.

Which path and field is verified where is listed in each collector's README ("Verified /
inferred"); the bodies below copy the documented examples, and the fields the documents do not
show (marked "inferred") are the ones the collectors also read from public samples.
"""

from __future__ import annotations

import email.utils
import time

import pytest

from fabricmon.agent.scheduler import ScheduledTarget, Scheduler
from fabricmon.collectors.base import FetchError
from fabricmon.collectors.nvue import NvueCollector, NvueOptions
from fabricmon.collectors.ufm import UfmCollector, UfmOptions
from fabricmon.collectors.ufm.names import lookup
from fabricmon.collectors.ufm_telemetry import UfmTelemetryCollector, UfmTelemetryOptions
from fabricmon.core.model import Link
from tests.http_standins import Reply, StandIn

# UFM Enterprise REST API Guide (v6.11.1 .. v6.19.3), "Links REST API", "Get all links" and
# "Get all links connected to a specific system": a bare JSON list, ports as strings.
UFM_LINKS = [
    {"source_guid": "0002c903007b78b0", "source_port": "29", "destination_guid": "0002c903007b78b0",
     "destination_port": "28", "source_port_dname": "29", "destination_port_dname": "28", "width": "IB_4x",
     "severity": "Info", "name": "0002c903007b78b0_28:0002c903007b78b0_29", "capabilities": []},
    {"destination_port_dname": "HCA-1/2", "severity": "Info", "source_guid": "248a070300f88fe0", "width": "IB_4x",
     "source_port_dname": "20", "source_port": "20", "destination_port": "2", "destination_guid": "b8599f03000a77d0",
     "name": "248a070300f88fe0_20:b8599f03000a77d0_2"},  # the guide's excerpt cuts this name short
]


def ufm_port(guid: str, number: int, node: str, dname: str, **documented) -> dict:
    """A port object: the documented fields of "Get All Ports" (REST API Guide v6.22.1/v6.23.1,
    "Ports REST API") plus the identity fields the guide's excerpt does not show (inferred)."""
    obj = {"description": "Switch IB Port", "number": number, "external_number": number, "physical_state": "Link Up",
           "tier": 3, "high_ber_severity": "N/A", "lid": 34, "mirror": "disable", "logical_state": "Active",
           "capabilities": ["reset", "healthy_operations", "disable", "get_cables_info"], "mtu": 4096,
           "peer_port_dname": "N/A", "severity": "Info", "active_speed": "HDR", "enabled_speed": [],
           "supported_speed": [], "active_width": "IB_4x", "enabled_width": []}
    obj.update(documented)
    # inferred: guid, name, dname, node_description, system_name, systemID
    obj.update({"guid": guid, "name": f"{guid}_{number}", "dname": dname, "node_description": f"{node}:{dname}",
                "system_name": node.split(";")[-1], "systemID": guid})
    return obj


UFM_PORTS = [
    ufm_port("0002c903007b78b0", 28, "MF0;sw-a:MQM8700/U1", "28"),
    ufm_port("0002c903007b78b0", 29, "MF0;sw-a:MQM8700/U1", "29"),
    ufm_port("248a070300f88fe0", 20, "MF0;sw-b:MQM8700/U1", "20"),
    ufm_port("b8599f03000a77d0", 2, "host-c HCA-1", "HCA-1/2"),
    # the guide's own example port: down, "Polling", no speed or width yet, NDR label in dname
    ufm_port("248a070300f88fe0", 52, "MF0;sw-b:MQM8700/U1", "1/26/2", physical_state="Polling",
             logical_state="Down", active_speed=None, active_width=None),
]
UFM_SYSTEMS = [{"system_guid": "0002c903007b78b0", "type": "switch", "model": "MQM8700", "system_name": "sw-a"}]


def ufm_routes(**override: Reply) -> dict[str, Reply]:
    routes = {"/ufmRest/resources/ports": Reply(UFM_PORTS), "/ufmRest/resources/links": Reply(UFM_LINKS),
              "/ufmRest/resources/systems": Reply(UFM_SYSTEMS)}
    routes.update(override)
    return routes


def ufm(srv: StandIn) -> UfmCollector:
    return UfmCollector("ufm01", "127.0.0.1", UfmOptions(port=srv.port, scheme="http", username="admin", password="pw"))


def telemetry(srv: StandIn) -> UfmTelemetryCollector:
    return UfmTelemetryCollector("tele01", "127.0.0.1", UfmTelemetryOptions(port=srv.port, scheme="http"))


def nvue(srv: StandIn) -> NvueCollector:
    return NvueCollector("leaf01", "127.0.0.1", NvueOptions(port=srv.port, scheme="http", username="cumulus", password="pw"))


async def fetch(c) -> dict:
    try:
        return await c.fetch()
    finally:
        await c.close()


async def test_ufm_documented_links_and_ports():
    async with StandIn(ufm_routes()) as srv:
        c = ufm(srv)
        result = UfmCollector.parse(await fetch(c), c.spec(), UfmCollector.new_state())[0]
    assert srv.seen[0].headers["Authorization"].startswith("Basic ")  # /ufmRest takes basic auth
    links = set(result.links)
    assert Link("MF0;sw-a:MQM8700/U1", "29", "MF0;sw-a:MQM8700/U1", "28") in links  # string ports resolve
    assert Link("host-c HCA-1", "2", "MF0;sw-b:MQM8700/U1", "20") in links  # both directions
    assert len(links) == 4
    up = {(g.device, g.port): g.value for g in result.gauges if g.name == "link_up"}
    speed = {(g.device, g.port) for g in result.gauges if g.name == "link_speed_bytes"}
    assert up[("MF0;sw-b:MQM8700/U1", "52")] == 0.0 and ("MF0;sw-b:MQM8700/U1", "52") not in speed
    assert up[("MF0;sw-b:MQM8700/U1", "20")] == 1.0 and ("MF0;sw-b:MQM8700/U1", "20") in speed
    labels = {(p.device, p.port): p.label for p in result.ports}
    assert labels[("MF0;sw-b:MQM8700/U1", "52")] == "1/26/2" and labels[("host-c HCA-1", "2")] == "HCA-1/2"


def test_ufm_monitoring_attributes_count_four_octet_words():
    # REST API Guide "Monitoring REST API", attribute values: Infiniband_MBOut/MBIn are "data
    # octets, divided by 4 ... reported as a multiple of four octets".
    assert lookup("Infiniband_MBOut") == ("tx_bytes", 4.0)
    assert lookup("Infiniband_MBIn") == ("rx_bytes", 4.0)
    assert lookup("Infiniband_MBOutRate") is None  # a rate attribute is not a counter


# Cumulus Linux user guide "NVUE API", "Use the API for Active Monitoring": the published body of
# GET /nvue_v1/interface/swp1/link/stats.
NVUE_LINK_STATS = {"carrier-transitions": 6, "in-bytes": 293771538, "in-drops": 0, "in-errors": 0, "in-pkts": 2321737,
                   "out-bytes": 366068936, "out-drops": 0, "out-errors": 0, "out-pkts": 3536629}
# GET /nvue_v1/interface?rev=operational, one entry as a public NVIDIA GTC NVUE REST demo prints
# it (inferred: not a reference page): link.state {"up": {}}, link.speed "1G".
NVUE_INTERFACES = {
    "swp1": {"ip": {"address": {}}, "link": {"auto-negotiate": "off", "duplex": "full", "mac": "44:38:39:00:00:01",
                                             "mtu": 9216, "speed": "1G", "state": {"up": {}},
                                             "stats": {"carrier-transitions": 2, "in-bytes": 0}}, "type": "swp"},
    "lo": {"type": "loopback"},
}


async def test_nvue_documented_link_stats_and_listing():
    routes = {"/nvue_v1/interface": Reply(NVUE_INTERFACES),
              "/nvue_v1/interface/swp1/link/stats": Reply(NVUE_LINK_STATS)}  # the rest answers 404
    async with StandIn(routes) as srv:
        c = nvue(srv)
        result = NvueCollector.parse(await fetch(c), c.spec(), NvueCollector.new_state())[0]
    assert all(s.query.get("rev") == "operational" for s in srv.seen)
    assert not any("/lo/" in s.path_qs for s in srv.seen)  # only ^swp\d interfaces are polled
    got = {(s.port, s.counter): (s.value, s.scale) for s in result.counters}
    assert got[("swp1", "rx_bytes")] == (293771538, 1.0) and got[("swp1", "tx_packets")] == (3536629, 1.0)
    assert got[("swp1", "link_downed")] == (3, 1.0)  # 6 carrier changes, up now: 3 downs
    gauges = {(g.port, g.name): g.value for g in result.gauges}
    assert gauges[("swp1", "link_up")] == 1.0 and gauges[("swp1", "link_speed_bytes")] == 125e6
    assert any("not found (HTTP 404) on swp1" in w for w in result.warnings)  # sections this switch lacks


IN_2_MIN = "an HTTP date 120 s ahead"  # made when the test runs
# (status, Retry-After header, error reason, words the message must carry, retry_after)
ERRORS = [
    (401, None, "auth", "HTTP 401", None),
    (403, None, "auth", "HTTP 403", None),
    (404, None, "http", "HTTP 404", None),
    (429, "30", "http", "rate limited (HTTP 429); the server asks to wait 30 s", 30.0),
    (429, None, "http", "rate limited (HTTP 429)", None),
    (503, IN_2_MIN, "http", "service unavailable (HTTP 503); the server asks to wait", 120.0),
    (503, None, "http", "service unavailable (HTTP 503)", None),
]
# The first call each collector makes, which the failing status is served on.
FIRST_CALL = {
    "ufm": ("/ufmRest/resources/ports", ufm),
    "ufm-telemetry": ("/csv/cset/converted_enterprise", telemetry),
    "nvue": ("/nvue_v1/interface", nvue),
}


@pytest.mark.parametrize("source", sorted(FIRST_CALL))
@pytest.mark.parametrize(("status", "retry_after", "reason", "words", "wait"), ERRORS)
async def test_error_statuses_give_clear_reasons(source, status, retry_after, reason, words, wait):
    path, make = FIRST_CALL[source]
    if retry_after == IN_2_MIN:
        retry_after = email.utils.formatdate(time.time() + 120, usegmt=True)
    headers = {"Retry-After": retry_after} if retry_after else {}
    body = {"error": f"status {status} from the stand-in"}  # vendor error bodies are not published: inferred
    routes = ufm_routes() if source == "ufm" else {}
    routes[path] = Reply(body, status=status, headers=headers)
    async with StandIn(routes) as srv:
        with pytest.raises(FetchError) as err:
            await fetch(make(srv))
    assert err.value.reason == reason
    assert words in str(err.value) and path in str(err.value)
    if wait is None:
        assert err.value.retry_after is None
    else:
        assert err.value.retry_after == pytest.approx(wait, abs=2.0)
    assert "pw" not in str(err.value)


async def test_ufm_counters_call_rate_limited_is_a_warning():
    limited = Reply({"error": "too many requests"}, status=429, headers={"Retry-After": "60"})
    async with StandIn(ufm_routes(**{"/ufmRest/monitoring/pm_counters": limited})) as srv:
        c = UfmCollector("ufm01", "127.0.0.1", UfmOptions(port=srv.port, scheme="http", username="admin", password="pw",
                                                           pm_counters_path="monitoring/pm_counters"))
        result = UfmCollector.parse(await fetch(c), c.spec(), UfmCollector.new_state())[0]
    assert result.links and any("429" in w for w in result.warnings)


async def test_scheduler_keeps_the_servers_retry_after():
    async with StandIn({"/csv/cset/converted_enterprise": Reply("busy", status=429, headers={"Retry-After": "45"})}) as srv:
        sched = Scheduler(lambda p: None, backoff_max=300.0)
        target = ScheduledTarget(telemetry(srv), interval=10.0, timeout=5.0)
        poll = await sched.poll_once(target)
        await target.collector.close()
    assert not poll.ok and poll.reason == "http" and "wait 45 s" in poll.error
    assert sched.retry_after["tele01"] == 45.0  # _loop sleeps at least this long before the next poll
