"""Faults at the targets, all at once, in ONE running agent: each faulty target shows up as
``fabricmon_target_up 0`` with a per-reason error counter and one log line per failed poll,
while the healthy targets of each kind (UFM Telemetry over HTTP, SNMP on snmpsim) keep
polling at their interval with their counters exported.

Every server is real and on 127.0.0.1: aiohttp stand-ins (tests/http_standins.py) for the
HTTP faults, raw sockets for a reset and a hang, a closed port for a refusal, a bound-but-
silent UDP port for an SNMP timeout, snmpsim for the noSuchObject/endOfMibView agents, and
a fake perfquery that is SIGKILLed mid-output (tests/fakebin_faults/).

The agent runs once (module fixture, ~7 s); each fault is one parametrized check on it.
"""

from __future__ import annotations

import asyncio
import logging
import re
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import pytest

from fabricmon.agent.config import load
from fabricmon.agent.runtime import Agent
from tests.conftest import ROOT, free_port
from tests.http_standins import BasicAuthRule, FaultServer, Reply, StandIn
from tests.snmpsim_util import SNMPSIM, SnmpSim

pytestmark = pytest.mark.snmpsim

CSV_PATH = "/csv/cset/converted_enterprise"
FAKEBIN = ROOT / "tests" / "fakebin_faults"
RUN_S = 7.0
INTERVAL = 0.4  # every target but SNMP; failing ones back off to BACKOFF_MAX
SNMP_INTERVAL = 1.0  # every SNMP target: an snmpsim poll takes 0.4-1 s (one Python process answering every walk)
BACKOFF_MAX = 1.0

# Two switch ports in the UFM Telemetry "converted enterprise" CSV form.
HEALTHY_CSV = (
    "timestamp,node_guid,port_guid,port_num,node_description,Infiniband_MBOut_u_Gb,Infiniband_MBIn_u_Gb,"
    "Infiniband_PckOut_u_Packets,Infiniband_PckIn_u_Packets,Infiniband_SymbolErrors_u_Errors\n"
    "1709652347161873,0x248a070300ef19a0,0x248a070300ef19a0,1,tele-leaf01,4086720,4087008,14190,14191,0\n"
    "1709652347161873,0x248a070300ef19a0,0x248a070300ef19a0,2,tele-leaf01,1000,2000,30,40,7\n"
)
GARBAGE = bytes(range(256)) * 4 + b"\x00\xff garbage \r\n\r\n"
LOGIN_PAGE = "<!DOCTYPE html><html><head><title>Sign in</title></head><body><form>user</form></body></html>"
# snmpsim data: an agent whose only object is outside MIB-II (every GET is noSuchObject, every
# walk ends at once with endOfMibView), and one with sysObjectID + sysUpTime but no tables.
SNMP_NOTHING = "1.3.6.1.4.1.99999.1.0|2|1\n"
SNMP_SYS_ONLY = "1.3.6.1.2.1.1.2.0|6|1.3.6.1.4.1.30065.1.3011.7060\n1.3.6.1.2.1.1.3.0|67|5\n"

SNAPSHOTS_AT = (2.5, 4.75)  # seconds into the run when /metrics is scraped (and at the end)
HEALTHY = {"tele-ok": INTERVAL, "snmp-ok": SNMP_INTERVAL}  # target -> its interval


@dataclass(frozen=True)
class Fault:
    target: str
    reason: str  # the poll_errors_total reason label expected
    gap: str = ""  # non-empty: a known gap in the collector (xfail, strict), the report explains


FAULTS = [
    Fault("http-refused", "connection"),
    Fault("http-reset", "connection"),
    Fault("http-hang", "timeout"),
    Fault("http-slow", "timeout"),
    Fault("http-garbage", "parse"),
    Fault("http-truncated", "size"),
    Fault("http-oversized", "size"),
    Fault("http-html-telemetry", "parse"),
    Fault("http-html-ufm", "protocol"),
    Fault("http-401", "auth"),
    Fault("http-500", "http"),
    Fault("snmp-silent", "timeout"),
    Fault("snmp-nosuchobject", "protocol"),
    Fault("snmp-endofmibview", "protocol"),
    Fault("pq-killed", "command"),
]


# ---------------------------------------------------------------------- exposition helpers
_SERIES = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def series(text: str) -> list[tuple[str, dict[str, str], float]]:
    out = []
    for line in text.splitlines():
        m = _SERIES.match(line)
        if m:
            out.append((m.group(1), dict(_LABEL.findall(m.group(2) or "")), float(m.group(3))))
    return out


def value(text: str, name: str, **want: str) -> float | None:
    for n, labels, v in series(text):
        if n == name and all(labels.get(k) == w for k, w in want.items()):
            return v
    return None


# ---------------------------------------------------------------------- the run
@dataclass
class Run:
    snapshots: list[str]  # /metrics scraped from the agent while it ran, in order
    final: str
    records: list[logging.LogRecord]
    pipeline: object
    started: float
    ended: float
    notes: dict[str, object] = field(default_factory=dict)


