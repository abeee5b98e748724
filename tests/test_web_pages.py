"""Web view pages: every name and field escaped (issue 20 item 9), stable ids, 404s, the demo banner."""

from __future__ import annotations

from aiohttp.test_utils import TestClient, TestServer

from fabricmon.agent.exporter.server import Exporter, make_app
from fabricmon.agent.pipeline import Pipeline
from fabricmon.agent.web.ids import finding_id
from fabricmon.core.model import Finding, Link, TargetSpec

EVIL = "<img src=x onerror=alert(1)>"


def _hostile() -> Finding:
    return Finding("pfc_storm", f"critical{EVIL}", f"sw{EVIL}", f"Eth{EVIL}", f"3{EVIL}", f"victim{EVIL}",  # type: ignore[arg-type]
                   100.0, summary=f"s{EVIL}", evidence={f"k{EVIL}": [f"v{EVIL}"], "origin": f"h{EVIL}:eth0"},
                   peer_device=f"peer{EVIL}", peer_port=f"p{EVIL}", rule="pfc_storm")


async def test_every_page_escapes_names_and_fields() -> None:
    p = Pipeline([TargetSpec(name=f"t{EVIL}", source="snmp")], [])
    p.topology.set_static([Link(f"sw{EVIL}", f"Eth{EVIL}", f"peer{EVIL}", f"p{EVIL}")])
    f = _hostile()
    p.detector.restore([f])
    exporter = Exporter(p, demo=True)
    exporter.render_now()
    async with TestClient(TestServer(make_app(exporter))) as client:
        for path in ("/", "/fabric", f"/findings/{finding_id(f)}", "/targets/t%3Cimg%20src%3Dx%20onerror%3Dalert(1)%3E"):
            r = await client.get(path)
            body = await r.text()
            assert r.status == 200, path
            assert "<img" not in body, path
            assert "&lt;img src=x onerror=alert(1)&gt;" in body, path
            assert "DEMO" in body, path
        assert (await client.get("/findings/000000000000")).status == 404
        assert (await client.get("/targets/nope")).status == 404
        js = await client.get("/static/refresh.js")
        assert js.status == 200 and "setInterval" in await js.text()


def test_finding_id_is_stable_and_distinct() -> None:
    a = Finding("congestion", "warning", "sw1", "Ethernet1", 3, None, 10.0)
    same = Finding("congestion", "critical", "sw1", "Ethernet1", 3, None, 10.0, summary="evidence and severity change")
    later = Finding("congestion", "warning", "sw1", "Ethernet1", 3, None, 11.0)
    assert finding_id(a) == finding_id(same)
    assert finding_id(a) != finding_id(later)
    assert len(finding_id(a)) == 12 and int(finding_id(a), 16) >= 0


def test_the_landing_page_names_a_rule_that_failed() -> None:
    from fabricmon.agent.detector import Rule
    from fabricmon.agent.web import views

    class Broken(Rule):
        name = "broken"
        kinds = ("congestion",)

        def evaluate(self, ctx):
            raise ValueError(f"bad {EVIL}")

    p = Pipeline([], [Broken()])
    assert "id='detector'" not in views.summary_page(p, [], False)  # nothing while every rule runs
    p.detect(1000.0)
    page = views.summary_page(p, [], False)
    assert "<b>1 rule(s) failed</b>" in page
    assert "rule broken failed 1 time(s); last: ValueError: bad &lt;img src=x onerror=alert(1)&gt;" in page
