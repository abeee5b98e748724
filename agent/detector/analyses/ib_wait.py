"""InfiniBand XmitWait arithmetic, and the ib analysis's parameters.

PortXmitWait counts ticks during which the port had data to send but sent none (IBTA
InfiniBand Architecture Specification vol. 1, PortCounters / PortCountersExtended; printed
by rdma-core's ``perfquery``). The tick length is device-defined; NVIDIA/ib-traffic-monitor#3
and NVIDIA's ibdiagnet manual give it per ASIC generation (:data:`TICK_BY_DEVID`): one tick
per 8 bytes of port transmit time on Quantum switches (8 bytes at 400 Gb/s: 0.16 ns), one
per 32 bytes of one lane's time on Switch-IB and older (32 bytes at 25 Gb/s per lane:
10.24 ns). A device's own PortSamplesControl.Tick (``perfquery -c``) gives the multiplier
when the collector read it (:data:`REPORTED_TICK`). Devices with neither use
``xmit_wait_tick_bits`` (64) of port time; ``xmit_wait_tick_s`` overrides everything with a
measured tick.

* f_wait = dXmitWait * tick / dt: share of the interval spent waiting (0..1).
* r_wait = dXmitWait / (dXmitWait + dXmitData_words), the ratio Omni-Path's performance
  manager uses (cornelisnetworks/opa-fm ``pa_categories.c``): used when the tick is unknown (no
  link speed and no configured tick). Data words = tx bytes / 4.
"""

from __future__ import annotations

import functools
import math
from collections import deque

import numpy as np
from pydantic import Field

from fabricmon.agent.detector.base import Fraction, Params, Seconds
from fabricmon.agent.detector.common import LINK_SPEED, TX_BYTES
from fabricmon.agent.store import PortEntry


class IbParams(Params):
    """``detector: {ib: ...}``: the XmitWait tick, and when an InfiniBand port is blocked (a
    stall) or a member of a leaking credit loop (see :mod:`.ib`)."""

    # Measured tick length in seconds; None = from the device generation and link speed.
    xmit_wait_tick_s: float | None = Field(None, gt=0.0, le=1e-3)
    # Devices not in TICK_BY_DEVID (HCAs, unknown switches): bits of port transmit time per
    # tick. 64 = 8 bytes, what current devices count (NVIDIA/ib-traffic-monitor#3).
    xmit_wait_tick_bits: int = Field(64, ge=1, le=1 << 16)
    # Blocked for the interval: waited at least this share of it (with a tick known for the
    # device), corroborating a port that held data and sent below progress_line_fraction.
    stall_wait_fraction: Fraction = 0.95
    # "Held data": XmitWait counting at least this fast. 1e6 ticks/s is 0.016 % of the time
    # with 8-byte ticks at 400 Gb/s and 1 % with 32-byte lane ticks at 25 Gb/s per lane:
    # far above the stray ticks of an idle port, low enough for any generation.
    min_wait_ticks_per_s: float = Field(1e6, ge=0.0)
    progress_line_fraction: Fraction = 0.01  # "sent nothing": below 1 % of line rate (common.tx_progress)
    # The cable peer received below this share of line rate: the link carried ~nothing.
    peer_rx_line_fraction: Fraction = 0.01
    # A loop broken by head-of-queue lifetime leaks: per poll its members wait 70-100 %,
    # send a trickle and discard in bursts, so one poll rarely shows every member stalled.
    # A port still holding data that was stalled or discarded within this window stays a
    # loop member. 60 s spans several HOQ lifetimes (OpenSM default for switches, 0x12:
    # about 1.07 s; opensm.conf head_of_queue_lifetime) and 6 polls at 10 s.
    leaky_window: Seconds = 60.0
    # A leaking loop member in one poll: it waited at least half the interval (a majority:
    # the port is mostly blocked, not mostly sending) and sent below 5 % of line rate. Each
    # HOQ expiry (about one per lifetime, 1.07 s) frees the head packet's buffer and lets
    # a few packets through, so over a 10 s poll a leaking member moves a trickle, well
    # under 1 % of what the link carries; 5 % leaves room for short lifetimes. A port
    # congested by load still sends what it does not wait for (f_wait 0.5 -> about half
    # of line rate), so it stays out. Only for graph membership: a cycle must form.
    loop_wait_fraction: Fraction = 0.5
    loop_line_fraction: Fraction = 0.05
    # The fabric's normal wait (:class:`FabricNormal`): the median over the pass's InfiniBand
    # ports, and the median of those over this window. 10 minutes span many phases of a
    # training job's collectives (an all-to-all phase every few polls), so one phase neither
    # makes nor moves the normal. Judgement call, no public source.
    normal_window: Seconds = 600.0


