"""PortSamplesControl.Tick (``perfquery -c``): fetched on topology refreshes, parsed into the
``samples_control_tick`` gauge, and preferred by the detector over the device-generation table.

The ``-c`` output is built from rdma-core's printing code (perfquery.c
dump_portsamples_control, libibmad fields.c): its format is verified there, its values are
inferred (no public capture exists). It lives in the ``samples_control_tick`` collector test
case; the fake perfquery (tests/fakebin) prints it from ``perfquery-c-<lid>.out``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from types import SimpleNamespace

import pytest

from fabricmon.agent.config import load
from fabricmon.agent.detector.analyses.ib_wait import REPORTED_TICK
from fabricmon.agent.exporter.server import Exporter
from fabricmon.agent.recording import read_polls
from fabricmon.agent.replay import replay_recording
from fabricmon.agent.runtime import Agent
from fabricmon.collectors.perfquery import PerfqueryCollector, PerfqueryOptions
from fabricmon.collectors.perfquery import fetch as perfquery_fetch
from fabricmon.collectors.perfquery.parse import SAMPLES_CONTROL_TICK, parse_samples_control
from fabricmon.core.model import DeviceInfo, TargetSpec
from tests.conftest import public_fixture
from tests.test_rules_ib import EDR, ib_ring, stall

ROOT = Path(__file__).resolve().parent.parent
FAKEBIN = ROOT / "tests" / "fakebin"
CASE = ROOT / "collectors" / "perfquery" / "testcases" / "samples_control_tick"
TREY = "ib/treydock__infiniband_exporter/collectors__fixtures__perfquery__"
SPEC = TargetSpec(name="ib", source="perfquery")
SWITCH = "ib-i1l1s01"  # Switch-IB, LID 1719, connected ports 1, 2, 10, 11
HCA_WITH = "o0001 HCA-1"  # LID 134 answers -c; o0002 HCA-1 (LID 133) does not


def _case() -> dict:
    return json.loads((CASE / "payload.json").read_text())


@pytest.fixture
def fakeib(tmp_path, monkeypatch):
    """The edr_switch_topology fabric with recorded -x output and the case's -c output for LIDs 1719 and 134."""
    d = tmp_path / "ib"
    d.mkdir()
    case = _case()
    (d / "ibnetdiscover.out").write_text(case["ibnetdiscover"])
    (d / "perfquery-x-1719.out").write_text(public_fixture(TREY + "0x7cfe9003009ce5b0.out").read_text())
    (d / "perfquery-x-134.out").write_text(public_fixture(TREY + "0x7cfe9003003b4bde.out").read_text())
    (d / "perfquery-x-133.out").write_text(public_fixture(TREY + "0x7cfe9003003b4b96.out").read_text())
    switch_c, hca_c = case["samples_control"]
    (d / "perfquery-c-1719.out").write_text(switch_c)
    (d / "perfquery-c-134.out").write_text(hca_c)
    monkeypatch.setenv("PATH", f"{FAKEBIN}{os.pathsep}{os.environ.get('PATH', '')}")
    monkeypatch.setenv("FAKE_IB_DIR", str(d))
    monkeypatch.setenv("FAKE_IB_LOG", str(tmp_path / "calls.jsonl"))
    for var in ("FAKE_IBNETDISCOVER_MODE", "FAKE_PERFQUERY_MODE", "FAKE_IBNETDISCOVER_LID", "FAKE_PERFQUERY_LID"):
        monkeypatch.delenv(var, raising=False)
    return tmp_path


def _calls(tmp: Path) -> list[list[str]]:
    path = tmp / "calls.jsonl"
    calls = [json.loads(ln) for ln in path.read_text().splitlines()] if path.exists() else []
    path.unlink(missing_ok=True)
    return calls


def _ticks(result) -> dict[tuple[str, str], float]:
    return {(g.device, g.port): g.value for g in result.gauges if g.name == SAMPLES_CONTROL_TICK}


# ------------------------------------------------------------------------------ parse


def test_parse_reads_the_tick_of_each_block():
    switch_c, hca_c = _case()["samples_control"]
    assert parse_samples_control(switch_c) == {(1719, 1): 0x1F}
    assert parse_samples_control(switch_c + hca_c) == {(1719, 1): 0x1F, (134, 1): 0x07}


def test_parse_takes_what_portid2str_prints_and_skips_what_is_not_a_tick():
    text = "\n".join([
        "ibwarn: [4242] _do_madrpc: recv failed: Connection timed out",  # stderr noise in a capture
        "Tick:............................0x07",  # before any header: belongs to nothing
        "# PortSamplesControl: Lid 13 Gid fe80::b859:9f03:fc:6de4 port 3",  # addressed with a GRH
        "OpCode:..........................0x01",
        "Tick:............................0x1f\r",  # CR/LF capture
        "# PortSamplesControl: Lid 14 DR path slid 0; dlid 0; 0,1 port 1",
        "Tick:............................0x1ff",  # wider than the 8-bit field: garbage
        "# PortSamplesControl: Lid 15 port 1",
        "Tick:............................0xzz",
        "# Port counters: Lid 16 port 1 (CapMask: 0x5A00)",  # another block kind
        "Tick:............................0x03",
    ])
    assert parse_samples_control(text) == {(13, 3): 0x1F}


