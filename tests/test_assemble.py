"""One way to build a pipeline (agent/assemble.py): the config model's defaults when there is
no config, the config's settings everywhere, this shard's targets picked once per start and
each collector built once."""

from __future__ import annotations

import asyncio

from fabricmon import collectors
from fabricmon.agent import config as config_mod
from fabricmon.agent.assemble import build_pipeline, plan_targets
from fabricmon.agent.config import Config, load, load_text
from fabricmon.agent.replay import replay_recording
from fabricmon.core.model import TargetSpec
from tests.conftest import ROOT

RECORDING = ROOT / "tests" / "scenarios" / "link_flap_ib.jsonl.gz"


def _settings(p) -> tuple:
    return (p.store.history, p.store.stale_after, p.detect_min_interval, p.fabric, sorted(r.name for r in p.detector.rules),
            sorted(p.topology.links()), p.exposition_policy)


def test_no_config_is_the_config_models_defaults():
    specs = [TargetSpec("a", "snmp")]
    assert _settings(build_pipeline(None, specs)) == _settings(build_pipeline(Config(), specs))
    g = Config().global_
    assert (build_pipeline(None, specs).store.history, build_pipeline(None, specs).store.stale_after) == (g.history, g.stale_after)


def test_a_replay_takes_the_configs_settings(tmp_path):
    cfg = load_text("global: {history: 31, stale_after: 1h}\ndetector: {min_interval: 20s}\nfabric: {lossless_priorities: [3, 4]}\n"
                    "rules: {link_flap: {enabled: false}}\n"
                    "links: [{device: a, port: '1', peer_device: b, peer_port: '2'}]\n")
    p = replay_recording(RECORDING, cfg).pipeline
    assert (p.store.history, p.store.stale_after, p.detect_min_interval) == (31, 3600.0, 20.0)
    assert p.fabric.lossless == (3, 4) and "link_flap" not in {r.name for r in p.detector.rules}
    assert p.topology.peer("a", "1") == ("b", "2") and p.exposition_policy is None  # a replay exports in full
    live = build_pipeline(cfg.config, [], exposition=True)
    assert _settings(live)[:-1] == _settings(build_pipeline(cfg.config, []))[:-1] and live.exposition_policy is not None


async def test_a_start_picks_the_targets_once_and_builds_each_collector_once(tmp_path, monkeypatch):
    from fabricmon.agent.runtime import Agent

    cfg = tmp_path / "f.yml"
    cfg.write_text("global: {poll_interval: 0.2s, jitter: 0}\ntargets:\n" + "".join(
        f"  - {{name: gpu{i}, source: host, sysfs_root: {tmp_path}, ethtool: false, dcb: false}}\n" for i in range(3)))
    loaded = load(cfg)
    picks, built = [], []
    real_pick = config_mod.Config.shard_targets
    monkeypatch.setattr(config_mod.Config, "shard_targets", lambda self: picks.append(1) or real_pick(self))
    host = collectors.get("host")
    real_init = host.__init__

    def counting_init(self, *args, **kwargs):
        built.append(args[0])
        real_init(self, *args, **kwargs)

    monkeypatch.setattr(host, "__init__", counting_init)
    agent = Agent(loaded, listen="", duration=30.0)
    run = asyncio.create_task(agent.run())
    while not run.done() and not (hasattr(agent, "pipeline") and len(agent.pipeline.targets) == 3
                                  and all(s.polls >= 1 for s in agent.pipeline.targets.values())):
        await asyncio.sleep(0.05)
    assert len(picks) == 1 and sorted(built) == ["gpu0", "gpu1", "gpu2"]
    # A reload (of the running agent: its changes are a job of the pipeline worker) builds
    # collectors only for what changed: here nothing.
    assert await agent.reload() and len(built) == 3 and len(picks) == 2
    agent.stop_event.set()
    await run


def test_plan_targets_knows_the_specs_without_building_collectors(monkeypatch):
    loaded = load_text("targets:\n  - {name: sw, source: nvue, address: sw, username: u, password: p, wjh_path: ''}\n")
    nvue = collectors.get("nvue")
    monkeypatch.setattr(nvue, "__init__", lambda *a, **k: (_ for _ in ()).throw(AssertionError("built")))
    [t] = plan_targets(loaded)
    assert t.spec.name == "sw" and t.spec.options["wjh_path"] == ""  # the source's own spec rules (NVUE: "" = disabled)
