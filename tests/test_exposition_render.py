"""The template renderer against a straightforward reference formatting, on random series.

The fabric families are rendered through cached per-family templates with the values
formatted in bulk (agent/exporter/exposition.py); the reference here writes every line
one by one from the store's per-series read API with :func:`fmt_value`. Both must give the
same bytes, for hostile label values (quotes, backslashes, newlines, ``%``, non-ASCII),
special floats, the 10^15 integer boundary, at the full and the health level. Also: one
body serves both formats, and the spliced gzip (a body compressed once, a tail per
scrape) is one valid gzip member.
"""

from __future__ import annotations

import gzip
import random
import zlib

import numpy as np
import pytest

from fabricmon.agent.detector.rules import build as build_rules
from fabricmon.agent.exporter import metrics
from fabricmon.agent.exporter.exposition import (
    EOF,
    Exposition,
    Family,
    Template,
    build,
    fmt_value,
    format_values,
    labels,
    render,
    sample_blocks,
)
from fabricmon.agent.exporter.metrics import ExpositionPolicy
from fabricmon.agent.pipeline import Pipeline
from fabricmon.core.model import Gauge, Sample, TargetSpec
from fabricmon.core.slicing import SLICE
from fabricmon.core.vocabulary import COUNTERS, GAUGES, metric_name

HOSTILE = ['a"b', "back\\slash", "new\nline", "100%", "%s%d%%", "ünï€", "", "x" * 40, "{}", "a=b,c"]
SPECIAL = [float("nan"), float("inf"), float("-inf"), -0.0, 0.0, 1e15, 1e15 - 1, -1e15 + 1, 2.0**53, 2.0**53 + 2,
           1e300, 5e-324, 0.1, -2.5, 123456789.125, 1e16, 9007199254740993.0]


def _random_values(rng: random.Random, n: int) -> list:
    out: list = []
    for _ in range(n):
        r = rng.random()
        if r < 0.3:
            out.append(rng.choice(SPECIAL))
        elif r < 0.6:
            out.append(float(rng.randrange(0, 10**rng.randrange(1, 19))))
        elif r < 0.8:
            out.append(rng.uniform(-1e6, 1e6))
        else:
            out.append(rng.randrange(-(10**20), 10**20))  # Python ints, some beyond int64
    return out


@pytest.mark.parametrize("seed", range(5))
def test_bulk_value_formatting_matches_fmt_value(seed):
    vals = [*_random_values(random.Random(seed), 2000), True, np.float32(0.1), np.int64(7)]
    assert [str(x) for x in format_values(vals)] == [fmt_value(v) for v in vals]
    whole = [float(x) for x in range(-5, 5)]
    assert format_values(np.array(whole)) == list(range(-5, 5))  # the all-integer column: one cast


@pytest.mark.parametrize("seed", range(5))
def test_template_fill_matches_line_by_line(seed):
    rng = random.Random(seed)
    blocks = [labels((("device", rng.choice(HOSTILE) + str(i)), ("port", rng.choice(HOSTILE)))) for i in range(300)]
    blocks[0] = ""  # a series without labels
    t = Template("fabricmon_x_total", blocks)
    for _ in range(3):  # the same template, new values each poll
        vals = _random_values(rng, len(blocks))
        assert "\n".join(t.fill(vals)) == "\n".join(f"fabricmon_x_total{b} {fmt_value(v)}" for b, v in zip(blocks, vals, strict=True))
    assert Template("fabricmon_y", []).fill([]) == []
    with pytest.raises(ValueError, match="300 series given 2 values"):
        t.fill([1, 2])


