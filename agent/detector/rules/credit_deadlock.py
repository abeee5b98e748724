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

A 32-bit XmitWait that already sits at its cap (old firmware without the 64-bit counters:
IBA counters stop at all-ones) says nothing; then rising PortXmitDiscards with nothing sent
show the port held data (only a port that cannot send lets packets outlive the head-of-queue
lifetime), and the cable peer's silent receive side corroborates.

**Leaky loops.** A loop broken by head-of-queue lifetime is not frozen: per poll its members
wait 70-100 %, send a trickle and discard in bursts (OpenSM's switch HOQ lifetime is about
1.07 s, opensm.conf ``head_of_queue_lifetime 0x12``). Graph membership therefore uses a
looser per-poll test than a stall (``loop_wait_fraction`` 0.5 and ``loop_line_fraction`` 5 %,
corroborated the same way), and a port that still holds data and was blocked or discarding
within ``leaky_window_s`` (60 s) stays in the graph: the loop is found on its first polls and
is one finding over its whole life, not one per burst. Alone, a port at the loop level is no
finding; only a cycle is.

**Credit graph.** Port ``e`` on switch X waits for credits from its peer ``peer(e)`` on Y.
Y's receive buffer for that link drains only through Y's egress ports, so ``e`` depends on
every stalled egress ``e2`` of Y other than ``peer(e)`` (no hairpin). Which egress holds
which ingress buffer is not counted, so this over-approximates; only stalled ports enter
the graph, which keeps heavy but moving traffic out of it. The graph walk is
:func:`fabricmon.agent.detector.graph.tarjan_scc` (iterative).

* A strongly connected component of >= 2 stalled or loop-level ports: ``credit_deadlock``,
  role ``member``, critical, ``raise_polls`` 2 (a credit loop). The evidence lists each
  member's wait, what it sent (share of line rate) and its discards.
* A stalled port outside any cycle: ``congestion``, critical, evidence ``stalled: true``
  (a dead or slow receiver, a stuck HCA), ``raise_polls`` 2.

Both carry an ``incident`` id; ``packet_loss`` puts the same id on the discards of those
ports and ``congestion`` leaves their XmitWait alone: one fault, one incident.

Exports ``fabricmon_port_xmit_wait_ratio{device,port}``: f_wait of the last interval (0..1),
``fabricmon_port_xmit_wait_tick_suspect{device,port}``, and
``fabricmon_port_incident{device,port,incident}`` (1 while the port is held by that loop or
stall: the metrics join a member's loss finding to its loop by device and port).
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
    tick_origin,
    wait_last,
)
from fabricmon.agent.store import SATURATED, PortEntry, PortKey, Series


def _at_cap(entry: PortEntry | None) -> bool:
    xw = entry.counter(*XMIT_WAIT) if entry is not None else None
    return xw is not None and xw.status == SATURATED


def _member(ev: dict[str, Any], entry: PortEntry | None) -> dict[str, Any]:
    """One loop member's numbers for the evidence: its wait, what it sent (share of line
    rate when the speed is known) and its head-of-queue discards."""
    out: dict[str, Any] = {k: ev[k] for k in ("xmit_wait_fraction", "sent_bytes_per_s", "tx_discards") if k in ev}
    speed = speed_bytes(entry) if entry is not None else None
    if speed and "sent_bytes_per_s" in ev:
        out["sent_line_fraction"] = round(ev["sent_bytes_per_s"] / speed, 5)
    return out


