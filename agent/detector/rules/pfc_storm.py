"""pfc_storm: a priority stuck by pause, reported as one tree (origin + victims), and the switch
PFC watchdogs that disagree with their ports' counters (role ``watchdog``).

Reads the ``pfc`` analysis (:mod:`fabricmon.agent.detector.analyses.pfc`: the per-port
classification, the paused-by graph, trees and coverage; the watchdog cross-check of
:mod:`fabricmon.agent.detector.analyses.pfc_watchdog`). Signals:

* **Device-confirmed** (raised in 1 poll): a switch PFC watchdog storm event on the port
  and priority (delta of ``pfc_watchdog_storms`` > 0 or ``pfc_watchdog_stormed`` = 1) that the
  port's own counters do not contradict, or a host NIC pause-storm event
  (``tx_pause_storm_error_events`` -> critical, ``tx_pause_storm_warning_events`` -> warning).
  A NIC event marks the NIC as the origin: it is the port that kept sending pause.
* **A NIC's own pause and drain** (``raise_polls``; 1 when the interval is at least
  ``fast_raise_dt``): a host NIC that sent pause at the storm level while it received next
  to nothing on that priority is the origin, with no storm counter and no switch polled
  (:func:`~fabricmon.agent.detector.analyses.pfc_state.nic_stall`).
* **From pause time** (``raise_polls``, default 2; 1 when the interval is at least
  ``fast_raise_dt`` = 10 s): rx pause fraction >= ``storm_pause_fraction``
  (0.95; SONiC's Mellanox watchdog test uses 0.99, sonic-swss ``pfc_detect_mellanox.lua``) AND
  no transmit progress on the priority's queue (no
  ``queue_tx_packets``, or ``tx_bytes`` below ``progress_line_fraction`` = 1 % of line rate)
  AND (occupancy > 0 or drops).
* **From pause frames only** (``s2b_raise_polls`` = 3: frame counts are a weaker signal
  than pause time, so one more poll; the test's shape is SONiC's Broadcom one, sonic-swss
  ``pfc_detect_broadcom.lua``): pause frames that can have held the port the whole interval
  (the keep-paused rate of IEEE 802.1Qbb quanta), no XOFF->XON transition, no progress, backlog.

With a topology, stormed ports are grouped by the origin they drain to (the paused-by
graph's sink): the origin is reported with role ``origin`` and every stormed port behind it
with role ``victim``, all of kind ``pfc_storm`` and the tree's priority. The origin is the
pauser (a port that sends pause without being paused) when it is polled, whichever end of
the cable counts what: the evidence's ``pause_edge`` says who sends XOFF, who receives it and
who still transmits. When the pauser is a switch port, the egress it keeps paused is a victim
(its switch's stuck egress). A confirmed tree then covers every port its pause reaches in the
paused-by graph, however partly paused (spreading is graded: Guo et al., SIGCOMM 2016): a
reached port paused for a majority of the interval (``graph_pause_fraction``) is a victim too,
and stays one while the storm reaches it (``victim_hold``); the rest, and hosts the agent
does not poll that their switch port keeps pausing, are the origin's evidence
(``also_paused``). ``victims_lost`` says per victim what it lost. Victims are graded: critical
when stuck (or paused at the storm level), warning when partly paused; a victim seen only
through frame counts is paused at most what its frames can hold. Every storm finding says in
``evidence.watchdog`` whether the port's watchdog acted. Without a topology each stormed port
is reported alone with role None. Ports in a PFC deadlock cycle, or blocked only behind one,
are left to ``pfc_deadlock``.

**Watchdogs** (role ``watchdog``, device/port/priority the watchdog's queue, ``raise_polls``
2): every watchdog the cross-check finds disagreeing with its port's counters (cycling,
unfounded, stale, frozen, silent: pfc_watchdog.py), with the checks in ``evidence.checks`` and
in words. Critical when it holds a queue stormed that no storm holds (stale: it drops traffic
for nothing), else warning (the storm itself, when there is one, is its own finding).

Parameters: ``s2b_raise_polls`` and ``fast_raise_dt`` here; the classification's
(``storm_pause_fraction``, ``progress_line_fraction``, ...) are the ``pfc`` analysis's, under
``detector: {pfc: ...}``. The PFC gauges (``fabricmon_port_pause_ratio``,
``fabricmon_port_pfc_state``) are the analysis's too.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pydantic import Field

from fabricmon.agent.detector.analyses.pfc import PfcAnalysis, Tree
from fabricmon.agent.detector.analyses.pfc_state import PfcParams, PfcState
from fabricmon.agent.detector.analyses.pfc_watchdog import Verdict, acted
from fabricmon.agent.detector.base import DetectContext, Observation, Rule, RuleParams, Seconds

MAX_LISTED = 20


class PfcStormParams(RuleParams):
    # Frame counts are a weaker signal than pause time: one poll more (sonic-swss pfc_detect_broadcom.lua's shape).
    s2b_raise_polls: int = Field(3, ge=1, le=1000)
    # Raise in 1 poll when the interval is this long: 10 s of continuous pause with nothing
    # sent is 50x SONiC's default 200 ms detection time; a second poll adds no certainty.
    fast_raise_dt: Seconds = 10.0


def _name(pk: tuple[str, str] | None) -> str | None:
    return f"{pk[0]}:{pk[1]}" if pk else None


def _lost(st: PfcState) -> str:
    """What a port the storm reaches lost, in words: the share of the interval its
    transmitter was held on the priority (it could send at most the rest), from its own pause
    time, or what its pause frames can have held, or its peer's when it is not polled."""
    if st.rx_frac is not None:
        held = f"paused {st.rx_frac:.0%} of the interval, so it could send on priority {st.prio} at most {1 - st.rx_frac:.0%} of the time"
    elif st.rx_fps is not None and (bound := st.rx_bound) is not None:
        held = (f"receiving {st.rx_fps:.0f} pause frames/s on priority {st.prio}, which can have held it at most {bound:.0%} of "
                f"the interval (one frame holds it at most 65535 quanta: {st.keep_fps:.0f} frames/s hold it all the time)")
    elif st.rx_fps is not None:
        held = f"receiving {st.rx_fps:.0f} pause frames/s on priority {st.prio}"
    else:
        held = f"paused on priority {st.prio}"
    if not st.has_data:
        return f"{held} (not polled: from its peer's pause counters)"
    if st.progress is False:
        return f"{held}, and it sent nothing on it"
    return held


