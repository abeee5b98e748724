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
from tools.scenarios import AUDIT, DEFAULT_SEED, FAMILIES, PHYSICS, SCENARIOS, encode, run
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
FAMILY_CORPUS = {fam: ROOT / "tests" / f"scenarios_{fam}" for fam in FAMILIES}  # negatives, capabilities
FAMILY_FILES = sorted(p for folder in FAMILY_CORPUS.values() for p in folder.glob("*.jsonl.gz"))
NEGATIVES_CORPUS, CAPABILITIES_CORPUS = FAMILY_CORPUS["negatives"], FAMILY_CORPUS["capabilities"]


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


@pytest.mark.parametrize("family", list(FAMILIES))
def test_committed_family_corpus_is_what_the_generator_writes(family: str) -> None:
    folder = FAMILY_CORPUS[family]
    assert sorted(p.name for p in folder.glob("*.jsonl.gz")) == sorted(f"{n}.jsonl.gz" for n in FAMILIES[family])
    for i, (name, build) in enumerate(FAMILIES[family].items()):
        assert (folder / f"{name}.jsonl.gz").read_bytes() == encode(run(build(DEFAULT_SEED + i))), name


def test_committed_audit_corpus_is_what_the_generator_writes() -> None:
    assert sorted(p.name for p in AUDIT_FILES) == sorted(f"{n}.jsonl.gz" for n in AUDIT)
    for i, (name, build) in enumerate(AUDIT.items()):
        assert (AUDIT_CORPUS / f"{name}.jsonl.gz").read_bytes() == encode(run(build(DEFAULT_SEED + i))), name


@pytest.mark.parametrize("path", [*FILES, *PHYSICS_FILES, *AUDIT_FILES, *FAMILY_FILES], ids=lambda p: p.name)
def test_recording_is_valid(path: Path) -> None:
    lines = _lines(path)
    head = lines[0]
    assert head["type"] == "header" and head["format"] == "fabricmon-recording" and head["version"] == 1
    targets = {t["name"]: t for t in head["targets"]}
    for t in head["targets"]:
        if t["source"] == "snmp":  # the physics corpus and the families leave the profile to detection
            assert t.get("profile") in PROFILES if path not in (*PHYSICS_FILES, *FAMILY_FILES) else "profile" not in t
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


@pytest.mark.parametrize("path", [*FILES, *PHYSICS_FILES, *AUDIT_FILES, *FAMILY_FILES], ids=lambda p: p.name)
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
        # UFM REST without a counters call gives the topology, states and link rates only; a job
        # source gives its inventory
        assert result.counters or result.inventory or (line["source"] == "ufm" and result.gauges and result.links), \
            f"{line['target']} @ {line['t']}: no samples"
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
    tr = _truth(path, kind="credit_deadlock", role="stalled")
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
    tr = _truth(path, kind="credit_deadlock", role="stalled")
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
    tr = _truth(path, kind="credit_deadlock", role="stalled")
    values = [v for t, v in _series(path, "ib-fabric", tr["device"], tr["port"], "xmit_wait")
              if tr["start"] < t < tr["end"]]
    assert max(values) == 2**32 - 1 and any(b < a for a, b in pairwise(values))


# ---------------------------------------------------------------- hard negatives and capability scenarios (issue 27)

def _deltas(series: list[tuple[float, float]]) -> dict[float, float]:
    """Increase per interval by its end time; intervals where the counter restarted (a clear,
    a reboot, a 32-bit wrap) are left out."""
    return {t1: b - a for (_, a), (t1, b) in pairwise(series) if b >= a}