def test_parse_payload_rejects_a_malformed_samples_control():
    from fabricmon.collectors.base import ParseError

    with pytest.raises(ParseError, match="'samples_control' must be a list of strings"):
        PerfqueryCollector.parse({"perfquery": [], "samples_control": "Tick:...0x07"}, SPEC, PerfqueryCollector.new_state())


def test_switch_reading_covers_its_ports_and_ticks_persist_until_the_topology_drops_them():
    case = _case()
    first, state = PerfqueryCollector.parse(case, SPEC, PerfqueryCollector.new_state())
    expected = {(SWITCH, p): 31.0 for p in ("1", "2", "10", "11")} | {(HCA_WITH, "1"): 7.0}
    assert _ticks(first) == expected  # LID 133 gave no -c output: no gauge, the detector uses its generation

    counters_only, state = PerfqueryCollector.parse({"perfquery": case["perfquery"]}, SPEC, state)
    assert _ticks(counters_only) == expected

    # A refresh without o0001 HCA-1 (its switch port is gone) and without new -c output.
    topo = case["ibnetdiscover"]
    blocks = [b for b in topo.split("\n\n") if 'Ca\t1 "H-7cfe9003003b4bde"' not in b]  # the HCA's own block
    without = "\n".join(ln for ln in "\n\n".join(blocks).splitlines() if "o0001 HCA-1" not in ln)  # its switch port
    assert len(blocks) == len(topo.split("\n\n")) - 1
    refreshed, state = PerfqueryCollector.parse({"ibnetdiscover": without, "perfquery": []}, SPEC, state)
    assert _ticks(refreshed) == {(SWITCH, p): 31.0 for p in ("1", "2", "11")}


def test_a_port_s_own_reading_wins_and_unknown_lids_are_named():
    case = _case()
    switch_c, _ = case["samples_control"]
    port10 = switch_c.replace("Lid 1719 port 1", "Lid 1719 port 10").replace("0x1f", "0x07")
    stray = switch_c.replace("Lid 1719", "Lid 999")
    res, _ = PerfqueryCollector.parse({**case, "samples_control": [switch_c, port10, stray]}, SPEC,
                                      PerfqueryCollector.new_state())
    ticks = _ticks(res)
    assert ticks[(SWITCH, "10")] == 7.0 and ticks[(SWITCH, "1")] == ticks[(SWITCH, "2")] == 31.0
    assert "perfquery -c: LID(s) 999 are not in the ibnetdiscover topology; their Tick is not used" in res.warnings


# ------------------------------------------------------------------------------ fetch


async def test_fetch_asks_once_per_switch_and_ca_port_on_topology_refreshes_only(fakeib, monkeypatch):
    now = [1000.0]  # the fetcher's clock, moved by hand: a real wait would race a loaded machine
    monkeypatch.setattr(perfquery_fetch, "time", SimpleNamespace(monotonic=lambda: now[0]))
    c = PerfqueryCollector("ib", "", PerfqueryOptions(topology_interval=600))
    payload = await c.fetch()
    calls = [call for call in _calls(fakeib) if "-c" in call]
    assert sorted(calls) == sorted([["perfquery", "-c", "1719", "1"], ["perfquery", "-c", "134", "1"],
                                    ["perfquery", "-c", "133", "1"]])
    assert payload["samples_control"] == _case()["samples_control"]  # 133 failed: left out

    again = await c.fetch()  # the topology is not due: no -c calls, nothing in the payload
    assert "samples_control" not in again and not any("-c" in call for call in _calls(fakeib))

    now[0] += 600  # topology_interval has passed
    refreshed = await c.fetch()
    assert "ibnetdiscover" in refreshed and len(refreshed["samples_control"]) == 2


async def test_samples_control_can_be_turned_off(fakeib):
    payload = await PerfqueryCollector("ib", "", PerfqueryOptions(samples_control=False)).fetch()
    assert "samples_control" not in payload
    assert not any("-c" in call for call in _calls(fakeib))


async def test_failing_samples_control_never_fails_the_poll(fakeib):
    for name in ("perfquery-c-1719.out", "perfquery-c-134.out"):
        (fakeib / "ib" / name).unlink()
    payload = await PerfqueryCollector("ib", "", PerfqueryOptions()).fetch()
    assert "samples_control" not in payload and len(payload["perfquery"]) >= 3


# ------------------------------------------------------------------------------ detector


