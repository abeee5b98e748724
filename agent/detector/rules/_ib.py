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

from fabricmon.agent.detector import DetectContext
from fabricmon.agent.detector.rules._common import LINK_SPEED, TX_BYTES, speed_bytes
from fabricmon.agent.store import PortEntry, PortKey

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


def last_wait_fractions(ctx: DetectContext, p: dict[str, Any]) -> dict[PortKey, float | None]:
    """f_wait of the last interval for every port whose XmitWait moved in this pass.

    Computed once per pass and shared by ``congestion`` and ``credit_deadlock`` (XmitWait
    moves on most ports of a busy fabric, so this is the one per-port loop they need).
    None where the tick is unknown (no link speed and no configured tick: use r_wait via
    :func:`wait_last`) or the interval is invalid. Ports whose XmitWait did not move have
    f_wait 0 and are not listed.
    """
    key = ("last_wait_fractions", p["xmit_wait_tick_s"], p["xmit_wait_tick_bits"])
    out = ctx.cache.get(key)
    if out is not None:
        return out
    out = ctx.cache[key] = {}
    ports = ctx.store.ports
    fixed = float(p["xmit_wait_tick_s"]) if p["xmit_wait_tick_s"] else None
    bits = float(p["xmit_wait_tick_bits"])
    for pk, xw in ctx.changes.moved.get(XMIT_WAIT[0], {}).items():  # type: ignore[union-attr]
        d, dt = xw.delta, xw.dt
        if d is None or not dt:
            out[pk] = None
            continue
        tick = fixed
        if tick is None:
            entry = ports.get(pk)
            g = entry.gauges.get(LINK_SPEED) if entry is not None else None
            if g is None or g.value <= 0:
                out[pk] = None
                continue
            tick = bits / (g.value * 8)
        f = d * tick / dt
        out[pk] = f if f < 1.0 else 1.0
    return out


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
