"""The scenario corpus: deterministic, valid recordings whose payloads the real parsers accept."""

from __future__ import annotations

import gzip
import json
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest

from fabricmon import collectors
from fabricmon.core.model import KINDS, ROLES, TargetSpec
from tools.scenarios import AUDIT, DEFAULT_SEED, PHYSICS, SCENARIOS, encode, run
from tools.scenarios.catalog import demo

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "tests" / "scenarios"
DEMO = ROOT / "agent" / "demo" / "demo.jsonl.gz"
PHYSICS_CORPUS = ROOT / "tests" / "scenarios_physics"
FILES = [*sorted(CORPUS.glob("*.jsonl.gz")), DEMO]
PHYSICS_FILES = sorted(PHYSICS_CORPUS.glob("*.jsonl.gz"))
AUDIT_CORPUS = ROOT / "tests" / "scenarios_audit"
AUDIT_FILES = sorted(AUDIT_CORPUS.glob("*.jsonl.gz"))
PROFILES = {"arista", "cisco", "onyx", "cumulus", "sonic", "ieee8021-pfc"}


def _lines(path: Path) -> list[dict]:
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        return [json.loads(line) for line in fh]


def test_generator_is_deterministic() -> None:
    build = SCENARIOS["nic_pause_storm_arista"]
    assert encode(run(build(7))) == encode(run(build(7)))
    assert encode(run(build(7))) != encode(run(build(8)))


def test_committed_corpus_is_what_the_generator_writes() -> None:
    """Generated, never hand-edited: regenerate in memory and compare bytes."""
    assert sorted(p.name for p in CORPUS.glob("*.jsonl.gz")) == sorted(f"{n}.jsonl.gz" for n in SCENARIOS)
    for i, (name, build) in enumerate(SCENARIOS.items()):
        assert (CORPUS / f"{name}.jsonl.gz").read_bytes() == encode(run(build(DEFAULT_SEED + i))), name
    assert DEMO.read_bytes() == encode(run(demo(DEFAULT_SEED)))
    assert DEMO.stat().st_size < 2_000_000


def test_committed_physics_corpus_is_what_the_generator_writes() -> None:
    assert sorted(p.name for p in PHYSICS_FILES) == sorted(f"{n}.jsonl.gz" for n in PHYSICS)
    for i, (name, build) in enumerate(PHYSICS.items()):
        assert (PHYSICS_CORPUS / f"{name}.jsonl.gz").read_bytes() == encode(run(build(DEFAULT_SEED + i))), name


def test_committed_audit_corpus_is_what_the_generator_writes() -> None:
    assert sorted(p.name for p in AUDIT_FILES) == sorted(f"{n}.jsonl.gz" for n in AUDIT)
    for i, (name, build) in enumerate(AUDIT.items()):
        assert (AUDIT_CORPUS / f"{name}.jsonl.gz").read_bytes() == encode(run(build(DEFAULT_SEED + i))), name


@pytest.mark.parametrize("path", [*FILES, *PHYSICS_FILES, *AUDIT_FILES], ids=lambda p: p.name)
def test_recording_is_valid(path: Path) -> None:
    lines = _lines(path)
    head = lines[0]
    assert head["type"] == "header" and head["format"] == "fabricmon-recording" and head["version"] == 1
    targets = {t["name"]: t for t in head["targets"]}
    for t in head["targets"]:
        if t["source"] == "snmp":  # the physics corpus leaves the profile to detection
            assert t.get("profile") in PROFILES if path not in PHYSICS_FILES else "profile" not in t
    last: dict[str, float] = {}
    for line in lines[1:]:
        assert line["type"] in ("poll", "truth", "note")
        if line["type"] == "poll":
            assert line["target"] in targets and line["source"] == targets[line["target"]]["source"]
            assert line["t"] >= last.get(line["target"], 0.0)
            last[line["target"]] = line["t"]
            assert ("payload" in line) if line["ok"] else bool(line["error"])
        elif line["type"] == "truth":
            assert line["kind"] in KINDS and line["role"] in (*ROLES, None)
            assert line["priority"] is None or 0 <= line["priority"] <= 7
            assert line["end"] is None or line["end"] > line["start"]
            assert line.get("optional", False) in (True, False)
    assert set(last) == set(targets)


