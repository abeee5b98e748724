"""The one InfiniBand table (counters, lane rates) and the one GUID normaliser, against the
strings the kernel and the tools really print."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from fabricmon.collectors.host.parse import parse_rate
from fabricmon.collectors.infiniband import BY_PERFQUERY, BY_SYSFS, COUNTERS, lane_gbps, parse_kernel_rate
from fabricmon.collectors.ufm.names import lookup
from fabricmon.core.guid import norm_guid
from fabricmon.core.vocabulary import COUNTERS as VOCABULARY
from tests.conftest import public_fixture

# Kernel rate_show (drivers/infiniband/core/sysfs.c): per-lane rate in units of 0.1 Gb/s.
KERNEL_LANE_TENTHS = {"SDR": 25, "DDR": 50, "QDR": 100, "FDR10": 100, "FDR": 140, "EDR": 250, "HDR": 500, "NDR": 1000, "XDR": 2000}
# Data rate per lane after line coding, Gb/s: 8b/10b for SDR/DDR/QDR, 64b/66b for FDR10/FDR/EDR,
# RS-FEC for HDR (53.125 line), NDR (106.25 line) and XDR (212.5 line).
DATA_GBPS = {"SDR": 2.0, "DDR": 4.0, "QDR": 8.0, "FDR10": 10.0, "FDR": 14.0625 * 64 / 66, "EDR": 25.0,
             "HDR": 50.0, "NDR": 100.0, "XDR": 200.0}
WIDTHS = (1, 2, 4, 8, 12)  # ib_width_enum_to_int: 1X, 2X, 4X, 8X, 12X


def kernel_rate(speed: str, width: int) -> str:
    """What rate_show writes: sysfs_emit(buf, "%d%s Gb/sec (%dX%s)\\n", rate / 10, rate % 10 ? ".5" : "", width, speed)."""
    rate = KERNEL_LANE_TENTHS[speed] * width
    return f"{rate // 10}{'.5' if rate % 10 else ''} Gb/sec ({width}X {speed})\n"


@pytest.mark.parametrize("speed", list(KERNEL_LANE_TENTHS))
@pytest.mark.parametrize("width", WIDTHS)
def test_kernel_rate_strings_every_speed_and_width(speed, width):
    got, lanes = parse_rate(kernel_rate(speed, width), "InfiniBand")
    assert lanes == width
    assert got == pytest.approx(width * DATA_GBPS[speed] * 1e9 / 8)


def test_known_kernel_strings():
    assert kernel_rate("XDR", 4) == "800 Gb/sec (4X XDR)\n"
    assert kernel_rate("SDR", 1) == "2.5 Gb/sec (1X SDR)\n"
    assert kernel_rate("FDR", 4) == "56 Gb/sec (4X FDR)\n"
    # XDR is 200 Gb/s per lane: 4X is 100 GB/s, not the 1.25e11 a 250 Gb/s lane rate gave.
    assert parse_rate("800 Gb/sec (4X XDR)", "InfiniBand") == (100e9, 4)
    assert parse_rate("100 Gb/sec (4X)", "InfiniBand") == (12.5e9, 4)  # no speed name: the number
    assert parse_kernel_rate("400 Gb/sec (4X NDR)", infiniband=False) == (50e9, 4)  # RoCE: the number
    assert parse_rate("fast", "InfiniBand") == (None, None)
    assert lane_gbps("IB_XDR") == 200.0 and lane_gbps("xdr") == 200.0 and lane_gbps(None) is None


def test_one_counter_table_for_every_spelling():
    for c in COUNTERS:
        assert c.counter in VOCABULARY, c
        assert BY_PERFQUERY[c.perfquery] is c
        assert lookup(c.perfquery) == (c.counter, c.scale)  # UFM uses the PerfMgt names too
        for name in c.ufm:
            assert lookup(f"Infiniband_{name}_u_Errors") == (c.counter, c.scale)
    assert BY_SYSFS["port_xmit_data"].scale == 4.0 and BY_SYSFS["symbol_error"].width == 16
    assert {c.counter for c in COUNTERS if c.data} == {"tx_bytes", "rx_bytes", "tx_packets", "rx_packets"}


@pytest.mark.parametrize(("text", "want"), [
    ("0x0c42a103008b40d0", "0x0c42a103008b40d0"),
    ("0xc42a103008b40d0", "0x0c42a103008b40d0"),  # ibnetdiscover without leading zeros
    ("c42a103008b40d0", "0x0c42a103008b40d0"),  # port-line GUID in parentheses
    ("248A070300A29D74", "0x248a070300a29d74"),  # upper case
    ("0X248a070300a29d74", "0x248a070300a29d74"),
    ("0002:c903:0010:a1b0", "0x0002c9030010a1b0"),  # sysfs node_guid
    (" 0x2c90300f172a0 ", "0x0002c90300f172a0"),  # UFM Telemetry label, short form
    (0x248A070300A29D74, "0x248a070300a29d74"),
    ("", ""), ("0x", ""), ("xyz", ""), ("0x1" + "0" * 16, ""), (-1, ""), (True, ""), (None, ""), (1.5, ""),
])
def test_norm_guid_shapes(text, want):
    assert norm_guid(text) == want


GUID_TOKEN = re.compile(r"(?<![0-9A-Za-z])(?:0[xX][0-9A-Fa-f]{1,16}|[0-9A-Fa-f]{4}(?::[0-9A-Fa-f]{4}){3}|[0-9A-Fa-f]{16})(?![0-9A-Za-z:])")


def _fixture_guids() -> set[str]:
    roots = [public_fixture("ib"), *Path(__file__).resolve().parent.parent.glob("collectors/*/testcases")]
    found: set[str] = set()
    for root in roots:
        for f in root.rglob("*"):
            if f.is_file() and f.suffix in ("", ".txt", ".json", ".out", ".prom", ".md"):
                found.update(GUID_TOKEN.findall(f.read_text(errors="replace")))
    return found


def test_norm_guid_on_every_guid_spelling_in_the_fixtures():
    tokens = _fixture_guids()
    shapes = {re.sub("[0-9a-f]", "h", re.sub("[A-F]", "H", t.lower() if t[:2] == "0x" else t)) for t in tokens}
    assert len(tokens) > 100 and len(shapes) >= 3, shapes
    for t in tokens:
        got = norm_guid(t)
        assert re.fullmatch(r"0x[0-9a-f]{16}", got), t
        assert int(got, 16) == int(t.replace(":", ""), 16), t
        assert norm_guid(got) == got  # idempotent: every source meets on one spelling
