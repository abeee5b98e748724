"""Runs every ``collectors/<source>/testcases/<case>/`` golden case (see collectors/testcase.py)."""

from __future__ import annotations

import pytest

from fabricmon.collectors import testcase

CASES = testcase.cases()


@pytest.mark.parametrize("case", CASES, ids=[f"{c.parent.parent.name}/{c.name}" for c in CASES])
def test_collector_testcase(case, request):
    got = testcase.run_case(case)
    expected_path = case / "expected.txt"
    if request.config.getoption("--update-golden") or not expected_path.exists():
        expected_path.write_text(got)
        if not request.config.getoption("--update-golden"):
            pytest.fail(f"{expected_path} did not exist; written now, review and commit it")
    assert got == expected_path.read_text(), f"parse output of {case} differs from expected.txt (pytest --update-golden to accept)"
