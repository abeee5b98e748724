"""Issue 32's hostile files and commands, applied to the sources main gained beside it (gNMI,
Kubernetes, Slurm, the jobs file) and to the REST sources' TLS files: a FIFO or a device
where a file is expected is a named error at once (never a hang: the thread that read it
would block every later poll and the stop), a file over its bound fails the poll with
``size``, and a Slurm command's output is capped and decoded off the event loop."""

from __future__ import annotations

import asyncio
import json
import os
import stat
import threading

import pytest

from fabricmon.collectors.base import FetchError
from fabricmon.collectors.gnmi import GnmiCollector, GnmiOptions
from fabricmon.collectors.jobs_file import JobsFileCollector, JobsFileOptions
from fabricmon.collectors.kubernetes import KubernetesCollector, KubernetesOptions
from fabricmon.collectors.slurm import SlurmCollector, SlurmOptions
from fabricmon.collectors.slurm import fetch as slurm_fetch
from fabricmon.collectors.ufm import UfmCollector, UfmOptions

# Every refusal below is immediate; a hang would be cut here and fail the test instead of the run.
AT_ONCE_S = 10.0


def _fifo(tmp_path, name: str = "fifo") -> str:
    path = tmp_path / name
    os.mkfifo(path)
    return str(path)


async def _fails(coro) -> FetchError:
    with pytest.raises(FetchError) as err:
        await asyncio.wait_for(coro, AT_ONCE_S)
    return err.value


async def test_a_jobs_file_that_is_a_fifo_or_too_large_fails_the_poll_by_name(tmp_path) -> None:
    fifo = _fifo(tmp_path)
    err = await _fails(JobsFileCollector("jobs", "", JobsFileOptions(path=fifo)).fetch())
    assert err.reason == "command" and fifo in str(err) and "FIFO" in str(err)
    big = tmp_path / "jobs.yml"
    big.write_text("jobs:\n" + "".join(f"  j{i}: [gpu{i:04d}]\n" for i in range(200)))
    err = await _fails(JobsFileCollector("jobs", "", JobsFileOptions(path=str(big), max_bytes=1024)).fetch())
    assert err.reason == "size" and str(big) in str(err) and "larger than 1 KiB" in str(err)


async def test_a_kubeconfig_or_token_file_that_is_a_fifo_fails_at_once(tmp_path) -> None:
    fifo = _fifo(tmp_path)
    err = await _fails(KubernetesCollector("k8s", "127.0.0.1", KubernetesOptions(kubeconfig=fifo)).fetch())
    assert err.reason == "auth" and "FIFO" in str(err)
    err = await _fails(KubernetesCollector("k8s", "127.0.0.1", KubernetesOptions(token_file=fifo)).fetch())
    assert err.reason == "auth" and "FIFO" in str(err)


async def test_a_kubeconfig_certificate_authority_that_is_a_fifo_is_a_tls_error(tmp_path) -> None:
    fifo = _fifo(tmp_path, "ca.crt")
    cfg = tmp_path / "kubeconfig"
    cfg.write_text(json.dumps({
        "current-context": "c", "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}],
        "clusters": [{"name": "k", "cluster": {"server": "https://127.0.0.1:6443", "certificate-authority": fifo}}],
        "users": [{"name": "u", "user": {"token": "kube-token-0123456789"}}]}))
    err = await _fails(KubernetesCollector("k8s", "127.0.0.1", KubernetesOptions(kubeconfig=str(cfg))).fetch())
    assert err.reason == "tls" and "FIFO" in str(err)


@pytest.mark.parametrize("option", ["ca_file", "cert_file", "password_file"])
async def test_gnmi_tls_and_password_files_that_are_fifos_fail_at_once(tmp_path, option) -> None:
    fifo = _fifo(tmp_path)
    key = tmp_path / "key.pem"
    key.write_text("not used\n")
    opts = {"ca_file": {"ca_file": fifo}, "cert_file": {"cert_file": fifo, "key_file": str(key)},
            "password_file": {"username": "admin", "password_file": fifo}}[option]
    c = GnmiCollector("sw", "127.0.0.1", GnmiOptions(port=1, **opts))
    try:
        err = await _fails(c.fetch())
    finally:
        await c.close()
    assert "FIFO" in str(err), str(err)


@pytest.mark.parametrize("device", [None, "/dev/zero"])
async def test_a_rest_ca_file_that_is_a_fifo_or_a_device_is_a_tls_error(tmp_path, device) -> None:
    ca = device or _fifo(tmp_path)
    c = UfmCollector("ufm", "127.0.0.1", UfmOptions(port=1, username="u", password="secret-0123", ca_file=ca))
    try:
        err = await _fails(c.fetch())
    finally:
        await c.close()
    assert err.reason == "tls" and ("FIFO" in str(err) or "character device" in str(err)), str(err)


def _fake_squeue(tmp_path, body: str) -> str:
    path = tmp_path / "squeue"
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return str(path)


async def test_an_squeue_that_never_stops_printing_is_cut_at_its_cap(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(slurm_fetch, "SLURM_MAX_OUTPUT", 8 << 20)  # the real cap (256 MiB) takes longer to fill
    c = SlurmCollector("slurmctl", "", SlurmOptions(squeue_path=_fake_squeue(tmp_path, "exec cat /dev/zero\n")))
    err = await _fails(c.fetch())
    assert err.reason == "size" and "printed more than 8388608 bytes" in str(err)


async def test_a_large_queue_is_decoded_in_a_thread_element_by_element(tmp_path, monkeypatch) -> None:
    jobs = [{"job_id": i, "job_state": ["RUNNING" if i % 10 == 0 else "PENDING"], "nodes": f"gpu{i:05d}",
             "name": "x" * 40, "user_name": "alice", "command": "/home/alice/train.sh " + "y" * 60}
            for i in range(20_000)]
    out = tmp_path / "queue.json"
    out.write_text(json.dumps({"meta": {}, "errors": [], "warnings": [], "jobs": jobs}))
    assert out.stat().st_size > 2 << 20  # above boundedjson.SLICE_BYTES: the large path
    threads: list[str] = []
    real = slurm_fetch.boundedjson.loads

    def spy(*args, **kwargs):
        threads.append(threading.current_thread().name)
        return real(*args, **kwargs)

    monkeypatch.setattr(slurm_fetch.boundedjson, "loads", spy)
    c = SlurmCollector("slurmctl", "", SlurmOptions(squeue_path=_fake_squeue(tmp_path, f"exec cat {out}\n")))
    payload = await asyncio.wait_for(c.fetch(), 60)
    assert threads == ["fabricmon-offload"]  # not the event loop's thread
    assert [j["job_id"] for j in payload["jobs"]] == list(range(0, 20_000, 10))
    assert all("command" not in j and "user_name" not in j for j in payload["jobs"])


async def test_an_squeue_output_of_too_many_values_is_refused_before_it_is_decoded(tmp_path) -> None:
    script = "printf '{\"jobs\": ['; i=0; while [ $i -lt 300 ]; do printf '%0.s{},' $(seq 30000); i=$((i+1)); done; printf '{}]}'\n"
    c = SlurmCollector("slurmctl", "", SlurmOptions(squeue_path=_fake_squeue(tmp_path, script)))
    err = await _fails(c.fetch())
    assert err.reason == "size" and "more than the limit of 8,000,000" in str(err)
