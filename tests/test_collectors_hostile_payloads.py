"""Payloads bounded in objects, not only bytes (issue 32), through real stand-ins on loopback:
a JSON body of empty objects under the byte cap, a body nested 100,000 deep, an NVUE listing
of 30,000 interfaces, a UFM Telemetry poll of too many values, and counters that are numbers
but not counter values."""

from __future__ import annotations

import gzip

import pytest

from fabricmon.collectors.base import ErrorReason, FetchError, ParseError
from fabricmon.collectors.nvue import NvueCollector, NvueOptions
from fabricmon.collectors.ufm import UfmCollector, UfmOptions
from fabricmon.collectors.ufm_telemetry import UfmTelemetryCollector
from fabricmon.core import boundedjson
from fabricmon.core.model import TargetSpec
from tests.http_standins import Reply, StandIn, fetch_once

PORTS = "/ufmRest/resources/ports"


def _ufm(srv: StandIn, **opts) -> UfmCollector:
    return UfmCollector("ufm01", "127.0.0.1", UfmOptions(port=srv.port, scheme="http", username="u", password="pw", **opts))


def _routes(ports: Reply) -> dict[str, Reply]:
    return {PORTS: ports, "/ufmRest/resources/links": Reply([]), "/ufmRest/resources/systems": Reply([])}


async def test_a_body_of_empty_objects_is_refused_before_it_is_decoded():
    """250 MB of [{},{},...] under the 256 MiB cap took the agent to 6.75 GB; here 9 M objects (27 MB)."""
    body = b"[" + b"{}," * 9_000_000 + b"{}]"
    async with StandIn(_routes(Reply(body, content_type="application/json"))) as srv:
        with pytest.raises(FetchError) as exc:
            await fetch_once(_ufm(srv))
    assert exc.value.reason == ErrorReason.SIZE and "more than 8,000,000 values" in str(exc.value)


async def test_the_values_bound_is_an_option():
    body = b"[" + b"{}," * 2000 + b"{}]"
    async with StandIn(_routes(Reply(body, content_type="application/json"))) as srv:
        with pytest.raises(FetchError) as exc:
            await fetch_once(_ufm(srv, max_values=1000))
    assert exc.value.reason == ErrorReason.SIZE


async def test_a_body_nested_100000_deep_is_a_protocol_error_not_internal():
    body = b"[" * 100_000 + b"]" * 100_000
    async with StandIn(_routes(Reply(body, content_type="application/json"))) as srv:
        with pytest.raises(FetchError) as exc:
            await fetch_once(_ufm(srv))
    assert exc.value.reason == ErrorReason.PROTOCOL and "nested deeper" in str(exc.value)


async def test_a_large_body_is_decoded_element_by_element_to_the_same_value():
    ports = [{"guid": f"{i:016x}", "number": i % 64 + 1, "system_id": f"sw{i // 64}", "severity": "Info"} for i in range(40_000)]
    async with StandIn(_routes(Reply(ports))) as srv:
        payload = await fetch_once(_ufm(srv))
    [got] = [r["body"] for r in payload["responses"] if r["path"] == PORTS]
    assert got == ports


async def test_an_nvue_listing_of_thousands_of_interfaces_is_refused():
    """30,000 interfaces froze the loop 79 s (a call per interface and path, a task per call)."""
    listing = {f"swp{i}": {"type": "swp"} for i in range(30_000)}
    async with StandIn({"/nvue_v1/interface": Reply(listing)}) as srv:
        c = NvueCollector("leaf01", "127.0.0.1", NvueOptions(port=srv.port, scheme="http", username="u", password="p"))
        with pytest.raises(FetchError) as exc:
            await fetch_once(c)
        assert len(srv.seen) == 1  # refused before any per-interface call
    assert exc.value.reason == ErrorReason.SIZE and "30000 interfaces" in str(exc.value) and "max_interfaces (1024)" in str(exc.value)


def test_a_ufm_telemetry_poll_of_too_many_values_is_a_parse_error(monkeypatch):
    monkeypatch.setattr("fabricmon.collectors.ufm_telemetry.parse.MAX_VALUES", 1000)
    header = "timestamp,node_guid,port_guid,port_num,node_description,Infiniband_MBOut_u_Gb\n"
    csv = header + "".join(f"1709652347161873,0x{i:016x},0x{i:016x},1,sw{i},{i}\n" for i in range(400))
    payload = {"responses": [{"method": "GET", "path": "/csv/cset/converted_enterprise", "status": 200, "body": csv}]}
    with pytest.raises(ParseError, match="more than the limit of 1,000"):
        UfmTelemetryCollector.parse(payload, TargetSpec("t", "ufm-telemetry"), None)


@pytest.mark.parametrize("value", ["1e400", "-1", "NaN", "1.5", str(2**70)])
def test_a_counter_that_is_not_a_counter_value_is_dropped_with_a_warning(value):
    """They were dropped silently: the warning names the field (the pipeline's log line names the target)."""
    header = "timestamp,node_guid,port_guid,port_num,node_description,Infiniband_SymbolErrors_u_Errors,Infiniband_MBOut_u_Gb\n"
    csv = header + f"1709652347161873,0x{1:016x},0x{1:016x},1,sw1,{value},5\n"
    payload = {"responses": [{"method": "GET", "path": "/csv/cset/converted_enterprise", "status": 200, "body": csv}]}
    result, _ = UfmTelemetryCollector.parse(payload, TargetSpec("t", "ufm-telemetry"), None)
    assert len(result.counters) == 1  # the good one is kept
    [warning] = [w for w in result.warnings if "not counter values" in w]
    assert "field Infiniband_SymbolErrors_u_Errors: 1 value(s)" in warning and "sw1 port 1" in warning


def test_json_values_are_counted_before_decoding():
    assert boundedjson.count_values(b"[{},{},{}]") >= 3
    with pytest.raises(boundedjson.JsonRefused):
        boundedjson.loads(gzip.decompress(gzip.compress(b"[" + b"1," * 100 + b"1]")), max_values=50)
