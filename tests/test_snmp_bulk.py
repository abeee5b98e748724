"""The bulk read of snmprec payloads (collectors/snmp/layout.py) against the line-by-line parse.

After a poll, the SNMP parse state carries its payload's layout; the next payload with the
same lines is read in bulk. Whatever the next payload is, the result must be the line-by-line
parse's: each test parses a sequence of payloads twice, carrying the state as the pipeline
does and dropping the layout before each poll, and compares the dumps of the golden
testcases. The payloads are the testcases', the scenario recordings', the public LibreNMS
captures, the benchmark's synthesized switch, and random edits of their values (plain ones,
and the ones that change which series exist: an ignored number, an unmapped gauge value,
a sign, a leading zero, out of range) and of their structure.
"""

from __future__ import annotations

import gzip
import json
import random
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench import snmp_compare
from fabricmon.collectors.snmp import SnmpCollector
from fabricmon.collectors.testcase import dump, target_spec
from fabricmon.core.model import TargetSpec
from tests.conftest import PUBLIC

ROOT = Path(__file__).resolve().parent.parent
CASES = sorted((ROOT / "collectors" / "snmp" / "testcases").glob("*/payload*.json"))


def _recorded() -> list[tuple[TargetSpec, str]]:
    out = []
    for rec in sorted(ROOT.glob("tests/scenarios*/*.jsonl.gz")):
        with gzip.open(rec, "rt") as f:
            header = json.loads(f.readline())
            specs = {t["name"]: TargetSpec.from_header(t) for t in header.get("targets", [])}
            for line in f:
                poll = json.loads(line)
                if poll.get("source") == "snmp" and poll.get("ok") and poll["target"] in specs:
                    out.append((specs[poll["target"]], poll["payload"]["snmprec"]))
                    break
    return out


SEEDS: list[tuple[TargetSpec, str]] = [
    *((target_spec(p.parent), json.loads(p.read_text())["snmprec"]) for p in CASES),
    *_recorded(),
    *((TargetSpec(p.stem, "snmp"), p.read_text(errors="replace")) for p in sorted(PUBLIC.glob("eth/*/*.snmprec"))),
    (TargetSpec("sw07", "snmp"), snmp_compare.snmprec(7)),
]


def _compare(spec: TargetSpec, payloads: list[str]) -> int:
    """Parse ``payloads`` in turn both ways; the dumps must be equal. Returns how many were read in bulk."""
    carried = exact = SnmpCollector.new_state()
    bulk = 0
    for text in payloads:
        got, carried = SnmpCollector.parse_poll({"snmprec": text}, spec, carried)
        want, exact = SnmpCollector.parse_poll({"snmprec": text}, spec, replace(exact, layout=None))
        assert dump(got) == dump(want)
        bulk += isinstance(got.counters.values, np.ndarray)
    return bulk


# A new value a counter of each snmprec type may take (INTEGER and Gauge32 lines are mostly
# states and configuration: they keep theirs).
_GROWS = {"65": 1 << 32, "67": 1 << 32, "70": 1 << 64}


def _value(rng: random.Random, odd: bool, tag: str, old: str) -> str:
    if not odd:
        return str(rng.randrange(_GROWS[tag])) if tag in _GROWS else old
    return rng.choice(["4294967295", "4294967296", "18446744073709551616", "-7", "007", "3", "9", "", "x1", str(1 << 31)])


def _edit(text: str, rng: random.Random, mode: str) -> str:
    """New values for the numbers that end lines (mode "hostile": some odd ones, "structure":
    other text too)."""
    lines = text.split("\n")
    for i, line in enumerate(lines):
        head, sep, value = line.rpartition("|")
        if sep and value.isdigit() and rng.random() < 0.5:
            lines[i] = head + sep + _value(rng, mode != "values" and rng.random() < 0.05, head.rpartition("|")[2], value)
        elif mode == "structure" and rng.random() < 0.02:
            lines[i] = rng.choice([line + "1", line.replace("|70|", "|65|"), line.replace(".1|", ".9|", 1), "", line.upper()])
    if mode == "structure" and rng.random() < 0.3 and len(lines) > 2:
        del lines[rng.randrange(len(lines))]
    return "\n".join(lines)


def _payloads(text: str, rng: random.Random, n: int, structure: bool) -> list[str]:
    out = [text]
    for _ in range(n):
        r = rng.random()
        text = _edit(text, rng, "values" if r < 0.6 else "hostile" if r < 0.8 or not structure else "structure")
        out.append(text)
    return out


@pytest.mark.parametrize("seed", range(len(SEEDS)), ids=[s.name for s, _ in SEEDS])
def test_new_values_are_read_in_bulk_with_the_line_by_line_result(seed):
    spec, text = SEEDS[seed]
    rng = random.Random(seed)
    _compare(spec, _payloads(text, rng, 4, structure=False))


def test_a_switch_poll_is_read_in_bulk():
    spec, text = SEEDS[-1]
    bulk = _compare(spec, [text, text.replace("|70|1007", "|70|1008"), text.replace("|67|", "|67|1")])
    assert bulk == 2


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, len(SEEDS) - 1), st.integers(0, 2**32), st.booleans())
def test_random_edits_give_the_line_by_line_result(seed, rnd, structure):
    spec, text = SEEDS[seed]
    _compare(spec, _payloads(text, random.Random(rnd), 3, structure))
