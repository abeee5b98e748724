"""`fabricmon audit` as a user runs it: on recordings, on one live poll, with bad input.

The recordings are the scenario corpus (tests/scenarios), which carries counters but no
configuration state: every configuration check is unknown there, and the behaviour half of
``pfc_on_lossy_priority`` fails once the ``fabric:`` section says the storming priority is not
lossless.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fabricmon.agent.detector.checklist import CHECKS, STATUSES
from tests import test_cli_fuzz as fuzz
from tests.conftest import ROOT, free_udp_port

STORM = ROOT / "tests" / "scenarios" / "nic_pause_storm_arista.jsonl.gz"


def audit(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "fabricmon.agent", "audit", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)


def config(tmp_path: Path, text: str) -> str:
    p = tmp_path / "fabricmon.yml"
    p.write_text(text)
    return str(p)


def test_recording_without_configuration_state_is_all_unknown() -> None:
    r = audit(str(STORM))
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert out.startswith(f"fabricmon audit of {STORM}: ")
    assert "device leaf01" in out and "  port Ethernet3 (cable to gpu03 eth0)" in out
    assert "link gpu03 eth0 <-> leaf01 Ethernet3" in out  # ends in name order
    summary = out[out.index("summary"):].splitlines()
    rows = {ln.split()[0]: [int(x) for x in ln.split()[1:]] for ln in summary[1:1 + len(CHECKS)]}
    assert list(rows) == list(CHECKS)
    assert all(p == 0 and f == 0 and u > 0 for p, f, u in rows.values()), rows  # nothing verified, nothing passed
    assert "no check failed (nothing could be verified)" in out
    assert "Traceback" not in r.stderr


def test_pfc_on_a_priority_the_fabric_calls_lossy_fails_with_exit_1(tmp_path: Path) -> None:
    cfg = config(tmp_path, "fabric:\n  lossless_priorities: [4]\n")
    r = audit("--config.file", cfg, str(STORM))
    assert r.returncode == 1, r.stdout + r.stderr
    fix = r.stdout[r.stdout.index("to fix ("):].splitlines()
    assert fix[0] == "to fix (1):"
    assert fix[1].startswith("  pfc_on_lossy_priority priority 3: gpu03 eth0: PFC frames are sent on priority 3, outside the "
                             "lossless set [4]")
    assert "FAIL" in r.stdout  # the row in the port's table


def test_json_has_every_result_the_summary_and_what_to_fix(tmp_path: Path) -> None:
    cfg = config(tmp_path, "fabric:\n  lossless_priorities: [4]\n")
    r = audit("--json", "--config.file", cfg, str(STORM))
    assert r.returncode == 1
    doc = json.loads(r.stdout)
    assert doc["lossless_priorities"] == [4] and doc["source"] == str(STORM) and doc["polls"] > 0
    assert set(doc["summary"]) == set(CHECKS) and all(set(v) == set(STATUSES) for v in doc["summary"].values())
    assert sum(n["fail"] for n in doc["summary"].values()) == 1
    assert [(x["check"], x["device"], x["port"], x["priority"]) for x in doc["to_fix"]] == [
        ("pfc_on_lossy_priority", "gpu03", "eth0", 3)]
    assert doc["to_fix"][0]["evidence"]["check"] == "pfc_on_lossy_priority"
    assert len(doc["results"]) == sum(sum(v.values()) for v in doc["summary"].values())
    assert {x["status"] for x in doc["results"]} <= set(STATUSES)


def test_every_target_down_exits_2_naming_it(tmp_path: Path) -> None:
    """Nothing could be verified when no target answered: that is not a clean bill (exit 0) but
    an audit that could not be done (exit 2), with the failed target in the notes."""
    port = free_udp_port()  # nothing answers there
    cfg = config(tmp_path, f"""global:
  poll_timeout: 2s
targets:
  - name: leaf09
    source: snmp
    address: 127.0.0.1
    port: {port}
    version: "2c"
    community: public
    snmp_timeout: 300ms
    retries: 0
