"""pfc_storm: a priority stuck by pause, reported as one tree (origin + victims).

Reads the ``pfc`` analysis (:mod:`fabricmon.agent.detector.analyses.pfc`: the per-port
classification, the paused-by graph, trees and coverage). Signals:

* **Device-confirmed** (raised in 1 poll): a switch PFC watchdog storm event on the port
  and priority (delta of ``pfc_watchdog_storms`` > 0 or ``pfc_watchdog_stormed`` = 1), or a
  host NIC pause-storm event (``tx_pause_storm_error_events`` -> critical,
  ``tx_pause_storm_warning_events`` -> warning). A NIC event marks the NIC as the origin:
  it is the port that kept sending pause.
* **From pause time** (``raise_polls``, default 2; 1 when the interval is at least
  ``fast_raise_dt_s`` = 10 s): rx pause fraction >= ``storm_pause_fraction``
  (0.95; SONiC's Mellanox watchdog test uses 0.99, sonic-swss ``pfc_detect_mellanox.lua``) AND
  no transmit progress on the priority's queue (no
  ``queue_tx_packets``, or ``tx_bytes`` below ``progress_line_fraction`` = 1 % of line rate)
  AND (occupancy > 0 or drops).
* **From pause frames only** (``s2b_raise_polls`` = 3: frame counts are a weaker signal
  than pause time, so one more poll; the test's shape is SONiC's Broadcom one, sonic-swss
  ``pfc_detect_broadcom.lua``): pause frames at or above
  the keep-paused floor, no XOFF->XON transition, no progress, backlog.

With a topology, stormed ports are grouped by the origin they drain to (the paused-by
graph's sink): the origin is reported with role ``origin`` and every stormed port behind it
with role ``victim``, all of kind ``pfc_storm`` and the tree's priority. A confirmed tree
then covers every port its pause reaches in the paused-by graph, however partly paused
(spreading is graded: Guo et al., SIGCOMM 2016): a reached port paused for a majority of the
interval (``graph_pause_fraction``) is a victim too, and stays one while the storm reaches it
(``victim_hold_s``); the rest, and hosts the agent does not poll that their switch port keeps
pausing, are the origin's evidence (``also_paused``). ``victims_lost`` says per victim what it
lost (the share of the interval it was held, so the most it could still send). Without a topology
each stormed port is reported alone with role None. Ports in a PFC deadlock cycle, or
blocked only behind one, are left to ``pfc_deadlock``.

Parameters: ``s2b_raise_polls`` and ``fast_raise_dt_s`` here; the classification's
(``storm_pause_fraction``, ``progress_line_fraction``, ...) are the ``pfc`` analysis's, under
``detector: {pfc: ...}``. The PFC gauges (``fabricmon_port_pause_ratio``,
``fabricmon_port_pfc_state``) are the analysis's too.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pydantic import Field

from fabricmon.agent.detector.analyses.pfc import PfcAnalysis, Tree
from fabricmon.agent.detector.analyses.pfc_state import PfcState
from fabricmon.agent.detector.base import DetectContext, Observation, Rule, RuleParams, Seconds

MAX_LISTED = 20


class PfcStormParams(RuleParams):
    # Frame counts are a weaker signal than pause time: one poll more (sonic-swss pfc_detect_broadcom.lua's shape).
    s2b_raise_polls: int = Field(3, ge=1, le=1000)
    # Raise in 1 poll when the interval is this long: 10 s of continuous pause with nothing
    # sent is 50x SONiC's default 200 ms detection time; a second poll adds no certainty.
    fast_raise_dt_s: Seconds = 10.0


def _name(pk: tuple[str, str] | None) -> str | None:
    return f"{pk[0]}:{pk[1]}" if pk else None


def _lost(st: PfcState) -> str:
    """What a port the storm reaches lost, in words: the share of the interval its
    transmitter was held on the priority (it could send at most the rest), from its own pause
    time, or from its peer's when it is not polled."""
    if st.rx_frac is not None:
        held = f"paused {st.rx_frac:.0%} of the interval, so it could send on priority {st.prio} at most {1 - st.rx_frac:.0%} of the time"
    elif st.rx_fps is not None:
        held = f"receiving {st.rx_fps:.0f} pause frames/s on priority {st.prio}"
    else:
        held = f"paused on priority {st.prio}"
    if not st.has_data:
        return f"{held} (not polled: from its peer's pause counters)"
    if st.progress is False:
        return f"{held}, and it sent nothing on it"
    return held


def _first_step(tree: Tree, faces_pauser: bool) -> str:
    """What to do first about a storm, in words: the device that keeps sending pause is the
    one to fix (a NIC or host that cannot drain its receive buffer), not its victims.
    ``faces_pauser``: the origin is the switch port facing an unmonitored pauser."""
    if faces_pauser and tree.origin_peer is not None:
        return (f"check {tree.origin_peer[0]} {tree.origin_peer[1]} (not monitored), which keeps pausing "
                f"{tree.origin[0]} {tree.origin[1]}; isolate that link if it does not recover")
    return f"check {tree.origin[0]} {tree.origin[1]}: it keeps sending pause (a stalled NIC or host); isolate it if it does not recover"


