"""pfc_deadlock: a cycle of ports that pause each other with nothing moving.

Reads the ``pfc`` analysis's deadlocks (:mod:`fabricmon.agent.detector.analyses.pfc`: the
per-priority paused-by graph of :mod:`fabricmon.agent.detector.pausegraph`). A
cyclic buffer dependency is necessary but not sufficient for a deadlock (Hu et al.,
"Deadlocks in Datacenter Networks: Why Do They Form, and How to Avoid Them", HotNets 2016),
so a cycle counts only when every member is stuck:

* **From counters** (``raise_polls`` 2): a strongly connected component of >= 2 ports in which EVERY
  member is stuck: rx pause fraction >= ``storm_pause_fraction`` (0.95) or pause frames at
  the keep-paused floor, AND no transmit progress, AND a backlog, on a link that stayed up.
  Heavy load or incast keeps ports transmitting, so they never enter the sub-graph: the
  zero-false-deadlock target rests on requiring every member condition.
* **Broken by watchdogs** (raised in 1 poll): every member's PFC watchdog fired within
  max(``watchdog_window`` = 10 s, the poll interval) and the ports form a cycle: a
  deadlock the watchdogs broke.
* **Recovery cycling** (decided over a window of polls, like a leaking credit loop): a
  watchdog breaks the deadlock, the routes that formed it are still there, and it re-forms.
  A member may then be in a recovered phase when polled; one that is paused now (graph
  level, with a backlog) and was stuck or watchdog-fired within ``deadlock_window`` (60 s)
  stays a member, so the cycle is one finding over its whole life (evidence
  ``recovery_cycling``).

* **In the poll it forms** (``raise_polls`` 2, counted from that poll): a cycle fills one
  egress after the other, so in the interval it closes one member is stuck and the others are
  paused only part of it. The cycle is judged once over every port paused in the pass, before
  any of them is called a storm: a cycle of paused ports with a backlog, one of them stuck,
  is a deadlock forming during the poll cycle it first appears in (its devices report one
  after another); one that keeps a member moving after that is draining, no deadlock.

Each member is reported with role ``member`` and the cycle's priority; one finding per
member, and the storm rule stays silent for them and for ports blocked behind the cycle.
Every port whose paused-by path leads into the cycle, at any grade (the senders into a loop
that watchdogs keep breaking are paused part of each interval), and hosts the agent does not
poll that their switch port keeps pausing, are the deadlock's pause (evidence
``paused_behind``): ``congestion`` does not report them separately.

The thresholds named here are the ``pfc`` analysis's parameters (``detector: {pfc: ...}``).
"""

from __future__ import annotations

from collections.abc import Iterable

from fabricmon.agent.detector.analyses.pfc import PfcAnalysis
from fabricmon.agent.detector.analyses.pfc_state import PfcState
from fabricmon.agent.detector.base import DetectContext, Observation, Rule


def _member_words(m: PfcState) -> str:
    """One member's state in words, for the evidence."""
    parts = []
    if m.rx_frac is not None:
        parts.append(f"paused {m.rx_frac:.0%} of the interval")
    if m.progress is False:
        parts.append("sent nothing on the priority")
    if m.wd_recent:
        parts.append("its PFC watchdog fired")
    return ", ".join(parts) or "paused"


class PfcDeadlockRule(Rule):
    name = "pfc_deadlock"
    kinds = ("pfc_deadlock",)
    needs = ("pfc",)
    raise_polls = 2
    clear_polls = 2

    def evaluate(self, ctx: DetectContext) -> Iterable[Observation]:
        fresh = ctx.updated_devices
        for d in ctx.analysis(PfcAnalysis).result.deadlocks:
            names = [f"{m.pk[0]}:{m.pk[1]}" for m in d.members]
            need = 1 if d.watchdog else self.raise_polls
            if d.watchdog:
                how = "its members' PFC watchdogs break it; it re-forms while the routes that made it remain"
            elif d.cycling:
                how = "watchdog recovery does not hold: the members are stuck again or still paused between recoveries"
            elif d.forming:
                how = "it closed during this interval: a member already sends nothing, the others are filling"
            else:
                how = "all paused with no transmit progress"
            members = {n: _member_words(m) for n, m in zip(names, d.members, strict=True)}
            # What waits behind the cycle, at any grade (hosts the agent does not poll too):
            # its pause is the deadlock's, so no separate congestion is reported for it.
            behind = sorted(f"{c.pk[0]}:{c.pk[1]}" for c in d.covered)
            waiting = f"; {len(behind)} more port(s) wait behind it ({', '.join(behind[:4])}{', ...' if len(behind) > 4 else ''})" \
                if behind else ""
            for m in d.members:
                if m.pk[0] not in fresh:
                    continue
                yield Observation(
                    kind="pfc_deadlock", severity="critical", device=m.pk[0], port=m.pk[1], priority=d.prio, role="member",
                    summary=f"PFC deadlock on priority {d.prio}: cycle of {len(names)} ports ({how}){waiting}. First break the "
                            f"cycle (a routing loop or a down link rerouting lossless traffic): check the routes through "
                            f"{', '.join(names[:4])}",
                    evidence={**m.evidence(), "cycle": names, "watchdog_broken": d.watchdog, "recovery_cycling": d.cycling,
                              "forming": d.forming,
                              "blocked_behind": d.blocked_behind, "members": members, "paused_behind": behind[:20]},
                    raise_polls=need,
                )
