"""The Slurm sources' fetch: slurmrestd over HTTP (a stand-in with its JWT headers), and how a
failing or foreign ``squeue`` is reported. The real Slurm is in tests/test_slurm_real.py."""

from __future__ import annotations

import json
import stat

import pytest

from fabricmon.collectors.base import FetchError
from fabricmon.collectors.slurm import SlurmCollector, SlurmOptions, SlurmRestCollector, SlurmRestOptions
from tests.http_standins import Reply, StandIn, fetch_once

JWT = "eyJhbGciOiJIUzI1NiJ9.slurm-test-token"
JOBS = {
    "meta": {"plugin": {"data_parser": "data_parser/v0.0.40"}, "slurm": {"release": "23.11.4"}},
    "errors": [], "warnings": [],
    "jobs": [
        {"job_id": 48213, "job_state": ["RUNNING"], "nodes": "gpu[001-002]", "name": "llama-70b", "user_name": "alice",
         "partition": "gpu", "command": "/home/alice/train.sh", "environment": {"set": False},
         "start_time": {"set": True, "infinite": False, "number": 1764684000}},
        {"job_id": 48214, "job_state": ["PENDING"], "nodes": "", "name": "queued", "user_name": "bob"},
    ],
}


async def test_slurmrestd_jobs_with_its_jwt_headers() -> None:
    async with StandIn({"/slurm/v0.0.40/jobs": Reply(JOBS)}) as srv:
        c = SlurmRestCollector("rest", "127.0.0.1", SlurmRestOptions(scheme="http", port=srv.port, user_name="fabricmon",
                                                                      token=JWT))
        payload = await fetch_once(c)
    assert srv.seen[0].headers["X-SLURM-USER-NAME"] == "fabricmon" and srv.seen[0].headers["X-SLURM-USER-TOKEN"] == JWT
    (resp,) = payload["responses"]
    assert resp["path"] == "/slurm/v0.0.40/jobs" and resp["status"] == 200
    assert [j["job_id"] for j in resp["body"]["jobs"]] == [48213]  # only running jobs are kept
    assert set(resp["body"]["jobs"][0]) <= {"job_id", "job_state", "nodes", "start_time"}  # no name, user, command
    assert JWT not in json.dumps(payload)
    result, _ = SlurmRestCollector.parse_poll(payload, c.spec(), None)
    assert [(j.id, j.hosts, j.start) for j in result.inventory] == [("48213", ("gpu001", "gpu002"), 1764684000.0)]


async def test_slurmrestd_keeps_the_enabled_labels_only() -> None:
    async with StandIn({"/slurm/v0.0.41/jobs": Reply(JOBS)}) as srv:
        c = SlurmRestCollector("rest", "127.0.0.1", SlurmRestOptions(scheme="http", port=srv.port, user_name="u", token=JWT,
                                                                      api_version="v0.0.41", labels=["user"]))
        payload = await fetch_once(c)
    job = payload["responses"][0]["body"]["jobs"][0]
    assert job["user_name"] == "alice" and "name" not in job
    result, _ = SlurmRestCollector.parse_poll(payload, c.spec(), None)
    assert result.inventory[0].labels == (("user", "alice"),)


@pytest.mark.parametrize(("reply", "reason"), [
    (Reply({"errors": [{"error": "Authentication failure"}]}, status=401), "auth"),
    (Reply({"kind": "not job info"}), "protocol"),
    (Reply("<html>proxy error</html>", content_type="text/html"), "protocol"),
])
async def test_slurmrestd_failures_name_their_reason(reply, reason) -> None:
    async with StandIn({"/slurm/v0.0.40/jobs": reply}) as srv:
        c = SlurmRestCollector("rest", "127.0.0.1", SlurmRestOptions(scheme="http", port=srv.port, user_name="u", token=JWT))
        with pytest.raises(FetchError) as err:
            await fetch_once(c)
    assert err.value.reason == reason


def _fake(tmp_path, body: str):
    path = tmp_path / "squeue"
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return str(path)


@pytest.mark.parametrize(("script", "reason", "words"), [
    ('echo "squeue: error: Unable to contact slurm controller (connect failure)" >&2; exit 1', "command",
     "Unable to contact slurm controller"),
    ("echo 'JOBID PARTITION NAME'; exit 0", "protocol", "did not print JSON"),
    ("echo '{\"meta\": {}}'", "protocol", "no 'jobs' list"),
])
async def test_squeue_failures_name_the_command_and_what_was_wrong(tmp_path, script, reason, words) -> None:
    c = SlurmCollector("slurmctl", "", SlurmOptions(squeue_path=_fake(tmp_path, script)))
    with pytest.raises(FetchError) as err:
        await c.fetch()
    assert err.value.reason == reason and words in str(err.value)


def test_slurmrestd_needs_a_token() -> None:
    with pytest.raises(ValueError, match="JWT"):
        SlurmRestOptions(user_name="u")
