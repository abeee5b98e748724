"""The job-impact stage: job inventory + placement + the detector's findings -> jobs per finding.

The pipeline calls three hooks (:meth:`JobStage.set_inventory` when a job source's poll is
parsed, :meth:`JobStage.drop_target` when a target goes, :meth:`JobStage.annotate` after each
detection pass); nothing else of the pipeline knows about jobs. Without a job source the
stage does nothing: findings, metrics and pages stay as they were.

After each pass every active finding's evidence gets ``jobs_affected`` (a count), ``jobs``
(the first :data:`~fabricmon.agent.jobs.impact.LISTED` ids), ``jobs_hosts`` and
``jobs_reach`` (the rule of reach used, in words). An ended finding keeps what it had when it
ended. The impacts are also kept per finding for the metrics and the job view.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

from fabricmon.agent.config import JobsConfig
from fabricmon.agent.detector.analyses.fabric import HOST_KINDS
from fabricmon.agent.jobs.impact import HostIndex, Impact, impact, rule_of, storm_origin
from fabricmon.agent.jobs.inventory import Inventory
from fabricmon.agent.jobs.placement import HostPlace, Placement
from fabricmon.agent.store import CounterStore
from fabricmon.agent.web.ids import finding_id
from fabricmon.core.model import Finding, JobInfo
from fabricmon.core.topology import Topology

log = logging.getLogger(__name__)


class JobStage:
    def __init__(self, config: JobsConfig | None = None) -> None:
        self.inventory = Inventory()
        self.configure(config)
        self.impacts: dict[str, Impact] = {}  # finding id -> what it touches
        self.places: dict[str, HostPlace] = {}  # job host -> where it is
        self.unmatched: set[str] = set()  # job hosts with no switch port known
        self.first_t: float | None = None  # the first poll this stage saw: how far back "no finding" reaches
        self._index = HostIndex()
        self._host_jobs: dict[str, set[str]] = {}
        self._stamp: tuple | None = None
        self._seen: dict[str, tuple[int, tuple | None]] = {}  # finding id -> (id of the evidence annotated, stamp)
        self._reported: set[str] = set()
        self._storms: dict[str, Impact] = {}  # storm origin "device:port" -> its impact, for its victims
        self._ids: dict[int, tuple[Finding, str]] = {}  # id(finding) -> (it, its finding_id): hashed once per finding

    def configure(self, config: JobsConfig | None) -> None:
        """The config's ``jobs:`` settings (at start and on a reload; None: the config model's
        defaults): the placement is rebuilt on the next pass."""
        if config is None:
            config = JobsConfig()
        self.placement = Placement(config.static_hosts())
        self.info_max_series = config.info_max_series
        self.window = config.window
        self._stamp = None

    @property
    def active(self) -> bool:
        """A job source has reported (its inventory, even empty, is current)."""
        return bool(self.inventory.by_target)

    # ------------------------------------------------------------------ pipeline hooks
    def set_inventory(self, target: str, t: float, jobs: list[JobInfo]) -> None:
        self.inventory.set(target, t, jobs)

    def drop_target(self, target: str) -> None:
        self.inventory.drop(target)

    def annotate(self, findings: list[Finding], ended: Iterable[Finding], store: CounterStore, topo: Topology,
                 t: float, ready: Callable[[], bool]) -> None:
        """After a detection pass: the jobs of every active finding. ``ready()``: every target
        has polled once, so a host still unmatched is reported (not before: at start-up the
        topology may simply not be in yet); asked only while an unmatched host is unreported."""
        if self.first_t is None:
            self.first_t = t
        self.inventory.expire(t, store.stale_after)
        if not self.active:
            self.impacts.clear()
            self.unmatched.clear()
            return
        self._refresh(store, topo)
        if self.unmatched - self._reported and ready():
            self._report_unmatched()
        else:
            self._reported &= self.unmatched
        keep: set[str] = set()
        refs = {storm_origin(f) for f in findings} - {None}
        self._storms = {ref: imp for ref, imp in self._storms.items() if ref in refs}
        for f in sorted(findings, key=lambda f: rule_of(f) != "storm"):  # origins first: their victims join their storm
            fid = self.fid(f)
            keep.add(fid)
            ref = storm_origin(f)
            if self._seen.get(fid) == (id(f.evidence), self._stamp) and fid in self.impacts and "jobs_reach" in f.evidence \
                    and rule_of(f) != "victim":
                imp = self.impacts[fid]
            else:
                imp = impact(f, self._index, self._host_jobs, self._storms.get(ref) if ref else None)
                self.impacts[fid] = imp
                f.evidence = {**f.evidence, **imp.evidence()}
                self._seen[fid] = (id(f.evidence), self._stamp)
            if ref is not None and rule_of(f) == "storm":
                self._storms[ref] = imp
        keep.update(self.fid(f) for f in ended)
        for fid in [k for k in self.impacts if k not in keep]:
            del self.impacts[fid]
            self._seen.pop(fid, None)
        if len(self._ids) > 2 * len(keep) + 64:
            self._ids = {k: v for k, v in self._ids.items() if v[1] in keep}

    def fid(self, f: Finding) -> str:
        """The finding's :func:`~fabricmon.agent.web.ids.finding_id`, hashed once per finding object."""
        hit = self._ids.get(id(f))
        if hit is not None and hit[0] is f:
            return hit[1]
        fid = finding_id(f)
        self._ids[id(f)] = (f, fid)
        return fid

    # ------------------------------------------------------------------ placement
    def _refresh(self, store: CounterStore, topo: Topology) -> None:
        self.placement.refresh(store, topo)
        stamp = (self.placement.stamp, self.inventory.generation)
        if stamp == self._stamp:
            return
        self._stamp = stamp
        self._host_jobs = self.inventory.host_jobs()
        self.places = {h: self.placement.place(h) for h in self._host_jobs}
        self.unmatched = {h for h, pl in self.places.items() if not pl.placed}
        endpoints = (n for n, d in store.devices.items() if d.kind in HOST_KINDS)
        self._index = HostIndex.of(self.places.values(), endpoints)

    def _report_unmatched(self) -> None:
        for host in sorted(self.unmatched - self._reported):
            self._reported.add(host)
            jobs = ", ".join(sorted(self._host_jobs.get(host, ())))
            nics = self.places[host].nics
            if nics:
                log.warning("job host %s (job %s): NIC port(s) %s known, but no cable to a switch port; findings in the "
                            "fabric cannot be joined to it (add it to jobs.hosts)", host, jobs,
                            ", ".join(f"{n.device} {n.port}" for n in nics[:4]))
            else:
                log.warning("job host %s (job %s) matches no fabric port: not a host-source device, an LLDP neighbour, an "
                            "InfiniBand node description or an entry of jobs.hosts; it is left out, not guessed", host, jobs)
        self._reported &= self.unmatched  # a host placed since, and unmatched again later, is reported again
