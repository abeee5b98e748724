"""The snmpsim ``.snmprec`` text form used as the snmp payload: read it and write it.

One varbind per line, ``OID|TAG|VALUE``: numeric OID without a leading dot; the type tags are
snmpsim's (the sum of the BER tag's class and number, snmpsim ``grammar/snmprec.py``
TAG_MAP): 2 Integer32, 4 OCTET STRING, 5 NULL, 6 OBJECT IDENTIFIER, 64 IpAddress,
65 Counter32, 66 Gauge32, 67 TimeTicks, 68 Opaque, 70 Counter64, 128 noSuchObject,
129 noSuchInstance, 130 endOfMibView. A tag may carry snmpsim's encoding suffix: ``x`` for a
hex-encoded value (``4x|00017c0a``, ``64x|0a000001``) or ``e`` for a Python-escaped one
(``4e|a\\nb``); ``TAG:module`` lines are snmpsim variation modules, not values, and are
skipped. A payload written here can be served by snmpsim unchanged, and a ``.snmprec`` file
recorded elsewhere parses here. Pure functions.

Values: int for the numeric types, bytes for OCTET STRING/Opaque, the dotted text for an
OBJECT IDENTIFIER and for an IpAddress (however the line encoded it), None for NULL and the
three exception types. Writing is canonical, so parse -> write -> parse -> write gives the
same bytes.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from fabricmon.collectors.base import ParseError

Oid = tuple[int, ...]
Value = int | bytes | str | None

INTEGER, OCTETS, NULL, OID, IPADDR, COUNTER32, GAUGE32, TIMETICKS, OPAQUE, COUNTER64 = (
    "2", "4", "5", "6", "64", "65", "66", "67", "68", "70")
NO_SUCH_OBJECT, NO_SUCH_INSTANCE, END_OF_MIB_VIEW = "128", "129", "130"
NUMERIC_TAGS = frozenset({INTEGER, COUNTER32, GAUGE32, TIMETICKS, COUNTER64})
# An agent's answer that there is no value: kept so a payload round-trips, never a sample.
EXCEPTION_TAGS = frozenset({NO_SUCH_OBJECT, NO_SUCH_INSTANCE, END_OF_MIB_VIEW})
TAGS = frozenset({*NUMERIC_TAGS, *EXCEPTION_TAGS, OCTETS, NULL, OID, IPADDR, OPAQUE})
_RANGES = {
    INTEGER: (-(2**31), 2**31 - 1),
    COUNTER32: (0, 2**32 - 1),
    GAUGE32: (0, 2**32 - 1),
    TIMETICKS: (0, 2**32 - 1),
    COUNTER64: (0, 2**64 - 1),
}
# snmpsim's ``e`` encoding: Python string-literal escapes (snmpsim record/snmprec.py
# ESCAPE_CHARS), plus \xHH.
_ESCAPES = {"\\": 92, "'": 39, '"': 34, "a": 7, "b": 8, "f": 12, "n": 10, "r": 13, "t": 9, "v": 11}
_MAX_WARNINGS = 5


@dataclass(slots=True)
class Varbinds:
    """Parsed varbinds: OID -> (tag without the ``x``, decoded value), plus what was skipped.
    ``lines``: OID -> the index of the line its value came from (the last one of a repeated
    OID); None for a text with line breaks other than ``\n`` (its lines are not the text's)."""

    table: dict[Oid, tuple[str, Value]] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    skipped: int = 0
    lines: dict[Oid, int] | None = None

    def get(self, oid: Oid) -> Value:
        entry = self.table.get(oid)
        return None if entry is None else entry[1]


_OID_TEXT = re.compile(r"[0-9]{1,10}(?:\.[0-9]{1,10})*")
_OTHER_BREAKS = re.compile("[\r\x0b\x0c\x1c-\x1e\x85\u2028\u2029]")  # str.splitlines's, but "\n"


def parse_oid(text: str) -> Oid:
    """``1.3.6.1`` (a leading dot is tolerated) -> (1, 3, 6, 1); ValueError when malformed.

    Once per varbind of every poll (a 64-port switch answers about 1,500): one regex check and
    a C-level ``map``, not a Python loop over the components."""
    body = text.strip().removeprefix(".")
    if _OID_TEXT.fullmatch(body) is None:
        raise ValueError(f"bad OID {text[:80]!r}")
    oid = tuple(map(int, body.split(".")))
    if max(oid) > 2**32 - 1:
        raise ValueError(f"OID component out of range in {text[:80]!r}")
    return oid


def _unescape(raw: str) -> bytes:
    """snmpsim's ``e`` value: backslash escapes as in a Python string literal."""
    out = bytearray()
    i = 0
    while i < len(raw):
        ch = raw[i]
        if ch != "\\":
            out += ch.encode("utf-8", "surrogateescape")
            i += 1
            continue
        nxt = raw[i + 1 : i + 2]
        if nxt == "x" and len(raw) >= i + 4:
            out.append(int(raw[i + 2 : i + 4], 16))
            i += 4
        elif nxt in _ESCAPES:
            out.append(_ESCAPES[nxt])
            i += 2
        else:
            raise ValueError(f"unknown escape {raw[i:i + 2]!r}")
    return bytes(out)


def _ip_text(data: bytes) -> str:
    if len(data) != 4:
        raise ValueError(f"IpAddress needs 4 octets, got {len(data)}")
    return ".".join(str(b) for b in data)


def _decode(tag: str, encoding: str, raw: str) -> Value:
    if tag in NUMERIC_TAGS:
        if encoding:
            raise ValueError(f"a numeric value cannot be {encoding}-encoded")
        value = int(raw)
        lo, hi = _RANGES[tag]
        if not lo <= value <= hi:
            raise ValueError(f"value {value} out of range for type {tag}")
        return value
    if tag in (NULL, *EXCEPTION_TAGS):
        return None
    if tag == OID:
        if encoding:
            raise ValueError(f"an OBJECT IDENTIFIER cannot be {encoding}-encoded")
        return ".".join(str(c) for c in parse_oid(raw))
    if encoding == "x":
        data = bytes.fromhex(raw)
    elif encoding == "e":
        data = _unescape(raw)
    elif tag == IPADDR:
        parts = raw.strip().split(".")
        if len(parts) != 4 or not all(p.isascii() and p.isdigit() and int(p) <= 255 for p in parts):
            raise ValueError(f"bad IpAddress {raw[:40]!r}")
        data = bytes(int(p) for p in parts)
    else:
        data = raw.encode("utf-8", "surrogateescape")
    return _ip_text(data) if tag == IPADDR else data


def parse_snmprec(text: str) -> Varbinds:
    """Read snmprec text. Bad lines are skipped and reported, so one odd varbind (a variation
    module tag, a value out of its type's range) does not cost the whole poll."""
    if not isinstance(text, str):
        raise ParseError(f"snmprec must be text, got {type(text).__name__}")
    out = Varbinds()
    lines = out.lines = None if _OTHER_BREAKS.search(text) else {}
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            oid_text, tag_text, raw = line.split("|", 2)
            tag = tag_text.strip()
            if ":" in tag:
                raise ValueError(f"variation module tag {tag!r} is not a recorded value")
            encoding = tag[-1] if tag[-1:] in ("x", "e") else ""
            tag = tag[: len(tag) - len(encoding)]
            if tag not in TAGS:
                raise ValueError(f"unknown type tag {tag!r}")
            oid = parse_oid(oid_text)
            out.table[oid] = (tag, _decode(tag, encoding, raw))
            if lines is not None:
                lines[oid] = lineno - 1
        except (ValueError, OverflowError) as exc:
            out.skipped += 1
            if len(out.warnings) < _MAX_WARNINGS:
                out.warnings.append(f"snmprec line {lineno} skipped: {exc}")
    if out.skipped > _MAX_WARNINGS:
        out.warnings.append(f"snmprec: {out.skipped} malformed lines skipped in total")
    return out


def _plain_text(data: bytes) -> bool:
    """True when an OCTET STRING can be written as it is: printable ASCII that neither our
    reader nor snmpsim's (which strips each line and splits on ``|``) would change. Only ASCII:
    snmpsim reads the file's bytes as ISO-8859-1 before it strips the line, so UTF-8 text whose
    last byte is 0x85 or 0xA0 (``"à"`` is C3 A0) lost that byte (found by the round trip through
    snmpsim in tests/test_snmp_snmprec.py); other text goes hex-encoded."""
    return data.isascii() and data.decode("ascii").isprintable() and b"|" not in data and data == data.rstrip()


def format_line(oid: Oid, tag: str, value: Value) -> str:
    """One canonical snmprec line; an OCTET STRING that is not plain ASCII text goes out
    hex-encoded (a newline or ``|`` in it would otherwise break the line format)."""
    if tag in _NUMBERS and type(value) is int:
        return _prefix(oid, tag) + str(value)
    oid_text = ".".join(map(str, oid))
    if tag in (OCTETS, OPAQUE):
        data = value if isinstance(value, bytes) else str(value or "").encode()
        if _plain_text(data):
            return f"{oid_text}|{tag}|{data.decode('utf-8')}"
        return f"{oid_text}|{tag}x|{data.hex()}"
    if tag in (NULL, *EXCEPTION_TAGS):
        return f"{oid_text}|{tag}|"
    return f"{oid_text}|{tag}|{value}"


# "OID|TAG|" of the numeric varbinds seen, kept: a switch answers the same OIDs every poll, so
# its counters' lines are this and the number (a 64-switch poll is 90,000 of them).
_NUMBERS = frozenset({INTEGER, COUNTER32, GAUGE32, TIMETICKS, COUNTER64})
_PREFIXES: dict[tuple[Oid, str], str] = {}
_MAX_PREFIXES = 1 << 20


def _prefix(oid: Oid, tag: str) -> str:
    key = (oid, tag)
    got = _PREFIXES.get(key)
    if got is None:
        if len(_PREFIXES) >= _MAX_PREFIXES:
            _PREFIXES.clear()
        got = _PREFIXES[key] = f"{'.'.join(map(str, oid))}|{tag}|"
    return got


def format_snmprec(rows: Iterable[tuple[Oid, str, Value]]) -> str:
    """Lines in OID order (what snmpsim expects), one per OID; text ends with a newline."""
    unique = {oid: (tag, value) for oid, tag, value in rows}
    lines = [format_line(oid, tag, value) for oid, (tag, value) in sorted(unique.items())]
    return "\n".join(lines) + ("\n" if lines else "")