def _parser(source: str):
    try:
        return collectors.get(source)
    except collectors.UnknownSource:
        return None


@pytest.mark.parametrize("path", [*FILES, *PHYSICS_FILES, *AUDIT_FILES], ids=lambda p: p.name)
def test_payloads_parse(path: Path) -> None:
    lines = _lines(path)
    specs = {t["name"]: TargetSpec.from_header(t) for t in lines[0]["targets"]}
    missing = {s.source for s in specs.values() if _parser(s.source) is None}
    parsed = 0
    state: dict[str, Any] = {n: _parser(s.source).new_state() for n, s in specs.items() if s.source not in missing}
    for line in lines:
        if line["type"] != "poll" or not line["ok"] or line["source"] in missing:
            continue
        result, state[line["target"]] = _parser(line["source"]).parse(line["payload"], specs[line["target"]], state[line["target"]])
        assert result.counters or result.inventory, f"{line['target']} @ {line['t']}: no samples (nor jobs, for a job source)"
        parsed += 1
    if not parsed:
        pytest.skip(f"no parser available for {sorted(missing)}")


def _series(path: Path, target: str, device: str, port: str, counter: str, sub: tuple = ()) -> list[tuple[float, float]]:
    lines = _lines(path)
    spec = TargetSpec.from_header(next(t for t in lines[0]["targets"] if t["name"] == target))
    cls = _parser(spec.source)
    if cls is None:
        pytest.skip(f"collector {spec.source} not available")
    out, state = [], cls.new_state()
    for line in lines:
        if line["type"] == "poll" and line["target"] == target and line["ok"]:
            result, state = cls.parse(line["payload"], spec, state)
            for s in result.counters:
                if (s.device, s.port, s.counter) == (device, port, counter) and tuple(map(str, s.sub)) == sub:
                    out.append((line["t"], s.value * s.scale))
    return out


def _truth(path: Path, **match) -> dict:
    return next(t for t in _lines(path) if t["type"] == "truth" and all(t[k] == v for k, v in match.items()))


def test_storm_origin_pause_counters_rise_only_during_the_storm() -> None:
    path = CORPUS / "nic_pause_storm_onyx.jsonl.gz"
    origin = _truth(path, role="origin")
    secs = _series(path, origin["device"], origin["device"], origin["port"], "pfc_rx_pause_seconds", ("3",))
    for (t0, a), (t1, b) in pairwise(secs):
        frac = (b - a) / (t1 - t0)
        if origin["start"] <= t1 < origin["end"]:
            assert frac >= 0.95, (t1, frac)  # paused nearly all the interval
        else:
            assert frac < 0.05, (t1, frac)
    victim = _truth(path, role="victim")
    vs = _series(path, victim["device"], victim["device"], victim["port"], "pfc_rx_pause_seconds", ("3",))
    during = [(b - a) / (t1 - t0) for (t0, a), (t1, b) in pairwise(vs) if victim["start"] <= t1 < victim["end"]]
    assert during and min(during) >= 0.95


def test_ib_stalled_port_xmit_wait_and_no_data() -> None:
    path = CORPUS / "ib_stalled_port.jsonl.gz"
    tr = _truth(path, kind="congestion")
    wait = _series(path, "ib-fabric", tr["device"], tr["port"], "xmit_wait")
    data = dict(_series(path, "ib-fabric", tr["device"], tr["port"], "tx_bytes"))
    for (t0, a), (t1, b) in pairwise(wait):
        if tr["start"] <= t1 < tr["end"]:
            assert (b - a) * 64 / (t1 - t0) >= 0.95 * 200e9  # ticks of 64 bit times at 4x HDR
            assert data[t1] == data[t0]


def test_counter32_wraps() -> None:
    path = CORPUS / "counter32_wrap.jsonl.gz"
    wraps = 0
    for port in ("ethernet1/1/1", "ethernet1/1/2", "ethernet1/1/3", "ethernet1/1/4"):
        for counter in ("pause_rx_frames", "pause_tx_frames"):
            values = _series(path, "leaf01", "leaf01", port, counter)
            assert all(v < 2**32 for _, v in values)
            wraps += sum(b < a for (_, a), (_, b) in pairwise(values))
    assert wraps >= 3


