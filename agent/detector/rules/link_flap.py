"""link_flap: a link that went down or retrained within the last poll (table B4).

Signals: LinkDowned (``link_downed``), LinkErrorRecovery (``link_error_recovery``, a
retrain that kept the link), and the ``link_up`` gauge falling to 0 when the source has no
such counter (SNMP ifOperStatus). The hardware already counted the event, so it is raised
on the first poll that shows it (``raise_polls`` 1). ``critical_flaps`` (3) events within
``window_s`` (600 s, bounded by the store's history) escalate to critical. Kind
``link_degraded``, the same key as the ``link_degraded`` rule's, so one port gives one
finding.
"""

from __future__ import annotations

from collections.abc import Iterable

from agent.detector import DetectContext, Observation, Rule
from agent.store import PortKey

EVENTS = (("link_downed", ()), ("link_error_recovery", ()))


class LinkFlapRule(Rule):
    name = "link_flap"
    kinds = ("link_degraded",)
    raise_polls = 1
    clear_polls = 3
    defaults = {"critical_flaps": 3, "window_s": 600.0}

    def __init__(self, params: dict | None = None) -> None:
        super().__init__(params)
        self._up: dict[PortKey, float] = {}  # last link_up per port, for sources without counters

    def evaluate(self, ctx: DetectContext) -> Iterable[Observation]:
        store = ctx.store
        for pk in ctx.updated:
            entry = store.ports.get(pk)
            if entry is None:
                continue
            now = ev = 0.0
            win = 0.0
            counted = False
            evidence: dict[str, float] = {}
            found = [(key, se) for key in EVENTS if (se := entry.series.get(key)) is not None]
            if found:
                counted = True
                if any(se.delta for _, se in found):  # windows only when something happened (cheap on quiet ports)
                    for key, se in found:
                        w = se.window(self.params["window_s"])
                        win += w[0] if w else (se.delta or 0.0)
                        if se.delta:
                            now += se.delta
                            evidence[f"{key[0]}_delta"] = se.delta
            g = None if counted else entry.gauges.get(("link_up", ()))
            if g is not None:
                prev = self._up.get(pk)
                self._up[pk] = g.value
                if not counted and prev is not None and prev > 0 >= g.value:
                    now = win = ev = 1.0
                    evidence["link_up"] = 0
            if not now:
                continue
            severity = "critical" if win >= self.params["critical_flaps"] else "warning"
            device, port = pk
            yield Observation(
                kind="link_degraded", severity=severity, device=device, port=port,
                summary=f"link on {device} port {port} went down or retrained {int(now)} time(s) in the last poll "
                        f"({int(win)} in the last {int(self.params['window_s'])} s)",
                evidence={**evidence, "flaps_window": win or ev, "window_s": self.params["window_s"]},
            )
