"""Config validation: every error names file, line, column and key, all of them in one run."""

from __future__ import annotations

import pytest
import yaml

from fabricmon.agent.cli import main
from fabricmon.agent.config import ConfigError, load, load_text
from fabricmon.core.durations import parse_duration


def problems(text: str) -> list[str]:
    with pytest.raises(ConfigError) as exc:
        load_text(text, "f.yml")
    return exc.value.problems


def test_unknown_source_names_line_and_column():
    text = "targets:\n  - name: leaf01\n    source: snmpp\n    address: 127.0.0.1\n"
    [p] = problems(text)
    assert p.startswith("f.yml:3:5: targets[0].source: unknown source 'snmpp'")


def test_bad_duration_names_its_line():
    text = "global:\n  poll_interval: 10s\n  poll_timeout: soon\n"
    [p] = problems(text)
    assert p.startswith("f.yml:3:3: global.poll_timeout:")
    assert "invalid duration 'soon'" in p


def test_unknown_key_is_an_error_with_line():
    text = "global:\n  poll_interval: 10s\nweb:\n  listen: 1\n"
    [p] = problems(text)
    assert p == "f.yml:4:3: web.listen: unknown key (did you mean 'listen_address'?)"


def test_duplicate_target_name_is_reported_at_the_duplicate():
    text = "targets:\n  - {name: a, source: perfquery}\n  - {name: b, source: perfquery}\n  - {name: a, source: perfquery}\n"
    [p] = problems(text)
    assert p == "f.yml:4:6: targets[2].name: duplicate target name 'a' (first at line 2)"


def test_yaml_syntax_error_has_line_column_and_nearest_key():
    [p] = problems("targets:\n  - name: a\n    source: [\n")
    assert p.startswith("f.yml:4:1: targets.source: invalid YAML:"), p


def test_every_error_in_one_run():
    """An error under global: hides nothing under targets:; an unknown source in one target
    hides no typo in another."""
    text = ("global:\n  poll_interval: 0s\n"
            "targets:\n  - {name: a, source: snmpp}\n  - name: b\n    source: perfquery\n    concurency: 2\n"
            "web:\n  listen: 1\n")
    ps = problems(text)
    assert ps[0].startswith("f.yml:2:3: global.poll_interval: must be between 100ms and 1d")
    assert "f.yml:9:3: web.listen: unknown key (did you mean 'listen_address'?)" in ps
    assert any(p.startswith("f.yml:4:15: targets[0].source: unknown source 'snmpp' (did you mean 'snmp'?)") for p in ps)
    assert "f.yml:7:5: targets[1].concurency: unknown key (did you mean 'concurrency'?)" in ps
    assert len(ps) == 4
    assert ps == sorted(ps, key=lambda p: int(p.split(":")[1]))  # in the file's order


@pytest.mark.parametrize(("yaml_text", "key"), [
    ("global:\n  poll_interval: 0s\n", "global.poll_interval"),      # was a ZeroDivisionError in the scheduler
    ("global:\n  poll_interval: .inf\n", "global.poll_interval"),
    ("global:\n  poll_timeout: .nan\n", "global.poll_timeout"),
    ("global:\n  poll_timeout: 0s\n", "global.poll_timeout"),
    ("global:\n  backoff_max: 0s\n", "global.backoff_max"),
    ("global:\n  max_concurrency: 100000\n", "global.max_concurrency"),
    ("global:\n  jitter: .nan\n", "global.jitter"),
    ("global:\n  stale_after: 5s\n", "global"),                       # shorter than the poll interval
    ("detector:\n  min_interval: 2h\n", "detector.min_interval"),
    ("shard:\n  count: 100000\n", "shard.count"),
    ("targets:\n  - {name: a, source: perfquery, interval: 0s}\n", "targets[0].interval"),
])
def test_values_that_cannot_run_are_errors(yaml_text, key):
    [p] = problems(yaml_text)
    assert f": {key}: " in p, p


@pytest.mark.parametrize("source", ["snmp", "ufm", "ufm-telemetry", "nvue"])
def test_network_sources_need_an_address(source):
    ps = problems(f"targets:\n  - name: t\n    source: {source}\n")
    assert f"f.yml:2:5: targets[0]: a {source} target needs an address: (the device to poll)" in ps


def test_unknown_rule_is_reported():
    [p] = problems("rules:\n  no_such_rule: {}\n")
    assert p.startswith("f.yml:1:1: rules:") and "no_such_rule" in p


def test_durations():
    assert parse_duration("250ms") == 0.25
    assert parse_duration("5m") == 300
    assert parse_duration(7) == 7.0
    for bad in ("-1s", float("inf"), float("nan"), True):
        with pytest.raises(ValueError):
            parse_duration(bad)


def test_valid_config_and_defaults(tmp_path):
    path = tmp_path / "ok.yml"
    path.write_text("targets:\n  - name: ib\n    source: perfquery\n    interval: 30s\n")
    loaded = load(path)
    assert loaded.config.targets[0].interval == 30.0
    assert loaded.config.global_.poll_interval == 10.0
    assert loaded.config.web.listen_address.endswith(":10117")


def test_merge_keys_share_options():
    loaded = load_text("targets:\n  - &d {name: a, source: perfquery, interval: 30s}\n"
                       "  - {<<: *d, name: b, interval: 60s}\n", "f.yml")
    a, b = loaded.config.targets
    assert (a.name, a.interval) == ("a", 30.0) and (b.name, b.source, b.interval) == ("b", "perfquery", 60.0)


def test_check_config_cli(tmp_path, capsys):
    bad = tmp_path / "bad.yml"
    bad.write_text("global:\n  jitter: 0.1\ntargets:\n  - name: x\n    source: nosuch\n")
    assert main(["check-config", str(bad)]) == 1
    err = capsys.readouterr().err
    assert f"{bad}:5:5: targets[0].source" in err
    good = tmp_path / "good.yml"
    good.write_text("targets: []\n")
    assert main(["check-config", str(good)]) == 0
    assert "OK" in capsys.readouterr().out


def test_missing_file_is_named_plainly(tmp_path):
    with pytest.raises(ConfigError) as exc:
        load(tmp_path / "nope.yml")
    assert exc.value.problems == [f"{tmp_path / 'nope.yml'}: cannot read config: No such file or directory"]


def test_source_option_error_names_its_line():
    text = "targets:\n  - name: ib\n    source: perfquery\n    concurrency: 0\n    bogus_option: 1\n"
    ps = problems(text)
    assert any(p.startswith("f.yml:4:5: targets[0].concurrency:") for p in ps), ps
    assert "f.yml:5:5: targets[0].bogus_option: unknown key" in ps


@pytest.mark.parametrize("name", ["sw\ud800", "sw\x1b[31m", "x" * 257])
def test_target_and_link_names_that_cannot_be_labels_are_errors(tmp_path, name):
    cfg = tmp_path / "c.yml"
    cfg.write_text(yaml.safe_dump({"targets": [{"name": name, "source": "host"}],
                                   "links": [{"device": name, "port": "p", "peer_device": "b", "peer_port": "q"}]},
                                  allow_unicode=False))
    with pytest.raises(ConfigError) as exc:
        load(str(cfg))
    text = "\n".join(exc.value.problems)
    assert "targets[0].name" in text and "links[0].device" in text
