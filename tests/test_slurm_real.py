"""The ``slurm`` source against a real single-node Slurm (Debian ``slurmctld``, ``slurmd``, ``munge``).

``scripts/test`` installs the packages; the fixture writes a one-node ``slurm.conf`` (process
tracking by ``/proc``, no cgroups: a container has none to give), a munge key, and starts
``munged``, ``slurmctld`` and ``slurmd`` in the foreground on free loopback ports, with every
state file under pytest's temporary directory; they are stopped afterwards. Where Slurm
cannot start, the tests fail with the daemons' logs: they never skip.

Jobs are submitted with ``sbatch`` and ``srun`` and read back with ``squeue --json``; the
collector's inventory must be what ``squeue`` itself says is running.
"""

from __future__ import annotations

import getpass
import json
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fabricmon.agent.config import load
from fabricmon.agent.recording import read_polls
from fabricmon.agent.replay import replay_recording
from fabricmon.agent.runtime import Agent
from fabricmon.collectors.base import FetchError
from fabricmon.collectors.slurm import SlurmCollector, SlurmOptions
from fabricmon.core.hostlist import expand
from tests.conftest import free_port
from tests.test_hostlist import group

DAEMONS = ("munged", "slurmctld", "slurmd")
CLIENTS = ("sbatch", "srun", "squeue", "scontrol", "sinfo", "scancel")
NODE = "gpu001"


def _which(name: str) -> str | None:
    return shutil.which(name) or next((p for p in (f"/usr/sbin/{name}", f"/usr/bin/{name}") if os.path.exists(p)), None)


@dataclass
class Slurm:
    dir: Path
    env: dict[str, str]
    procs: dict[str, subprocess.Popen] = field(default_factory=dict)
    background: list[subprocess.Popen] = field(default_factory=list)

    def run(self, *argv: str, check: bool = True) -> subprocess.CompletedProcess:
        # cwd: sbatch writes the jobs' slurm-<id>.out where it is run, and that is not the checkout
        r = subprocess.run([_which(argv[0]) or argv[0], *argv[1:]], env=self.env, capture_output=True, text=True, timeout=60,
                           cwd=self.dir)
        if check and r.returncode != 0:
            pytest.fail(f"{' '.join(argv)} exited {r.returncode}: {r.stderr.strip()}\n{self.logs()}")
        return r

    def logs(self) -> str:
        out = []
        for f in sorted((self.dir / "log").iterdir()):
            text = f.read_text(errors="replace").strip().splitlines()[-25:]
            out.append(f"--- {f.name}\n" + "\n".join(text))
        return "\n".join(out)

    def running(self) -> dict[str, str]:
        """``squeue --json`` read directly: running job id -> its node list."""
        doc = json.loads(self.run("squeue", "--json").stdout)
        out = {}
        for j in doc["jobs"]:
            state = j["job_state"] if isinstance(j["job_state"], list) else [j["job_state"]]
            if "RUNNING" in state:
                out[str(j["job_id"])] = j["nodes"]
        return out

    def wait_running(self, n: int, timeout: float = 60.0) -> dict[str, str]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            now = self.running()
            if len(now) >= n:
                return now
            time.sleep(0.5)
        pytest.fail(f"{n} jobs did not start running within {timeout:g} s: {self.run('squeue').stdout}\n{self.logs()}")


def _conf(d: Path, ctld_port: int, slurmd_port: int) -> str:
    user = getpass.getuser()
    return f"""ClusterName=fabricmon-test
SlurmctldHost=localhost(127.0.0.1)
SlurmUser={user}
SlurmdUser={user}
AuthType=auth/munge
AuthInfo=socket={d}/munge/munge.socket
CredType=cred/munge
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
StateSaveLocation={d}/state
SlurmdSpoolDir={d}/spool
SlurmctldPidFile={d}/slurmctld.pid
SlurmdPidFile={d}/slurmd.pid
SlurmctldLogFile={d}/log/slurmctld.log
SlurmdLogFile={d}/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
ReturnToService=2
MpiDefault=none
SwitchType=switch/none
NodeName={NODE} NodeHostname={socket.gethostname()} NodeAddr=127.0.0.1 CPUs=2 State=UNKNOWN
PartitionName=gpu Nodes={NODE} Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4
"""


