"""The finding pages' signals, pictures and words (issue 31 section 3), on corpus recordings and
small pipelines: the series of each kind and role over a finding's whole life, flat series flat,
evidence as words and tables, human units, ended findings not painted as active ones, empty
fields without labels, related findings by incident, a failed reload on ``/``, failed rules on
``/ready``, runbooks served and linked."""

from __future__ import annotations

import asyncio
import re

from aiohttp.test_utils import TestClient, TestServer

from fabricmon.agent.detector.analyses.fabric import FabricShape
from fabricmon.agent.exporter.server import Exporter, make_app
from fabricmon.agent.pipeline import Pipeline
from fabricmon.agent.recording import iter_lines
from fabricmon.agent.replay import replay_paced, replay_pipeline
from fabricmon.agent.web import pictures, runbooks, signals, svg, text, views
from fabricmon.agent.web.cache import WebCache
from fabricmon.agent.web.ids import finding_id
from fabricmon.core.model import Finding, Link, TargetSpec
from tests.conftest import ROOT

SCEN = ROOT / "tests" / "scenarios"


def _replayed(name: str) -> WebCache:
    """A scenario replayed through a pipeline with the web view attached (its history follows)."""
    path = SCEN / f"{name}.jsonl.gz"
    p = replay_pipeline(next(iter_lines(path))[1], path)
    cache = WebCache(p)
    asyncio.run(replay_paced(path, speed=None, pipeline=p))
    cache.render()
    return cache


def test_a_storm_origins_page_charts_the_pause_it_sends_over_its_whole_life():
    cache = _replayed("nic_pause_storm_arista")
    p = cache.pipeline
    assert p.store.history == 8  # the store keeps 80 s; the storm lasts 140 s
    origin = next(f for f in cache.pool if f.kind == "pfc_storm" and f.role == "origin")
    assert origin.end is not None and origin.end - origin.start > 8 * 10
    dev, port = signals.involved(origin)[0]
    sent = signals.chart_points(p, cache.history, dev, port, signals.PAUSE_SENT_FRAMES, origin.priority)
    # the kept history covers the finding's life and a margin on both sides
    assert sent[0][0] < origin.start and sent[-1][0] > origin.end, (sent[0][0], origin.start, sent[-1][0], origin.end)
    during = [v for t, v in sent if origin.start < t < origin.end]
    assert min(during) > 1000  # pause frames sent per second: it pauses its peer all along
    page = views.finding_page(p, origin, cache.pool, False, cache.history)
    rows = re.findall(r"<tr><td><a href='devices/[^']+'>([^<]+)</a></td><td>([^<]+)</td><td>([^<]+)</td>", page)
    mine = [r[2] for r in rows if (r[0], r[1]) == (dev, port)]
    assert mine[:3] == ["pause frames sent", "share of time it holds its peer paused", "pause frames received"], mine
    assert "throughput" not in page and "XmitWait" not in mine


def test_each_kind_and_role_has_its_own_signals():
    def names(kind: str, role: str | None) -> list[str]:
        return [s.name for s in signals.signals_for(Finding(kind, "critical", "d", "p", None, role, 0.0))]

    assert names("link_degraded", None)[:4] == ["link_up", "link_downed", "link_error_recovery", "symbol_errors"]
    assert names("pfc_storm", "victim")[:2] == ["pfc_rx_pause_seconds", "pfc_rx_pause_frames"]
    assert {"pfc_watchdog_storms", "pfc_watchdog_restores", "pfc_watchdog_drops"} <= set(names("pfc_storm", "watchdog"))
    assert names("credit_deadlock", "stalled") == ["xmit_wait", "tx_bytes", "tx_discards", "rx_bytes"]
    assert signals.STALL[-1].peer  # what the stalled port's peer received
    assert names("congestion", None)[0] == "ecn_marked_packets"


