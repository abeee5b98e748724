"""The columnar store against the object-per-series store it replaced (tests/store_reference.py).

A seeded generator drives both with the same random polls over every edge case the counter
rules have: every width (4, 8, 16, 32, 64 bits, odd ones from 1 to 72, values past 2^64 as NVUE can report),
saturating and wrapping counters started near their cap, wraps, resets, a value stuck at the
cap, width and scale changes, device clocks that stall, jump back or forward or go missing,
repeated and backward poll times, missed polls, series and ports appearing and disappearing,
a series read twice in one poll, a port's readings split in two groups, bounds that refuse
ports and series, expiry, and save/restore in the middle of a run. After every step each
series must read the same in both (value, width, total, delta, rate, interval, status,
history, windows, increases), the change sets must be equal in content and order, and
save() must give the same state. Views held across steps must keep reading what the
reference's objects hold (blocks move when a port grows, and are copied when it expires).
The columns entry point with a layout token (the cached row plan) is exercised too.
"""

from __future__ import annotations

import math
import random
from typing import Any

import pytest

import tests.store_reference as ref
from fabricmon.agent import store as new
from fabricmon.core.model import Counters, Gauge, Sample

# (name, bits, saturating, scale, subs): widths and kinds the collectors produce.
SPECS = [
    ("tx_bytes", 64, False, 4.0, [()]),  # IB extended data, dense (not in changes)
    ("rx_bytes", 32, False, 1.0, [()]),  # Counter32 octets: wraps
    ("symbol_errors", 16, True, 1.0, [()]),
    ("link_downed", 8, True, 1.0, [()]),
    ("local_link_integrity_errors", 4, True, 1.0, [()]),
    ("xmit_wait", 32, True, 1.0, [()]),  # 32-bit IB counter sticking at 2^32-1
    ("pfc_rx_pause_frames", 64, False, 1.0, [(0,), (3,), (4,)]),
    ("pfc_rx_pause_seconds", 64, False, 1e-6, [(3,)]),
    ("wjh_drops", 64, False, 1.0, [("buffer", "503", 3), ("acl", "1", 0)]),  # appear and vanish
    ("ecn_marked_packets", 64, False, 1.0, [(3,)]),  # values past 2^64 (NVUE integers)
    ("port_buffer_overflow", 0, True, 1.0, [()]),  # width 0: one of ODD_WIDTHS per run
    ("queue_drops", 0, False, 1.0, [(1,)]),
]
# Any width the store accepts, not only the collectors' (1..1024 bits: a 72-bit cap is past
# the uint64 columns and takes the exact object path).
ODD_WIDTHS = [1, 2, 3, 7, 12, 24, 31, 33, 48, 63, 65, 72]
GAUGES = ["link_up", "link_speed_bytes", "temperature_celsius"]