@pytest.fixture(scope="module")
def slurm(tmp_path_factory) -> Iterator[Slurm]:
    missing = [n for n in (*DAEMONS, *CLIENTS) if _which(n) is None]
    if missing:
        pytest.fail(f"Slurm is not installed ({', '.join(missing)} missing): scripts/test installs the Debian packages "
                    "slurmctld, slurmd, slurm-client and munge")
    d = tmp_path_factory.mktemp("slurm")
    for sub in ("state", "spool", "log", "munge"):
        (d / sub).mkdir(mode=0o700)
    key = d / "munge" / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o400)
    conf = d / "slurm.conf"
    conf.write_text(_conf(d, free_port(), free_port()))
    env = {**os.environ, "SLURM_CONF": str(conf)}
    s = Slurm(d, env)

    def start(name: str, *args: str) -> None:
        log = open(d / "log" / f"{name}.out", "w")  # noqa: SIM115 - closed with the process
        s.procs[name] = subprocess.Popen([_which(name) or name, *args], env=env, stdout=log, stderr=subprocess.STDOUT, cwd=d)

    try:
        start("munged", "-F", "-f", f"--key-file={key}", f"--socket={d}/munge/munge.socket",
              f"--log-file={d}/log/munged.log", f"--pid-file={d}/munge/munged.pid", f"--seed-file={d}/munge/munged.seed")
        _wait(lambda: (d / "munge" / "munge.socket").exists(), s, "munged did not create its socket")
        start("slurmctld", "-D", "-i")
        _wait(lambda: s.run("scontrol", "ping", check=False).returncode == 0, s, "slurmctld does not answer scontrol ping")
        start("slurmd", "-D", "-N", NODE)
        _wait(lambda: s.run("sinfo", "-h", "-o", "%T", check=False).stdout.strip() == "idle", s, f"node {NODE} is not idle")
        yield s
    finally:
        if "slurmctld" in s.procs:  # cancel the jobs and let slurmd end their steps before it stops
            s.run("scancel", "--user", getpass.getuser(), check=False)
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and s.run("squeue", "-h", check=False).stdout.strip():
                time.sleep(0.5)
        for p in [*s.background, *reversed(list(s.procs.values()))]:
            p.terminate()
        for p in [*s.background, *s.procs.values()]:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(timeout=10)