def _origin_evidence(tree: Tree) -> dict[str, Any]:
    """The origin's evidence: its victims and what they lost, the ports it partly pauses, its
    cable peer, the NIC's own event, and the numbers of both ends of the origin's cable."""
    victims = tree.victims
    ev: dict[str, Any] = {"victims": len(victims), "victim_ports": [_name(v.pk) for v in victims[:MAX_LISTED]],
                          "victims_lost": {_name(v.pk): _lost(v) for v in victims[:MAX_LISTED]}}
    if tree.covered:  # reached but partly paused, or not polled: the storm's pause all the same
        ev["also_paused"] = {_name(c.pk): _lost(c) for c in tree.covered[:MAX_LISTED]}
    if tree.origin_peer is not None:
        ev["origin_peer"] = _name(tree.origin_peer)
    if tree.nic is not None:
        ev["nic_pause_storm"] = tree.nic
    if tree.peer_state is not None:
        ev.update(tree.peer_state.evidence())
    if tree.origin_state is not None:
        ev.update(tree.origin_state.evidence())
    return ev


def _origin_summary(tree: Tree) -> str:
    """The storm in one sentence: priority, origin and why, how far it spread, what to do first."""
    victims = tree.victims
    prio_txt = f"priority {tree.prio}" if tree.prio is not None else "a lossless priority"
    why = f"NIC pause-storm {tree.nic} event" if tree.nic else "pause source"
    faces = tree.origin_peer is not None and not tree.nic and tree.origin_peer not in {v.pk for v in victims}
    if faces:
        why = f"facing {_name(tree.origin_peer)}, which keeps it paused"
    spread = f", {len(victims)} victim port(s)" if victims else ""
    if tree.covered:
        spread += f" and {len(tree.covered)} more port(s) partly paused or not polled"
    return (f"PFC storm on {prio_txt} originates at {tree.origin[0]} {tree.origin[1]} ({why}){spread}. "
            f"First {_first_step(tree, faces)}")


class PfcStormRule(Rule):
    name = "pfc_storm"
    kinds = ("pfc_storm",)
    needs = ("pfc",)
    Params = PfcStormParams
    raise_polls = 2
    clear_polls = 2

    def _need(self, st: PfcState) -> int:
        if st.wd:
            return 1
        if st.stuck == "pause_frames" or (st.held and st.rx_frac is None):
            return int(self.params.s2b_raise_polls)
        if st.dt is not None and st.dt >= self.params.fast_raise_dt_s:
            return 1
        return self.raise_polls

    def evaluate(self, ctx: DetectContext) -> Iterable[Observation]:
        result = ctx.analysis(PfcAnalysis).result
        fresh = ctx.updated_devices
        for tree in result.trees:
            yield from self._tree(tree, fresh)
        for st in result.unattributed:
            if st.pk[0] in fresh:
                yield Observation(
                    kind="pfc_storm", severity="critical", device=st.pk[0], port=st.pk[1], priority=st.prio,
                    summary=f"priority {st.prio} on {st.pk[0]} {st.pk[1]} is stuck: paused with no transmit progress",
                    evidence=st.evidence(), raise_polls=self._need(st),
                )

    def _origin_need(self, tree: Tree) -> tuple[int, str]:
        """(polls to raise the origin, its severity). A NIC's own storm event raises at once; a
        tree resting on data from two poll cycles waits for the next poll (:attr:`Tree.mixed`)."""
        ost, pst = tree.origin_state, tree.peer_state  # the paused end of the origin's cable: the origin's evidence too
        own = ost is not None and ost.stormed and not ost.inferred
        needs = [self._need(v) for v in tree.victims]
        if own:
            needs.append(self._need(ost))  # type: ignore[arg-type]
        if pst is not None and pst.stormed:
            own = True
            needs.append(self._need(pst))
        if tree.nic is not None:
            return 1, "critical" if tree.nic == "error" or tree.victims or own else "warning"
        return max(min(needs) if needs else self.raise_polls, 2 if tree.mixed else 1), "critical"

    def _tree(self, tree: Tree, fresh: set[str]) -> Iterable[Observation]:
        floor = 2 if tree.mixed else 1  # resting on two poll cycles: confirm on the next poll
        if tree.origin[0] in fresh:
            need, severity = self._origin_need(tree)
            yield Observation(
                kind="pfc_storm", severity=severity, device=tree.origin[0], port=tree.origin[1], priority=tree.prio,
                role="origin", evidence=_origin_evidence(tree), raise_polls=need, summary=_origin_summary(tree),
            )
        origin = _name(tree.origin)
        for v in tree.victims:
            if v.pk[0] not in fresh:
                continue
            ev = {**v.evidence(), "origin": origin, "lost": _lost(v)}
            yield Observation(
                kind="pfc_storm", severity="critical", device=v.pk[0], port=v.pk[1], priority=v.prio, role="victim",
                evidence=ev, raise_polls=max(self._need(v), floor),
                summary=f"{v.pk[0]} {v.pk[1]} priority {v.prio} is held by a PFC storm from {origin}: {_lost(v)}. "
                        f"It is a victim: fix the origin, not this port",
            )
