"""link_degraded: a link that corrupts bits or runs below its expected speed or width.

Link flaps (LinkDowned, LinkErrorRecovery) are the ``link_flap`` rule's; both rules report
kind ``link_degraded`` on the port with role None, so the detector merges them into one
finding per port (the higher severity wins).

* **Symbol BER.** BER = symbol errors / bits carried by the link (``link_speed_bytes``
  x 8 x elapsed), summed over valid intervals only. Zero errors justify BER <= B only after
  about 3/B bits (the "rule of three": with no event in n trials the 95 % upper bound on
  the rate is 3/n; Hanley & Lippman-Hand, JAMA 1983), so the estimate is judged over a
  tumbling window of 3 / (``ber_threshold`` x bit rate) seconds (7.5 s at 400G for 1e-12):
  > ``ber_threshold`` (1e-12, ibdiagnet ``--ber_test``) -> critical. It is decided early
  when the errors already exceed what the full window allows (> 3 errors). The UFM PDR
  plugin's check (Mellanox/ufm_sdk_3.0 ``plugins/pdr_deterministic_plugin``) runs the same way
  over ``pdr_window_s`` (720 s) with ``pdr_ber`` 1e-14, i.e.
  > LinkBW x 720 s x 1e-14 errors (2.88 at 400G) -> warning. A verdict holds until the
  next window of that length completes. ``raise_polls`` 1: the window is the persistence.
  Ports without a known speed are skipped.
* **Lasting degradation**, a state with its own finding for as long as it lasts, not a
  one-poll event: a link that is up but narrower or slower than its reference
  (:mod:`fabricmon.agent.detector.linkrate`: the rated width and speed both ends report, else
  the cabling plan's ``expected_width_lanes`` / ``expected_speed_bytes``, else its usual: what
  it ran at earlier and what the other links between the same two device models run at) ->
  warning, "runs at 2x NDR (200 Gb/s) since 02:10:00 UTC, half its rated 4x NDR (400 Gb/s)",
  raised on the second poll that shows it (one poll can catch a link mid-training); and a link
  that was up and went down -> warning for as long as it stays down (the flap that took it
  down is ``link_flap``'s, the same finding). Both clear when the link is back.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

from pydantic import Field

from fabricmon.agent.detector.base import DetectContext, Observation, Rule, RuleParams, Seconds
from fabricmon.agent.detector.common import LINK_UP, speed_bytes
from fabricmon.agent.detector.linkrate import Rate, Usual, active, lower, rated
from fabricmon.agent.store import PortEntry, PortKey
from fabricmon.core.slicing import sorted_in_slices

SYMBOL = ("symbol_errors", ())
RATE_GAUGES = ("link_up", "link_speed_bytes", "link_width_lanes", "link_width_rated_lanes", "link_speed_rated_bytes")


class _Window:
    """Tumbling BER window: errors and seconds accumulated, the last verdict."""

    __slots__ = ("errors", "seconds", "verdict")

    def __init__(self) -> None:
        self.errors = 0.0
        self.seconds = 0.0
        self.verdict: tuple[float, float, float] | None = None  # (ber, errors, seconds) when exceeded


class LinkDegradedParams(RuleParams):
    ber_threshold: float = Field(1e-12, gt=0.0, lt=1.0)  # bit error ratio (ibdiagnet --ber_test)
    ber_min_window_s: Seconds = 0.0  # a floor under the rule-of-three window
    pdr_ber: float = Field(1e-14, gt=0.0, lt=1.0)  # the UFM PDR plugin's ratio
    pdr_window_s: Seconds = Field(720.0, gt=0)  # ... and its window
    expected_width_lanes: int | None = Field(None, ge=1, le=32)  # from the cabling plan; None: off
    expected_speed_bytes: float | None = Field(None, gt=0)  # bytes per second, all lanes; None: off


class LinkDegradedRule(Rule):
    name = "link_degraded"
    kinds = ("link_degraded",)
    Params = LinkDegradedParams
    raise_polls = 1
    clear_polls = 2

    def __init__(self, params: LinkDegradedParams | dict[str, Any] | None = None) -> None:
        super().__init__(params)
        self.windows: dict[PortKey, tuple[_Window, _Window]] = {}
        self.downgraded: set[PortKey] = set()  # ports in a lasting state (degraded, or down after being up)
        self.best: dict[PortKey, Rate] = {}  # the widest and fastest each port ran at while up
        self.since: dict[PortKey, float] = {}  # when the port's lasting state began
        self._usual: tuple[tuple, Usual] | None = None
        self._epoch = 0  # bumped by every pass with rate gauge changes: the usual is rebuilt then

    def evaluate(self, ctx: DetectContext) -> Iterable[Observation]:
        ports = ctx.store.ports
        # BER: ports with new symbol errors, and those with an open window (whose seconds
        # keep accumulating until it completes).
        for pk in ctx.moved(SYMBOL[0]) | ctx.watched(self.windows):
            entry = ports.get(pk)
            if entry is not None and entry.counter(*SYMBOL) is not None:
                yield from self._ber(pk, entry)
        changed = ctx.changes.gauge_ports(RATE_GAUGES)  # type: ignore[union-attr]
        if changed:
            self._epoch += 1
        for pk in sorted_in_slices(changed | ctx.watched(self.downgraded)):  # every port at start: no long GIL hold
            entry = ports.get(pk)
            found = self._lasting(ctx, pk, entry) if entry is not None else None
            if found is not None:
                self.downgraded.add(pk)
                yield found
            else:
                self.downgraded.discard(pk)
                self.since.pop(pk, None)
        if len(self.windows) > 0 and len(self.windows) > len(ports) // 2:
            for pk in [pk for pk in self.windows if pk not in ports]:
                del self.windows[pk]
        if len(self.best) > len(ports):
            for state in (self.best, self.since):
                for pk in [pk for pk in state if pk not in ports]:
                    del state[pk]
            self.downgraded.intersection_update(ports)

    def _ber(self, pk: PortKey, entry: PortEntry) -> Iterable[Observation]:
        se = entry.counter(*SYMBOL)
        wins = self.windows.get(pk)
        if wins is None and not se.delta:
            return  # state only for ports that have shown errors
        speed = speed_bytes(entry)
        if se.delta is None or not se.dt or speed is None:
            return
        if wins is None:
            wins = self.windows[pk] = (_Window(), _Window())
        p = self.params
        bits_per_s = speed * 8
        specs = (
            (p.ber_threshold, max(3.0 / (p.ber_threshold * bits_per_s), p.ber_min_window_s), "critical"),
            (p.pdr_ber, p.pdr_window_s, "warning"),
        )
        worst: tuple[str, float, float, float, float] | None = None
        for w, (thr, length, level) in zip(wins, specs, strict=True):
            w.errors += se.delta
            w.seconds += se.dt
            if w.errors > thr * bits_per_s * length:  # already above threshold over the full window
                w.verdict = (w.errors / (bits_per_s * max(w.seconds, length)), w.errors, w.seconds)
            if w.seconds >= length:
                ber = w.errors / (bits_per_s * w.seconds)
                w.verdict = (ber, w.errors, w.seconds) if ber > thr else None
                w.errors = w.seconds = 0.0
            if w.verdict is not None and (worst is None or level == "critical"):
                worst = (level, *w.verdict, length)
        if worst is None:
            if all(w.verdict is None and w.errors == 0 for w in wins):
                del self.windows[pk]
            return
        level, ber, errors, seconds, length = worst
        yield Observation(
            kind="link_degraded", severity=level, device=pk[0], port=pk[1],
            summary=f"{pk[0]} port {pk[1]}: symbol error rate {ber:.1e} ({int(errors)} errors in {seconds:.0f} s). First "
                    f"reseat or clean the cable and optics on both ends, then replace the cable if it stays",
            evidence={"symbol_ber": ber, "symbol_errors": errors, "seconds": round(seconds, 3), "window_s": round(length, 3),
                      "link_speed_bytes": speed},
        )

    # ------------------------------------------------------------------ lasting states
    def _lasting(self, ctx: DetectContext, pk: PortKey, entry: PortEntry) -> Observation | None:
        """The port's lasting state: down after having been up, or up below its reference."""
        up = entry.gauge(*LINK_UP)
        if up is not None and up <= 0:
            return self._down(ctx, pk) if pk in self.best else None
        rate = active(entry)
        if rate is None:
            return None
        ref = self._reference(ctx, pk, entry)
        self.best[pk] = rate.best(self.best.get(pk))
        if ref is None or not rate.below(ref[0]):
            return None
        return self._degraded(ctx, pk, rate, *ref)

    def _reference(self, ctx: DetectContext, pk: PortKey, entry: PortEntry) -> tuple[Rate, str, str] | None:
        """What the link should run at, what that is (rated, planned, usual) and where it comes
        from in words (see linkrate)."""
        peer = ctx.topology.peer(*pk)
        both = lower(rated(entry), rated(ctx.store.ports.get(peer) if peer else None))
        if both is not None:
            return both, "rated", "the width and speed both ends report they support and have enabled"
        p = self.params
        if p.expected_width_lanes or p.expected_speed_bytes:
            return Rate(p.expected_width_lanes, p.expected_speed_bytes), "planned", "expected_width_lanes, expected_speed_bytes"
        own = self.best.get(pk)
        if peer is not None and peer in self.best:
            own = self.best[peer].best(own)  # the same cable, seen from its other end
        usual = self._usual_of(ctx)
        group = usual.of(pk)
        if group is not None and (own is None or not group[0].below(own)):
            models = usual.key(pk) or ("", "")
            return group[0].best(own), "usual", f"what {group[1]} other ports on cables between {models[0]} and {models[1]} devices run at"
        return (own, "usual", "what this link ran at earlier") if own is not None else None

    def _usual_of(self, ctx: DetectContext) -> Usual:
        """The usual rates per model pair, rebuilt when rate gauges, devices or cables changed."""
        stamp = (self._epoch, ctx.topology.generation, len(ctx.store.devices))
        if self._usual is None or self._usual[0] != stamp:
            models = {name: d.model for name, d in ctx.store.devices.items() if d.model}
            self._usual = (stamp, Usual(ctx.store.ports, ctx.topology, models))
        return self._usual[1]

    def _degraded(self, ctx: DetectContext, pk: PortKey, rate: Rate, ref: Rate, what: str, ref_from: str) -> Observation:
        since = self.since.setdefault(pk, ctx.t)
        share = rate.speed / ref.speed if rate.speed and ref.speed else (rate.width / ref.width if rate.width and ref.width else None)
        part = "half" if share is not None and abs(share - 0.5) < 0.02 else f"{share:.0%} of" if share is not None else "below"
        ev: dict[str, Any] = {"width_lanes": rate.width, "speed_bytes": rate.speed, "reference_width_lanes": ref.width,
                              "reference_speed_bytes": ref.speed, "reference": what, "reference_from": ref_from, "since": since}
        if share is not None:
            ev["bandwidth_fraction"] = round(share, 4)
        return Observation(
            kind="link_degraded", severity="warning", device=pk[0], port=pk[1], raise_polls=2,
            summary=f"{pk[0]} port {pk[1]} runs at {rate.text()} since {_clock(since)}, {part} its {what} {ref.text()} "
                    f"({ref_from}). First check the cable and module on both ends (a failed lane or a downshifted link); "
                    f"reseat or replace them",
            evidence=ev,
        )

    def _down(self, ctx: DetectContext, pk: PortKey) -> Observation:
        since = self.since.setdefault(pk, ctx.t)
        return Observation(
            kind="link_degraded", severity="warning", device=pk[0], port=pk[1], raise_polls=1,
            summary=f"{pk[0]} port {pk[1]} is down since {_clock(since)} (it was up at {self.best[pk].text()}). "
                    f"First check the other end (a rebooting or failed host or switch), then the cable and optics",
            evidence={"link_up": 0, "since": since, "was": self.best[pk].text()},
        )


def _clock(t: float) -> str:
    """A recording or poll time as the operator reads it: UTC time of day, with the date."""
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(t))
