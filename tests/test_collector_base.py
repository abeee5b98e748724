"""collectors/base.py: the one error-reason list, the first-writer-wins result builder, and the
parse entry point every poll goes through."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from fabricmon.agent.pipeline import classify_error
from fabricmon.collectors import SOURCES, get
from fabricmon.collectors.base import Collector, ErrorReason, FetchError, ResultBuilder
from fabricmon.core.model import Counters, ParseResult, Sample, TargetSpec

ROOT = Path(__file__).resolve().parent.parent


def test_every_reason_the_code_raises_is_in_the_enum():
    used: set[str] = set()
    for path in [*ROOT.glob("collectors/**/*.py"), *ROOT.glob("agent/**/*.py")]:
        text = path.read_text()
        used |= set(re.findall(r'FetchError\([^()]*(?:\([^()]*\)[^()]*)*,\s*"([a-z_]+)"', text))
        used |= set(re.findall(r'reason="([a-z_]+)"', text))
        used |= set(re.findall(r'self\._fail\(status, "([a-z_]+)"', text))
        used |= {m.lower() for m in re.findall(r"ErrorReason\.([A-Z_]+)", text)}
    assert {"timeout", "auth", "command", "parse", "internal"} <= used
    assert used <= {r.value for r in ErrorReason}, used - {r.value for r in ErrorReason}


def test_recording_format_reasons_are_members():
    doc = ROOT / "docs" / "recording-format.md"
    listed = re.search(r"poll_errors_total\{reason\}` \(([^)]*)\)", doc.read_text().replace("\n", " "))
    assert listed is not None
    names = re.findall(r"`([a-z]+)`", listed.group(1))
    for name in names:
        assert ErrorReason(name) == name
    assert ErrorReason.INTERNAL in names and ErrorReason.SIZE in names  # StrEnum members equal their text


def test_fetch_error_reason_is_checked():
    assert FetchError("refused", "connection").reason is ErrorReason.CONNECTION
    assert FetchError("x").reason == "protocol"
    with pytest.raises(ValueError):
        FetchError("x", "bogus")
    for msg in ("connection refused", "timed out", "HTTP 401", "certificate verify failed", "HTTP 500", "??"):
        assert classify_error(msg) in ErrorReason.__members__.values()


def test_result_builder_first_writer_wins():
    b = ResultBuilder("sw1")
    assert b.sample("1", "tx_bytes", 10, scale=4.0)
    assert not b.sample("1", "tx_bytes", 99)  # a second value for the same series is dropped
    assert b.sample("1", "tx_bytes", 5, sub=(3,))  # another sub-label is another series
    assert b.gauge("1", "link_up", 1) and not b.gauge("1", "link_up", 0)
    assert b.has("1", "tx_bytes") and b.has_gauge("1", "link_up") and not b.has("1", "link_up")
    assert [s.value for s in b.result.counters] == [10, 5] and b.result.gauges[0].value == 1.0
    assert next(iter(b.result.counters)) == Sample("sw1", "1", "tx_bytes", 10, (), 64, False, 4.0)


def test_every_collector_shares_the_parse_entry_point():
    for source in SOURCES:
        cls = get(source)
        assert cls.parse_poll.__func__ is Collector.parse_poll.__func__, source


def test_parse_poll_sanitises_what_parse_returns(monkeypatch):
    class Bad(Collector):
        source = "bad"

        async def fetch(self):
            return {}

        @classmethod
        def parse(cls, payload, spec, state):
            return ParseResult(counters=Counters.of([Sample("dev\ud800\n", "p" * 999, "tx_bytes", 1)])), state

    res, state = Bad.parse_poll({}, TargetSpec("t", "bad"), Bad.new_state())
    assert state is None
    first = next(iter(res.counters))
    assert first.device == "dev\ufffd" and len(first.port) == 256


def test_rest_client_certificate_loads_or_fails_as_tls(tmp_path):
    """cert_file/key_file (the keys the REST and gNMI sources share): a good pair loads into the
    TLS context; a missing or mismatched one is the poll's ``tls`` error naming the options."""
    from fabricmon.collectors.http_util import RestOptions, make_ssl_context
    from tests.pki import self_signed_cert

    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    cert, key = self_signed_cert(tmp_path / "a")
    _other_cert, other_key = self_signed_cert(tmp_path / "b")
    make_ssl_context(None, False, str(cert), str(key))
    for bad_key in (other_key, tmp_path / "missing.pem"):
        with pytest.raises(FetchError) as err:
            make_ssl_context(None, False, str(cert), str(bad_key))
        assert err.value.reason == ErrorReason.TLS and "cert_file" in str(err.value)
    with pytest.raises(ValueError, match="both cert_file and key_file"):
        RestOptions(cert_file=str(cert))
