"""Config validation: every error names file, line, column and key, all of them in one run."""

from __future__ import annotations

import pytest
import yaml

from fabricmon import collectors
from fabricmon.agent.cli import main
from fabricmon.agent.config import ConfigError, load, load_text
from fabricmon.collectors.base import AddressKind
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
    assert p.startswith("f.yml:2:3: rules.no_such_rule: unknown rule; known: congestion, ")


@pytest.mark.parametrize(("text", "where"), [
    # a value its rule's model refuses, at the key's own line and column
    ("rules:\n  link_flap:\n    critical_flaps: many\n", "f.yml:3:5: rules.link_flap.critical_flaps: Input should be a valid integer"),
    ("rules:\n  link_flap: {window: 10 years}\n", "f.yml:2:15: rules.link_flap.window: invalid duration"),
    ("rules:\n  link_flap: {enabled: sometimes}\n", "f.yml:2:15: rules.link_flap.enabled: Input should be a valid boolean"),
    ("rules:\n  congestion: {ecn_warn: 0.5}\n", "f.yml:2:16: rules.congestion.ecn_warn: unknown key"),
    # a key that is another section's: said where it belongs
    ("rules:\n  pfc_storm:\n    storm_pause_fraction: 0.9\n",
     "f.yml:3:5: rules.pfc_storm.storm_pause_fraction: not a parameter of the pfc_storm rule: a parameter of the pfc analysis"),
    ("rules:\n  congestion: {xmit_wait_tick_bits: 8}\n",
     "f.yml:2:16: rules.congestion.xmit_wait_tick_bits: not a parameter of the congestion rule: a parameter of the ib analysis"),
    # the analyses' own section
    ("detector:\n  pfc:\n    storm_pause_fraction: 1.5\n",
     "f.yml:3:5: detector.pfc.storm_pause_fraction: Input should be less than or equal to 1"),
    ("detector:\n  ib: {leaky_window: soon}\n", "f.yml:2:8: detector.ib.leaky_window: invalid duration"),
    ("detector:\n  ib: {stall_wait: 0.9}\n", "f.yml:2:8: detector.ib.stall_wait: unknown key"),
    ("detector:\n  pcf: {}\n", "f.yml:2:3: detector.pcf: unknown key"),
])
def test_rule_and_analysis_parameters_are_checked_at_their_key(text, where):
    [p] = problems(text)
    assert p.startswith(where), p


def test_rule_and_analysis_parameters_load_typed():
    loaded = load_text("detector:\n  pfc: {victim_hold: 2m}\n  ib: {leaky_window: 90s}\n"
                       "rules:\n  link_flap: {window: 5m, enabled: no}\n", "f.yml")
    assert loaded.config.detector.analyses() == {"pfc": {"victim_hold": "2m"}, "ib": {"leaky_window": "90s"}}
    from fabricmon.agent.detector import Detector
    from fabricmon.agent.detector.rules import build

    det = Detector(build(loaded.config.rules), loaded.config.detector.analyses())
    assert det.analysis("pfc").params.victim_hold == 120.0 and det.analysis("ib").params.leaky_window == 90.0
    assert "link_flap" not in [r.name for r in det.rules]


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
    if "\ud800" in name:  # libyaml refuses the escape of a lone surrogate itself: an error at its line
        assert f"{cfg}:2:" in text and "invalid Unicode character escape" in text
        return
    assert "targets[0].name" in text and "links[0].device" in text


# ---------------------------------------------------------------- strict values (issue 31)
UFM = "targets:\n  - {name: ufm01, source: ufm, address: ufm.example.net, username: u, password_env: PW, %s}\n"


@pytest.mark.parametrize(("text", "key"), [
    (UFM % 'tls_insecure_skip_verify: "yes"', "targets[0].tls_insecure_skip_verify"),
    (UFM % 'tls_insecure_skip_verify: "true"', "targets[0].tls_insecure_skip_verify"),
    (UFM % "tls_insecure_skip_verify: 1", "targets[0].tls_insecure_skip_verify"),
    (UFM % 'port: "443"', "targets[0].port"),
    ("targets:\n  - {name: a, source: perfquery, enabled: \"no\"}\n", "targets[0].enabled"),
    ("collectors:\n  ufm: \"off\"\n", "collectors.ufm"),
    ("targets:\n  - {name: gpu01, source: host, ethtool: \"false\"}\n", "targets[0].ethtool"),
])
def test_strings_are_not_booleans_or_numbers(text, key):
    [p] = problems(text)
    assert p.split(": ")[1] == key, p
    assert "valid boolean" in p or "valid integer" in p, p


