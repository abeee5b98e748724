"""packaging/systemd units: `systemd-analyze verify` clean and `security --offline=yes` exposure <= 2.0."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
UNITS = sorted((ROOT / "packaging" / "systemd").glob("*.service"))
ANALYZE = shutil.which("systemd-analyze")
needs_analyze = pytest.mark.skipif(ANALYZE is None, reason="systemd-analyze is not installed (Debian package: systemd)")
MAX_EXPOSURE = 2.0


def test_units_exist():
    assert {u.name for u in UNITS} == {"fabricmon.service", "fabricmon-node.service"}


@pytest.mark.parametrize("unit", UNITS, ids=lambda p: p.name)
def test_unit_essentials(unit):
    text = unit.read_text()
    directives = dict(re.findall(r"^(\w+)=(.*)$", text, re.M))
    assert directives["Type"] == "notify" and directives["NotifyAccess"] == "main"
    assert directives["WatchdogSec"] and directives["ExecReload"] == "/bin/kill -HUP $MAINPID"
    assert directives["ExecStart"].startswith("/opt/fabricmon/bin/fabricmon run --config.file /etc/fabricmon/")
    assert directives["DeviceAllow"] == "char-infiniband_mad rw" and directives["DevicePolicy"] == "closed"
    assert directives["SupplementaryGroups"] == "rdma" and directives["CapabilityBoundingSet"] == ""
    assert not re.search(r"^PrivateDevices=(yes|true|1)", text, re.M)  # it would hide /dev/infiniband


def test_udev_rule():
    rule = (ROOT / "packaging" / "udev" / "90-fabricmon-umad.rules").read_text()
    lines = [ln for ln in rule.splitlines() if ln and not ln.startswith("#")]
    assert lines == ['SUBSYSTEM=="infiniband_mad", KERNEL=="umad*", GROUP="rdma", MODE="0660"']


@needs_analyze
@pytest.mark.parametrize("unit", UNITS, ids=lambda p: p.name)
def test_security_exposure(unit):
    res = subprocess.run([ANALYZE, "security", "--offline=yes", str(unit)], capture_output=True, text=True, timeout=60)
    m = re.search(r"Overall exposure level for \S+: (\d+(?:\.\d+)?)", res.stdout + res.stderr)
    assert m, res.stdout + res.stderr
    assert float(m.group(1)) <= MAX_EXPOSURE, res.stdout


@needs_analyze
@pytest.mark.parametrize("unit", UNITS, ids=lambda p: p.name)
def test_verify(unit, tmp_path):
    # verify checks that ExecStart's binary exists; /opt/fabricmon is not installed here, so a temp copy
    # points ExecStart/ExecStartPre at /bin/true. Everything else is verified as shipped.
    copy = tmp_path / unit.name
    copy.write_text(unit.read_text().replace("/opt/fabricmon/bin/fabricmon", shutil.which("true") or "/bin/true"))
    res = subprocess.run([ANALYZE, "verify", str(copy)], capture_output=True, text=True, timeout=60)
    ours = [ln for ln in (res.stdout + res.stderr).splitlines() if unit.name in ln]
    assert res.returncode == 0 and not ours, res.stdout + res.stderr


def test_example_config_passes_check_config_syntax_only(capsys):
    """As a packaging build checks it: the example's secrets and web config live on the target host."""
    from fabricmon.agent.cli import main

    example = str(ROOT / "packaging" / "fabricmon.example.yml")
    assert main(["check-config", "--syntax-only", example]) == 0, capsys.readouterr().err
    capsys.readouterr()
    assert main(["check-config", example]) == 1  # the full check wants the host's files
    assert "targets[1].password_file: cannot read /run/credentials/fabricmon.service/ufm-password" in capsys.readouterr().err


def test_example_web_config_is_valid():
    """The example web config validates (its certificate paths are placeholders, so only the schema is checked)."""
    from fabricmon.agent.exporter import webconfig

    path = ROOT / "packaging" / "fabricmon-web.example.yml"
    cfg = webconfig.parse(path.read_text(), str(path))
    assert cfg.tls_server_config is not None and cfg.tls_server_config.min_version == "TLS12"


@pytest.mark.parametrize("unit", UNITS, ids=lambda p: p.name)
def test_fd_limit_leaves_the_collectors_a_reserve(unit):
    """LimitNOFILE is raised, so the HTTP connection cap is the configured one and the collectors keep their reserve."""
    from fabricmon.agent.exporter import connections

    nofile = int(dict(re.findall(r"^(\w+)=(.*)$", unit.read_text(), re.M))["LimitNOFILE"])
    cap = connections.connection_cap(nofile=nofile)
    assert cap == connections.DEFAULT_MAX_CONNECTIONS and nofile - cap >= 2 * connections.FD_RESERVE
