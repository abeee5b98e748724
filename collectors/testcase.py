"""Telegraf-style collector test cases: ``collectors/<source>/testcases/<case>/``.

Each case folder holds ``payload.json`` (a raw payload exactly as a recording's poll line
carries it), ``target.yaml`` (``name``, ``source`` and parse options, as a recording header
entry) and ``expected.txt`` (the canonical dump of the parse result below). The runner in
``tests/test_collector_testcases.py`` diffs every case; ``pytest --update-golden``
rewrites the expected files after a deliberate change.
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
    for s in result.samples:
        sub = ",".join(fmt(x) for x in s.sub)
        lines.append(f"sample {s.device}|{s.port}|{s.counter}|{sub} value={fmt(s.value)} bits={s.bits} sat={int(s.saturating)} scale={fmt(s.scale)}")
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
    return "\n".join(sorted(lines)) + "\n"


def cases() -> list[Path]:
    return sorted(p for p in ROOT.glob("*/testcases/*") if (p / "payload.json").exists())


def run_case(case: Path) -> str:
    spec_entry = yaml.safe_load((case / "target.yaml").read_text())
    spec = TargetSpec.from_header(spec_entry)
    payload = json.loads((case / "payload.json").read_text())
    cls = collectors.get(spec.source)
    return dump(cls.parse(payload, spec, {}))
