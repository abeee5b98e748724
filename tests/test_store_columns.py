"""The store's columns beyond the equivalence runs: poll times kept as indices into one table
(compacted when it fills), gauges as columns with a per-target plan, and the bulk reads.

Each test drives the columnar store (agent/store.py) and the object-per-series reference
(tests/store_reference.py) with the same polls, as tests/test_store_equivalence.py does, in
the situations those runs do not reach: hundreds of distinct poll times with a tiny time
table, and a target that hands the same gauge objects again poll after poll (perfquery's
topology facts do) while their values change.
"""

from __future__ import annotations

import random

import pytest

import tests.store_reference as ref
import tests.test_store_equivalence as eq
from fabricmon.agent import store as new
from fabricmon.core.model import Gauge, Sample
from tests.test_store_equivalence import Run, assert_changes_agree, assert_stores_agree


@pytest.mark.parametrize("seed", range(6))
def test_poll_times_compacted_while_series_keep_their_history(seed, monkeypatch):
    """A time table that fills every few polls: compacted again and again (and its indices
    widened to uint32 when more times are in use than uint16 can name: here 3), every series'
    history, poll time, rate and saved state still read as the reference's, and so do held views."""
    monkeypatch.setattr(new._Times, "FLOOR", 8)
    if seed % 2:
        monkeypatch.setattr(new, "_NARROW_TIMES", 3)
    run = Run(seed)
    old, cur = ref.CounterStore(history=3, stale_after=45.0), new.CounterStore(history=3, stale_after=45.0)
    held = []
    for step in range(60):
        samples, gauges, clocks, t = run.poll()
        for target in ("t1", "t2"):  # two targets: two poll times a step
            half = [s for i, s in enumerate(samples) if (i % 2 == 0) == (target == "t1")]
            assert old.update(half, t + (target == "t2"), dict(clocks), gauges, target=target) == \
                cur.update(half, t + (target == "t2"), dict(clocks), gauges, target=target)
        if step % 7 == 3:
            assert old.expire(t) == cur.expire(t)
        assert_stores_agree(old, cur, f"seed {seed} step {step}")
        if old.ports and step % 5 == 0:
            pk = next(iter(old.ports))
            held += [(se, cur.port(pk).counter(n, s)) for n, s, se in old.ports[pk].counters()]
        for a, b in held[-20:]:
            assert (a.history, a.poll_t, a.total) == (b.history, b.poll_t, b.total)
    assert cur._times.n < 120  # compacted: fewer than one time per poll (120 polls)
    assert (cur._t.hist_i.dtype == new.np.uint32) == bool(seed % 2)


def test_the_same_gauge_objects_again_with_new_values_match_the_reference():
    """perfquery hands its topology's gauge objects every poll: the plan is reused, values and
    state changes (a link going down and up) are what the reference sees."""
    rng = random.Random(3)
    gauges = [Gauge(f"sw{i}", str(p), name, 1.0) for i in range(20) for p in range(1, 4)
              for name in ("link_up", "link_speed_bytes", "temperature_celsius")]
    old, cur = ref.CounterStore(), new.CounterStore()
    for step in range(25):
        for g in gauges:
            if rng.random() < 0.1:
                g.value = float(rng.choice([0, 1, 2.5]))
        samples = [Sample("sw1", "1", "symbol_errors", step, (), 16, True)]
        t = 1000.0 + 10 * step
        assert old.update(samples, t, {}, gauges, target="ib") == cur.update(samples, t, {}, gauges, target="ib")
        assert_changes_agree(old.take_changes(), cur.take_changes(), f"step {step}")
        assert_stores_agree(old, cur, f"step {step}")
        if step == 10:  # a new object for one gauge, same key: the keys still match
            gauges[5] = Gauge(gauges[5].device, gauges[5].port, gauges[5].name, 7.0)
        if step == 15:  # a new gauge: one by one once, then a new plan
            gauges.append(Gauge("sw99", "1", "link_up", 1.0))


def test_gauge_rows_and_family_rows_read_every_value_in_exposition_order():
    run = Run(11)
    cur = new.CounterStore()
    for _ in range(3):
        samples, gauges, clocks, t = run.poll()
        cur.update(samples, t, clocks, gauges, target="t1")
    order = cur.port_order()
    assert order == sorted(cur.ports)
    values = cur.gauge_values()
    n = 0
    for name, fam in cur.gauge_rows().items():
        keys = list(fam.keys)
        assert keys == sorted(keys, key=lambda k: (k[0], tuple(str(x) for x in k[1])))
        for (pk, sub), row, pa, sa in zip(keys, fam.rows.tolist(), fam.port_at.tolist(), fam.sub_at.tolist(), strict=True):
            assert (order[pa], fam.subs[sa]) == (pk, sub)
            assert values[row] == cur.port(pk).gauge(name, sub)
            n += 1
    assert n == sum(len(e.gauges) for e in cur.ports.values()) > 0
    for name, fam in cur.family_rows().items():
        assert fam.keys[1:3] == list(fam.keys)[1:3]
        assert all(order[pa] == pk for pa, (pk, _) in zip(fam.port_at.tolist(), fam.keys, strict=True))
        assert name


@pytest.mark.parametrize("block", [1, 5])
def test_readings_applied_in_small_chunks_match_the_reference(block, monkeypatch):
    """A poll is applied chunk by chunk (bounded temporaries): chunks of 5 readings cut through
    ports, repeats of a series and new series, and the random runs still agree."""
    monkeypatch.setattr(new, "_CHUNK", 5)
    eq.test_columnar_store_matches_the_reference_on_random_runs(block)


