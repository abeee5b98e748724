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
"octets divided by 4" like PortXmitData; that unit is unverified on real hardware (see README).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable

from fabricmon.collectors.base import BadValues
from fabricmon.collectors.infiniband import COUNTERS
from fabricmon.core.model import Counters

# base name -> (internal counter, scale to base unit)
_BASE: dict[str, tuple[str, float]] = {}


def _add(counter: str, scale: float, *names: str) -> None:
    for n in names:
        _BASE[n.lower()] = (counter, scale)


for _c in COUNTERS:
    _add(_c.counter, _c.scale, _c.perfquery, *_c.ufm)

_UNIT_SUFFIX = re.compile(r"_u_[A-Za-z]+$")


@functools.lru_cache(maxsize=4096)  # per column or metric name, not per value
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
    if type(value) is str and value.isdigit() and value.isascii() and len(value) <= 19:
        return int(value)  # a plain decimal (most values): below 10^19 < 2^64
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


def add_readings(counters: Counters, seen: set[tuple[str, str, str]], bad: BadValues, device: str, port: str,
                 items: Iterable[tuple[str, object]]) -> None:
    """One port's (name, value) pairs from UFM or UFM Telemetry as counter readings: names that
    are no counter are skipped, values that are no counter value are noted in ``bad``, and the
    first reading of a series in a poll wins (``seen``)."""
    for name, value in items:
        hit = lookup(name)
        if hit is None:
            continue
        n = to_int(value)
        if n is None:
            bad.note(name, f"{device} port {port}", value)
            continue
        counter, scale = hit
        if (device, port, counter) not in seen:
            seen.add((device, port, counter))
            counters.add(device, port, counter, n, scale=scale)