class _Keep(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def _closed_port() -> int:
    return free_port()  # bound then released: nothing listens there, so connect() is refused


def _config(tmp: Path, ports: dict[str, int], snmp_ok: int, snmp_bad: int) -> str:
    tele = "source: ufm-telemetry, address: 127.0.0.1, scheme: http"
    snmp = f"source: snmp, address: 127.0.0.1, interval: {SNMP_INTERVAL}s, timeout: 3s"
    lines = [
        f"- {{name: tele-ok, {tele}, port: {ports['ok']}}}",
        f"- {{name: http-refused, {tele}, port: {ports['refused']}}}",
        f"- {{name: http-reset, {tele}, port: {ports['reset']}}}",
        f"- {{name: http-hang, {tele}, port: {ports['hang']}, timeout: 0.5s}}",
        f"- {{name: http-slow, {tele}, port: {ports['slow']}, timeout: 0.5s}}",
        f"- {{name: http-garbage, {tele}, port: {ports['garbage']}}}",
        f"- {{name: http-truncated, {tele}, port: {ports['truncated']}}}",
        f"- {{name: http-oversized, {tele}, port: {ports['oversized']}, max_body_bytes: 4096}}",
        f"- {{name: http-html-telemetry, {tele}, port: {ports['html']}}}",
        f"- {{name: http-html-ufm, source: ufm, address: 127.0.0.1, scheme: http, port: {ports['html']}, username: u, password: p}}",
        f"- {{name: http-401, {tele}, port: {ports['auth']}, auth: basic, username: fabricmon, password: wrong}}",
        f"- {{name: http-500, {tele}, port: {ports['e500']}}}",
        f"- {{name: snmp-ok, {snmp}, port: {snmp_ok}, community: ok}}",
        f"- {{name: snmp-silent, {snmp}, port: {ports['udp_silent']}, community: ok, snmp_timeout: 300ms, retries: 0}}",
        f"- {{name: snmp-nosuchobject, {snmp}, port: {snmp_bad}, community: nothing}}",
        f"- {{name: snmp-endofmibview, {snmp}, port: {snmp_bad}, community: sysonly}}",
        f"- {{name: pq-killed, source: perfquery, address: local, ibnetdiscover_path: {FAKEBIN / 'ibnetdiscover'},"
        f" perfquery_path: {FAKEBIN / 'perfquery_killed'}, include_cas: true, command_timeout: 2s, timeout: 3s}}",
    ]
    cfg = tmp / "fabricmon.yml"
    cfg.write_text(
        f"global: {{poll_interval: {INTERVAL}s, poll_timeout: 5s, jitter: 0.1, backoff_max: {BACKOFF_MAX}s}}\n"
        "targets:\n" + "".join(f"  {ln}\n" for ln in lines)
    )
    return str(cfg)


async def _scrape(url: str) -> str:
    async with aiohttp.ClientSession() as s, s.get(url) as r:
        return await r.text()


async def _run_agent(tmp: Path, snmp_ok: int, snmp_bad: int) -> Run:
    html = {p: Reply(LOGIN_PAGE, content_type="text/html") for p in
            (CSV_PATH, "/ufmRest/resources/ports", "/ufmRest/resources/links", "/ufmRest/resources/systems")}
    silent = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)  # bound, never read: SNMP requests vanish
    silent.bind(("127.0.0.1", 0))
    async with (
        StandIn({CSV_PATH: Reply(HEALTHY_CSV, content_type="text/csv")}) as ok,
        FaultServer("reset") as reset,
        FaultServer("hang") as hang,
        StandIn({CSV_PATH: Reply(HEALTHY_CSV, content_type="text/csv", delay=3.0)}) as slow,
        StandIn({CSV_PATH: Reply(GARBAGE, content_type="text/csv")}) as garbage,
        StandIn({CSV_PATH: Reply(HEALTHY_CSV, content_type="text/csv", truncate_to=60)}) as truncated,
        StandIn({CSV_PATH: Reply(HEALTHY_CSV * 40, content_type="text/csv")}) as oversized,
        StandIn(html) as html_srv,
        StandIn({CSV_PATH: Reply(HEALTHY_CSV, content_type="text/csv")},
                auth={"/csv": BasicAuthRule("fabricmon", "right")}) as auth,
        StandIn({CSV_PATH: Reply("internal error", status=500)}) as e500,
    ):
        ports = {"ok": ok.port, "refused": _closed_port(), "reset": reset.port, "hang": hang.port, "slow": slow.port,
                 "garbage": garbage.port, "truncated": truncated.port, "oversized": oversized.port, "html": html_srv.port,
                 "auth": auth.port, "e500": e500.port, "udp_silent": silent.getsockname()[1]}
        listen_port = free_port()
        agent = Agent(load(_config(tmp, ports, snmp_ok, snmp_bad)), listen=f"127.0.0.1:{listen_port}", duration=RUN_S)
        keep = _Keep()
        root = logging.getLogger()
        old_level = root.level
        root.addHandler(keep)
        root.setLevel(logging.INFO)
        snapshots: list[str] = []
        started = time.monotonic()
        try:
            task = asyncio.create_task(agent.run())
            for at in SNAPSHOTS_AT:
                await asyncio.sleep(started + at - time.monotonic())
                snapshots.append(await _scrape(f"http://127.0.0.1:{listen_port}/metrics"))
            await task
        finally:
            root.removeHandler(keep)
            root.setLevel(old_level)
            silent.close()
        ended = time.monotonic()
        notes = {"reset_accepted": reset.accepted, "hang_accepted": hang.accepted}
    return Run(snapshots, agent.exporter.render_now().text.decode(), keep.records, agent.pipeline, started, ended, notes)


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Run:
    if SNMPSIM is None:
        pytest.skip("snmpsim-command-responder not installed")
    # The healthy switch gets an snmpsim of its own: sharing one with the faulty agents would
    # measure the simulator's single thread, not the agent's isolation of targets.
    with SnmpSim({"ok": ROOT / "tests" / "data" / "snmp" / "ieee_pfc.snmprec"}) as ok, \
            SnmpSim({"nothing": SNMP_NOTHING, "sysonly": SNMP_SYS_ONLY}) as bad:
        return asyncio.run(_run_agent(tmp_path_factory.mktemp("faults"), ok.port, bad.port))