def test_a_large_family_is_filled_in_blocks_of_at_most_slice_series():
    """Each block is made by C calls over at most SLICE series (core/slicing.py); together
    they are the family's lines, in order."""
    n = 2 * SLICE + 7
    bases = [f'{{device="d{i}"' for i in range(n)]
    t = Template("fabricmon_z_total", bases, ',priority="3"}')
    vals = np.arange(n, dtype=np.float64) * 0.5
    blocks = t.fill(vals)
    assert [b.count("\n") + 1 for b in blocks] == [SLICE, SLICE, 7]
    assert "\n".join(blocks) == "\n".join(f'fabricmon_z_total{{device="d{i}",priority="3"}} {fmt_value(v)}' for i, v in enumerate(vals.tolist()))
    assert sample_blocks("fabricmon_z%s %s", [b + "}" for b in bases], vals) == \
        ["\n".join(f'fabricmon_z{{device="d{i}"}} {fmt_value(v)}' for i, v in enumerate(vals.tolist()[lo:lo + SLICE], lo))
         for lo in (0, SLICE, 2 * SLICE)]


def test_template_columns_concatenate_per_series():
    bases = ['{device="a%s"', '{device="b"', '{device="a%s"']
    ends = [',priority="3"}', ',priority="%d"}', "}"]
    t = Template("fabricmon_q_total", bases, ends)
    assert t.fill([1, 2.5, float("inf")]) == ['fabricmon_q_total{device="a%s",priority="3"} 1\n'
                                              'fabricmon_q_total{device="b",priority="%d"} 2.5\n'
                                              'fabricmon_q_total{device="a%s"} +Inf']
    with pytest.raises(ValueError, match="columns of 3 and 2 series"):
        Template("fabricmon_q_total", bases, ends[:2])


def _fill(p: Pipeline, rng: random.Random, t: float, ports: list[tuple[str, str, str]], grow: bool) -> None:
    """One poll per target of random counters (some with sub-labels) and gauges on ``ports``."""
    names = sorted(COUNTERS)
    by_target: dict[str, tuple[list, list]] = {}
    for i, (target, device, port) in enumerate(ports):
        samples, gauges = by_target.setdefault(target, ([], []))
        r = random.Random(i)  # the same counters on a port every poll: a stable layout
        for name in r.sample(names, 6 + (3 if grow and i % 7 == 0 else 0)):
            d = COUNTERS[name]
            subs = [()] if not d.labels else [tuple(r.choice([3, 0, "q%1", 'p"1']) for _ in d.labels) for _ in range(2)]
            for sub in dict.fromkeys(subs):
                samples.append(Sample(device, port, name, int(t * rng.randrange(1, 10**6)), bits=64,
                                      scale=r.choice([1, 4, 0.001]), sub=sub))
        for gname in r.sample(sorted(GAUGES), 3):
            g = GAUGES[gname]
            sub = tuple(r.choice([1, 2]) for _ in g.labels)
            gauges.append(Gauge(device, port, gname, rng.choice([1, 0.5, 2.0**60, float("nan"), -3, 1e20])))
            if g.labels:
                gauges[-1] = Gauge(device, port, gname, gauges[-1].value, sub)
    for target, (samples, gauges) in sorted(by_target.items()):
        p.store.update(samples, t, None, gauges, target=target)


def _line(d, pk: tuple[str, str], sub: tuple, value: float) -> str:
    return f"{metric_name(d)}{labels((('device', pk[0]), ('port', pk[1]), *zip(d.labels, sub, strict=True)))} {fmt_value(value)}"


def _reference_lines(p: Pipeline) -> list[str]:
    """Full level, one line at a time from the per-series read API."""
    counters: dict[str, list[tuple]] = {}
    for (device, port), (name, sub), se in p.store.iter_series():
        if name in COUNTERS:
            counters.setdefault(name, []).append(((device, port), tuple(str(x) for x in sub), sub, se.total))
    out = []
    for name in sorted(counters):
        d = COUNTERS[name]
        for (device, port), _, sub, total in sorted(counters[name], key=lambda x: (x[0], x[1])):
            out.append(_line(d, (device, port), sub, total))
    gauges: dict[str, list[tuple]] = {}
    for pk, entry in p.store.ports.items():
        for (name, sub), g in entry.gauges.items():
            if name in GAUGES:
                gauges.setdefault(name, []).append((pk, tuple(str(x) for x in sub), sub, g.value))
    for name in sorted(gauges):
        d = GAUGES[name]
        for (device, port), _, sub, v in sorted(gauges[name], key=lambda x: (x[0], x[1])):
            out.append(_line(d, (device, port), sub, v))
    return out


