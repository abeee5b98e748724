"""No orphan counters: everything a collector emits is read by a rule or marked informational.

A counter a collector fills but no rule reads is a silent gap: the Onyx profile once filed
ingress priority-group drops under the egress queue counter with a ``pg3`` sub-label, and the
lossless-loss rule, which looks at integer queues, never saw them. This test walks what the
collectors can emit (every column of every shipped SNMP profile, and the parse output of every
``collectors/*/testcases/*/expected.txt``) and asks, per (counter, sub-label shape), whether a
rule reads it: the rule's own ``reads`` declaration when it has one, otherwise the
vocabulary's ``read_by`` attribute; drop counters count as read for the shapes
:func:`fabricmon.core.vocabulary.lossless_priorities_hit` can map to a priority.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from fabricmon.agent.config import load_text
from fabricmon.agent.detector.rules import RULES
from fabricmon.collectors.snmp.profiles import load_profiles
from fabricmon.core.vocabulary import (
    AGGREGATE,
    COUNTERS,
    GAUGES,
    CounterDef,
    DropClass,
    GaugeDef,
    PriorityMap,
    lossless_drop_counters,
    lossless_priorities_hit,
)

ROOT = Path(__file__).resolve().parent.parent
MAPPED_LABELS = ("priority", "queue", "pg", "traffic_class")
Emitted = dict[tuple[str, str], set[str]]  # (name, shape) -> where it came from


def shape(defn: CounterDef | GaugeDef, sub: tuple[str, ...]) -> str:
    """The sub-label shape: integers as ``N``, the port aggregate as ``all``, a missing class as
    ``(empty)``; a label a drop class filters on (WJH group) as ``buffer`` or ``other``; the rest ``*``."""
    only = dict(defn.drop.only) if isinstance(defn, CounterDef) and defn.drop else {}
    parts = []
    for label, value in zip(defn.labels, sub, strict=False):
        if label in only:
            parts.append(f"{label}={only[label] if value.lower() == only[label] else 'other'}")
        elif label not in MAPPED_LABELS:
            parts.append(f"{label}=*")
        elif value == AGGREGATE:
            parts.append(f"{label}={AGGREGATE}")
        else:
            parts.append(f"{label}={re.sub(r'[0-9]+', 'N', value) or '(empty)'}")
    return ",".join(parts)


def informational_shape(defn: CounterDef | GaugeDef, shp: str) -> bool:
    """Rows a drop class leaves out (``only``), and an ``aggregate_informational`` port total."""
    if not isinstance(defn, CounterDef):
        return False
    if defn.drop is not None and "=other" in shp:
        return True
    return defn.aggregate_informational and f"={AGGREGATE}" in shp


def read_shapes(defn: CounterDef | GaugeDef) -> set[str]:
    """Shapes a reading rule understands: integer classes; for a drop counter also the port
    aggregate and a row without a class (both map to every priority)."""
    drop = defn.drop if isinstance(defn, CounterDef) else None
    only = dict(drop.only) if drop else {}
    values = {"N", AGGREGATE, "(empty)"} if drop and drop.label else {"N"}
    out = {""}
    for lb in defn.labels:
        choices = [only[lb]] if lb in only else (sorted(values) if drop and lb == drop.label else
                                                 (["N"] if lb in MAPPED_LABELS else ["*"]))
        out = {f"{head},{lb}={v}" if head else f"{lb}={v}" for head in out for v in choices}
    return out


def readers(name: str, defn: CounterDef | GaugeDef) -> set[str]:
    """Rules declaring ``reads`` that name the counter, else the vocabulary's ``read_by``."""
    declared = {r for r, cls in RULES.items() if name in getattr(cls, "reads", ())}
    return declared or set(defn.read_by)


def emissions_from_profiles() -> Emitted:
    out: Emitted = {}
    for prof in load_profiles().values():
        for table in prof.tables:
            roles = {p.role for p in table.index}
            fmts = {p.role: p.fmt for p in table.index}
            for col in table.columns:
                defn = COUNTERS[col.name] if col.kind == "counter" else GAUGES[col.name]
                fixed = dict(col.fixed)
                sub = []
                for label in defn.labels:
                    if label in fixed:
                        sub.append(str(fixed[label]))
                    elif label in roles:
                        sub.append(fmts[label].format(0))
                    else:
                        sub.append("")
                out.setdefault((col.name, shape(defn, tuple(sub))), set()).add(f"profile {prof.name} {table.name} column {col.number}")
    return out


LINE = re.compile(r"^(sample|gauge) ([^|]*)\|([^|]*)\|([^|]*)\|(\S*) ")


