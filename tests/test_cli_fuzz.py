"""No traceback reaches the user on any input (issue 18 item 2): the CLI entry points are fed
arbitrary recordings, configs and arguments; each run ends with an exit code (or argparse's
usage error) and stderr never carries a Python traceback."""

from __future__ import annotations

import gzip
import logging
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fabricmon.agent.cli import main
from fabricmon.agent.recording import FORMAT, VERSION

_settings = settings(max_examples=120, deadline=None,
                     suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("cli-fuzz")


def run(capsys, argv: list[str]) -> int:
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse: usage error (2) or --help (0)
        code = exc.code
    err = capsys.readouterr().err
    assert "Traceback" not in err, err
    return code


@pytest.fixture(autouse=True)
def _quiet_logs():
    """Logs go to stderr as for a user; keep them at warning so a traceback would show."""
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.WARNING)
    yield
    root.setLevel(level)


_header = {"type": "header", "format": FORMAT, "version": VERSION, "targets": [{"name": "leaf01", "source": "snmp"}]}
_values = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=8),
                    st.sampled_from(["Infinity", "NaN", "1e18", "-1", "", "\ud800", "a\x00b", "/dev/zero"]))
_poll_line = st.fixed_dictionaries({"type": st.sampled_from(["poll", "truth", "note", "header", "x"])},
                                   optional={k: _values for k in ("target", "source", "t", "ok", "error", "reason", "duration_s")}
                                   | {"payload": st.dictionaries(st.text(max_size=5), _values, max_size=3)})


@_settings
@given(lines=st.lists(_poll_line, max_size=6), raw=st.binary(max_size=200), gz=st.booleans(),
       cut=st.integers(0, 30), named_gz=st.booleans())
def test_replay_never_shows_a_traceback(work, capsys, lines, raw, gz, cut, named_gz):
    import json

    body = b"\n".join([json.dumps(_header).encode(), *(json.dumps(x).encode() for x in lines), raw])
    if gz:
        body = gzip.compress(body)
        body = body[: max(1, len(body) - cut)]
    path = work / ("rec.jsonl.gz" if named_gz else "rec.jsonl")
    path.write_bytes(body)
    assert run(capsys, ["replay", "--quiet", "--fast", str(path)]) in (0, 1, 2)


_keys = st.sampled_from(["global", "targets", "web", "recording", "detector", "rules", "links", "shard", "exposition",
                         "name", "source", "address", "interval", "timeout", "poll_interval", "jitter", "config_file",
                         "community_file", "password_env", "version", "auth", "<<", "enabled", "count", "index",
                         "fabric", "lossless_priorities", "priority_to_queue", "pfc_storm", "groups", "level"])
_yaml_values = st.recursive(
    _values | st.sampled_from(["snmp", "ufm", "perfquery", "nvue", "host", "10s", "0s", "-5m", ".inf"]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_keys, inner, max_size=4), max_leaves=12)


@_settings
@given(doc=st.dictionaries(_keys, _yaml_values, max_size=5), syntax_only=st.booleans())
def test_check_config_never_shows_a_traceback_on_structured_input(work, capsys, doc, syntax_only):
    path = work / "f.yml"
    try:
        path.write_text(yaml.safe_dump(doc, allow_unicode=True), encoding="utf-8", errors="surrogatepass")
    except UnicodeEncodeError:
        return
    assert run(capsys, ["check-config", *(["--syntax-only"] if syntax_only else []), str(path)]) in (0, 1)


@_settings
@given(raw=st.binary(max_size=300) | st.text(alphabet="&*!:-[]{}'\"\n #|>%@`,?ab1\t\x00", max_size=120).map(str.encode))
def test_check_config_never_shows_a_traceback_on_any_bytes(work, capsys, raw):
    path = work / "raw.yml"
    path.write_bytes(raw)
    assert run(capsys, ["check-config", str(path)]) in (0, 1)


_tokens = st.sampled_from(["check-config", "replay", "eval", "--fast", "--quiet", "--findings-out", "--config.file",
                           "--max-line-bytes", "--max-total-bytes", "--max-targets", "--syntax-only", "--min-precision",
                           "-", "0", "-1", "nan", "inf", "1e400", "/nonexistent", "/proc/self/mem", "/dev/null", "x.yml"])


@_settings
@given(argv=st.lists(_tokens | st.text(max_size=6), min_size=1, max_size=6))
def test_arguments_never_show_a_traceback(capsys, argv):
    """Commands that serve or pace (run, demo, record, correlate, --serve, --speed) are left out:
    they run until stopped. Their arguments are validated by the same parser."""
    if argv[0] not in ("check-config", "replay", "eval"):
        argv = ["check-config", *argv]
    assert isinstance(run(capsys, argv), int)