def test_yaml_booleans_stay_booleans():
    """YAML 1.1's unquoted yes/no/on/off are booleans before validation sees them: they load."""
    loaded = load_text(UFM % "tls_insecure_skip_verify: yes" + "collectors:\n  snmp: off\n", "f.yml")
    assert loaded.options["ufm01"].tls_insecure_skip_verify is True and loaded.config.collectors == {"snmp": False}


@pytest.mark.parametrize(("text", "expected"), [
    ("globl:\n  poll_interval: 10s\n", "f.yml:1:1: globl: unknown key (did you mean 'global'?)"),
    ("global:\n  stale_afterr: 10m\n", "f.yml:2:3: global.stale_afterr: unknown key (did you mean 'stale_after'?)"),
    ("links:\n  - {device: a, port: b, peer_device: c, peer_prot: d}\n",
     "f.yml:2:42: links[0].peer_prot: unknown key (did you mean 'peer_port'?)"),
    ("targets:\n  - {name: a, source: snmp, address: 10.0.0.1, comunity_file: /x}\n",
     "f.yml:2:48: targets[0].comunity_file: unknown key (did you mean 'community_file'?)"),
    ("targets:\n  - {name: a, source: perfquery, intervall: 30s}\n",
     "f.yml:2:34: targets[0].intervall: unknown key (did you mean 'interval'?)"),
    ("targets:\n  - {name: a, source: perfquery, zzz: 1}\n", "f.yml:2:34: targets[0].zzz: unknown key"),
])
def test_a_misspelt_key_names_the_closest_allowed_one(text, expected):
    assert expected in problems(text)


# ---------------------------------------------------------------- one duration type (issue 31)
def _duration_options() -> list[tuple[str, str]]:
    from fabricmon import collectors
    from fabricmon.core.durations import duration_fields

    return [(source, name) for source in collectors.SOURCES for name in sorted(duration_fields(collectors.get(source).options_model))]


def test_every_time_option_of_every_source_is_a_duration():
    """An option named like a time (timeout, interval, a _s suffix) is declared a Duration, so it
    takes 10s, 5m and 250ms like every other: no source keeps a bare float of seconds."""
    from fabricmon import collectors
    from fabricmon.core.durations import duration_fields

    found = _duration_options()
    assert {s for s, _ in found} >= {"perfquery", "snmp", "host"}, found
    for source in collectors.SOURCES:
        model = collectors.get(source).options_model
        timed = {n for n in model.model_fields if "timeout" in n or "interval" in n or n.endswith("_s")}
        assert timed <= duration_fields(model), (source, timed - duration_fields(model))


@pytest.mark.parametrize(("source", "option"), _duration_options())
@pytest.mark.parametrize(("written", "seconds"), [("1500ms", 1.5), ("2s", 2.0), ("1m30s", 90.0)])
def test_every_duration_option_takes_units(source, option, written, seconds):
    remote = collectors.get(source).address_kind is AddressKind.REMOTE
    address = "address: 10.0.0.1, " if remote else ""
    needs = {"snmp": "community: x, ", "ufm": "username: u, password_env: P, ", "nvue": "username: u, password_env: P, ",
             "kubernetes": "token: t, ", "slurmrestd": "user_name: u, token: t, ", "jobs-file": "path: /etc/jobs.yml, "}
    text = f"targets:\n  - {{name: t, source: {source}, {address}{needs.get(source, '')}{option}: {written}}}\n"
    try:
        loaded = load_text(text, "f.yml")
    except ConfigError as exc:  # a bounded option may refuse 90 s: the error must be the bound, not the spelling
        assert all("must be" in p or "less than" in p for p in exc.problems), exc.problems
        return
    assert getattr(loaded.options["t"], option) == seconds and loaded.warnings == []