def emissions_from_testcases() -> Emitted:
    out: Emitted = {}
    for path in sorted(ROOT.glob("collectors/*/testcases/*/expected.txt")):
        for line in path.read_text().splitlines():
            m = LINE.match(line)
            if not m:
                continue
            kind, name, raw_sub = m.group(1), m.group(4), m.group(5)
            defn = COUNTERS.get(name) if kind == "sample" else GAUGES.get(name)
            assert defn is not None, f"{path}: {name} is not in the vocabulary"
            sub = tuple(raw_sub.split(",")) if defn.labels else ()
            out.setdefault((name, shape(defn, sub)), set()).add(str(path.relative_to(ROOT)))
    return out


def orphans(emitted: Emitted) -> list[str]:
    bad = []
    for (name, shp), where in sorted(emitted.items()):
        defn = COUNTERS.get(name) or GAUGES[name]
        if defn.informational or informational_shape(defn, shp):
            continue
        if not readers(name, defn):
            bad.append(f"{name}{{{shp}}} is read by no rule (from {sorted(where)[0]})")
        elif shp not in read_shapes(defn):
            bad.append(f"{name}{{{shp}}}: its rules read only {sorted(read_shapes(defn))} (from {sorted(where)[0]})")
    return bad


@pytest.mark.parametrize("source", ["profiles", "testcases"])
def test_every_emitted_counter_is_read_or_informational(source: str) -> None:
    emitted = emissions_from_profiles() if source == "profiles" else emissions_from_testcases()
    assert len(emitted) > 20, f"too few emissions found in the {source}: the walk is broken"
    assert orphans(emitted) == []


def test_vocabulary_entries_say_who_reads_them() -> None:
    for name, defn in [*COUNTERS.items(), *GAUGES.items()]:
        assert bool(defn.read_by) != defn.informational, f"{name}: give read_by or informational, not both or neither"
        assert set(defn.read_by) <= set(RULES), f"{name}: read_by names unknown rules {set(defn.read_by) - set(RULES)}"


def test_the_old_onyx_pg_mapping_would_be_caught() -> None:
    """The shape that hid ingress drops (egress queue counter, ``pg3`` sub-label) is an orphan."""
    found = orphans({("queue_no_buffer_drops", "queue=pgN"): {"onyx.yaml mlnxQosPgTable column 6"}})
    assert found and "queue=pgN" in found[0]


def test_lossless_drop_counters_cover_every_stage_the_issue_names() -> None:
    names = {c.name for c in lossless_drop_counters()}
    assert {"pg_no_buffer_drops", "pg_shared_buffer_drops", "ingress_queue_drops", "queue_drops", "queue_no_buffer_drops",
            "ingress_buffer_overflow_drops", "wjh_drops", "rx_discards_phy", "rx_out_of_buffer"} <= names
    assert {c.drop.stage for c in lossless_drop_counters()} == {"ingress_pg", "ingress_queue", "ingress_port",
                                                                "egress_queue", "nic", "wjh"}
    with pytest.raises(ValueError, match="stage"):
        DropClass("egress", "queue")


def test_fabric_section_decides_which_drops_are_lossless_loss() -> None:
    """``fabric:`` priority 3 -> queue 5, PG 2: queue 5 and PG 2 drops are priority-3 loss,
    queue 3 drops are a lossy queue's normal drops; a port total may be on priority 3."""
    pmap = load_text("fabric:\n  lossless_priorities: [3]\n  priority_to_queue: {3: 5, 5: 3}\n"
                     "  priority_to_pg: {3: 2}\n").config.fabric.priority_map()
    assert pmap == PriorityMap((3,), {3: 5, 5: 3}, {3: 2})
    hit = lossless_priorities_hit
    assert hit(COUNTERS["queue_no_buffer_drops"], ("5",), pmap) == (3,)
    assert hit(COUNTERS["queue_drops"], ("3",), pmap) == ()
    assert hit(COUNTERS["pg_no_buffer_drops"], (2,), pmap) == (3,) and hit(COUNTERS["pg_no_buffer_drops"], (3,), pmap) == ()
    assert hit(COUNTERS["wjh_drops"], ("buffer", "503", "5"), pmap) == (3,)
    assert hit(COUNTERS["wjh_drops"], ("l2", "209", ""), pmap) == ()  # not a buffer drop
    assert hit(COUNTERS["wjh_drops"], ("buffer", "504", ""), pmap) == (3,)  # no class given: may be lossless
    assert hit(COUNTERS["ingress_buffer_overflow_drops"], (), pmap) == (3,)
    assert hit(COUNTERS["queue_drops"], (AGGREGATE,), pmap) == (3,)
    assert hit(COUNTERS["rx_bytes"], (), pmap) == ()
