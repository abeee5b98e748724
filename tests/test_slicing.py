"""The sliced forms of long C calls give exactly what the one call gives (agent/core/slicing.py)."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from fabricmon.core.slicing import SLICE, group_index, in_blocks, sorted_in_slices


@given(st.lists(st.integers(0, 6), max_size=60))
def test_group_index_is_np_repeat_of_the_group_numbers(counts):
    want = np.repeat(np.arange(len(counts)), np.array(counts, np.int64))
    got = group_index(counts)
    assert got.dtype == np.int64
    assert got.tolist() == want.tolist()


def test_group_index_gathers_what_np_repeat_repeats():
    rng = np.random.default_rng(7)
    counts = rng.integers(0, 30, 5_000)
    values = rng.integers(-(1 << 40), 1 << 40, 5_000)
    assert np.array_equal(values[group_index(counts)], np.repeat(values, counts))


def test_sorted_in_slices_and_in_blocks_equal_sorted_and_join():
    rng = np.random.default_rng(3)
    items = [(int(x) % 97, f"p{i}") for i, x in enumerate(rng.integers(0, 1 << 30, 3 * SLICE + 5))]
    assert sorted_in_slices(items, key=lambda t: t[0]) == sorted(items, key=lambda t: t[0])  # stable, like sorted
    lines = [f"m{{port=\"{i}\"}} {i}" for i in range(2 * SLICE + 3)]
    blocks = in_blocks(lines)
    assert [b.count("\n") + 1 for b in blocks] == [SLICE, SLICE, 3]
    assert "\n".join(blocks) == "\n".join(lines)
    assert in_blocks(lines[:10]) == ["\n".join(lines[:10])] and in_blocks([]) == []
