"""credit_deadlock: InfiniBand ports stalled for credits in a cycle, or alone.

InfiniBand is lossless by credit-based link flow control (IBTA specification vol. 1, link
layer): a port sends only while its peer advertises buffer credits, so a receiver that
stops draining stalls its senders, and a cycle of such waits is a credit loop.

A port is **stalled** (blocked for the interval) when, on a link that stayed up, it held
data (XmitWait counting at >= ``min_wait_ticks_per_s``, or the 32-bit counter rising to its
cap) AND sent below ``progress_line_fraction`` (1 %) of line rate (any byte when the speed
is unknown). That needs no tick. It must be corroborated by one signal more: f_wait >=
``stall_wait_fraction`` (0.95) with a tick known for the device generation (``_ib``), the
cable peer receiving ~nothing, rising PortXmitDiscards, or XmitWait saturating. Evidence
lists which (``blocked_because``), in plain words. A computed f_wait above 1 means the tick
is wrong for the device: ``fabricmon_port_xmit_wait_tick_suspect`` says so and the
tick-free test decides.

**Leaky loops.** A loop broken by head-of-queue lifetime is not frozen; a port that still
holds data and was stalled or discarding within ``leaky_window_s`` stays in the graph (see
the parameter), so the loop is one finding over its whole life, not one per burst.

**Credit graph.** Port ``e`` on switch X waits for credits from its peer ``peer(e)`` on Y.
Y's receive buffer for that link drains only through Y's egress ports, so ``e`` depends on
every stalled egress ``e2`` of Y other than ``peer(e)`` (no hairpin). Which egress holds
which ingress buffer is not counted, so this over-approximates; only stalled ports enter
the graph, which keeps heavy but moving traffic out of it. The graph walk is
:func:`fabricmon.agent.detector.graph.tarjan_scc` (iterative).

* A strongly connected component of >= 2 stalled ports: ``credit_deadlock``, role
  ``member``, critical, ``raise_polls`` 2 (a credit loop).
* A stalled port outside any cycle: ``congestion``, critical, evidence ``stalled: true``
  (a dead or slow receiver, a stuck HCA), ``raise_polls`` 2.

Both carry an ``incident`` id; ``packet_loss`` puts the same id on the discards of those
ports and ``congestion`` leaves their XmitWait alone: one fault, one incident.

Exports ``fabricmon_port_xmit_wait_ratio{device,port}``: f_wait of the last interval (0..1),
and ``fabricmon_port_xmit_wait_tick_suspect{device,port}``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from fabricmon.agent.detector import DetectContext, Observation, Rule, RuleMetric
from fabricmon.agent.detector.graph import tarjan_scc
from fabricmon.agent.detector.rules._common import RX_BYTES, TX_BYTES, RatioGauge, link_ok, speed_bytes, tx_progress
from fabricmon.agent.detector.rules._ib import (
    IB_DEFAULTS,
    INCIDENT_CACHE_KEY,
    SUSPECT_CACHE_KEY,
    XMIT_WAIT,
    last_wait_fractions,
    wait_last,
)
from fabricmon.agent.store import SATURATED, PortEntry, PortKey


class CreditDeadlockRule(Rule):
    name = "credit_deadlock"
    kinds = ("credit_deadlock", "congestion")
    raise_polls = 2
    clear_polls = 2
    defaults: dict[str, Any] = {
        **IB_DEFAULTS,
        "stall_wait_fraction": 0.95,
        "stall_wait_ratio": 0.99,
        # "Held data": XmitWait counting at least this fast. 1e6 ticks/s is 0.016 % of the time
        # with 8-byte ticks at 400 Gb/s and 1 % with 32-byte lane ticks at 25 Gb/s per lane:
        # far above the stray ticks of an idle port, low enough for any generation.
        "min_wait_ticks_per_s": 1e6,
        "progress_line_fraction": 0.01,
        # The cable peer received below this share of line rate: the link carried ~nothing.
        "peer_rx_line_fraction": 0.01,
        # A loop broken by head-of-queue lifetime leaks: per poll its members wait 70-100 %,
        # send a trickle and discard in bursts, so one poll rarely shows every member stalled.
        # A port still holding data that was stalled or discarded within this window stays a
        # loop member. 60 s spans several HOQ lifetimes (OpenSM default for switches, 0x12:
        # about 1.07 s; opensm.conf head_of_queue_lifetime) and 6 polls at 10 s.
        "leaky_window_s": 60.0,
    }

    def __init__(self, params: dict[str, Any] | None = None) -> None:
        super().__init__(params)
        self.stalled: dict[PortKey, dict[str, Any]] = {}
        self.blocked_t: dict[PortKey, float] = {}  # port -> last time it was stalled or discarded while holding data
        self.tick_suspect = RatioGauge(
            "fabricmon_port_xmit_wait_tick_suspect",
            "1 when the port's XmitWait implied waiting longer than the interval with the tick assumed for its device "
            "generation (the tick is wrong; the tick-free stall test decides for it).",
            ("device", "port"),
        )
        self.wait_ratio = RatioGauge(
            "fabricmon_port_xmit_wait_ratio",
            "Share of the last interval an InfiniBand port had data to send but no credits (f_wait).",
            ("device", "port"),
        )

    def _stall(self, ctx: DetectContext, pk: PortKey, entry: PortEntry, f: float | None) -> dict[str, Any] | None:
        """Evidence when the port was blocked for the interval, else None.

        Blocked = it held data (XmitWait counting at >= ``min_wait_ticks_per_s``, or the
        32-bit counter rising to its cap) AND it sent below ``progress_line_fraction`` of
        line rate, on a link that stayed up. No tick is needed for that. It must be
        corroborated by at least one signal that does not come from this port's XmitWait
        rate: its f_wait >= ``stall_wait_fraction`` with a tick known for the device, the cable
        peer receiving below ``peer_rx_line_fraction`` of line rate (PortRcvData ~0), rising
        PortXmitDiscards (the head-of-queue lifetime dropping what it could not send: IBTA
        vol. 1, HOQLife), or the 32-bit XmitWait saturating.
        """
        p = self.params
        xw = entry.counter(*XMIT_WAIT)
        if xw is None:
            return None
        saturated = xw.status == SATURATED
        rate = xw.rate
        if not saturated and (rate is None or rate < p["min_wait_ticks_per_s"]):
            return None
        if tx_progress(entry, None, p["progress_line_fraction"]) is not False or not link_ok(entry):
            return None
        why: list[str] = []
        ev: dict[str, Any] = {"stalled": True}
        if rate is not None:
            ev["xmit_wait_ticks_per_s"] = round(rate)
        tx = entry.counter(*TX_BYTES)
        if tx is not None and tx.rate is not None:
            ev["sent_bytes_per_s"] = round(tx.rate)
        if f is not None:
            ev["xmit_wait_fraction"] = round(f, 4)
            if f >= p["stall_wait_fraction"]:
                why.append(f"waited {f:.0%} of the interval")
        _, r = wait_last(entry, None)
        if r is not None:
            ev["xmit_wait_ratio"] = round(r, 4)
        speed = speed_bytes(entry)
        peer = ctx.topology.peer(*pk)
        pe = ctx.store.port(peer) if peer is not None else None
        prx = pe.counter(*RX_BYTES) if pe is not None else None
        if prx is not None and prx.rate is not None and prx.delta is not None:
            ev["peer_received_bytes_per_s"] = round(prx.rate)
            if (prx.rate < p["peer_rx_line_fraction"] * speed) if speed else prx.delta == 0:
                share = f"{prx.rate / speed:.2%} of line rate" if speed else "nothing"
                why.append(f"its cable peer {peer[0]} {peer[1]} received {share}")  # type: ignore[index]
        disc = entry.counter("tx_discards")
        if disc is not None and disc.delta:
            ev["tx_discards"] = disc.delta
            why.append(f"{int(disc.delta)} packets discarded at the head of the queue")
        if saturated:
            ev["xmit_wait_saturated"] = True
            why.append("the 32-bit XmitWait counter saturated")
        if not why:
            return None
        ev["blocked_because"] = why
        return ev

    def _leaky(self, ctx: DetectContext, fracs: dict[PortKey, float | None],
               stalled: dict[PortKey, dict[str, Any]]) -> dict[PortKey, dict[str, Any]]:
        """Ports holding data now that were stalled, or discarded while holding data, within
        ``leaky_window_s``: members of a loop that leaks (see the parameter)."""
        p = self.params
        t = ctx.t
        blocked = self.blocked_t
        for pk in stalled:
            if pk in fracs:
                blocked[pk] = t
        out: dict[PortKey, dict[str, Any]] = {}
        limit = t - p["leaky_window_s"]
        for pk, f in fracs.items():
            if pk in stalled:
                continue
            entry = ctx.store.port(pk)
            xw = entry.counter(*XMIT_WAIT) if entry is not None else None
            if xw is None or (xw.rate or 0.0) < p["min_wait_ticks_per_s"] or not link_ok(entry):  # type: ignore[arg-type]
                continue
            disc = entry.counter("tx_discards")  # type: ignore[union-attr]
            if disc is not None and disc.delta:
                blocked[pk] = t
            if blocked.get(pk, limit - 1) < limit:
                continue
            ev: dict[str, Any] = {"stalled": True, "leaky": True, "xmit_wait_ticks_per_s": round(xw.rate or 0.0),
                                  "last_blocked_s_ago": round(t - blocked[pk], 3)}
            if f is not None:
                ev["xmit_wait_fraction"] = round(f, 4)
            if disc is not None and disc.delta:
                ev["tx_discards"] = disc.delta
            ev["blocked_because"] = [f"blocked or discarding {t - blocked[pk]:.0f} s ago and still holding data"]
            out[pk] = ev
        if len(blocked) > 2 * len(fracs) + 64:
            for pk in [k for k, v in blocked.items() if v < limit]:
                del blocked[pk]
        return out

    def evaluate(self, ctx: DetectContext) -> Iterable[Observation]:
        ports = ctx.store.ports
        updated = ctx.updated
        fracs = last_wait_fractions(ctx, self.params)
        # Exported ratio: f_wait where XmitWait moved; 0 on updated ports where it did not.
        ratio = self.wait_ratio
        values = ratio.values
        values.update((pk, f) for pk, f in fracs.items() if f)
        for pk in [pk for pk in values.keys() - fracs.keys() if pk in updated]:
            entry = ports.get(pk)
            xw = entry.counter(*XMIT_WAIT) if entry is not None else None
            ratio.set(pk, 0.0 if xw is not None and xw.delta == 0 else None)
            if xw is None:
                del values[pk]
        suspects = ctx.cache.get((SUSPECT_CACHE_KEY, (self.params["xmit_wait_tick_s"], self.params["xmit_wait_tick_bits"])), set())
        for key in [k for k in self.tick_suspect.values if k in updated and k not in suspects]:
            self.tick_suspect.set(key, 0.0)
        for pk in suspects:
            self.tick_suspect.set(pk, 1.0)
        # Stalled ports: kept for ports not updated in this pass, recomputed for the others.
        # A port whose XmitWait did not move is not stalled; most that moved send plenty.
        stalled = {pk: ev for pk, ev in self.stalled.items() if pk not in updated and pk in ports}
        for pk, f in fracs.items():
            entry = ports.get(pk)
            ev = self._stall(ctx, pk, entry, f) if entry is not None else None
            if ev is not None:
                stalled[pk] = ev
        self.stalled = stalled
        leaky = self._leaky(ctx, fracs, stalled)
        if not stalled and not leaky:
            return
        topo = ctx.topology
        by_device: dict[str, list[PortKey]] = {}
        for pk in [*stalled, *leaky]:
            by_device.setdefault(pk[0], []).append(pk)

        def succ(pk: PortKey) -> list[PortKey]:
            pe = topo.peer(*pk)
            return [] if pe is None else [q for q in by_device.get(pe[0], ()) if q != pe]

        fresh = ctx.updated_devices
        incidents: dict[PortKey, tuple[str, str]] = ctx.cache.setdefault(INCIDENT_CACHE_KEY, {})
        for comp in tarjan_scc(sorted({*stalled, *leaky}), succ):
            if len(comp) < 2 and comp[0] in leaky:
                continue  # leaking alone is congestion's to judge, not a stall
            if len(comp) >= 2:
                stalled.update((pk, leaky[pk]) for pk in comp if pk in leaky)
                names = sorted(f"{d}:{p}" for d, p in comp)
                incident = f"credit_loop:{names[0]}"
                discards = sum(stalled[pk].get("tx_discards", 0) for pk in comp)
                lost = f"; {int(discards)} packets discarded on the loop this interval" if discards else ""
                for pk in comp:
                    incidents[pk] = (incident, f"the credit loop {', '.join(names)}")
                    if pk[0] in fresh:
                        yield Observation(
                            kind="credit_deadlock", severity="critical", device=pk[0], port=pk[1], role="member",
                            summary=f"InfiniBand credit loop: {len(comp)} ports wait for credits on each other with no data "
                                    f"moving{lost}. First break the loop: check the routing (ibdiagnet -r reports credit loops) "
                                    f"and drain one member link",
                            evidence={**stalled[pk], "cycle": names, "incident": incident, "loop_discards": discards},
                        )
                continue
            pk = comp[0]
            incident = f"stall:{pk[0]}:{pk[1]}"
            incidents[pk] = (incident, f"the stalled port {pk[0]} {pk[1]}")
            if pk[0] in fresh:
                peer = topo.peer(*pk)
                toward = f" toward {peer[0]} {peer[1]}" if peer else ""
                first = f"check {peer[0]} {peer[1]} (a dead or slow receiver)" if peer else "check the receiver on this link"
                yield Observation(
                    kind="congestion", severity="critical", device=pk[0], port=pk[1],
                    summary=f"{pk[0]} port {pk[1]} is stalled{toward}: it holds data and sends nothing "
                            f"({'; '.join(stalled[pk]['blocked_because'])}). First {first}",
                    evidence={**stalled[pk], "incident": incident},
                )

    def metrics(self) -> Iterable[RuleMetric]:
        return (self.wait_ratio.metric(), self.tick_suspect.metric())