def _wait(ok, s: Slurm, what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        dead = [n for n, p in s.procs.items() if p.poll() is not None]
        if dead:
            pytest.fail(f"{', '.join(dead)} exited while starting ({what})\n{s.logs()}")
        if ok():
            return
        time.sleep(0.3)
    pytest.fail(f"{what} within {timeout:g} s\n{s.logs()}")


@pytest.fixture(scope="module")
def jobs(slurm: Slurm) -> dict[str, str]:
    """Three running jobs (a batch job, an interactive srun, a task of an array) and one pending."""
    slurm.run("sbatch", "-J", "train-a", "-n1", "--wrap", "sleep 600")
    srun = subprocess.Popen([_which("srun") or "srun", "-J", "interactive", "-n1", "sleep", "600"], env=slurm.env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=slurm.dir)
    slurm.background.append(srun)
    slurm.run("sbatch", "-J", "sweep", "-a", "3", "-n1", "--wrap", "sleep 600")
    slurm.run("sbatch", "-J", "later", "-n1", "--begin=now+1hour", "--wrap", "sleep 600")
    return slurm.wait_running(3)


async def _poll(slurm: Slurm, monkeypatch, **options) -> tuple[dict, object]:
    monkeypatch.setenv("SLURM_CONF", slurm.env["SLURM_CONF"])
    c = SlurmCollector("slurmctl", "", SlurmOptions(squeue_path=_which("squeue") or "squeue",
                                                     scontrol_path=_which("scontrol") or "scontrol", **options))
    payload = await c.fetch()
    result, _ = SlurmCollector.parse_poll(payload, c.spec(), None)
    return payload, result


async def test_inventory_matches_squeue(slurm: Slurm, jobs: dict[str, str], monkeypatch) -> None:
    payload, result = await _poll(slurm, monkeypatch)
    got = {j.id: j.hosts for j in result.inventory}
    assert got == {jid: tuple(expand(nodes)) for jid, nodes in slurm.running().items()}
    assert len(got) == 3 and all(hosts == (NODE,) for hosts in got.values())
    pending = [j for j in json.loads(slurm.run("squeue", "--json").stdout)["jobs"] if j["name"] == "later"]
    assert pending and str(pending[0]["job_id"]) not in got  # only running jobs
    sweep = json.loads(slurm.run("squeue", "--json").stdout)
    task = next(j for j in sweep["jobs"] if j["name"] == "sweep")
    assert f"{task['array_job_id']}_{task['array_task_id']}" in next(j.aliases for j in result.inventory if j.id == str(task["job_id"]))
    # nothing personal is read or recorded unless the operator enables it
    assert all(j.labels == () for j in result.inventory)
    assert not any(k in job for job in payload["jobs"] for k in ("name", "user_name", "partition", "account"))
    assert len(payload["jobs"]) == 3


async def test_labels_only_when_enabled(slurm: Slurm, jobs: dict[str, str], monkeypatch) -> None:
    _, result = await _poll(slurm, monkeypatch, labels=["name", "user", "partition"])
    by_name = {dict(j.labels)["name"]: dict(j.labels) for j in result.inventory}
    assert set(by_name) == {"train-a", "interactive", "sweep"}
    assert all(lb["user"] == getpass.getuser() and lb["partition"] == "gpu" for lb in by_name.values())


async def test_scontrol_json_where_this_slurm_has_it(slurm: Slurm, jobs: dict[str, str], monkeypatch) -> None:
    """``scontrol show job --json`` came with Slurm 23.02: on 22.05 (Debian bookworm) it is a
    clear command error naming the command; on a newer Slurm the inventory is squeue's."""
    version = slurm.run("scontrol", "--version").stdout.split()[-1]
    major, minor = (int(x) for x in version.split(".")[:2])
    if (major, minor) < (23, 2):
        with pytest.raises(FetchError) as err:
            await _poll(slurm, monkeypatch, scontrol=True)
        assert err.value.reason == "command" and "scontrol show job --json" in str(err.value)
    else:
        _, result = await _poll(slurm, monkeypatch, scontrol=True)
        assert {j.id for j in result.inventory} == set(slurm.running())


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.sampled_from(["gpu", "n", "rack-a"]), st.lists(group(), min_size=1, max_size=2)),
                min_size=1, max_size=3))
def test_host_lists_expand_as_slurm_expands_them(slurm: Slurm, parts) -> None:
    """Our expansion of generated host lists (prefix and bracket groups: Slurm 22.05 refuses a
    plain suffix after the last group) equals ``scontrol show hostnames``, as sets."""
    text = ",".join(prefix + "".join(g for g, _ in groups) for prefix, groups in parts)
    want = set(slurm.run("scontrol", "show", "hostnames", text).stdout.split())
    assert set(expand(text)) == want


async def test_record_then_replay_gives_the_same_inventory(slurm: Slurm, jobs: dict[str, str], tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("SLURM_CONF", slurm.env["SLURM_CONF"])
    cfg = tmp_path / "fabricmon.yml"
    rec = tmp_path / "polls.jsonl.gz"
    cfg.write_text(f"""
global: {{poll_interval: 1s, poll_timeout: 20s, jitter: 0}}
targets:
  - {{name: slurmctl, source: slurm, squeue_path: {_which("squeue")}, labels: [partition]}}
""")
    loaded = load(cfg)
    agent = Agent(loaded, listen="", record_path=str(rec), duration=3.5)
    await agent.run()
    live = agent.pipeline.jobs.inventory.jobs()
    header, polls, _ = read_polls(rec)
    assert header["targets"] == [{"name": "slurmctl", "source": "slurm", "labels": ["partition"]}]
    assert polls and all(p.ok for p in polls), [p.error for p in polls if not p.ok]
    replayed = replay_recording(rec, loaded).pipeline.jobs.inventory.jobs()
    assert {j: (v.hosts, v.labels) for j, v in replayed.items()} == {j: (v.hosts, v.labels) for j, v in live.items()}
    assert set(live) == set(slurm.running()) and all(v.labels == (("partition", "gpu"),) for v in live.values())