def test_negatives_have_no_truth_and_cover_every_profile_and_source() -> None:
    """Every vendor profile the simulator renders over SNMP, and NVUE, host NICs, perfquery, UFM
    REST and UFM Telemetry, each in at least one healthy fabric without truth."""
    from tools.scenarios.render import PROFILES as RENDERED

    seen_sources, seen_profiles = set(), set()
    for path in sorted(NEGATIVES_CORPUS.glob("*.jsonl.gz")):
        lines = _lines(path)
        assert not [ln for ln in lines if ln["type"] == "truth"], path.name
        for t in lines[0]["targets"]:
            seen_sources.add(t["source"])
        descr = [ln["payload"]["snmprec"] for ln in lines if ln["type"] == "poll" and ln["ok"] and ln["source"] == "snmp"][:1]
        if descr:
            seen_profiles.add(path.name.removeprefix("neg_").split("_")[0])
    assert {"snmp", "nvue", "host", "perfquery", "ufm", "ufm-telemetry"} <= seen_sources
    assert {p.split("8021")[0].rstrip("-") for p in RENDERED} <= seen_profiles | {"ieee"}


def test_converged_normal_marks_one_to_three_percent_and_only_markers_pause() -> None:
    """DCQCN at work (tools/scenarios/converged.py): a busy RoCE queue marks 1-3 % of what it
    sends; a switch sends PFC in an interval only where one of its RoCE queues marked ECN then."""
    path = NEGATIVES_CORPUS / "neg_arista_converged.jsonl.gz"
    checked = 0
    for leaf in ("leaf01", "leaf02", "leaf03", "spine01"):
        lines = _lines(path)
        ports = sorted({s for ln in lines if ln["type"] == "poll" and ln["target"] == leaf and ln["ok"]
                        for s in [ln["target"]]})
        assert ports
        marks: dict[float, float] = {}
        pfc_sent: dict[float, float] = {}
        for port in [f"Ethernet{i}" for i in range(1, 5)]:
            sent = _deltas(_series(path, leaf, leaf, port, "queue_tx_packets", ("3",)))
            marked = _deltas(_series(path, leaf, leaf, port, "ecn_marked_packets", ("3",)))
            for t, m in marked.items():
                marks[t] = marks.get(t, 0.0) + m
                if m and sent.get(t):
                    assert 0.0099 <= m / sent[t] <= 0.0301, (leaf, port, t, m / sent[t])
                    checked += 1
            for t, n in _deltas(_series(path, leaf, leaf, port, "pfc_tx_pause_frames", ("3",))).items():
                pfc_sent[t] = pfc_sent.get(t, 0.0) + n
        for t, n in pfc_sent.items():
            assert not n or marks.get(t), (leaf, t)
    assert checked > 50


@pytest.mark.parametrize(("name", "device", "port", "rises", "flat"), [
    ("neg_arista_converged", "leaf01", "Ethernet2", [("queue_drops", ("0",))], [("queue_drops", ("3",))]),
    ("neg_arista_converged", "leaf01", "Ethernet1", [("ingress_queue_drops", ("0",))], [("ingress_queue_drops", ("3",))]),
    ("neg_onyx_converged", "leaf01", "Eth1/1", [("queue_no_buffer_drops", ("0",)), ("pg_shared_buffer_drops", ("0",))],
     [("queue_no_buffer_drops", ("3",)), ("pg_no_buffer_drops", ("3",)), ("pg_shared_buffer_drops", ("3",))]),
    ("neg_sonic_converged", "leaf01", "Ethernet0", [("queue_drops", ("0",))], [("queue_drops", ("3",))]),
    ("neg_cumulus_converged", "leaf01", "swp1", [("queue_drops", ("all",)), ("ingress_buffer_overflow_drops", ())], []),
    ("neg_cisco_converged", "leaf01", "Ethernet1/1", [("tx_discards", ())], [("pfc_watchdog_storms", ("3",))]),
    ("neg_nvue_converged", "leaf01", "swp1", [("queue_no_buffer_drops", ("0",))], [("queue_no_buffer_drops", ("3",))]),
])
def test_best_effort_drops_in_every_shape_the_profile_exposes(name, device, port, rises, flat) -> None:
    """Lossy drops appear wherever the device counts them (per queue, per PG, per ingress queue,
    for the whole port, IF-MIB); the lossless class never drops on a healthy fabric."""
    path = NEGATIVES_CORPUS / f"{name}.jsonl.gz"
    for counter, sub in rises:
        d = _deltas(_series(path, device, device, port, counter, sub))
        assert sum(d.values()) > 0 and sum(1 for v in d.values() if v) >= 5, (counter, sub)
    for counter, sub in flat:
        d = _deltas(_series(path, device, device, port, counter, sub))
        assert d and not any(d.values()), (counter, sub)


