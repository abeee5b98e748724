"""ufm-telemetry collector: a real aiohttp Telemetry stand-in on 127.0.0.1 serving CSV and
Prometheus text (sharding honoured), truncated bodies, errors and garbage; parser fuzz."""

from __future__ import annotations

import asyncio
import contextlib
import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from fabricmon.collectors import get
from fabricmon.collectors.base import FetchError, ParseError
from fabricmon.collectors.ufm_telemetry import UfmTelemetryCollector, UfmTelemetryOptions
from fabricmon.collectors.ufm_telemetry.fetch import shard_paths
from fabricmon.collectors.ufm_telemetry.parse import detect_format, to_seconds
from fabricmon.core.model import TargetSpec
from tests.conftest import public_fixture
from tests.http_standins import BasicAuthRule, Reply, StandIn
from tests.pki import self_signed_cert

SMALL = "ib/Mellanox__ufm_sdk_3.0/plugins__fluentd_telemetry_plugin__tests__message_samples__small_telemetry.json"
CSV_PATH = "/csv/cset/converted_enterprise"

PROM = """# HELP PortXmitDataExtended transmitted data
# TYPE PortXmitDataExtended counter
PortXmitDataExtended{source="0x0002c90300f172a0",node_guid="2c90300f172a0",port_guid="2c90300f172a2",port_num="2"} 85554128244 1628683905941
PortXmitPktsExtended{source="0x0002c90300f172a0",node_guid="2c90300f172a0",port_guid="2c90300f172a2",port_num="2"} 1188251785 1628683905941
PortXmitWaitExtended{node_guid="b0cf0e0300d33fc0",port_guid="b0cf0e0300d33fc0",port_num="17",node_desc="MF0;sw \\"q\\":MQM9700/U1"} 77
"""


def fixture_rows() -> list[dict]:
    return json.loads(public_fixture(SMALL).read_text())["values"]


def rows_to_csv(rows: list[dict]) -> str:
    """The TFS sample back in the endpoint's CSV form: header row, data rows, trailing empty row."""
    header = list(rows[0])
    lines = [",".join(header)] + [",".join(str(r[k]) for k in header) for r in rows]
    return "\n".join(lines) + "\n"


def collector(srv: StandIn, **opts) -> UfmTelemetryCollector:
    scheme = "https" if srv.tls else "http"
    return UfmTelemetryCollector("tele01", "127.0.0.1", UfmTelemetryOptions(port=srv.port, scheme=scheme, **opts))


async def fetch_once(c: UfmTelemetryCollector) -> dict:
    try:
        return await c.fetch()
    finally:
        await c.close()


@pytest.mark.fixtures
async def test_csv_shards_from_public_sample():
    rows = fixture_rows()
    async with StandIn({CSV_PATH: Reply(rows_to_csv(rows), content_type="text/csv")}) as srv:
        c = collector(srv, num_shards=3, sharding_field="port_guid")
        payload = await fetch_once(c)
    # every shard was asked for, with the three sharding parameters
    got = sorted((s.query["num_shards"], s.query["shard"], s.query["sharding_field"]) for s in srv.seen)
    assert got == [("3", "0", "port_guid"), ("3", "1", "port_guid"), ("3", "2", "port_guid")]
    assert [r["path"] for r in payload["responses"]] == [f"{CSV_PATH}?num_shards=3&shard={i}&sharding_field=port_guid" for i in range(3)]

    res = UfmTelemetryCollector.parse({"responses": payload["responses"][:1]}, c.spec(), UfmTelemetryCollector.new_state())[0]
    samples = {(s.device, s.port, s.counter): s for s in res.counters}
    # The sample has no node_description column: devices are the node GUIDs.
    sw = "0x248a070300ef19a0"
    for r in rows:
        dev = "0x" + r["node_guid"][2:].rjust(16, "0")
        port = str(r["port_num"])
        assert samples[(dev, port, "tx_bytes")].value == r["Infiniband_MBOut_u_Gb"]
        assert samples[(dev, port, "tx_bytes")].scale == 4.0
        assert samples[(dev, port, "rx_packets")].value == r["Infiniband_PckIn_u_Packets"]
        assert samples[(dev, port, "link_downed")].value == r["Infiniband_LinkDowned_u_Errors"]
    # switch ports share one port_guid and differ by port_num
    assert {p for (d, p, c) in samples if d == sw and c == "tx_bytes"} == {"1", "23", "36"}
    assert all(s.bits == 64 and not s.saturating for s in res.counters)
    # timestamp 1709652347161873 is in microseconds
    assert res.clocks[sw] == pytest.approx(1709652347.161873)
    assert any("labelled by GUID" in w for w in res.warnings)


