"""link_flap: a link that went down or retrained within the last poll.

Signals: LinkDowned (``link_downed``), LinkErrorRecovery (``link_error_recovery``, a
retrain that kept the link), and the ``link_up`` gauge falling to 0 when the source has no
such counter (SNMP ifOperStatus). The hardware already counted the event, so it is raised
on the first poll that shows it (``raise_polls`` 1). ``critical_flaps`` (3) events within
``window`` (600 s, bounded by the store's history) escalate to critical: one flap is an
event to look at, repeated flaps within minutes a link to take out (the UFM PDR plugin
isolates a port on link-down events; Mellanox/ufm_sdk_3.0 ``plugins/pdr_deterministic_plugin``). Kind
``link_degraded``, the same key as the ``link_degraded`` rule's, so one port gives one
finding.
"""

from __future__ import annotations

from collections.abc import Iterable

from pydantic import Field

from fabricmon.agent.detector.base import DetectContext, Observation, Rule, RuleParams, Seconds

EVENTS = (("link_downed", ()), ("link_error_recovery", ()))


class LinkFlapParams(RuleParams):
    critical_flaps: int = Field(3, ge=1, le=1_000_000)  # events within window that make it critical
    window: Seconds = Field(600.0, gt=0)


class LinkFlapRule(Rule):
    name = "link_flap"
    kinds = ("link_degraded",)
    Params = LinkFlapParams
    raise_polls = 1
    clear_polls = 3

    def evaluate(self, ctx: DetectContext) -> Iterable[Observation]:
        store = ctx.store
        # Counted events where a counter moved; for sources without the counters (SNMP),
        # the link_up gauge falling from up to down.
        went_down = {pk for pk, prev in ctx.gauge_changed("link_up").items() if prev is not None and prev > 0}
        for pk in ctx.moved(*(name for name, _ in EVENTS)) | went_down:
            entry = store.ports.get(pk)
            if entry is None:
                continue
            now = ev = 0.0
            win = 0.0
            evidence: dict[str, float] = {}
            found = [(key, se) for key in EVENTS if (se := entry.counter(*key)) is not None]
            if found:
                for key, se in found:
                    w = se.window(self.params.window)
                    win += w[0] if w else (se.delta or 0.0)
                    if se.delta:
                        now += se.delta
                        evidence[f"{key[0]}_delta"] = se.delta
            else:
                g = entry.gauge("link_up")
                if g is not None and g <= 0:
                    now = win = ev = 1.0
                    evidence["link_up"] = 0
            if not now:
                continue
            severity = "critical" if win >= self.params.critical_flaps else "warning"
            device, port = pk
            yield Observation(
                kind="link_degraded", severity=severity, device=device, port=port,
                summary=f"link on {device} port {port} went down or retrained {int(now)} time(s) in the last poll "
                        f"({int(win)} in the last {int(self.params.window)} s). First check the cable, optics and "
                        f"port errors on both ends; isolate the link if it keeps flapping",
                evidence={**evidence, "flaps_window": win or ev, "window_s": self.params.window},
            )
