"""Sharding: stable target assignment, self-sharding sources, and two agents == one agent."""

from __future__ import annotations

import os
import subprocess
import sys
import zlib

import pytest

from fabricmon.agent.config import ConfigError, load_text, shard_of
from fabricmon.agent.detector import rules as rules_mod
from fabricmon.agent.exporter import metrics
from fabricmon.agent.exporter.metrics import ExpositionPolicy
from fabricmon.agent.pipeline import Pipeline
from fabricmon.core.model import Poll, TargetSpec
from tests.conftest import ROOT

NAMES = [f"leaf{i:03d}" for i in range(120)] + ["spine-a", "spine-b", "ufm", "sw 1", "Ünïcode"]
FIELDS = ("PortXmitData", "PortRcvData", "PortXmitPkts", "PortRcvPkts", "PortXmitWait", "SymbolErrorCounter")


def test_shard_of_is_pinned_and_process_independent():
    # sha256-based, so the same in every process whatever PYTHONHASHSEED says.
    here = [shard_of(n, 7) for n in NAMES]
    code = "from fabricmon.agent.config import shard_of; import sys; print([shard_of(n, 7) for n in sys.argv[1:]])"
    for seed in ("1", "12345"):
        out = subprocess.run([sys.executable, "-c", code, *NAMES], cwd=ROOT, capture_output=True, text=True,
                             env={**os.environ, "PYTHONHASHSEED": seed}, check=True).stdout
        assert out.strip() == str(here)
    assert shard_of("leaf000", 1) == 0
    assert [shard_of(n, 3) for n in ("leaf000", "leaf001", "spine-a")] == [
        int.from_bytes(__import__("hashlib").sha256(n.encode()).digest()[:8], "big") % 3 for n in ("leaf000", "leaf001", "spine-a")]


@pytest.mark.parametrize("count", [1, 2, 3, 5])
def test_every_target_is_in_exactly_one_shard(count):
    targets = "".join(f"  - {{name: '{n}', source: perfquery}}\n" for n in NAMES)
    seen: dict[str, int] = {}
    for index in range(count):
        loaded = load_text(f"shard: {{index: {index}, count: {count}}}\ntargets:\n{targets}")
        for t in loaded.config.shard_targets():
            assert t.name not in seen, f"{t.name} in shards {seen[t.name]} and {index}"
            seen[t.name] = index
    assert sorted(seen) == sorted(NAMES)
    if count > 1:
        assert len(set(seen.values())) == count  # 125 names do not all land in one shard


def test_bad_shard_names_the_line():
    with pytest.raises(ConfigError) as exc:
        load_text("targets: []\nshard:\n  index: 2\n  count: 2\n")
    assert "shard" in str(exc.value) and "below count 2" in str(exc.value)


def test_self_sharding_source_is_polled_by_every_agent_with_its_own_shard():
    from fabricmon.agent.assemble import plan_targets

    text = ("shard: {index: 1, count: 3}\ntargets:\n"
            "  - {name: ufm, source: ufm-telemetry, address: 127.0.0.1}\n"
            + "".join(f"  - {{name: '{n}', source: perfquery}}\n" for n in NAMES[:30]))
    loaded = load_text(text)
    mine = loaded.config.shard_targets()
    assert "ufm" in [t.name for t in mine]
    ufm = next(t for t in plan_targets(loaded) if t.spec.name == "ufm")
    opts = ufm.scheduled().collector.options
    assert (opts.num_shards, opts.shard) == (3, 1)
    assert loaded.options["ufm"].num_shards == 1  # the validated config itself is untouched
    from fabricmon.collectors.ufm_telemetry.fetch import shard_paths

    assert shard_paths(opts.path, opts.num_shards, opts.shard, opts.sharding_field) == [
        "/csv/cset/converted_enterprise?num_shards=3&shard=1&sharding_field=port_guid"]


# ------------------------------------------------------------------ two agents == one agent
def perfquery_text(lids: range, k: int) -> str:
    out = []
    for lid in lids:
        for port in (1, 2, 3):
            out.append(f"# Port extended counters: Lid {lid} port {port} (CapMask: 0x5300 CapMask2: 0x0000002)\n")
            out.extend(f"{f}:....................{lid * 1000 + port * 100 + j + k * (j + 1) * 7}\n" for j, f in enumerate(FIELDS))
    return "".join(out)


UFM_HEADER = "timestamp,node_guid,port_guid,port_num,node_description,Infiniband_MBOut_u_Gb,Infiniband_XmitWait_u_Ticks\n"


def ufm_rows(k: int) -> list[tuple[str, str]]:
    """(port_guid, CSV line) of 40 ports on 10 switches: 4 ports each."""
    rows = []
    for sw in range(10):
        guid = f"0x248a0703{sw:08x}"
        for port in range(1, 5):
            rows.append((guid, f"{1700000000 + k * 10},{guid},{guid},{port},ufm-sw{sw},{sw * 10 + port + k * 5},{k * port}\n"))
    return rows