class Run:
    """One random run: a fabric of series, each with its own raw value walk."""

    def __init__(self, seed: int) -> None:
        self.rng = rng = random.Random(seed)
        self.devices = [f"sw{i}" for i in range(rng.randint(1, 3))]
        self.ports = [(d, str(p)) for d in self.devices for p in range(1, rng.randint(2, 4))]
        self.series: dict[tuple, dict[str, Any]] = {}
        for pk in self.ports:
            for name, bits, sat, scale, subs in SPECS:
                bits = bits or rng.choice(ODD_WIDTHS)
                for sub in subs:
                    if rng.random() < 0.8:
                        self.series[(*pk, name, sub)] = {"bits": bits, "sat": sat, "scale": scale,
                                                         "v": self.start(bits, name), "on": rng.random() < 0.9}
        self.t = 1000.0
        self.stable = rng.random() < 0.3  # the same series every poll: the cached row plan is used
        self.clocks = {d: rng.uniform(0, 1e6) for d in self.devices if rng.random() < 0.6}

    def start(self, bits: int, name: str) -> int:
        rng = self.rng
        if name == "ecn_marked_packets" and rng.random() < 0.5:
            return (1 << 64) + rng.randint(0, 1 << 70)
        cap = (1 << bits) - 1
        return rng.choice([0, rng.randint(0, cap), cap - rng.randint(0, 1000) if cap > 1000 else cap, cap])

    def step_value(self, s: dict[str, Any]) -> int | float:
        """Walk the series' raw value one poll on; the reading to send."""
        rng, bits, sat = self.rng, s["bits"], s["sat"]
        cap = (1 << bits) - 1
        r = rng.random()
        if r < 0.05:
            s["v"] = rng.randint(0, min(cap, 1000))  # cleared
        elif r < 0.1:
            s["v"] = cap if sat else rng.randint(0, cap)  # to the cap / anywhere
        elif r < 0.2:
            pass  # did not move
        else:
            inc = rng.choice([1, rng.randint(1, 100), rng.randint(0, max(1, cap >> 2)), rng.randint(0, cap)])
            v = s["v"] + inc
            if s["v"] >= 1 << 64:
                s["v"] = v  # beyond 64 bits: grows on
            elif sat:
                s["v"] = min(v, cap)
            else:
                s["v"] = v & cap
        if rng.random() < 0.01:  # the source switched counters (32 <-> 64 bits) or units
            s["bits"] = 96 - bits if bits in (32, 64) else bits
            s["v"] &= (1 << s["bits"]) - 1
        if rng.random() < 0.01:
            s["scale"] = s["scale"] * 2
        if rng.random() < 0.01:
            return float(s["v"]) + rng.choice([0.0, 0.5])  # a float reading (a restored state can hold one)
        return s["v"]

    def poll(self) -> tuple[list[Sample], list[Gauge], dict[str, float], float]:
        rng = self.rng
        self.t += rng.choice([10.0, 10.0, 10.0, 9.5, 0.0, 30.0, -1.0, 600.0 * rng.random()])
        clocks: dict[str, float] = {}
        for d in list(self.clocks):
            r = rng.random()
            self.clocks[d] += 0.0 if r < 0.08 else -rng.uniform(1, 1e5) if r < 0.14 else rng.uniform(1e4, 1e7) if r < 0.18 \
                else rng.choice([10.0, 9.0, 11.0])
            if rng.random() < 0.9:
                clocks[d] = self.clocks[d]
        if rng.random() < 0.05:
            self.clocks[rng.choice(self.devices)] = rng.uniform(0, 100)  # a device starts reporting a clock
        samples: list[Sample] = []
        ports = [pk for pk in self.ports if self.stable or rng.random() < 0.85]  # missed polls
        if not self.stable and rng.random() < 0.2:
            rng.shuffle(ports)
        for pk in ports:
            block = []
            for key, s in self.series.items():
                if key[:2] != pk:
                    continue
                if not self.stable and rng.random() < 0.03:
                    s["on"] = not s["on"]  # series appears or disappears
                if not s["on"] or (not self.stable and rng.random() < 0.05):
                    continue
                v = self.step_value(s)
                block.append(Sample(pk[0], pk[1], key[2], v, key[3], s["bits"], s["sat"], s["scale"]))
                if not self.stable and rng.random() < 0.01:  # the same series twice in one poll
                    block.append(Sample(pk[0], pk[1], key[2], v + rng.randint(0, 5), key[3], s["bits"], s["sat"], s["scale"]))
            if len(block) > 2 and not self.stable and rng.random() < 0.05:
                cut = rng.randint(1, len(block) - 1)  # the port's readings in two groups
                samples += block[:cut]
                samples.append(Sample("other", "x", "rx_bytes", rng.randint(0, 100), (), 32))
                samples += block[cut:]
            else:
                samples += block
        gauges = [Gauge(pk[0], pk[1], name, float(rng.choice([0, 1, 1, 1, 2])) if name != "temperature_celsius" else rng.random())
                  for pk in ports for name in GAUGES if rng.random() < 0.9]
        return samples, gauges, clocks, self.t


def same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return type(a) is type(b) and a == b if isinstance(a, bool) or isinstance(b, bool) else a == b


