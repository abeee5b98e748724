"""The exporter assembles families the components yield (targets, store, pipeline, scheduler,
state file, HTTP listener), reading their status objects, not their internals."""

from __future__ import annotations

from fabricmon.agent import state
from fabricmon.agent.config import load_text
from fabricmon.agent.exporter import connections, metrics
from fabricmon.agent.replay import replay_recording
from fabricmon.agent.runtime import Agent
from fabricmon.agent.scheduler import Scheduler
from fabricmon.agent.store import CounterStore, StoreStatus
from fabricmon.core.model import Counters
from tests.conftest import ROOT

RECORDING = ROOT / "tests" / "scenarios" / "target_outage.jsonl.gz"


def test_a_live_agents_exposition_has_each_family_once(tmp_path):
    result = replay_recording(RECORDING)
    agent = Agent(load_text("targets: []\n"), listen="127.0.0.1:10117")
    agent.keeper = state.StateKeeper(state.state_path(tmp_path), result.pipeline.store, result.pipeline.detector)
    fams = metrics.all_families(result.pipeline, extra=agent.families())
    names = [f.name for f in fams]
    assert len(names) == len(set(names)), sorted(n for n in names if names.count(n) > 1)
    for part in (result.pipeline.targets.families(), result.pipeline.store.families(), result.pipeline.families(),
                 agent.scheduler.families(), agent.keeper.families(), connections.STATS.families()):
        assert {f.name for f in part} <= set(names)  # every component's families reach /metrics
    failed = {n: s.errors for n, s in result.pipeline.targets.items() if s.errors}
    assert failed.get("leaf02") == {"timeout": 3}  # the outage scenario's timeouts, from the targets' status
    errs = next(f for f in fams if f.name == "fabricmon_target_poll_errors_total")
    assert 'fabricmon_target_poll_errors_total{target="leaf02",source="snmp",reason="timeout"} 3' in errs.lines


def test_store_status_counts_series_and_refusals():
    store = CounterStore(max_ports=1, max_series_per_port=2)
    c = Counters()
    for port, name in (("p1", "rx_bytes"), ("p1", "tx_bytes"), ("p1", "rx_packets"), ("p2", "rx_bytes")):
        c.add("sw", port, name, 5)
    store.update_columns(c.columns("sw", {}, []), 1000.0)
    s = store.status()
    assert s == StoreStatus(series=store.series_count(), refused_ports=store.refused["port"], refused_series=store.refused["series"])
    assert s.series == 2 and s.refused_ports >= 1 and s.refused_series >= 1
    text = {f.name: f.lines for f in store.families()}
    assert text["fabricmon_store_series"] == ["fabricmon_store_series 2"]


def test_scheduler_and_target_status():
    sched = Scheduler(lambda poll: None)
    assert sched.status().targets == 0 and sched.status().restarts == 0
    result = replay_recording(RECORDING)
    now = result.pipeline.now()
    rows = [s.to_json(now) for s in result.pipeline.targets.values()]
    assert {r["target"] for r in rows} == set(result.pipeline.targets)
    assert all(r["age_s"] is None or r["age_s"] >= 0 for r in rows)
