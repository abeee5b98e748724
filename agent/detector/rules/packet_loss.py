"""packet_loss: drops where the fabric promises none, and transport-level loss.

Hardware-counted, so raised on the first poll that shows it (``raise_polls`` 1); derived
from valid intervals only, and not on a port whose link is down or flapped this interval
(``link_degraded`` reports that).

* **Lossless class** (critical: PFC exists so that these priorities never drop, IEEE
  802.1Qbb): every drop counter of the vocabulary whose :class:`DropClass` says a drop
  there on a lossless priority is loss (:func:`fabricmon.core.vocabulary.lossless_drop_counters`),
  at every stage: ingress priority-group no-buffer / shared-buffer drops (Spectrum keeps
  lossless service in ingress PG buffers, so undersized headroom shows there), ingress
  queue (VOQ) drops, a port's ingress buffer overflow (Cumulus discardClCounters), egress
  queue, no-buffer and WRED drops, WJH buffer drops (group buffer, reason in
  ``wjh_reasons``: 503 tail drop, 504 WRED, 505 TC congestion threshold, NVIDIA WJH buffer
  drop reasons, Cumulus Linux user guide "What Just Happened"), and a NIC's
  ``rx_discards_phy`` (its port buffer overflowed) and ``rx_out_of_buffer`` (the host posted
  no receive buffer: loss all the same). Which priority a row belongs to comes from the
  one ``fabric:`` layout (lossless priorities, ``priority_to_queue``, ``priority_to_pg``;
  identity by default), never from a per-vendor list, so a new vendor counter is read as
  soon as the vocabulary describes it. A drop on a lossy priority (tail, WRED) is normal
  congestion control and stays silent. A row that names its class gives a finding on that
  priority; a port total or a record without its class gives one without a priority (the
  evidence lists the fabric's lossless priorities), folded into the per-priority finding
  when there is one. The summary names the buffer that ran out and the first thing to check.
* **InfiniBand discards** (ports with an XmitWait counter): ``tx_discards`` in the last
  interval -> warning, >= ``tx_discards_critical`` (200 per 300 s, the default threshold of UFM's
  port-discard event, NVIDIA UFM Enterprise user manual "Events") within
  ``ib_window_s`` (300 s, bounded by the store's history) -> critical;
  ``excessive_buffer_overrun_errors`` >= ``buffer_overrun_critical`` (100, UFM) -> critical.
  On a port that the ``ib`` analysis put in a credit loop or stall, the discards carry that
  incident's id and the finding holds while the port discarded within the window (a leaking
  loop discards in bursts): one loss finding per member, linked to the loop.
* **Transport loss** on NICs: ``transport_counters`` (out_of_sequence,
  packet_seq_err, local_ack_timeout_err) increasing in >= ``transport_min_polls`` (3) of the
  last ``transport_polls`` (5) intervals -> warning; then critical when the rate over
  ``transport_window_s`` (60 s) is >= ``transport_critical_per_min`` (10/min) or the count
  per received packet is >= ``transport_critical_ratio`` (1e-4) (inferred: RoCE
  retransmits go-back-N, so 1e-4 of packets lost costs about a percent of goodput at
  typical windows). The 3-of-5 rule
  filters stray single events; an interval with >= ``transport_burst`` (100) errors of one
  counter is a retransmission burst, not a stray, and counts at once (so a hardware-counted
  burst is reported on the first poll that shows it, like every other loss here).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Annotated, Any

from pydantic import BeforeValidator, Field, field_validator, model_validator

from fabricmon.agent.detector.analyses.fabric import FabricAnalysis
from fabricmon.agent.detector.analyses.ib import IbAnalysis
from fabricmon.agent.detector.base import DetectContext, Fraction, Observation, Rule, RuleParams, Seconds
from fabricmon.agent.detector.common import SeriesCache, link_ok, moved
from fabricmon.agent.store import PortEntry, PortKey
from fabricmon.core.vocabulary import (
    AGGREGATE,
    COUNTERS,
    CounterDef,
    PriorityMap,
    lossless_drop_counters,
    lossless_priorities_hit,
)

Text = Annotated[str, BeforeValidator(str)]  # a WJH reason id written as a number is the same id


class PacketLossParams(RuleParams):
    """Counts, windows and rates; the sources are in the module doc."""

    wjh_reasons: tuple[Text, ...] = ("503", "504", "505")  # WJH buffer drop reasons that are lossless loss
    tx_discards_critical: float = Field(200, ge=0)  # PortXmitDiscards in ib_window_s (UFM port-discard event)
    buffer_overrun_critical: float = Field(100, ge=0)  # ExcessiveBufferOverrunErrors in ib_window_s (UFM)
    ib_window_s: Seconds = 300.0
    transport_counters: tuple[str, ...] = ("out_of_sequence", "packet_seq_err", "local_ack_timeout_err")
    transport_polls: int = Field(5, ge=1, le=1000)
    transport_min_polls: int = Field(3, ge=1, le=1000)
    transport_window_s: Seconds = 60.0
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
}
NIC_FIRST_STEP = {
    "rx_discards_phy": "the NIC's port buffer overflowed: check that PFC is enabled on the NIC for the lossless "
                       "priority (mlnx_qos --pfc) and that the switch honours its pause",
    "rx_out_of_buffer": "the host did not post receive buffers fast enough: check the application and CPU load on "
                        "that host (the fabric delivered the packets)",
}
IB_WORDS = {"tx_discards": "PortXmitDiscards", "excessive_buffer_overrun_errors": "ExcessiveBufferOverrunErrors"}
STAGE_WORDS = {"ingress_pg": "ingress priority-group buffer", "ingress_queue": "ingress queue",
               "ingress_port": "ingress buffer", "egress_queue": "egress queue", "nic": "NIC", "wjh": "buffer (WJH)"}


class PacketLossRule(Rule):
    name = "packet_loss"
    kinds = ("packet_loss",)
    needs = ("fabric", "ib")  # fabric: which priorities are lossless; ib: the incident a port's discards belong to
    Params = PacketLossParams
    raise_polls = 1
    clear_polls = 2

    def __init__(self, params: PacketLossParams | dict[str, Any] | None = None) -> None:
        super().__init__(params)
        p = self.params
        self.wjh_reasons = set(p.wjh_reasons)
        self.drops = {c.name: c for c in lossless_drop_counters()}
        self.transport = [(c, ()) for c in p.transport_counters]
        plain = {"tx_discards", "excessive_buffer_overrun_errors", *p.transport_counters}
        self.names = (*sorted(self.drops), *sorted(plain))
        self.watch: set[PortKey] = set()  # ports with a relevant increase still within the kept history
        self.pmap: PriorityMap | None = None  # the layout ``relevant`` was built for
        self._plain = plain
        self.relevant = self._series_cache()

    def _series_cache(self) -> SeriesCache:
        """The series this rule watches: drop rows on a lossless priority (under the current
        map: a lossy queue's tail drops are normal and not watched), and the plain counters."""
        return SeriesCache(lambda name, sub: bool(self._hit(name, sub)) or (not sub and name in self._plain))

    def _hit(self, name: str, sub: tuple[Any, ...]) -> tuple[int, ...]:
        """The lossless priorities a drop row is attributable to (empty: not lossless loss)."""
        defn = self.drops.get(name)
        if defn is None or self.pmap is None:
            return ()
        if name == "wjh_drops" and (len(sub) < 2 or str(sub[1]) not in self.wjh_reasons):
            return ()
        return lossless_priorities_hit(defn, tuple("" if v is None else str(v) for v in sub), self.pmap)

    @staticmethod
    def _names_class(defn: CounterDef, sub: tuple[Any, ...]) -> bool:
        """Whether the row says its class (queue, PG, traffic class, priority): a port total
        or a record without the class is loss on the port, not on a known priority."""
        drop = defn.drop
        if drop is None or drop.maps_by == "port" or drop.label is None:
            return False
        value = dict(zip(defn.labels, sub, strict=False)).get(drop.label)
        return value is not None and str(value) not in (AGGREGATE, "")

    def evaluate(self, ctx: DetectContext) -> Iterable[Observation]:
        ports = ctx.store.ports
        pmap = ctx.analysis(FabricAnalysis).layout
        ib = ctx.analysis(IbAnalysis)
        if pmap != self.pmap:  # a reload changed the layout: what is lossless changed with it
            self.pmap = pmap
            self.relevant = self._series_cache()
        watch = self.watch
        # Ports where a loss counter moved now, and those where one moved within the kept
        # history (the transport rule counts increases over several polls).
        for pk in ctx.moved(*self.names) | ctx.watched(watch):
            entry = ports.get(pk)
            if entry is None or not moved(self.relevant.get(pk, entry)):
                watch.discard(pk)
                continue
            watch.add(pk)
            found = [*self._lossless(ctx, pk, entry), *self._ib(ib, pk, entry), *self._transport(pk, entry)]
            if found and link_ok(entry):
                yield from found
        if len(watch) > len(ports):
            watch.intersection_update(ports)
        self.relevant.forget_missing(ports)

    def _lossless(self, ctx: DetectContext, pk: PortKey, entry: PortEntry) -> Iterable[Observation]:
        """One observation per lossless priority the last interval's drops are attributable
        to, and one without a priority for drops that do not say their class (a port total,
        a WJH record without its traffic class) when no per-priority drop explains them."""
        by_prio: dict[int | None, list[tuple[str, tuple[Any, ...], float]]] = {}
        drops = self.drops
        for name, sub, se in entry.counters():  # reached only when a watched series moved
            if not se.delta or name not in drops:
                continue
            hit = self._hit(name, sub)
            if hit:
                named = self._names_class(drops[name], sub)
                by_prio.setdefault(hit[0] if named and len(hit) == 1 else None, []).append((name, sub, se.delta))
        if None in by_prio and len(by_prio) > 1:  # the unattributed drops are evidence of the per-priority ones
            extra = by_prio.pop(None)
            for rows in by_prio.values():
                rows.extend(extra)
        peer = ctx.topology.peer(*pk)
        for prio, rows in sorted(by_prio.items(), key=lambda kv: -1 if kv[0] is None else kv[0]):
            yield self._loss(pk, prio, rows, peer)

    def _loss(self, pk: PortKey, prio: int | None, rows: list[tuple[str, tuple[Any, ...], float]],
              peer: PortKey | None) -> Observation:
        ev: dict[str, Any] = {}
        wjh: dict[str, float] = {}
        classes: set[str] = set()
        where: list[str] = []
        stages: list[str] = []
        for name, sub, n in rows:
            defn = self.drops[name]
            stage = defn.drop.stage  # type: ignore[union-attr]
            stages.append(stage)
            if name == "wjh_drops":
                wjh[str(sub[1])] = wjh.get(str(sub[1]), 0.0) + n
                classes.add(str(sub[2]) if len(sub) > 2 and sub[2] is not None else "")
                continue
            label = defn.drop.label  # type: ignore[union-attr]
            ev[name] = ev.get(name, 0.0) + n
            if label == "queue":
                ev["queue"] = sub[0]
            elif label == "pg":
                ev["pg"] = sub[0]
            place = STAGE_WORDS[stage] + (f" {sub[0]}" if sub and label else "")
            if place not in where:
                where.append(place)
        if wjh:
            ev["wjh_buffer_drops"] = wjh
            known = sorted(c for c in classes if c)
            if known:
                ev["wjh_traffic_classes"] = known
            where.append(STAGE_WORDS["wjh"])
        total = int(sum(n for _, _, n in rows))
        ev["dropped_packets"] = total
        ev["stages"] = sorted(set(stages))
        if prio is None:
            ev["lossless_priorities"] = list(self.pmap.lossless) if self.pmap else []
        on = f"lossless priority {prio}" if prio is not None else "a lossless fabric (the counter does not say the priority)"
        nic = [name for name, _, _ in rows if name in NIC_FIRST_STEP]
        first = NIC_FIRST_STEP[nic[0]] if nic else FIRST_STEP[stages[0]]
        toward = f" (link to {peer[0]} {peer[1]})" if peer else ""
        return Observation(
            kind="packet_loss", severity="critical", device=pk[0], port=pk[1], priority=prio, evidence=ev,
            summary=f"{pk[0]} {pk[1]}{toward} dropped {total} packet(s) on {on} at the {', '.join(where)}: PFC should "
                    f"make this loss impossible. First {first}",
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
            w = se.window(p.ib_window_s)
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
            ev["window_s"] = p.ib_window_s
            first = ("First find what keeps this port from sending: a slow or dead receiver downstream, or a "
                     "congested path (XmitWait on the same port says how long it waited)")
            if incident is not None:
                ev["incident"] = incident[0]
                first = f"It is part of {incident[1]}: fix that first, the discards stop with it"
            numbers = "; ".join(f"{IB_WORDS[k]} {int(ev[k])} in the last interval, {int(ev[k + '_window'])} over "
                                f"{p.ib_window_s:.0f} s" for k in IB_WORDS if k in ev)
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
        rxw = rx.window(p.transport_window_s) if rx is not None else None
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
            w = se.window(p.transport_window_s)
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
