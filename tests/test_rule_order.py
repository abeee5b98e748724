"""The order of the rules does not matter: every corpus recording (and the demo) gives the same
findings, summaries and evidence included, with the rule registry reversed and shuffled.

Reversing swaps every pair of rules, so any rule that read another's results (the old
``credit_deadlock`` before ``packet_loss`` contract) or any merge that kept the first of two
observations would show here; the shuffle (seeded per recording, so the corpus runs many
orders) covers orders that are neither.
"""

from __future__ import annotations

import json
import random
import zlib
from pathlib import Path

import pytest

from fabricmon.agent.config import load
from fabricmon.agent.detector import rules as rules_mod
from fabricmon.agent.evaluate import config_beside
from fabricmon.agent.replay import replay_recording
from tests.conftest import ROOT

RECORDINGS = sorted([*ROOT.glob("tests/scenarios*/*.jsonl.gz"), ROOT / "agent" / "demo" / "demo.jsonl.gz"])


def _findings(path: Path) -> list[str]:
    beside = config_beside(path)
    res = replay_recording(path, load(beside) if beside.is_file() else None)
    assert not res.pipeline.detector.status().failed_rules
    return sorted(json.dumps(f.to_json(), sort_keys=True) for f in res.findings)


def test_the_corpus_is_all_here():
    assert len(RECORDINGS) >= 36 and all(p.exists() for p in RECORDINGS)


@pytest.mark.parametrize("path", RECORDINGS, ids=lambda p: f"{p.parent.name}/{p.name.split('.')[0]}")
def test_reversed_and_shuffled_rule_orders_give_identical_findings(path: Path, monkeypatch: pytest.MonkeyPatch):
    registry = list(rules_mod.RULES.items())
    forward = _findings(path)
    shuffled = registry[:]
    random.Random(zlib.crc32(path.name.encode())).shuffle(shuffled)
    for order in (registry[::-1], shuffled):
        monkeypatch.setattr(rules_mod, "RULES", dict(order))
        assert [r.name for r in rules_mod.build()] == [name for name, _ in order]  # the registry really is in that order
        assert _findings(path) == forward, [name for name, _ in order]
