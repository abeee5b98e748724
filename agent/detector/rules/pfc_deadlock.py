"""pfc_deadlock: a cycle of ports that pause each other with nothing moving.

Built on the per-priority paused-by graph (:mod:`fabricmon.agent.detector.pausegraph`). A
cyclic buffer dependency is necessary but not sufficient for a deadlock (Hu et al.,
"Deadlocks in Datacenter Networks: Why Do They Form, and How to Avoid Them", HotNets 2016),
so a cycle counts only when every member is stuck:

* **From counters** (``raise_polls`` 2): a strongly connected component of >= 2 ports in which EVERY
  member is stuck: rx pause fraction >= ``storm_pause_fraction`` (0.95) or pause frames at
  the keep-paused floor, AND no transmit progress, AND a backlog, on a link that stayed up.
  Heavy load or incast keeps ports transmitting, so they never enter the sub-graph: the
  zero-false-deadlock target rests on requiring every member condition.
* **Broken by watchdogs** (raised in 1 poll): every member's PFC watchdog fired within
  max(``watchdog_window_s`` = 10 s, the poll interval) and the ports form a cycle: a
  deadlock the watchdogs broke.

Each member is reported with role ``member`` and the cycle's priority; one finding per
member, and the storm rule stays silent for them and for ports blocked behind the cycle.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from fabricmon.agent.detector import DetectContext, Observation, Rule
from fabricmon.agent.detector.rules._pfc import PFC_DEFAULTS


class PfcDeadlockRule(Rule):
    name = "pfc_deadlock"
    kinds = ("pfc_deadlock",)
    raise_polls = 2
    clear_polls = 2
    defaults: dict[str, Any] = dict(PFC_DEFAULTS)
    pfc_use = "owner"

    def evaluate(self, ctx: DetectContext) -> Iterable[Observation]:
        analysis = self.pfc.analyze(ctx)
        fresh = ctx.updated_devices
        for d in analysis.deadlocks:
            names = [f"{m.pk[0]}:{m.pk[1]}" for m in d.members]
            need = 1 if d.watchdog else self.raise_polls
            how = "broken by PFC watchdogs" if d.watchdog else "all paused with no transmit progress"
            for m in d.members:
                if m.pk[0] not in fresh:
                    continue
                yield Observation(
                    kind="pfc_deadlock", severity="critical", device=m.pk[0], port=m.pk[1], priority=d.prio, role="member",
                    summary=f"PFC deadlock on priority {d.prio}: cycle of {len(names)} ports ({how}). First break the "
                            f"cycle (a routing loop or a down link rerouting lossless traffic): check the routes through "
                            f"{', '.join(names[:4])}",
                    evidence={**m.evidence(), "cycle": names, "watchdog_broken": d.watchdog, "blocked_behind": d.blocked_behind},
                    raise_polls=need,
                )
