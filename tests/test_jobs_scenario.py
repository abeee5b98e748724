"""The corpus scenario ``storm_two_of_three_jobs``: a NIC pause storm touches two of three running jobs.

Its truth says which (the storm origin's truth line carries ``jobs`` and ``jobs_clear``). On it:
the findings name the affected jobs and not the other, ``fabricmon job`` names the affected
jobs and clears the unaffected one, the finding pages list the jobs, the metrics carry the
counts while the storm is on, and a recording made from the replay replays to the same.
"""

from __future__ import annotations

import gzip
import json
import logging
import shutil
import subprocess

import pytest

from fabricmon.agent.cli import main
from fabricmon.agent.detector import rules as rules_mod
from fabricmon.agent.exporter.server import Exporter
from fabricmon.agent.pipeline import Pipeline
from fabricmon.agent.recording import RecordingWriter, read_polls
from fabricmon.agent.replay import replay_pipeline, replay_recording, specs_from_header
from fabricmon.agent.web.ids import finding_id
from tests.conftest import ROOT
from tests.test_browser import serve

REC = ROOT / "tests" / "scenarios" / "storm_two_of_three_jobs.jsonl.gz"


@pytest.fixture(scope="module")
def truth() -> dict:
    with gzip.open(REC, "rt") as fh:
        lines = [json.loads(x) for x in fh]
    return next(t for t in lines if t["type"] == "truth" and t["role"] == "origin")


@pytest.fixture(scope="module")
def mid_storm() -> Pipeline:
    """The pipeline half-way through the storm (its findings active)."""
    header, polls, _ = read_polls(REC)
    p = replay_pipeline(header, REC)
    t_mid = polls[0].t + 170.0  # the storm runs from poll 10 to poll 24, 10 s apart
    for poll in polls:
        if poll.t > t_mid:
            break
        p.ingest(poll)
    assert p.findings(), "no finding is active half-way through the storm"
    return p


def test_the_storm_findings_name_the_affected_jobs_only(truth) -> None:
    findings = replay_recording(REC).findings
    storm = [f for f in findings if f.kind == "pfc_storm"]
    origin = next(f for f in storm if f.role == "origin" and {f.device, f.peer_device} & {truth["device"], truth["peer_device"]})
    assert origin.evidence["jobs"] == truth["jobs"] == ["48211", "48212"]
    assert origin.evidence["jobs_reach"].startswith("PFC storm origin")
    for f in storm:  # its victims share the storm's reach; nothing lists the job on leaf03
        assert not set(truth["jobs_clear"]) & set(f.evidence["jobs"]), f


def _job(capsys, *argv: str) -> tuple[int, str]:
    code = main(["job", *argv, "--recording", str(REC)])
    return code, capsys.readouterr().out


def test_fabricmon_job_names_the_affected_jobs_and_clears_the_other(capsys) -> None:
    levels = {n: logging.getLogger(n).level for n in ("fabricmon", "fabricmon.agent.pipeline")}
    for jid in ("48211", "48212"):
        code, out = _job(capsys, jid)
        assert code == 1, out
        verdict = out.splitlines()[1]
        assert verdict.startswith("verdict: pfc_storm (critical)") and "touches" in verdict and "ended" in verdict
    code, out = _job(capsys, "48213")
    assert code == 0
    assert out.splitlines()[1].startswith("verdict: no fabric finding touches this job's 3 hosts in the last")
    code, out = _job(capsys, "48212", "--json")
    view = json.loads(out)
    assert view["job"] == "48212" and view["hosts"] == 3 and not view["unmatched"]
    assert {r["kind"] for r in view["findings"]} == {"pfc_storm"}
    assert {h for r in view["findings"] for h in r["job_hosts"]} == {"gpu06"}  # the host leaf02 kept paused
    placed = {h["host"]: [(n["switch_device"], n["switch_port"]) for n in h["nics"]] for h in view["placement"]}
    assert placed == {"gpu01": [("leaf01", "Ethernet1")], "gpu05": [("leaf02", "Ethernet2")], "gpu06": [("leaf02", "Ethernet3")]}
    assert main(["job", "99999", "--recording", str(REC)]) == 2
    assert {n: logging.getLogger(n).level for n in levels} == levels  # in-process: the loggers are left as they were


def test_metrics_carry_the_counts_while_the_storm_is_on(mid_storm) -> None:
    body = Exporter(mid_storm).render_now().text.decode()
    counts = [ln for ln in body.splitlines() if ln.startswith("fabricmon_finding_jobs_affected{")]
    assert 'fabricmon_finding_jobs_affected{kind="pfc_storm",device="gpu03",port="eth0"} 2' in counts, counts
    info = [ln for ln in body.splitlines() if ln.startswith("fabricmon_finding_job_info{")]
    assert {ln.split('job="')[1].split('"')[0] for ln in info} == {"48211", "48212"}
    assert 'fabricmon_jobs_running{target="slurmctl"} 3' in body and "fabricmon_job_hosts_unmatched 0" in body
    promtool = shutil.which("promtool")
    if promtool is not None:  # scripts/test installs it; the other assertions stand without it
        r = subprocess.run([promtool, "check", "metrics"], input=body, capture_output=True, text=True)
        assert r.returncode == 0, r.stdout + r.stderr


async def test_the_finding_page_lists_the_jobs_and_the_job_page_says_why(mid_storm) -> None:
    ex = Exporter(mid_storm)
    ex.render_now()
    origin = next(f for f in mid_storm.findings() if f.role == "origin")
    page = (await ex.web.finding(finding_id(origin))).decode()
    assert "<a href='/jobs/48211'>48211</a>, <a href='/jobs/48212'>48212</a>" in page and "48213" not in page
    job = (await ex.web.job("48212")).decode()
    assert "pfc_storm (critical) at gpu03 eth0 priority 3 touches 1 of this job&#x27;s 3 hosts" in job
    assert "still active" in job and 'data-node="sw:leaf02"' in job
    clear = (await ex.web.job("48213")).decode()
    assert "no fabric finding touches this job&#x27;s 3 hosts" in clear
    assert await ex.web.job("nope") is None


def test_a_recording_of_the_replay_replays_to_the_same(tmp_path) -> None:
    header, polls, _ = read_polls(REC)
    out = tmp_path / "again.jsonl.gz"
    specs = specs_from_header(header, REC)
    p = Pipeline(specs, rules_mod.build(None), recorder=RecordingWriter(out, specs, "re-recorded"))
    for poll in polls:
        p.ingest(poll)
    p.recorder.close()  # type: ignore[union-attr]
    first = [f.to_json() for f in replay_recording(REC).findings]
    again = [f.to_json() for f in replay_recording(out).findings]
    assert again == first and any(f["evidence"].get("jobs") for f in first)


def test_fabricmon_job_asks_a_running_agent(capsys) -> None:
    """``fabricmon job --url`` against ``fabricmon replay --serve``: the same view over HTTP."""
    with serve(REC) as base:
        assert main(["job", "48212", "--url", base, "--json"]) == 1
        view = json.loads(capsys.readouterr().out)
        assert view["job"] == "48212" and view["findings"][0]["kind"] == "pfc_storm"
        assert main(["job", "48213", "--url", base]) == 0
        assert "no fabric finding touches this job's 3 hosts" in capsys.readouterr().out
        assert main(["job", "nope", "--url", base]) == 2
        assert "HTTP 404" in capsys.readouterr().err
