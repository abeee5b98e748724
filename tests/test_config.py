"""Config validation: every error names file, line and key; check-config exits non-zero."""

from __future__ import annotations

import pytest

from fabricmon.agent.cli import main
from fabricmon.agent.config import ConfigError, load, load_text, parse_duration


def problems(text: str) -> list[str]:
    with pytest.raises(ConfigError) as exc:
        load_text(text, "f.yml")
    return exc.value.problems


def test_unknown_source_names_line_3():
    text = "targets:\n  - name: leaf01\n    source: snmpp\n    address: 127.0.0.1\n"
    [p] = problems(text)
    assert p.startswith("f.yml:3: targets[0].source: unknown source 'snmpp'")


def test_bad_duration_names_its_line():
    text = "global:\n  poll_interval: 10s\n  poll_timeout: soon\n"
    [p] = problems(text)
    assert p.startswith("f.yml:3: global.poll_timeout:")
    assert "invalid duration 'soon'" in p


def test_unknown_key_is_an_error_with_line():
    text = "global:\n  poll_interval: 10s\nweb:\n  listen: 1\n"
    [p] = problems(text)
    assert p == "f.yml:4: web.listen: unknown key"


def test_duplicate_target_names():
    text = "targets:\n  - {name: a, source: perfquery}\n  - {name: a, source: perfquery}\n"
    assert any("duplicate target name 'a'" in p for p in problems(text))


def test_yaml_syntax_error_has_line():
    [p] = problems("targets:\n  - name: a\n   source: [\n")
    assert p.startswith("f.yml:3: invalid YAML") or p.startswith("f.yml:4: invalid YAML")


def test_unknown_rule_is_reported():
    [p] = problems("rules:\n  no_such_rule: {}\n")
    assert p.startswith("f.yml:1: rules:") and "no_such_rule" in p


def test_durations():
    assert parse_duration("250ms") == 0.25
    assert parse_duration("5m") == 300
    assert parse_duration(7) == 7.0
    with pytest.raises(ValueError):
        parse_duration("-1s")


def test_valid_config_and_defaults(tmp_path):
    path = tmp_path / "ok.yml"
    path.write_text("targets:\n  - name: ib\n    source: perfquery\n    interval: 30s\n")
    loaded = load(path)
    assert loaded.config.targets[0].interval == 30.0
    assert loaded.config.global_.poll_interval == 10.0
    assert loaded.config.web.listen_address.endswith(":10117")


def test_check_config_cli(tmp_path, capsys):
    bad = tmp_path / "bad.yml"
    bad.write_text("global:\n  jitter: 0.1\ntargets:\n  - name: x\n    source: nosuch\n")
    assert main(["check-config", str(bad)]) == 1
    err = capsys.readouterr().err
    assert f"{bad}:5: targets[0].source" in err
    good = tmp_path / "good.yml"
    good.write_text("targets: []\n")
    assert main(["check-config", str(good)]) == 0
    assert "OK" in capsys.readouterr().out


def test_missing_file(tmp_path):
    with pytest.raises(ConfigError) as exc:
        load(tmp_path / "nope.yml")
    assert "cannot read config" in exc.value.problems[0]


def test_source_option_error_names_its_line():
    text = "targets:\n  - name: ib\n    source: perfquery\n    concurrency: 0\n    bogus_option: 1\n"
    ps = problems(text)
    assert any(p.startswith("f.yml:4: targets[0].concurrency:") for p in ps), ps
    assert "f.yml:5: targets[0].bogus_option: unknown key" in ps
