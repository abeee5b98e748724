"""The usual level of a ratio, per key and across the fabric: what congestion is judged against.

A healthy converged fabric marks ECN on 1-3 % of its RoCE packets and pauses briefly: DCQCN
doing its job (Zhu et al., "Congestion Control for Large-Scale RDMA Deployments", SIGCOMM 2015;
issue 27 measured it on a healthy fabric). Congestion is marking or pause well above that
normal, for a while. :class:`Usual` keeps both normals the issue names:

* **the key's own** (a queue's marking, a priority's pause): an exponentially weighted mean of
  its last-interval values with time constant ``tau_s``, fed only with intervals that were not
  congested (so a long episode does not become its own normal), and trusted once it has seen
  ``learn_s`` seconds of them;
* **the fabric's**: the median of the other keys' latest values (a congestion is local: one
  root and a few feeders do not move the median of a fabric's ports), once at least
  ``min_keys`` other keys report one no older than ``tau_s``.

:meth:`Usual.level` turns them into a threshold: ``max(floor, factor x normal)``, normal being
the higher of the two (a key that always marks more than the fabric is judged against itself).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Hashable
from dataclasses import dataclass


@dataclass(slots=True)
class _Mean:
    value: float
    learned_s: float  # seconds of intervals that fed it
    t: float


class Usual:
    """Per-key and fabric-wide usual values of one ratio (module doc)."""

    __slots__ = ("last", "learn_s", "means", "min_keys", "tau_s")

    def __init__(self, tau_s: float = 900.0, learn_s: float = 60.0, min_keys: int = 3) -> None:
        self.tau_s = tau_s
        self.learn_s = learn_s
        self.min_keys = min_keys
        self.means: dict[Hashable, _Mean] = {}
        self.last: dict[Hashable, tuple[float, float]] = {}  # key -> (last-interval value, poll time)

    def see(self, key: Hashable, value: float, t: float) -> None:
        """A key's last-interval value, for the fabric's median."""
        self.last[key] = (value, t)

    def learn(self, key: Hashable, value: float, t: float, dt: float) -> None:
        """Feed a key's own normal with an interval that was not congested."""
        m = self.means.get(key)
        if m is None:
            self.means[key] = _Mean(value, dt, t)
            return
        a = 1.0 - math.exp(-max(dt, 0.0) / self.tau_s)
        m.value += a * (value - m.value)
        m.learned_s += dt
        m.t = t

    def own(self, key: Hashable) -> float | None:
        m = self.means.get(key)
        return m.value if m is not None and m.learned_s >= self.learn_s else None

    def fabric(self, key: Hashable, now: float) -> float | None:
        others = [v for k, (v, t) in self.last.items() if k != key and now - t <= self.tau_s]
        return statistics.median(others) if len(others) >= self.min_keys else None

    def level(self, key: Hashable, now: float, floor: float, factor: float) -> tuple[float, float | None, float | None]:
        """(threshold, the key's own normal, the fabric's normal): ``max(floor, factor x normal)``."""
        own, fab = self.own(key), self.fabric(key, now)
        normal = max((v for v in (own, fab) if v is not None), default=0.0)
        return max(floor, factor * normal), own, fab

    def forget(self, now: float) -> None:
        """Drop keys not seen for ``tau_s`` (ports gone, ratios back to 0)."""
        limit = now - self.tau_s
        for key in [k for k, (_, t) in self.last.items() if t < limit]:
            del self.last[key]
        for key in [k for k, m in self.means.items() if m.t < limit - self.tau_s]:
            del self.means[key]
