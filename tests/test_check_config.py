"""check-config proves what it can without the network (issue 18 item 1): the web config
loads, every secret resolves (never printed), network sources have an address, the commands
sources run are on PATH (a warning); --syntax-only skips what needs the target machine."""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

import bcrypt

from fabricmon import collectors
from fabricmon.agent.cli import main

ROOT = Path(__file__).resolve().parent.parent
SECRET = "s3cret-community-value"


def check(capsys, *args: str) -> tuple[int, str, str]:
    code = main(["check-config", *args])
    out = capsys.readouterr()
    return code, out.out, out.err


def readme_example() -> str:
    text = (ROOT / "README.md").read_text()
    m = re.search(r"```yaml\n(global:\n.*?)```", text, re.S)
    assert m, "the README has a config example starting with global:"
    return m.group(1)


def test_readme_example_fails_until_its_web_config_exists(tmp_path, capsys):
    web = tmp_path / "web.yml"
    example = readme_example()
    assert "config_file: /etc/fabricmon/web.yml" in example
    cfg = tmp_path / "fabricmon.yml"
    cfg.write_text(example.replace("/etc/fabricmon/web.yml", str(web)))
    code, _, err = check(capsys, str(cfg))
    assert code == 1
    assert re.search(rf"^{re.escape(str(cfg))}:\d+:3: web.config_file: the web config does not load: "
                     rf"{re.escape(str(web))}: cannot read web config: No such file or directory$", err, re.M), err
    web.write_text("basic_auth_users:\n  prometheus: " + bcrypt.hashpw(b"pw", bcrypt.gensalt(4)).decode() + "\n")
    _, _, err = check(capsys, str(cfg))
    assert "web.config_file" not in err, err


def test_web_config_problems_are_reported(tmp_path, capsys):
    web = tmp_path / "web.yml"
    web.write_text(f"tls_server_config:\n  cert_file: {tmp_path / 'nope.crt'}\n  key_file: {tmp_path / 'nope.key'}\n")
    cfg = tmp_path / "f.yml"
    cfg.write_text(f"web:\n  config_file: {web}\n")
    code, _, err = check(capsys, str(cfg))
    assert code == 1 and f"{cfg}:2:3: web.config_file: the web config does not load" in err and "nope.crt" in err, err


def snmp_target(**secret: str) -> str:
    opts = "".join(f"    {k}: {v}\n" for k, v in secret.items())
    return f"targets:\n  - name: leaf01\n    source: snmp\n    address: 127.0.0.1\n{opts}"


