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
* **Downgrade.** ``link_width_lanes`` below ``expected_width_lanes`` or
  ``link_speed_bytes`` below ``expected_speed_bytes`` on a link that is up -> warning
  (both None = off; set them from the cabling plan).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pydantic import Field

from fabricmon.agent.detector.base import DetectContext, Observation, Rule, RuleParams, Seconds
from fabricmon.agent.detector.common import LINK_UP, speed_bytes
from fabricmon.agent.store import PortEntry, PortKey

SYMBOL = ("symbol_errors", ())


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
        self.downgraded: set[PortKey] = set()

    def evaluate(self, ctx: DetectContext) -> Iterable[Observation]:
        ports = ctx.store.ports
        # BER: ports with new symbol errors, and those with an open window (whose seconds
        # keep accumulating until it completes).
        for pk in ctx.moved(SYMBOL[0]) | ctx.watched(self.windows):
            entry = ports.get(pk)
            if entry is not None and entry.counter(*SYMBOL) is not None:
                yield from self._ber(pk, entry)
        if self.params.expected_width_lanes or self.params.expected_speed_bytes:
            changed = ctx.changes.gauge_ports(("link_up", "link_speed_bytes", "link_width_lanes"))  # type: ignore[union-attr]
            for pk in changed | ctx.watched(self.downgraded):
                entry = ports.get(pk)
                found = list(self._downgrade(pk, entry)) if entry is not None else []
                if found:
                    self.downgraded.add(pk)
                    yield from found
                else:
                    self.downgraded.discard(pk)
        if len(self.windows) > 0 and len(self.windows) > len(ports) // 2:
            for pk in [pk for pk in self.windows if pk not in ports]:
                del self.windows[pk]
        if len(self.downgraded) > len(ports):
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

    def _downgrade(self, pk: PortKey, entry: PortEntry) -> Iterable[Observation]:
        up = entry.gauge(*LINK_UP)
        if up is not None and up <= 0:
            return
        p = self.params
        ev: dict[str, Any] = {}
        width = entry.gauge("link_width_lanes")
        if p.expected_width_lanes and width is not None and 0 < width < p.expected_width_lanes:
            ev.update(width_lanes=width, expected_width_lanes=p.expected_width_lanes)
        speed = speed_bytes(entry)
        if p.expected_speed_bytes and speed is not None and speed < p.expected_speed_bytes:
            ev.update(speed_bytes=speed, expected_speed_bytes=p.expected_speed_bytes)
        if ev:
            yield Observation(
                kind="link_degraded", severity="warning", device=pk[0], port=pk[1], raise_polls=2,
                summary=f"{pk[0]} port {pk[1]} runs below its expected " + " and ".join(
                    x for x, k in (("width", "width_lanes"), ("speed", "speed_bytes")) if k in ev)
                + ". First check the cable and module on both ends (a failed lane or a downshifted link)",
                evidence=ev,
            )
