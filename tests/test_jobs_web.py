"""The job pages over HTTP: ids with a slash (Kubernetes) and hostile names, escaped; 404 for unknown jobs."""

from __future__ import annotations

from urllib.parse import quote

from aiohttp.test_utils import TestClient, TestServer

from fabricmon.agent.exporter.server import Exporter, make_app
from fabricmon.agent.pipeline import Pipeline
from fabricmon.agent.web.ids import finding_id
from fabricmon.core.model import Finding, JobInfo, Link, ParseResult

EVIL = "<img src=x onerror=alert(1)>"
JOB = f"team-a/llama{EVIL}"


async def test_job_pages_escape_and_route_ids_with_slashes() -> None:
    p = Pipeline([], [])
    p.store_result("lldp", 100.0, ParseResult(links=[Link("leaf01", "Ethernet1", f"gpu01{EVIL}", "eth0")]))
    p.store_result("k8s", 100.0, ParseResult(inventory=[JobInfo(JOB, (f"gpu01{EVIL}",), 50.0, (), (("namespace", f"team{EVIL}"),))]))
    f = Finding("congestion", "warning", "leaf01", "Ethernet1", 3, None, 100.0, summary="s", peer_device=f"gpu01{EVIL}", peer_port="eth0")
    p.detector.restore([f])
    p.detect(110.0)
    assert f.evidence["jobs"] == [JOB]
    exporter = Exporter(p)
    exporter.render_now()
    async with TestClient(TestServer(make_app(exporter))) as client:
        for path in (f"/jobs/{quote(JOB, safe='')}", f"/findings/{finding_id(f)}"):
            r = await client.get(path)
            body = await r.text()
            assert r.status == 200, path
            assert "<img" not in body and "&lt;img src=x onerror=alert(1)&gt;" in body, path
        assert f"href='/jobs/{quote(JOB, safe='')}'" in body  # the finding page links the job
        r = await client.get(f"/api/jobs/{quote(JOB, safe='')}?window=3600")
        view = await r.json()
        assert r.status == 200 and view["job"] == JOB and view["window_s"] == 3600 and view["findings"][0]["kind"] == "congestion"
        assert (await client.get("/jobs/unknown")).status == 404
        assert (await client.get("/api/jobs/unknown")).status == 404
        assert (await client.get(f"/api/jobs/{quote(JOB, safe='')}?window=5")).status == 400
