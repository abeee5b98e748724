"""link_flap: a link that went down (LinkDowned / link state) within the last poll.

The hardware already counted the event, so it is raised on the first poll that shows it
(``raise_polls`` 1). Repeated flaps within ``window_s`` escalate to critical.
"""

from __future__ import annotations

from collections.abc import Iterable

from agent.detector import DetectContext, Observation, Rule


class LinkFlapRule(Rule):
    name = "link_flap"
    kinds = ("link_degraded",)
    raise_polls = 1
    clear_polls = 3
    defaults = {"critical_flaps": 3, "window_s": 600.0}

    def evaluate(self, ctx: DetectContext) -> Iterable[Observation]:
        store = ctx.store
        for pk in ctx.updated:
            entry = store.ports.get(pk)
            if entry is None:
                continue
            se = entry.series.get(("link_downed", ()))
            if se is None or not se.delta:
                continue
            win = se.window(self.params["window_s"])
            flaps = win[0] if win else se.delta
            severity = "critical" if flaps >= self.params["critical_flaps"] else "warning"
            device, port = pk
            yield Observation(
                kind="link_degraded", severity=severity, device=device, port=port,
                summary=f"link on {device} port {port} went down {int(se.delta)} time(s) in the last poll "
                        f"({int(flaps)} in the last {int(self.params['window_s'])} s)",
                evidence={"link_downed_delta": se.delta, "link_downed_window": flaps, "window_s": self.params["window_s"]},
            )
