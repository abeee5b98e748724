"""packaging/systemd units: `systemd-analyze verify` clean and `security --offline=yes` exposure <= 2.0."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from fabricmon.agent.config import load_text

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
    assert capsys.readouterr().err == ""  # no deprecated spelling in what we ship
    assert main(["check-config", example]) == 1  # the full check wants the host's files
    assert ("targets[1].password_file: cannot read /run/credentials/fabricmon.service/ufm-password: No such file or directory "
            "(it exists only while the unit runs, from LoadCredential=: check with --credentials-dir") in capsys.readouterr().err


CREDENTIAL = re.compile(r"/run/credentials/fabricmon\.service/([\w.-]+)")


def test_the_units_credentials_are_the_ones_the_example_reads():
    """Every /run/credentials path of the example is a LoadCredential= line of the unit (commented
    out until used), loaded from /etc/fabricmon/secrets/<name>."""
    names = set(CREDENTIAL.findall((ROOT / "packaging" / "fabricmon.example.yml").read_text()))
    unit = (ROOT / "packaging" / "systemd" / "fabricmon.service").read_text()
    loaded = dict(re.findall(r"^#?LoadCredential=([\w.-]+):(\S+)$", unit, re.M))
    assert names and names == set(loaded)
    assert all(loaded[n] == f"/etc/fabricmon/secrets/{n}" for n in names)


def _install_steps() -> list[str]:
    """The README's "Install as a service" commands, continuation lines joined."""
    text = (ROOT / "README.md").read_text()
    section = text[text.index("## Install as a service"):text.index("## Configuration")]
    block = re.search(r"```sh\n(.*?)```", section, re.S).group(1)
    return block.replace("\\\n", "").splitlines()


def test_readme_service_install_steps_check_a_config_that_uses_load_credential(tmp_path):
    """The README's own sequence, run under a temporary root (every /etc path moved there; pip,
    udev, the editor and systemctl left out): the example with its secrets in the secrets folder
    passes the check-config step, and the drop-in it writes loads every credential the config reads."""
    from tests.pki import self_signed_cert

    steps = _install_steps()
    check = [s for s in steps if " check-config " in s]
    assert check == ["/opt/fabricmon/bin/fabricmon check-config --credentials-dir /etc/fabricmon/secrets /etc/fabricmon/fabricmon.yml"]
    etc = tmp_path / "etc"
    run = [s for s in steps if s.startswith(("install -d", "{ echo", "/opt/fabricmon/bin/fabricmon"))
           or (s.startswith("install -m644 packaging/") and "/etc/fabricmon/" in s)]
    assert len(run) == 5, run  # config, secrets folder, drop-in folder, drop-in, check
    example = (ROOT / "packaging" / "fabricmon.example.yml").read_text()
    names = set(CREDENTIAL.findall(example))
    script = ["set -e", f"cd {ROOT}"]
    for step in run:
        step = step.split("  #", 1)[0].replace("/etc/", f"{etc}/").replace("/opt/fabricmon/bin/fabricmon", f"{sys.executable} -m fabricmon.agent")
        if step.startswith("install -d -m700"):  # then the secrets, as the operator types them
            step += "".join(f"\n(umask 077; printf 'secret-{n}' > {etc}/fabricmon/secrets/{n})" for n in sorted(names))
        if step.startswith("install -d") and step.endswith("&& install -m644 packaging/fabricmon.example.yml "
                                                             f"{etc}/fabricmon/fabricmon.yml"):  # the editing step: this host's CA file
            step += f"\nsed -i 's|/etc/fabricmon/|{etc}/fabricmon/|' {etc}/fabricmon/fabricmon.yml"
        script.append(step)
    cert, _ = self_signed_cert(tmp_path)
    (etc / "fabricmon").mkdir(parents=True)
    for ca in re.findall(r"ca_file: /etc/fabricmon/(\S+)", example):  # this host's CA files (UFM, SONiC gNMI)
        (etc / "fabricmon" / ca).write_bytes(Path(cert).read_bytes())
    res = subprocess.run(["bash", "-c", "\n".join(script)], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PATH": f"{ROOT / 'tests' / 'fakebin'}:{os.environ['PATH']}"})
    assert res.returncode == 0, res.stdout + res.stderr
    enabled = len(load_text(example, "example").config.enabled_targets())
    assert f"{etc}/fabricmon/fabricmon.yml: OK ({enabled} enabled target(s)" in res.stdout
    assert "error" not in res.stderr.lower() and "cannot read" not in res.stderr, res.stderr
    dropin = (etc / "systemd" / "system" / "fabricmon.service.d" / "credentials.conf").read_text().splitlines()
    assert dropin[0] == "[Service]"
    assert {ln.split("=", 1)[1].split(":")[0] for ln in dropin[1:]} == names


def test_node_unit_has_its_shipped_config(capsys, monkeypatch):
    """fabricmon-node.service runs /etc/fabricmon/node.yml: packaging/node.example.yml is that file,
    the README installs it there, and it passes the unit's own ExecStartPre= check."""
    from fabricmon.agent.cli import main

    unit = (ROOT / "packaging" / "systemd" / "fabricmon-node.service").read_text()
    assert "ExecStart=/opt/fabricmon/bin/fabricmon run --config.file /etc/fabricmon/node.yml\n" in unit
    assert "ExecStartPre=/opt/fabricmon/bin/fabricmon check-config /etc/fabricmon/node.yml\n" in unit
    readme = (ROOT / "README.md").read_text()
    assert "install -m644 packaging/node.example.yml /etc/fabricmon/node.yml" in readme
    example = ROOT / "packaging" / "node.example.yml"
    monkeypatch.setenv("PATH", f"{ROOT / 'tests' / 'fakebin'}:{os.environ['PATH']}")
    monkeypatch.delenv("STATE_DIRECTORY", raising=False)
    assert main(["check-config", str(example)]) == 0
    out = capsys.readouterr()
    assert "OK (1 enabled target(s)" in out.out and "deprecated" not in out.err
    from fabricmon.agent.config import load

    loaded = load(example)
    assert loaded.config.web.listen_address == ":10119" and [t.source for t in loaded.config.targets] == ["host"]


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