def series_facts(se: Any) -> tuple:
    return (se.value, se.bits, se.saturating, se.scale, se.total, se.delta, se.rate, se.dt, se.status, se.poll_t,
            se.device_t, se.history, se.moved_in_history(), *(se.increases(n) for n in (0, 1, 3, 20)),
            *(se.window(s) for s in (0.0, 5.0, 10.0, 25.0, 1e9)))


def assert_same_facts(a: tuple, b: tuple, where: str) -> None:
    assert len(a) == len(b)
    for i, (x, y) in enumerate(zip(a, b, strict=True)):
        assert same(x, y), f"{where}: field {i}: reference {x!r} != columnar {y!r}"


def assert_stores_agree(old: ref.CounterStore, cur: new.CounterStore, where: str) -> None:
    assert list(old.ports) == list(cur.ports), where
    assert old.refused == cur.refused, where
    assert old.layout == cur.layout, where
    assert old.series_count() == cur.series_count(), where
    assert old.devices == cur.devices and old.device_seen == cur.device_seen and old.device_target == cur.device_target
    for pk, e_old in old.ports.items():
        e_new = cur.port(pk)
        assert (e_old.seen, e_old.target, e_old.info) == (e_new.seen, e_new.target, e_new.info), f"{where} {pk}"
        assert [(n, s) for n, s, _ in e_old.counters()] == [(n, s) for n, s, _ in e_new.counters()], f"{where} {pk}"
        for name, sub, se in e_old.counters():
            assert_same_facts(series_facts(se), series_facts(e_new.counter(name, sub)), f"{where} {pk} {name}{sub}")
        for (name, sub) in e_old.gauges:
            assert e_old.gauge(name, sub) == e_new.gauge(name, sub)
    assert [(pk, sk) for pk, sk, _ in old.iter_series()] == [(pk, sk) for pk, sk, _ in cur.iter_series()]
    assert old.save() == cur.save(), where


def assert_changes_agree(a: ref.Changes, b: new.Changes, where: str) -> None:
    assert list(a.moved) == list(b.moved), where
    for name, got in a.moved.items():
        assert list(got) == list(b.moved[name]), f"{where} {name}"
        for pk, se in got.items():
            assert_same_facts(series_facts(se), series_facts(b.moved[name][pk]), f"{where} moved {name} {pk}")
    assert [(k, list(v.items())) for k, v in a.gauges.items()] == [(k, list(v.items())) for k, v in b.gauges.items()], where


def make(mod: Any, bounds: dict[str, int], stale: float) -> Any:
    return mod.CounterStore(history=bounds["history"], stale_after=stale, max_ports=bounds["ports"],
                            max_series_per_port=bounds["series"])


@pytest.mark.parametrize("block", range(8))
def test_columnar_store_matches_the_reference_on_random_runs(block: int) -> None:
    for seed in range(block * 15, block * 15 + 15):
        run = Run(seed)
        rng = random.Random(seed + 10_000)
        bounds = {"history": rng.choice([2, 3, 8]), "ports": rng.choice([1_000_000, 1_000_000, 3]),
                  "series": rng.choice([1024, 1024, 7])}
        stale = rng.choice([600.0, 45.0])
        old, cur = make(ref, bounds, stale), make(new, bounds, stale)
        held: list[tuple[Any, Any, str]] = []  # (reference series, columnar view) kept across steps
        layouts: dict[tuple, int] = {}
        for step in range(30):
            samples, gauges, clocks, t = run.poll()
            where = f"seed {seed} step {step}"
            touched_old = old.update(samples, t, dict(clocks), gauges, target="t1")
            if rng.random() < 0.5:  # the columns entry point, with a token naming the exact key layout
                cols = Counters.of(samples).columns("t1", clocks, gauges)
                keys = (tuple(cols.ports), tuple(cols.port_of), tuple(cols.keys))
                cols.layout = layouts.setdefault(keys, len(layouts))
                touched_new = cur.update_columns(cols, t)
            else:
                touched_new = cur.update(samples, t, dict(clocks), gauges, target="t1")
            assert touched_old == touched_new, where
            if rng.random() < 0.3:
                assert_changes_agree(old.take_changes(), cur.take_changes(), where)
            if rng.random() < 0.3:
                assert old.expire(t) == cur.expire(t), where
            if rng.random() < 0.05:  # save and restore into fresh stores, as a restart does
                state_old, state_new = old.save(), cur.save()
                assert state_old == state_new, where
                now = t + rng.choice([0.0, 30.0, 400.0])
                fresh_old, fresh_new = make(ref, bounds, stale), make(new, bounds, stale)
                try:
                    n_old = fresh_old.restore(state_old, now)
                except ValueError as exc:  # a value past 2^64 is refused by the state file's schema
                    with pytest.raises(ValueError, match=str(exc).split(":")[0].replace("[", r"\[").replace("]", r"\]")):
                        fresh_new.restore(state_new, now)
                else:
                    assert n_old == fresh_new.restore(state_new, now), where
                    # The state file's columnar image restores to the same store as the dict form.
                    from_image = make(new, bounds, stale)
                    assert n_old == from_image.restore_image(cur.image(), now), where
                    assert_stores_agree(fresh_old, from_image, f"{where} (image)")
                    old, cur = fresh_old, fresh_new
            assert_stores_agree(old, cur, where)
            if old.ports and rng.random() < 0.5:
                pk = rng.choice(list(old.ports))
                for name, sub, se in old.ports[pk].counters():
                    held.append((se, cur.port(pk).counter(name, sub), f"{where} held {pk} {name}{sub}"))
            for se_old, se_new, what in held[-40:]:
                assert_same_facts(series_facts(se_old), series_facts(se_new), what)
        assert_changes_agree(old.take_changes(), cur.take_changes(), f"seed {seed} end")


