"""The detector's evaluation on every scenario corpus, recording by recording and corpus by
corpus, against the floors of the detector issues (agent/evaluate.py DEFAULT_FLOORS: precision
and recall >= 0.95 per kind, no false deadlock, storms and deadlocks within 2 polls,
hardware-counted loss within 1 poll, storm origin top-1 >= 0.9, findings covering >= 0.8 of a
fault's span) and, on the hard negatives, zero findings.

What today's detector cannot do yet is listed in one place, ``KNOWN_FAILURES_ISSUE_27``: the
capability scenarios and hard negatives of issue 27 were written from documentation before the
rules change (tools/scenarios/capabilities.py, negatives.py), and the stalled-port truth moved
to ``credit_deadlock``/``stalled`` (INTERFACES section 4). Each listed case must fail now; one
that starts passing fails its test until it is removed from the list, so the list is the
worklist and nothing is skipped.
"""

from __future__ import annotations

import json
import subprocess
import sys
from functools import cache
from pathlib import Path

import pytest

from fabricmon.agent.evaluate import EvalReport, config_beside, evaluate, recording_paths
from fabricmon.core.model import KINDS
from tests.conftest import ROOT

CORPORA: dict[str, Path] = {
    "scenarios": ROOT / "tests" / "scenarios",
    "scenarios_physics": ROOT / "tests" / "scenarios_physics",
    "scenarios_audit": ROOT / "tests" / "scenarios_audit",
    "scenarios_negatives": ROOT / "tests" / "scenarios_negatives",
    "scenarios_capabilities": ROOT / "tests" / "scenarios_capabilities",
    "scenarios_gnmi": ROOT / "tests" / "scenarios_gnmi",  # SONiC seen only over gNMI (tools/scenarios/gnmi.py)
    "demo": ROOT / "agent" / "demo",
}
# Hard negatives carry no truth: every finding on them is false (issue 27 item 2).
NEGATIVE_FLOORS = {"max_false": dict.fromkeys(KINDS, 0)}

# Issue 27: what today's detector fails, by "<corpus>/<recording>" (and "<corpus>" for the
# corpus as a whole), with what it does wrong. The engineer who changes the rules empties it.
KNOWN_FAILURES_ISSUE_27: dict[str, str] = {
    # Checks of a recording beyond its truth: "<corpus>/<recording>#<check>".
}


@cache
def _scored(path: Path) -> tuple[tuple, tuple, float, float]:
    """(findings, truth, poll interval, last poll time) of one replay, each recording replayed once
    per session with its own config beside it (as ``fabricmon eval`` does)."""
    from fabricmon.agent.evaluate import _config_for
    from fabricmon.agent.replay import replay_recording

    res = replay_recording(path, _config_for(path, None))
    return tuple(res.findings), tuple(res.truth), float(res.poll_interval or 10.0), res.pipeline.clock


def _report(paths: list[Path]) -> EvalReport:
    runs = {str(p): _scored(p) for p in paths}
    return evaluate({k: v[0] for k, v in runs.items()}, {k: v[1] for k, v in runs.items()},
                    {k: v[2] for k, v in runs.items()}, 2.0, {k: v[3] for k, v in runs.items()})


def _floors(corpus: str) -> dict | None:
    return NEGATIVE_FLOORS if corpus == "scenarios_negatives" else None


def _cases() -> list[tuple[str, Path]]:
    return [(corpus, p) for corpus, folder in CORPORA.items() for p in recording_paths([folder])]


def _check(key: str, report: EvalReport, floors: dict | None) -> None:
    fails = report.failures(floors)
    if key in KNOWN_FAILURES_ISSUE_27:
        assert fails, f"{key} now meets its floors: remove it from KNOWN_FAILURES_ISSUE_27 (issue 27)"
    else:
        assert not fails, f"{key}: {'; '.join(fails)}\nfalse: {report.false[:10]}\nmissed: {report.misses[:10]}"


@pytest.mark.parametrize(("corpus", "path"), _cases(), ids=lambda x: x if isinstance(x, str) else x.name.split(".")[0])
def test_recording_meets_its_floors(corpus: str, path: Path) -> None:
    _check(f"{corpus}/{path.name.split('.')[0]}", _report([path]), _floors(corpus))


@pytest.mark.parametrize("corpus", list(CORPORA))
def test_corpus_meets_its_floors(corpus: str) -> None:
    paths = recording_paths([CORPORA[corpus]])
    assert paths, corpus
    _check(corpus, _report(paths), _floors(corpus))


def test_known_failures_name_real_cases() -> None:
    """Every entry of the list is a corpus or a recording of one: a renamed scenario cannot leave
    a stale entry behind (which would hide nothing, but would lie about the worklist)."""
    keys = set(CORPORA) | {f"{c}/{p.name.split('.')[0]}" for c, p in _cases()}
    named = {k.split("#", 1)[0] for k in KNOWN_FAILURES_ISSUE_27}
    assert named <= keys, named - keys


