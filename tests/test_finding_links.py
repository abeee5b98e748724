"""Findings carry their id and page URL (issue 31 section 2): ``/api/findings``, the findings file,
``fabricmon_finding_active`` (labels ``id`` and ``url``: the join) and the pages, all under the
agent's external URL (``web.external_url``, like Prometheus' ``--web.external-url``)."""

from __future__ import annotations

import json
import re

import pytest
from aiohttp.test_utils import TestClient, TestServer

from fabricmon.agent.cli import _FindingsOut
from fabricmon.agent.config import ConfigError, load_text
from fabricmon.agent.exporter.server import Exporter, make_app
from fabricmon.agent.pipeline import Pipeline
from fabricmon.agent.web.ids import external_url, finding_id, finding_json
from fabricmon.core.model import Finding

SHARED = ["kind", "severity", "device", "port", "priority", "role", "start", "end", "summary", "evidence"]


def _findings() -> list[Finding]:
    return [Finding("pfc_storm", "critical", "leaf01", "Ethernet5", 3, "origin", 100.0, summary="storm", evidence={"origin": "leaf01:Ethernet5"},
                    peer_device="gpu05", peer_port="eth0", rule="pfc_storm"),
            Finding("link_degraded", "warning", "ib-leaf01", "3", None, None, 110.0, summary="flap", rule="link_flap")]


def test_finding_json_keeps_the_shared_fields_and_adds_id_and_url() -> None:
    f = _findings()[0]
    out = finding_json(f, "https://fm.example/fabricmon")
    assert list(out)[: len(SHARED)] == SHARED  # the shared format's fields first, as they were
    assert {k: out[k] for k in SHARED} == {k: f.to_json()[k] for k in SHARED}
    assert out["id"] == finding_id(f) and out["url"] == f"https://fm.example/fabricmon/findings/{finding_id(f)}"
    assert finding_json(f)["url"] == f"/findings/{finding_id(f)}"  # no external URL: the path on the agent


def test_findings_file_lines_carry_id_and_url(tmp_path) -> None:
    out = _FindingsOut(str(tmp_path / "f.jsonl"), "http://agent:10117")
    for f in _findings():
        out.write(f)
    out.close()
    lines = [json.loads(x) for x in (tmp_path / "f.jsonl").read_text().splitlines()]
    assert [x["url"] for x in lines] == [f"http://agent:10117/findings/{finding_id(f)}" for f in _findings()]


async def test_api_metrics_and_pages_agree_on_id_and_url() -> None:
    p = Pipeline([], [])
    p.external_url = "https://fm.example/fabricmon"
    fs = _findings()
    p.detector.restore(fs)
    exporter = Exporter(p)
    text = exporter.render_now().text.decode()
    async with TestClient(TestServer(make_app(exporter))) as client:
        items = await (await client.get("/api/findings")).json()
        assert {i["id"] for i in items} == {finding_id(f) for f in fs}
        for item in items:
            # the join: the series of a finding has the API item's id and url as labels
            assert re.search(rf'fabricmon_finding_active\{{[^}}]*id="{item["id"]}",url="{re.escape(item["url"])}"\}} 1', text), item
            page = await (await client.get(f"/findings/{item['id']}")).text()
            assert '<base href="/fabricmon/">' in page  # links resolve under the proxy's prefix
            assert f"<code>{item['id']}</code>" in page


def test_external_url_from_config_listen_address_and_tls(monkeypatch) -> None:
    monkeypatch.setattr("socket.gethostname", lambda: "mgmt01")
    assert external_url("https://fm.example/x/", "127.0.0.1:10117") == "https://fm.example/x"
    assert external_url(None, "127.0.0.1:10117") == "http://127.0.0.1:10117"
    assert external_url(None, ":10117", tls=True) == "https://mgmt01:10117"  # every address: the machine's name
    assert external_url(None, "[::1]:10117") == "http://[::1]:10117"
    assert external_url(None, None) == ""


def test_external_url_is_validated_at_its_line() -> None:
    assert load_text("web:\n  external_url: https://fm.example:8443/fabricmon/\n").config.web.external_url == "https://fm.example:8443/fabricmon"
    with pytest.raises(ConfigError) as exc:
        load_text("web:\n  external_url: fm.example/fabricmon\n", "c.yml")
    assert any(p.startswith("c.yml:2:") and "external_url" in p for p in exc.value.problems), exc.value.problems