""")
    r = audit("--config.file", cfg)
    assert r.returncode == 2, r.stderr
    assert "1 poll(s), 0 port(s), 0 link(s)" in r.stdout
    assert "note: target leaf09 (snmp) failed:" in r.stdout
    assert "no target delivered data: every target failed, so nothing could be verified" in r.stdout
    assert r.stderr.strip().splitlines()[-1] == "error: no target delivered data (every target failed): nothing could be verified"
    doc = json.loads(audit("--json", "--config.file", cfg).stdout)
    assert doc["read"] is False
    assert "Traceback" not in r.stderr


@pytest.mark.parametrize(("args", "message"), [
    ((), "fabricmon audit needs a recording to read or --config.file FILE"),
    (("/nonexistent/rec.jsonl.gz",), "cannot open recording"),
    (("pyproject.toml",), "not a fabricmon recording"),
])
def test_bad_input_exits_2_with_a_clear_message(args: tuple[str, ...], message: str) -> None:
    r = audit(*args)
    assert r.returncode == 2
    assert message in r.stderr
    assert "Traceback" not in r.stderr and r.stdout == ""


def test_bad_config_exits_2_naming_the_problem(tmp_path: Path) -> None:
    cfg = config(tmp_path, "fabric:\n  lossless_priorities: [9]\n")
    r = audit("--config.file", cfg, str(STORM))
    assert r.returncode == 2
    assert "lossless_priorities" in r.stderr and "Traceback" not in r.stderr


def test_a_truncated_recording_is_audited_with_a_note(tmp_path: Path) -> None:
    import gzip

    raw = gzip.decompress(STORM.read_bytes())
    cut = tmp_path / "cut.jsonl"
    cut.write_bytes(raw[: len(raw) // 2])  # a torn last line
    r = audit(str(cut))
    assert r.returncode == 0, r.stderr
    assert "note: 1 data error(s) skipped; the first:" in r.stdout


def test_one_live_poll_of_an_snmp_switch_with_dcbx_tables(tmp_path: Path) -> None:
    """snmpsim serves the IEEE DCBX recording (written from LLDP-EXT-DOT1-DCBX-MIB); swp2 enables
    PFC on priorities 3 and 4, where the fabric's lossless set is [3]."""
    from tests.snmpsim_util import SnmpSim

    with SnmpSim({"dcbx": ROOT / "tests" / "data" / "snmp" / "ieee_dcbx.snmprec"}) as sim:
        cfg = config(tmp_path, f"""targets:
  - name: leaf01
    source: snmp
    address: 127.0.0.1
    port: {sim.port}
    version: "2c"
    community: dcbx
""")
        r = audit("--json", "--config.file", cfg)
    assert r.returncode == 1, r.stdout + r.stderr
    doc = json.loads(r.stdout)
    assert doc["polls"] == 1 and doc["notes"] == []
    assert ("pfc_on_lossy_priority", "leaf01", "swp2", 4) in [(x["check"], x["device"], x["port"], x["priority"])
                                                               for x in doc["to_fix"]]
    assert doc["summary"]["pfc_not_enabled"]["pass"] >= 1
    # no NVUE or vendor MIB here: the watchdog and headroom cannot be seen, and are unknown, not pass
    assert doc["summary"]["pfc_watchdog_off"]["pass"] == 0 and doc["summary"]["pfc_watchdog_off"]["unknown"] >= 1


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(lines=st.lists(fuzz._poll_line, max_size=6), raw=st.binary(max_size=200), gz=st.booleans(), as_json=st.booleans())
def test_audit_never_shows_a_traceback(tmp_path_factory, capsys, lines, raw, gz, as_json) -> None:
    """Arbitrary recordings (the replay fuzzer's lines): an exit code 0, 1 or 2, never a traceback."""
    import gzip

    from fabricmon.agent.cli import main

    body = b"\n".join([json.dumps(fuzz._header).encode(), *(json.dumps(x).encode() for x in lines), raw])
    path = tmp_path_factory.mktemp("audit-fuzz") / "rec.jsonl"
    path.write_bytes(gzip.compress(body) if gz else body)
    assert main(["audit", *(["--json"] if as_json else []), str(path)]) in (0, 1, 2)
    assert "Traceback" not in capsys.readouterr().err