def test_old_duration_spellings_load_with_a_warning_at_their_line():
    text = ("global:\n  poll_interval: 30\n  stale_after: 600\n"
            "targets:\n  - name: ib\n    source: perfquery\n    topology_interval: 600\n    command_timeout: 2.5\n"
            "    interval_s: 60\n")
    loaded = load_text(text, "f.yml")
    assert loaded.config.global_.poll_interval == 30 and loaded.config.global_.stale_after == 600
    o = loaded.options["ib"]
    assert (o.topology_interval, o.command_timeout, loaded.config.targets[0].interval) == (600, 2.5, 60)
    assert loaded.warnings == [
        "f.yml:2:3: global.poll_interval: warning: a plain number of seconds (30) is deprecated: write poll_interval: 30s",
        "f.yml:3:3: global.stale_after: warning: a plain number of seconds (600) is deprecated: write stale_after: 10m",
        "f.yml:7:5: targets[0].topology_interval: warning: a plain number of seconds (600) is deprecated: write topology_interval: 10m",
        "f.yml:8:5: targets[0].command_timeout: warning: a plain number of seconds (2.5) is deprecated: write command_timeout: 2500ms",
        "f.yml:9:5: targets[0].interval_s: warning: interval_s: 60 is deprecated: write interval: 1m",
    ]


async def test_a_reload_logs_the_old_spellings_as_the_start_does(tmp_path, caplog):
    """A SIGHUP reload warns about deprecated spellings in the log, at their line, like a start:
    an operator who edits the file while the agent runs sees the same words."""
    import logging

    from fabricmon.agent.assemble import build_pipeline
    from fabricmon.agent.runtime import Agent
    from fabricmon.agent.worker import PipelineWorker

    path = tmp_path / "f.yml"
    path.write_text("targets: []\n")
    agent = Agent(load(path), listen="")
    agent.pipeline = build_pipeline(agent.loaded.config, [])  # what run() builds, without serving
    agent.exporter = type("E", (), {"request_render": lambda self: None, "reload_ok": True, "reload_t": 0.0})()
    agent.worker = PipelineWorker()  # a reload's changes to the pipeline are a job of the worker
    path.write_text("global:\n  poll_interval: 30\ntargets: []\n")
    try:
        with caplog.at_level(logging.WARNING):
            assert await agent._reload() is True
    finally:
        agent.worker.close()
    assert f"{path}:2:3: global.poll_interval: warning: a plain number of seconds (30) is deprecated: " \
           "write poll_interval: 30s" in caplog.messages


def test_old_spellings_of_rule_and_analysis_parameters_load_with_a_warning():
    """``window_s: 600`` under ``rules:`` and ``victim_hold_s`` under ``detector:`` are the
    parameters' old names (seconds in the name): they load as ``window`` and ``victim_hold``
    and warn at their line, like every other section's durations."""
    loaded = load_text("detector:\n  pfc: {victim_hold_s: 120}\nrules:\n  link_flap: {window_s: 600}\n", "f.yml")
    assert loaded.warnings == [
        "f.yml:2:9: detector.pfc.victim_hold_s: warning: victim_hold_s: 120 is deprecated: write victim_hold: 2m",
        "f.yml:4:15: rules.link_flap.window_s: warning: window_s: 600 is deprecated: write window: 10m"]
    from fabricmon.agent.detector import Detector
    from fabricmon.agent.detector.rules import build

    det = Detector(build(loaded.config.rules), loaded.config.detector.analyses())
    assert det.analysis("pfc").params.victim_hold == 120.0
    assert next(r for r in det.rules if r.name == "link_flap").params.window == 600.0


def test_an_old_spelling_beside_the_new_one_is_an_unknown_key():
    assert problems("targets:\n  - {name: a, source: perfquery, interval: 1m, interval_s: 60}\n") == [
        "f.yml:2:48: targets[0].interval_s: unknown key (did you mean 'interval'?)"]


def test_log_level_before_and_after_the_command(tmp_path, capsys):
    import logging

    cfg = tmp_path / "f.yml"
    cfg.write_text("targets: []\n")
    root = logging.getLogger()
    level = root.level
    try:
        for argv in (["--log.level", "error", "check-config", str(cfg)], ["check-config", "--log.level", "error", str(cfg)]):
            root.setLevel(logging.NOTSET)
            assert main(argv) == 0
        args = __import__("fabricmon.agent.cli", fromlist=["build_parser"]).build_parser().parse_args(
            ["replay", "x.jsonl", "--log.level", "debug"])
        assert args.log_level == "debug"
        assert __import__("fabricmon.agent.cli", fromlist=["build_parser"]).build_parser().parse_args(
            ["replay", "x.jsonl"]).log_level == "info"
    finally:
        root.setLevel(level)
    capsys.readouterr()
