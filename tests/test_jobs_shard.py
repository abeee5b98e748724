"""Sharded agents: every shard polls the job sources, so every shard's findings list their jobs."""

from __future__ import annotations

from fabricmon.agent.config import load_text, shard_of

TARGETS = """targets:
  - {name: slurm, source: slurm}
  - {name: k8s, source: kubernetes, address: 127.0.0.1, token_file: /t}
  - {name: placement, source: jobs-file, path: /x}
""" + "".join(f"  - {{name: leaf{i}, source: snmp, address: 192.0.2.{i}, community: c}}\n" for i in range(12))


def test_job_sources_are_polled_by_every_shard_and_switches_split() -> None:
    jobs = {"slurm", "k8s", "placement"}
    seen: dict[str, int] = {}
    for index in range(3):
        loaded = load_text(f"shard: {{index: {index}, count: 3}}\n" + TARGETS)
        mine = {t.name for t in loaded.config.shard_targets()}
        assert jobs <= mine
        for name in mine - jobs:
            assert shard_of(name, 3) == index
            seen[name] = seen.get(name, 0) + 1
    assert seen == {f"leaf{i}": 1 for i in range(12)}