def test_roce_oos_burst_physics() -> None:
    """Go-back-N RoCE under ~4e-5 silent loss: OOS ~1e-3 of received packets (the ~20-30
    packets in flight behind each loss), one NAK (packet_seq_err) per loss of a sent packet,
    ack timeouts a few % of those; only during the burst, and only on the sick host."""
    path = CORPUS / "roce_oos_burst_host.jsonl.gz"
    tr = _truth(path, kind="packet_loss")
    host, port = tr["device"], tr["port"]
    assert port == "mlx5_0/1"

    def deltas(target: str, counter: str) -> dict[float, float]:
        return {t1: b - a for (_, a), (t1, b) in pairwise(_series(path, target, target, port, counter))}

    oos, rx = deltas(host, "out_of_sequence"), deltas(host, "rx_packets")
    nak, tmo, tx = deltas(host, "packet_seq_err"), deltas(host, "local_ack_timeout_err"), deltas(host, "tx_packets")
    assert len(oos) == 29 and set(oos) == set(rx)
    burst = [t for t in oos if tr["start"] <= t < tr["end"]]
    assert len(burst) == 6
    for t in oos:
        if t not in burst:
            assert oos[t] == nak[t] == tmo[t] == 0, t
            continue
        assert 0.8e-3 <= oos[t] / rx[t] <= 1.3e-3, (t, oos[t] / rx[t])
        loss = (nak[t] + tmo[t]) / tx[t]  # every lost sent packet ends in a NAK or a timeout
        assert 0.8e-3 / 30 * 0.99 <= loss <= 1.3e-3 / 20 * 1.01, (t, loss)
        assert 0.02 <= tmo[t] / (nak[t] + tmo[t]) <= 0.05 + 1 / (nak[t] + tmo[t]), t
        assert rx[t] > 1e7  # ~120 Gb/s of 4 KiB RoCE frames: the per-packet ratio is meaningful
    # The ethtool counters share the RDMA port (netdev linked in sysfs), so rates and PFC agree on a port.
    assert _series(path, host, host, port, "pfc_rx_pause_frames", ("3",))
    healthy = next(t["name"] for t in _lines(path)[0]["targets"] if t["source"] == "host" and t["name"] != host)
    for counter in ("out_of_sequence", "packet_seq_err", "local_ack_timeout_err"):
        assert set(deltas(healthy, counter).values()) == {0}, counter


# ---------------------------------------------------------------- physics corpus

