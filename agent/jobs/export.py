"""Metric families of the job stage (only while a job source reports: none otherwise).

* ``fabricmon_finding_jobs_affected{kind,device,port}``: jobs an active finding touches (the
  union over the findings sharing kind, device and port: several priorities or roles of one
  port are one series).
* ``fabricmon_finding_job_info{kind,device,port,job,...}`` = 1 per (finding, job) pair, for
  joins in PromQL, with the labels the job sources were told to read (user, partition,
  namespace, name). It is left out whole when the pairs exceed ``jobs.info_max_series``
  (an outage touching every job must not add 100,000 series); ``fabricmon_finding_job_pairs``
  always says how many there are.
* ``fabricmon_jobs_running{target}``: running jobs per job target.
* ``fabricmon_job_hosts_unmatched``: hosts of running jobs with no switch port known
  (never guessed; each is named once in the log).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fabricmon.agent.exporter.exposition import Family, labels

if TYPE_CHECKING:
    from fabricmon.agent.pipeline import Pipeline

N = "fabricmon"


def job_families(p: Pipeline) -> list[Family]:
    stage = p.jobs
    if not stage.active:
        return []
    affected = Family(f"{N}_finding_jobs_affected", "gauge",
                      "Jobs an active finding touches (its rule of reach is in the finding's evidence, jobs_reach).")
    per_port: dict[tuple[str, str, str], set[str]] = {}
    for f in p.findings():
        imp = stage.impacts.get(stage.fid(f))
        if imp is not None:
            per_port.setdefault((f.kind, f.device, f.port or ""), set()).update(imp.jobs)
    pairs = sum(len(v) for v in per_port.values())
    for (kind, device, port), jobs in sorted(per_port.items()):
        affected.add(labels((("kind", kind), ("device", device), ("port", port))), len(jobs))
    info = Family(f"{N}_finding_job_info", "info",
                  "One series per (active finding, job it touches); left out when there are more pairs than jobs.info_max_series.")
    if pairs <= stage.info_max_series:
        jobs = stage.inventory.jobs()
        for (kind, device, port), ids in sorted(per_port.items()):
            for jid in sorted(ids):
                job = jobs.get(jid)
                extra = job.labels if job is not None else ()
                info.add(labels((("kind", kind), ("device", device), ("port", port), ("job", jid), *extra)), 1)
    npairs = Family(f"{N}_finding_job_pairs", "gauge",
                    "(Finding kind/device/port, job) pairs; fabricmon_finding_job_info is exported while this is at most "
                    "jobs.info_max_series.")
    npairs.add("", pairs)
    running = Family(f"{N}_jobs_running", "gauge", "Running jobs the job target reported last (kept until stale_after).")
    for target, (_, infos) in sorted(stage.inventory.by_target.items()):
        running.add(labels((("target", target),)), len(infos))
    unmatched = Family(f"{N}_job_hosts_unmatched", "gauge",
                       "Hosts of running jobs that no source places on a switch port (named once each in the log).")
    unmatched.add("", len(stage.unmatched))
    return [affected, info, npairs, running, unmatched]
