"""fabricmon correlate: storms and deadlocks that span shards, joined from what the shards export.

Each scenario recording is split the way two sharded agents would split it (``shard:
{index, count: 2}``, the same stable hash as the live agent) and cut in the middle of its
episode. Alone, each shard sees part of the tree and names a wrong origin or a storm where
the truth is a deadlock; joined, the correlator must give the truth.
"""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from fabricmon.agent.config import load_text, shard_of
from fabricmon.agent.correlate import CorrelationError, Vector, correlate, parse_vector
from fabricmon.agent.exporter import metrics
from fabricmon.agent.exporter.exposition import render
from fabricmon.agent.replay import replay_recording
from tests.conftest import ROOT, free_port
from tests.prometheus_util import PrometheusServer, have_prometheus

SCEN = ROOT / "tests" / "scenarios"
# scenario -> a poll time in the middle of its episode
CASES = {"nic_pause_storm_arista": 1764691400.0, "nic_pause_storm_sonic": 1764691400.0, "pfc_deadlock": 1764691390.0}


def cut(name: str, until: float, out: Path) -> tuple[Path, list[dict]]:
    """The recording up to ``until`` (header, polls, truth), and its truth lines."""
    src = SCEN / f"{name}.jsonl.gz"
    if not src.exists():
        pytest.skip(f"scenario recording {src} missing (python -m tools.scenarios --out tests/scenarios)")
    with gzip.open(src, "rt") as f:
        lines = [json.loads(line) for line in f]
    with out.open("w") as f:
        for line in lines:
            if line["type"] != "poll" or line["t"] <= until:
                f.write(json.dumps(line) + "\n")
    return out, [line for line in lines if line["type"] == "truth"]


def shard_config(index: int, count: int = 2) -> str:
    return f"shard: {{index: {index}, count: {count}}}\ntargets: []\n"


def exported(path: Path, index: int, count: int = 2) -> tuple[Vector, Vector, list]:
    """(pfc_state, port_info, the shard's own findings) as Prometheus would hold them, with
    the shard's ``instance`` label."""
    result = replay_recording(path, load_text(shard_config(index, count)))
    text, _ = render(metrics.all_families(result.pipeline))
    states: Vector = []
    info: Vector = []
    for fam in text_string_to_metric_families(text.decode()):
        for s in fam.samples:
            lb = {**s.labels, "instance": f"shard{index}"}
            if s.name == "fabricmon_port_pfc_state":
                states.append((lb, s.value))
            elif s.name == "fabricmon_port_info":
                info.append((lb, s.value))
    return states, info, result.pipeline.findings()


def key(kind: str, device: str, port: str, role: str | None) -> tuple:
    return (kind, device, port, role)


def matches_truth(found: list, truth: list[dict]) -> None:
    """Every truth port is found with its role; an origin may be named by either end of its cable."""
    got = {key(f.kind, f.device, f.port, f.role) for f in found}
    for t in truth:
        want = key(t["kind"], t["device"], t["port"], t["role"])
        if t["role"] == "origin":
            origin = next(f for f in found if f.role == "origin")
            ends = {(origin.device, origin.port), tuple(origin.evidence.get("origin_peer", ":").split(":", 1))}
            assert (t["device"], t["port"]) in ends, f"origin {origin.device} {origin.port}, truth {want}"
        else:
            assert want in got, f"{want} not in {sorted(got)}"
    assert all(f.priority == truth[0]["priority"] for f in found)
    assert len({(f.device, f.port) for f in found if f.role != "origin"}) == sum(1 for t in truth if t["role"] != "origin")


@pytest.mark.parametrize("name", sorted(CASES))
def test_correlation_joins_two_shards_into_the_truth(name, tmp_path):
    path, truth = cut(name, CASES[name], tmp_path / f"{name}.jsonl")
    targets = json.loads(path.read_text().splitlines()[0])["targets"]
    assert len({shard_of(t["name"], 2) for t in targets}) == 2, "the scenario must span both shards"
    states, info, alone = [], [], []
    for index in (0, 1):
        s, i, f = exported(path, index)
        states += s
        info += i
        alone.append({key(x.kind, x.device, x.port, x.role) for x in f})
    truth_keys = {key(t["kind"], t["device"], t["port"], t["role"]) for t in truth}
    # Neither shard alone gets the episode right: that is what the correlator is for.
    assert all(not truth_keys <= a for a in alone)
    found = correlate(states, info, t=0.0)
    assert found, "no cross-shard finding"
    assert {f.kind for f in found} == {truth[0]["kind"]}
    matches_truth(found, truth)
    assert all(f.evidence.get("shards") == ["shard0", "shard1"] or f.evidence.get("shard") for f in found)


def test_an_episode_inside_one_shard_is_left_to_that_shard(tmp_path):
    path, _ = cut("pfc_deadlock", CASES["pfc_deadlock"], tmp_path / "dl.jsonl")
    states, info, _ = exported(path, 0, count=1)  # one agent polls everything: one instance
    assert states and correlate(states, info, t=0.0) == []


