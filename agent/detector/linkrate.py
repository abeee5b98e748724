"""What a link should run at, and how to say what it runs at: the reference of a lasting degradation.

A link trains to the widest width and fastest speed both ends support and have enabled (IBTA
vol. 2, link initialization and training; IEEE 802.3 clause 73 auto-negotiation for Ethernet).
When a lane fails or a cable or optic is marginal, it comes back narrower or slower (4x -> 2x,
NDR -> HDR, 800G -> 400G) and stays so until the cable is fixed: NVIDIA UFM lists such links as
"non-optimal" ("a link ... configured to operate at a certain speed and width and ... operating
at a lower rate", UFM Enterprise User Manual, "Non-Optimal Links"). The reference, first found:

1. **rated**: what the port and its cable peer report they can train to (``link_width_rated_lanes``,
   ``link_speed_rated_bytes``: UFM's supported/enabled width and speed); the lower of the two ends.
   ibnetdiscover and perfquery print only the active width and speed (rdma-core
   ``ibnetdiscover.c`` prints LinkWidthActive/LinkSpeedActive; PortInfo's LinkWidthSupported is
   ``smpquery portinfo``'s, not run), so an IB fabric read with them uses 3.
2. **plan**: the rule's ``expected_width_lanes`` / ``expected_speed_bytes`` (the cabling plan).
3. **usual**: the better of what this link itself ran at earlier (while up, as long as the agent
   has watched it) and what the ports on cables between the same two device models run at, when
   a strict majority of them do, at least :data:`MIN_OTHERS` besides this cable's own (judgement
   call, no public source: one odd link among its like is the one that degraded; a model pair
   with two populations of equal size, split and unsplit ports, has no majority and no
   reference). Both models must be known: without them a fabric's HDR and NDR hosts would be one
   group.
"""

from __future__ import annotations

import functools
from collections import Counter
from dataclasses import dataclass

from fabricmon.agent.store import PortEntry, PortKey
from fabricmon.core.topology import Topology

# A usual needs at least this many other links of the same model pair (judgement call: two
# agree on what one lost, and a pair of links alone says nothing).
MIN_OTHERS = 2
# Per-lane data rates of the InfiniBand generations, Gb/s (fabric-reference 1.3; the names
# collectors/infiniband.py parses), to say a speed by its name.
IB_LANE_NAMES = ((2.0, "SDR"), (4.0, "DDR"), (8.0, "QDR"), (10.0, "FDR10"), (13.64, "FDR"), (25.0, "EDR"),
                 (50.0, "HDR"), (100.0, "NDR"), (200.0, "XDR"))


@dataclass(frozen=True, slots=True)
class Rate:
    """A link's width (lanes, None when the source has no width) and speed (bytes/s, all lanes)."""

    width: float | None
    speed: float | None

    def below(self, ref: Rate) -> bool:
        """True when narrower or slower than ``ref`` (where both say). Slower means below 99 % of
        the reference: a tolerance for the rounding of computed rates (lane rate x width / 8 in
        floating point, FDR's 64/66 coding), not a physical margin; a real downshift is a whole
        generation (half or less). Judgement call, no public source."""
        narrower = self.width is not None and ref.width is not None and self.width < ref.width
        slower = self.speed is not None and ref.speed is not None and self.speed < ref.speed * 0.99
        return narrower or slower

    def best(self, other: Rate | None) -> Rate:
        if other is None:
            return self
        return Rate(_max(self.width, other.width), _max(self.speed, other.speed))

    def text(self) -> str:
        """``2x NDR (200 Gb/s)``, ``400 Gb/s``: the width and lane speed name where known."""
        gbps = self.speed * 8 / 1e9 if self.speed else None
        if gbps is None:
            return f"{self.width:g}x" if self.width else "unknown"
        if not self.width:
            return f"{gbps:g} Gb/s"
        lane = gbps / self.width
        name = next((n for g, n in IB_LANE_NAMES if abs(lane - g) <= 0.03 * g), None)
        return f"{self.width:g}x {name} ({gbps:g} Gb/s)" if name else f"{self.width:g}x ({gbps:g} Gb/s)"


def _max(a: float | None, b: float | None) -> float | None:
    return b if a is None else a if b is None else max(a, b)


@functools.lru_cache(maxsize=4096)
def _rate(width: float | None, speed: float | None) -> Rate:
    """One object per distinct rate: a fabric has a few, and the link rule keeps one per port
    (12 MB of duplicates at 100,000 ports)."""
    return Rate(width, speed)


def active(entry: PortEntry) -> Rate | None:
    """The port's active width and speed; None when it reports neither."""
    width, speed = entry.gauge("link_width_lanes"), entry.gauge("link_speed_bytes")
    width = width if width and width > 0 else None
    speed = speed if speed and speed > 0 else None
    return _rate(width, speed) if width or speed else None


def rated(entry: PortEntry | None) -> Rate | None:
    """What the port reports it can train to (UFM's supported/enabled), None when it does not."""
    if entry is None:
        return None
    width, speed = entry.gauge("link_width_rated_lanes"), entry.gauge("link_speed_rated_bytes")
    return _rate(width or None, speed or None) if width or speed else None


def lower(a: Rate | None, b: Rate | None) -> Rate | None:
    """What both ends allow: the lower of two rated rates (either alone when one is unknown)."""
    if a is None or b is None:
        return a or b

    def lo(x: float | None, y: float | None) -> float | None:
        return y if x is None else x if y is None else min(x, y)

    return Rate(lo(a.width, b.width), lo(a.speed, b.speed))


class Usual:
    """The usual width and speed of the links between each pair of device models, from the up
    ports of one pass (built when the rule needs it: on changes, not every pass)."""

    def __init__(self, ports: dict[PortKey, PortEntry], topo: Topology, models: dict[str, str]) -> None:
        self.topo, self.models = topo, models
        self.groups: dict[tuple[str, str], Counter[Rate]] = {}
        self.rates: dict[PortKey, Rate] = {}
        for pk, entry in ports.items():
            up = entry.gauge("link_up")
            rate = active(entry) if up is None or up > 0 else None
            key = self.key(pk)
            if rate is not None and key is not None:
                self.rates[pk] = rate
                self.groups.setdefault(key, Counter())[rate] += 1

    def key(self, pk: PortKey) -> tuple[str, str] | None:
        peer = self.topo.peer(*pk)
        a, b = self.models.get(pk[0], ""), self.models.get(peer[0], "") if peer else ""
        return (a, b) if a and b else None

    def of(self, pk: PortKey) -> tuple[Rate, int] | None:
        """(the rate a strict majority of the ports of the port's model pair run at, how many other
        ports run at it) when at least :data:`MIN_OTHERS` ports besides this cable's two do: the
        cable itself counts in the majority (two populations of equal size have none), not in the
        support for it."""
        key = self.key(pk)
        group = self.groups.get(key) if key is not None else None
        if not group:
            return None
        rate, n = group.most_common(1)[0]
        if n * 2 <= sum(group.values()):
            return None
        peer = self.topo.peer(*pk)
        own = sum(1 for q in (pk, peer) if q is not None and self.rates.get(q) == rate and self.key(q) == key)
        return (rate, n - own) if n - own >= MIN_OTHERS else None
