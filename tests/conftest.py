"""Shared test helpers: the public fixture corpus under ../shared, loopback ports."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared"
PUBLIC = SHARED / "fixtures" / "public"


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