def test_flat_series_are_drawn_flat():
    flat = svg.sparkline([(0.0, 0.998), (10.0, 0.9980000000000001), (20.0, 0.998)])
    assert re.search(r'points="1\.0,16\.0 179\.0,16\.0"', flat), flat  # one level line, not a zig-zag of float noise
    moving = svg.sparkline([(0.0, 0.0), (10.0, 1.0)])
    assert 'points="1.0,31.0 179.0,1.0"' in moving


def test_evidence_in_words_and_units():
    ev = {"victims_lost": {"leaf01:Ethernet4": "receiving 47618 pause frames/s"}, "tx_progress": False, "throughput_bytes_per_s": 1.775e10,
          "rx_pause_frames_per_s": 47617.6176, "tx_pause_fraction": 0.998, "interval_s": 9.99, "cycle": ["a:1", "b:2"], "note": None}
    html = text.table(ev)
    for repr_like in ("{'", "False", "True", "None", "[", "e+"):
        assert repr_like not in html, repr_like
    assert "142 Gbit/s" in html and "47.6 k/s" in html and "99.8 %" in html and ">no<" in html and "a:1, b:2" in html
    assert text.fields([("device", "sw1"), ("port", None), ("priority", None), ("role", "")]) == "device <b>sw1</b>"


def _pipeline_with(findings: list[Finding], links: list[Link] = ()) -> Pipeline:
    p = Pipeline([], [])
    p.topology.set_static(links)
    p.detector.restore([f for f in findings if f.end is None])
    p.ended.extend(f for f in findings if f.end is not None)
    return p


def test_ended_findings_are_grey_and_empty_fields_print_nothing():
    ended = Finding("pfc_storm", "critical", "leaf01", "Ethernet5", 3, "origin", 100.0, 200.0, summary="over",
                    peer_device="gpu05", peer_port="eth0", rule="pfc_storm")
    p = _pipeline_with([ended], [Link("leaf01", "Ethernet5", "gpu05", "eth0")])
    page = views.finding_page(p, ended, [ended], False)
    picture = page.split('id="picture"')[1].split("</svg>")[0]
    assert 'class="ended"' in picture and 'class="origin"' not in picture  # the origin's box is grey once it ended
    assert "<span class='muted'>(critical" in page  # the heading is not red
    rows = views.finding_rows([ended], 300.0)
    assert "<tr class='ended'>" in rows and "<tr class='critical'>" not in rows
    flap = Finding("link_degraded", "warning", "sw1", "1", None, None, 100.0, rule="link_flap")
    page = views.finding_page(_pipeline_with([flap]), flap, [flap], False)
    ident = re.search(r"<p>(device .*?)</p>", page).group(1)
    assert ident.startswith("device <b>sw1</b> · port <b>1</b> · rule <b>link_flap</b> · id") and "priority" not in ident and "role" not in ident


def test_a_storm_origin_host_is_its_own_box_not_one_of_a_group():
    links = [Link("leaf01", f"Ethernet{i}", f"gpu0{i}", "eth0") for i in range(1, 5)]
    origin = Finding("pfc_storm", "critical", "gpu04", "eth0", 3, "origin", 100.0)
    p = _pipeline_with([origin], links)
    out = pictures.fabric_picture(FabricShape(p.store, p.topology), [origin], views.href)
    assert 'data-node="gpu04"' in out and f"findings/{finding_id(origin)}" in out
    assert "3 hosts, no finding" in out  # the others stay folded, and say they have no finding


def test_edge_labels_are_placed_clear_of_every_box():
    nodes = {n: svg.Node(n, n) for n in ("gpu05", "leaf02", "spine01", "leaf01")}
    edges = [svg.Edge("gpu05", "leaf02", "eth0 → Eth1/2", "paused"), svg.Edge("leaf02", "spine01", "Eth1/4 → Ethernet1/2", "paused"),
             svg.Edge("spine01", "leaf01", "Ethernet1/1 → Ethernet4", "paused"), svg.Edge("gpu05", "leaf01")]
    svg.layered(nodes, [["gpu05"], ["leaf02"], ["spine01"], ["leaf01"]], dx=svg.NODE_W + svg.gap_for(edges))
    spots = svg.place_labels(nodes, edges)
    boxes = [svg.node_box(n) for n in nodes.values()]
    for i, (x, y) in spots.items():
        box = svg.label_box(x, y, edges[i].label)
        assert not any(svg._overlaps(box, b) for b in boxes), edges[i].label


