"""InfiniBand record -> replay: `perfquery` (fake infiniband-diags on PATH), `ufm-telemetry` and
`ufm` (real aiohttp stand-ins; UFM over TLS with token auth) polled live and recorded; the
replay gives the same metrics. A dead UFM target fails with a clear error and
fabricmon_target_up 0 while the others go on."""

from __future__ import annotations

import json
import os

import pytest

from fabricmon.agent.config import load
from fabricmon.agent.exporter.server import Exporter
from fabricmon.agent.recording import read_polls
from fabricmon.agent.replay import replay_recording
from fabricmon.agent.runtime import Agent
from tests.conftest import ROOT, free_port, public_fixture
from tests.http_standins import Reply, StandIn, TokenAuthRule
from tests.pki import self_signed_cert
from tests.test_golden_e2e import stable
from tests.test_ufm_telemetry_rest import CSV_PATH, SMALL, rows_to_csv

FAKEBIN = ROOT / "tests" / "fakebin"
CASES = ROOT / "collectors" / "perfquery" / "testcases"
TREY = "ib/treydock__infiniband_exporter/collectors__fixtures__perfquery__"


@pytest.fixture
def fakeib(tmp_path, monkeypatch):
    d = tmp_path / "ib"
    d.mkdir()
    topo = json.loads((CASES / "edr_switch_topology" / "payload.json").read_text())["ibnetdiscover"]
    (d / "ibnetdiscover.out").write_text(topo)
    (d / "perfquery-x-1719.out").write_text(public_fixture(TREY + "0x7cfe9003009ce5b0.out").read_text())
    (d / "perfquery-x-134.out").write_text(public_fixture(TREY + "0x7cfe9003003b4bde.out").read_text())
    (d / "perfquery-x-133.out").write_text(public_fixture(TREY + "0x7cfe9003003b4b96.out").read_text())
    monkeypatch.setenv("PATH", f"{FAKEBIN}{os.pathsep}{os.environ.get('PATH', '')}")
    monkeypatch.setenv("FAKE_IB_DIR", str(d))
    for var in ("FAKE_IBNETDISCOVER_MODE", "FAKE_PERFQUERY_MODE", "FAKE_IBNETDISCOVER_LID", "FAKE_PERFQUERY_LID", "FAKE_IB_LOG"):
        monkeypatch.delenv(var, raising=False)
    return d


async def test_ib_record_replays_to_same_metrics_and_dead_target_is_isolated(tmp_path, fakeib, caplog):
    rows = json.loads(public_fixture(SMALL).read_text())["values"]
    dead_port = free_port()  # nothing listens there: connection refused
    ufm_case = json.loads((ROOT / "collectors" / "ufm" / "testcases" / "v620_fabric" / "payload.json").read_text())
    ufm_routes = {r["path"].split("?", 1)[0]: Reply(r["body"]) for r in ufm_case["responses"]}
    cert, key = self_signed_cert(tmp_path)
    token_file = tmp_path / "ufm-token"
    token_file.write_text("czQYeCfKIeXqlwSqtorunOPysaSp2r\n")
    token_file.chmod(0o600)
    ufm = StandIn(ufm_routes, {"/ufmRestV3": TokenAuthRule("czQYeCfKIeXqlwSqtorunOPysaSp2r")}, tls=(cert, key))
    async with StandIn({CSV_PATH: Reply(rows_to_csv(rows), content_type="text/csv")}) as srv, ufm:
        cfg = tmp_path / "fabricmon.yml"
        rec = tmp_path / "ib.jsonl"
        cfg.write_text(f"""
global: {{poll_interval: 0.5s, poll_timeout: 5s, jitter: 0}}
targets:
  - {{name: ib-fabric, source: perfquery, address: ""}}
  - {{name: tele, source: ufm-telemetry, address: 127.0.0.1, scheme: http, port: {srv.port}}}
  - {{name: ufm-dead, source: ufm, address: 127.0.0.1, port: {dead_port}, username: admin, password: x, scheme: http}}
  - {{name: ufm01, source: ufm, address: 127.0.0.1, port: {ufm.port}, auth: token, token_file: {token_file}, ca_file: {cert}}}
""")
        loaded = load(cfg)
        agent = Agent(loaded, listen="", record_path=str(rec), duration=4.0)
        await agent.run()
    live_text = Exporter(agent.pipeline).render_now().text.decode()
    _, polls, _ = read_polls(rec)
    by = {name: [p for p in polls if p.target == name] for name in ("ib-fabric", "tele", "ufm-dead", "ufm01")}
    assert len(by["ufm01"]) >= 2 and all(p.ok for p in by["ufm01"]), by["ufm01"][:1]
    assert "czQYeCfKIeXqlwSqtorunOPysaSp2r" not in rec.read_text()  # the token never reaches the recording
    assert len(by["ib-fabric"]) >= 2 and all(p.ok for p in by["ib-fabric"])
    assert len(by["tele"]) >= 2 and all(p.ok for p in by["tele"])
    assert by["ufm-dead"] and not any(p.ok for p in by["ufm-dead"])
    assert by["ufm-dead"][0].reason == "connection"
    assert str(dead_port) in by["ufm-dead"][0].error
    assert "ibnetdiscover" in by["ib-fabric"][0].payload  # topology in the first poll
    assert any("ufm-dead" in r.getMessage() for r in caplog.records)
    assert "password" not in rec.read_text()

    assert 'fabricmon_target_up{target="ufm-dead",source="ufm"} 0' in live_text
    assert 'fabricmon_target_up{target="ib-fabric",source="perfquery"} 1' in live_text
    assert 'fabricmon_target_up{target="ufm01",source="ufm"} 1' in live_text
    assert 'fabricmon_target_poll_errors_total{target="ufm-dead",source="ufm",reason="connection"}' in live_text
    # 36298026860928 words x 4 from the EDR switch fixture, on the switch's port 1
    assert 'fabricmon_port_transmit_bytes_total{device="' in live_text and "145192107443712" in live_text

    replayed = Exporter(replay_recording(rec, loaded).pipeline).render_now().text.decode()
    assert stable(replayed) == stable(live_text)