@pytest.mark.fixtures
def test_json_rows_from_public_sample_parse_like_csv():
    data = json.loads(public_fixture(SMALL).read_text())
    spec = TargetSpec("t", "ufm-telemetry")
    as_json = UfmTelemetryCollector.parse({"responses": [{"method": "GET", "path": "/json/x", "status": 200, "body": data}]}, spec, UfmTelemetryCollector.new_state())[0]
    as_csv = UfmTelemetryCollector.parse(
        {"responses": [{"method": "GET", "path": CSV_PATH, "status": 200, "body": rows_to_csv(data["values"])}]}, spec, None)[0]
    key = lambda s: (s.device, s.port, s.counter)  # noqa: E731
    assert sorted(as_json.counters, key=key) == sorted(as_csv.counters, key=key)
    assert len(as_json.counters) == 6 * 17  # 6 ports x 17 mapped counters; hist*, CBW, Normalized_* are not counters


async def test_prometheus_text_with_basic_auth_over_tls(tmp_path):
    cert = self_signed_cert(tmp_path)
    async with StandIn({"/labels/metrics": Reply(PROM)}, {"/labels": BasicAuthRule("tele", "pw")}, tls=cert) as srv:
        c = collector(srv, path="labels/metrics", auth="basic", username="tele", password="pw", ca_file=str(cert[0]),
                      node_names={"0x0002c90300f172a0": "ys23n02 mlx4_0"})
        payload = await fetch_once(c)
    assert payload["responses"][0]["path"] == "/labels/metrics"  # num_shards 1: no sharding query
    res = UfmTelemetryCollector.parse(payload, c.spec(), UfmTelemetryCollector.new_state())[0]
    samples = {(s.device, s.port, s.counter): s.value for s in res.counters}
    assert samples[("ys23n02 mlx4_0", "2", "tx_bytes")] == 85554128244
    assert samples[("ys23n02 mlx4_0", "2", "tx_packets")] == 1188251785
    assert samples[('MF0;sw "q":MQM9700/U1', "17", "xmit_wait")] == 77  # escaped quote in a label value
    assert res.clocks == {"ys23n02 mlx4_0": pytest.approx(1628683905.941)}  # ms sample timestamps
    assert {p.guid for p in res.ports} == {"0x0002c90300f172a2", "0xb0cf0e0300d33fc0"}


async def test_single_shard_option_asks_for_that_shard_only():
    async with StandIn({CSV_PATH: Reply("timestamp,node_guid,port_num,PortXmitDataExtended\n")}) as srv:
        await fetch_once(collector(srv, num_shards=4, shard=2, sharding_field="node_guid"))
    assert [s.path_qs for s in srv.seen] == [f"{CSV_PATH}?num_shards=4&shard=2&sharding_field=node_guid"]


async def test_truncated_body_is_size_error():
    body = "timestamp,node_guid,port_num,PortXmitDataExtended\n" + "1709652347,0x1,1,5\n" * 200
    async with StandIn({CSV_PATH: Reply(body, truncate_to=300)}) as srv:
        with pytest.raises(FetchError) as ei:
            await fetch_once(collector(srv))
    assert ei.value.reason == "size"


async def test_http_500_is_http_error():
    async with StandIn({CSV_PATH: Reply("internal error", status=500)}) as srv:
        with pytest.raises(FetchError) as ei:
            await fetch_once(collector(srv))
    assert ei.value.reason == "http" and "500" in str(ei.value)


async def test_one_failing_shard_fails_the_poll():
    async with StandIn({CSV_PATH: Reply("x")}) as srv:
        with pytest.raises(FetchError) as ei:
            await fetch_once(collector(srv, path="/csv/other", num_shards=2))
    assert ei.value.reason == "http" and "404" in str(ei.value)


async def test_garbage_body_fetches_but_does_not_parse():
    async with StandIn({"/metrics": Reply("\x00\x01 this is !! not telemetry")}) as srv:
        c = collector(srv, path="/metrics")
        payload = await fetch_once(c)
    with pytest.raises(ParseError):
        UfmTelemetryCollector.parse(payload, c.spec(), UfmTelemetryCollector.new_state())


def test_options_and_registry():
    assert get("ufm-telemetry") is UfmTelemetryCollector
    o = UfmTelemetryOptions()
    assert (o.scheme, o.port, o.path, o.format, o.sharding_field) == ("http", 9001, CSV_PATH, "auto", "port_guid")
    assert UfmTelemetryOptions(path="metrics").path == "/metrics"
    with pytest.raises(ValidationError):
        UfmTelemetryOptions(num_shards=2, shard=2)
    with pytest.raises(ValidationError):
        UfmTelemetryOptions(unknown=1)
    assert shard_paths("/m?x=1", 2, None, "port_guid") == ["/m?x=1&num_shards=2&shard=0&sharding_field=port_guid",
                                                            "/m?x=1&num_shards=2&shard=1&sharding_field=port_guid"]


