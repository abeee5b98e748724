"""Telegraf-style collector test cases: ``collectors/<source>/testcases/<case>/``.

Each case folder holds ``payload.json`` (a raw payload exactly as a recording's poll line
carries it), ``target.yaml`` (``name``, ``source`` and parse options, as a recording header
entry) and ``expected.txt`` (the canonical dump of the parse result below). Follow-up polls
of the same target, ``payload.2.json``, ``payload.3.json``..., with ``expected.2.txt``...,
are parsed after it, each given the parse state the poll before returned, as the pipeline
does (a perfquery poll without ibnetdiscover output names its ports from the topology carried
in that state). The runner in ``tests/test_collector_testcases.py`` diffs every poll of every case;
``pytest --update-golden`` rewrites the expected files after a deliberate change.
"""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from fabricmon import collectors
from fabricmon.core.model import ParseResult, TargetSpec

ROOT = Path(__file__).resolve().parent


def dump(result: ParseResult) -> str:
    """A stable, diffable text form of a parse result: one sorted line per fact."""

    def fmt(v: object) -> str:
        if isinstance(v, float):
            return repr(round(v, 9))
        return str(v)

    lines: list[str] = []
    for s in result.counters:
        sub = ",".join(fmt(x) for x in s.sub)
        lines.append(f"sample {s.device}|{s.port}|{s.counter}|{sub} value={fmt(s.value)} bits={s.bits} "
                     f"sat={int(s.saturating)} scale={fmt(s.scale)}")
    for g in result.gauges:
        sub = ",".join(fmt(x) for x in g.sub)
        lines.append(f"gauge {g.device}|{g.port}|{g.name}|{sub} value={fmt(g.value)}")
    for d in result.devices:
        lines.append(f"device {d.name} kind={d.kind} guid={d.guid} model={d.model} description={d.description}")
    for p in result.ports:
        lines.append(f"port {p.device}|{p.port} guid={p.guid} lid={p.lid} alias={p.alias} label={p.label}")
    if result.links is not None:
        lines.append(f"links {len(result.links)}")
        for ln in result.links:
            lines.append(f"link {ln.device}|{ln.port} -> {ln.peer_device}|{ln.peer_port}")
    for dev, clock in result.clocks.items():
        lines.append(f"clock {dev} {fmt(clock)}")
    for w in result.warnings:
        lines.append(f"warning {w}")
    if result.inventory is not None:
        lines.append(f"jobs {len(result.inventory)}")
        for j in result.inventory:
            labels = ",".join(f"{k}={v}" for k, v in j.labels)
            lines.append(f"job {j.id} start={fmt(j.start)} hosts={','.join(j.hosts)} aliases={','.join(j.aliases)} labels={labels}")
    return "\n".join(sorted(lines)) + "\n"


def cases() -> list[Path]:
    return sorted(p for p in ROOT.glob("*/testcases/*") if (p / "payload.json").exists())


def polls(case: Path) -> list[tuple[Path, Path]]:
    """(payload, expected) files of a case's polls, in poll order."""
    follow = sorted((int(p.name.split(".")[1]), p) for p in case.glob("payload.*.json") if p.name.split(".")[1].isdigit())
    return [(case / "payload.json", case / "expected.txt"), *((p, case / f"expected.{n}.txt") for n, p in follow)]


def target_spec(case: Path) -> TargetSpec:
    """The case's target, as a recording header names it."""
    return TargetSpec.from_header(yaml.safe_load((case / "target.yaml").read_text()))


def _parse_in_turn(case: Path, payloads: list[Path]) -> list[str]:
    """Dumps of ``payloads`` parsed in turn, each parse given the state the one before returned."""
    spec = target_spec(case)
    cls = collectors.get(spec.source)
    state = cls.new_state()
    dumps = []
    for p in payloads:
        result, state = cls.parse_poll(json.loads(p.read_text()), spec, state)
        dumps.append(dump(result))
    return dumps


def run_case(case: Path) -> list[tuple[Path, str]]:
    """(expected file, dump) of each poll of the case, parsed in turn (the state carried along)."""
    pairs = polls(case)
    return list(zip((e for _, e in pairs), _parse_in_turn(case, [p for p, _ in pairs]), strict=True))


def repeat_case(case: Path) -> tuple[str, str]:
    """Dumps of the case's first payload parsed twice in turn (the second given the first's state)."""
    first, again = _parse_in_turn(case, [case / "payload.json"] * 2)
    return first, again
