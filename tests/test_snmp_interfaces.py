"""Same-named interfaces (Extreme SLX 20.x), LLDP ports through BRIDGE-MIB, and the vendor
profile chosen by sysDescr (Cumulus 4.x).

The SLX tests run on the public LibreNMS recording where ../shared has it (tests/data/INDEX.md);
the flap, warning and Cumulus tests run on made-up payloads of the same shape, so the logic is
proven everywhere."""

from __future__ import annotations

import functools
import json
import logging
import re
from pathlib import Path

from fabricmon.agent.detector.rules import build
from fabricmon.agent.exporter.server import Exporter
from fabricmon.agent.pipeline import Pipeline
from fabricmon.collectors.snmp import SnmpCollector
from fabricmon.collectors.snmp.parse import SnmpState
from fabricmon.core.model import ParseResult, Poll, TargetSpec
from tests.test_snmp_breadth import recording

TWIN = Path(__file__).resolve().parent.parent / "collectors" / "snmp" / "testcases" / "twin-ifnames" / "payload.json"
# Cumulus Linux 4.x answers with net-snmp's sysObjectID; its sysDescr names Cumulus (the
# sysDescr is the one LibreNMS's cumulus_mellanox.snmprec shows, quoted in issue 16).
CUMULUS_4 = """1.3.6.1.2.1.1.1.0|4|Linux leaf-cl4 4.19.0-cl-1-amd64 #1 SMP Cumulus 4.19.94-1+cl4.2.1u1 x86_64
1.3.6.1.2.1.1.2.0|6|1.3.6.1.4.1.8072.3.2.10
1.3.6.1.2.1.1.3.0|67|123456
1.3.6.1.2.1.2.2.1.2.3|4|swp1
1.3.6.1.2.1.2.2.1.7.3|2|1
1.3.6.1.2.1.2.2.1.8.3|2|1
1.3.6.1.2.1.31.1.1.1.1.3|4|swp1
1.3.6.1.2.1.31.1.1.1.6.3|70|1000
"""


@functools.cache
def slx() -> str:
    return recording("slxos_slx9150").read_text()


def twin() -> str:
    return json.loads(TWIN.read_text())["snmprec"]

IF_OPER = "1.3.6.1.2.1.2.2.1.8."


def parse_with(text: str, name: str = "slx", state: SnmpState | None = None) -> tuple[ParseResult, SnmpState]:
    """(result, next state) of one poll; ``state`` None: the target's first poll."""
    return SnmpCollector.parse({"snmprec": text}, TargetSpec(name, "snmp"), SnmpCollector.new_state() if state is None else state)


def parse(text: str, name: str = "slx") -> ParseResult:
    return parse_with(text, name)[0]


def octets(result) -> dict[str, int]:
    return {s.port: s.value for s in result.counters if s.counter == "rx_bytes"}


def test_slx_every_interface_with_traffic_gets_its_own_label():
    r = parse(slx())
    rx = octets(r)
    assert len(r.ports) == len({p.port for p in r.ports}) == 115  # 67 names, 48 of them twice
    # Ethernet 0/18: ifIndex 201474048 admin-down with no traffic, 201474368 up at 25G
    assert rx["Ethernet 0/18"] == 405192159823849
    assert rx["Ethernet 0/18 (ifIndex 201474048)"] == 0
    up = {g.port: g.value for g in r.gauges if g.name == "link_up"}
    assert up["Ethernet 0/18"] == 1.0 and up["Ethernet 0/18 (ifIndex 201474048)"] == 0.0
    # both twins admin-up: the one BRIDGE-MIB names as the bridge port keeps the name
    assert rx["Ethernet 0/3"] == 149754655392904 and rx["Ethernet 0/3 (ifIndex 201351168)"] == 3430171197
    assert sum(1 for w in r.warnings if "reported by more than one ifIndex" in w) == 1


def test_slx_lldp_lands_on_the_bridge_port():
    r = parse(slx())
    ports = {link.port for link in r.links}
    # lldpLocPortNum 18 = dot1dBasePort 18 -> ifIndex 201474368, the live twin
    assert "Ethernet 0/18" in ports and not any("201474048" in p for p in ports)
    assert "Ethernet 0/3" in ports
    up = {g.port: g.value for g in r.gauges if g.name == "link_up"}
    assert len(ports) == 31 and all(up[p] == 1.0 for p in ports)  # no neighbour on a dead twin


def _flap_every_twin(text: str) -> str:
    """Swap ifOperStatus up/down on every line: a poll in which every link flapped."""
    return re.sub(rf"^({re.escape(IF_OPER)}\d+\|2\|)([12])$", lambda m: m[1] + ("2" if m[2] == "1" else "1"),
                  text, flags=re.M)


def test_labels_do_not_move_when_links_flap():
    before = {(s.port, s.counter): s.value for s in parse(twin()).counters}
    flapped = _flap_every_twin(twin())
    assert flapped != twin()
    after = {(s.port, s.counter): s.value for s in parse(flapped).counters}
    assert after == before  # the same counters under the same labels


def test_collision_is_one_warning_per_target(caplog):
    with caplog.at_level(logging.INFO, logger="fabricmon.collectors.snmp.parse"):
        first, state = parse_with(twin())
        second, _ = parse_with(twin(), state=state)
        parse_with(twin(), name="slx2")
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert [w.getMessage().split(":")[0] for w in warnings] == ["target slx", "target slx2"]
    assert first.warnings == second.warnings  # the result depends on the payload alone


def test_cumulus_4_is_chosen_by_sysdescr_and_exported(caplog):
    text = CUMULUS_4
    with caplog.at_level(logging.INFO, logger="fabricmon.collectors.snmp.parse"):
        r = parse(text, "cl4")
    assert r.target_info == {"profile": "cumulus", "match": "sysDescr matches 'Cumulus'"}
    assert "target cl4: SNMP profile cumulus (sysDescr matches 'Cumulus')" in caplog.messages
    assert not any("no vendor profile" in w for w in r.warnings)

    p = Pipeline([TargetSpec("cl4", "snmp")], build())
    p.ingest(Poll("cl4", "snmp", 100.0, 0.1, True, payload={"snmprec": text}))
    metrics = Exporter(p).render_now().text.decode()
    assert ('fabricmon_target_info{target="cl4",source="snmp",match="sysDescr matches \'Cumulus\'",'
            'profile="cumulus"} 1') in metrics
