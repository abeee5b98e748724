"""credit_deadlock: InfiniBand ports stalled for credits in a cycle, or alone.

Reads the ``ib`` analysis (:mod:`fabricmon.agent.detector.analyses.ib`), which decides from
the counters which ports are blocked (stalled, or at the level of a loop that leaks through
head-of-queue discards), builds the credit graph and finds its incidents; the physics, the
thresholds and their sources are documented there, and the thresholds are set under
``detector: {ib: ...}``.

* A **credit loop** (a strongly connected component of >= 2 stalled or loop-level ports):
  ``credit_deadlock``, critical, role ``member``, one finding per member port, evidence
  ``cycle`` (the member ports), ``blocked_because`` and ``members``: per member its wait, what
  it sent (share of line rate) and its head-of-queue discards. ``raise_polls`` 2.
* A **stalled** port outside any cycle (it holds data and sends nothing: a dead or slow
  receiver, a stuck HCA): ``credit_deadlock``, critical, role ``stalled`` (fabricmon's addition
  to the finding vocabulary, docs/recording-format.md), evidence ``stalled: true`` and
  ``blocked_because`` and, when waits behind it form cycles (a congestion tree, not a loop),
  ``congestion_tree``, ``raise_polls`` 2. It is the same fault class as a loop (credits that
  never come back, HOQ-lifetime drops), so it raises the same alert (FabricmonCreditDeadlock),
  never a congestion alert: congestion is a port that still transmits.

Both carry the ``incident`` id the analysis exports as ``fabricmon_port_incident``;
``packet_loss`` puts the same id on the discards of those ports and ``congestion`` leaves
their XmitWait alone: one fault, one incident.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from fabricmon.agent.detector.analyses.ib import CongestionTree, CreditLoop, IbAnalysis, Stall
from fabricmon.agent.detector.base import DetectContext, Observation, Rule
from fabricmon.core.topology import Topology


def _loop_summary(loop: CreditLoop) -> str:
    """The loop in plain words: the cycle, how long its members waited and how little they
    sent, the discards, and what to do first."""
    members = loop.numbers.values()
    waits = [m["xmit_wait_fraction"] for m in members if "xmit_wait_fraction" in m]
    sent = [m["sent_line_fraction"] for m in members if "sent_line_fraction" in m]
    how = f" waited {min(waits):.0%}-{max(waits):.0%} of the interval" if waits else " held data"
    trickle = f" and sent at most {max(sent):.1%} of line rate" if sent else " and sent almost nothing"
    lost = (f"; {int(loop.discards)} packets discarded at the queue heads this interval (head-of-queue lifetime: the "
            f"loop leaks, it is not frozen)") if loop.discards else ""
    return (f"InfiniBand credit loop through {', '.join(loop.names)}: each port waits for credits from the next; they{how}"
            f"{trickle}{lost}. First break the loop: check the routing through these ports (ibdiagnet -r "
            f"reports credit loops) and drain one member link")


def _stall_observation(stall: Stall, topo: Topology, trees: list[CongestionTree]) -> Observation:
    """A stalled port, with the cycles of waits behind it that are its congestion tree, not a loop."""
    pk = stall.port
    peer = topo.peer(*pk)
    toward = f" toward {peer[0]} {peer[1]}" if peer else ""
    first = f"check {peer[0]} {peer[1]} (a dead or slow receiver)" if peer else "check the receiver on this link"
    ev: dict[str, Any] = {**stall.evidence, "incident": stall.incident}
    tree = sorted({f"{d}:{p}" for t in trees if pk in t.roots for d, p in t.cycle})
    behind = ""
    if tree:
        ev["congestion_tree"] = tree
        behind = (f"; {len(tree)} ports behind it wait in cycles without discarding: its congestion tree, not a credit "
                  f"loop")
    return Observation(
        kind="credit_deadlock", severity="critical", device=pk[0], port=pk[1], role="stalled",
        summary=f"{pk[0]} port {pk[1]} is stalled{toward}: it holds data and sends nothing "
                f"({'; '.join(stall.evidence['blocked_because'])}){behind}. First {first}",
        evidence=ev,
    )


class CreditDeadlockRule(Rule):
    name = "credit_deadlock"
    kinds = ("credit_deadlock",)
    needs = ("ib",)
    raise_polls = 2
    clear_polls = 2

    def evaluate(self, ctx: DetectContext) -> Iterable[Observation]:
        ib = ctx.analysis(IbAnalysis)
        fresh = ctx.updated_devices
        for loop in ib.loops:
            summary = _loop_summary(loop)
            for pk in loop.members:
                if pk[0] not in fresh:
                    continue
                ev: dict[str, Any] = {**loop.evidence[pk], "cycle": loop.names, "incident": loop.incident,
                                      "loop_discards": loop.discards, "members": loop.numbers}
                yield Observation(kind="credit_deadlock", severity="critical", device=pk[0], port=pk[1], role="member",
                                  summary=summary, evidence=ev)
        for stall in ib.stalls:
            if stall.port[0] in fresh:
                yield _stall_observation(stall, ctx.topology, ib.trees)
