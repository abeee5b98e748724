"""credit_deadlock: InfiniBand ports stalled for credits in a cycle (I1), or alone (I2).

A port is **stalled** when, over the last valid interval on a link that stayed up:

* f_wait >= ``stall_wait_fraction`` (0.95, table I1 "f_wait >= 0.95 x max"), or, when the
  tick is unknown, r_wait >= ``stall_wait_ratio`` (0.99) with XmitWait still counting at
  >= ``min_wait_ticks_per_s`` (1e6/s, so a few stray ticks on an idle port do not count);
* AND no data progress: tx bytes below ``progress_line_fraction`` (1 %) of line rate (any
  byte when the speed is unknown).

**Credit graph.** Port ``e`` on switch X waits for credits from its peer ``peer(e)`` on Y.
Y's receive buffer for that link drains only through Y's egress ports, so ``e`` depends on
every stalled egress ``e2`` of Y other than ``peer(e)`` (no hairpin). Which egress holds
which ingress buffer is not counted, so this over-approximates; only stalled ports enter
the graph, which keeps heavy but moving traffic out of it.

* A strongly connected component of >= 2 stalled ports: ``credit_deadlock``, role
  ``member``, critical, ``raise_polls`` 2 (a credit loop).
* A stalled port outside any cycle: ``congestion``, critical, evidence ``stalled: true``
  (I2: a dead or slow receiver, a stuck HCA), ``raise_polls`` 2.

Exports ``fabricmon_port_xmit_wait_ratio{device,port}``: f_wait of the last interval (0..1).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from fabricmon.agent.detector import DetectContext, Observation, Rule, RuleMetric
from fabricmon.agent.detector.graph import tarjan_scc
from fabricmon.agent.detector.rules._common import RatioGauge, link_ok, tx_progress
from fabricmon.agent.detector.rules._ib import IB_DEFAULTS, XMIT_WAIT, last_wait_fractions, wait_last
from fabricmon.agent.store import PortKey


class CreditDeadlockRule(Rule):
    name = "credit_deadlock"
    kinds = ("credit_deadlock", "congestion")
    raise_polls = 2
    clear_polls = 2
    defaults: dict[str, Any] = {
        **IB_DEFAULTS,
        "stall_wait_fraction": 0.95,
        "stall_wait_ratio": 0.99,
        "min_wait_ticks_per_s": 1e6,
        "progress_line_fraction": 0.01,
    }

    def __init__(self, params: dict[str, Any] | None = None) -> None:
        super().__init__(params)
        self.stalled: dict[PortKey, dict[str, Any]] = {}
        self.wait_ratio = RatioGauge(
            "fabricmon_port_xmit_wait_ratio",
            "Share of the last interval an InfiniBand port had data to send but no credits (f_wait).",
            ("device", "port"),
        )

    def _stall(self, entry: Any, f: float | None) -> dict[str, Any] | None:
        """Evidence when the port is stalled (``f``: its f_wait, None when the tick is unknown)."""
        p = self.params
        _, r = wait_last(entry, p)
        if f is None:
            if r is None:
                return None
            xw = entry.series[XMIT_WAIT]
            if r < p["stall_wait_ratio"] or (xw.rate or 0.0) < p["min_wait_ticks_per_s"]:
                return None
        if tx_progress(entry, None, p["progress_line_fraction"]) is not False or not link_ok(entry):
            return None
        ev: dict[str, Any] = {"stalled": True}
        if f is not None:
            ev["xmit_wait_fraction"] = round(f, 4)
        if r is not None:
            ev["xmit_wait_ratio"] = round(r, 4)
        return ev

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
            xw = entry.series.get(XMIT_WAIT) if entry is not None else None
            ratio.set(pk, 0.0 if xw is not None and xw.delta == 0 else None)
            if xw is None:
                del values[pk]
        # Stalled ports: kept for ports not updated in this pass, recomputed for the others.
        # A port whose XmitWait did not move is not stalled; most that moved are far below.
        threshold = self.params["stall_wait_fraction"]
        stalled = {pk: ev for pk, ev in self.stalled.items() if pk not in updated and pk in ports}
        for pk, f in fracs.items():
            if f is not None and f < threshold:
                continue
            entry = ports.get(pk)
            ev = self._stall(entry, f) if entry is not None else None
            if ev is not None:
                stalled[pk] = ev
        self.stalled = stalled
        if not stalled:
            return
        topo = ctx.topology
        by_device: dict[str, list[PortKey]] = {}
        for pk in stalled:
            by_device.setdefault(pk[0], []).append(pk)

        def succ(pk: PortKey) -> list[PortKey]:
            pe = topo.peer(*pk)
            return [] if pe is None else [q for q in by_device.get(pe[0], ()) if q != pe]

        fresh = ctx.updated_devices
        for comp in tarjan_scc(sorted(stalled), succ):
            if len(comp) >= 2:
                names = sorted(f"{d}:{p}" for d, p in comp)
                for pk in comp:
                    if pk[0] in fresh:
                        yield Observation(
                            kind="credit_deadlock", severity="critical", device=pk[0], port=pk[1], role="member",
                            summary=f"InfiniBand credit loop: {len(comp)} ports wait for credits on each other with no data moving",
                            evidence={**stalled[pk], "cycle": names},
                        )
                continue
            pk = comp[0]
            if pk[0] in fresh:
                peer = topo.peer(*pk)
                toward = f" toward {peer[0]} {peer[1]}" if peer else ""
                yield Observation(
                    kind="congestion", severity="critical", device=pk[0], port=pk[1],
                    summary=f"{pk[0]} port {pk[1]} is stalled{toward}: waiting for credits the whole interval, sending nothing",
                    evidence=dict(stalled[pk]),
                )

    def metrics(self) -> Iterable[RuleMetric]:
        return (self.wait_ratio.metric(),)