XMIT_WAIT = ("xmit_wait", ())
LINK_WIDTH = ("link_width_lanes", ())
# PortSamplesControl.Tick as the device reports it (``perfquery -c``, the perfquery collector's
# ``samples_control_tick`` gauge). NVIDIA/ib-traffic-monitor#3 and NVIDIA's ibdiagnet manual
# ("Congestion Assessment on InfiniBand Links"): one XmitWait tick is Tick+1 bytes of transmit
# time; current generations report 7 (8 bytes of the port's time), legacy ones 31 (32 bytes of
# one lane's time). The IBTA sample tick is counted in the lane's 10-bit symbol times: the Linux
# qib driver (drivers/infiniband/hw/qib/qib_iba7322.c, QIB_IB_CFG_PMA_TICKS) says "0x00 = 10x
# link transfer rate or 4 nsec. for 2.5Gbs" and reports 3 at QDR, 1 at DDR, 0 at SDR for its
# fixed 4 ns clock, i.e. (Tick+1) symbol times of one lane (the IBTA text itself was not
# available to check; this is its reading through that driver). So the value gives the
# multiplier; whether it counts the port's or one lane's time comes from the generation
# (TICK_BY_DEVID), and is the port's for a device not in the table (what current NVIDIA
# devices do; inferred, and the self-check below catches a tick that is too short).
REPORTED_TICK = ("samples_control_tick", ())

# XmitWait tick per switch ASIC generation, keyed by the PCI device ID that ibnetdiscover
# prints as ``devid=`` (and UFM as the system's device ID). NVIDIA's ibdiagnet manual
# ("Congestion Assessment on InfiniBand Links"): Quantum, Quantum-2 and Quantum-3 count one
# tick per 8 bytes of port transmit time; Switch-IB 2, Switch-IB and SwitchX one per 32 bytes
# of one lane's transmit time. Device IDs verified in public ibnetdiscover output: 0xd2f2 =
# Quantum-2 (an MQM9700, gary-minghuili/infiniband-exporter), 0xd2f0 = Quantum (MQM8700,
# Mellanox/ufm_sdk_3.0 topo/selene.compute.txt), 0xc738 = SwitchX (SX6036, ufm_sdk_3.0
# topo/small_topo_file), 0xcb20 = Switch-IB (an EDR switch in the rdma-core-format topology
# of collectors/perfquery/testcases/edr_switch_topology); 0xcf08 = Switch-IB 2 and 0xd2f4 =
# Quantum-3 from the PCI ID repository (pci-ids.ucw.cz, vendor 15b3) and NVIDIA's own
# device-ID table in its public UFM/ibdiagnet tooling (SWITCH_DICT: 0xc738 "SwitchX and
# SwitchX-2", 0xcb20 Switch-IB, 0xcf08 Switch-IB 2, 0xd2f0/0xd2f2/0xd2f4 Quantum/-2/-3;
# 0xcb84 there is Spectrum, an Ethernet ASIC, so it is not in this table), inferred.
# Value: (bytes per tick, counted per lane).
TICK_BY_DEVID: dict[int, tuple[int, bool]] = {
    0xD2F0: (8, False),  # Quantum (HDR)
    0xD2F2: (8, False),  # Quantum-2 (NDR)
    0xD2F4: (8, False),  # Quantum-3 (XDR)
    0xCF08: (32, True),  # Switch-IB 2 (EDR)
    0xCB20: (32, True),  # Switch-IB (EDR)
    0xC738: (32, True),  # SwitchX and SwitchX-2 (FDR; one device ID for both)
}
# UFM reports a switch's model (``MQM9700``), not its device ID. NVIDIA's switch product
# families name the ASIC (QM97xx: Quantum-2, QM87xx: Quantum, Q3xxx: Quantum-3, SB78xx:
# Switch-IB 2, SB77xx: Switch-IB, SX6xxx: SwitchX/SwitchX-2; NVIDIA switch product pages).
# Inferred from the naming; verified for MQM8700, MQM9700 and SX6036, whose node descriptions
# and devid lines sit together in the public ibnetdiscover files above. Model prefix, optional
# leading "M" stripped -> a device ID of TICK_BY_DEVID.
MODEL_PREFIX_DEVID: tuple[tuple[str, int], ...] = (
    ("QM97", 0xD2F2), ("QM87", 0xD2F0), ("Q3", 0xD2F4), ("SB78", 0xCF08), ("SB77", 0xCB20), ("SX6", 0xC738),
)
# A computed f_wait above this means the tick is wrong for the device (a port cannot wait
# longer than the interval); the 2 % margin covers the poll clock's jitter against the
# device's counter latch. Such a port's f_wait is not used: the tick-free tests decide.
MAX_PLAUSIBLE_F_WAIT = 1.02