def _lines_naming(run: Run, target: str) -> list[logging.LogRecord]:
    pat = re.compile(rf"(?<![\w-]){re.escape(target)}(?![\w-])")
    return [r for r in run.records if pat.search(r.getMessage())]


# ---------------------------------------------------------------------- the checks
@pytest.mark.parametrize("fault", [pytest.param(f, id=f.target, marks=[pytest.mark.xfail(strict=True, reason=f.gap)] if f.gap else [])
                                   for f in FAULTS])
def test_fault_is_counted_and_logged_once_per_poll(run: Run, fault: Fault):
    t = fault.target
    assert value(run.final, "fabricmon_target_up", target=t) == 0, f"{t} should be down"
    errors = {lb["reason"]: v for n, lb, v in series(run.final) if n == "fabricmon_target_poll_errors_total" and lb["target"] == t}
    assert set(errors) == {fault.reason}, f"{t}: errors by reason {errors}"
    polls = value(run.final, "fabricmon_target_polls_total", target=t)
    assert polls is not None and polls >= 2 and errors[fault.reason] == polls  # retried (with backoff), failing each time
    lines = _lines_naming(run, t)
    assert len(lines) == polls, f"{t}: {len(lines)} log lines for {polls:g} failed polls: {[r.getMessage() for r in lines][:4]}"
    assert all(r.levelno == logging.WARNING and not r.exc_info for r in lines)
    status = run.pipeline.targets[t]  # type: ignore[attr-defined]
    assert status.last_error and t not in status.last_error  # the message says what was wrong; the log line adds the name
    assert f"target {t} (" in lines[-1].getMessage() and status.last_error in lines[-1].getMessage()


@pytest.mark.parametrize("target", list(HEALTHY))
def test_healthy_targets_keep_polling(run: Run, target: str):
    interval = HEALTHY[target]
    polls = [value(text, "fabricmon_target_polls_total", target=target) for text in [*run.snapshots, run.final]]
    assert all(p is not None for p in polls)
    assert polls == sorted(polls) and polls[0] < polls[-1], f"{target} polls over time: {polls}"
    if interval * 2.5 < SNAPSHOTS_AT[0]:  # several intervals between scrapes: a poll landed in each
        assert len(set(polls)) == len(polls), f"{target} polls over time: {polls}"
    # at its interval, loosely (CI machines are loaded): at least a third of the polls the run had room for
    assert polls[-1] >= max(2.0, RUN_S / interval / 3), polls
    assert value(run.final, "fabricmon_target_up", target=target) == 1
    assert not any(n == "fabricmon_target_poll_errors_total" and lb["target"] == target for n, lb, _ in series(run.final))
    assert not [r for r in _lines_naming(run, target) if r.levelno >= logging.WARNING]


def test_healthy_counters_are_exported(run: Run):
    # UFM Telemetry: port 2's 1000 "MB" out are 4-byte words, as the collector's scale says (x4)
    assert value(run.final, "fabricmon_port_transmit_bytes_total", device="tele-leaf01", port="2") == 4000
    assert value(run.final, "fabricmon_port_symbol_errors_total", device="tele-leaf01", port="2") == 7
    snmp_devices = {lb.get("device") for n, lb, _ in series(run.final) if n.startswith("fabricmon_port_")}
    assert "snmp-ok" in snmp_devices


def test_no_crash_and_faults_reached_their_servers(run: Run):
    assert not [r for r in run.records if r.exc_info], "a fault raised out of a collector or parser"
    assert run.notes["reset_accepted"] >= 2 and run.notes["hang_accepted"] >= 2
    assert run.ended - run.started < RUN_S + 5  # stopping was not held up by a hung poll
