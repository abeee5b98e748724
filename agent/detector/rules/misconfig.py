"""misconfig: failed items of the lossless-fabric checklist, as findings.

Runs :mod:`fabricmon.agent.detector.checklist` on the ports that received data in this pass
and whose inputs changed (a configuration gauge, or the counters as
:func:`~fabricmon.agent.detector.checklist.behaviour` codes them in whole-array passes), and on
their cable peers, whose link checks depend on them: a fabric whose pause and traffic move on
every port does not re-run the checklist on every port of every poll; a
change of the topology or of the port set re-checks the cables that appeared or went (one walk
over the cables), and a change of the ``fabric:`` layout starts over. Every failure the checklist reports
(explained ones left out: one root cause, one finding) is a ``misconfig`` finding: ``device``/
``port`` the end to fix first, ``peer_device``/``peer_port`` the other end of the cable (the
detector takes it from the topology), ``evidence.check`` the check's name.

Severity: ``warning``; ``critical`` when the broken port (either end, for a link check) carried
lossless traffic in the last interval, because then the misconfiguration is dropping or
stalling RoCE traffic now rather than waiting for it. A misconfiguration is state, not an
event: the finding starts at the first poll that shows it and ends at the first poll that does
not (``raise_polls`` = ``clear_polls`` = 1).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from fabricmon.agent.detector import checklist as cl
from fabricmon.agent.detector.analyses.fabric import FabricAnalysis
from fabricmon.agent.detector.base import DetectContext, Observation, Rule
from fabricmon.agent.store import PortKey
from fabricmon.core.vocabulary import CONFIG_GAUGES

Key = tuple[str, Any]  # ("port", PortKey) or ("link", (PortKey, PortKey))
# In a port's inputs' code (MisconfigRule._touched): a check fails from behaviour now and its
# evidence carries this interval's counts, so the port is re-checked every pass.
VOLATILE = 1 << 4


@dataclass(slots=True)
class MisconfigObservation(Observation):
    """An observation keyed by its check too: one port can fail several checks on one priority
    (watchdog and headroom), and each is its own finding (``Finding.key`` does the same)."""

    check: str = ""

    @property
    def key(self) -> tuple[str, str, str | None, int | None, str | None]:
        return (self.kind, self.device, self.port, self.priority, self.check)


class MisconfigRule(Rule):
    name = "misconfig"
    kinds = ("misconfig",)
    needs = ("fabric",)  # the lossless layout and which device is a host
    raise_polls = 1
    clear_polls = 1

    def __init__(self, params: dict[str, Any] | None = None) -> None:
        super().__init__(params)
        self._view: cl.FabricView | None = None
        self._reset()

    def _reset(self) -> None:
        self._results: dict[Key, list[cl.Result]] = {}
        self._counts = cl.counts(())
        self._failing: dict[Key, list[cl.Result]] = {}
        self._scope: set[str] = set()  # devices with lossless-Ethernet evidence
        self._links: set[tuple[PortKey, PortKey]] = set()  # the cables checked
        self._shapes: tuple[int, int] | None = None  # the store's series and gauge layouts at the last scope scan
        self._codes: dict[PortKey, int] = {}  # port -> its inputs' code when last checked (see _touched)
        self._placed: dict[PortKey, bool] = {}  # port -> it has a cable or is a host's (per _stamp)
        self._hot: dict[Key, set[PortKey]] = {}  # a result key -> the ports its failing results name
        # What every port's results depend on beyond its own inputs: topology generation, store
        # layout, device descriptions (which device is a host), audited devices; at the last
        # pass, and at the last walk over the cables.
        self._stamp: tuple[int, ...] | None = None
        self._linked: tuple[int, ...] | None = None

    def results(self) -> list[cl.Result]:
        """The last checklist, every port and link, in :func:`checklist.sort_key` order."""
        return sorted((r for rs in self._results.values() for r in rs), key=cl.sort_key)

    def summary(self) -> tuple[dict[str, dict[str, int]], list[cl.Result]]:
        """(check -> status -> count, the failures to fix) of the last checklist, kept up to
        date per pass, so the landing page does not walk every port's results."""
        return {c: dict(n) for c, n in self._counts.items()}, sorted(
            (r for rs in self._failing.values() for r in rs), key=cl.sort_key)

    def evaluate(self, ctx: DetectContext) -> Iterable[Observation]:
        fabric = ctx.analysis(FabricAnalysis)
        pmap = fabric.layout  # the config's fabric: section
        view = self._view
        if view is None or view.shape is not fabric.shape or view.pmap != pmap:
            view = self._view = cl.FabricView(ctx.store, ctx.topology, pmap, fabric.shape)
            self._reset()  # another fabric layout: every result changes
        ports = self._touched(view, ctx)
        if self._stamp != self._linked:  # cables, ports or the audited devices changed: O(cables) once
            self._linked = self._stamp
            ports |= self._relink(view)
        links = {(a, b) if a <= b else (b, a) for a in ports if (b := view.peer(a)) is not None}
        self._update(view, ports, links)
        for rs in self._failing.values():
            for r in rs:
                yield self._observe(r)

    def _touched(self, view: cl.FabricView, ctx: DetectContext) -> set[PortKey]:
        """Ports of this pass to re-check: updated ports of audited devices (with evidence or a
        cable) whose inputs changed, and their cable peers, whose link checks depend on them.

        A port's inputs are its configuration gauges (the store notes the ports where one
        changed), its counters as :func:`checklist.behaviour` gives them, its cable and which
        devices are hosts (on a change of the topology, the port set or a device's
        description, every updated port is re-checked). A port is re-checked when its code
        changed or is volatile; the code holds lossless traffic in the last interval only for
        a port a failing result names (nothing else reads it), and within the history only
        for a port without a cable or host kind (nothing else reads that): a fabric whose
        traffic starts or stops does not re-run the checklist on every port.

        A port's evidence is which series it has, so devices join the audit only in a pass in
        which some port gained a series or a gauge: on a fabric whose ports keep their series
        (every InfiniBand poll), the scan of every updated port is skipped."""
        store, updated = ctx.store, ctx.updated
        shapes = (store.series_layout, store.gauge_layout)
        if shapes != self._shapes:
            self._shapes = shapes
            for pk in updated:
                if pk[0] not in self._scope and view.ethernet_evidence(pk):
                    self._scope.add(pk[0])
        stamp = (ctx.topology.generation, store.layout, store.device_writes, len(self._scope))
        if stamp != self._stamp:
            self._stamp = stamp
            self._codes.clear()
            self._placed.clear()
        if not self._scope:
            return set()  # an InfiniBand fabric: no visit per port
        scope, placed = self._scope, self._placed
        audited = [pk for pk in updated if pk[0] in scope]
        for pk in audited:
            if pk not in placed:
                placed[pk] = view.peer(pk) is not None or view.is_host(pk[0])
        n = len(audited)
        b = cl.behaviour(view, audited)
        hot = {pk for names in self._hot.values() for pk in names}
        failing = np.fromiter((pk in hot for pk in audited), bool, n) if hot else np.zeros(n, bool)
        loose = ~np.fromiter(map(placed.__getitem__, audited), bool, n)
        codes = (VOLATILE * b.volatile + np.where(failing, b.recent, 0) + 3 * np.where(loose, b.history, 0)).tolist()
        config = ctx.changes.gauge_ports(CONFIG_GAUGES) if ctx.changes is not None else set()
        known = self._codes
        ports: set[PortKey] = set()
        for pk, code in zip(audited, codes, strict=True):
            if known.get(pk) == code and not code & VOLATILE and pk not in config:
                continue
            known[pk] = code
            peer = view.peer(pk)
            if peer is not None:
                ports.update((pk, peer))
            elif view.ethernet_evidence(pk):
                ports.add(pk)
        return ports

    def _relink(self, view: cl.FabricView) -> set[PortKey]:
        """Bring the checked cables in line with the topology and drop results of ports that left
        the store; returns the ports to re-check: those whose cable appeared or went, and cabled
        ends whose data left the store."""
        links = set()
        for raw, _ in view.topology.items():
            a = view.canonical(raw)
            b = view.peer(a)
            if b is not None and (a[0] in self._scope or b[0] in self._scope):
                links.add((a, b) if a <= b else (b, a))
        changed = links ^ self._links
        self._links = links
        ends = {pk for ln in links for pk in ln}
        gone = [key for key in self._results
                if (key[0] == "link" and key[1] not in links)
                or (key[0] == "port" and key[1] not in ends and view.entry(key[1]) is None)]
        for key in gone:
            self._drop(key)
        left = {key[1] for key in self._results if key[0] == "port" and view.entry(key[1]) is None}  # still cabled: now unknown
        return left | {pk for ln in changed for pk in ln if pk in ends or view.entry(pk) is not None}

    def _drop(self, key: Key) -> None:
        for r in self._results.pop(key, ()):
            self._counts[r.check][r.status] -= 1
        self._failing.pop(key, None)
        self._hot.pop(key, None)

    def _update(self, view: cl.FabricView, ports: Iterable[PortKey], links: Iterable[tuple[PortKey, PortKey]]) -> None:
        """Re-check ``ports`` and ``links``; explanations are settled per link (its results and
        both ends') and per uncabled port, which is all one explanation can span."""
        fresh: dict[Key, list[cl.Result]] = {("port", pk): cl.port_results(view, pk) for pk in ports}
        groups: list[list[cl.Result]] = []
        cabled: set[PortKey] = set()
        for a, b in links:
            fresh[("link", (a, b))] = got = cl.link_results(view, a, b)
            cabled.update((a, b))
            groups.append(got + fresh.get(("port", a), self._results.get(("port", a), []))
                          + fresh.get(("port", b), self._results.get(("port", b), [])))
        groups += [rs for (kind, pk), rs in fresh.items() if kind == "port" and pk not in cabled]
        for g in groups:
            for r in g:
                r.covered_by = None
            cl.mark_explained(g)
        counts = self._counts
        for key, rs in fresh.items():
            for r in self._results.get(key, ()):
                counts[r.check][r.status] -= 1
            for r in rs:
                counts[r.check][r.status] += 1
            self._results[key] = rs
            bad = [r for r in rs if r.reported]
            if bad:
                self._failing[key] = bad
            else:
                self._failing.pop(key, None)
            named = {end for r in rs if r.status == cl.FAIL for end in ((r.device, r.port), (r.peer_device, r.peer_port))
                     if end[0] is not None}
            if named:
                self._hot[key] = named  # type: ignore[assignment]
            else:
                self._hot.pop(key, None)

    @staticmethod
    def _observe(r: cl.Result) -> MisconfigObservation:
        return MisconfigObservation(
            kind="misconfig", severity="critical" if r.lossless_traffic else "warning", device=r.device, port=r.port,
            priority=r.priority, summary=r.summary, evidence=dict(r.evidence), check=r.check)
