"""Runs every ``collectors/<source>/testcases/<case>/`` golden case (see collectors/testcase.py)."""

from __future__ import annotations

import copy
import json

import pytest

from fabricmon import collectors
from fabricmon.collectors import testcase

CASES = testcase.cases()


@pytest.mark.parametrize("case", CASES, ids=[f"{c.parent.parent.name}/{c.name}" for c in CASES])
def test_collector_testcase(case, request):
    for expected_path, got in testcase.run_case(case):
        if request.config.getoption("--update-golden") or not expected_path.exists():
            expected_path.write_text(got)
            if not request.config.getoption("--update-golden"):
                pytest.fail(f"{expected_path} did not exist; written now, review and commit it")
        assert got == expected_path.read_text(), f"parse output of {expected_path} differs (pytest --update-golden to accept)"


@pytest.mark.parametrize("case", CASES, ids=[f"{c.parent.parent.name}/{c.name}" for c in CASES])
def test_repeated_poll_through_the_same_state_says_the_same(case):
    """The per-target state only carries what a payload may omit: the same payload parsed
    again through it gives the same result (no double counting, no drift)."""
    first, again = testcase.repeat_case(case)
    assert again == first


@pytest.mark.parametrize("case", CASES, ids=[f"{c.parent.parent.name}/{c.name}" for c in CASES])
def test_parse_never_changes_the_state_it_is_given(case):
    """Parsers are pure: what a poll learns comes back as a new state, the one passed in is left
    as it was (so a failed or replayed poll cannot corrupt a target's state)."""
    spec = testcase.target_spec(case)
    cls = collectors.get(spec.source)
    state = cls.new_state()
    for payload_path, _expected in testcase.polls(case):
        before = copy.deepcopy(state)
        _result, new_state = cls.parse_poll(json.loads(payload_path.read_text()), spec, state)
        assert state == before, f"{payload_path}: parse changed the state it was given"
        state = new_state
