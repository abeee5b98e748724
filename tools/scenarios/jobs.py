"""Job-impact scenarios: faults with running jobs, and truth for which jobs each fault touches.

``storm_two_of_three_jobs``: three Arista leaves and a spine, three hosts each, three running
Slurm jobs whose collective traffic is a ring over their own hosts (the pattern of NCCL's ring
all-reduce: each rank sends to the next), and a NIC pause storm from one host of the first job.

Where the storm reaches follows IEEE 802.1Qbb and the spreading Guo et al. describe ("RDMA over
Commodity Ethernet at Scale", SIGCOMM 2016, NIC PFC pause frame storm): the switch port facing
the storming NIC cannot send on the priority, its queue fills, and the ingress ports holding
traffic for it pause their upstream peers, hop by hop along every flow that crosses a port
already paused (:func:`tools.scenarios.sim.propagate_pause`). PFC stops a whole priority of a
port, not one flow, so a job whose flows merely share a paused port stalls too:

* job 48211 (gpu02, gpu03, gpu04): gpu03 is the storming NIC; gpu04's ring flow into gpu03
  crosses leaf02's uplink and the spine's port to leaf01, which stop, and gpu04 is paused;
* job 48212 (gpu01, gpu05, gpu06): gpu06's ring flow to gpu01 shares those two paused ports,
  so leaf02 pauses gpu06 too;
* job 48213 (gpu07, gpu08, gpu09): its ring stays on leaf03, which nothing pauses.

The storm's origin truth line carries ``jobs`` (the affected ids) and ``jobs_clear`` (running
jobs it must not list): a fabricmon addition read by tests/test_jobs_scenario.py.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from tools.scenarios.catalog import EthFabric, Traffic, _new, nic_storm_plan, storm_tree
from tools.scenarios.render import render_squeue
from tools.scenarios.writer import T0, Scenario, Target

JOBS = {  # Slurm job id -> (name, host list as squeue prints it, hosts in ring order)
    48211: ("llama-70b", "gpu[02-04]", ["gpu02", "gpu04", "gpu03"]),
    48212: ("mixtral-ft", "gpu[01,05-06]", ["gpu01", "gpu05", "gpu06"]),
    48213: ("vit-sweep", "gpu[07-09]", ["gpu07", "gpu08", "gpu09"]),
}


def ring(hosts: list[str], rate: float) -> list[tuple[str, str, int, float]]:
    """Each rank sends to the next on the RoCE priority (3)."""
    return [(h, hosts[(i + 1) % len(hosts)], 3, rate) for i, h in enumerate(hosts)]


def storm_two_of_three_jobs(seed: int) -> Scenario:
    fab = _new(seed)
    eth = EthFabric(fab, [("leaf01", "arista"), ("leaf02", "arista"), ("leaf03", "arista")], ("spine01", "arista"))
    flows = [f for _, _, hosts in JOBS.values() for f in ring(hosts, 0.5)]
    tr = Traffic(fab, flows)
    fab.seed_counters()
    nic = "gpu03"
    origin = eth.port_to(nic)
    paused, victims = storm_tree(fab, tr, origin, 0.998)
    s, e = 10, 24
    plan = nic_storm_plan(tr, random.Random(seed), nic, paused, s, e)
    started = {jid: T0 - 3600.0 * (i + 1) for i, jid in enumerate(JOBS)}
    running = [(jid, name, nodes, len(hosts), started[jid]) for jid, (name, nodes, hosts) in JOBS.items()]
    squeue: Callable[[float], dict] = lambda t: render_squeue(running)  # noqa: E731
    targets = [*eth.targets(), Target(nic, "host", nic), Target("slurmctl", "slurm", render=squeue)]
    sc = Scenario("storm_two_of_three_jobs", f"NIC pause storm from {nic} (Slurm job 48211) behind leaf01: it pauses the "
                  "spine and leaf02 ports that job 48212 shares; job 48213 on leaf03 is untouched", fab, targets, plan,
                  polls=32, seed=seed)
    hit = sorted(str(j) for j in (48211, 48212))
    sc.add_truth("pfc_storm", origin[0], origin[1], 3, "origin", s, e, peer_device=nic, peer_port="eth0",
                 jobs=hit, jobs_clear=["48213"])
    for v in victims:
        sc.add_truth("pfc_storm", v[0], v[1], 3, "victim", s, e)
    sc.notes[s] = f"storm injected: {nic} (job 48211) stalls and sends XOFF on priority 3 continuously"
    sc.notes[e] = "storm cleared"
    return sc


JOB_SCENARIOS: dict[str, Callable[[int], Scenario]] = {"storm_two_of_three_jobs": storm_two_of_three_jobs}