def _reference_health(p: Pipeline, policy: ExpositionPolicy) -> tuple[list[str], dict[str, list[str]], dict[str, list[str]]]:
    """Health level, per port and per series: the full series kept, per-port rates, per-target sums."""
    full, health, sums = [], {}, {}
    ports = p.store.ports
    for pk in sorted(ports):
        e = ports[pk]
        keys = sorted(e.series, key=lambda k: (k[0], tuple(str(x) for x in k[1])))
        for name, sub in keys:
            d = COUNTERS.get(name)
            if d is None:
                continue
            se = e.series[(name, sub)]
            if policy.full(e.target, d.group):
                full.append((name, _line(d, pk, sub, se.total)))
                continue
            sums[(e.target, name)] = sums.get((e.target, name), 0.0) + se.total
            kind = "tx" if name == "tx_bytes" else "rx" if name == "rx_bytes" else "problems" if d.group in ("errors", "drops") else None
            if kind and se.rate is not None:
                health.setdefault(kind, {}).setdefault(pk, 0.0)
                health[kind][pk] += se.rate
    full_lines = [ln for _, ln in sorted(full, key=lambda x: x[0])]  # stable: port order within a counter
    rate_lines = {k: [f"{labels((('device', pk[0]), ('port', pk[1])))} {fmt_value(v)}" for pk, v in sorted(h.items())]
                  for k, h in health.items()}
    sum_lines: dict[str, list[str]] = {}
    for (target, name) in sorted(sums):
        sum_lines.setdefault(f"fabricmon_fabric_{COUNTERS[name].metric}", []).append(
            f"{labels((('target', target),))} {fmt_value(sums[(target, name)])}")
    return full_lines, rate_lines, sum_lines


def _lines(fams: list[Family]) -> dict[str, list[str]]:
    return {f.name: f.samples() for f in fams}


def _pipeline() -> Pipeline:
    return Pipeline([TargetSpec("a", "perfquery"), TargetSpec("b", "perfquery")], build_rules(), stale_after=3600.0)


def _ports(rng: random.Random, n: int) -> list[tuple[str, str, str]]:
    return [(rng.choice("ab"), f"{rng.choice(HOSTILE)}sw{i % 9}", f"{rng.choice(HOSTILE)}{i}") for i in range(n)]


@pytest.mark.parametrize("seed", range(3))
def test_fabric_render_matches_the_per_series_reference(seed):
    rng = random.Random(seed)
    p = _pipeline()
    ports = _ports(rng, 60)
    for k in range(3):
        _fill(p, rng, 100.0 + 10 * k, ports, grow=k == 2)  # the last poll adds series: a new layout
        fams = metrics.fabric_families(p)
        got = [ln for f in fams for ln in f.samples()]
        assert got == _reference_lines(p)


def test_a_template_is_reused_while_the_layout_holds():
    rng = random.Random(7)
    p = _pipeline()
    ports = _ports(rng, 20)
    _fill(p, rng, 100.0, ports, grow=False)
    metrics.fabric_families(p)
    cache = metrics._cache_for(p.store)
    before = {n: t for n, (_, t) in cache.templates.items()}
    _fill(p, rng, 110.0, ports, grow=False)
    metrics.fabric_families(p)
    assert {n: t for n, (_, t) in cache.templates.items()} == before  # same objects: not rebuilt
    _fill(p, rng, 120.0, ports, grow=True)
    metrics.fabric_families(p)
    assert any(cache.templates[n][1] is not t for n, t in before.items() if n in cache.templates)