def test_related_findings_are_the_incident_not_the_kind():
    loop = Finding("credit_deadlock", "critical", "sw1", "3", None, "member", 100.0, evidence={"incident": "loop-1", "cycle": ["sw1:3", "sw2:4"]})
    loss = Finding("packet_loss", "critical", "sw1", "3", None, None, 110.0, evidence={"incident": "loop-1"})
    other = Finding("credit_deadlock", "critical", "sw9", "1", None, "stalled", 100.0, evidence={"incident": "stall-2"})
    assert views.related(loop, [loop, loss, other]) == [loss]


async def test_landing_page_shows_a_failed_reload_and_ready_names_failed_rules():
    from fabricmon.agent.detector import Rule

    class Broken(Rule):
        name = "broken"
        kinds = ("congestion",)

        def evaluate(self, ctx):
            raise ValueError("bad input")

    p = Pipeline([TargetSpec("sw1", "snmp")], [Broken()])
    p.targets["sw1"].polls = 1  # one poll cycle done: ready
    p.detect(1000.0)
    exporter = Exporter(p)
    exporter.web.reload_error = (p.now(), "c.yml:3:5: rules.congestion.ecn_warning_ratio: must be a number")
    exporter.render_now()
    async with TestClient(TestServer(make_app(exporter))) as client:
        home = await (await client.get("/")).text()
        assert "id='reload'" in home and "The last configuration reload failed" in home and "ecn_warning_ratio" in home
        assert "<h2 id='detector'>Detector</h2>" in home and "<b>1 rule(s) failed</b>" in home
        assert "rule broken failed 1 time(s); last: ValueError: bad input" in home
        ready = await client.get("/ready")
        body = await ready.text()
        assert ready.status == 200 and "detector: rule broken failed 1 time(s); last: ValueError: bad input" in body


async def test_runbooks_are_served_and_each_finding_page_carries_its_own():
    import yaml

    alerts = [r["alert"] for g in yaml.safe_load((ROOT / "dashboards" / "prometheus" / "alerts.yml").read_text())["groups"]
              for r in g["rules"]]
    assert set(alerts) == set(runbooks.sections())  # the packaged file (a link to docs/runbooks.md) has every alert
    assert set(runbooks.ALERT_OF_KIND.values()) <= set(alerts)
    assert set(runbooks.ALERT_OF_ROLE.values()) <= set(alerts)
    assert runbooks.alert_of("pfc_storm", "watchdog") == "FabricmonPfcWatchdog"  # a watchdog's page: its own alert
    assert runbooks.alert_of("pfc_storm", "origin") == "FabricmonPfcStorm"
    f = Finding("packet_loss", "critical", "leaf01", "Ethernet7", 3, None, 100.0, rule="packet_loss")
    p = _pipeline_with([f])
    exporter = Exporter(p)
    exporter.render_now()
    async with TestClient(TestServer(make_app(exporter))) as client:
        page = await (await client.get("/runbooks")).text()
        for a in alerts:
            assert f"<h2 id='{a.lower()}'>{a}</h2>" in page, a
        fpage = await (await client.get(f"/findings/{finding_id(f)}")).text()
        assert "<section id='runbook'><h2>Runbook: FabricmonPacketLoss</h2>" in fpage and "href='runbooks#fabricmonpacketloss'" in fpage
        assert "<b>Meaning.</b>" in fpage and "**" not in fpage


