"""What each collector declares for the agent (address kind, default port, executables,
self-sharding), and the config checks that read those declarations instead of a list of
source names in agent/."""

from __future__ import annotations

import pytest

from fabricmon import collectors
from fabricmon.agent.cli import main
from fabricmon.agent.config import ConfigError, load_text
from fabricmon.collectors import AddressKind, Collector, SourceOptions

CLASSES = {source: collectors.get(source) for source in collectors.SOURCES}
KIND = {source: cls.address_kind for source, cls in CLASSES.items()}


def problems(text: str) -> list[str]:
    with pytest.raises(ConfigError) as exc:
        load_text(text, "f.yml")
    return exc.value.problems


def target(source: str, address: str | None) -> str:
    """A config with one target of ``source`` whose options validate, at line 2."""
    options = {"snmp": "community: c", "ufm": "username: u\n    password: p", "nvue": "username: u\n    password: p",
               "kubernetes": "token: t", "slurmrestd": "user_name: u\n    token: t"}
    text = f"targets:\n  - name: t\n    source: {source}\n"
    if address is not None:
        text += f"    address: '{address}'\n"
    return text + (f"    {options[source]}\n" if source in options else "")


@pytest.mark.parametrize("source", sorted(CLASSES))
def test_declarations_are_consistent_with_the_options_model(source):
    cls = CLASSES[source]
    fields = cls.options_model.model_fields
    assert isinstance(cls.address_kind, AddressKind)
    port = fields.get("port")
    if port is not None and port.default is not None:
        assert cls.default_port == port.default  # one number: the options model's default
    if cls.address_kind is AddressKind.REMOTE:
        assert cls.default_port, f"{source} reaches a device over the network: which port by default?"
    for e in cls.executables:
        assert fields[e.option].annotation is str, f"{source}: {e.option} names a command"
        assert e.switch is None or fields[e.switch].annotation is bool
    if cls.self_sharding:
        assert {"num_shards", "shard"} <= set(fields)


def test_the_sources_declare_what_the_agent_used_to_hard_code():
    # Before, agent/config.py listed the network sources and agent/preflight.py the commands.
    assert {s for s, k in KIND.items() if k is AddressKind.REMOTE} >= {"snmp", "ufm", "ufm-telemetry", "nvue"}
    assert KIND["perfquery"] is AddressKind.LOCAL and KIND["host"] is AddressKind.NONE
    assert [e.option for e in CLASSES["perfquery"].executables] == ["ibnetdiscover_path", "perfquery_path"]
    assert [(e.option, e.switch) for e in CLASSES["host"].executables] == [("ethtool_path", "ethtool")]
    assert [s for s, c in CLASSES.items() if c.self_sharding] == ["ufm-telemetry"]


def test_a_self_sharding_source_must_have_shard_options():
    class NoShards(SourceOptions):
        pass

    with pytest.raises(TypeError, match="num_shards and shard"):
        type("Broken", (Collector,), {"source": "broken", "options_model": NoShards, "self_sharding": True})


def test_shard_options_ask_a_self_sharding_source_for_this_agents_share():
    ufm_t = CLASSES["ufm-telemetry"]
    opts = ufm_t.options_model()
    mine = ufm_t.shard_options(opts, 2, 3)
    assert (mine.num_shards, mine.shard) == (3, 2) and (opts.num_shards, opts.shard) == (1, None)
    assert ufm_t.shard_options(opts, 0, 1) is opts
    snmp = CLASSES["snmp"]
    s_opts = snmp.options_model(community="c")
    assert snmp.shard_options(s_opts, 2, 3) is s_opts  # split by target name, polled whole


@pytest.mark.parametrize("source", sorted(s for s, k in KIND.items() if k is AddressKind.REMOTE))
def test_a_remote_source_needs_an_address_without_port_or_scheme(source):
    default = CLASSES[source].default_port
    assert problems(target(source, None)) == [f"f.yml:2:5: targets[0]: a {source} target needs an address: (the device to poll)"]
    [p] = problems(target(source, "sw1.example:1234"))
    assert p == f"f.yml:4:5: targets[0].address: address 'sw1.example:1234': give the host alone and the port as port: (default {default})"
    [p] = problems(target(source, "[fd00::1]:1234"))
    assert "give the host alone and the port as port:" in p
    [p] = problems(target(source, "https://sw1.example/"))
    assert p.startswith("f.yml:4:5: targets[0].address:") and "not a URL" in p
    for good in ("sw1.example", "10.0.0.1", "fd00::1", "fe80::1%eth0"):
        assert load_text(target(source, good)).config.targets[0].address == good


@pytest.mark.parametrize("address", ["10.0.0.7", "ib-head.example"])
def test_a_perfquery_target_with_a_remote_address_is_an_error_at_its_line(address):
    [p] = problems(target("perfquery", address))
    assert p == (f"f.yml:4:5: targets[0].address: address {address!r}: a perfquery target polls from this node only; "
                 "leave the address empty or write 'local'")
    for good in (None, "", "local", "LOCAL", "localhost", "127.0.0.1", "::1"):
        load_text(target("perfquery", good))


def test_an_address_given_to_a_source_that_takes_none_is_an_error():
    [p] = problems(target("host", "local"))
    assert p == "f.yml:4:5: targets[0].address: a host target takes no address: it reads this node; remove address: 'local'"
    load_text(target("host", None))
    load_text(target("host", ""))


def test_check_config_reports_the_address_at_its_line(tmp_path, capsys):
    cfg = tmp_path / "f.yml"
    cfg.write_text("targets:\n  - name: ib\n    source: perfquery\n    address: 10.0.0.7\n")
    assert main(["check-config", "--syntax-only", str(cfg)]) == 1
    err = capsys.readouterr().err
    assert f"{cfg}:4:5: targets[0].address: address '10.0.0.7': a perfquery target polls from this node only" in err


def test_an_address_that_is_not_text_is_reported_once():
    ps = problems("targets:\n  - {name: t, source: snmp, address: [1, 2], community: c}\n")
    assert len(ps) == 1 and "targets[0].address" in ps[0] and "valid string" in ps[0]


def test_every_sample_config_validates():
    """Each source's sample.yaml (copied by users) is a valid config, its address line included."""
    from tests.conftest import ROOT

    folders: dict[str, set[str]] = {}  # a folder may hold two sources' classes (slurm, slurmrestd)
    for source, cls in CLASSES.items():
        folders.setdefault(cls.__module__.split(".")[-1], set()).add(source)
    for folder, sources in folders.items():
        path = ROOT / "collectors" / folder / "sample.yaml"
        loaded = load_text(path.read_text(), str(path))
        assert {t.source for t in loaded.config.targets} == sources, folder


def test_the_readme_sources_table_shows_each_address_kind():
    """The README's table of sources says what address each takes, as its class declares."""
    from tests.conftest import ROOT

    text = (ROOT / "README.md").read_text().split("## Sources", 1)[1].split("\n## ", 1)[0]
    rows = {cells[1].strip("` "): cells[3].strip() for line in text.splitlines()
            if line.startswith("| `") and len(cells := line.split("|")) >= 5}
    assert set(rows) == set(CLASSES)
    for source, cls in CLASSES.items():
        want = {AddressKind.NONE: "none", AddressKind.LOCAL: "empty or `local`"}.get(cls.address_kind, f"(port {cls.default_port})")
        assert want in rows[source], (source, rows[source])