def test_a_quiet_fabric_gives_nothing(tmp_path):
    path, _ = cut("benign_heavy_load", 1764691400.0, tmp_path / "benign.jsonl")
    states, info = [], []
    for index in (0, 1):
        s, i, _ = exported(path, index)
        states += s
        info += i
    assert correlate(states, info, t=0.0) == []


@pytest.mark.parametrize("payload, why", [
    ({"status": "error", "error": "parse error at char 3"}, "parse error at char 3"),
    ({"status": "success", "data": {"resultType": "matrix", "result": []}}, "instant vector"),
    ({"status": "success", "data": {"resultType": "vector", "result": [{"metric": {}, "value": [1, "x"]}]}}, "malformed sample"),
    (["not", "an", "object"], "not a Prometheus API answer"),
])
def test_bad_answers_name_the_server_and_the_problem(payload, why):
    with pytest.raises(CorrelationError) as exc:
        parse_vector("http://127.0.0.1:9/api/v1/query", "fabricmon_port_info", payload)
    assert "http://127.0.0.1:9/api/v1/query" in str(exc.value) and why in str(exc.value)


def test_unreachable_prometheus_is_a_clear_error():
    port = free_port()
    out = subprocess.run([sys.executable, "-m", "fabricmon.agent", "correlate", "--prometheus", f"http://127.0.0.1:{port}", "--once"],
                         cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 2
    assert f"127.0.0.1:{port}" in out.stderr and "error" in out.stderr


@pytest.mark.prometheus
@pytest.mark.skipif(not have_prometheus(), reason="prometheus not installed (Debian package prometheus)")
def test_correlate_through_a_real_prometheus(tmp_path):
    """Two sharded replays serve /metrics, a real Prometheus scrapes both, and
    ``fabricmon correlate --once`` finds the deadlock that neither shard sees whole."""
    path, truth = cut("pfc_deadlock", CASES["pfc_deadlock"], tmp_path / "dl.jsonl")
    ports = [free_port(), free_port()]
    procs = []
    scrape = [{"job_name": "fabricmon", "static_configs": [{"targets": [f"127.0.0.1:{p}" for p in ports]}]}]
    with PrometheusServer(scrape) as prom:
        try:
            for index, port in enumerate(ports):
                cfg = tmp_path / f"shard{index}.yml"
                cfg.write_text(shard_config(index))
                procs.append(subprocess.Popen(
                    [sys.executable, "-m", "fabricmon.agent", "replay", "--fast", "--quiet", "--config.file", str(cfg),
                     "--serve", f"127.0.0.1:{port}", str(path)],
                    cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True))
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                series = prom.query("count by (instance) (fabricmon_port_pfc_state == 2)")
                if len(series) == 2:
                    break
                time.sleep(0.5)
            assert len(series) == 2, "Prometheus never saw both shards' PFC states"
            time.sleep(4)  # a few scrapes of the settled state: the window below is then covered
            out = subprocess.run([sys.executable, "-m", "fabricmon.agent", "correlate", "--prometheus", prom.url, "--once", "--window", "3s"],
                                 cwd=ROOT, capture_output=True, text=True, timeout=60)
        finally:
            for p in procs:
                p.terminate()
            for p in procs:
                p.wait(10)
    assert out.returncode == 0, out.stderr
    found = [json.loads(line) for line in out.stdout.splitlines()]
    assert {(f["kind"], f["device"], f["port"], f["role"]) for f in found} == {
        (t["kind"], t["device"], t["port"], t["role"]) for t in truth}
    assert all(f["evidence"]["shards"] == sorted(f"127.0.0.1:{p}" for p in ports) for f in found)


def test_served_state_keeps_the_last_good_result_when_prometheus_fails(tmp_path):
    """The service exports its findings and its own health; a failed query is counted,
    marks it down, and leaves the last good findings visible with their age."""
    import asyncio

    from fabricmon.agent.correlate import Correlator

    path, _ = cut("pfc_deadlock", CASES["pfc_deadlock"], tmp_path / "dl.jsonl")
    states, info = [], []
    for index in (0, 1):
        s, i, _ = exported(path, index)
        states += s
        info += i
    c = Correlator(f"http://127.0.0.1:{free_port()}")
    c.findings, c.up, c.last_success = correlate(states, info, t=0.0), True, 1234.0
    assert asyncio.run(c.run_once()) == c.findings and len(c.findings) == 4
    assert c.up is False and c.errors == 1 and c.runs == 1 and "127.0.0.1" in (c.last_error or "")
    body = c.exposition().decode()
    families = {f.name: f for f in text_string_to_metric_families(body)}
    assert families["fabricmon_correlation_up"].samples[0].value == 0
    assert families["fabricmon_correlation_last_success_timestamp_seconds"].samples[0].value == 1234.0
    active = families["fabricmon_cross_shard_finding_active"].samples
    assert {(s.labels["kind"], s.labels["device"], s.labels["port"], s.labels["role"]) for s in active} == {
        (f.kind, f.device, f.port, f.role) for f in c.findings}
