"""Parse options, every collector: one typed model per source (``parse_options_model``, a
:class:`fabricmon.collectors.base.ParseOptions`) is what the recording header carries and the
only way a parser reads its target's options. A bad option in a header is a ParseError naming
the target and the option, never a traceback; a replay reports it for that target and keeps going.
"""

from __future__ import annotations

import ast
import json
import logging
from pathlib import Path
from typing import Any

import pytest

from fabricmon import collectors
from fabricmon.agent.detector.rules import build
from fabricmon.agent.pipeline import Pipeline
from fabricmon.collectors.base import ParseError, ParseOptions
from fabricmon.collectors.nvue.parse import NvueParseOptions
from fabricmon.collectors.testcase import cases, target_spec
from fabricmon.core.model import Poll, TargetSpec

ROOT = Path(__file__).resolve().parent.parent
SOURCES = sorted(collectors.SOURCES)
BAD = {"not": ["an option value"]}  # no parse option of any source takes an object of lists

# One live target per source with every parse option set away from its default (plus what the
# source needs to validate: credentials). A parse option added to a model without an entry here
# fails test_every_parse_option_reaches_the_header_and_back.
NON_DEFAULT: dict[str, dict[str, Any]] = {
    "perfquery": {},
    "host": {"hostname": "gpu07.cluster"},
    "snmp": {"community": "c", "profile": "arista", "profile_dirs": ["{tmp}"]},
    "ufm": {"username": "u", "password": "p", "pm_counters_path": "monitoring/pm_counters", "device_name": "system_name"},
    "ufm-telemetry": {"format": "prometheus", "node_names": {"0x0002c90300f172a0": "ys23n02"}},
    "nvue": {"username": "u", "password": "p", "link_stats_path": "interface/{if}/link/stats?x=1",
             "qos_counters_path": "interface/{if}/counters/qos?x=1", "roce_counters_path": "interface/{if}/qos/roce/counters?x=1",
             "pfc_watchdog_path": "interface/{if}/qos/pfc-watchdog?x=1", "roce_status_path": "interface/{if}/qos/roce/status?x=1",
             "lldp_path": "interface/{if}/lldp/neighbor?x=1", "wjh_path": "system/wjh/other", "pfc_profile_path": "qos/pfc/other",
             "roce_priority": 4, "roce_tc": 5, "cnp_tc": 7},
    "slurm": {"labels": ["name", "user"]},
    "slurmrestd": {"user_name": "u", "token": "t", "labels": ["partition"]},
    "kubernetes": {"token": "t", "resources": ["nvidia.com/gpu"], "job_label_keys": ["job-name"], "labels": ["namespace"]},
    "jobs-file": {"path": "{tmp}/jobs.yml", "labels": ["project"]},
    "gnmi": {"username": "u", "password": "p", "profile_dirs": ["{tmp}"]},
}


def first_case(source: str) -> Path:
    return next(c for c in cases() if target_spec(c).source == source)


def with_options(spec: TargetSpec, **options: Any) -> TargetSpec:
    return TargetSpec(spec.name, spec.source, {**spec.options, **options})


def parse_case(case: Path, spec: TargetSpec) -> Any:
    cls = collectors.get(spec.source)
    return cls.parse_poll(json.loads((case / "payload.json").read_text()), spec, cls.new_state())


def live_options(source: str, tmp_path: Path) -> dict[str, Any]:
    return json.loads(json.dumps(NON_DEFAULT[source]).replace("{tmp}", str(tmp_path)))


def assert_names(exc: pytest.ExceptionInfo[ParseError], spec: TargetSpec, option: str) -> None:
    message = str(exc.value)
    assert repr(spec.name) in message and f"option {option}" in message, message
    assert "Traceback" not in message and "pydantic" not in message, message  # no help links, no internals


def options_cases() -> list[Any]:
    return [pytest.param(s, f, id=f"{s}-{f}") for s in SOURCES for f in collectors.get(s).parse_options_model.model_fields]


@pytest.mark.parametrize(("source", "option"), options_cases())
def test_bad_option_type_names_the_target_and_the_option(source, option):
    case = first_case(source)
    spec = target_spec(case)
    parse_case(case, spec)  # the case parses with its own header: what fails below is the option
    bad = with_options(spec, **{option: BAD})
    with pytest.raises(ParseError) as exc:
        parse_case(case, bad)
    assert_names(exc, bad, option)
    assert "Input should be" in str(exc.value)  # says what was wrong


@pytest.mark.parametrize("source", SOURCES)
def test_an_option_the_source_does_not_know_is_an_error(source):
    """Also for perfquery, which has no parse option: a header is not silently half-read."""
    case = first_case(source)
    bad = with_options(target_spec(case), no_such_option=1)
    with pytest.raises(ParseError) as exc:
        parse_case(case, bad)
    assert_names(exc, bad, "no_such_option")


