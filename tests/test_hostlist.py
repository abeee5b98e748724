"""Slurm host lists (fabricmon.core.hostlist) against a reference expansion built from the list's structure.

The reference never parses text: hypothesis draws a host list as data (names made of literal
pieces and bracket groups of numbers and ranges, with their zero padding), the test writes it
out in Slurm's syntax, and the expected names come straight from the data by a cartesian
product. Real Slurm's own expansion (``scontrol show hostnames``) is compared in
tests/test_slurm_real.py.
"""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fabricmon.core.hostlist import MAX_HOSTS, HostlistError, expand

LETTERS = st.text(alphabet="abcdefghijklmnopqrstuvwxyz-", min_size=1, max_size=6).filter(lambda s: not s.startswith("-"))


@st.composite
def number_range(draw) -> tuple[str, list[str]]:
    """One entry of a bracket group: its text and the names' numeric parts it stands for."""
    width = draw(st.integers(1, 4))
    lo = draw(st.integers(0, 10 ** width - 1))
    n = draw(st.integers(0, 12))
    hi = lo + n
    lo_text = str(lo).zfill(width)
    values = [str(v).zfill(width) for v in range(lo, hi + 1)]
    if n == 0 and draw(st.booleans()):
        return lo_text, values
    return f"{lo_text}-{hi}", values


@st.composite
def group(draw) -> tuple[str, list[str]]:
    entries = draw(st.lists(number_range(), min_size=1, max_size=3))
    return "[" + ",".join(t for t, _ in entries) + "]", [v for _, vs in entries for v in vs]


@st.composite
def name(draw) -> tuple[str, list[str]]:
    """A name: a prefix, then any number of (group, literal) pairs; the expansion by product."""
    prefix = draw(LETTERS)
    text, parts = [prefix], [[prefix]]
    for _ in range(draw(st.integers(0, 3))):
        g_text, g_values = draw(group())
        text.append(g_text)
        parts.append(g_values)
        if draw(st.booleans()):
            lit = draw(LETTERS)
            text.append(lit)
            parts.append([lit])
    return "".join(text), ["".join(p) for p in itertools.product(*parts)]


@st.composite
def hostlist(draw) -> tuple[str, list[str]]:
    names = draw(st.lists(name(), min_size=1, max_size=4))
    seps = [draw(st.sampled_from([",", " ", ",\n"])) for _ in names[1:]]
    text = names[0][0] + "".join(s + n for s, (n, _) in zip(seps, names[1:], strict=True))
    want = list(dict.fromkeys(h for _, hs in names for h in hs))
    return text, want


@settings(max_examples=400, deadline=None)
@given(hostlist())
def test_expansion_matches_the_reference(case) -> None:
    text, want = case
    assert expand(text) == want


@pytest.mark.parametrize(("text", "want"), [
    ("gpu[001-004,010]", ["gpu001", "gpu002", "gpu003", "gpu004", "gpu010"]),
    ("n[9-11]", ["n9", "n10", "n11"]),  # the width of lo: no padding
    ("n[001-10]", [f"n{i:03d}" for i in range(1, 11)]),
    ("a[1-2]b[3-4]", ["a1b3", "a1b4", "a2b3", "a2b4"]),  # as scontrol show hostnames prints it
    ("rack[1-2]-n[1-2],z", ["rack1-n1", "rack1-n2", "rack2-n1", "rack2-n2", "z"]),
    ("n[1-2] m[3]", ["n1", "n2", "m3"]),
    ("gpu001", ["gpu001"]),
    ("gpu[1-2],gpu2", ["gpu1", "gpu2"]),  # each name once
    ("", []),
])
def test_examples_checked_against_slurm_22_05(text, want) -> None:
    """Each expected list is what ``scontrol show hostnames`` of Slurm 22.05.8 printed (as a set; order as written)."""
    assert expand(text) == want


@pytest.mark.parametrize(("text", "why"), [
    ("n[5-3]", "runs backwards"),
    ("a[1-2]]", "unbalanced ']'"),
    ("n[1-2", "unbalanced '['"),
    ("n[]", "empty brackets"),
    ("n[[1]]", "nested"),
    ("n[1-x]", "not a number"),
    (f"n[0-{MAX_HOSTS}]", "more than"),
    ("a[0-999]b[0-999]c[0-9]", "more than"),
])
def test_bad_lists_are_errors_that_say_why(text, why) -> None:
    with pytest.raises(HostlistError, match=why.replace("[", r"\[")):
        expand(text)
