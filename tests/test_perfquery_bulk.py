"""The bulk read of perfquery texts (collectors/textlayout.py) against the line-by-line parse.

After a poll, the parse state carries the layout of its texts (``PerfqueryState.counters``);
the next poll's values are then read in bulk when its texts have the same lines. Whatever the
next texts are, the result must be the one the line-by-line parse gives: every test here parses
a sequence of polls twice, once carrying the state as the pipeline does and once with the
layout dropped before each poll (the line-by-line parse every time), and compares the dumps
the golden testcases use. The texts are the public captures, the testcases' payloads, a
Selene-shaped fabric's texts, and random edits of their values and of their structure.
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

from fabricmon.collectors.perfquery.parse import PerfqueryState, parse_payload
from fabricmon.collectors.testcase import dump
from tests.conftest import PUBLIC

ROOT = Path(__file__).resolve().parent.parent
CASES = ROOT / "collectors" / "perfquery" / "testcases"
PUBLIC_TEXTS = sorted((PUBLIC / "ib").glob("*/*perfquery*")) if PUBLIC.exists() else []
EDR = json.loads((CASES / "edr_switch_topology" / "payload.json").read_text())


def _case_texts() -> list[list[str]]:
    out = []
    for p in sorted(CASES.glob("*/payload*.json")):
        texts = json.loads(p.read_text()).get("perfquery") or []
        if texts:
            out.append(texts)
    return out


def _recorded_texts() -> list[list[str]]:
    """perfquery texts of the scenario recordings (tests/scenarios*), one list per poll (a few)."""
    out = []
    for rec in sorted(ROOT.glob("tests/scenarios*/*.jsonl.gz")):
        with gzip.open(rec, "rt") as f:
            for line in f:
                poll = json.loads(line)
                texts = (poll.get("payload") or {}).get("perfquery") if poll.get("source") == "perfquery" else None
                if texts:
                    out.append(texts)
                    break
    return out


def _fabric_texts() -> list[str]:
    """A few switches of a Selene-shaped fabric (bench/fabric.py), a text per 40 ports."""
    lines = []
    for i in range(120):
        lid, port = 10 + i // 40, 1 + i % 40
        lines.append(f"# Port extended counters: Lid {lid} port {port} (CapMask: 0x5300 CapMask2: 0x0000002)\n"
                     f"PortSelect:......................{port}\nCounterSelect:...................0x0000\n")
        for j, name in enumerate(("PortXmitData", "PortRcvData", "PortXmitPkts", "PortRcvPkts", "PortXmitWait",
                                  "SymbolErrorCounter", "LinkDownedCounter", "VL15Dropped", "QP1Dropped")):
            lines.append(f"{name}:{'.' * (32 - len(name))}{(i * 7919 + j * 104729) % 10**12}\n")
    return ["".join(lines[k:k + 40]) for k in range(0, len(lines), 40)]


SEEDS: list[list[str]] = [[p.read_text()] for p in PUBLIC_TEXTS] + _case_texts() + _recorded_texts() + [_fabric_texts()]


def _compare(polls: list[dict]) -> PerfqueryState:
    """Parse ``polls`` in turn both ways; the dumps must be equal. Returns the carried state."""
    carried = exact = PerfqueryState()
    for payload in polls:
        got, carried = parse_payload(payload, carried)
        want, exact = parse_payload(payload, replace(exact, counters=None))
        assert dump(got) == dump(want)
    return carried


# ---------------------------------------------------------------- edits of a text
NUMBERS = [0, 1, 7, 255, 256, 65535, 65536, 2**31, 2**32 - 1, 2**32, 2**63, 2**64 - 1, 2**64, 10**19, 10**20]


def _plain(rng: random.Random) -> str:
    """A plain decimal, mostly one that fits every counter width (so the layout holds)."""
    return str(rng.randrange(256) if rng.random() < 0.7 else rng.randrange(10 ** rng.randint(3, 15)))


def _hostile(rng: random.Random) -> str:
    r = rng.random()
    if r < 0.4:
        return str(rng.choice(NUMBERS))
    if r < 0.6:
        return "0" * rng.randint(1, 3) + str(rng.randrange(1000))  # a leading zero: int(v, 0) refuses it
    if r < 0.8:
        return str(rng.randrange(10**18, 10**21))  # around 2^64
    return rng.choice(["0x1F", "+5", "1_000", "12a", "", "-0", "\u0663", "5 "])


def _edit(text: str, rng: random.Random, mode: str) -> str:
    """New values for the numbers that end lines; ``mode`` "hostile" makes a few of them odd,
    "structure" also edits other text."""
    odd = 0.0 if mode == "values" else 0.05
    lines = text.split("\n")
    for i, line in enumerate(lines):
        stripped = line.rstrip("0123456789")
        if stripped != line and rng.random() < 0.6:
            lines[i] = stripped + (_hostile(rng) if rng.random() < odd else _plain(rng))
        elif mode == "structure" and rng.random() < 0.03:
            lines[i] = rng.choice([line + "7", line + " ", line + "\r", line.replace(".", ":", 1), line.replace("1", "2", 1),
                                   line.upper(), "", "# Port counters: Lid 3 port 9", line + "\u00e9", line + "\x00"])
    if mode == "structure" and rng.random() < 0.3 and len(lines) > 2:
        i, j = rng.randrange(len(lines)), rng.randrange(len(lines))
        lines[i], lines[j] = lines[j], lines[i]
    if mode == "structure" and rng.random() < 0.2 and lines:
        del lines[rng.randrange(len(lines))]
    return "\n".join(lines)


def _polls(texts: list[str], rng: random.Random, n: int, structure: bool) -> list[dict]:
    """``texts`` and ``n`` edits of them, poll after poll: mostly new values only (the bulk read),
    some odd values (the line-by-line parse, then a new layout), some edits of the structure."""
    out = [{"perfquery": texts}]
    for _ in range(n):
        r = rng.random()
        mode = "values" if r < 0.7 else "hostile" if r < 0.85 or not structure else "structure"
        texts = [_edit(t, rng, mode) for t in texts]
        if mode == "structure" and rng.random() < 0.2:
            texts = ["".join(texts)] if rng.random() < 0.5 else texts + texts[:1]
        out.append({"perfquery": texts})
    return out


# ---------------------------------------------------------------- tests
@pytest.mark.parametrize("texts", SEEDS, ids=range(len(SEEDS)))
def test_the_same_texts_with_new_values_read_in_bulk(texts):
    rng = random.Random(len(texts[0]))
    polls = _polls(texts, rng, 4, structure=False)
    for topo in (None, EDR):  # with names from a topology too
        first = [{"ibnetdiscover": topo["ibnetdiscover"], **polls[0]}] if topo else polls[:1]
        _compare(first + polls[1:])
    assert parse_payload(polls[0], PerfqueryState())[1].counters is not None  # every seed can be read in bulk


def test_a_fabric_poll_is_read_in_bulk_and_gives_the_line_by_line_result():
    texts = _fabric_texts()
    _, state = parse_payload({"ibnetdiscover": EDR["ibnetdiscover"], "perfquery": texts}, PerfqueryState())
    assert state.counters is not None
    bumped = [t.replace("PortXmitData:....................", "PortXmitData:....................1") for t in texts]
    got, again = parse_payload({"perfquery": bumped}, state)
    assert isinstance(got.counters.values, np.ndarray)  # read in bulk
    assert again.counters is state.counters  # the layout still holds
    want, _ = parse_payload({"perfquery": bumped}, replace(state, counters=None))
    assert dump(got) == dump(want)
    # A refreshed topology that names every LID the same keeps the layout (for that topology).
    _, refreshed = parse_payload({"ibnetdiscover": EDR["ibnetdiscover"], "perfquery": bumped}, again)
    assert refreshed.counters is not None and refreshed.counters.topology is refreshed.topology


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, len(SEEDS) - 1), st.integers(0, 2**32), st.booleans(), st.booleans())
def test_random_edits_give_the_line_by_line_result(seed, rnd, structure, with_topology):
    rng = random.Random(rnd)
    polls = _polls(SEEDS[seed], rng, 3, structure)
    if with_topology:
        polls[0] = {"ibnetdiscover": EDR["ibnetdiscover"], **polls[0]}
    _compare(polls)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.sampled_from(["PortXmitData", "PortRcvData", "SymbolErrorCounter", "LinkDownedCounter", "PortSelect",
                                 "VL15Dropped", "PortXmitWait", "Bogus_1"]), min_size=1, max_size=8),
       st.lists(st.integers(0, 2**66), min_size=3, max_size=3), st.booleans(), st.booleans())
def test_random_blocks_give_the_line_by_line_result(names, values, extended, capmask2):
    head = (f"# Port {'extended ' if extended else ''}counters: Lid 7 port 3 (CapMask: 0x1600"
            + (" CapMask2: 0x0000002)" if capmask2 else ")"))

    def text(v: int) -> str:
        return head + "\n" + "".join(f"{n}:{'.' * max(1, 32 - len(n))}{(v >> k) % (1 << (8 + 7 * k))}\n"
                                     for k, n in enumerate(names))
    _compare([{"perfquery": [text(v)]} for v in values])


def test_a_poll_codes_its_keys_in_two_bytes_a_reading():
    from fabricmon.collectors.perfquery.bulk import PollColumns
    from fabricmon.core.model import KeyColumn, PortLayout

    ext = PortLayout.of([("port_xmit_data", (), 64, False, 4.0), ("port_xmit_wait", (), 64, False, 1.0)])
    basic = PortLayout.of([("symbol_errors", (), 16, True, 1.0), ("port_xmit_data", (), 32, True, 4.0)])
    cols = PollColumns()
    cols.add_port("sw1", "1", ext, [1, 2])
    cols.add_port("sw1", "2", basic, [3, 4])
    cols.add_port("sw1", "3", ext, [5, 6])
    got = cols.counters()
    assert isinstance(got.keys, KeyColumn) and got.keys.codes.dtype == np.uint16
    assert list(got.keys) == [*ext.keys, *basic.keys, *ext.keys]
    assert got.bits.tolist() == [64, 64, 16, 32, 64, 64]