def test_a_stalled_port_page_says_what_it_holds_and_why():
    """Issue 31 item 5: the stalled port's evidence in words (blocked because, sent, its peer
    received, the XmitWait tick's origin), its picture the cable with the held data's direction,
    its signals XmitWait, sent, discards and the peer's receive; the same for a stalled port
    still filed as congestion with ``stalled: true`` (before the stalled role)."""
    ev = {"stalled": True, "xmit_wait_ticks_per_s": 3125000000, "sent_bytes_per_s": 0, "xmit_wait_fraction": 1.0,
          "xmit_wait_tick_from": "device generation (Quantum-2)", "peer_received_bytes_per_s": 0, "tx_discards": 381.0,
          "blocked_because": ["its cable peer node05 mlx5_0 1 received 0.00% of line rate", "381 packets discarded at the head of the queue"],
          "incident": "stall:ib-leaf03:1"}
    links = [Link("ib-leaf03", "1", "node05 mlx5_0", "1")]
    for kind, role in (("credit_deadlock", "stalled"), ("congestion", None)):
        f = Finding(kind, "critical", "ib-leaf03", "1", None, role, 100.0, peer_device="node05 mlx5_0", peer_port="1",
                    rule="credit_deadlock", evidence=ev)
        assert text.stalled(f)
        page = views.finding_page(_pipeline_with([f], links), f, [f], False)
        evidence = page.split("<h2>Evidence</h2>")[1].split("<h2>")[0]
        for words in ("stalled (holds data, sends nothing)</th><td>yes", "why it is blocked</th><td><ul class='because'><li>its cable peer",
                      "<li>381 packets discarded", "sent</th><td>0 bit/s", "its cable peer received</th><td>0 bit/s",
                      "XmitWait (waiting for credits)</th><td>3.12 Gticks/s", "XmitWait tick from</th><td>device generation (Quantum-2)"):
            assert words in evidence, (kind, words)
        picture = page.split('id="picture"')[1].split("</svg>")[0]
        assert re.search(r'class="edge paused[^"]*" data-from="ib-leaf03" data-to="node05 mlx5_0"', picture), picture
        assert "holds data, no credits back" in picture
        assert [s.name for s in signals.signals_for(f)] == ["xmit_wait", "tx_bytes", "tx_discards", "rx_bytes"]
    member = Finding("credit_deadlock", "critical", "sw1", "3", None, "member", 100.0, evidence={"stalled": True, "cycle": ["sw1:3", "sw2:4"]})
    assert not text.stalled(member)  # a loop member is drawn as its loop


def test_a_device_page_shows_the_loss_no_class_was_found_for():
    """INTERFACES 4: drops the detector cannot place on a class are no finding but a column of
    the port's row on its device page, with their stage, count and last rate, and why (the cell's
    title). The ``loss`` analysis that counts them (issue 27, branch det-eth) is stood in for by
    an object with its ``unattributed_at``; without it the column is absent."""
    from dataclasses import dataclass

    from fabricmon.agent.web import fabric

    @dataclass
    class Drops:  # the fields of det-eth's UnattributedDrops that the page reads
        stage: str
        total: float
        rate: float | None
        counters: tuple[str, ...]
        why: str
        would_tell: str
        stage_words: str

    cache = _replayed("lossless_drops_arista")
    p = cache.pipeline
    device, port = sorted(pk for pk in p.store.ports if pk[0] == "leaf01")[0]
    idx = fabric.FabricIndex.build(p, cache.findings)
    assert "loss not placed on a class" not in fabric.device_page(p, idx, device, False)

    class Loss:
        def unattributed_at(self, d: str, q: str) -> tuple[Drops, ...]:
            return (Drops("egress_queue", 1234.0, 5.5, ("queue_drops",), "the queue carries priorities 0 and 3", "a per-priority drop counter",
                          "egress queue"),) if (d, q) == (device, port) else ()

    real = p.detector.analysis
    p.detector.analysis = lambda name: Loss() if name == "loss" else real(name)
    page = fabric.device_page(p, idx, device, False)
    assert "<th>loss not placed on a class</th>" in page
    cell = re.search(rf"<tr[^>]*><td>{re.escape(port)}</td>.*?</tr>", page).group(0)
    assert "1234 packets, 5.5/s last · egress queue" in cell
    assert "title='the queue carries priorities 0 and 3; a per-priority drop counter would tell (queue_drops)'" in cell