def test_timestamp_units_and_format_detection():
    assert to_seconds(1709652347) == 1709652347
    assert to_seconds(1709652347161) == pytest.approx(1709652347.161)
    assert to_seconds("1709652347161873") == pytest.approx(1709652347.161873)
    assert to_seconds(1709652347161873000) == pytest.approx(1709652347.161873)
    assert to_seconds("") is None and to_seconds(-5) is None and to_seconds("nan") is None
    assert detect_format("/metrics", "# HELP x\nx 1\n", "auto") == "prometheus"
    assert detect_format("/enterprise", "timestamp,node_guid\n", "auto") == "csv"
    assert detect_format("/x", [{"a": 1}], "auto") == "json"
    with pytest.raises(ParseError):
        detect_format("/x", "<html>", "auto")


def test_csv_header_without_identity_is_parse_error():
    with pytest.raises(ParseError, match="identity"):
        UfmTelemetryCollector.parse({"responses": [{"path": CSV_PATH, "status": 200, "body": "a,b\n1,2\n"}]}, TargetSpec("t", "ufm-telemetry"), UfmTelemetryCollector.new_state())


_names = st.sampled_from(["timestamp", "node_guid", "port_guid", "port_num", "node_description", "port_label",
                          "Infiniband_MBOut_u_Gb", "PortXmitDataExtended", "Infiniband_XmitWait_u_Ticks", "junk"])
_cell = st.one_of(st.text(max_size=12), st.integers(-5, 2**70).map(str), st.sampled_from(["0x248a070300ef19a0", "1", "", "1e400", "nan"]))


@st.composite
def _csv_body(draw) -> str:
    header = draw(st.lists(_names, min_size=1, max_size=7))
    rows = draw(st.lists(st.lists(_cell, min_size=len(header) - 1, max_size=len(header) + 1), max_size=5))
    def q(c: str) -> str:
        return '"' + c.replace('"', '""') + '"' if any(x in c for x in ',"\n\r') else c
    return "\n".join([",".join(header)] + [",".join(q(c) for c in r) for r in rows]) + "\n"


@st.composite
def _prom_body(draw) -> str:
    lines = []
    for _ in range(draw(st.integers(0, 5))):
        name = draw(st.sampled_from(["PortXmitDataExtended", "PortRcvPktsExtended", "x", "Infiniband_LinkDowned_u_Errors"]))
        labels = draw(st.dictionaries(st.sampled_from(["node_guid", "port_guid", "port_num", "node_desc", "a"]), _cell, max_size=4))
        lab = ",".join(f'{k}="{v}"' for k, v in labels.items())
        ts = draw(st.sampled_from(["", " 1628683905941", " 99999999999999999999999999999999999"]))
        lines.append(f"{name}{{{lab}}} {draw(_cell) or '0'}{ts}")
    return "\n".join([*lines, draw(st.text(max_size=20))])


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(body=st.one_of(_csv_body(), _prom_body(), st.text(max_size=80), st.lists(st.dictionaries(_names, _cell), max_size=3)),
       path=st.sampled_from([CSV_PATH, "/metrics", "/json/x", "/enterprise"]),
       fmt=st.sampled_from(["auto", "csv", "prometheus", "json"]),
       status=st.sampled_from([200, 500, None]))
def test_fuzz_parser_raises_only_parse_error(body, path, fmt, status):
    spec = TargetSpec("t", "ufm-telemetry", {"format": fmt, "node_names": {"0x248a070300ef19a0": "sw"}})
    with contextlib.suppress(ParseError):
        UfmTelemetryCollector.parse({"responses": [{"method": "GET", "path": path, "status": status, "body": body}]}, spec, UfmTelemetryCollector.new_state())


def test_fuzz_payload_shape():
    for bad in (None, [], {"responses": "x"}, {"responses": [1]}):
        with pytest.raises(ParseError):
            UfmTelemetryCollector.parse(bad, TargetSpec("t", "ufm-telemetry"), UfmTelemetryCollector.new_state())  # type: ignore[arg-type]


async def test_cancelled_poll_leaves_the_collector_usable():
    """The scheduler enforces timeouts by cancelling fetch: nothing may leak or stay broken."""
    routes = {CSV_PATH: Reply("timestamp,node_guid,port_num,PortXmitDataExtended\n1709652347,0x1,1,5\n", delay=5.0),
              "/fast": Reply("timestamp,node_guid,port_num,PortXmitDataExtended\n1709652347,0x1,1,6\n")}
    async with StandIn(routes) as srv:
        c = collector(srv)
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(c.fetch(), 0.2)
        c.options.path = "/fast"
        payload = await fetch_once(c)
    assert payload["responses"][0]["body"].endswith("0x1,1,6\n")
    assert c._slot._client is None  # closed
