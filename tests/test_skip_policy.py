"""CI=true turns a skip that is not allow-listed into a failure (tests/conftest.py)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.conftest import ROOT, disallowed_skips, load_skip_allowlist

CONFTEST = """
from pathlib import Path
import tests.conftest as policy
from tests.conftest import pytest_runtest_logreport, pytest_sessionfinish, pytest_terminal_summary  # noqa: F401
policy.ALLOWLIST = Path(__file__).parent / "allow.txt"
"""
TESTS = """
import pytest

def test_runs():
    assert True

def test_needs_hardware():
    pytest.skip("needs an InfiniBand HCA")
"""


def _run(tmp_path, ci: str, allow: str = "") -> subprocess.CompletedProcess[str]:
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "test_sample.py").write_text(TESTS)
    (tmp_path / "allow.txt").write_text(allow)
    env = {**os.environ, "CI": ci, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", str(tmp_path)],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)


def test_a_skip_fails_under_ci(tmp_path):
    r = _run(tmp_path, "true")
    assert r.returncode == 1, r.stdout
    assert "test_sample.py::test_needs_hardware: needs an InfiniBand HCA" in r.stdout


def test_a_skip_is_only_reported_outside_ci(tmp_path):
    r = _run(tmp_path, "")
    assert r.returncode == 0, r.stdout
    assert "1 passed, 1 skipped" in r.stdout


def test_an_allow_listed_skip_passes_under_ci(tmp_path):
    r = _run(tmp_path, "true", "test_sample.py::test_needs_hardware  # no InfiniBand hardware on CI machines\n")
    assert r.returncode == 0, r.stdout


def test_allowlist_entries_need_a_reason(tmp_path):
    f = tmp_path / "allow.txt"
    f.write_text("# comment\n\ntests/test_x.py::test_y\n")
    with pytest.raises(pytest.UsageError, match=r"allow.txt:3"):
        load_skip_allowlist(f)


def test_prefix_matching():
    skips = [("tests/test_a.py::test_1", "r"), ("tests/test_b.py::test_2", "r")]
    assert disallowed_skips(skips, {"tests/test_a.py": "why"}) == [("tests/test_b.py::test_2", "r")]