def test_nvue_carrier_transition_reads_as_one_down() -> None:
    """A host reboot seen over NVUE: the poll that shows the link down has one more carrier
    transition (the down), the poll that shows it up one more (the up). The link went down once,
    and it did so in the first of those polls: the store's ``link_downed`` must rise by 1 there
    and by 0 when the link comes back (tools/scenarios/capabilities.py nvue_peer_reboot: Linux
    ``carrier_changes`` counts both directions)."""
    import gzip

    from fabricmon.agent.recording import poll_from_line
    from fabricmon.agent.replay import replay_pipeline

    path = CORPORA["scenarios_capabilities"] / "nvue_peer_reboot.jsonl.gz"
    with gzip.open(path, "rt") as fh:
        lines = [json.loads(line) for line in fh]
    (down,) = [t for t in lines if t["type"] == "truth"]
    pipe = replay_pipeline(lines[0], path)
    deltas: dict[float, float | None] = {}
    for i, line in enumerate(lines):
        if line["type"] == "poll":
            pipe.ingest(poll_from_line(path, i, line))
            if line["target"] == down["device"]:
                deltas[line["t"]] = pipe.store.delta(down["device"], down["port"], "link_downed")
    at_down, at_up = deltas[down["start"]], deltas[down["end"]]
    assert pipe.store.gauge(down["device"], down["port"], "link_up") == 1.0
    fails = at_down != 1.0 or at_up != 0.0
    key = "scenarios_capabilities/nvue_peer_reboot#one_down_per_down_transition"
    if key in KNOWN_FAILURES_ISSUE_27:
        assert fails, f"{key} now holds: remove it from KNOWN_FAILURES_ISSUE_27 (issue 27)"
    else:
        assert not fails, (at_down, at_up)


def test_fabricmon_eval_command_agrees_with_the_floors() -> None:
    """``fabricmon eval`` end to end: the audit corpus passes (exit 0, PASS); on two capability
    recordings ``--json`` reports the same figures and verdict as the in-process evaluation, and
    the exit status follows the verdict."""
    ok = subprocess.run([sys.executable, "-m", "fabricmon.agent", "--log.level", "error", "eval",
                         str(CORPORA["scenarios_audit"])], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert ok.returncode == 0 and ok.stdout.rstrip().endswith("PASS"), ok.stdout + ok.stderr[-2000:]
    assert "misconfig" in ok.stdout
    some = [CORPORA["scenarios_capabilities"] / f"{n}.jsonl.gz" for n in ("wd_counters_frozen", "ib_width_degraded")]
    r = subprocess.run([sys.executable, "-m", "fabricmon.agent", "--log.level", "error", "eval", "--json",
                        *map(str, some)], cwd=ROOT, capture_output=True, text=True, timeout=600)
    got = json.loads(r.stdout)
    want = _report(some).to_json()
    assert r.returncode == (0 if want["pass"] else 1), r.stderr[-2000:]
    assert got["pass"] is want["pass"] and got["failures"] == want["failures"]
    assert {k: v["recall"] for k, v in got["kinds"].items()} == {k: v["recall"] for k, v in want["kinds"].items()}
    assert len(got["false_findings"]) == len(want["false_findings"]) and got["confusion"] == want["confusion"]


def test_a_physics_recording_s_own_config_is_what_the_generator_writes():
    """Configuration the devices do not send (a non-identity priority map) sits beside the
    recording as ``<name>.yml``, where ``fabricmon eval`` reads it; generated, never hand-edited."""
    from tools.scenarios import DEFAULT_SEED, PHYSICS

    corpus = ROOT / "tests" / "scenarios_physics"
    expected = {}
    for i, (name, build) in enumerate(PHYSICS.items()):
        if build(DEFAULT_SEED + i).config:
            expected[f"{name}.yml"] = build(DEFAULT_SEED + i).config
    assert expected, "the non-identity priority map scenario states its fabric: section"
    assert {p.name: p.read_text() for p in corpus.glob("*.yml")} == expected
    assert config_beside(corpus / "nonidentity_priority_map.jsonl.gz").name == "nonidentity_priority_map.yml"


def test_the_priority_map_decides_the_nonidentity_recording():
    """Without its fabric: section the same recording is read with the identity map: the
    lossless drops in TC 5 are missed and the lossy tail drops in TC 3 are taken for loss.
    That is the physics the scenario states, and what the config beside it is for."""
    from fabricmon.agent.replay import replay_recording

    path = ROOT / "tests" / "scenarios_physics" / "nonidentity_priority_map.jsonl.gz"
    res = replay_recording(path, None)
    report = evaluate({path.name: list(res.findings)}, {path.name: list(res.truth)}, {path.name: 10.0})
    assert report.kinds["packet_loss"].recall < 1.0 and report.kinds["packet_loss"].false_findings > 0
