"""packet_loss: drops where the fabric promises none, and transport-level loss.

Hardware-counted, so raised on the first poll that shows it (``raise_polls`` 1); derived
from valid intervals only, and not on a port whose link is down or flapped this interval
(``link_degraded`` reports that).

* **Lossless class** (critical: PFC exists so that these priorities never drop, IEEE
  802.1Qbb): ``queue_drops`` or ``queue_no_buffer_drops`` on the
  queue of a priority in ``lossless_priorities`` ([3]; queue = priority unless
  ``priority_to_queue`` says otherwise); WJH buffer drops, ``wjh_drops`` with group
  ``wjh_group`` ("buffer") and a reason in ``wjh_reasons`` (503 tail drop, 504 WRED, 505 TC
  congestion threshold: NVIDIA WJH buffer drop reasons, Cumulus Linux user guide "What Just
  Happened") whose traffic class (third label) is the queue of a
  lossless priority, or unknown ("" or no third label: an aggregate without the class is
  kept, as before, rather than missed); a WJH drop on a known lossy class is ordinary
  congestion, not a lossless violation. The finding carries the priority when every counted
  WJH drop names the queue of one lossless priority. ``rx_discards_phy`` on a NIC (its port
  buffer overflowed: a lossless violation).
* **InfiniBand discards** (ports with an XmitWait counter): ``tx_discards`` in the last
  interval -> warning, >= ``tx_discards_critical`` (200 per 300 s, the default threshold of UFM's
  port-discard event, NVIDIA UFM Enterprise user manual "Events") within
  ``ib_window_s`` (300 s, bounded by the store's history) -> critical;
  ``excessive_buffer_overrun_errors`` >= ``buffer_overrun_critical`` (100, UFM) -> critical.
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
from typing import Any

from fabricmon.agent.detector import DetectContext, Observation, Rule
from fabricmon.agent.detector.rules._common import SeriesCache, int_map, link_ok, moved
from fabricmon.agent.detector.rules._ib import INCIDENT_CACHE_KEY
from fabricmon.agent.store import PortEntry, PortKey


class PacketLossRule(Rule):
    name = "packet_loss"
    kinds = ("packet_loss",)
    raise_polls = 1
    clear_polls = 2
    defaults: dict[str, Any] = {
        "lossless_priorities": [3],
        "priority_to_queue": None,
        "wjh_group": "buffer",
        "wjh_reasons": ["503", "504", "505"],
        "tx_discards_critical": 200,
        "buffer_overrun_critical": 100,
        "ib_window_s": 300.0,
        "transport_counters": ["out_of_sequence", "packet_seq_err", "local_ack_timeout_err"],
        "transport_polls": 5,
        "transport_min_polls": 3,
        "transport_window_s": 60.0,
        "transport_critical_per_min": 10.0,
        "transport_critical_ratio": 1e-4,
        "transport_burst": 100,
    }

    def __init__(self, params: dict[str, Any] | None = None) -> None:
        super().__init__(params)
        p = self.params
        qmap = int_map(p["priority_to_queue"])
        self.lossless = [(int(prio), qmap.get(int(prio), int(prio))) for prio in p["lossless_priorities"]]
        self.wjh_reasons = {(p["wjh_group"], str(r)) for r in p["wjh_reasons"]}
        # WJH traffic class (a label string) -> lossless priority; several priorities may share a queue.
        self.wjh_classes: dict[str, set[int]] = {}
        for prio, q in self.lossless:
            self.wjh_classes.setdefault(str(q), set()).add(prio)
        self.transport = [(c, ()) for c in p["transport_counters"]]
        queues = {q for _, q in self.lossless}
        plain = {"rx_discards_phy", "tx_discards", "excessive_buffer_overrun_errors", *p["transport_counters"]}
        self.names = ("queue_drops", "queue_no_buffer_drops", "wjh_drops", *sorted(plain))
        self.watch: set[PortKey] = set()  # ports with a relevant increase still within the kept history
        self.relevant = SeriesCache(
            lambda name, sub: (name in ("queue_drops", "queue_no_buffer_drops") and sub and sub[0] in queues)
            or (name == "wjh_drops" and self._wjh_lossless(sub)) or (not sub and name in plain)
        )

    def _wjh_lossless(self, sub: tuple[Any, ...]) -> bool:
        """A WJH buffer-drop key (group, reason[, traffic_class]) on a lossless or unknown class."""
        if tuple(sub[:2]) not in self.wjh_reasons:
            return False
        tc = str(sub[2]) if len(sub) > 2 and sub[2] is not None else ""
        return tc == "" or tc in self.wjh_classes

    def evaluate(self, ctx: DetectContext) -> Iterable[Observation]:
        ports = ctx.store.ports
        watch = self.watch
        # Ports where a loss counter moved now, and those where one moved within the kept
        # history (the transport rule counts increases over several polls).
        for pk in ctx.moved(*self.names) | ctx.watched(watch):
            entry = ports.get(pk)
            if entry is None or not moved(self.relevant.get(pk, entry)):
                watch.discard(pk)
                continue
            watch.add(pk)
            found = [*self._lossless(pk, entry), *self._ib(ctx, pk, entry), *self._transport(pk, entry)]
            if found and link_ok(entry):
                yield from found
        if len(watch) > len(ports):
            watch.intersection_update(ports)
        self.relevant.forget_missing(ports)

    def _wjh(self, entry: PortEntry) -> tuple[dict[str, float], set[str]]:
        """Last-interval WJH lossless-class buffer drops by reason, and the classes they named
        ("" = unknown). Scans the port's series: only reached when a relevant series moved."""
        by_reason: dict[str, float] = {}
        classes: set[str] = set()
        for name, sub, se in entry.counters():
            if name != "wjh_drops" or not se.delta or not self._wjh_lossless(sub):
                continue
            by_reason[sub[1]] = by_reason.get(sub[1], 0.0) + se.delta
            classes.add(str(sub[2]) if len(sub) > 2 and sub[2] is not None else "")
        return by_reason, classes

    def _lossless(self, pk: PortKey, entry: PortEntry) -> Iterable[Observation]:
        wjh, wjh_classes = self._wjh(entry)
        queued = False
        for prio, q in self.lossless:
            drops = {}
            for name in ("queue_drops", "queue_no_buffer_drops"):
                se = entry.counter(name, (q,))
                if se is not None and se.delta:
                    drops[name] = se.delta
            if drops:
                queued = True
                ev: dict[str, Any] = {**drops, "queue": q}
                if wjh:  # WJH saw the same buffer drops
                    ev["wjh_buffer_drops"] = wjh
                yield Observation(
                    kind="packet_loss", severity="critical", device=pk[0], port=pk[1], priority=prio,
                    summary=f"{pk[0]} {pk[1]} dropped {int(sum(drops.values()))} packet(s) on lossless priority {prio}",
                    evidence=ev,
                )
        if queued:
            wjh = {}  # one loss event, one finding: the queue's priority is the more precise report
        phy = entry.counter("rx_discards_phy", ())
        if wjh or (phy is not None and phy.delta):
            ev = {}
            prio = None
            if wjh:
                ev["wjh_buffer_drops"] = wjh
                known = sorted(c for c in wjh_classes if c)
                if known:
                    ev["wjh_traffic_classes"] = known
                prios = set().union(*(self.wjh_classes[c] for c in known)) if known else set()
                if len(prios) == 1 and "" not in wjh_classes:
                    prio = next(iter(prios))
            if phy is not None and phy.delta:
                ev["rx_discards_phy"] = phy.delta
            what = "buffer drops (WJH)" if wjh else "NIC port-buffer discards"
            where = f" on lossless priority {prio}" if prio is not None else " on a lossless fabric"
            yield Observation(
                kind="packet_loss", severity="critical", device=pk[0], port=pk[1], priority=prio,
                summary=f"{pk[0]} {pk[1]}: {what}{where}", evidence=ev,
            )

    def _ib(self, ctx: DetectContext, pk: PortKey, entry: PortEntry) -> Iterable[Observation]:
        if entry.counter("xmit_wait") is None:
            return
        p = self.params
        ev: dict[str, Any] = {}
        severity = None
        for name, crit in (("tx_discards", p["tx_discards_critical"]), ("excessive_buffer_overrun_errors", p["buffer_overrun_critical"])):
            se = entry.counter(name, ())
            if se is None or not se.delta:
                continue
            w = se.window(p["ib_window_s"])
            count = w[0] if w else se.delta
            ev[name] = se.delta
            ev[f"{name}_window"] = count
            if count >= crit:
                severity = "critical"
            elif name == "tx_discards" and severity is None:
                severity = "warning"
        if severity:
            ev["window_s"] = p["ib_window_s"]
            what = ", ".join(k for k in ev if not k.endswith(("_window", "_s")))
            # Discards on a port that is blocked for credits are that incident's consequence
            # (the head-of-queue lifetime drops what the port could not send): linked to it.
            incident = ctx.cache.get(INCIDENT_CACHE_KEY, {}).get(pk)
            part = ""
            if incident is not None:
                ev["incident"], part = incident[0], f": part of {incident[1]}, fix that first"
            yield Observation(
                kind="packet_loss", severity=severity, device=pk[0], port=pk[1],
                summary=f"{pk[0]} port {pk[1]} discarded packets ({what}){part}", evidence=ev,
            )

    def _transport(self, pk: PortKey, entry: PortEntry) -> Iterable[Observation]:
        p = self.params
        hits: dict[str, int] = {}
        severity = None
        per_min: dict[str, float] = {}
        last: dict[str, float] = {}
        rx = entry.counter("rx_packets", ())
        rxw = rx.window(p["transport_window_s"]) if rx is not None else None
        for key in self.transport:
            se = entry.counter(*key)
            if se is None or se.delta is None or not se.moved_in_history():
                continue
            n = se.increases(p["transport_polls"])
            if n < p["transport_min_polls"] and se.delta < p["transport_burst"]:
                continue
            hits[key[0]] = n
            if se.delta:
                last[key[0]] = se.delta
            severity = severity or "warning"
            w = se.window(p["transport_window_s"])
            if w is None or w[1] <= 0:
                continue
            per_min[key[0]] = round(w[0] / w[1] * 60, 3)
            ratio = w[0] / rxw[0] if rxw and rxw[0] > 0 else 0.0
            if per_min[key[0]] >= p["transport_critical_per_min"] or ratio >= p["transport_critical_ratio"]:
                severity = "critical"
        if severity:
            yield Observation(
                kind="packet_loss", severity=severity, device=pk[0], port=pk[1],
                summary=f"{pk[0]} {pk[1]}: transport loss ({', '.join(sorted(hits))}) in {max(hits.values())} of the last "
                        f"{p['transport_polls']} polls",
                evidence={"polls_with_errors": hits, "per_minute": per_min, "last_interval": last},
            )
