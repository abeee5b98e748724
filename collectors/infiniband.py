"""InfiniBand facts every IB collector shares: the PortCounters table and the lane-rate table.

perfquery, the host's sysfs files and UFM name the same PortCounters attribute three ways
(``PortXmitData``, ``port_xmit_data``, ``MBOut``); one row here holds all spellings, so the
three collectors land on the same internal counter with the same width and scale.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class IbCounter:
    """One PortCounters attribute.

    ``width``: bits of the basic PortCounters field (IBTA spec vol. 1, PortCounters attribute;
    the same widths as libibmad ``src/fields.c`` ``IB_PC_*``); the basic counters saturate at
    all-ones. ``scale``: PortXmitData/PortRcvData count 4-octet words (IBTA PortCounters:
    "divided by 4"), so 4 turns a delta into bytes. ``data``: the data and packet counters,
    whose perfquery ``-x`` values are always the 64-bit extended ones (the error counters there
    are real only when CapMask2 bit 1, IsAdditionalPortCountersExtendedSupported, is set).
    """

    counter: str  # fabricmon.core.vocabulary name
    width: int
    perfquery: str  # PerfMgt attribute name as perfquery/ibdiagnet print it
    sysfs: str | None = None  # file in /sys/class/infiniband/<dev>/ports/<n>/counters/
    ufm: tuple[str, ...] = ()  # UFM "converted" base names (Infiniband_<name>_u_<unit>)
    scale: float = 1.0
    data: bool = False


_C = IbCounter
COUNTERS: tuple[IbCounter, ...] = (
    _C("tx_bytes", 32, "PortXmitData", "port_xmit_data", ("MBOut",), scale=4.0, data=True),
    _C("rx_bytes", 32, "PortRcvData", "port_rcv_data", ("MBIn",), scale=4.0, data=True),
    _C("tx_packets", 32, "PortXmitPkts", "port_xmit_packets", ("PckOut",), data=True),
    _C("rx_packets", 32, "PortRcvPkts", "port_rcv_packets", ("PckIn",), data=True),
    _C("xmit_wait", 32, "PortXmitWait", "port_xmit_wait", ("XmitWait",)),
    _C("tx_discards", 16, "PortXmitDiscards", "port_xmit_discards", ("XmtDiscards",)),
    _C("symbol_errors", 16, "SymbolErrorCounter", "symbol_error", ("SymbolErrors",)),
    _C("link_error_recovery", 8, "LinkErrorRecoveryCounter", "link_error_recovery", ("LinkRecovers",)),
    _C("link_downed", 8, "LinkDownedCounter", "link_downed", ("LinkDowned",)),
    _C("rx_errors", 16, "PortRcvErrors", "port_rcv_errors", ("RcvErrors",)),
    _C("rx_remote_physical_errors", 16, "PortRcvRemotePhysicalErrors", "port_rcv_remote_physical_errors", ("RcvRemotePhysErrors",)),
    _C("rx_switch_relay_errors", 16, "PortRcvSwitchRelayErrors", "port_rcv_switch_relay_errors", ("RcvSwRelayErrors",)),
    _C("tx_constraint_errors", 8, "PortXmitConstraintErrors", "port_xmit_constraint_errors", ("XmtConstraintErrors",)),
    _C("rx_constraint_errors", 8, "PortRcvConstraintErrors", "port_rcv_constraint_errors", ("RcvConstraintErrors",)),
    _C("local_link_integrity_errors", 4, "LocalLinkIntegrityErrors", "local_link_integrity_errors", ("LinkIntegrityErrors",)),
    _C("excessive_buffer_overrun_errors", 4, "ExcessiveBufferOverrunErrors", "excessive_buffer_overrun_errors", ("ExcBufOverrunErrors",)),
    _C("vl15_dropped", 16, "VL15Dropped", "VL15_dropped"),
    _C("qp1_dropped", 16, "QP1Dropped"),
)
BY_PERFQUERY: dict[str, IbCounter] = {c.perfquery: c for c in COUNTERS}
BY_SYSFS: dict[str, IbCounter] = {c.sysfs: c for c in COUNTERS if c.sysfs}

# Data rate per lane in Gb/s after line coding: the most payload a lane carries, which is what
# the byte counters measure and what utilisation is a fraction of. Line (signalling) rate and
# coding: SDR 2.5, DDR 5, QDR 10 Gb/s with 8b/10b; FDR10 10.3125 and FDR 14.0625 with 64b/66b;
# EDR 25.78125 with 64b/66b; HDR 53.125 (PAM4), NDR 106.25 and XDR 212.5 Gb/s with RS-FEC,
# carrying 50, 100 and 200 Gb/s (IBTA spec vol. 2 physical layer; NVIDIA InfiniBand product
# pages). The Linux kernel's ``rate_show`` (drivers/infiniband/core/sysfs.c) prints the
# nominal per-lane rates 2.5, 5, 10, 10, 14, 25, 50, 100, 200 Gb/s: for FDR10 and from EDR on
# they are these data rates; for SDR/DDR/QDR and FDR they are the signalling rate.
LANE_DATA_GBPS: dict[str, float] = {
    "SDR": 2.5 * 8 / 10,
    "DDR": 5.0 * 8 / 10,
    "QDR": 10.0 * 8 / 10,
    "FDR10": 10.3125 * 64 / 66,
    "FDR": 14.0625 * 64 / 66,
    "EDR": 25.78125 * 64 / 66,
    "HDR": 50.0,
    "NDR": 100.0,
    "XDR": 200.0,
}

# The kernel's port ``rate`` file: ``sysfs_emit(buf, "%d%s Gb/sec (%dX%s)\n", rate / 10,
# rate % 10 ? ".5" : "", width, speed)`` with speed " SDR" ... " XDR", e.g. "2.5 Gb/sec (1X SDR)",
# "56 Gb/sec (4X FDR)", "800 Gb/sec (4X XDR)". Drivers without a speed name print "(4X)".
_KERNEL_RATE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*Gb/sec\s*(?:\((\d{1,2})X\s*([A-Z0-9]*)\s*\))?", re.IGNORECASE | re.ASCII)


def lane_gbps(speed: object) -> float | None:
    """Per-lane data rate in Gb/s of an IB speed name (``EDR``, ``IB_EDR``, ``edr``); None if unknown."""
    s = str(speed).strip().upper() if isinstance(speed, str) else ""
    return LANE_DATA_GBPS.get(s[3:] if s.startswith("IB_") else s)


def link_bytes_per_s(speed: object, lanes: int | None) -> float | None:
    """Data rate of ``lanes`` lanes at IB speed ``speed`` in bytes per second; None if either is unknown."""
    rate = lane_gbps(speed)
    if rate is None or not lanes:
        return None
    return lanes * rate * 1e9 / 8


def parse_kernel_rate(text: str, infiniband: bool) -> tuple[float | None, int | None]:
    """The kernel's port ``rate`` file -> (bytes/s, lanes). InfiniBand with a speed name: lanes x
    the lane's data rate; Ethernet (RoCE, the number is ethtool's speed) or no speed name: the
    number given, / 8."""
    m = _KERNEL_RATE.match(text)
    if not m:
        return None, None
    lanes = int(m.group(2)) if m.group(2) else None
    if infiniband:
        speed = link_bytes_per_s(m.group(3) or "", lanes)
        if speed is not None:
            return speed, lanes
    return float(m.group(1)) * 1e9 / 8, lanes