def test_nvue_negative_reports_lossy_tail_drops_in_wjh_with_their_class() -> None:
    path = NEGATIVES_CORPUS / "neg_nvue_converged.jsonl.gz"
    records = [r for ln in _lines(path) if ln["type"] == "poll" and ln["ok"]
               for resp in ln["payload"]["responses"] if resp["path"].startswith("/nvue_v1/system/wjh")
               for r in resp["body"]]
    assert records and {r["traffic_class"] for r in records} == {0} and {r["ReasonId"] for r in records} == {503}


def _snmp_raw(path: Path, target: str, oid: str) -> list[tuple[float, int]]:
    out = []
    for ln in _lines(path):
        if ln["type"] == "poll" and ln["target"] == target and ln["ok"]:
            for row in ln["payload"]["snmprec"].splitlines():
                o, _tag, v = row.split("|", 2)
                if o == oid:
                    out.append((ln["t"], int(v)))
    return out


def test_counter32_and_timeticks_wrap_in_the_negatives() -> None:
    """IF-MIB discards (Counter32) and IEEE8021-PFC totals wrap through 2^32; leaf01's sysUpTime
    wraps after 497.1 days without a reboot (no outage, counters keep counting)."""
    cisco = NEGATIVES_CORPUS / "neg_cisco_converged.jsonl.gz"
    uptime = _snmp_raw(cisco, "leaf01", "1.3.6.1.2.1.1.3.0")
    drops = [i for i, ((_, a), (_, b)) in enumerate(pairwise(uptime)) if b < a]
    assert len(drops) == 1 and all(v < 2**32 for _, v in uptime)
    t0, t1 = uptime[drops[0]][0], uptime[drops[0] + 1][0]
    assert round((uptime[drops[0] + 1][1] + 2**32 - uptime[drops[0]][1]) / 100 - (t1 - t0), 2) == 0  # wrapped, not reset
    wraps = sum(b < a for i in (1, 2, 3, 4) for (_, a), (_, b) in
                pairwise(_snmp_raw(cisco, "leaf02", f"1.3.6.1.2.1.2.2.1.19.{436207616 + (i - 1) * 4096}")))
    assert wraps >= 1
    ieee = NEGATIVES_CORPUS / "neg_ieee_converged.jsonl.gz"
    pfc = sum(b < a for leaf in ("leaf01", "leaf02", "leaf03") for i in (1, 2, 3, 4)
              for (_, a), (_, b) in pairwise(_snmp_raw(ieee, leaf, f"1.3.111.2.802.1.1.21.1.1.1.3.{i}")))
    assert pfc >= 3


def test_irregular_polling_with_a_missed_and_a_failed_poll() -> None:
    path = NEGATIVES_CORPUS / "neg_arista_converged.jsonl.gz"
    lines = _lines(path)
    ts = {n: [ln["t"] for ln in lines if ln["type"] == "poll" and ln["target"] == n] for n in ("leaf01", "spine01")}
    gaps = [b - a for a, b in pairwise(ts["leaf01"])]
    assert max(gaps) - min(gaps) > 4.0 and all(6.9 < g < 13.1 for g in gaps)
    assert len(ts["spine01"]) == len(ts["leaf01"]) - 1  # the missed poll: no line at all
    assert [ln for ln in lines if ln["type"] == "poll" and not ln["ok"] and ln["target"] == "leaf02"]