@pytest.mark.parametrize("seed", range(4))
def test_state_image_maps_poll_times_to_and_from_the_time_table(seed, monkeypatch):
    """The state file's image (agent/state.py, version 2) holds poll and history times as
    numbers: read from the time table by index, and turned back into indices of the restoring
    store's table (compacted, and widened to uint32 for odd seeds, on the way). The restored
    store reads as the reference restored from its save, polls on alike, and an image that keeps
    the last two points of history restores those two."""
    monkeypatch.setattr(new._Times, "FLOOR", 8)
    if seed % 2:
        monkeypatch.setattr(new, "_NARROW_TIMES", 3)
    run = Run(seed)
    old, cur = ref.CounterStore(history=3, stale_after=45.0), new.CounterStore(history=3, stale_after=45.0)

    def poll(a, b):
        samples, gauges, clocks, t = run.poll()
        for target in ("t1", "t2"):
            half = [s for i, s in enumerate(samples) if (i % 2 == 0) == (target == "t1")
                    and 1 <= s.bits <= 64 and type(s.value) is int and 0 <= s.value < 1 << 64]  # what a state file holds
            a.update(half, t + (target == "t2"), dict(clocks), gauges, target=target)
            b.update(half, t + (target == "t2"), dict(clocks), gauges, target=target)
        return t

    for _ in range(12):
        now = poll(old, cur)
    fresh_old, fresh_new = ref.CounterStore(history=3, stale_after=45.0), new.CounterStore(history=3, stale_after=45.0)
    assert fresh_old.restore(old.save(), now) == fresh_new.restore_image(cur.image(), now)
    assert_stores_agree(fresh_old, fresh_new, f"seed {seed} restored")
    assert (fresh_new._t.hist_i.dtype == new.np.uint32) == bool(seed % 2)
    for step in range(8):
        last = poll(fresh_old, fresh_new)
        assert_stores_agree(fresh_old, fresh_new, f"seed {seed} step {step} after the restore")
    short = new.CounterStore(history=3, stale_after=45.0)
    assert short.restore_image(fresh_new.image(history=2), last) > 0
    compared = 0
    for pk, e in fresh_new.ports.items():
        for name, sub, se in e.counters():
            got = short.get(pk[0], pk[1], name, sub)
            if got is not None:
                assert (got.history, got.poll_t, got.total) == (se.history[-2:], se.poll_t, se.total)
                compared += 1
    assert compared


def _nan(v: float | None) -> float:
    return float("nan") if v is None else float(v)


@pytest.mark.parametrize("seed", range(8))
def test_port_columns_read_what_each_series_and_gauge_reads(seed):
    """:meth:`CounterStore.columns` (the analyses' whole-array read) gives, per port, what the
    port's own views give: delta, dt, rate, saturated, poll time, increases over 1 to 9
    intervals, moved within the history and gauge values (NaN where the view says None or the
    port lacks the series), on random polls with wraps, resets,
    caps, series that come and go, expiry and a port that is not in the store; through blocks
    kept from earlier polls too, and ``at`` names each port's place in ``column_order()``."""
    np = new.np
    run = Run(seed)
    cur = new.CounterStore(stale_after=45.0)
    names = sorted({(name, sub) for name, _, _, _, subs in eq.SPECS for sub in subs})
    gauge_names = set()
    last, kept = None, 0
    for step in range(25):
        samples, gauges, clocks, t = run.poll()
        cur.update(samples, t, clocks, gauges, target="t1")
        gauge_names.update((g.name, g.sub) for g in gauges)
        if step % 9 == 8:
            cur.expire(t)
        ports = [*sorted(cur.ports), ("nowhere", "1")]
        cols = cur.columns(ports)
        order = cur.column_order()
        assert [order[i] if i >= 0 else ("nowhere", "1") for i in cols.at.tolist()] == ports and cols.at[-1] == -1
        kept += order is last  # the blocks were kept: nothing came, went or moved since
        last = order
        for name, sub in names:
            col = cur.columns(ports).counter(name, sub)
            windows = {k: cols.increases(name, sub, k).tolist() for k in range(1, 10)}
            moved = cols.moved_in_history(name, sub).tolist()
            for i, pk in enumerate(ports):
                se = cur.port(pk).counter(name, sub) if cur.port(pk) is not None else None
                assert moved[i] == (se is not None and se.moved_in_history()), (seed, step, pk, name, sub)
                assert [w[i] for w in windows.values()] == [se.increases(k) if se is not None else 0 for k in windows]
                want = (_nan(se.delta), _nan(se.dt), _nan(se.rate), se.status == new.SATURATED, se.poll_t) if se is not None \
                    else (float("nan"),) * 3 + (False, float("nan"))
                got = (col.delta[i], col.dt[i], col.rate[i], bool(col.saturated[i]), col.poll_t[i])
                assert np.allclose(np.array(got[:3] + got[4:], float), np.array(want[:3] + want[4:], float),
                                   equal_nan=True, rtol=1e-12, atol=0), (seed, step, pk, name, sub)
                assert got[3] == want[3]
        for name, sub in sorted(gauge_names):
            values = cols.gauge(name, sub)
            for i, pk in enumerate(ports):
                e = cur.port(pk)
                assert np.allclose(values[i], _nan(e.gauge(name, sub) if e is not None else None), equal_nan=True)
    assert kept > 0  # some polls read through kept blocks (a steady layout)
