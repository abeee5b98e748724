"""Hostile strings in payloads: a lone surrogate, control characters or a huge name sent by a
UFM or NVUE server must not stop /metrics, the recording or the state of any target.

The attack: ``"\\ud800"`` is valid JSON (RFC 8259 section 8.2) and decodes to a lone surrogate,
which no UTF-8 encoder accepts; before sanitising, every render after such a poll raised
UnicodeEncodeError for all targets, and the recording writer lost the poll.
"""

from __future__ import annotations

import copy
import json

import pytest

from fabricmon.agent.detector.rules import build
from fabricmon.agent.exporter.server import Exporter
from fabricmon.agent.pipeline import Pipeline
from fabricmon.agent.recording import RecordingWriter, read_polls
from fabricmon.collectors.base import FetchError, ParseError
from fabricmon.collectors.nvue import NvueCollector
from fabricmon.collectors.sanitize import MAX_NAME, MAX_TEXT, clean, sanitize_result
from fabricmon.core.model import Counters, Link, ParseResult, Poll, Sample, TargetSpec
from tests.http_standins import BasicAuthRule, Reply, StandIn, fetch_once
from tests.pki import self_signed_cert
from tests.test_nvue_rest import PASSWORD as NVUE_PASSWORD
from tests.test_nvue_rest import USER as NVUE_USER
from tests.test_nvue_rest import make as make_nvue
from tests.test_nvue_rest import routes_from_case as nvue_routes
from tests.test_ufm_rest import AUTH, USER, collector, recorded_bodies, ufm_routes

SURROGATE = "\ud800"
HOSTILE = f"sw{SURROGATE}\x1b[31m\n" + "x" * 10_000


@pytest.fixture(scope="module")
def cert(tmp_path_factory):
    return self_signed_cert(tmp_path_factory.mktemp("hostile-tls"))


def test_clean_rules():
    assert clean("leaf01 swp1/2") == "leaf01 swp1/2"  # printable ASCII: unchanged
    assert clean("Grüße-λ") == "Grüße-λ"  # printable non-ASCII: unchanged
    assert clean(f"a{SURROGATE}b\udfffc") == "a\ufffdb\ufffdc"
    assert clean("a\x00b\tc\nd\x7fe\x9bf") == "abcdef"
    assert clean("y" * 1000) == "y" * MAX_NAME
    assert clean("z" * 5000, MAX_TEXT) == "z" * MAX_TEXT
    clean(HOSTILE).encode()  # always encodable


def test_sanitize_result_covers_every_string_field():
    res = ParseResult(counters=Counters.of([Sample(HOSTILE, HOSTILE, "tx_bytes", 1, sub=("buffer", HOSTILE, 3))]),
                      links=[Link(HOSTILE, "1", "peer", HOSTILE)], clocks={HOSTILE: 1.0},
                      warnings=[f"bad {SURROGATE}"], target_info={"profile": SURROGATE})
    out = sanitize_result(res)
    [s] = list(out.counters)
    assert s.device == s.port == clean(HOSTILE) and s.sub[1] == clean(HOSTILE) and s.sub[2] == 3
    assert out.links == [Link(clean(HOSTILE), "1", "peer", clean(HOSTILE))]
    json.dumps([s.device, s.sub, list(out.clocks), out.warnings, out.target_info], ensure_ascii=False).encode()


def _render_all(p: Pipeline) -> str:
    return Exporter(p).render_now().text.decode()


def _pipeline(tmp_path, specs: list[TargetSpec]) -> tuple[Pipeline, RecordingWriter]:
    rec = RecordingWriter(tmp_path / "rec.jsonl", specs)
    return Pipeline(specs, build(), recorder=rec), rec


async def test_ufm_surrogate_name_does_not_blind_the_exporter(cert, tmp_path):
    bodies = copy.deepcopy(recorded_bodies("v620_fabric"))
    for port in bodies["ports"]:
        if port["number"] == 23:
            port["node_description"] = f"MF0;{HOSTILE}:23"
            port["system_name"] = HOSTILE
    async with StandIn(ufm_routes(bodies), AUTH, tls=cert) as srv:
        c = collector(srv, username=USER, password="s3cret-Pw!", ca_file=str(cert[0]))
        payload = await fetch_once(c)
    assert SURROGATE in json.dumps(payload, ensure_ascii=False)  # the client hands it on as sent

    clean_spec = TargetSpec("ufm-clean", "ufm")
    p, rec = _pipeline(tmp_path, [c.spec(), clean_spec])
    clean_payload = {"responses": [dict(r, body=recorded_bodies("v620_fabric")[r["path"].split("?")[0].rsplit("/", 1)[-1]])
                                   for r in payload["responses"]]}
    assert p.ingest(Poll("ufm01", "ufm", 100.0, 0.1, True, payload=payload))
    assert p.ingest(Poll("ufm-clean", "ufm", 100.0, 0.1, True, payload=clean_payload))
    text = _render_all(p)
    assert 'fabricmon_target_up{target="ufm01",source="ufm"} 1' in text
    assert 'fabricmon_target_up{target="ufm-clean",source="ufm"} 1' in text
    assert "MF0;sw\ufffd[31m" in text and "\x1b" not in text  # replaced, stripped, cut
    assert max(len(v) for line in text.splitlines() for v in line.split('"')) <= MAX_NAME
    rec.close()
    header, polls, _ = read_polls(tmp_path / "rec.jsonl")  # the poll was recorded, exactly as sent
    assert polls[0].payload == payload
    # ... and replays: a fresh pipeline fed from the recording renders both targets.
    replayed = Pipeline([TargetSpec.from_header(t) for t in header["targets"]], build())
    for poll in polls:
        replayed.ingest(poll)
    again = _render_all(replayed)
    assert 'fabricmon_target_up{target="ufm01",source="ufm"} 1' in again and "MF0;sw\ufffd[31m" in again


async def test_nvue_surrogate_interface_name_does_not_blind_the_exporter(cert, tmp_path, monkeypatch):
    monkeypatch.setenv("NVUE_TEST_PW", NVUE_PASSWORD)
    routes = nvue_routes()
    listing = copy.deepcopy(routes["/nvue_v1/interface"].body)
    listing[f"swp{SURROGATE}9"] = copy.deepcopy(listing["swp1"])
    routes["/nvue_v1/interface"] = Reply(listing)
    async with StandIn(routes, auth={"/nvue_v1": BasicAuthRule(NVUE_USER, NVUE_PASSWORD)}, tls=cert) as srv:
        c = make_nvue(srv, cert)
        payload = await fetch_once(c)
    res, _ = NvueCollector.parse_poll(payload, c.spec(), NvueCollector.new_state())
    ports = {s.port for s in res.counters} | {g.port for g in res.gauges}
    assert "swp\ufffd9" in ports or any("swp\ufffd9" in w for w in res.warnings)
    p, rec = _pipeline(tmp_path, [c.spec()])
    assert p.ingest(Poll("leaf01", "nvue", 100.0, 0.1, True, payload=payload))
    text = _render_all(p)
    assert 'fabricmon_target_up{target="leaf01",source="nvue"} 1' in text
    assert SURROGATE not in text
    rec.close()
    assert read_polls(tmp_path / "rec.jsonl")[1][0].payload == payload


def test_error_messages_are_cleaned():
    assert SURROGATE not in str(FetchError(f"HTTP 500: {HOSTILE}", "http"))
    assert len(str(FetchError("e" * 100_000))) == MAX_TEXT
    assert SURROGATE not in str(ParseError(f"unexpected {HOSTILE}"))