@pytest.mark.parametrize(("source", "options", "option", "why"), [
    ("host", {"hostname": 7}, "hostname", "a valid string"),
    ("snmp", {"profile_dirs": "/etc/fabricmon/profiles"}, "profile_dirs", "a valid list"),
    ("snmp", {"profile_dirs": ["/etc/fabricmon/profiles", 3]}, "profile_dirs.1", "a valid string"),
    ("ufm", {"device_name": "guid"}, "device_name", "'node_description' or 'system_name'"),
    ("ufm-telemetry", {"format": "xml"}, "format", "'auto', 'csv', 'prometheus' or 'json'"),
    ("ufm-telemetry", {"node_names": {"0x1": 5}}, "node_names.0x1", "a valid string"),
    ("nvue", {"roce_priority": 9}, "roce_priority", "less than or equal to 7"),
    ("nvue", {"roce_tc": "3"}, "roce_tc", "a valid integer"),  # strict: a header's "3" is not the integer 3
    ("nvue", {"cnp_tc": True}, "cnp_tc", "a valid integer"),  # nor is true 1
    ("nvue", {"wjh_path": 1}, "wjh_path", "a valid string"),
])
def test_what_was_wrong_is_said(source, options, option, why):
    case = first_case(source)
    bad = with_options(target_spec(case), **options)
    with pytest.raises(ParseError, match=why) as exc:
        parse_case(case, bad)
    assert_names(exc, bad, option)


@pytest.mark.parametrize("source", SOURCES)
def test_the_parse_model_mirrors_the_source_options(source):
    """Each parse option is the option of the same name, type and default that the config takes,
    so every live target's header validates and a replay defaults as the live agent did."""
    cls = collectors.get(source)
    config = cls.options_model.model_fields
    for name, field in cls.parse_options_model.model_fields.items():
        assert name in config, f"{source}: parse option {name} is not a target option"
        assert field.annotation == config[name].annotation, (source, name)
        assert field.get_default(call_default_factory=True) == config[name].get_default(call_default_factory=True), (source, name)
    assert issubclass(cls.parse_options_model, ParseOptions)
    assert cls.parse_options_model.model_config.get("frozen") and cls.parse_options_model.model_config.get("extra") == "forbid"


@pytest.mark.parametrize("source", SOURCES)
def test_every_parse_option_reaches_the_header_and_back(source, tmp_path):
    cls = collectors.get(source)
    given = live_options(source, tmp_path)
    collector = cls("t1", "local" if source in ("perfquery", "host") else "127.0.0.1", cls.options_model(**given))
    spec = collector.spec()
    fields = list(cls.parse_options_model.model_fields)
    assert set(fields) <= set(given), f"NON_DEFAULT[{source!r}] lacks {sorted(set(fields) - set(given))}"
    defaults = cls.parse_options_model()
    assert all(given[k] != getattr(defaults, k) for k in fields)  # a default would pass unread
    assert list(spec.options) == fields  # every one written, in the model's field order
    header = json.loads(json.dumps(spec.to_header()))  # through JSON, as a recording stores it
    typed = cls.parse_options_model.from_spec(TargetSpec.from_header(header))
    assert {k: getattr(typed, k) for k in fields} == {k: given[k] for k in fields}


def test_nvue_disabled_call_stays_disabled_on_replay():
    """The header writes a switched-off NVUE call as "": parse does not fall back to the default
    path, while an option left out does take the default."""
    assert "wjh_path" not in NvueParseOptions.from_spec(TargetSpec("l", "nvue", {"wjh_path": ""})).paths()
    assert NvueParseOptions.from_spec(TargetSpec("l", "nvue", {})).paths()["wjh_path"] == "system/wjh/packet-buffer"
    collectors_nvue = collectors.get("nvue")
    off = collectors_nvue("l", "127.0.0.1", collectors_nvue.options_model(username="u", password="p", wjh_path=None, lldp_path=""))
    options = off.spec().options
    assert options["wjh_path"] == "" and options["lldp_path"] == ""
    # "" keeps its place; a null one is added last as "" (the order recordings already have)
    assert list(options) == [*(k for k in NvueParseOptions.model_fields if k != "wjh_path"), "wjh_path"]


FETCH_SIDE = ("__init__.py", "base.py", "http_util.py", "command.py")  # collector classes, I/O helpers
PARSE_SIDE = [p for p in sorted((ROOT / "collectors").rglob("*.py"))
              if p.name not in FETCH_SIDE and not p.name.startswith(("fetch", "transport_"))]


def test_parsers_read_options_only_through_the_model():
    """No parse-side module reads a target's options as a plain mapping (``spec.options``,
    ``x.options.get``): only ParseOptions.from_spec in collectors/base.py does."""
    readers = []
    for path in PARSE_SIDE:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Attribute) and node.attr == "options":
                readers.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert PARSE_SIDE and not readers, readers


def test_a_bad_header_option_fails_that_target_only(caplog):
    """Replayed through the pipeline: the target with the bad option is down with a parse error
    naming it and the option, logged without a traceback; the other target is parsed."""
    good_case, bad_case = first_case("host"), first_case("nvue")
    good, bad = target_spec(good_case), with_options(target_spec(bad_case), roce_tc="3")
    p = Pipeline([good, bad], build())
    with caplog.at_level(logging.WARNING):
        for case, spec in ((good_case, good), (bad_case, bad)):
            p.ingest(Poll(spec.name, spec.source, 100.0, 0.1, True, payload=json.loads((case / "payload.json").read_text())))
    assert p.targets[good.name].up is True
    status = p.targets[bad.name]
    assert status.up is False and status.errors == {"parse": 1}
    assert f"{bad.name!r}" in (status.last_error or "") and "option roce_tc" in (status.last_error or "")
    assert not any(r.exc_info for r in caplog.records)