@pytest.mark.parametrize("seed", range(3))
def test_health_level_matches_the_per_series_reference(seed):
    rng = random.Random(seed)
    p = _pipeline()
    ports = _ports(rng, 60)
    for k in range(3):
        _fill(p, rng, 100.0 + 10 * k, ports, grow=False)
    for policy in (ExpositionPolicy(level="health"), ExpositionPolicy(level="health", groups={"pfc": "full"}),
                   ExpositionPolicy(level="health", targets={"a": "full"})):
        p.exposition_policy = policy
        got = _lines(metrics.fabric_families(p))
        full, rates, sums = _reference_health(p, policy)
        got_full = [ln for name, lines in got.items() if name.endswith("_total") and "_fabric_" not in name for ln in lines]
        assert got_full == full
        for kind, (metric, _) in metrics.HEALTH_RATES.items():
            assert got[f"fabricmon_{metric}"] == [f"fabricmon_{metric}{ln}" for ln in rates.get(kind, [])]
        assert {n: ls for n, ls in got.items() if "_fabric_" in n} == {n: [n + ln for ln in ls] for n, ls in sums.items()}


def _families() -> list[Family]:
    c = Family("fabricmon_x_total", "counter", 'Help with \\ and\nnewline "quotes".')
    c.add(labels((("device", 'a"b'),)), 3)
    i = Family("fabricmon_y_info", "info", "Info.")
    i.add(labels((("v", "1"),)), 1)
    g = Family("fabricmon_z", "gauge", "Gauge.")
    g.add("", float("nan"))
    return [c, i, g, Family("fabricmon_empty", "gauge", "Declared, no series.")]


def test_one_body_serves_both_formats():
    body = build(_families())
    shared = [p for p in body.parts if isinstance(p, bytes)]
    assert b'fabricmon_x_total{device="a\\"b"} 3\n' in shared and b"fabricmon_z NaN\n" in shared
    text, om = b"".join(body.chunks(False)), b"".join(body.chunks(True))
    assert b"# TYPE fabricmon_x_total counter\n" in text and b"# TYPE fabricmon_x counter\n" in om
    assert b"# TYPE fabricmon_y_info gauge\n" in text and b"# TYPE fabricmon_y info\n" in om
    assert b"# HELP fabricmon_x Help with \\\\ and\\nnewline" in om
    samples = [ln for ln in text.split(b"\n") if ln and not ln.startswith(b"#")]
    assert samples == [ln for ln in om.split(b"\n") if ln and not ln.startswith(b"#")]
    assert body.nbytes(False) == len(text) and body.nbytes(True) == len(om)
    assert render(_families()) == (text, om + EOF)


@pytest.mark.parametrize("openmetrics", [False, True])
def test_gzip_of_body_and_tail_is_one_valid_member(openmetrics):
    rng = random.Random(1)
    big = Family("fabricmon_big_total", "counter", "Big.")
    big.lines = Template(big.name, [labels((("device", rng.choice(HOSTILE) + str(i)),)) for i in range(5000)]).fill(_random_values(rng, 5000))
    expo = Exposition(build([*_families(), big]), 1, 0.0, 0.0)
    head = expo.gzip_head(openmetrics)
    for tail in (b"", b"# TYPE process_open_fds gauge\nprocess_open_fds 7.0\n", bytes(range(256)) * 50):
        plain = b"".join(expo.response(openmetrics, False, tail))
        assert plain == (expo.openmetrics[: -len(EOF)] + tail + EOF if openmetrics else expo.text + tail)
        chunks = expo.response(openmetrics, True, tail)
        assert all(c is h for c, h in zip(chunks, head, strict=False)) and len(chunks) == len(head) + 1  # the body is compressed once, only the tail per scrape
        gz = b"".join(chunks)
        assert gzip.decompress(gz) == plain
        d = zlib.decompressobj(wbits=31)  # one member: a client that reads only the first gets it all
        assert d.decompress(gz) == plain and d.eof and d.unused_data == b""