def test_missing_secret_file_and_unset_variable_fail(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("FABRICMON_TEST_UNSET", raising=False)
    cfg = tmp_path / "f.yml"
    cfg.write_text(snmp_target(community_file=str(tmp_path / "missing"))
                   + "  - {name: spine01, source: snmp, address: 10.0.0.1, version: '3', user: u, auth_protocol: sha, priv_protocol: none,"
                     " auth_key_env: FABRICMON_TEST_UNSET}\n")
    code, _, err = check(capsys, str(cfg))
    assert code == 1
    assert f"{cfg}:5:5: targets[0].community_file: cannot read {tmp_path / 'missing'}: No such file or directory" in err
    assert re.search(rf"^{re.escape(str(cfg))}:6:\d+: targets\[1\].auth_key_env: environment variable FABRICMON_TEST_UNSET is not set$",
                     err, re.M), err


def test_resolving_secrets_pass_and_are_never_printed(tmp_path, capsys, monkeypatch):
    secret = tmp_path / "community"
    secret.write_text(SECRET + "\n")
    secret.chmod(stat.S_IRUSR)
    monkeypatch.setenv("FABRICMON_TEST_KEY", SECRET)
    cfg = tmp_path / "f.yml"
    cfg.write_text(snmp_target(community_file=str(secret))
                   + "  - {name: spine01, source: snmp, address: 10.0.0.1, version: '3', user: u, auth_protocol: sha, priv_protocol: none,"
                     " auth_key_env: FABRICMON_TEST_KEY}\n")
    code, out, err = check(capsys, str(cfg))
    assert code == 0, err
    assert "OK (2 enabled target(s)" in out
    assert SECRET not in out + err


def test_empty_secret_file_fails_without_its_value(tmp_path, capsys):
    secret = tmp_path / "community"
    secret.write_text("\n")
    cfg = tmp_path / "f.yml"
    cfg.write_text(snmp_target(community_file=str(secret)))
    code, _, err = check(capsys, str(cfg))
    assert code == 1 and f"targets[0].community_file: {secret} is empty" in err


def test_missing_executables_are_warnings(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # nothing on PATH
    cfg = tmp_path / "f.yml"
    cfg.write_text("targets:\n  - name: ib\n    source: perfquery\n  - name: gpu01\n    source: host\n"
                   "  - name: gpu02\n    source: host\n    ethtool: false\n")
    code, out, err = check(capsys, str(cfg))
    assert code == 0 and "OK" in out
    assert f"{cfg}:2:5: targets[0].ibnetdiscover_path: warning: 'ibnetdiscover' is not on PATH here" in err
    assert f"{cfg}:2:5: targets[0].perfquery_path: warning: 'perfquery' is not on PATH here" in err
    assert f"{cfg}:4:5: targets[1].ethtool_path: warning: 'ethtool' is not on PATH here" in err
    assert "targets[2]" not in err  # ethtool: false runs no ethtool


def test_executables_on_path_give_no_warning(tmp_path, capsys, monkeypatch):
    fakebin = ROOT / "tests" / "fakebin"
    monkeypatch.setenv("PATH", f"{fakebin}:{os.environ['PATH']}")
    cfg = tmp_path / "f.yml"
    cfg.write_text("targets:\n  - name: ib\n    source: perfquery\n")
    code, _, err = check(capsys, str(cfg))
    assert code == 0 and "warning" not in err, err


def test_syntax_only_skips_what_needs_the_target_machine(tmp_path, capsys):
    cfg = tmp_path / "f.yml"
    cfg.write_text(f"web:\n  config_file: {tmp_path / 'web.yml'}\n" + snmp_target(community_file="/nonexistent"))
    assert check(capsys, str(cfg))[0] == 1
    code, out, err = check(capsys, "--syntax-only", str(cfg))
    assert code == 0 and "syntax OK" in out and err == ""
    # syntax errors still fail
    cfg.write_text("targets:\n  - {name: a, source: snmp}\n")
    code, _, err = check(capsys, "--syntax-only", str(cfg))
    assert code == 1 and "needs an address" in err


def test_shipped_example_passes_syntax_only(capsys):
    code, out, err = check(capsys, "--syntax-only", str(ROOT / "packaging" / "fabricmon.example.yml"))
    assert code == 0 and "syntax OK (6 enabled target(s)" in out, err


def test_unit_runs_check_config_before_start():
    unit = (ROOT / "packaging" / "systemd" / "fabricmon.service").read_text()
    assert "ExecStartPre=/opt/fabricmon/bin/fabricmon check-config /etc/fabricmon/fabricmon.yml\n" in unit


def test_missing_and_unreadable_files_are_named(tmp_path, capsys):
    code, _, err = check(capsys, str(tmp_path / "nope.yml"))
    assert code == 1 and err.startswith(f"{tmp_path / 'nope.yml'}: cannot read config: No such file or directory\n")
    code, _, err = check(capsys, str(tmp_path))
    assert code == 1 and f"{tmp_path}: cannot read config: it is a directory, not a regular file" in err


def test_every_problem_of_a_file_in_one_run(tmp_path, capsys):
    """Issue 31: a bad duration (line 2), a missing secret file (line 7) and an unknown source
    (line 9) are reported together: the secret check runs for every target whose own section is
    valid, whatever is wrong elsewhere in the file."""
    cfg = tmp_path / "f.yml"
    missing = tmp_path / "community"
    cfg.write_text(f"""global:
  poll_interval: 10 seconds
targets:
  - name: leaf01
    source: snmp
    address: 127.0.0.1
    community_file: {missing}
  - name: leaf02
    source: snmpp
    address: 127.0.0.2
""")
    code, out, err = check(capsys, str(cfg))
    assert code == 1 and out == ""
    assert err.splitlines() == [
        f"{cfg}:2:3: global.poll_interval: invalid duration '10 seconds': expected a number with a unit, like 10s, 5m or 250ms",
        f"{cfg}:7:5: targets[0].community_file: cannot read {missing}: No such file or directory",
        f"{cfg}:9:5: targets[1].source: unknown source 'snmpp' (did you mean 'snmp'?); known sources: "
        + ", ".join(collectors.SOURCES),
        f"{cfg}: 3 problem(s)",
    ]


def test_web_config_and_state_dir_are_checked_beside_a_broken_target(tmp_path, capsys):
    cfg = tmp_path / "f.yml"
    cfg.write_text(f"""web:
  config_file: {tmp_path / 'web.yml'}
global:
  state_dir: {tmp_path / 'a-file'}
targets:
  - {{name: a, source: snmp, address: 127.0.0.300, community: x}}
""")
    (tmp_path / "a-file").write_text("not a directory")
    code, _, err = check(capsys, str(cfg))
    lines = err.splitlines()
    assert code == 1 and lines[-1] == f"{cfg}: 3 problem(s)", err
    assert lines[0].startswith(f"{cfg}:2:3: web.config_file: the web config does not load: ")
    assert lines[1] == f"{cfg}:4:3: global.state_dir: state_dir {tmp_path / 'a-file'} is not a directory"
    assert lines[2] == (f"{cfg}:6:29: targets[0].address: address '127.0.0.300' is not a valid IPv4 address "
                        "(four numbers from 0 to 255)")


def test_a_ca_file_that_cannot_be_used_is_an_error_at_its_line(tmp_path, capsys, monkeypatch):
    """Every poll of a UFM target with a missing or broken ca_file would fail: an error at start,
    not a poll error later. Plain HTTP and tls_insecure_skip_verify never read it."""
    from tests.pki import self_signed_cert

    monkeypatch.setenv("FABRICMON_TEST_PW", "pw")
    cert, _ = self_signed_cert(tmp_path)
    garbage = tmp_path / "not-a-ca.pem"
    garbage.write_text("hello\n")
    ufm = "  - {{name: {}, source: ufm, address: ufm.example.net, username: u, password_env: FABRICMON_TEST_PW, {}}}\n"
    cfg = tmp_path / "f.yml"
    cfg.write_text("targets:\n"
                   + ufm.format("missing", f"ca_file: {tmp_path / 'ca.pem'}")
                   + ufm.format("garbage", f"ca_file: {garbage}")
                   + ufm.format("good", f"ca_file: {cert}")
                   + ufm.format("http", f"scheme: http, ca_file: {tmp_path / 'ca.pem'}")
                   + ufm.format("insecure", f"tls_insecure_skip_verify: true, ca_file: {tmp_path / 'ca.pem'}"))
    code, _, err = check(capsys, str(cfg))
    lines = err.splitlines()
    assert code == 1 and lines[-1] == f"{cfg}: 2 problem(s)", err
    assert lines[0].startswith(f"{cfg}:2:")
    assert lines[0].endswith(f"targets[0].ca_file: cannot read {tmp_path / 'ca.pem'}: No such file or directory; "
                             "every poll of this target would fail"), lines[0]
    assert lines[1].startswith(f"{cfg}:3:") and f"targets[1].ca_file: {garbage} does not load as CA certificates (PEM)" in lines[1]


def test_every_file_a_source_reads_is_checked_at_its_line(tmp_path, capsys, monkeypatch):
    """The files each collector declares (``Collector.files``): a gNMI client certificate and key
    (read over TLS whatever the verification), a kubeconfig, a jobs file. A client certificate
    is not read over plain HTTP."""
    from tests.pki import self_signed_cert

    monkeypatch.setenv("FABRICMON_TEST_PW", "pw")
    cert, key = self_signed_cert(tmp_path)
    gone = tmp_path / "gone"
    cfg = tmp_path / "f.yml"
    cfg.write_text("targets:\n"
                   f"  - {{name: g, source: gnmi, address: sw1.example.net, tls_insecure_skip_verify: true, "
                   f"cert_file: {gone}.crt, key_file: {key}}}\n"
                   f"  - {{name: k, source: kubernetes, address: k8s.example.net, kubeconfig: {gone}.kubeconfig}}\n"
                   f"  - {{name: j, source: jobs-file, path: {gone}.yml}}\n"
                   f"  - {{name: u, source: ufm, address: ufm.example.net, scheme: http, username: u, "
                   f"password_env: FABRICMON_TEST_PW, cert_file: {gone}.crt, key_file: {key}}}\n"
                   f"  - {{name: ok, source: gnmi, address: sw2.example.net, ca_file: {cert}, cert_file: {cert}, key_file: {key}}}\n")
    code, _, err = check(capsys, str(cfg))
    lines = err.splitlines()
    assert code == 1 and lines[-1] == f"{cfg}: 3 problem(s)", err
    assert lines[0].startswith(f"{cfg}:2:") and f"targets[0].cert_file: cannot read {gone}.crt" in lines[0], lines[0]
    assert lines[1].startswith(f"{cfg}:3:") and f"targets[1].kubeconfig: cannot read {gone}.kubeconfig" in lines[1], lines[1]
    assert lines[2].startswith(f"{cfg}:4:") and f"targets[2].path: cannot read {gone}.yml" in lines[2], lines[2]


def test_a_loose_secret_file_is_a_warning_in_the_one_format(tmp_path, capsys):
    secret = tmp_path / "community"
    secret.write_text(SECRET + "\n")
    secret.chmod(0o644)
    cfg = tmp_path / "f.yml"
    cfg.write_text(snmp_target(community_file=str(secret)))
    code, out, err = check(capsys, str(cfg))
    assert code == 0 and "OK" in out
    assert err == (f"{cfg}:5:5: targets[0].community_file: warning: {secret} is readable by group or others (mode 0644); "
                   "chmod 600 it\n")
    assert SECRET not in err


def test_warnings_of_the_file_and_of_the_machine_come_in_one_format(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no perfquery here
    cfg = tmp_path / "f.yml"
    cfg.write_text("targets:\n  - name: ib\n    source: perfquery\n    topology_interval: 600\n")
    code, _, err = check(capsys, str(cfg))
    assert code == 0
    for line in err.splitlines():
        assert re.match(rf"^{re.escape(str(cfg))}:\d+:\d+: targets\[0\]\.\w+: warning: ", line), line
    assert f"{cfg}:4:5: targets[0].topology_interval: warning: a plain number of seconds (600) is deprecated: " \
           "write topology_interval: 10m" in err