def test_ufm_rest_and_telemetry_describe_the_same_ports_by_guid() -> None:
    """UFM REST names ports by node description and GUID; UFM Telemetry rows carry only GUIDs,
    the same ones, stamped with the telemetry's own clock half a second before the poll."""
    path = CAPABILITIES_CORPUS / "ib_ufm_two_sources.jsonl.gz"
    lines = _lines(path)
    rest = next(ln for ln in lines if ln["type"] == "poll" and ln["target"] == "ufm")
    ports = {(p["guid"], str(p["number"])): p["node_description"].rsplit(":", 1)[0]
             for p in rest["payload"]["responses"][0]["body"]}
    tel = [ln for ln in lines if ln["type"] == "poll" and ln["target"] == "ufm-telemetry"]
    body = tel[0]["payload"]["responses"][0]["body"].splitlines()
    head = body[0].split(",")
    rows = [dict(zip(head, r.split(","), strict=True)) for r in body[1:] if r]
    assert {(r["port_guid"][2:], r["port_num"]) for r in rows} == set(ports)
    assert "node_description" not in head and all(not r["node_guid"].endswith(tuple("gz")) for r in rows)
    stamps = [int(ln["payload"]["responses"][0]["body"].splitlines()[1].split(",")[0]) / 1e6 for ln in tel]
    assert all(0.5 <= ln["t"] - s <= 0.506 for ln, s in zip(tel, stamps, strict=True))
    truth_devices = {t["device"] for t in lines if t["type"] == "truth"}
    assert truth_devices <= set(ports.values())  # truth names devices as UFM REST and perfquery do


def test_switch_emitted_storm_direction_is_in_both_ends_counters() -> None:
    """leaf01's uplink sends XOFF and keeps transmitting; spine01's egress toward it is paused all
    the time (Cisco pause time) and sends nothing on priority 3."""
    path = CAPABILITIES_CORPUS / "storm_switch_emitted.jsonl.gz"
    origin = _truth(path, role="origin")
    stuck = next(t for t in _lines(path) if t["type"] == "truth" and t["device"] == "spine01")
    during = lambda d: [v for t, v in d.items() if origin["start"] < t < origin["end"]]  # noqa: E731
    tx_pause = during(_deltas(_series(path, "leaf01", "leaf01", origin["port"], "pfc_tx_pause_frames", ("3",))))
    assert tx_pause and min(tx_pause) > 100_000  # an XOFF refresh every half quanta, 10 s long
    tx = [r for t, r in _rates(_series(path, "leaf01", "leaf01", origin["port"], "tx_bytes")) if origin["start"] < t < origin["end"]]
    assert tx and min(tx) > 30e9  # bytes/s: the pauser transmits hundreds of Gb/s
    waited = [r for t, r in _rates(_series(path, "spine01", "spine01", stuck["port"], "pfc_rx_pause_seconds", ("3",)))
              if origin["start"] < t < origin["end"]]
    assert waited and min(waited) >= 0.99
    leaf_rx = [r for t, r in _rates(_series(path, "leaf01", "leaf01", origin["port"], "pfc_rx_pause_frames", ("3",)))
               if origin["start"] < t < origin["end"]]
    assert max(leaf_rx) < 5000  # the pauser is not paused: only the normal's brief pauses


def test_deadlock_closes_mid_interval_then_holds() -> None:
    path = CAPABILITIES_CORPUS / "pfc_deadlock_forms_mid_poll.jsonl.gz"
    members = [t for t in _lines(path) if t["type"] == "truth" and t["role"] == "member"]
    first = []
    for m in members:
        rates = dict(_rates(_series(path, m["device"], m["device"], m["port"], "pfc_rx_pause_seconds", ("3",))))
        first.append(rates[m["start"]])
        assert all(r >= 0.99 for t, r in rates.items() if m["start"] < t < m["end"])
    assert max(first) > 0.9 > 0.6 > min(first)  # the poll it forms: some members held most of it, others half


def test_width_and_speed_degradation_are_visible_in_the_topology_sources() -> None:
    width = CAPABILITIES_CORPUS / "ib_width_degraded.jsonl.gz"
    topo = [ln["payload"]["ibnetdiscover"] for ln in _lines(width) if ln["type"] == "poll" and "ibnetdiscover" in ln["payload"]]
    assert "2xNDR" not in topo[0] and topo[-1].count("2xNDR") == 2
    speed = CAPABILITIES_CORPUS / "ib_speed_degraded_ufm.jsonl.gz"
    ends = {(t["device"], t["port"]) for t in _lines(speed) if t["type"] == "truth"}
    hdr = [ln for ln in _lines(speed) if ln["type"] == "poll" and ln["target"] == "ufm" and any(
        p["active_speed"] == "HDR" for p in ln["payload"]["responses"][0]["body"])]
    assert 20 <= len(hdr) <= 30
    assert {tuple(p["node_description"].rsplit(":", 1)) for p in hdr[0]["payload"]["responses"][0]["body"]
            if p["active_speed"] == "HDR"} == ends


