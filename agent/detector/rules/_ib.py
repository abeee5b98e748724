"""InfiniBand XmitWait arithmetic shared by ``credit_deadlock`` and ``congestion``.

PortXmitWait counts ticks during which the port had data but sent none (fabric-reference
1.1). The tick length is device-defined; NVIDIA/ib-traffic-monitor#3 and the community
ibdiagnet2 script convert a tick to 64 bits (8 bytes x 8) of transmit time on modern
devices, so by default ``tick = xmit_wait_tick_bits / line bit rate`` (64 bits: 1.28 ns at
400G). ``xmit_wait_tick_s`` overrides it with a measured tick.

* f_wait = dXmitWait * tick / dt: share of the interval spent waiting (0..1).
* r_wait = dXmitWait / (dXmitWait + dXmitData_words), the OPA ratio: used when the tick is
  unknown (no link speed and no configured tick). Data words = tx bytes / 4.
"""

from __future__ import annotations

from typing import Any

from agent.detector.rules._common import TX_BYTES, speed_bytes
from agent.store import PortEntry

XMIT_WAIT = ("xmit_wait", ())

IB_DEFAULTS: dict[str, Any] = {
    "xmit_wait_tick_s": None,  # measured tick length; None = derive from link speed
    "xmit_wait_tick_bits": 64,  # ib-traffic-monitor#3: (7+1)*8 bits per tick on modern devices
}


def tick_s(entry: PortEntry, p: dict[str, Any]) -> float | None:
    if p["xmit_wait_tick_s"]:
        return float(p["xmit_wait_tick_s"])
    speed = speed_bytes(entry)
    return p["xmit_wait_tick_bits"] / (speed * 8) if speed else None


def _fractions(wait: float, data_bytes: float | None, dt: float, tick: float | None) -> tuple[float | None, float | None]:
    """(f_wait, r_wait) from an XmitWait increase, the data sent meanwhile, and the elapsed time."""
    f = min(wait * tick / dt, 1.0) if tick else None
    r = None
    if data_bytes is not None:
        den = wait + data_bytes / 4
        r = wait / den if den > 0 else 0.0
    return f, r


def wait_last(entry: PortEntry, p: dict[str, Any]) -> tuple[float | None, float | None]:
    """(f_wait, r_wait) of the last valid interval; None where it cannot be computed."""
    xw = entry.series.get(XMIT_WAIT)
    if xw is None or xw.delta is None or not xw.dt:
        return None, None
    tx = entry.series.get(TX_BYTES)
    return _fractions(xw.delta, tx.delta if tx is not None else None, xw.dt, tick_s(entry, p))


def wait_window(entry: PortEntry, p: dict[str, Any], seconds: float) -> tuple[float | None, float | None, float]:
    """(f_wait, r_wait, elapsed) over the rolling window."""
    xw = entry.series.get(XMIT_WAIT)
    w = xw.window(seconds) if xw is not None else None
    if w is None or w[1] <= 0:
        return None, None, 0.0
    tx = entry.series.get(TX_BYTES)
    tw = tx.window(seconds) if tx is not None else None
    f, r = _fractions(w[0], tw[0] if tw is not None else None, w[1], tick_s(entry, p))
    return f, r, w[1]
