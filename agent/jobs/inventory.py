"""The running jobs, as the job sources last reported them.

Each job target (``slurm``, ``slurmrestd``, ``kubernetes``, ``jobs-file``) owns the list its
last good poll reported; a new poll replaces it. A failed poll keeps the last list, with its
age, until it is older than the store's ``stale_after`` (then its jobs are forgotten: they may
have ended). Jobs are merged across targets by id (a site may list a job in Slurm and in a
file). A job that leaves the inventory is remembered for a while (:data:`GONE_KEPT`), so the
job view can say "not running, last seen ..." instead of "unknown".
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field

from fabricmon.core.model import JobInfo

GONE_KEPT = 1000  # ended jobs remembered, newest last


@dataclass(frozen=True, slots=True)
class Job:
    """A running job merged over the targets that report it."""

    id: str
    hosts: tuple[str, ...]
    start: float | None
    aliases: tuple[str, ...]
    labels: tuple[tuple[str, str], ...]
    targets: tuple[str, ...]
    seen: float  # poll time of the newest report


@dataclass
class Inventory:
    by_target: dict[str, tuple[float, list[JobInfo]]] = field(default_factory=dict)
    generation: int = 0  # bumped on every change
    gone: OrderedDict[str, Job] = field(default_factory=OrderedDict)
    _jobs: dict[str, Job] | None = None
    _names: dict[str, str] | None = None  # id or alias -> id

    def set(self, target: str, t: float, jobs: list[JobInfo]) -> None:
        old = self.by_target.get(target)
        if old is not None and old[1] == jobs:
            self.by_target[target] = (t, old[1])
            self._jobs = self._names = None  # same jobs, a newer report
            return
        before = self.jobs()
        self.by_target[target] = (t, list(jobs))
        self._changed(before)

    def drop(self, target: str) -> None:
        if target in self.by_target:
            before = self.jobs()
            del self.by_target[target]
            self._changed(before)

    def expire(self, now: float, stale_after: float) -> None:
        """Forget the lists of targets not heard from for ``stale_after`` seconds."""
        for target in [k for k, (t, _) in self.by_target.items() if now - t > stale_after]:
            self.drop(target)

    def _changed(self, before: dict[str, Job]) -> None:
        self._jobs = self._names = None
        self.generation += 1
        now = self.jobs()
        for jid, job in before.items():
            if jid not in now:
                self.gone[jid] = job
                self.gone.move_to_end(jid)
        for jid in now:
            self.gone.pop(jid, None)
        while len(self.gone) > GONE_KEPT:
            self.gone.popitem(last=False)

    def jobs(self) -> dict[str, Job]:
        """Running jobs by id, merged over the targets (hosts in first-seen order)."""
        if self._jobs is None:
            merged: dict[str, dict] = {}
            for target in sorted(self.by_target):
                t, infos = self.by_target[target]
                for info in infos:
                    m = merged.setdefault(info.id, {"hosts": {}, "start": None, "aliases": {}, "labels": {}, "targets": [], "seen": t})
                    m["hosts"].update(dict.fromkeys(info.hosts))
                    if info.start is not None and (m["start"] is None or info.start < m["start"]):
                        m["start"] = info.start
                    m["aliases"].update(dict.fromkeys(info.aliases))
                    m["labels"].update(dict(info.labels))
                    m["targets"].append(target)
                    m["seen"] = max(m["seen"], t)
            self._jobs = {jid: Job(jid, tuple(m["hosts"]), m["start"], tuple(m["aliases"]), tuple(sorted(m["labels"].items())),
                                   tuple(m["targets"]), m["seen"]) for jid, m in sorted(merged.items())}
        return self._jobs

    def find(self, name: str) -> Job | None:
        """A running job by id or alias (``48213``, ``48213_7``)."""
        if self._names is None:
            names: dict[str, str] = {}
            for jid, job in self.jobs().items():
                for a in job.aliases:
                    names.setdefault(a, jid)
            names.update({jid: jid for jid in self.jobs()})
            self._names = names
        jid = self._names.get(name)
        return self.jobs()[jid] if jid is not None else None

    def host_jobs(self) -> dict[str, set[str]]:
        out: dict[str, set[str]] = {}
        for jid, job in self.jobs().items():
            for h in job.hosts:
                out.setdefault(h, set()).add(jid)
        return out