def test_host_only_storm_from_the_nic_s_own_counters() -> None:
    path = CAPABILITIES_CORPUS / "host_nic_storm_host_only.jsonl.gz"
    origin = _truth(path, role="origin")
    host, port = origin["device"], origin["port"]
    sent = [r for t, r in _rates(_series(path, host, host, port, "pfc_tx_pause_seconds", ("3",))) if origin["start"] < t < origin["end"]]
    assert sent and min(sent) >= 0.99
    rx = [r for t, r in _rates(_series(path, host, host, port, "rx_bytes")) if origin["start"] < t < origin["end"]]
    assert rx and max(rx) < 0.01 * 25e9  # almost nothing drained
    assert not _series(path, host, host, port, "tx_pause_storm_error_events")
    assert {t["source"] for t in _lines(path)[0]["targets"]} == {"host"}


def test_watchdog_cycling_counts_pause_only_while_operational() -> None:
    """sonic-buildimage#29203: the NIC pauses all the time, the switch counts it 40-55 % of the
    time, and its watchdog stores and restores ~16 times a poll."""
    path = CAPABILITIES_CORPUS / "wd_cycling_hidden_rx.jsonl.gz"
    wd = _truth(path, role="watchdog")
    within = lambda rates: [r for t, r in rates if wd["start"] < t < wd["end"]]  # noqa: E731
    counted = within(_rates(_series(path, wd["device"], wd["device"], wd["port"], "pfc_rx_pause_seconds", ("3",))))
    assert counted and all(0.39 <= r <= 0.56 for r in counted)
    nic = _truth(path, role="origin")["peer_device"]
    nic_sent = within(_rates(_series(path, nic, nic, "mlx5_0/1", "pfc_tx_pause_seconds", ("3",))))
    assert nic_sent and min(nic_sent) >= 0.99
    storms = [v for t, v in _deltas(_series(path, wd["device"], wd["device"], wd["port"], "pfc_watchdog_storms", ("3",))).items()
              if wd["start"] < t < wd["end"]]
    assert storms and all(14 <= n <= 18 for n in storms)


def test_stale_watchdog_sees_xon_frames_without_pause() -> None:
    path = CAPABILITIES_CORPUS / "wd_stale_state.jsonl.gz"
    wd = _truth(path, role="watchdog")
    frames = [r for t, r in _rates(_series(path, wd["device"], wd["device"], wd["port"], "pfc_rx_pause_frames", ("3",)))
              if wd["start"] < t < wd["end"]]
    paused = [r for t, r in _rates(_series(path, wd["device"], wd["device"], wd["port"], "pfc_rx_pause_seconds", ("3",)))
              if wd["start"] < t < wd["end"]]
    assert frames and min(frames) > 10_000 and paused and max(paused) < 0.02


def test_frozen_host_discards_only_at_its_stalled_edge_ports() -> None:
    path = CAPABILITIES_CORPUS / "ib_congestion_tree_frozen_host.jsonl.gz"
    stalled = {(t["device"], t["port"]) for t in _lines(path) if t["type"] == "truth" and t["role"] == "stalled"}
    tree = [t for t in _lines(path) if t["type"] == "truth" and t["kind"] == "congestion"]
    assert len(stalled) == 4 and {d for d, _ in stalled} == {"ib-leaf01", "ib-leaf02", "ib-leaf03", "ib-leaf04"}
    start, end = tree[0]["start"], tree[0]["end"]
    for t in tree:
        target = "ib-fabric"
        disc = _deltas(_series(path, target, t["device"], t["port"], "tx_discards"))
        assert not any(v for tt, v in disc.items() if start < tt < end), (t["device"], t["port"])
    for device, port in stalled:
        disc = _deltas(_series(path, "ib-fabric", device, port, "tx_discards"))
        assert all(v > 0 for tt, v in disc.items() if start < tt < end)