def _edge(tree: Tree) -> str | None:
    """The origin's pause edge from both ends' counters: who sends XOFF, who receives it, who
    still transmits."""
    if not tree.pauser_polled or tree.origin_state is None:
        return None
    pauser, paused = tree.origin_state, tree.peer_state
    sent = pauser.tx_bound
    words = [f"{_name(tree.origin)} sends XOFF on priority {tree.prio}"
             + (f" (up to {sent:.0%} of the interval by its own counters)" if sent is not None else "")
             + (", and is not paused itself" if not pauser.paused else "")]
    if paused is not None:
        held = f"paused {paused.rx_frac:.0%}" if paused.rx_frac is not None else f"paused up to {paused.rx_bound or 0:.0%}"
        words.append(f"{_name(paused.pk)} receives it ({held}{', and sent nothing on the priority' if paused.progress is False else ''})")
    if pauser.tx_rate is not None:
        words.append(f"{_name(tree.origin)} still transmits {pauser.tx_rate * 8 / 1e9:.1f} Gb/s")
    return "; ".join(words)


def _first_step(tree: Tree, faces_pauser: bool) -> str:
    """What to do first about a storm, in words: the device that keeps sending pause is the
    one to fix (a NIC or host that cannot drain its receive buffer), not its victims.
    ``faces_pauser``: the origin is the switch port facing a pauser the agent does not poll."""
    if faces_pauser and tree.origin_peer is not None:
        return (f"check {tree.origin_peer[0]} {tree.origin_peer[1]} (not monitored), which keeps pausing "
                f"{tree.origin[0]} {tree.origin[1]}; isolate that link if it does not recover")
    if tree.stall is not None or tree.nic is not None:
        return f"check {tree.origin[0]} {tree.origin[1]}: it keeps sending pause (a stalled NIC or host); isolate it if it does not recover"
    return (f"check {tree.origin[0]} {tree.origin[1]}: it keeps sending pause without being paused (a stalled host behind it, or "
            f"its own stuck backpressure); isolate it if it does not recover")


def _origin_evidence(tree: Tree) -> dict[str, Any]:
    """The origin's evidence: its victims and what they lost, the ports it partly pauses, its
    cable peer, the NIC's own event, the origin port's own numbers, the other end's under
    ``paused_end``, the pause edge and what the watchdog did."""
    victims = tree.victims
    ev: dict[str, Any] = {"victims": len(victims), "victim_ports": [_name(v.pk) for v in victims[:MAX_LISTED]],
                          "victims_lost": {_name(v.pk): _lost(v) for v in victims[:MAX_LISTED]}}
    if tree.covered:  # reached but partly paused, or not polled: the storm's pause all the same
        ev["also_paused"] = {_name(c.pk): _lost(c) for c in tree.covered[:MAX_LISTED]}
    if tree.origin_peer is not None:
        ev["origin_peer"] = _name(tree.origin_peer)
    if tree.nic is not None:
        ev["nic_pause_storm"] = tree.nic
    if tree.stall is not None:
        s = tree.stall
        ev["nic_stall"] = (f"sent pause {s.sent:.0%} of the interval and received {s.drained:.2%} of line rate on priority "
                           f"{s.prio} ({s.by})")
    if tree.origin_state is not None:
        ev.update(tree.origin_state.evidence())
    if tree.peer_state is not None:
        ev["paused_end"] = {"port": _name(tree.peer_state.pk), **tree.peer_state.evidence()}
    edge = _edge(tree)
    if edge:
        ev["pause_edge"] = edge
    switch_end = tree.origin_state if tree.nic is None and tree.stall is None else tree.peer_state
    ev["watchdog"] = acted(switch_end if switch_end is not None and switch_end.has_data else tree.peer_state)
    return ev