def _f_wait(devid: str, reported: float | None, wait_ticks_per_s: float) -> float | None:
    """sw0 port 1's f_wait on a 4x EDR ring whose switches carry ``devid``, with ``reported``
    Tick; None when the self-check flagged the tick (f_wait above 1)."""
    fab = ib_ring(3)
    fab.store.set_devices([DeviceInfo(name=f"sw{i}", model=devid) for i in range(3)])
    for i in range(3):
        fab.gauge(f"sw{i}", "1", "link_speed_bytes", EDR)
        fab.gauge(f"sw{i}", "1", "link_width_lanes", 4)
        if reported is not None:
            fab.gauge(f"sw{i}", "1", SAMPLES_CONTROL_TICK, reported)
    fab.poll(n=2)
    fab.rate("sw0", "1", "xmit_wait", wait_ticks_per_s)
    fab.rate("sw0", "1", "tx_bytes", EDR * 0.5, scale=4)
    fab.poll(n=2)
    metrics = {m.name: dict(m.values) for m in fab.det.metrics()}
    if metrics["fabricmon_port_xmit_wait_tick_suspect"].get(("sw0", "1")) == 1.0:
        return None
    return metrics["fabricmon_port_xmit_wait_ratio"][("sw0", "1")]


LANE = EDR / 4  # bytes per second of one lane


@pytest.mark.parametrize(("devid", "reported", "expected"), [
    # Switch-IB counts per lane: a reported Tick 7 makes it 8 bytes of one lane's time. With the
    # table's 32 bytes the same count would mean waiting twice the interval: the self-check flags it.
    ("0xcb20", 7.0, 0.5),
    ("0xcb20", None, None),
    # Unknown generation: Tick+1 bytes of the port's time (31 -> 32 bytes = 8 per lane at 4x),
    # not the default 8 bytes of the port's time.
    ("", 31.0, 0.5),
    ("", None, 0.125),
])
def test_the_reported_tick_wins_over_the_generation_table(devid, reported, expected):
    waiting_half_the_time_in_8_byte_lane_ticks = LANE / 8 * 0.5
    got = _f_wait(devid, reported, waiting_half_the_time_in_8_byte_lane_ticks)
    assert got == (None if expected is None else pytest.approx(expected, rel=1e-6))


def test_a_reported_tick_goes_through_the_self_check():
    # Tick 31 on a Switch-IB: 32 bytes per lane. XmitWait counting 8-byte lane ticks all the
    # time gives f_wait 4: the tick is flagged, not clipped to 1.
    fab = ib_ring(3)
    fab.store.set_devices([DeviceInfo(name="sw0", model="0xcb20")])
    for p in ("1", "2", "3"):
        fab.gauge("sw0", p, "link_speed_bytes", EDR)
        fab.gauge("sw0", p, "link_width_lanes", 4)
        fab.gauge("sw0", p, SAMPLES_CONTROL_TICK, 31.0)
    fab.poll(n=2)
    fab.rate("sw0", "1", "xmit_wait", LANE / 8 * 4)
    fab.rate("sw0", "1", "tx_bytes", 0.0, scale=4)
    fab.rate(*fab.topo.peer("sw0", "1"), "rx_bytes", 0.0, scale=4)
    fab.poll(n=2)
    assert {m.name: dict(m.values) for m in fab.det.metrics()}["fabricmon_port_xmit_wait_tick_suspect"] == {("sw0", "1"): 1.0}


def test_evidence_says_where_the_tick_came_from():
    fab = ib_ring(3)
    for p in ("1", "2", "3"):
        fab.gauge("sw0", p, SAMPLES_CONTROL_TICK, 7.0)
    fab.poll(n=2)
    stall(fab, "sw0", "1")  # waits all the time, counted in 8-byte ticks of the port's 400 Gb/s
    fab.poll(n=2)
    [f] = fab.active().values()
    assert f.evidence["xmit_wait_fraction"] == pytest.approx(1.0, abs=1e-3)
    assert f.evidence["xmit_wait_tick_from"] == "the device's PortSamplesControl.Tick 0x07: 8 bytes of the port's transmit time"


def test_the_detector_reads_the_gauge_the_collector_writes():
    assert REPORTED_TICK == (SAMPLES_CONTROL_TICK, ())


# ------------------------------------------------------------------------------ end to end


async def test_record_and_replay_carry_the_tick_to_metrics(tmp_path, fakeib):
    cfg = tmp_path / "fabricmon.yml"
    rec = tmp_path / "ib.jsonl"
    cfg.write_text("""
global: {poll_interval: 0.5s, poll_timeout: 5s, jitter: 0}
targets:
  - {name: ib-fabric, source: perfquery, address: ""}
""")
    loaded = load(cfg)
    agent = Agent(loaded, listen="", record_path=str(rec), duration=2.0)
    await agent.run()
    _, polls, _ = read_polls(rec)
    assert polls[0].payload["samples_control"] == _case()["samples_control"]
    assert all("samples_control" not in p.payload for p in polls[1:])  # topology_interval 600 s: not due again
    live = Exporter(agent.pipeline).render_now().text.decode()
    replayed = Exporter(replay_recording(rec, loaded).pipeline).render_now().text.decode()
    for text in (live, replayed):
        lines = [ln for ln in text.splitlines() if ln.startswith("fabricmon_port_samples_control_tick{")]
        assert len(lines) == 5
        assert sum(ln.endswith(" 31") for ln in lines) == 4 and sum(ln.endswith(" 7") for ln in lines) == 1
