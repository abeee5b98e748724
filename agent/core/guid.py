"""GUIDs, the key that joins what different sources say about one node or port.

perfquery/ibnetdiscover print ``0x0c42a103008b40d0`` or, in port lines, bare hex without
leading zeros (``[1](c42a103008b40d0)``); UFM writes bare 16-digit hex (``248a070300a29d74``),
upper case in some telemetry samples; UFM Telemetry's Prometheus labels drop leading zeros
(``0x2c90300f172a0``); the kernel's sysfs ``node_guid`` is four colon-separated groups
(``0002:c903:0010:a1b0``). All become ``0x`` + 16 lower-case hex digits.
"""

from __future__ import annotations

_HEX = frozenset("0123456789abcdef")


def norm_guid(value: object) -> str:
    """A 64-bit GUID as ``0x`` + 16 lower-case hex digits; "" when ``value`` is not one.

    Accepts an int, or a string of 1-16 hex digits with an optional ``0x`` prefix and
    optional ``:`` group separators, any case, surrounding blanks ignored."""
    if isinstance(value, int) and not isinstance(value, bool):
        n = value
    elif isinstance(value, str):
        s = value.strip().lower()
        if s.startswith("0x"):
            s = s[2:]
        s = s.replace(":", "")
        if not s or len(s) > 16 or not _HEX.issuperset(s):
            return ""
        n = int(s, 16)
    else:
        return ""
    if not 0 <= n < 1 << 64:
        return ""
    out = f"0x{n:016x}"
    return value if isinstance(value, str) and value == out else out  # a GUID already in this form: the same object (one per port, not two)