@functools.lru_cache(maxsize=1024)  # asked per port per pass; a fabric has a few models
def devid(model: str) -> int | None:
    """The PCI device ID in a DeviceInfo.model: ibnetdiscover's ("0xd2f2", "devid=0xd2f2",
    "54002"), or the one a UFM model name stands for ("MQM9700"); None when unknown."""
    text = model.strip().lower().removeprefix("devid=")
    try:
        if text.startswith("0x"):
            return int(text, 16)
        if text.isdigit():
            return int(text)
    except ValueError:
        return None
    name = text.upper().removeprefix("M")
    return next((dev for prefix, dev in MODEL_PREFIX_DEVID if name.startswith(prefix)), None)


@functools.lru_cache(maxsize=1024)  # asked per device per pass; a fabric has a few models
def generation(model: str) -> tuple[float, bool]:
    """(bytes per tick, counted per lane) of the device's ASIC generation (:data:`TICK_BY_DEVID`);
    (NaN, False) when the model is not in the table."""
    gen = TICK_BY_DEVID.get(devid(model) or -1)
    return (float(gen[0]), gen[1]) if gen is not None else (math.nan, False)


def ticks(speed: np.ndarray, reported: np.ndarray, width: np.ndarray, gen_bytes: np.ndarray, gen_lane: np.ndarray,
          p: IbParams) -> np.ndarray:
    """Seconds of port transmit time per XmitWait tick, per port; NaN when it cannot be known.

    Per port: its link speed gauge (bytes/s), its reported PortSamplesControl.Tick, its link
    width (lanes) and its generation (:func:`generation`); NaN where a gauge is missing. A
    configured ``xmit_wait_tick_s`` wins; then the device's own Tick (:data:`REPORTED_TICK`:
    Tick+1 bytes), counted per lane when the generation table says so; then the generation
    table; then ``xmit_wait_tick_bits`` of port time. No speed: unknown.
    """
    if p.xmit_wait_tick_s:
        return np.full(len(speed), float(p.xmit_wait_tick_s))
    with np.errstate(invalid="ignore", divide="ignore"):
        speed = np.where(speed > 0, speed, np.nan)
        own = (reported >= 0) & (reported <= 0xFF)
        known = ~np.isnan(gen_bytes)
        nbytes = np.where(own, np.trunc(reported) + 1, gen_bytes)
        lanes = np.where(np.isnan(width) | (width == 0), 4.0, width)  # 4x is the common width when the gauge is missing
        counted = np.where(known & gen_lane, nbytes / (speed / lanes), nbytes / speed)
        return np.where(own | known, counted, p.xmit_wait_tick_bits / (speed * 8))


def _gauge_array(entry: PortEntry, key: tuple[str, tuple[()]]) -> np.ndarray:
    g = entry.gauge(*key)
    return np.array([math.nan if g is None else g])


def tick_s(entry: PortEntry, p: IbParams, model: str = "") -> float | None:
    """:func:`ticks` for one port; None when it cannot be known."""
    gen_bytes, gen_lane = generation(model)
    t = ticks(_gauge_array(entry, LINK_SPEED), _gauge_array(entry, REPORTED_TICK), _gauge_array(entry, LINK_WIDTH),
              np.array([gen_bytes]), np.array([gen_lane]), p).item(0)
    return None if math.isnan(t) else t