def ufm_shard(k: int, shard: int | None, count: int) -> str:
    """What a sharded UFM Telemetry endpoint answers: the rows whose port_guid hashes to ``shard``."""
    rows = [line for guid, line in ufm_rows(k) if shard is None or zlib.crc32(guid.encode()) % count == shard]
    return UFM_HEADER + "".join(rows)


def config_text(index: int, count: int) -> str:
    lines = [f"shard: {{index: {index}, count: {count}}}", "targets:",
             "  - {name: ufm, source: ufm-telemetry, address: 127.0.0.1}"]
    lines += [f"  - {{name: ib{i}, source: perfquery}}" for i in range(8)]
    return "\n".join(lines) + "\n"


def run_agent(index: int, count: int, level: str = "full") -> Pipeline:
    loaded = load_text(config_text(index, count))
    mine = loaded.config.shard_targets()
    specs = [TargetSpec(t.name, t.source) for t in mine]
    p = Pipeline(specs, rules_mod.build())
    p.exposition_policy = ExpositionPolicy(level=level, shard_index=index, shard_count=count)
    for k in range(3):
        t = 1000.0 + 10 * k
        for spec in specs:
            if spec.source == "perfquery":
                i = int(spec.name[2:])
                payload = {"perfquery": [perfquery_text(range(100 + 10 * i, 104 + 10 * i), k)]}
            else:
                body = ufm_shard(k, index if count > 1 else None, count)
                payload = {"responses": [{"method": "GET", "path": "/csv/cset/converted_enterprise", "status": 200, "body": body}]}
            p.ingest(Poll(spec.name, spec.source, t, 0.1, True, payload))
    return p


def fabric_lines(p: Pipeline) -> list[str]:
    fams = [*metrics.fabric_families(p), *metrics.topology_families(p)[:2]]
    return [ln for f in fams for ln in f.samples()]


@pytest.mark.parametrize("count", [2, 3])
def test_sharded_agents_together_export_what_one_agent_exports(count):
    alone = fabric_lines(run_agent(0, 1))
    parts = [fabric_lines(run_agent(i, count)) for i in range(count)]
    union = [ln for part in parts for ln in part]
    assert len(union) == len(set(union)), "a series is exported by two shards"
    assert sorted(union) == sorted(alone)
    assert all(parts), "a shard exported nothing"
    # counters of both sources are there: 8 targets x 4 LIDs x 3 ports and the 40 UFM ports
    assert sum(ln.startswith("fabricmon_port_transmit_bytes_total{") for ln in alone) == 8 * 4 * 3 + 40


def test_sharded_health_aggregates_add_up():
    def sums(p: Pipeline) -> dict[str, float]:
        out: dict[str, float] = {}
        for f in metrics.fabric_families(p):
            if f.name.startswith("fabricmon_fabric_"):
                for ln in f.samples():
                    key, value = ln.rsplit(" ", 1)
                    out[key] = out.get(key, 0.0) + float(value)
        return out

    alone = sums(run_agent(0, 1, "health"))
    together: dict[str, float] = {}
    for i in range(2):
        for key, v in sums(run_agent(i, 2, "health")).items():
            together[key] = together.get(key, 0.0) + v
    assert alone and together == pytest.approx(alone)


def test_shard_info_is_exported():
    p = run_agent(1, 2)
    fams = {f.name: f for f in metrics.all_families(p)}
    assert fams["fabricmon_shard_info"].lines == ['fabricmon_shard_info{index="1",count="2"} 1']


def test_unsharded_agent_exports_no_shard_info():
    p = run_agent(0, 1)
    assert "fabricmon_shard_info" not in {f.name for f in metrics.all_families(p)}


def test_a_sharded_replay_keeps_what_that_agent_would_poll(tmp_path):
    """Replay shards by the same rule as the live agent (config.in_shard): a self-sharding
    source's target is in every shard's replay (each agent polls it for its share), the others
    in the one shard their name hashes to."""
    from fabricmon.agent.recording import RecordingWriter
    from fabricmon.agent.replay import replay_recording

    specs = [TargetSpec("ufm", "ufm-telemetry"), *(TargetSpec(f"ib{i}", "perfquery") for i in range(8))]
    path = tmp_path / "r.jsonl"
    rec = RecordingWriter(path, specs)
    for k in range(2):
        for s in specs:
            rec.write_poll(Poll(s.name, s.source, 1000.0 + 10 * k, 0.1, False, error="timeout", reason="timeout"))
    rec.close()
    seen: dict[str, list[int]] = {}
    for index in range(2):
        loaded = load_text(config_text(index, 2))
        result = replay_recording(path, loaded)
        assert result.polls == 2 * len(result.pipeline.targets)  # polls of the other shard's targets are skipped
        for name in result.pipeline.targets:
            seen.setdefault(name, []).append(index)
    assert seen.pop("ufm") == [0, 1]
    assert sorted(seen) == [f"ib{i}" for i in range(8)] and all(len(v) == 1 for v in seen.values())
    assert {v[0] for v in seen.values()} == {0, 1}
