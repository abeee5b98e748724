"""SNMP targets over IPv6 (issue 31): an IPv6 literal address with the port as ``port:``.

The config side needs no socket. The fetch runs against a real snmpsim agent on ``::1`` with both
transports (gufo-snmp learns column types through pysnmp, so both need pysnmp's IPv6 transport).
"""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from fabricmon import collectors
from fabricmon.agent.config import ConfigError, load_text
from fabricmon.collectors.snmp.snmprec import parse_snmprec
from tests.snmpsim_util import SnmpSim

DATA = Path(__file__).parent / "data" / "snmp" / "onyx.snmprec"


def _target(address: str, port: int = 161, **extra: str) -> str:
    opts = "".join(f"\n    {k}: {v}" for k, v in extra.items())
    return f"targets:\n  - name: leaf01\n    source: snmp\n    address: \"{address}\"\n    port: {port}\n    community: public{opts}\n"


@pytest.mark.parametrize("address", ["::1", "2001:db8::11", "fe80::1%eth0", "2001:DB8:0:0:0:0:0:11"])
def test_ipv6_literals_are_addresses(address):
    loaded = load_text(_target(address, 1161), "f.yml")
    [target] = loaded.config.targets
    assert target.address == address and loaded.options["leaf01"].port == 1161


@pytest.mark.parametrize(("address", "message"), [
    ("[::1]:161", "f.yml:4:5: targets[0].address: address '[::1]:161': give the host alone and the port as port: (default 161)"),
    ("[::1]", "f.yml:4:5: targets[0].address: address '[::1]': write an IPv6 address without brackets: ::1"),
    ("2001:db8::zz", "f.yml:4:5: targets[0].address: address '2001:db8::zz' is not a valid IPv6 address"),
])
def test_ipv6_mistakes_are_named_at_the_address(address, message):
    with pytest.raises(ConfigError) as exc:
        load_text(_target(address), "f.yml")
    assert exc.value.problems == [message]


def _ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_DGRAM) as s:
            s.bind(("::1", 0))
    except OSError:
        return False
    return True


@pytest.mark.snmpsim
@pytest.mark.skipif(not _ipv6_loopback(), reason="no IPv6 on the loopback (::1): the address handling is tested without a socket above")
@pytest.mark.parametrize("backend", ["gufo", "pysnmp"])
async def test_fetch_over_ipv6_loopback(backend):
    with SnmpSim({"onyx": DATA}, host="::1") as sim:
        loaded = load_text(_target("::1", sim.port, backend=backend).replace("public", "onyx"), "f.yml")
        [target] = loaded.config.targets
        cls = collectors.get("snmp")
        c = cls(target.name, target.address, loaded.options[target.name])
        try:
            payload = await c.fetch()
        finally:
            await c.close()
    got = parse_snmprec(payload["snmprec"])
    source = parse_snmprec(DATA.read_text()).table
    assert got.table and all(source[oid] == value for oid, value in got.table.items())
    result, _ = cls.parse_poll(payload, c.spec(), cls.new_state())
    assert result.counters
