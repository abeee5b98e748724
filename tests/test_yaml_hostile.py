"""YAML with a bounded cost and clear errors (issue 20 item 7): every hostile file is a
``file:line:column`` error, never a traceback, a last-wins key or gigabytes of aliases."""

from __future__ import annotations

import pytest

from fabricmon.agent import config as config_mod
from fabricmon.agent.cli import main
from fabricmon.agent.config import ALIAS_NODE_BUDGET, MAX_CONFIG_BYTES, ConfigError, load, load_text


def billion_laughs(levels: int = 9) -> str:
    """The classic: each level is a list of nine aliases of the one above, 9^levels leaves."""
    lines = ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for i in range(1, levels):
        lines.append(f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]")
    return "\n".join(lines) + "\n"


def one_problem(text: str) -> str:
    with pytest.raises(ConfigError) as exc:
        load_text(text, "f.yml")
    [p] = exc.value.problems
    return p


def test_billion_laughs_is_refused_within_the_budget():
    text = billion_laughs()
    assert len(text) < 1200  # a 1 KB file that would expand to 9^9 = 387 million strings
    p = one_problem(text)
    assert p.startswith("f.yml:") and f"aliases expand to more than {ALIAS_NODE_BUDGET} extra nodes; refused" in p


def test_modest_aliases_are_allowed():
    loaded = load_text("rules:\n  link_flap: &thresholds {raise_polls: 2}\n  link_degraded: *thresholds\n", "f.yml")
    assert loaded.config.rules["link_degraded"]["raise_polls"] == 2


@pytest.mark.parametrize(("text", "where"), [
    ("global: &g\n  x: *g\n", "f.yml:2:3: global.x:"),        # at the key holding the alias
    ("targets: &t\n  - *t\n", "f.yml:1:10: targets[0]:"),     # a list item: at the anchored node
])
def test_recursive_alias_is_an_error_with_its_line(text, where):
    assert one_problem(text) == f"{where} recursive alias: a node that contains itself"


def test_unknown_tag_names_line_and_key():
    p = one_problem("global:\n  poll_interval: !!python/object/apply:os.system ['true']\n")
    assert p == "f.yml:2:18: global.poll_interval: unknown tag 'tag:yaml.org,2002:python/object/apply:os.system' on a list"

    p = one_problem("global:\n  poll_interval: !!python/name:os.system\n")
    assert p == "f.yml:2:18: global.poll_interval: unknown tag 'tag:yaml.org,2002:python/name:os.system'"


def test_unknown_tag_on_a_mapping_is_an_error():
    p = one_problem("global: !custom\n  poll_interval: 10s\n")
    assert p.startswith("f.yml:1:9: global: unknown tag '!custom' on a mapping"), p


def test_non_utf8_bytes_name_line_and_column(tmp_path):
    path = tmp_path / "latin1.yml"
    path.write_bytes("targets:\n  - name: caf\xe9\n    source: perfquery\n".encode("latin-1"))
    with pytest.raises(ConfigError) as exc:
        load(path)
    assert exc.value.problems == [f"{path}:2:14: targets.name: byte 0xe9 is not UTF-8 (YAML files are UTF-8 text)"]


def test_control_character_is_an_error():
    p = one_problem("global:\n  poll_interval: 10s\x00\n")
    assert p == "f.yml:2:21: global.poll_interval: invalid YAML: character '\\x00' is not allowed in YAML"


def test_duplicate_keys_are_errors_not_last_wins():
    p = one_problem("global:\n  poll_interval: 10s\n  poll_timeout: 5s\n  poll_interval: 1d\n")
    assert p == "f.yml:4:3: global.poll_interval: duplicate key 'poll_interval' (first at line 2)"


def test_every_duplicate_key_is_reported():
    """Issue 32: a file with three duplicate keys reported only the first."""
    text = "global:\n  poll_interval: 10s\n  poll_interval: 1d\nweb:\n  listen_address: :1\n  listen_address: :2\nglobal: {}\n"
    with pytest.raises(ConfigError) as exc:
        load_text(text, "f.yml")
    assert exc.value.problems == [
        "f.yml:3:3: global.poll_interval: duplicate key 'poll_interval' (first at line 2)",
        "f.yml:6:3: web.listen_address: duplicate key 'listen_address' (first at line 5)",
        "f.yml:7:1: global: duplicate key 'global' (first at line 1)",
    ]


@pytest.mark.parametrize("kind", ["fifo", "device"])
def test_check_config_of_a_fifo_or_a_device_is_an_error_at_once(tmp_path, capsys, kind):
    """Issue 32: `check-config` of a FIFO hung for ever (open() waits for a writer)."""
    import os

    path = tmp_path / "f.yml"
    if kind == "fifo":
        os.mkfifo(path)
    else:
        os.symlink("/dev/zero", path)
    assert main(["check-config", str(path)]) == 1
    err = capsys.readouterr().err
    assert f"{path}: cannot read config: it is a" in err and "not a regular file" in err


def test_deep_nesting_is_an_error():
    p = one_problem("rules: " + "[" * 5000 + "]" * 5000 + "\n")
    assert p.startswith("f.yml:") and ("nesting too deep" in p or "invalid YAML" in p), p


def test_file_size_is_capped_before_reading_it_all(tmp_path, capsys):
    path = tmp_path / "big.yml"
    path.write_bytes(b"# padding\n" * (MAX_CONFIG_BYTES // 10 + 1))
    assert main(["check-config", str(path)]) == 1
    assert f"{path}: config is larger than {MAX_CONFIG_BYTES >> 20} MiB; refused" in capsys.readouterr().err


async def test_reload_parses_off_the_event_loop(tmp_path, monkeypatch):
    """A reload's parse runs in a worker thread, so a slow file never stalls polls or scrapes."""
    import threading

    from fabricmon.agent.runtime import Agent

    path = tmp_path / "f.yml"
    path.write_text("targets: []\n")
    agent = Agent(load(path), listen="")
    threads: list[str] = []
    real_load = config_mod.load

    def spy(p):
        threads.append(threading.current_thread().name)
        return real_load(p)

    monkeypatch.setattr("fabricmon.agent.runtime.load", spy)
    path.write_text(billion_laughs())
    agent.exporter = type("E", (), {"request_render": lambda self: None, "reload_ok": True})()
    assert await agent._reload() is False
    assert threads and threads[0] != threading.main_thread().name
