"""The pfc analysis on columns (issue 29): each priority is screened in whole-array passes and
only rows that may be paused, send pause, be stuck or held or concern a watchdog are classified
one by one; partly paused rows are kept as keys and their state computed when asked. The
reference is the per-port path: every active row through :func:`compute_state`. Both run in
lockstep on the PFC recordings of the corpus and on random fabrics whose pause crosses every
threshold, and must agree after every pass on every state, export, NIC level and finding."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest

from fabricmon.agent.assemble import build_pipeline
from fabricmon.agent.config import Config
from fabricmon.agent.detector.analyses import pfc as pfc_mod
from fabricmon.agent.detector.analyses.pfc_state import (
    MAX_QUANTA_BITS,
    PFC_NAMES,
    PfcState,
    Screen,
    compute_state,
    pause_active,
)
from fabricmon.agent.pipeline import Pipeline
from fabricmon.agent.recording import iter_lines, poll_from_line
from fabricmon.agent.replay import replay_pipeline
from fabricmon.core.model import Counters, DeviceInfo, Gauge, Link, ParseResult, TargetSpec

ROOT = Path(__file__).parent
RECORDINGS = sorted(p for d in ROOT.glob("scenarios*") for p in d.glob("*.jsonl.gz")
                    if any(w in p.name for w in ("storm", "deadlock", "pause", "pfc", "roce", "lossless", "incast", "benign")))


def _per_port(store):
    """The reference screen, from each port's own views: the rows with PFC series of the
    priority, active by :func:`pause_active`; none light (every active row is classified by
    compute_state) and every host asked whether it stalls (the tx bound screens none out)."""
    def screen(cols, prio, p, keep_fps, wd_changed):
        entries = [store.ports.get(pk) for pk in cols.ports]
        has = np.array([e is not None and any(e.counter(n, (prio,)) is not None for n in PFC_NAMES) for e in entries], bool)
        active = has & np.array([e is not None and pause_active(e, (prio,)) for e in entries], bool)
        none = np.zeros(len(has), bool)
        return Screen(has, active, none, none, np.full(len(has), np.nan), np.full(len(has), np.inf))
    return screen


def _states(a: pfc_mod.PfcAnalysis) -> dict:
    """Every kept state, classified or light (computed now), by (port, priority)."""
    out = {(pk, prio): st for pk, by in a.states.items() for prio, st in by.items()}
    out.update({(pk, prio): a._state(pk, prio) for prio, pks in a.light.items() for pk in pks})
    return out


def _agree(ref: Pipeline, new: Pipeline, where: str) -> int:
    a, b = ref.detector.analysis("pfc"), new.detector.analysis("pfc")
    assert not any(a.light.values()), where  # the reference keeps every row as a classified state
    assert _states(a) == _states(b), where
    assert (a.pause_ratio.values, a.pfc_state.values) == (b.pause_ratio.values, b.pfc_state.values), where
    assert (a.nic, a.stalls, a.watch, a.frozen) == (b.nic, b.stalls, b.watch, b.frozen), where
    assert repr(a.result.trees) == repr(b.result.trees) and repr(a.result.deadlocks) == repr(b.result.deadlocks), where
    assert repr(a.result.unattributed) == repr(b.result.unattributed) and repr(a.result.watchdogs) == repr(b.result.watchdogs)
    assert [f.key for f in ref.findings()] == [f.key for f in new.findings()], where
    return sum(map(len, b.light.values()))


def _lockstep(monkeypatch, ref: Pipeline, new: Pipeline, step, where: str) -> int:
    """Run ``step(pipeline)`` on both (the reference with the per-port screen); compare."""
    with monkeypatch.context() as m:
        m.setattr(pfc_mod, "screen", _per_port(ref.store))
        step(ref)
    step(new)
    return _agree(ref, new, where)


@pytest.mark.parametrize("path", RECORDINGS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_columns_agree_with_the_per_port_path_on_the_corpus(monkeypatch, path) -> None:
    lines = iter_lines(path)
    _, header = next(lines)
    ref, new = replay_pipeline(header, path), replay_pipeline(header, path)
    for lineno, line in lines:
        if line["type"] == "poll":
            _lockstep(monkeypatch, ref, new, lambda p, ln=lineno, li=line: p.ingest(poll_from_line(path, ln, li)),
                      f"{path.name}:{lineno}")


class _RandomFabric:
    """Four switches in a ring and two hosts, every port with PFC counters on priorities 0-7;
    each (port, priority) keeps a pause level for a while: none, partial (under the graph
    threshold), paused, or held all the interval, by pause time or by frames only (some ports
    have no speed, so frames bound nothing); watchdogs that count storms and hold the stormed
    state; NIC storm counters on the hosts; queue counters on some ports."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.ports = [(f"sw{s}", f"Ethernet{j}") for s in range(4) for j in range(4)] + [("h0", "mlx5_0/1"), ("h1", "mlx5_0/1")]
        self.links = [Link(f"sw{s}", "Ethernet0", f"sw{(s + 1) % 4}", "Ethernet1") for s in range(4)]
        self.links += [Link("h0", "mlx5_0/1", "sw0", "Ethernet2"), Link("h1", "mlx5_0/1", "sw1", "Ethernet2")]
        self.level = {(pk, prio): 0 for pk in self.ports for prio in range(8)}
        self.frames_only = {pk: self.rng.random() < 0.4 for pk in self.ports}
        self.speed = {pk: self.rng.choice([None, 12.5e9, 50e9]) for pk in self.ports}
        self.totals: dict[tuple, float] = {}

    def poll(self, t: float, dt: float) -> ParseResult:
        rng = self.rng
        c = Counters()
        gauges = []
        for key in self.level:
            if rng.random() < 0.15:
                self.level[key] = rng.choice([0, 0, 1, 1, 2, 3])
        for pk in self.ports:
            speed = self.speed[pk]
            keep = (speed or 50e9) * 8 / MAX_QUANTA_BITS
            if speed is not None:
                gauges += [Gauge(*pk, "link_speed_bytes", speed), Gauge(*pk, "link_up", 1.0)]
            for prio in range(8):
                share = {0: 0.0, 1: rng.uniform(0.01, 0.4), 2: rng.uniform(0.5, 0.9), 3: 1.0}[self.level[(pk, prio)]]
                for d in ("rx", "tx"):
                    if rng.random() < 0.5 or d == "rx":
                        self._add(c, pk, f"pfc_{d}_pause_frames", (prio,), share * keep * dt * rng.uniform(0.8, 1.0))
                        if not self.frames_only[pk]:
                            self._add(c, pk, f"pfc_{d}_pause_seconds", (prio,), share * dt * 1e6, scale=1e-6)
                if prio == 3 and pk[0].startswith("sw"):
                    self._add(c, pk, "pfc_watchdog_storms", (prio,), float(rng.random() < 0.1))
                    gauges.append(Gauge(*pk, "pfc_watchdog_stormed", float(rng.random() < 0.15), (prio,)))
                    self._add(c, pk, "queue_tx_bytes", (prio,), (1 - share) * (speed or 50e9) * dt * 0.3)
            self._add(c, pk, "tx_bytes", (), (speed or 50e9) * dt * rng.uniform(0.0, 0.5))
            self._add(c, pk, "rx_bytes", (), (speed or 50e9) * dt * rng.uniform(0.0, 0.5))
            if pk[0].startswith("h"):
                self._add(c, pk, "tx_pause_storm_warning_events", (), float(rng.random() < 0.1))
        return ParseResult(counters=c, gauges=gauges, links=self.links,
                           devices=[DeviceInfo("h0", kind="host"), DeviceInfo("h1", kind="host")])

    def _add(self, c: Counters, pk, name: str, sub: tuple, step: float, scale: float = 1.0) -> None:
        key = (pk, name, sub)
        self.totals[key] = self.totals.get(key, 0.0) + step
        c.add(pk[0], pk[1], name, int(self.totals[key]), sub, scale=scale)


