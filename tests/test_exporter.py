"""Exporter: pre-rendered exposition, content negotiation, gzip, endpoints, a parse failure."""

from __future__ import annotations

import gzip
import json

import pytest
from aiohttp.test_utils import TestClient, TestServer

from fabricmon import collectors
from fabricmon.agent.detector.rules import build
from fabricmon.agent.exporter.exposition import Family, render
from fabricmon.agent.exporter.server import Exporter, make_app
from fabricmon.agent.pipeline import Pipeline
from fabricmon.agent.web.ids import finding_id
from fabricmon.collectors import Collector, ParseError
from fabricmon.core.model import DeviceInfo, Gauge, ParseResult, Poll, PortInfo, TargetSpec


class TinyCollector(Collector):
    """Payload {"ports": {port: {"tx": n, "downed": n}}} or {"bad": true}."""

    source = "tiny"

    async def fetch(self):
        return {}

    @classmethod
    def parse(cls, payload, spec, state):
        if payload.get("bad"):
            raise ParseError("line 1: expected ports")
        if payload.get("crash"):
            raise ZeroDivisionError("parser bug")
        res = ParseResult(devices=[DeviceInfo(spec.name, "switch", guid="0x1")])
        for port, v in payload["ports"].items():
            res.counters.add(spec.name, port, "tx_bytes", v["tx"], scale=4)
            res.counters.add(spec.name, port, "link_downed", v["downed"], bits=8, saturating=True)
            res.counters.add(spec.name, port, "pfc_rx_pause_frames", v["tx"] // 10, sub=(3,))
            res.gauges.append(Gauge(spec.name, port, "link_up", 1))
            res.ports.append(PortInfo(spec.name, port, alias='uplink "a"'))
        return res, state


@pytest.fixture()
def pipeline(monkeypatch):
    monkeypatch.setitem(collectors._loaded, "tiny", TinyCollector)
    return Pipeline([TargetSpec("sw1", "tiny"), TargetSpec("sw2", "tiny")], build())


def poll(target, t, ports=None, **payload):
    return Poll(target, "tiny", t, 0.25, True, payload={"ports": ports or {}, **payload})


def test_counters_are_exported_in_base_units(pipeline):
    pipeline.ingest(poll("sw1", 100.0, {"1": {"tx": 1000, "downed": 0}}))
    pipeline.ingest(poll("sw1", 110.0, {"1": {"tx": 3000, "downed": 0}}))
    text = Exporter(pipeline).render_now().text.decode()
    assert 'fabricmon_port_transmit_bytes_total{device="sw1",port="1"} 12000' in text
    assert 'fabricmon_pfc_receive_pause_frames_total{device="sw1",port="1",priority="3"} 300' in text
    assert 'fabricmon_port_up{device="sw1",port="1"} 1' in text
    assert 'alias="uplink \\"a\\""' in text  # label values escaped
    assert 'fabricmon_target_up{target="sw1",source="tiny"} 1' in text
    assert 'fabricmon_target_up{target="sw2",source="tiny"} 0' in text  # no poll yet


def test_link_flap_finding_reaches_metrics_and_api(pipeline):
    pipeline.ingest(poll("sw1", 100.0, {"1": {"tx": 0, "downed": 1}}))
    pipeline.ingest(poll("sw1", 110.0, {"1": {"tx": 0, "downed": 2}}))
    [f] = pipeline.findings()
    assert (f.kind, f.severity, f.device, f.port, f.start) == ("link_degraded", "warning", "sw1", "1", 110.0)
    pipeline.external_url = "https://fm.example/fabricmon"
    text = Exporter(pipeline).render_now().text.decode()
    fid = finding_id(f)
    assert ('fabricmon_finding_active{kind="link_degraded",severity="warning",device="sw1",port="1",priority="",role="",'
            f'id="{fid}",url="https://fm.example/fabricmon/findings/{fid}"}} 1') in text
    assert 'fabricmon_web_info{external_url="https://fm.example/fabricmon"} 1' in text
    assert 'fabricmon_findings_total{kind="link_degraded",severity="warning"} 1' in text
    for t in (120.0, 130.0, 140.0):  # clear after 3 quiet polls; end = first quiet poll
        pipeline.ingest(poll("sw1", t, {"1": {"tx": 0, "downed": 2}}))
    assert not pipeline.findings()
    assert pipeline.ended[-1].end == 120.0


def test_parse_error_is_a_target_error_and_keeps_last_data(pipeline):
    pipeline.ingest(poll("sw1", 100.0, {"1": {"tx": 5, "downed": 0}}))
    pipeline.ingest(Poll("sw1", "tiny", 110.0, 0.1, True, payload={"bad": True}))
    pipeline.ingest(Poll("sw2", "tiny", 110.0, 0.1, True, payload={"crash": True}))
    s1, s2 = pipeline.targets["sw1"], pipeline.targets["sw2"]
    assert s1.up is False and s1.errors == {"parse": 1} and "line 1: expected ports" in s1.last_error
    assert s2.errors == {"parse": 1} and "ZeroDivisionError" in s2.last_error
    assert s1.last_success_t == 100.0
    text = Exporter(pipeline).render_now().text.decode()
    assert 'fabricmon_target_poll_errors_total{target="sw1",source="tiny",reason="parse"} 1' in text
    assert 'fabricmon_port_transmit_bytes_total{device="sw1",port="1"} 20' in text  # last good data stays


def test_openmetrics_rendering():
    fam_c = Family("fabricmon_x_total", "counter", "X.")
    fam_c.add('{a="1"}', 2)
    fam_i = Family("fabricmon_build_info", "info", "B.")
    fam_i.add('{version="1"}', 1)
    text, om = render([fam_c, fam_i])
    assert b"# TYPE fabricmon_x_total counter\nfabricmon_x_total{a=\"1\"} 2\n" in text
    assert b"# TYPE fabricmon_build_info gauge" in text
    assert b"# TYPE fabricmon_x counter\nfabricmon_x_total{a=\"1\"} 2\n" in om
    assert b"# TYPE fabricmon_build info\nfabricmon_build_info" in om
    assert om.endswith(b"# EOF\n")


def test_a_string_no_code_point_encodes_costs_one_character_not_the_body():
    fam = Family("fabricmon_x", "gauge", "X.")
    fam.add('{device="sw\ud800"}', 1)
    fam.add('{device="ok"}', 2)
    text, om = render([fam])
    assert b'fabricmon_x{device="sw?"} 1\nfabricmon_x{device="ok"} 2\n' in text
    assert om.endswith(b"# EOF\n")


async def test_http_endpoints_negotiation_and_gzip(pipeline):
    exporter = Exporter(pipeline)
    exporter.render_now()
    async with TestClient(TestServer(make_app(exporter))) as client:
        r = await client.get("/ready")
        assert r.status == 503 and "sw1" in await r.text()
        pipeline.ingest(poll("sw1", 100.0, {"1": {"tx": 1, "downed": 0}}))
        pipeline.ingest(poll("sw2", 100.0, {"1": {"tx": 1, "downed": 0}}))
        exporter.render_now()
        assert (await client.get("/ready")).status == 200
        assert (await client.get("/healthz")).status == 200

        r = await client.get("/metrics", headers={"Accept-Encoding": "identity"})
        assert r.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        body = await r.read()
        assert b"fabricmon_target_up" in body and not body.endswith(b"# EOF\n")

        r = await client.get("/metrics", headers={"Accept": "application/openmetrics-text;version=1.0.0,text/plain;q=0.5",
                                                  "Accept-Encoding": "gzip"}, auto_decompress=False)
        assert r.headers["Content-Type"].startswith("application/openmetrics-text")
        assert r.headers["Content-Encoding"] == "gzip"
        assert gzip.decompress(await r.read()).endswith(b"# EOF\n")
        # The same compressed body serves every scrape of this generation (only the few lines of
        # process metrics after it are compressed per scrape).
        assert exporter.exposition.gzip_head(True) is exporter.exposition.gzip_head(True)

        r = await client.get("/api/findings")
        assert json.loads(await r.text()) == []
        r = await client.get("/api/targets")
        targets = await r.json()
        assert {t["target"] for t in targets} == {"sw1", "sw2"} and all(t["up"] for t in targets)
        page = await (await client.get("/")).text()
        assert "/metrics" in page and "sw1" in page
