"""snmprec round trip over every snmpsim type tag and encoding, checked against snmpsim's own
reader (snmpsim.record.snmprec.SnmprecRecord, the code that serves a recording)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pysnmp.proto import rfc1905
from snmpsim.record.snmprec import SnmprecRecord

from fabricmon.collectors.snmp import transport_pysnmp
from fabricmon.collectors.snmp.snmprec import _RANGES, EXCEPTION_TAGS, TAGS, format_line, format_snmprec, parse_snmprec

OIDS = st.lists(st.integers(0, 2**32 - 1), min_size=2, max_size=12).map(lambda c: (1, 3, *c))


def values(tag: str) -> st.SearchStrategy:
    if tag in _RANGES:
        return st.integers(*_RANGES[tag])
    if tag in ("4", "68"):
        return st.one_of(st.binary(max_size=40), st.text(max_size=20).map(lambda t: t.encode("utf-8", "surrogatepass")))
    if tag == "6":
        return st.lists(st.integers(0, 2**32 - 1), min_size=2, max_size=10).map(lambda c: ".".join(map(str, c)))
    if tag == "64":
        return st.lists(st.integers(0, 255), min_size=4, max_size=4).map(lambda c: ".".join(map(str, c)))
    return st.none()  # NULL and the exception types


ROW = st.sampled_from(sorted(TAGS)).flatmap(lambda tag: st.tuples(OIDS, st.just(tag), values(tag)))


def test_every_snmpsim_tag_is_covered():
    # snmpsim's TAG_MAP is the list of types a .snmprec line can carry
    assert set(SnmprecRecord.grammar.TAG_MAP) == TAGS


@settings(max_examples=400, deadline=None)
@given(st.lists(ROW, max_size=30))
def test_round_trip_is_byte_for_byte(rows):
    text = format_snmprec(rows)
    want = {oid: (tag, value) for oid, tag, value in rows}
    assert text.count("\n") == len(want) and len(text.splitlines()) == len(want)  # one line per varbind
    parsed = parse_snmprec(text)
    assert parsed.warnings == [] and parsed.table == want
    again = format_snmprec((oid, tag, value) for oid, (tag, value) in parsed.table.items())
    assert again.encode("utf-8", "surrogateescape") == text.encode("utf-8", "surrogateescape")


@settings(max_examples=400, deadline=None)
@given(ROW)
def test_snmpsim_serves_what_was_written(row):
    oid, tag, value = row
    line = format_line(oid, tag, value).encode("utf-8", "surrogateescape") + b"\n"
    served_oid, served = SnmprecRecord().evaluate(line)
    assert tuple(served_oid) == oid
    if tag in EXCEPTION_TAGS:
        assert isinstance(served, (rfc1905.NoSuchObject, rfc1905.NoSuchInstance, rfc1905.EndOfMibView))
        assert SnmprecRecord.grammar.get_tag_by_type(served) == tag
    else:  # what a poll reads back from that agent
        assert transport_pysnmp.to_row(oid, served) == (oid, tag, value)


@pytest.mark.parametrize(("line", "tag", "value", "canonical"), [
    ("1.3.1|64x|0a000001", "64", "10.0.0.1", "1.3.1|64|10.0.0.1"),  # hex IpAddress: no raw bytes
    ("1.3.1|64x|0a0a0d0a", "64", "10.10.13.10", "1.3.1|64|10.10.13.10"),  # its bytes were \n \r
    ("1.3.1|64e|\\n\\x00\\x00\\x01", "64", "10.0.0.1", "1.3.1|64|10.0.0.1"),
    ("1.3.1|4e|a\\nb\\x00\\\\", "4", b"a\nb\x00\\", "1.3.1|4x|610a62005c"),
    ("1.3.1|4x|68697c", "4", b"hi|", "1.3.1|4x|68697c"),
    ("1.3.1|68x|9f7804", "68", b"\x9f\x78\x04", "1.3.1|68x|9f7804"),
    ("1.3.1|4|Ethernet 0/18", "4", b"Ethernet 0/18", "1.3.1|4|Ethernet 0/18"),
    ("1.3.1|4|trailing ", "4", b"trailing ", "1.3.1|4x|747261696c696e6720"),  # snmpsim strips lines
    (".1.3.1|6|.1.3.6.1.4.1.9", "6", "1.3.6.1.4.1.9", "1.3.1|6|1.3.6.1.4.1.9"),
    ("1.3.1|5|", "5", None, "1.3.1|5|"),
    ("1.3.1|128|", "128", None, "1.3.1|128|"),
    ("1.3.1|129|", "129", None, "1.3.1|129|"),
    ("1.3.1|130|", "130", None, "1.3.1|130|"),
])
def test_foreign_encodings_decode_and_write_canonically(line, tag, value, canonical):
    parsed = parse_snmprec(line + "\n")
    assert parsed.warnings == []
    assert parsed.table == {(1, 3, 1): (tag, value)}
    assert format_snmprec([((1, 3, 1), tag, value)]) == canonical + "\n"


@pytest.mark.parametrize("line", ["1.3.1|64x|0a00", "1.3.1|2x|01", "1.3.1|4e|bad\\q", "1.3.1|64|10.0.0.256",
                                  "1.3.1|6x|2b06", "1.3.1|71|5", "1.3.1|2:numeric|rate=1"])
def test_malformed_lines_are_skipped_with_a_reason(line):
    parsed = parse_snmprec(line + "\n")
    assert parsed.table == {} and parsed.skipped == 1
    assert parsed.warnings[0].startswith("snmprec line 1 skipped: ")