def test_bulk_reads_give_each_family_in_exposition_order() -> None:
    """family_rows()/totals()/rates(): what a columnar renderer reads instead of one view per series."""
    run = Run(7)
    cur = new.CounterStore()
    for _ in range(4):
        samples, gauges, clocks, t = run.poll()
        cur.update(samples, t, clocks, gauges, target="t1")
    families = cur.family_rows()
    totals, rates = cur.totals(), cur.rates()
    seen = 0
    for name, fam in families.items():
        assert [k for k in fam.keys] == sorted(fam.keys, key=lambda k: (k[0], tuple(str(x) for x in k[1])))
        for (pk, sub), row in zip(fam.keys, fam.rows.tolist(), strict=True):
            se = cur.get(pk[0], pk[1], name, sub)
            assert totals[row] == se.total
            assert (se.rate is None and math.isnan(rates[row])) or rates[row] == se.rate
            seen += 1
    assert seen == cur.series_count() > 0
    assert cur.family_rows() is families  # cached while the set of series holds


def test_blocks_compacted_after_expiry_keep_every_series_and_held_view() -> None:
    """Thousands of ports expire at once: the columns are compacted (blocks move to a new
    table) and every remaining series, and every view held across it, still reads as the
    reference does; views of expired ports keep their last values, like orphaned objects."""
    old, cur = ref.CounterStore(stale_after=50.0), new.CounterStore(stale_after=50.0)
    held = []
    for t in (0.0, 10.0, 20.0):
        samples = [Sample(f"d{i // 10}", str(i % 10), "symbol_errors", int(t) * (i % 7), (), 16, True)
                   for i in range(6000 if t < 20 else 1000)]
        old.update(samples, t)
        cur.update(samples, t)
        if t == 10.0:
            held = [(old.get(f"d{i // 10}", str(i % 10), "symbol_errors"), cur.get(f"d{i // 10}", str(i % 10), "symbol_errors"))
                    for i in range(0, 6000, 97)]
    table = cur.totals().base
    assert old.expire(70.0) == cur.expire(70.0) == 5000
    assert cur.totals().base is not table  # compacted into a new table
    assert_stores_agree(old, cur, "after compaction")
    for se_old, se_new in held:
        assert_same_facts(series_facts(se_old), series_facts(se_new), "held view")
    samples = [Sample(f"d{i // 10}", str(i % 10), "symbol_errors", 500, (), 16, True) for i in range(1000)]
    old.update(samples, 80.0)
    cur.update(samples, 80.0)
    assert_stores_agree(old, cur, "after compaction and one more poll")
