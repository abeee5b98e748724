"""The snmpsim ``.snmprec`` text form used as the snmp payload: read it and write it.

One varbind per line, ``OID|TAG|VALUE``: numeric OID without a leading dot; TAG 2 Integer32,
4 OCTET STRING (``4x`` = hex-encoded), 5 NULL, 6 OBJECT IDENTIFIER, 64 IpAddress, 65 Counter32,
66 Gauge32, 67 TimeTicks, 68 Opaque, 70 Counter64. A payload written here can be served again by
snmpsim unchanged, and a ``.snmprec`` file recorded elsewhere parses here. Pure functions.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from fabricmon.collectors.base import ParseError

Oid = tuple[int, ...]
Value = int | bytes | str | None

INTEGER, OCTETS, NULL, OID, IPADDR, COUNTER32, GAUGE32, TIMETICKS, OPAQUE, COUNTER64 = (
    "2", "4", "5", "6", "64", "65", "66", "67", "68", "70")
NUMERIC_TAGS = frozenset({INTEGER, COUNTER32, GAUGE32, TIMETICKS, COUNTER64})
_RANGES = {
    INTEGER: (-(2**31), 2**31 - 1),
    COUNTER32: (0, 2**32 - 1),
    GAUGE32: (0, 2**32 - 1),
    TIMETICKS: (0, 2**32 - 1),
    COUNTER64: (0, 2**64 - 1),
}
_MAX_WARNINGS = 5


@dataclass(slots=True)
class Varbinds:
    """Parsed varbinds: OID -> (tag without the ``x``, decoded value), plus what was skipped."""

    table: dict[Oid, tuple[str, Value]] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    skipped: int = 0

    def get(self, oid: Oid) -> Value:
        entry = self.table.get(oid)
        return None if entry is None else entry[1]


def parse_oid(text: str) -> Oid:
    """``1.3.6.1`` (a leading dot is tolerated) -> (1, 3, 6, 1); ValueError when malformed."""
    parts = text.strip().removeprefix(".").split(".")
    if not all(p.isascii() and p.isdigit() and len(p) <= 10 for p in parts):
        raise ValueError(f"bad OID {text[:80]!r}")
    oid = tuple(int(p) for p in parts)
    if any(c > 2**32 - 1 for c in oid):
        raise ValueError(f"OID component out of range in {text[:80]!r}")
    return oid


def _decode(tag: str, hexed: bool, raw: str) -> Value:
    if tag in NUMERIC_TAGS:
        if hexed:
            raise ValueError("numeric value cannot be hex-encoded")
        value = int(raw)
        lo, hi = _RANGES[tag]
        if not lo <= value <= hi:
            raise ValueError(f"value {value} out of range for type {tag}")
        return value
    if tag in (OCTETS, OPAQUE):
        return bytes.fromhex(raw) if hexed else raw.encode("utf-8", "surrogateescape")
    if tag == OID:
        return ".".join(str(c) for c in parse_oid(raw))
    if tag == IPADDR:
        text = bytes.fromhex(raw).decode("latin-1") if hexed else raw
        return text
    if tag == NULL:
        return None
    raise ValueError(f"unknown type tag {tag!r}")


def parse_snmprec(text: str) -> Varbinds:
    """Read snmprec text. Bad lines are skipped and reported, so one odd varbind (a variation
    module tag, a value out of its type's range) does not cost the whole poll."""
    if not isinstance(text, str):
        raise ParseError(f"snmprec must be text, got {type(text).__name__}")
    out = Varbinds()
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            oid_text, tag_text, raw = line.split("|", 2)
            tag = tag_text.strip()
            if ":" in tag:
                raise ValueError(f"variation module tag {tag!r} is not a recorded value")
            hexed = tag.endswith("x")
            tag = tag[:-1] if hexed else tag
            out.table[parse_oid(oid_text)] = (tag, _decode(tag, hexed, raw))
        except (ValueError, OverflowError) as exc:
            out.skipped += 1
            if len(out.warnings) < _MAX_WARNINGS:
                out.warnings.append(f"snmprec line {lineno} skipped: {exc}")
    if out.skipped > _MAX_WARNINGS:
        out.warnings.append(f"snmprec: {out.skipped} malformed lines skipped in total")
    return out


def _printable(data: bytes) -> bool:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return all(ch.isprintable() or ch in "\t" for ch in text) and "|" not in text


def format_line(oid: Oid, tag: str, value: Value) -> str:
    """One snmprec line; OCTET STRINGs that are not plain printable text go out hex-encoded
    (a value with a newline or ``|`` would otherwise break the line format)."""
    oid_text = ".".join(str(c) for c in oid)
    if tag in (OCTETS, OPAQUE):
        data = value if isinstance(value, bytes) else str(value or "").encode()
        if _printable(data):
            return f"{oid_text}|{tag}|{data.decode('utf-8')}"
        return f"{oid_text}|{tag}x|{data.hex()}"
    if tag == NULL:
        return f"{oid_text}|{tag}|"
    return f"{oid_text}|{tag}|{value}"


def format_snmprec(rows: Iterable[tuple[Oid, str, Value]]) -> str:
    """Lines in OID order (what snmpsim expects), one per OID; text ends with a newline."""
    unique = {oid: (tag, value) for oid, tag, value in rows}
    lines = [format_line(oid, tag, value) for oid, (tag, value) in sorted(unique.items())]
    return "\n".join(lines) + ("\n" if lines else "")
