"""Shared test helpers: the public fixture corpus under ../shared, loopback ports."""

from __future__ import annotations

import os
import shutil
import socket
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared"
PUBLIC = SHARED / "fixtures" / "public"


def tool(name: str) -> str | None:
    """An executable the test dependencies install, found next to this interpreter first.

    pip puts console scripts (snmpsim-command-responder, fabricmon) into the venv's bin/, which
    is on PATH only when the venv is activated: looking there first keeps a run with
    ``.venv/bin/python -m pytest`` from skipping what is installed.
    """
    beside = Path(sys.executable).parent / name
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    return shutil.which(name)


def public_fixture(relpath: str) -> Path:
    """Path of a file under ../shared/fixtures/public; skips the test when it is absent."""
    path = PUBLIC / relpath
    if not path.exists():
        pytest.skip(f"public fixture not available: {path} (the ../shared folder is absent)")
    return path


def free_port() -> int:
    """A free TCP port on 127.0.0.1 (tests only ever bind loopback)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def pytest_addoption(parser):
    parser.addoption("--update-golden", action="store_true", default=False,
                     help="rewrite golden files (collector testcases, /metrics golden) from the current output")


# ---------------------------------------------------------------------- skips fail CI
# With CI=true a skipped test fails the run unless tests/skip-allowlist.txt names it with the
# reason it cannot run on a Debian machine with the registry packages. A skip elsewhere is only
# reported (scripts/test runs pytest with -rs), so a developer without a tool still gets a run.
ALLOWLIST = ROOT / "tests" / "skip-allowlist.txt"


def load_skip_allowlist(path: Path | None = None) -> dict[str, str]:
    """``{node-id prefix: reason}`` from lines ``<node id prefix>  # <reason>``; a line without a reason is an error."""
    path = path or ALLOWLIST
    allowed: dict[str, str] = {}
    if not path.exists():
        return allowed
    for n, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        node, sep, reason = line.partition("#")
        if not sep or not reason.strip() or not node.strip():
            raise pytest.UsageError(f"{path}:{n}: an allow-listed skip needs '<node id>  # <reason>'")
        allowed[node.strip()] = reason.strip()
    return allowed


def _ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


_SKIPS: list[tuple[str, str]] = []  # (node id, reason) of every test skipped in this session


def pytest_runtest_logreport(report):
    if report.skipped and not hasattr(report, "wasxfail"):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        _SKIPS.append((report.nodeid, reason.removeprefix("Skipped: ")))


def disallowed_skips(skips: list[tuple[str, str]], allowed: dict[str, str]) -> list[tuple[str, str]]:
    """The skips no allow-list prefix covers."""
    return [(node, reason) for node, reason in skips if not any(node.startswith(prefix) for prefix in allowed)]


def _ci_bad_skips() -> list[tuple[str, str]]:
    return disallowed_skips(_SKIPS, load_skip_allowlist()) if _ci() and _SKIPS else []


def pytest_sessionfinish(session, exitstatus):
    if _ci_bad_skips():
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    bad = _ci_bad_skips()
    if bad:
        terminalreporter.section("skips fail CI", red=True)
        terminalreporter.write_line(f"CI=true: {len(bad)} skipped test(s) not in {ALLOWLIST}:")
        for node, reason in bad:
            terminalreporter.write_line(f"  {node}: {reason}")


@pytest.fixture(autouse=True, scope="module")
def _secrets_registry_per_module():
    """Each test module ends with the secrets registry (fabricmon.core.secrets) it started with
    (module scope: set up before the module's own fixtures, which may resolve secrets). Every
    resolved secret is redacted from every later message of the process, whatever its encoding:
    an SNMP community "nothing" that one module resolves would otherwise turn another's
    "refused (nothing listens on ...)" into "refused (*** listens ...)"."""
    from fabricmon.core import secrets

    known, forms, forms_bytes = set(secrets._known_values), secrets._forms, secrets._forms_bytes
    yield
    secrets._known_values.clear()
    secrets._known_values.update(known)
    secrets._forms, secrets._forms_bytes = forms, forms_bytes
