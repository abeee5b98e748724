"""The paused-by graph, one implementation for the agent's PFC rules and ``fabricmon correlate``.

PFC (IEEE 802.1Qbb) pauses a priority hop by hop: a port whose transmitter is paused is
held by its cable peer, and that peer's device sends pause because some egress of the same
device cannot drain into its own next hop. So, per priority, with nodes the paused ports:

* a port ``e`` waits on every node of ``peer(e)``'s device except ``peer(e)`` itself
  (:meth:`PausedBy.successors`, no hairpin: traffic does not leave by the port it came in
  on). Which egress blocks which ingress is not counted by any standard MIB, so this
  over-approximates;
* for deadlocks the hairpin counts (:meth:`PausedBy.successors` with ``hairpin=True``): a
  routing loop does send traffic back out of the port it came in on, and loops through a
  leaf close that way (leaf -> spine -> leaf).

A **sink** (a node with nowhere further to wait) is where the pause starts. A **deadlock**
is a strongly connected set of >= 2 stuck ports with no path to a sink: every member waits
on another member (Hu et al., "Deadlocks in Datacenter Networks: Why Do They Form, and How
to Avoid Them", HotNets 2016). Graph walks are iterative (:func:`tarjan_scc`), so a tree of
thousands of ports does not hit Python's recursion limit.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import Any

from fabricmon.agent.detector.graph import tarjan_scc

PortKey = tuple[str, str]


class PausedBy:
    """Edges of one priority's paused-by graph over ``nodes`` (in the caller's order)."""

    __slots__ = ("_cache", "by_device", "keep", "peer")

    def __init__(self, nodes: Iterable[PortKey], peer: Callable[[PortKey], PortKey | None],
                 keep: Callable[[PortKey], bool] = lambda _pk: True) -> None:
        """``peer``: the cable peer of a port (None when unknown); ``keep``: whether a node can
        be waited on (a port with a backlog or a watchdog event: an empty queue blocks nobody)."""
        self.peer = peer
        self.keep = keep
        self.by_device: dict[str, list[PortKey]] = {}
        for pk in nodes:
            self.by_device.setdefault(pk[0], []).append(pk)
        self._cache: dict[PortKey, list[PortKey]] = {}

    def successors(self, pk: PortKey, hairpin: bool = False) -> list[PortKey]:
        """The nodes ``pk`` waits on: the blocking nodes of its peer's device (without the
        peer itself unless ``hairpin``)."""
        if not hairpin:
            got = self._cache.get(pk)
            if got is not None:
                return got
        pe = self.peer(pk)
        keep = self.keep
        out = [] if pe is None else [q for q in self.by_device.get(pe[0], ()) if (hairpin or q != pe) and keep(q)]
        if not hairpin:
            self._cache[pk] = out
        return out


def deadlock_cycles(stuck: Sequence[PortKey], succ: Callable[[PortKey], Iterable[PortKey]]) -> list[list[PortKey]]:
    """Strongly connected sets of >= 2 ``stuck`` ports that cannot drain.

    A set drains when it reaches a stuck port with nowhere further to wait (a storm
    origin's port): then the waiting is explained by that storm, not a deadlock. This keeps
    two storms in opposite directions over one link from looking like a two-port cycle.
    """
    stuck_set = set(stuck)
    drains: dict[PortKey, bool] = {}
    out: list[list[PortKey]] = []
    for comp in tarjan_scc(stuck, succ):  # sinks first
        members = set(comp)
        outs = [q for pk in comp for q in succ(pk) if q in stuck_set and q not in members]
        drain = (len(comp) == 1 and not outs and not any(q in members for q in succ(comp[0]))) or any(drains[q] for q in outs)
        for pk in comp:
            drains[pk] = drain
        if len(comp) >= 2 and not drain:
            out.append(comp)
    return out


def best_sinks(nodes: Sequence[PortKey], succ: Callable[[PortKey], Iterable[PortKey]], score: Callable[[PortKey], Any],
               behind: set[PortKey] = frozenset(), origin_ok: Callable[[PortKey], bool] = lambda _pk: True,
               ) -> tuple[dict[PortKey, PortKey | None], dict[PortKey, bool]]:
    """For every node, the best-scored sink it reaches (None: none), and whether it reaches a
    node in ``behind`` (a deadlock member: the port is blocked behind the cycle). A sink for
    which ``origin_ok`` is False (its pauser is itself paused) stands for no origin: what
    reaches it waits on something further on, so it counts as blocked too.

    One pass over the strongly connected components, sinks first: a component's best sink
    is the best of its own sinks and its successors' best sinks.
    """
    comp_of: dict[PortKey, int] = {}
    best: list[PortKey | None] = []
    blocked: list[bool] = []
    for i, comp in enumerate(tarjan_scc(nodes, succ)):
        for pk in comp:
            comp_of[pk] = i
        cands: list[Hashable] = []
        is_behind = any(pk in behind for pk in comp)
        for pk in comp:
            nxt = succ(pk)
            if not nxt and len(comp) == 1:
                if origin_ok(pk):
                    cands.append(pk)
                else:
                    is_behind = True
            for q in nxt:
                j = comp_of.get(q)
                if j is None or j == i:
                    continue
                if best[j] is not None:
                    cands.append(best[j])
                is_behind = is_behind or blocked[j]
        best.append(max(cands, key=score) if cands else None)  # type: ignore[arg-type]
        blocked.append(is_behind)
    return {pk: best[i] for pk, i in comp_of.items()}, {pk: blocked[i] for pk, i in comp_of.items()}