def tick_origin(entry: PortEntry, p: IbParams, model: str) -> str:
    """Where the port's XmitWait tick comes from, in plain words (evidence for an operator)."""
    if p.xmit_wait_tick_s:
        return f"configured xmit_wait_tick_s {p.xmit_wait_tick_s}"
    dev = devid(model)
    gen = TICK_BY_DEVID.get(dev or -1)
    lane = "one lane's" if gen is not None and gen[1] else "the port's"
    reported = entry.gauge(*REPORTED_TICK)
    if reported is not None and 0 <= reported <= 0xFF:
        return f"the device's PortSamplesControl.Tick {int(reported):#04x}: {int(reported) + 1} bytes of {lane} transmit time"
    if gen is not None:
        return f"device ID {dev:#06x}'s generation: {gen[0]} bytes of {lane} transmit time"
    return f"the default: {p.xmit_wait_tick_bits} bits of the port's transmit time"


def fractions(wait: float, data_bytes: float | None, dt: float, tick: float | None) -> tuple[float | None, float | None]:
    """(f_wait, r_wait) from an XmitWait increase, the data sent meanwhile, and the elapsed time."""
    f = min(wait * tick / dt, 1.0) if tick else None
    r = None
    if data_bytes is not None:
        den = wait + data_bytes / 4
        r = wait / den if den > 0 else 0.0
    return f, r


def wait_last(entry: PortEntry, tick: float | None) -> tuple[float | None, float | None]:
    """(f_wait, r_wait) of the last valid interval with ``tick`` (:meth:`IbAnalysis.tick`)."""
    xw = entry.counter(*XMIT_WAIT)
    if xw is None or xw.delta is None or not xw.dt:
        return None, None
    tx = entry.counter(*TX_BYTES)
    return fractions(xw.delta, tx.delta if tx is not None else None, xw.dt, tick)


def wait_window(entry: PortEntry, tick: float | None, seconds: float) -> tuple[float | None, float | None, float]:
    """(f_wait, r_wait, elapsed) over the rolling window with ``tick`` (:meth:`IbAnalysis.tick`)."""
    xw = entry.counter(*XMIT_WAIT)
    w = xw.window(seconds) if xw is not None else None
    if w is None or w[1] <= 0:
        return None, None, 0.0
    tx = entry.counter(*TX_BYTES)
    tw = tx.window(seconds) if tx is not None else None
    f, r = fractions(w[0], tw[0] if tw is not None else None, w[1], tick)
    return f, r, w[1]


class FabricNormal:
    """The fabric's usual wait: per pass, the median of one wait measure (f_wait or r_wait) over
    the InfiniBand ports whose XmitWait was read (a port whose XmitWait did not move waits 0),
    and the median of those per-pass medians over ``window``.

    Why a median over the fabric: credit waits are how a lossless fabric carries load. A busy
    all-to-all makes every port wait a little, and its phases make every spine link wait more
    for a poll (NVIDIA's XmitWait congestion assessment reads waits against the port's load,
    ibdiagnet manual "Congestion Assessment on InfiniBand Links"; Omni-Path's performance manager
    grades congestion against what the fabric does, opa-fm ``pa_categories.c``). Congestion worth
    a finding is a port that waits well above what the fabric's typical port does (an incast root,
    a slow receiver and the tree behind it), for a while. The median is the typical port, robust
    to the congested few; the median over the window keeps one all-to-all phase from moving it.
    """

    __slots__ = ("points", "value")

    def __init__(self) -> None:
        self.points: deque[tuple[float, float]] = deque()
        self.value: float | None = None

    def add(self, t: float, waits: np.ndarray, idle: int, window_s: float) -> None:
        """One pass: the measure on the ports that waited, and how many read ports did not wait."""
        n = len(waits) + idle
        if n:
            self.points.append((t, _median_with_zeros(np.sort(waits).tolist(), idle)))
        while self.points and self.points[0][0] < t - window_s:
            self.points.popleft()
        values = sorted(v for _, v in self.points)
        self.value = _median_with_zeros(values, 0) if values else None


def _median_with_zeros(ordered: list[float], zeros: int) -> float:
    """The median of ``ordered`` (sorted) together with ``zeros`` more values of 0."""
    n = len(ordered) + zeros

    def at(i: int) -> float:
        return 0.0 if i < zeros else ordered[i - zeros]

    mid = n // 2
    return at(mid) if n % 2 else (at(mid - 1) + at(mid)) / 2