def _faces_pauser(tree: Tree) -> bool:
    return tree.origin_peer is not None and not tree.pauser_polled and tree.nic is None


def _origin_summary(tree: Tree) -> str:
    """The storm in one sentence: priority, origin and why, how far it spread, what to do first."""
    victims = tree.victims
    prio_txt = f"priority {tree.prio}" if tree.prio is not None else "a lossless priority"
    faces = _faces_pauser(tree)
    if tree.stall is not None:
        s = tree.stall
        why = f"its NIC sent pause {s.sent:.0%} of the interval and drained {s.drained:.2%} of line rate"
    elif tree.nic:
        why = f"NIC pause-storm {tree.nic} event"
    elif faces:
        why = f"facing {_name(tree.origin_peer)}, which keeps it paused"
    elif tree.pauser_polled and tree.peer_state is not None:
        why = f"it keeps {_name(tree.peer_state.pk)} paused and is not paused itself"
    else:
        why = "pause source"
    spread = f", {len(victims)} victim port(s)" if victims else ""
    if tree.covered:
        spread += f" and {len(tree.covered)} more port(s) partly paused or not polled"
    return (f"PFC storm on {prio_txt} originates at {tree.origin[0]} {tree.origin[1]} ({why}){spread}. "
            f"First {_first_step(tree, faces)}")


def _victim_severity(st: PfcState, p: PfcParams) -> str:
    """Graded by how much the victim was held: critical when stuck (or at the storm level), else
    warning; a frames-only victim by what its pause frames can have held at most."""
    if st.stormed or (st.rx_frac is not None and st.rx_frac >= p.storm_pause_fraction):
        return "critical"
    return "warning"


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
        if st.dt is not None and st.dt >= self.params.fast_raise_dt:
            return 1
        return self.raise_polls

    def evaluate(self, ctx: DetectContext) -> Iterable[Observation]:
        pfc = ctx.analysis(PfcAnalysis)
        result = pfc.result
        fresh = ctx.updated_devices
        for tree in result.trees:
            yield from self._tree(tree, fresh, pfc.p)
        for st in result.unattributed:
            if st.pk[0] in fresh:
                yield Observation(
                    kind="pfc_storm", severity="critical", device=st.pk[0], port=st.pk[1], priority=st.prio,
                    summary=f"priority {st.prio} on {st.pk[0]} {st.pk[1]} is stuck: paused with no transmit progress",
                    evidence={**st.evidence(), "watchdog": acted(st)}, raise_polls=self._need(st),
                )
        for v in result.watchdogs:
            if v.st.pk[0] in fresh:
                yield self._watchdog(v)

    def _origin_need(self, tree: Tree) -> tuple[int, str]:
        """(polls to raise the origin, its severity). A NIC's own storm event raises at once; a
        tree resting on data from two poll cycles waits for the next poll (:attr:`Tree.mixed`)."""
        ost, pst = tree.origin_state, tree.peer_state  # the paused end of the origin's cable: the origin's evidence too
        own = ost is not None and ost.stormed and not ost.inferred
        needs = [self._need(v) for v in tree.victims]
        if own:
            needs.append(self._need(ost))  # type: ignore[arg-type]
        if pst is not None and (pst.stormed or pst.held):
            own = True
            needs.append(self._need(pst))
        if tree.nic in ("error", "warning"):
            return 1, "critical" if tree.nic == "error" or tree.victims or own else "warning"
        if tree.stall is not None:
            dt = ost.dt if ost is not None else None
            needs.append(1 if dt is not None and dt >= self.params.fast_raise_dt else self.raise_polls)
        return max(min(needs) if needs else self.raise_polls, 2 if tree.mixed else 1), "critical"

    def _tree(self, tree: Tree, fresh: set[str], p: PfcParams) -> Iterable[Observation]:
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
            ev = {**v.evidence(), "origin": origin, "lost": _lost(v), "watchdog": acted(v)}
            yield Observation(
                kind="pfc_storm", severity=_victim_severity(v, p), device=v.pk[0], port=v.pk[1], priority=v.prio,
                role="victim", evidence=ev, raise_polls=max(self._need(v), floor),
                summary=f"{v.pk[0]} {v.pk[1]} priority {v.prio} is held by a PFC storm from {origin}: {_lost(v)}. "
                        f"It is a victim: fix the origin, not this port",
            )

    @staticmethod
    def _watchdog(v: Verdict) -> Observation:
        st = v.st
        return Observation(
            kind="pfc_storm", severity="critical" if "stale" in v.checks else "warning", device=st.pk[0], port=st.pk[1],
            priority=st.prio, role="watchdog", raise_polls=2,
            summary=f"the PFC watchdog of {st.pk[0]} {st.pk[1]} priority {st.prio} disagrees with the port's own counters: "
                    f"{'; '.join(v.words)}. First check the watchdog's platform and version against its known issues "
                    f"(sonic-buildimage#29203, #19067, #29221, sonic-swss#4581) and trust the port's pause counters",
            evidence={**st.evidence(), "checks": list(v.checks), "disagreement": list(v.words), "watchdog": acted(st)},
        )
