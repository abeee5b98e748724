"""Record -> replay round trip: a recording made live against a real snmpsim replays to the
same metrics and findings as the live run produced."""

from __future__ import annotations

import asyncio

import pytest

from fabricmon.agent.config import load
from fabricmon.agent.exporter.server import Exporter
from fabricmon.agent.recording import read_polls
from fabricmon.agent.replay import replay_recording
from fabricmon.agent.runtime import Agent
from tests.conftest import ROOT, public_fixture
from tests.snmpsim_util import SNMPSIM, SnmpSim
from tests.test_golden_e2e import stable

pytestmark = pytest.mark.snmpsim


@pytest.mark.skipif(SNMPSIM is None, reason="snmpsim-command-responder not installed (pip install snmpsim pysmi)")
async def test_record_against_snmpsim_replays_to_same_metrics(tmp_path):
    sonic = public_fixture("eth/Jellyfrog__librenms/tests__snmpsim__dell-sonic.snmprec")
    with SnmpSim({"sonic": sonic, "cisco": ROOT / "tests" / "data" / "snmp" / "cisco_pfc.snmprec"}) as sim:
        cfg = tmp_path / "fabricmon.yml"
        rec = tmp_path / "polls.jsonl.gz"
        cfg.write_text(f"""
global: {{poll_interval: 1s, poll_timeout: 10s, jitter: 0}}
targets:
  - {{name: leaf-sonic, source: snmp, address: 127.0.0.1, port: {sim.port}, community: sonic}}
  - {{name: leaf-cisco, source: snmp, address: 127.0.0.1, port: {sim.port}, community: cisco}}
""")
        loaded = load(cfg)
        agent = Agent(loaded, listen="", record_path=str(rec), duration=120.0)
        run = asyncio.create_task(agent.run())
        # Until each target finished two polls (a rate needs two), however slow a loaded machine
        # makes the walks: a fixed duration made this test depend on the machine's speed.
        while not run.done() and not (hasattr(agent, "pipeline") and len(agent.pipeline.targets) == 2
                                      and all(s.polls >= 2 for s in agent.pipeline.targets.values())):
            await asyncio.sleep(0.1)
        agent.stop_event.set()
        await run
    live = stable(Exporter(agent.pipeline).render_now().text.decode())
    header, polls, _ = read_polls(rec)
    assert {t["name"] for t in header["targets"]} == {"leaf-sonic", "leaf-cisco"}
    assert all(p.ok for p in polls), [p.error for p in polls if not p.ok]
    assert all(sum(p.target == t for p in polls) >= 2 for t in ("leaf-sonic", "leaf-cisco")), [(p.target, p.t, p.duration_s) for p in polls]
    assert "community" not in rec.read_bytes().decode("latin-1")  # no secrets in recordings

    replayed = stable(Exporter(replay_recording(rec, loaded).pipeline).render_now().text.decode())
    assert replayed == live
    assert 'fabricmon_pfc_receive_pause_frames_total{device="leaf-cisco"' in live
    assert 'fabricmon_target_up{target="leaf-sonic",source="snmp"} 1' in live