def _rates(series: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """(t, increase per second) per interval; a cleared counter restarts (no negative rates)."""
    return [(t1, (b - a if b >= a else b) / (t1 - t0)) for (t0, a), (t1, b) in pairwise(series)]


def test_physics_xmit_wait_ticks_follow_the_declared_generation() -> None:
    """Switch-IB 2 at 4x EDR: one tick per 32 bytes per lane, 12.5e9 / 128 ticks/s when blocked;
    ibnetdiscover names the ASIC (devid 0xcf08) and the negotiated rate (4xEDR)."""
    path = PHYSICS_CORPUS / "ib_stalled_hca_mixed_generations.jsonl.gz"
    tr = _truth(path, kind="congestion")
    during = [r for t, r in _rates(_series(path, "ib-fabric", tr["device"], tr["port"], "xmit_wait"))
              if tr["start"] < t < tr["end"]]
    assert during and all(0.96 * 12.5e9 / 128 <= r <= 12.5e9 / 128 * 1.001 for r in during), during
    topo = next(ln["payload"]["ibnetdiscover"] for ln in _lines(path) if ln["type"] == "poll")
    assert "devid=0xcf08" in topo and "devid=0xd2f2" in topo and "4xEDR" in topo and "4xNDR" not in topo.split("Ca\t")[0]


def test_physics_transmit_equals_the_cable_peers_receive() -> None:
    path = PHYSICS_CORPUS / "ib_leaky_credit_loop.jsonl.gz"
    tx = _series(path, "ib-fabric", "ib-ring01", "1", "tx_bytes")
    rx = _series(path, "ib-fabric", "ib-ring02", "2", "rx_bytes")
    assert len(tx) == len(rx) > 10
    assert [b - a for (_, a), (_, b) in pairwise(tx)] == [b - a for (_, a), (_, b) in pairwise(rx)]


def test_physics_leaky_loop_members_wait_trickle_and_discard_in_bursts() -> None:
    path = PHYSICS_CORPUS / "ib_leaky_credit_loop.jsonl.gz"
    members = [t for t in _lines(path) if t["type"] == "truth" and t["kind"] == "credit_deadlock"]
    assert len(members) == 4
    lossy = [t for t in _lines(path) if t["type"] == "truth" and t["kind"] == "packet_loss"]
    assert lossy and all(t["optional"] is True for t in lossy)
    bursts = quiet = 0
    for m in members:
        # ring01 -> ring02 joins the two Quantum-2 (NDR); every other ring cable has a Quantum end (HDR)
        speed = 50e9 if m["device"] == "ib-ring01" else 25e9
        tick_s = 8 / speed  # Quantum / Quantum-2: one tick per 8 bytes of transmit time
        wait = _rates(_series(path, "ib-fabric", m["device"], m["port"], "xmit_wait"))
        data = dict(_rates(_series(path, "ib-fabric", m["device"], m["port"], "tx_bytes")))
        disc = dict(_rates(_series(path, "ib-fabric", m["device"], m["port"], "tx_discards")))
        for t, r in wait:
            if t > m["start"] + 1:
                assert 0.69 <= r * tick_s <= 1.0, (m["device"], r * tick_s)
                assert 0.0 < data[t] / speed <= 0.021
                bursts += disc[t] > 0
                quiet += disc[t] == 0
    assert bursts and quiet


def test_physics_storm_spreads_in_grades_and_alert_only_watchdog_stays_flat() -> None:
    path = PHYSICS_CORPUS / "cisco_watchdog_alert_only.jsonl.gz"
    origin = _truth(path, role="origin")
    required = [t for t in _lines(path) if t["type"] == "truth" and t["role"] == "victim" and not t.get("optional")]
    optional = [t for t in _lines(path) if t["type"] == "truth" and t["role"] == "victim" and t.get("optional")]
    assert len(required) == 1 and required[0]["device"] == "spine01" and len(optional) >= 4

    def fractions(t: dict) -> list[float]:
        s = _series(path, t["device"], t["device"], t["port"], "pfc_rx_pause_seconds", ("3",))
        return [r for tt, r in _rates(s) if t["start"] < tt < t["end"]]

    assert min(fractions(origin)) >= 0.99
    assert all(0.87 <= f <= 0.93 for f in fractions(required[0]))
    uplinks = [t for t in optional if t["device"].startswith("leaf")]
    assert uplinks and all(0.39 <= f <= 0.71 for t in uplinks for f in fractions(t))
    storms = _series(path, origin["device"], origin["device"], origin["port"], "pfc_watchdog_storms", ("3",))
    assert storms and len({v for _, v in storms}) == 1  # alert-only: never shut, never counted


def test_physics_ingress_pg_drops_are_in_the_pg_vocabulary_not_an_egress_queue() -> None:
    path = PHYSICS_CORPUS / "ingress_pg_drops_onyx.jsonl.gz"
    tr = _truth(path, kind="packet_loss")
    pg = _series(path, tr["device"], tr["device"], tr["port"], "pg_no_buffer_drops", ("3",))
    assert pg[-1][1] > pg[0][1]
    egress = _series(path, tr["device"], tr["device"], tr["port"], "queue_no_buffer_drops", ("3",))
    assert egress and egress[-1][1] == egress[0][1]


def test_physics_old_firmware_xmit_wait_is_32_bit_saturating_and_cleared_mid_stall() -> None:
    path = PHYSICS_CORPUS / "ib_old_firmware_counter_clear.jsonl.gz"
    tr = _truth(path, kind="congestion")
    values = [v for t, v in _series(path, "ib-fabric", tr["device"], tr["port"], "xmit_wait")
              if tr["start"] < t < tr["end"]]
    assert max(values) == 2**32 - 1 and any(b < a for a, b in pairwise(values))
