"""UFM Telemetry CSV read column by column (``_csv_in_bulk``) against the row-by-row parse.

The bulk read converts each column's numbers in numpy and must give exactly what the
row-by-row parse gives (first reading of a series wins, the numbers to_int accepts, identity
columns, clocks, warnings): every payload is parsed both ways and the golden testcases' dumps
compared. The payloads are the testcases', a Selene-shaped fabric's, and random CSV bodies:
identity columns in any order, known, unknown and derived columns, numbers plain, padded,
hexadecimal, float, negative, past 2^64 or missing, quoted fields, ports without identity,
a port in two rows, several shards.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench.fabric import Fabric
from fabricmon.collectors.testcase import dump
from fabricmon.collectors.ufm_telemetry import parse as ufm_parse
from fabricmon.core.model import TargetSpec

ROOT = Path(__file__).resolve().parent.parent
SPEC = TargetSpec("ufm", "ufm-telemetry")
CASES = sorted((ROOT / "collectors" / "ufm_telemetry" / "testcases").glob("*/payload*.json"))


def _both(payload: dict, monkeypatch: pytest.MonkeyPatch) -> tuple[str, str]:
    """Both parses' facts and warnings (the warning on values that are not counter values too)."""
    got = ufm_parse.parse_payload(payload, SPEC)
    bulk = dump(got) + "\n".join(got.warnings)
    with monkeypatch.context() as m:
        m.setattr(ufm_parse, "_csv_in_bulk", lambda *_: None)
        got = ufm_parse.parse_payload(payload, SPEC)
        rows = dump(got) + "\n".join(got.warnings)
    return bulk, rows


def _payload(*bodies: str) -> dict:
    return {"responses": [{"method": "GET", "path": "/csv/cset/converted_enterprise", "status": 200, "body": b}
                          for b in bodies]}


@pytest.mark.parametrize("case", CASES, ids=[p.parent.name for p in CASES])
def test_testcases(case, monkeypatch):
    bulk, rows = _both(json.loads(case.read_text()), monkeypatch)
    assert bulk == rows


def test_a_fabric_is_read_in_bulk(monkeypatch):
    body = Fabric(300).ufm_csv(1, 1_700_000_000_000_000)
    result = ufm_parse.parse_payload(_payload(body), SPEC)
    assert len(result.counters) == 300 * 18 and not isinstance(result.counters.values, list)
    bulk, rows = _both(_payload(body), monkeypatch)
    assert bulk == rows


IDENT = ["node_guid", "port_guid", "port_num", "node_description", "port_label", "timestamp", "source_id"]
VALUES = ["Infiniband_MBOut_u_Gb", "PortRcvDataExtended", "SymbolErrorCounter", "Infiniband_XmitWait_u_Ticks",
          "Infiniband_CBW_f_u_Gbps", "hist0_u_count", "LinkDownedCounter", "Infiniband_MBIn_u_Gb"]
NUMBERS = ["0", "7", "007", "18446744073709551615", "18446744073709551616", "9999999999999999999", "-3", "1.5e3",
           "2.0", "0x1F", " 12 ", "", "nan", "1_000", '"42"', "123456789012345"]


def _csv(rng: random.Random, ports: list[tuple[str, int]]) -> str:
    header = rng.sample(IDENT, rng.randint(3, len(IDENT)))
    for must in ("node_guid", "port_num"):
        if must not in header:
            header.append(must)
    header += rng.sample(VALUES, rng.randint(1, len(VALUES)))
    rng.shuffle(header)
    lines = [",".join(header)]
    for guid, port in ports:
        cells = []
        for h in header:
            if h == "node_guid":
                cells.append(guid if rng.random() < 0.95 else "")
            elif h == "port_guid":
                cells.append(guid)
            elif h == "port_num":
                cells.append(str(port) if rng.random() < 0.95 else "x")
            elif h == "node_description":
                cells.append(rng.choice([f"sw-{guid[-2:]}", "", '"desc, with comma"']))
            elif h == "timestamp":
                cells.append(str(rng.choice([1_700_000_000_000_000, 1_700_000_010, 0, -1])))
            elif h in IDENT:
                cells.append(rng.choice(["", "1/1/1", "x"]))
            else:
                cells.append(str(rng.randrange(1 << 40)) if rng.random() < 0.8 else rng.choice(NUMBERS))
        lines.append(",".join(cells))
    return "\n".join(lines) + "\n"


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**32), shards=st.integers(1, 3), repeat_port=st.booleans())
def test_random_bodies_give_the_row_by_row_result(seed, shards, repeat_port, monkeypatch):
    rng = random.Random(seed)
    guids = [f"0x{rng.randrange(1 << 64):016x}" for _ in range(rng.randint(1, 6))]
    ports = [(g, p) for g in guids for p in range(1, rng.randint(2, 5))]
    if repeat_port:
        ports.append(rng.choice(ports))
    rng.shuffle(ports)
    cut = sorted(rng.sample(range(len(ports) + 1), shards - 1)) if shards > 1 else []
    parts = [ports[a:b] for a, b in zip([0, *cut], [*cut, len(ports)], strict=True)]
    bulk, rows = _both(_payload(*(_csv(rng, part) for part in parts)), monkeypatch)
    assert bulk == rows
