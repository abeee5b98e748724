"""host collector options ``dcb``, ``dcb_path``, ``mlnx_qos_path``: which executable a poll runs.

The tests never run the machine's own iproute2 ``dcb`` or ``mlnx_qos`` (present or not, their
output would depend on the machine): a fake that logs every call (tests/fakebin, see
_fakeqos.py) stands first on PATH, so any call that reaches PATH shows in its log.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fabricmon.collectors.host import HostCollector, HostOptions
from tests.test_host_sysfs import add_roce_device
from tests.test_host_sysfs import collector as sysfs_test_collector

FAKEBIN = Path(__file__).resolve().parent / "fakebin"
PFC = "pfc-cap 8 macsec-bypass off delay 0\nprio-pfc 0:off 1:off 2:off 3:on 4:off 5:off 6:off 7:off\n"  # iproute2 dcb/dcb_pfc.c format


@pytest.fixture
def calls(monkeypatch, tmp_path) -> Path:
    """The fake tools first on PATH, printing a PFC map and an empty app table for eth2 (no
    mlnx_qos output: that call fails, as on a machine without MLNX_OFED); returns their call log."""
    qos = tmp_path / "qos"
    qos.mkdir()
    (qos / "dcb-pfc-eth2.out").write_text(PFC)
    (qos / "dcb-app-eth2.out").write_text("")
    monkeypatch.setenv("PATH", f"{FAKEBIN}:/usr/bin:/bin")
    monkeypatch.setenv("FAKE_QOS_DIR", str(qos))
    monkeypatch.setenv("FAKE_QOS_LOG", str(tmp_path / "calls.jsonl"))
    return tmp_path / "calls.jsonl"


def logged(log: Path) -> list[list[str]]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def sysfs(tmp_path: Path) -> Path:
    root = tmp_path / "sys"
    add_roce_device(root)  # netdev eth2
    return root


async def fetch(**opts) -> dict:
    c = HostCollector("gpu07", "local", HostOptions(ethtool=False, **opts))
    try:
        return await c.fetch()
    finally:
        await c.close()


async def test_dcb_off_runs_no_tool(tmp_path, calls):
    payload = await fetch(sysfs_root=str(sysfs(tmp_path)), dcb=False)
    assert "dcb" not in payload and logged(calls) == []


async def test_dcb_path_is_the_executable_run(tmp_path, calls, monkeypatch):
    monkeypatch.setenv("PATH", "/usr/bin:/bin")  # nothing called dcb reachable by name
    payload = await fetch(sysfs_root=str(sysfs(tmp_path)), dcb_path=str(FAKEBIN / "dcb"), mlnx_qos_path="")
    assert sorted(logged(calls)) == [["dcb", "app", "show", "dev", "eth2"], ["dcb", "pfc", "show", "dev", "eth2"]]
    assert payload["dcb"] == {"eth2": {"pfc": PFC, "app": ""}}


async def test_the_defaults_find_dcb_and_mlnx_qos_on_path(tmp_path, calls):
    await fetch(sysfs_root=str(sysfs(tmp_path)))
    assert sorted(c[0] for c in logged(calls)) == ["dcb", "dcb", "mlnx_qos"]


async def test_the_sysfs_tests_collector_runs_no_dcb(tmp_path, calls):
    """tests/test_host_sysfs.py's helper (used by test_host_agent too) switches dcb off."""
    c = sysfs_test_collector(sysfs(tmp_path), ethtool=False)
    await c.fetch()
    await c.close()
    assert logged(calls) == []
