"""perfquery collector fetch, end to end against fake infiniband-diags commands (tests/fakebin)."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import pytest

from fabricmon.collectors.base import FetchError
from fabricmon.collectors.perfquery import PerfqueryCollector, PerfqueryOptions
from fabricmon.core.model import TargetSpec
from tests.conftest import public_fixture

FAKEBIN = Path(__file__).resolve().parent / "fakebin"
CASES = Path(__file__).resolve().parent.parent / "collectors" / "perfquery" / "testcases"
TREY = "ib/treydock__infiniband_exporter/collectors__fixtures__perfquery__"
SPEC = TargetSpec(name="ib", source="perfquery")


@pytest.fixture
def fakeib(tmp_path, monkeypatch):
    """Recorded outputs for the topology of the edr_switch_topology case: switch LID 1719, HCAs 133 and 134."""
    d = tmp_path / "ib"
    d.mkdir()
    topo_case = json.loads((CASES / "edr_switch_topology" / "payload.json").read_text())
    basic_case = json.loads((CASES / "capmask2_zero_hca_basic" / "payload.json").read_text())
    (d / "ibnetdiscover.out").write_text(topo_case["ibnetdiscover"])
    (d / "perfquery-x-1719.out").write_text(public_fixture(TREY + "0x7cfe9003009ce5b0.out").read_text())
    (d / "perfquery-x-134.out").write_text(public_fixture(TREY + "0x7cfe9003003b4bde.out").read_text())
    (d / "perfquery-x-133.out").write_text(public_fixture(TREY + "0x7cfe9003003b4b96.out").read_text())
    (d / "perfquery-134.out").write_text(basic_case["perfquery"][1])  # no basic output for 133: that call fails
    monkeypatch.setenv("PATH", f"{FAKEBIN}{os.pathsep}{os.environ.get('PATH', '')}")
    monkeypatch.setenv("FAKE_IB_DIR", str(d))
    monkeypatch.setenv("FAKE_IB_LOG", str(tmp_path / "calls.jsonl"))
    monkeypatch.setenv("FAKE_IB_PIDFILE", str(tmp_path / "pids"))
    for var in ("FAKE_IBNETDISCOVER_MODE", "FAKE_PERFQUERY_MODE", "FAKE_IBNETDISCOVER_LID", "FAKE_PERFQUERY_LID"):
        monkeypatch.delenv(var, raising=False)
    return tmp_path


def _calls(tmp: Path) -> list[list[str]]:
    path = tmp / "calls.jsonl"
    return [json.loads(ln) for ln in path.read_text().splitlines()] if path.exists() else []


def _collector(address: str = "", **opts) -> PerfqueryCollector:
    return PerfqueryCollector("ib", address, PerfqueryOptions(**opts))


def _alive(pid: int) -> bool:
    """A process that exists and is not a zombie (a killed orphan may wait for init to reap it)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


async def _wait_pids(tmp: Path, count: int) -> list[int]:
    for _ in range(200):
        path = tmp / "pids"
        if path.exists():
            pids = [int(x) for x in path.read_text().split()]
            if len(pids) >= count:
                return pids
        await asyncio.sleep(0.05)
    raise AssertionError("the fake command never wrote its pids")


async def _assert_gone(pids: list[int]) -> None:
    for _ in range(100):
        if not any(_alive(p) for p in pids):
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"processes still alive: {[p for p in pids if _alive(p)]}")


async def test_fetch_end_to_end_and_parse(fakeib):
    c = _collector()
    payload = await c.fetch()
    assert "Switch\t36" in payload["ibnetdiscover"]
    # switch -x; HCA 134 -x + basic (CapMask2 0); HCA 133 -x (its basic call failed and is left out)
    assert len(payload["perfquery"]) == 4
    calls = _calls(fakeib)
    assert calls[0] == ["ibnetdiscover"]
    assert sorted(calls[1:]) == sorted([
        ["perfquery", "-x", "-l", "1719", "1,2,10,11"],
        ["perfquery", "-x", "-l", "134", "1"],
        ["perfquery", "-l", "134", "1"],
        ["perfquery", "-x", "-l", "133", "1"],
        ["perfquery", "-l", "133", "1"],
        # PortSamplesControl on the topology refresh: no recorded -c output here, so these fail
        # and the payload has no samples_control (tests/test_perfquery_tick.py has the rest).
        ["perfquery", "-c", "1719", "1"],
        ["perfquery", "-c", "134", "1"],
        ["perfquery", "-c", "133", "1"],
    ])
    assert "samples_control" not in payload

    res = PerfqueryCollector.parse(payload, SPEC, PerfqueryCollector.new_state())[0]
    s = {(x.device, x.port, x.counter): x for x in res.counters}
    assert (s[("ib-i1l1s01", "1", "tx_bytes")].value, s[("ib-i1l1s01", "1", "tx_bytes")].scale) == (36298026860928, 4.0)
    assert s[("ib-i1l1s01", "2", "xmit_wait")].value == 36510964
    sym = s[("o0001 HCA-1", "1", "symbol_errors")]
    assert (sym.value, sym.bits, sym.saturating) == (65535, 16, True)
    assert s[("o0001 HCA-1", "1", "tx_bytes")].value == 9049592493976
    assert ("o0002 HCA-1", "1", "symbol_errors") not in s  # CapMask2 0 and no basic block
    assert s[("o0002 HCA-1", "1", "rx_bytes")].value == 37225401952885
    assert res.links is not None and len(res.links) == 8

    # Second poll: the topology is not due (600 s); the basic calls are remembered and still made.
    (fakeib / "calls.jsonl").unlink()
    again = await c.fetch()
    assert "ibnetdiscover" not in again
    assert len(again["perfquery"]) == 4
    calls = _calls(fakeib)
    assert all(call[0] == "perfquery" for call in calls) and len(calls) == 5


