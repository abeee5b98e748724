"""The gnmi source end to end: a config with ``source: gnmi`` passes check-config, the agent polls
the grpcio stand-in over TLS with a password, exports ``fabricmon_pfc_*`` and queue counters with
the same names and labels as an SNMP target of the same switch, and its recording replays to the
same metrics and findings."""

from __future__ import annotations

import re

import pytest

from fabricmon.agent.cli import main
from fabricmon.agent.config import load
from fabricmon.agent.exporter.server import Exporter
from fabricmon.agent.recording import read_polls
from fabricmon.agent.replay import replay_recording
from fabricmon.agent.runtime import Agent
from tests.conftest import public_fixture
from tests.gnmi_standin import GnmiStandIn, sonic_port_notifications
from tests.pki import self_signed_cert
from tests.test_golden_e2e import stable

pytestmark = pytest.mark.fixtures
T0 = 1_764_691_200_000_000_000
PASSWORD = "gnmi-s3cret-password"


def _config(tmp_path, port: int, ca, password_file) -> str:
    return f"""
global: {{poll_interval: 1s, poll_timeout: 3s, jitter: 0}}
targets:
  - name: leaf-sonic
    source: gnmi
    address: 127.0.0.1
    port: {port}
    profile: sonic
    username: admin
    password_file: {password_file}
    ca_file: {ca}
"""


def test_check_config_accepts_a_gnmi_target_and_names_what_is_wrong(tmp_path, capsys):
    cert, _key = self_signed_cert(tmp_path)
    pw = tmp_path / "pw"
    pw.write_text(PASSWORD)
    pw.chmod(0o600)
    cfg = tmp_path / "fabricmon.yml"
    cfg.write_text(_config(tmp_path, 9339, cert, pw))
    assert main(["check-config", str(cfg)]) == 0
    out = capsys.readouterr()
    assert PASSWORD not in out.out + out.err
    bad = tmp_path / "bad.yml"
    bad.write_text(_config(tmp_path, 9339, cert, pw).replace("    address: 127.0.0.1\n", "").replace("profile: sonic", "profile: junos"))
    assert main(["check-config", str(bad)]) == 1
    err = capsys.readouterr().err
    assert "needs an address" in err and "unknown profile 'junos'" in err


async def test_agent_polls_the_stand_in_and_replays_identically(tmp_path):
    cert, key = self_signed_cert(tmp_path)
    pw = tmp_path / "pw"
    pw.write_text(PASSWORD)
    pw.chmod(0o600)
    rounds = [0]

    def values(port: str, row: str, field: str) -> str | None:
        k = rounds[0]
        if (row, field) == ("", "SAI_PORT_STAT_PFC_3_RX_PKTS"):
            return str(1000 * k)
        if (row, field) == ("3", "SAI_QUEUE_STAT_PACKETS"):
            return str(5000 * k)
        return None

    def notes(k: int):
        rounds[0] = k
        return sonic_port_notifications(public_fixture, ["Ethernet0", "Ethernet4"], T0 + k * 10**9, values)

    async with GnmiStandIn(tls=(cert, key), password=PASSWORD, sampler=notes, snapshot=lambda: notes(rounds[0])) as srv:
        cfg = tmp_path / "fabricmon.yml"
        rec = tmp_path / "polls.jsonl.gz"
        cfg.write_text(_config(tmp_path, srv.port, cert, pw))
        loaded = load(cfg)
        agent = Agent(loaded, listen="", record_path=str(rec), duration=4.5)
        await agent.run()
    live = stable(Exporter(agent.pipeline).render_now().text.decode())
    header, polls, _ = read_polls(rec)
    assert header["targets"] == [{"name": "leaf-sonic", "source": "gnmi", "profile_dirs": []}]
    assert len(polls) >= 3 and all(p.ok for p in polls), [p.error for p in polls if not p.ok]
    assert PASSWORD not in rec.read_bytes().decode("latin-1")  # no secrets in recordings
    assert polls[0].payload["notifications"][-1] == {"sync_response": True}

    replayed = stable(Exporter(replay_recording(rec, loaded).pipeline).render_now().text.decode())
    assert replayed == live
    assert 'fabricmon_target_up{target="leaf-sonic",source="gnmi"} 1' in live
    assert re.search(r'fabricmon_pfc_receive_pause_frames_total\{device="leaf-sonic",port="Ethernet0",priority="3"\} [1-9]', live)
    assert 'fabricmon_queue_transmit_packets_total{device="leaf-sonic",port="Ethernet0",queue="3"}' in live
    assert 'fabricmon_pfc_watchdog_stormed{device="leaf-sonic",port="Ethernet4",priority="3"} 0' in live