async def test_metrics_appends_the_process_collectors_in_both_formats():
    """The fabric body is served as pre-rendered; prometheus_client's process, GC and platform
    collectors are rendered per scrape after it, and the whole response parses in each format."""
    from aiohttp.test_utils import TestClient, TestServer
    from prometheus_client.openmetrics.parser import text_string_to_metric_families as parse_om
    from prometheus_client.parser import text_string_to_metric_families as parse_text

    from fabricmon.agent.exporter.server import Exporter, make_app

    p = _pipeline()
    _fill(p, random.Random(3), 100.0, _ports(random.Random(3), 10), grow=False)
    exporter = Exporter(p)
    exporter.render_now()
    async with TestClient(TestServer(make_app(exporter))) as client:
        plain = {"Accept-Encoding": "identity"}
        r = await client.get("/metrics", headers=plain)
        text = await r.text()
        assert int(r.headers["Content-Length"]) == len(text.encode())  # the parts' sizes, summed
        om_resp = await client.get("/metrics", headers={"Accept": "application/openmetrics-text;version=1.0.0",
                                                        "Accept-Encoding": "gzip"})
        om = await om_resp.text()
        head = await client.head("/metrics", headers=plain)
        assert head.status == 200 and await head.read() == b"" and int(head.headers["Content-Length"]) > len(om) // 2
    fams = {f.name: f for f in parse_text(text)}
    om_fams = {f.name: f for f in parse_om(om)}  # raises on a misplaced or missing # EOF
    assert om.count("# EOF") == 1 and om.endswith("# EOF\n")
    for name in ("process_resident_memory_bytes", "process_open_fds"):
        assert fams[name].samples[0].value > 0 and om_fams[name].samples[0].value > 0
    assert fams["process_cpu_seconds"].type == "counter" and "python_gc_collections" in fams
    assert om_fams["python_info"].samples[0].labels["implementation"]
    assert "fabricmon_build" in om_fams and len(fams) > 12  # the fabric body is still all there, before the tail


def test_the_previous_body_is_dropped_before_the_next_is_built():
    """Peak memory is one body: while a render builds, the exporter no longer holds the last one."""
    from fabricmon.agent.exporter.server import Exporter

    p = _pipeline()
    _fill(p, random.Random(4), 100.0, _ports(random.Random(4), 10), grow=False)
    held: list[int] = []
    exporter = Exporter(p, extra_families=lambda: held.append(exporter.exposition.held_bytes()) or [])
    first = exporter.render_now()
    assert first.held_bytes() > 0
    exporter.render_now()
    assert held == [0, 0]
    assert exporter.exposition is not first and exporter.exposition.held_bytes() > 0


@pytest.mark.parametrize("slice_chars", [1, 7, 64])
def test_a_large_block_is_encoded_in_slices_to_the_same_bytes(slice_chars, monkeypatch):
    """A family's block longer than ``ENCODE_SLICE`` characters is encoded a slice at a time (no
    one long C call on the pipeline worker): the body's bytes are what one encode gives, with
    non-ASCII label text and a lone surrogate (replaced by "?") across the slice borders."""
    from fabricmon.agent.exporter import exposition

    lines = ['fabricmon_x_total{device="sw\u00e9\U0001f600",port="1"} 12', 'fabricmon_x_total{device="b\ud800",port="2"} 3.5']
    block = "\n".join(lines * 5)

    def body() -> bytes:
        fam = Family("fabricmon_x_total", "counter", "A test counter.", [block, "fabricmon_x_total{port=\"3\"} 1"])
        return render([fam])[0]

    whole = body()
    monkeypatch.setattr(exposition, "ENCODE_SLICE", slice_chars)
    assert body() == whole
    assert whole.count(b"?") == 5 and "\U0001f600".encode() in whole