@pytest.mark.parametrize("seed", range(6))
def test_columns_agree_with_the_per_port_path_on_random_pause(monkeypatch, seed) -> None:
    config = Config.model_validate({"global": {"stale_after": "1h"}, "fabric": {"lossless_priorities": [3]}})
    ref, new = (build_pipeline(config, [TargetSpec("fabric", "snmp")]) for _ in range(2))
    fab = _RandomFabric(seed)
    light = classified = storms = 0
    for k in range(40):
        t = 1000.0 + 10 * k
        result = fab.poll(t, 10.0)

        def step(p: Pipeline, t=t, result=result) -> None:
            p.store_result("fabric", t, result)
            p.detect(t)

        light += _lockstep(monkeypatch, ref, new, step, f"seed {seed} poll {k}")
        a = new.detector.analysis("pfc")
        classified += sum(map(len, a.states.values()))
        storms += len(a.result.trees) + len(a.result.deadlocks)
    # Both paths were taken, and the graph stages ran on what they kept: light rows (computed
    # when asked), rows classified one by one, and storm trees or deadlocks built from them.
    assert light > 0 and classified > 0 and storms > 0


def test_a_light_state_is_what_the_per_port_path_computes() -> None:
    """A light row's state, computed when asked, equals compute_state on the port, and its row
    is active by the per-port pause_active."""
    config = Config.model_validate({"global": {"stale_after": "1h"}, "fabric": {"lossless_priorities": [3]}})
    p = build_pipeline(config, [TargetSpec("fabric", "snmp")])
    fab = _RandomFabric(7)
    for k in range(6):
        p.store_result("fabric", 1000.0 + 10 * k, fab.poll(1000.0 + 10 * k, 10.0))
        p.detect(1000.0 + 10 * k)
    a = p.detector.analysis("pfc")
    rows = [(pk, prio) for prio, pks in a.light.items() for pk in pks]
    assert rows
    for pk, prio in rows:
        entry = p.store.ports[pk]
        st = a._state(pk, prio)
        assert isinstance(st, PfcState) and st == compute_state(pk, entry, prio, a.p, a.qmap)
        assert pause_active(entry, (prio,)) and st.active and not (st.paused or st.sends or st.stormed or st.held)
