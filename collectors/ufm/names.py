"""InfiniBand counter names as UFM and UFM Telemetry spell them -> the internal vocabulary.

Shared by the ``ufm`` (REST) and ``ufm-telemetry`` collectors so both land on the same
counters as ``perfquery``. Three spellings occur:

* PerfMgt attribute names, as perfquery prints them (``PortXmitData``, ``SymbolErrorCounter``)
  and as UFM Telemetry's Prometheus output names them (``PortXmitDataExtended``);
* UFM "converted" names (``Infiniband_MBOut_u_Gb``, ``Infiniband_SymbolErrors_u_Errors``):
  the ``Infiniband_`` prefix and the ``_u_<unit>`` suffix are stripped before lookup;
* the same without prefix/suffix, as UFM monitoring attributes (``Infiniband_MBOut``).

Every value from UFM is a 64-bit, wrapping (not saturating) integer: UFM and UFM Telemetry
read the extended PortCounters. Data counters count 4-octet words (scale 4). The converted
``MBOut``/``MBIn`` names suggest megabytes or gigabits, but the UFM guide says they count
"octets divided by 4" like PortXmitData; that unit is [U] on real hardware (see README).
"""

from __future__ import annotations

import re

# base name -> (internal counter, scale to base unit)
_BASE: dict[str, tuple[str, float]] = {}


def _add(counter: str, scale: float, *names: str) -> None:
    for n in names:
        _BASE[n.lower()] = (counter, scale)


_add("tx_bytes", 4.0, "PortXmitData", "MBOut")
_add("rx_bytes", 4.0, "PortRcvData", "MBIn")
_add("tx_packets", 1.0, "PortXmitPkts", "PckOut")
_add("rx_packets", 1.0, "PortRcvPkts", "PckIn")
_add("xmit_wait", 1.0, "PortXmitWait", "XmitWait")
_add("symbol_errors", 1.0, "SymbolErrorCounter", "SymbolErrors")
_add("link_error_recovery", 1.0, "LinkErrorRecoveryCounter", "LinkRecovers")
_add("link_downed", 1.0, "LinkDownedCounter", "LinkDowned")
_add("rx_errors", 1.0, "PortRcvErrors", "RcvErrors")
_add("rx_remote_physical_errors", 1.0, "PortRcvRemotePhysicalErrors", "RcvRemotePhysErrors")
_add("rx_switch_relay_errors", 1.0, "PortRcvSwitchRelayErrors", "RcvSwRelayErrors")
_add("tx_discards", 1.0, "PortXmitDiscards", "XmtDiscards")
_add("tx_constraint_errors", 1.0, "PortXmitConstraintErrors", "XmtConstraintErrors")
_add("rx_constraint_errors", 1.0, "PortRcvConstraintErrors", "RcvConstraintErrors")
_add("local_link_integrity_errors", 1.0, "LocalLinkIntegrityErrors", "LinkIntegrityErrors")
_add("excessive_buffer_overrun_errors", 1.0, "ExcessiveBufferOverrunErrors", "ExcBufOverrunErrors")
_add("vl15_dropped", 1.0, "VL15Dropped")
_add("qp1_dropped", 1.0, "QP1Dropped")

_UNIT_SUFFIX = re.compile(r"_u_[A-Za-z]+$")


def lookup(name: str) -> tuple[str, float] | None:
    """(internal counter, scale) for a UFM/Telemetry/PerfMgt counter name, else None.

    Float-valued derived columns (``_f_`` in the converted names: bandwidth, percentages)
    and rate attributes (``...Rate``) are not counters and return None.
    """
    if "_f_" in name or name.endswith("_f"):
        return None
    base = name
    if base.startswith("Infiniband_"):
        base = base[len("Infiniband_"):]
    base = _UNIT_SUFFIX.sub("", base)
    key = base.lower()
    hit = _BASE.get(key)
    if hit is None and key.endswith("extended"):
        hit = _BASE.get(key[: -len("extended")])
    return hit


def to_int(value: object) -> int | None:
    """A counter value as an int in [0, 2**64): ints, integral floats, decimal or 0x strings; else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if 0 <= value < 1 << 64 else None
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")) or not 0 <= value < 2.0**64 or not value.is_integer():
            return None
        return int(value)
    if isinstance(value, str):
        s = value.strip()
        try:
            n = int(s, 16) if s.lower().startswith("0x") else int(s)
        except ValueError:
            try:
                f = float(s)
            except ValueError:
                return None
            return to_int(f)
        return n if 0 <= n < 1 << 64 else None
    return None


def norm_guid(value: object) -> str:
    """A GUID as ``0x`` + 16 lowercase hex digits; '' when it is not one.

    UFM writes GUIDs without ``0x`` ("248a070300a29d74"), UFM Telemetry's Prometheus labels
    also drop leading zeros ("2c90300f172a0"); normalising lets them meet.
    """
    if isinstance(value, int) and not isinstance(value, bool):
        n = value
    elif isinstance(value, str):
        s = value.strip().lower()
        if s.startswith("0x"):
            s = s[2:]
        if not s or len(s) > 16 or any(c not in "0123456789abcdef" for c in s):
            return ""
        n = int(s, 16)
    else:
        return ""
    if n < 0 or n >= 1 << 64:
        return ""
    return f"0x{n:016x}"
