"""packet_loss: drops where the fabric promises none, and transport-level loss.

Hardware-counted, so raised on the first poll that shows it (``raise_polls`` 1); derived
from valid intervals only, and not on a port whose link is down or flapped this interval
(``link_degraded`` reports that).

* **Lossless class** (critical: PFC exists so that these priorities never drop, IEEE
  802.1Qbb): the drops the ``loss`` analysis (:mod:`fabricmon.agent.detector.analyses.loss`)
  puts on a lossless class from evidence: a counter whose class carries only lossless
  priorities (a queue, PG, traffic class or priority of the ``fabric:`` layout), a port whose
  traffic at that stage was all lossless by its per-class counters, or RoCE's own loss counted
  by the host at the receiving or sending end in the same interval. Every stage counts:
  ingress priority-group drops (Spectrum keeps lossless service in ingress PG buffers, so
  undersized headroom shows there), ingress queue (VOQ) drops, a port's ingress buffer
  overflow, egress queue, no-buffer and WRED drops, WJH buffer drops and a NIC's receive
  drops. One finding per port and lossless priority (None when the class carries several
  lossless priorities and nothing says which); ``evidence.attribution`` says in plain words
  which rule of attribution placed it and on what, and the summary names the buffer that ran
  out and the first thing to check. A drop no evidence places (a class-less counter on a port
  that carries best effort too) is no finding: the analysis counts it for the port's page.
* **InfiniBand discards** (ports with an XmitWait counter): ``tx_discards`` in the last
  interval -> warning, >= ``tx_discards_critical`` (200 per 300 s, the default threshold of UFM's
  port-discard event, NVIDIA UFM Enterprise user manual "Events") within
  ``ib_window`` (300 s, bounded by the store's history) -> critical;
  ``excessive_buffer_overrun_errors`` >= ``buffer_overrun_critical`` (100, UFM) -> critical.
  On a port that the ``ib`` analysis put in a credit loop or stall, the discards carry that
  incident's id and the finding holds while the port discarded within the window (a leaking
  loop discards in bursts): one loss finding per member, linked to the loop.
* **Transport loss** on NICs: ``transport_counters`` (out_of_sequence,
  packet_seq_err, local_ack_timeout_err) increasing in >= ``transport_min_polls`` (3) of the
  last ``transport_polls`` (5) intervals -> warning; then critical when the rate over
  ``transport_window`` (60 s) is >= ``transport_critical_per_min`` (10/min) or the count
  per received packet is >= ``transport_critical_ratio`` (1e-4) (inferred: RoCE
  retransmits go-back-N, so 1e-4 of packets lost costs about a percent of goodput at
  typical windows). The 3-of-5 rule
  filters stray single events; an interval with >= ``transport_burst`` (100) errors of one
  counter is a retransmission burst, not a stray, and counts at once (so a hardware-counted
  burst is reported on the first poll that shows it, like every other loss here).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pydantic import Field, field_validator, model_validator

from fabricmon.agent.detector.analyses.ib import IbAnalysis
from fabricmon.agent.detector.analyses.loss import STAGE_WORDS, Loss, LossAnalysis
from fabricmon.agent.detector.base import DetectContext, Fraction, Observation, Rule, RuleParams, Seconds
from fabricmon.agent.detector.common import SeriesCache, link_ok, moved
from fabricmon.agent.store import PortEntry, PortKey
from fabricmon.core.vocabulary import AGGREGATE, COUNTERS


class PacketLossParams(RuleParams):
    """Counts, windows and rates; the sources are in the module doc."""

    tx_discards_critical: float = Field(200, ge=0)  # PortXmitDiscards in ib_window (UFM port-discard event)
    buffer_overrun_critical: float = Field(100, ge=0)  # ExcessiveBufferOverrunErrors in ib_window (UFM)
    ib_window: Seconds = 300.0
    transport_counters: tuple[str, ...] = ("out_of_sequence", "packet_seq_err", "local_ack_timeout_err")
    transport_polls: int = Field(5, ge=1, le=1000)
    transport_min_polls: int = Field(3, ge=1, le=1000)
    transport_window: Seconds = 60.0
    transport_critical_per_min: float = Field(10.0, ge=0)
    transport_critical_ratio: Fraction = 1e-4
    transport_burst: float = Field(100, ge=1)

    @field_validator("transport_counters")
    @classmethod
    def _known(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        unknown = [c for c in v if c not in COUNTERS]
        if unknown:
            raise ValueError(f"not counters of the vocabulary: {', '.join(unknown)}")
        return v

    @model_validator(mode="after")
    def _polls(self) -> PacketLossParams:
        if self.transport_min_polls > self.transport_polls:
            raise ValueError(f"transport_min_polls ({self.transport_min_polls}) is above transport_polls ({self.transport_polls})")
        return self


# What to do first about lossless loss, by the stage that dropped: each names the buffer
# that ran out, which is what the operator resizes or the PFC setting that should have
# prevented it (Spectrum ingress headroom: NVIDIA "Understanding Buffer Headroom").
FIRST_STEP = {
    "ingress_pg": "check the PFC headroom of that priority group: it must hold what is in flight on the cable "
                  "after XOFF (twice the cable delay at line rate plus an MTU), so a long cable needs more",
    "ingress_queue": "check the ingress (VOQ) buffer and the PFC thresholds of that traffic class",
    "ingress_port": "check the port's ingress buffer and that PFC is enabled for the lossless priority on both ends",
    "egress_queue": "check that PFC is enabled for the priority on this port and its peer, and the queue's buffer",
    "wjh": "check the buffer profile of that traffic class and that PFC is enabled for it on both ends",
    "nic": "the NIC's receive buffer overflowed on the lossless priority: check that PFC is enabled on the NIC for it "
           "(mlnx_qos --pfc) and that the switch honours its pause",
}
NIC_FIRST_STEP = {
    "rx_discards_phy": "the NIC's port buffer overflowed: check that PFC is enabled on the NIC for the lossless "
                       "priority (mlnx_qos --pfc) and that the switch honours its pause",
    "rx_out_of_buffer": "the host did not post receive buffers fast enough: check the application and CPU load on "
                        "that host (the fabric delivered the packets)",
}
IB_WORDS = {"tx_discards": "PortXmitDiscards", "excessive_buffer_overrun_errors": "ExcessiveBufferOverrunErrors"}


class PacketLossRule(Rule):
    name = "packet_loss"
    kinds = ("packet_loss",)
    # loss: the lossless loss evidence placed; ib: the incident a port's discards belong to
    needs = ("loss", "ib")
    Params = PacketLossParams
    raise_polls = 1
    clear_polls = 2

    def __init__(self, params: PacketLossParams | dict[str, Any] | None = None) -> None:
        super().__init__(params)
        p = self.params
        self.transport = [(c, ()) for c in p.transport_counters]
        plain = {"tx_discards", "excessive_buffer_overrun_errors", *p.transport_counters}
        self.names = tuple(sorted(plain))
        self.watch: set[PortKey] = set()  # ports with a relevant increase still within the kept history
        self.relevant = SeriesCache(lambda name, sub: not sub and name in plain)

    def evaluate(self, ctx: DetectContext) -> Iterable[Observation]:
        ports = ctx.store.ports
        ib = ctx.analysis(IbAnalysis)
        for loss in ctx.analysis(LossAnalysis).losses:
            yield self._loss(loss, ctx.topology.peer(*loss.pk))
        watch = self.watch
        # Ports where a loss counter moved now, and those where one moved within the kept
        # history (the transport rule counts increases over several polls).
        for pk in ctx.moved(*self.names) | ctx.watched(watch):
            entry = ports.get(pk)
            if entry is None or not moved(self.relevant.get(pk, entry)):
                watch.discard(pk)
                continue
            watch.add(pk)
            found = [*self._ib(ib, pk, entry), *self._transport(pk, entry)]
            if found and link_ok(entry):
                yield from found
        if len(watch) > len(ports):
            watch.intersection_update(ports)
        self.relevant.forget_missing(ports)

    def _loss(self, loss: Loss, peer: PortKey | None) -> Observation:
        """One lossless loss: its counters by stage, where it was dropped, and why it is lossless."""
        pk, prio = loss.pk, loss.priority
        ev: dict[str, Any] = {}
        wjh: dict[str, float] = {}
        classes: set[str] = set()
        where: list[str] = []
        for row in loss.rows:
            defn = COUNTERS[row.name]
            label = defn.drop.label if defn.drop is not None else None
            if row.name == "wjh_drops":
                wjh[str(row.sub[1])] = wjh.get(str(row.sub[1]), 0.0) + row.count
                classes.add(str(row.sub[2]) if len(row.sub) > 2 and row.sub[2] is not None else "")
                continue
            ev[row.name] = ev.get(row.name, 0.0) + row.count
            if label in ("queue", "pg") and row.sub and str(row.sub[0]) not in (AGGREGATE, ""):
                ev[label] = row.sub[0]
            place = STAGE_WORDS[row.stage] + (f" {row.sub[0]}" if row.sub and label else "")
            if place not in where:
                where.append(place)
        if wjh:
            ev["wjh_buffer_drops"] = wjh
            known = sorted(c for c in classes if c)
            if known:
                ev["wjh_traffic_classes"] = known
            where.append(STAGE_WORDS["wjh"])
        stages = sorted({r.stage for r in loss.rows})
        total = int(loss.packets)
        ev.update(dropped_packets=total, stages=stages, attributed_by=sorted(set(loss.how)),
                  attribution="; ".join(loss.attribution), **loss.evidence)
        on = f"lossless priority {prio}" if prio is not None else "a lossless priority"
        nic = [r.name for r in loss.rows if r.name in NIC_FIRST_STEP]
        first = NIC_FIRST_STEP[nic[0]] if nic else FIRST_STEP[loss.rows[0].stage]
        toward = f" (link to {peer[0]} {peer[1]})" if peer else ""
        return Observation(
            kind="packet_loss", severity="critical", device=pk[0], port=pk[1], priority=prio, evidence=ev,
            summary=f"{pk[0]} {pk[1]}{toward} dropped {total} packet(s) on {on} at the {', '.join(where)}: PFC should "
                    f"make this loss impossible ({loss.attribution[0]}). First {first}",
        )

    def _ib(self, ib: IbAnalysis, pk: PortKey, entry: PortEntry) -> Iterable[Observation]:
        if entry.counter("xmit_wait") is None:
            return
        p = self.params
        ev: dict[str, Any] = {}
        severity = None
        # Discards on a port that is blocked for credits are that incident's consequence
        # (the head-of-queue lifetime drops what the port could not send): linked to it, and
        # held for as long as the incident lasts and discarded within the window, since a
        # leaking loop discards in bursts with quiet polls between (one finding, not one per burst).
        incident = ib.incident(pk)
        for name, crit in (("tx_discards", p.tx_discards_critical), ("excessive_buffer_overrun_errors", p.buffer_overrun_critical)):
            se = entry.counter(name, ())
            if se is None or se.delta is None:
                continue
            w = se.window(p.ib_window)
            if not se.delta and not (incident is not None and w and w[0] > 0):
                continue
            count = w[0] if w else se.delta
            ev[name] = se.delta
            ev[f"{name}_window"] = count
            if count >= crit:
                severity = "critical"
            elif name == "tx_discards" and severity is None:
                severity = "warning"
        if severity:
            ev["window_s"] = p.ib_window
            first = ("First find what keeps this port from sending: a slow or dead receiver downstream, or a "
                     "congested path (XmitWait on the same port says how long it waited)")
            if incident is not None:
                ev["incident"] = incident[0]
                first = f"It is part of {incident[1]}: fix that first, the discards stop with it"
            numbers = "; ".join(f"{IB_WORDS[k]} {int(ev[k])} in the last interval, {int(ev[k + '_window'])} over "
                                f"{p.ib_window:.0f} s" for k in IB_WORDS if k in ev)
            yield Observation(
                kind="packet_loss", severity=severity, device=pk[0], port=pk[1], evidence=ev,
                summary=f"{pk[0]} port {pk[1]} lost packets on a lossless InfiniBand link ({numbers}). {first}",
            )

    def _transport(self, pk: PortKey, entry: PortEntry) -> Iterable[Observation]:
        p = self.params
        hits: dict[str, int] = {}
        severity = None
        per_min: dict[str, float] = {}
        last: dict[str, float] = {}
        rx = entry.counter("rx_packets", ())
        rxw = rx.window(p.transport_window) if rx is not None else None
        for key in self.transport:
            se = entry.counter(*key)
            if se is None or se.delta is None or not se.moved_in_history():
                continue
            n = se.increases(p.transport_polls)
            if n < p.transport_min_polls and se.delta < p.transport_burst:
                continue
            hits[key[0]] = n
            if se.delta:
                last[key[0]] = se.delta
            severity = severity or "warning"
            w = se.window(p.transport_window)
            if w is None or w[1] <= 0:
                continue
            per_min[key[0]] = round(w[0] / w[1] * 60, 3)
            ratio = w[0] / rxw[0] if rxw and rxw[0] > 0 else 0.0
            if per_min[key[0]] >= p.transport_critical_per_min or ratio >= p.transport_critical_ratio:
                severity = "critical"
        if severity:
            yield Observation(
                kind="packet_loss", severity=severity, device=pk[0], port=pk[1],
                summary=f"{pk[0]} {pk[1]}: transport loss ({', '.join(sorted(hits))}) in {max(hits.values())} of the last "
                        f"{p.transport_polls} polls: RoCE retransmits what the fabric lost. First look for drops on "
                        f"the path to this host (switch queue or PG drops, a flapping link) and check PFC on its priority",
                evidence={"polls_with_errors": hits, "per_minute": per_min, "last_interval": last},
            )