def _loop_summary(names: list[str], members: dict[str, dict[str, Any]], discards: float) -> str:
    """The loop in plain words: the cycle, how long its members waited and how little they
    sent, the discards, and what to do first."""
    waits = [m["xmit_wait_fraction"] for m in members.values() if "xmit_wait_fraction" in m]
    sent = [m["sent_line_fraction"] for m in members.values() if "sent_line_fraction" in m]
    how = f" waited {min(waits):.0%}-{max(waits):.0%} of the interval" if waits else " held data"
    trickle = f" and sent at most {max(sent):.1%} of line rate" if sent else " and sent almost nothing"
    lost = (f"; {int(discards)} packets discarded at the queue heads this interval (head-of-queue lifetime: the "
            f"loop leaks, it is not frozen)") if discards else ""
    return (f"InfiniBand credit loop through {', '.join(names)}: each port waits for credits from the next; they{how}"
            f"{trickle}{lost}. First break the loop: check the routing through these ports (ibdiagnet -r "
            f"reports credit loops) and drain one member link")


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
        # A leaking loop member in one poll: it waited at least half the interval (a majority:
        # the port is mostly blocked, not mostly sending) and sent below 5 % of line rate. Each
        # HOQ expiry (about one per lifetime, 1.07 s) frees the head packet's buffer and lets
        # a few packets through, so over a 10 s poll a leaking member moves a trickle, well
        # under 1 % of what the link carries; 5 % leaves room for short lifetimes. A port
        # congested by load still sends what it does not wait for (f_wait 0.5 -> about half
        # of line rate), so it stays out. Only for graph membership: a cycle must form.
        "loop_wait_fraction": 0.5,
        "loop_line_fraction": 0.05,
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
        # One fault, one incident: the loop's (or stall's) id on every port it holds, so the
        # per-port loss on those ports (packet_loss evidence ``incident``) joins it in PromQL.
        self.incident = RatioGauge(
            "fabricmon_port_incident",
            "1 while the port is part of an InfiniBand credit-loop or stall incident (incident: its id, also in the "
            "evidence of the credit_deadlock, congestion and packet_loss findings on these ports).",
            ("device", "port", "incident"),
        )

    def _export_incidents(self, current: dict[PortKey, tuple[str, str]]) -> None:
        now = {(pk[0], pk[1], inc[0]) for pk, inc in current.items()}
        for key in [k for k in self.incident.values if k not in now]:
            self.incident.set(key, 0.0)
        for key in now:
            self.incident.set(key, 1.0)

    def _stall(self, ctx: DetectContext, pk: PortKey, entry: PortEntry, f: float | None,
               held: tuple[Series, bool, bool, Series | None], leaky: bool = False) -> dict[str, Any] | None:
        """Evidence when the port was blocked for the interval, else None. ``held``: what
        :meth:`_held` found (the port held data).

        Blocked = it held data (XmitWait counting at >= ``min_wait_ticks_per_s``, or the
        32-bit counter rising to its cap) AND it sent below ``progress_line_fraction`` of
        line rate, on a link that stayed up. No tick is needed for that. It must be
        corroborated by at least one signal that does not come from this port's XmitWait
        rate: its f_wait >= ``stall_wait_fraction`` with a tick known for the device, the cable
        peer receiving below ``peer_rx_line_fraction`` of line rate (PortRcvData ~0), rising
        PortXmitDiscards (the head-of-queue lifetime dropping what it could not send: IBTA
        vol. 1, HOQLife), or the 32-bit XmitWait saturating.

        ``leaky``: the test for a member of a loop that leaks through head-of-queue discards
        (``loop_line_fraction``, ``loop_wait_fraction`` instead of the stall levels). It
        only ever puts a port into the credit graph: alone, such a port is no finding.
        """
        p = self.params
        line = p["loop_line_fraction"] if leaky else p["progress_line_fraction"]
        peer_line = p["loop_line_fraction"] if leaky else p["peer_rx_line_fraction"]
        wait_level = p["loop_wait_fraction"] if leaky else p["stall_wait_fraction"]
        xw, saturated, rose, disc = held
        discarding = disc is not None and bool(disc.delta)
        rate = xw.rate
        if tx_progress(entry, None, line) is not False or not link_ok(entry):
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
            ev["xmit_wait_tick_from"] = tick_origin(ctx, pk, entry, p)
            if f >= wait_level:
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
            if (prx.rate < peer_line * speed) if speed else prx.delta == 0:
                share = f"{prx.rate / speed:.2%} of line rate" if speed else "nothing"
                why.append(f"its cable peer {peer[0]} {peer[1]} received {share}")  # type: ignore[index]
        if discarding and not (saturated and not rose):  # else the discards are the held-data signal itself
            ev["tx_discards"] = disc.delta  # type: ignore[union-attr]
            why.append(f"{int(disc.delta)} packets discarded at the head of the queue")  # type: ignore[union-attr]
        elif discarding:
            ev["tx_discards"] = disc.delta  # type: ignore[union-attr]
            ev["xmit_wait_at_cap"] = True  # held data shown by the discards, not by XmitWait
            ev["held_data_because"] = (f"XmitWait sits at its 32-bit cap and says nothing; {int(disc.delta)} packets "  # type: ignore[union-attr]
                                       f"discarded at the head of the queue show the port held data")
        if rose:
            ev["xmit_wait_saturated"] = True
            why.append("the 32-bit XmitWait counter rose to its cap")
        if not why:
            return None
        # At the loop level the port may send up to 5 % of line rate, so a quiet link's receive
        # side is no proof of blocking: the wait itself (f_wait with the device's tick), head-of-
        # queue discards or XmitWait rising to its cap must show it.
        if leaky and not ((f is not None and f >= wait_level) or discarding or rose):
            return None
        ev["blocked_because"] = why
        if leaky:
            ev["leaky"] = True
        return ev

    def _held(self, entry: PortEntry) -> tuple[Series, bool, bool, Series | None] | None:
        """(XmitWait, saturated, rose to its cap, tx_discards) when the port held data in the
        interval (the first half of both stall tests), else None.

        Saturated: the 32-bit counter rose to its cap this interval (it held data), or it sat
        at the cap already and says nothing now (IBA counters stop at the cap). Then the
        head-of-queue discards show the port held data: packets waited at the head longer
        than the lifetime (IBTA vol. 1, HOQLife), which only a port that cannot send does.
        """
        xw = entry.counter(*XMIT_WAIT)
        if xw is None:
            return None
        saturated = xw.status == SATURATED
        rose = saturated and xw.increases(1) > 0
        disc = entry.counter("tx_discards")
        if saturated and not rose:
            if disc is None or not disc.delta:
                return None
        elif not saturated:
            rate = xw.rate
            if rate is None or rate < self.params["min_wait_ticks_per_s"]:
                return None
        return xw, saturated, rose, disc

    def _leaky(self, ctx: DetectContext, fracs: dict[PortKey, float | None],
               stalled: dict[PortKey, dict[str, Any]], holding: set[PortKey]) -> dict[PortKey, dict[str, Any]]:
        """Ports holding data now that were stalled, or discarded while holding data, within
        ``leaky_window_s``: members of a loop that leaks (see the parameter). ``holding``: the
        ports that passed :meth:`_held` (every port this finds is among them)."""
        p = self.params
        t = ctx.t
        blocked = self.blocked_t
        for pk in stalled:
            if pk in fracs:
                blocked[pk] = t
        out: dict[PortKey, dict[str, Any]] = {}
        limit = t - p["leaky_window_s"]
        for pk, f in fracs.items():
            if pk in stalled or pk not in holding:
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
        blocked_now: dict[PortKey, dict[str, Any]] = {}  # leaking-loop level, not stalled
        # Ports whose XmitWait sits at its 32-bit cap do not move, so discards bring them in.
        at_cap = {pk: None for pk in ctx.moved("tx_discards") if pk not in fracs and _at_cap(ports.get(pk))}
        # Both stall tests first ask that the port held data and sent below their line fraction:
        # a port that did not hold data, or sent at least the larger of the two fractions,
        # passes neither (most ports of a fabric), so it is judged by those two checks alone.
        sends = max(self.params["progress_line_fraction"], self.params["loop_line_fraction"])
        holding: set[PortKey] = set()  # held data in the interval: the only candidates of _leaky too
        for pk, f in {**fracs, **at_cap}.items():
            entry = ports.get(pk)
            held = None if entry is None else self._held(entry)
            if entry is None or held is None:
                continue
            holding.add(pk)
            if tx_progress(entry, None, sends) is not False:
                continue
            ev = self._stall(ctx, pk, entry, f, held)
            if ev is not None:
                stalled[pk] = ev
            elif (ev := self._stall(ctx, pk, entry, f, held, leaky=True)) is not None:
                blocked_now[pk] = ev
        self.stalled = stalled
        leaky = self._leaky(ctx, fracs, {**stalled, **blocked_now}, holding)
        leaky.update(blocked_now)
        if not stalled and not leaky:
            self._export_incidents({})
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
                members = {f"{d}:{p}": _member(stalled[(d, p)], ports.get((d, p))) for d, p in sorted(comp)}
                for pk in comp:
                    incidents[pk] = (incident, f"the credit loop {', '.join(names)}")
                    if pk[0] in fresh:
                        yield Observation(
                            kind="credit_deadlock", severity="critical", device=pk[0], port=pk[1], role="member",
                            summary=_loop_summary(names, members, discards),
                            evidence={**stalled[pk], "cycle": names, "incident": incident, "loop_discards": discards,
                                      "members": members},
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
        self._export_incidents(incidents)

    def metrics(self) -> Iterable[RuleMetric]:
        return (self.wait_ratio.metric(), self.tick_suspect.metric(), self.incident.metric())
