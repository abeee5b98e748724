"""congestion: sustained ECN marking, chronic partial pause, InfiniBand XmitWait.

None of these thresholds has a public universal value (they depend on the workload and the
buffer sizes), so all are parameters and their defaults are inferred, marked so below.
``raise_polls`` 3: congestion must persist for three polls before it is a finding (a burst
of one or two polls is ordinary traffic).

* **ECN** per egress queue, against the fabric's normal (:mod:`fabricmon.agent.detector.baseline`):
  DCQCN marks from a queue threshold on and keeps the queue near it (Zhu et al., SIGCOMM 2015),
  so a healthy converged fabric marks 1-3 % of its RoCE packets every poll (issue 27, measured):
  that is congestion control working, not a finding. A queue is congested when its marking over
  ``ecn_window`` (60 s, at least ``ecn_min_packets`` sent) and in the last interval is at least
  ``max(ecn_warning_ratio, ecn_baseline_factor x normal)`` (5 %, 4x) -> warning, and
  ``max(ecn_critical_ratio, ecn_critical_factor x normal)`` (25 %, 10x) -> critical, where normal
  is the higher of the queue's own usual marking (learned over ``baseline``, 15 min, from
  intervals that were not congested) and the fabric's (the median of the other queues' last
  intervals); then ``raise_polls`` (3) polls of it. The floor sits above the DCQCN band; the
  factors leave a port's ordinary jitter (1-3 %, up to 3x) silent. Judgement calls: no public
  figure says how far above normal marking becomes congestion.
* **Chronic pause** per priority: pause-time fraction over ``pause_window`` (300 s,
  bounded by the store's history) and in the last interval at least
  ``max(pause_warning_fraction, pause_baseline_factor x normal)`` (5 %, 4x) -> warning,
  ``max(pause_critical_fraction, pause_critical_factor x normal)`` (20 %, 10x) -> critical
  (inferred; pause as the sign of a slow receiver: Guo et al., "RDMA over Commodity Ethernet
  at Scale", SIGCOMM 2016; normal as for ECN, the port's own and the fabric's usual pause).
  Brief pauses (DCQCN's backstop for bursts, well under 5 %) stay silent. The receive side
  (the egress being paused) is used; the transmit side (a NIC or ingress pausing its peer, a
  slow receiver) only when the peer's receive side is not monitored, so one link gives one
  finding. An interval that looks like a storm (>= ``storm_pause_fraction`` with no transmit
  progress: the ``pfc`` analysis's storm level) is left to ``pfc_storm``, and so is any port
  (or the cable peer of a port) that a storm tree or a PFC deadlock accounts for on that
  priority, including every partly paused port the storm's pause reaches in the paused-by
  graph and the unpolled hosts a switch port keeps pausing: one pause, one finding. After a
  storm the window starts where the storm last covered the port, so the storm's own pause
  never becomes a later congestion finding.
* **InfiniBand** against the fabric's normal (the ``ib`` analysis's median wait over its ports
  and ``normal_window``: a busy all-to-all makes every port wait a little, and that is how a
  lossless fabric carries load, not a finding). Over ``wait_window`` (60 s): f_wait at least
  ``wait_warning_fraction`` (10 points) above the normal -> warning, and >= ``wait_critical_fraction``
  50 % -> critical (inferred); when the tick is unknown, r_wait at least ``wait_warning_ratio``
  1 % above the r_wait normal -> warning (the highest of Omni-Path's congestion thresholds, 1 % to
  0.01 %: cornelisnetworks/opa-fm ``pa_categories.c``). The last interval must be that far above
  the normal too, and ``raise_polls`` 3 is the duration. A port the ``ib`` analysis put in a
  credit loop or stall incident is left to ``credit_deadlock``; a port that waits behind one (a
  congestion tree: the ports upstream of a stalled receiver, whose waits may even form cycles)
  is reported here as its victim, with ``waiting_behind`` and the root's ``incident``.

Finding priority: the PFC priority (for ECN, the priority the ``fabric:`` layout maps to
the queue; identity by default), None for InfiniBand. Exports
``fabricmon_queue_ecn_mark_ratio{device,port,queue}`` (last interval, 0..1).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pydantic import Field, model_validator

from fabricmon.agent.detector.analyses.fabric import FabricAnalysis
from fabricmon.agent.detector.analyses.ib import IbAnalysis
from fabricmon.agent.detector.analyses.ib_wait import wait_last, wait_window
from fabricmon.agent.detector.analyses.pfc import PfcAnalysis
from fabricmon.agent.detector.base import DetectContext, ExportedGauge, Fraction, Observation, Rule, RuleParams, Seconds
from fabricmon.agent.detector.baseline import Usual
from fabricmon.agent.detector.common import RatioGauge, SubIndex, frac, link_ok, tx_progress, window_frac
from fabricmon.agent.store import PortEntry, PortKey
from fabricmon.core.vocabulary import PriorityMap


class CongestionParams(RuleParams):
    """Levels and windows (inferred, see the module doc); a warning level must not exceed its critical level."""

    # ECN and pause are judged against their normal (module doc); the floors and factors are
    # judgement calls above DCQCN's measured 1-3 % band (issue 27), no public figure.
    ecn_warning_ratio: Fraction = 0.05
    ecn_critical_ratio: Fraction = 0.25
    ecn_baseline_factor: float = Field(4.0, ge=1.0)
    ecn_critical_factor: float = Field(10.0, ge=1.0)
    ecn_window: Seconds = 60.0
    ecn_min_packets: int = 1000  # packets sent in the window before a ratio counts
    pause_warning_fraction: Fraction = 0.05
    pause_critical_fraction: Fraction = 0.20
    pause_baseline_factor: float = Field(4.0, ge=1.0)
    pause_critical_factor: float = Field(10.0, ge=1.0)
    pause_window: Seconds = 300.0
    # How long a port's own usual marking and pause take to follow its traffic (time constant),
    # and how much of it is needed before it counts (judgement calls).
    baseline: Seconds = 900.0
    baseline_learn: Seconds = 60.0
    wait_warning_fraction: Fraction = 0.10
    wait_critical_fraction: Fraction = 0.50
    wait_warning_ratio: Fraction = 0.01
    wait_window: Seconds = 60.0

    @model_validator(mode="after")
    def _levels(self) -> CongestionParams:
        for kind in ("ecn", "pause", "wait"):
            warn, crit = (f"{kind}_warning_ratio", f"{kind}_critical_ratio") if kind == "ecn" else \
                (f"{kind}_warning_fraction", f"{kind}_critical_fraction")
            if getattr(self, warn) > getattr(self, crit):
                raise ValueError(f"{warn} ({getattr(self, warn)}) is above {crit} ({getattr(self, crit)})")
        return self


class CongestionRule(Rule):
    name = "congestion"
    kinds = ("congestion",)
    # fabric: queue <-> priority; pfc: which pauses a storm tree or deadlock accounts for, the
    # storm level; ib: the waits, and which ports a credit loop or stall explains.
    needs = ("fabric", "pfc", "ib")
    Params = CongestionParams
    raise_polls = 3
    clear_polls = 2

    def __init__(self, params: CongestionParams | dict[str, Any] | None = None) -> None:
        super().__init__(params)
        self.pmap = PriorityMap()  # the fabric layout of this pass (queue <-> priority)
        self.ecn_index = SubIndex(["ecn_marked_packets"])
        self.pause_index = SubIndex(["pfc_rx_pause_seconds", "pfc_tx_pause_seconds"])
        # (port, priority) -> when a storm tree or deadlock last accounted for its pause: the
        # chronic-pause window starts after it, so a storm's pause never reads as congestion.
        self.storm_seen: dict[tuple[PortKey, int | None], float] = {}
        p = self.params
        self.ecn_usual = Usual(p.baseline, p.baseline_learn)  # (port, queue) -> usual marking
        self.pause_usual = Usual(p.baseline, p.baseline_learn)  # (port, priority, side) -> usual pause
        self.ecn_ratio = RatioGauge(
            "fabricmon_queue_ecn_mark_ratio", "Share of the packets sent by an egress queue in the last interval that were ECN-marked.",
            ("device", "port", "queue"),
        )

    def evaluate(self, ctx: DetectContext) -> Iterable[Observation]:
        ports = ctx.store.ports
        self.pmap = ctx.analysis(FabricAnalysis).layout
        pfc, ib = ctx.analysis(PfcAnalysis), ctx.analysis(IbAnalysis)
        # Candidates: ports whose ECN marks or pause time moved, ports with an ECN ratio to
        # bring back to 0, and InfiniBand ports whose last-interval f_wait reaches the
        # warning level (or is unknown: the ratio decides then).
        ecn = ctx.moved("ecn_marked_packets")
        if self.ecn_ratio.values:
            ecn |= ctx.watched({(d, port) for d, port, _ in self.ecn_ratio.values})
        pause = ctx.moved("pfc_rx_pause_seconds", "pfc_tx_pause_seconds")
        waits, behind = self._ib_waits(ib)
        claimed: set | None = None  # (port, priority) in a storm tree or deadlock, taken on demand
        for pk in ecn | pause | waits.keys():
            entry = ports.get(pk)
            if entry is None:
                continue
            found: list[Observation] = []
            if pk in ecn:
                queues = self.ecn_index.subs(pk, entry)
                if queues:
                    found.extend(self._ecn(ctx.t, pk, entry, queues))
            if pk in pause:
                prios = self.pause_index.subs(pk, entry)
                if prios:
                    if claimed is None:
                        claimed = pfc.result.claimed()
                        self._note_storms(ctx.t, claimed)
                    found.extend(self._pause(ctx, pk, entry, prios, claimed, pfc))
            if pk in waits and ib.incident(pk) is None:  # a loop or stall reports it
                found.extend(self._ib(pk, entry, waits[pk], ib, behind.get(pk, ())))
            if found and link_ok(entry):
                yield from found
        self.ecn_index.forget_missing(ports)
        self.pause_index.forget_missing(ports)
        self.ecn_usual.forget(ctx.t)
        self.pause_usual.forget(ctx.t)

    def _queue_prio(self, q: Any) -> int | None:
        """The priority an egress queue carries under the fabric map (the queue number when
        no priority or several share it: identity is the default map)."""
        if not isinstance(q, int):
            return None
        prios = [p for p in range(8) if self.pmap.queue(p) == q]
        return prios[0] if len(prios) == 1 else q

    def _note_storms(self, t: float, claimed: set[tuple[PortKey, int | None]]) -> None:
        seen = self.storm_seen
        seen.update(dict.fromkeys(claimed, t))
        if len(seen) > len(claimed):
            limit = t - self.params.pause_window
            for key in [k for k, v in seen.items() if v < limit]:
                del seen[key]

    def _level(self, value: float, warn: float, crit: float) -> str | None:
        return "critical" if value >= crit else "warning" if value >= warn else None

    def _ecn(self, t: float, pk: PortKey, entry: PortEntry, queues: tuple) -> Iterable[Observation]:
        p = self.params
        for q in queues:
            marked = entry.counter("ecn_marked_packets", (q,))
            sent = entry.counter("queue_tx_packets", (q,))
            if marked is None or sent is None or marked.delta is None or not sent.delta:
                continue
            key = (pk, q)
            last = min(marked.delta / sent.delta, 1.0)
            self.ecn_ratio.set((pk[0], pk[1], str(q)), last)
            self.ecn_usual.see(key, last, t)
            warn, own, fab = self.ecn_usual.level(key, t, p.ecn_warning_ratio, p.ecn_baseline_factor)
            if last < warn:
                self.ecn_usual.learn(key, last, t, sent.dt or 0.0)  # not congested: the queue's normal
                continue
            mw, sw = marked.window(p.ecn_window), sent.window(p.ecn_window)
            if mw is None or sw is None or sw[0] < p.ecn_min_packets:
                continue
            ratio = min(mw[0] / sw[0], 1.0)
            normal = max(own or 0.0, fab or 0.0)
            level = self._level(ratio, warn, max(p.ecn_critical_ratio, p.ecn_critical_factor * normal))
            if level:
                yield Observation(
                    kind="congestion", severity=level, device=pk[0], port=pk[1], priority=self._queue_prio(q),
                    summary=f"{pk[0]} {pk[1]} queue {q} ECN-marks {ratio:.1%} of its packets over {sw[1]:.0f} s "
                            f"({last:.1%} in the last interval) against a usual {normal:.1%}{_usual_words(own, fab)}: the "
                            f"queue sits above its marking threshold. First find the fan-in into this port (incast, job "
                            f"placement) and check that DCQCN is on at the senders",
                    evidence={"ecn_mark_ratio": round(ratio, 4), "last_interval_ratio": round(last, 4), "queue": q,
                              "window_s": round(sw[1], 3), "packets": sw[0], **_usual_evidence(warn, own, fab)},
                )

    def _pause(self, ctx: DetectContext, pk: PortKey, entry: PortEntry, prios: tuple,
               claimed: set[tuple[PortKey, int | None]], pfc: PfcAnalysis) -> Iterable[Observation]:
        p = self.params
        storm = pfc.p  # the storm level is the pfc analysis's
        peer = ctx.topology.peer(*pk)
        peer_entry = ctx.store.ports.get(peer) if peer else None
        for prio in prios:
            if not isinstance(prio, int) or (pk, prio) in claimed or (peer is not None and (peer, prio) in claimed):
                continue  # the storm or deadlock finding covers this pause
            for side in ("rx", "tx"):
                se = entry.counter(f"pfc_{side}_pause_seconds", (prio,))
                last = frac(se)
                if last is None:
                    continue
                if side == "tx" and peer_entry is not None and peer_entry.counter("pfc_rx_pause_seconds", (prio,)) is not None:
                    continue  # the peer's receive side reports this link
                key = (pk, prio, side)
                self.pause_usual.see(key, last, ctx.t)
                warn, own, fab = self.pause_usual.level(key, ctx.t, p.pause_warning_fraction, p.pause_baseline_factor)
                if last < warn:
                    self.pause_usual.learn(key, last, ctx.t, se.dt or 0.0)  # not congested: the port's normal
                    continue
                if last >= storm.storm_pause_fraction:
                    if side == "tx":
                        continue
                    q = self.pmap.queue(prio)
                    if tx_progress(entry, (q,), storm.progress_line_fraction) is False:
                        continue  # storm territory
                window = p.pause_window
                storm_t = max(self.storm_seen.get((pk, prio), 0.0), self.storm_seen.get((peer, prio), 0.0) if peer else 0.0)
                if storm_t:
                    window = min(window, ctx.t - storm_t)  # only the pause since the storm ended
                w = window_frac(se, window) if window > 0 else None
                if w is None:
                    continue
                normal = max(own or 0.0, fab or 0.0)
                level = self._level(w[0], warn, max(p.pause_critical_fraction, p.pause_critical_factor * normal))
                if level:
                    yield self._pause_finding(pk, prio, side, peer, level, w, last, (warn, own, fab))
                    break

    def _pause_finding(self, pk: PortKey, prio: int, side: str, peer: PortKey | None, level: str, w: tuple[float, float],
                       last: float, usual: tuple[float, float | None, float | None]) -> Observation:
        what = "paused by its peer" if side == "rx" else "pausing its peer"
        first = (f"check what {peer[0]} {peer[1]} feeds: it drains slower than it receives" if side == "rx" and peer
                 else "check this device's egress toward its busiest destination: it cannot drain what arrives"
                 if side == "tx" else "check the receiver on this link: it drains slower than it receives")
        warn, own, fab = usual
        normal = max(own or 0.0, fab or 0.0)
        return Observation(
            kind="congestion", severity=level, device=pk[0], port=pk[1], priority=prio,
            summary=f"{pk[0]} {pk[1]} priority {prio} is {what} {w[0]:.0%} of the time over {w[1]:.0f} s "
                    f"({last:.0%} in the last interval) against a usual {normal:.1%}{_usual_words(own, fab)}, while still "
                    f"sending: chronic pause, not a storm. First {first}",
            evidence={f"{side}_pause_fraction": round(w[0], 4), "last_interval_fraction": round(last, 4),
                      "window_s": round(w[1], 3), **_usual_evidence(warn, own, fab)},
        )

    def _ib_waits(self, ib: IbAnalysis) -> tuple[dict[PortKey, float | None], dict[PortKey, list[PortKey]]]:
        """InfiniBand candidates: ports whose last-interval f_wait is at least ``wait_warning_fraction``
        above the fabric's normal (or unknown: the ratio decides then), and, for those that wait
        behind a stalled port or a credit loop, the roots (the ``ib`` analysis's tree walk)."""
        warn = self.params.wait_warning_fraction + ib.normal_wait("f_wait")
        waits = {pk: f for pk, f in ib.fractions.items() if f is None or f >= warn}
        return waits, (ib.behind(waits) if waits and (ib.stalls or ib.loops) else {})

    def _ib(self, pk: PortKey, entry: PortEntry, f_last: float | None, ib: IbAnalysis,
            behind: Iterable[PortKey]) -> Iterable[Observation]:
        """XmitWait against the fabric's normal (``ib`` analysis, :class:`.ib_wait.FabricNormal`):
        the port waits at least ``wait_warning_fraction`` (``wait_warning_ratio`` for r_wait)
        more than the fabric's typical port over ``wait_window``, and did so in the last
        interval too; critical when it also waits ``wait_critical_fraction`` of the time. Ports
        waiting behind a stalled port or a credit loop name it (``waiting_behind``) and carry its
        incident: the root is the fault, they are its victims (congestion spreading)."""
        p = self.params
        tick = ib.tick(pk, entry)
        measure, warn = ("f_wait", p.wait_warning_fraction) if f_last is not None else ("r_wait", p.wait_warning_ratio)
        normal = ib.normal_wait(measure)
        last = f_last if f_last is not None else wait_last(entry, tick)[1]
        if last is None or last < normal + warn:
            return  # not congested now against the fabric's normal (a finished episode must not linger)
        f, r, elapsed = wait_window(entry, tick, p.wait_window)
        value = f if f_last is not None else r
        if value is None or value < normal + warn:
            return
        level = "critical" if measure == "f_wait" and value >= p.wait_critical_fraction else "warning"
        label = "of the time waiting for credits" if measure == "f_wait" else "wait ratio (XmitWait / (XmitWait + XmitData))"
        ev: dict[str, Any] = {"xmit_wait_fraction" if measure == "f_wait" else "xmit_wait_ratio": round(value, 4),
                              "fabric_normal": round(normal, 4), "window_s": round(elapsed, 3)}
        roots = list(behind)
        first = "find the fan-in or the slow receiver downstream (the next hop's XmitWait shows which)"
        if roots:
            names = [f"{d}:{q}" for d, q in roots]
            ev["waiting_behind"] = names
            inc = ib.incident(roots[0])
            if inc is not None:
                ev["incident"] = inc[0]
                first = f"fix {inc[1]} it waits behind (this port is its victim)"
        sending = "while still sending" if tx_progress(entry, None, ib.p.progress_line_fraction) is not False \
            else "and sends almost nothing"
        yield Observation(
            kind="congestion", severity=level, device=pk[0], port=pk[1],
            summary=f"{pk[0]} port {pk[1]}: {value:.1%} {label} over {elapsed:.0f} s, the fabric's usual being "
                    f"{normal:.1%}, {sending}. First {first}",
            evidence=ev,
        )

    def metrics(self) -> Iterable[ExportedGauge]:
        return (self.ecn_ratio.metric(),)


def _usual_words(own: float | None, fab: float | None) -> str:
    parts = [f"its own {own:.1%}" if own is not None else "", f"the fabric's {fab:.1%}" if fab is not None else ""]
    parts = [x for x in parts if x]
    return f" ({', '.join(parts)})" if parts else ""


def _usual_evidence(threshold: float, own: float | None, fab: float | None) -> dict[str, Any]:
    """What the ratio was judged against: the threshold, and the port's and the fabric's usual."""
    return {"threshold": round(threshold, 4), "usual": {"port": None if own is None else round(own, 4),
                                                        "fabric": None if fab is None else round(fab, 4)}}