async def test_topology_refresh_and_failed_refresh_keeps_old(fakeib, monkeypatch):
    c = _collector(topology_interval=0.001)
    assert "ibnetdiscover" in await c.fetch()
    await asyncio.sleep(0.01)
    assert "ibnetdiscover" in await c.fetch()
    monkeypatch.setenv("FAKE_IBNETDISCOVER_MODE", "fail")
    await asyncio.sleep(0.01)
    payload = await c.fetch()
    assert "ibnetdiscover" not in payload
    assert len(payload["perfquery"]) == 4


async def test_noisy_nonzero_exit_with_good_stdout_is_used(fakeib, monkeypatch):
    monkeypatch.setenv("FAKE_IBNETDISCOVER_MODE", "noisy")
    monkeypatch.setenv("FAKE_PERFQUERY_MODE", "noisy")
    payload = await _collector().fetch()
    assert "ibnetdiscover" in payload
    assert len(payload["perfquery"]) == 4
    assert all("ibwarn" not in t for t in payload["perfquery"])  # stderr never enters the payload


async def test_ibnetdiscover_failure_on_first_poll(fakeib, monkeypatch):
    monkeypatch.setenv("FAKE_IBNETDISCOVER_MODE", "fail")
    with pytest.raises(FetchError) as err:
        await _collector().fetch()
    assert err.value.reason == "command"
    assert "ibnetdiscover" in str(err.value) and "client_register for mgmt 1 failed" in str(err.value)


async def test_all_perfquery_calls_fail(fakeib, monkeypatch):
    monkeypatch.setenv("FAKE_PERFQUERY_MODE", "fail")
    with pytest.raises(FetchError) as err:
        await _collector().fetch()
    assert err.value.reason == "command"
    assert "perfquery" in str(err.value) and "exit status 255" in str(err.value)
    assert "client_register for mgmt 1 failed" in str(err.value)


async def test_timeout_kills_the_process_group(fakeib, monkeypatch):
    monkeypatch.setenv("FAKE_PERFQUERY_MODE", "hang")
    monkeypatch.setenv("FAKE_PERFQUERY_LID", "1719")
    payload = await _collector(command_timeout=3.0).fetch()  # generous: the fakes are Python scripts on a busy CI box
    # The switch call timed out; the HCA calls still delivered.
    assert len(payload["perfquery"]) == 3
    assert not any("Lid 1719" in t for t in payload["perfquery"])
    pids = await _wait_pids(fakeib, 2)
    await _assert_gone(pids)  # the fake and its `sleep` child


@pytest.mark.parametrize("tool", ["IBNETDISCOVER", "PERFQUERY"])
async def test_cancellation_kills_the_process_group(fakeib, monkeypatch, tool):
    monkeypatch.setenv(f"FAKE_{tool}_MODE", "hang")
    monkeypatch.setenv("FAKE_PERFQUERY_LID", "1719")  # only the switch call hangs; the HCA calls finish
    task = asyncio.create_task(_collector(command_timeout=60).fetch())
    pids = await _wait_pids(fakeib, 2)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await _assert_gone(pids)


async def test_all_calls_time_out(fakeib, monkeypatch):
    monkeypatch.setenv("FAKE_PERFQUERY_MODE", "hang")
    with pytest.raises(FetchError) as err:
        await _collector(command_timeout=2.0, concurrency=8).fetch()
    assert err.value.reason == "timeout" and "timed out after 2 s" in str(err.value)
    await _assert_gone(await _wait_pids(fakeib, 6))  # three -x calls, each fake + its sleep


async def test_extra_args_and_paths(fakeib):
    c = _collector(
        address="local",
        extra_args=["-C", "mlx5_0", "-P", "1"],
        ibnetdiscover_path=str(FAKEBIN / "ibnetdiscover"),
        include_cas=False,
    )
    payload = await c.fetch()
    assert len(payload["perfquery"]) == 1
    calls = _calls(fakeib)
    assert calls == [["ibnetdiscover", "-C", "mlx5_0", "-P", "1"], ["perfquery", "-C", "mlx5_0", "-P", "1", "-x", "-l", "1719", "1,2,10,11"],
                     ["perfquery", "-C", "mlx5_0", "-P", "1", "-c", "1719", "1"]]


async def test_missing_command(fakeib):
    # (A remote address is refused by config validation, at the target's line:
    # tests/test_collectors_declarations.py.)
    with pytest.raises(FetchError) as err:
        await _collector(ibnetdiscover_path="/nonexistent/ibnetdiscover").fetch()
    assert err.value.reason == "command" and "/nonexistent/ibnetdiscover" in str(err.value)


def test_options_validation():
    with pytest.raises(ValueError):
        PerfqueryOptions(concurrency=0)
    with pytest.raises(ValueError):
        PerfqueryOptions(bogus=1)
    assert PerfqueryCollector("ib", "", PerfqueryOptions()).spec().options == {}
