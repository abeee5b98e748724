"""The package layout: one ``fabricmon`` namespace, and the import graph between its layers.

- ``pip install .`` puts exactly one top-level package, ``fabricmon``, into site-packages.
- ``fabricmon.core`` (model, vocabulary, secrets, topology) imports nothing else of fabricmon.
- ``fabricmon.collectors`` imports only itself and ``fabricmon.core``: never the agent.
- ``fabricmon.agent`` reaches collectors only through the registry (the ``fabricmon.collectors``
  package itself), never a collector's own modules.
"""

from __future__ import annotations

import ast
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

from tests.conftest import ROOT

PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
SETUP = PYPROJECT["tool"]["setuptools"]


def _module_name(path: Path) -> str:
    """The installed name of a source file, from pyproject's package-dir mapping."""
    rel = path.relative_to(ROOT)
    best = max((src for src in SETUP["package-dir"].values() if rel.as_posix().startswith(src + "/")), key=len)
    pkg = next(name for name, src in SETUP["package-dir"].items() if src == best)
    parts = list(rel.relative_to(best).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join([pkg, *parts])


def _sources() -> dict[str, Path]:
    return {_module_name(p): p for src in ("agent", "collectors") for p in sorted((ROOT / src).rglob("*.py"))}


def _imports(path: Path) -> set[str]:
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module)
            out.update(f"{node.module}.{a.name}" for a in node.names)  # `from fabricmon import collectors`
    return {m for m in out if m == "fabricmon" or m.startswith("fabricmon.")}


def _layer(module: str) -> str:
    return module.split(".")[1] if module.count(".") else module


def _data_folders() -> dict[str, Path]:
    """Folders of agent/ and collectors/ that hold files the agent reads (no Python), by installed name."""
    out = {}
    for src in ("agent", "collectors"):
        for d in sorted((ROOT / src).rglob("*")):
            if (d.is_dir() and d.name != "__pycache__" and d.name != "testcases" and "testcases" not in d.parts
                    and not any(d.glob("*.py")) and any(f.is_file() for f in d.iterdir())):
                out[_module_name(d / "x.py").removesuffix(".x")] = d
    return out


def test_the_package_list_covers_every_folder_with_an_init_or_data():
    # A data folder setuptools is not told of makes every install print a "Package would be
    # ignored" warning per folder; listing it (its files under package-data) ships it quietly.
    listed = set(SETUP["packages"])
    found = {m for m, p in _sources().items() if p.name == "__init__.py"}
    assert found | set(_data_folders()) == listed
    for name in _data_folders():
        assert name in SETUP["package-data"], f"{name}: a data folder needs its files under package-data"


def test_no_module_is_reachable_under_two_names():
    # agent/core is fabricmon.core: importing it as fabricmon.agent.core would load a second copy.
    for mod, path in _sources().items():
        for imp in _imports(path):
            assert not imp.startswith("fabricmon.agent.core"), f"{mod} imports {imp}: use fabricmon.core"


def test_import_graph_between_layers():
    problems = []
    for mod, path in _sources().items():
        layer = _layer(mod)
        for imp in sorted(_imports(path)):
            target = _layer(imp)
            if imp == "fabricmon" or target == layer or target == "core":
                continue
            if layer == "agent" and imp == "fabricmon.collectors":
                continue  # the registry
            if layer == "agent" and target == "collectors" and imp.count(".") == 2 and imp.rsplit(".", 1)[1][:1].isupper():
                continue  # a name the registry package exports (Collector, FetchError)
            problems.append(f"{mod} ({path.relative_to(ROOT)}) imports {imp}")
    assert problems == []


def test_the_core_imports_nothing_above_it():
    for mod, path in _sources().items():
        if _layer(mod) == "core":
            assert {_layer(i) for i in _imports(path)} <= {"core"}, mod


def test_the_wheel_installs_one_top_level_package(tmp_path):
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path), str(ROOT)],
                   check=True, capture_output=True, timeout=300)
    (wheel,) = tmp_path.glob("fabricmon-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/")[0] for n in names if not n.split("/")[0].endswith((".dist-info", ".data"))}
    assert tops == {"fabricmon"}
    assert "fabricmon/__init__.py" not in names  # a namespace package: another distribution may add to it
    assert "fabricmon/agent/demo/demo.jsonl.gz" in names
    assert not any(n.startswith(("fabricmon/agent/scenarios", "tools/")) for n in names)  # the simulator is not shipped
    assert "fabricmon/core/model.py" in names and "fabricmon/collectors/snmp/profiles/if-mib.yaml" in names


# ---------------------------------------------------------------------- the store's seam
STORE = ROOT / "agent" / "store.py"


def _store_private_names() -> set[str]:
    """Underscore names the store module defines: attributes, slots, methods, module names."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(STORE.read_text())):
        if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
            out.add(node.attr)
        elif isinstance(node, ast.FunctionDef | ast.ClassDef) and node.name.startswith("_") and not node.name.startswith("__"):
            out.add(node.name)
        elif isinstance(node, ast.Name) and node.id.startswith("_") and isinstance(node.ctx, ast.Store):
            out.add(node.id)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith("_") \
                and not node.value.startswith("__"):
            out.add(node.value)  # __slots__ entries
    return out


def _base_name(node: ast.expr) -> str:
    return node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else ""


def test_nothing_outside_the_store_touches_its_private_names():
    """The rules and the state file go through the store's API (``PortEntry.counter``,
    ``gauge``, ``counters``, ``Changes.moved_series``, ``CounterStore.save``/``restore``): a
    columnar store can then replace the implementation behind it. Flags ``x._name`` for any
    underscore name the store defines (unless ``x`` is ``self``/``cls`` of the module's own
    class), any underscore attribute of something called ``store`` or ``entry``, and
    importing the store's private names."""
    private = _store_private_names()
    assert {"_device_clock", "_t", "_changes"} <= private  # the check sees what it guards
    problems = []
    for path in _sources().values():
        if path == STORE:
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            where = f"{path.relative_to(ROOT)}:{getattr(node, 'lineno', 0)}"
            if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
                base = _base_name(node.value)
                if base in ("store", "entry") or (node.attr in private and base not in ("self", "cls")):
                    problems.append(f"{where}: {base}.{node.attr}")
            elif isinstance(node, ast.ImportFrom) and node.module == "fabricmon.agent.store":
                problems.extend(f"{where}: imports {a.name}" for a in node.names if a.name.startswith("_"))
    assert problems == []


def test_rules_read_counters_through_the_store_api():
    """Rules never reach into a port's series or gauge dicts (``entry.series[...]``,
    ``entry.series.get``, ``entry.gauges``): they use ``counter``/``gauge``/``counters``."""
    problems = []
    for path in sorted((ROOT / "agent" / "detector" / "rules").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Attribute) and node.attr in ("series", "gauges"):
                problems.append(f"{path.relative_to(ROOT)}:{node.lineno}: .{node.attr}")
    assert problems == []


# ---------------------------------------------------------------------- test file names
COLLECTOR_SOURCES = sorted(p.parent.name for p in (ROOT / "collectors").glob("*/__init__.py"))

# Tests about something else that use one collector as a real part (named after what they test).
CROSS_CUTTING = {
    "test_secrets.py": "fabricmon.core.secrets; a ufm target shows the secret never leaks into errors",
    "test_hostile_strings.py": "sanitising of every payload; ufm/nvue stand-ins serve the hostile strings",
    "test_orphan_counters.py": "counters versus rules; reads the snmp profiles as one emitter among all",
    "test_shard.py": "sharding of targets; ufm-telemetry is the self-sharding source",
}


def test_collector_tests_are_named_test_source_aspect():
    """A test file that imports a collector's own subpackage (``fabricmon.collectors.<source>``)
    is ``tests/test_<source>_<aspect>.py`` for a source it imports, or ``test_collector_*``/
    ``test_collectors_*`` when it covers the shared collector code or several sources, so that
    ``ls tests/test_snmp_*`` finds every SNMP test."""
    assert {"perfquery", "snmp", "ufm", "ufm_telemetry", "nvue", "host"} <= set(COLLECTOR_SOURCES)
    problems = []
    for path in sorted((ROOT / "tests").glob("test_*.py")):
        sources = {imp.split(".")[2] for imp in _imports(path)
                   if imp.count(".") >= 2 and imp.split(".")[1] == "collectors" and imp.split(".")[2] in COLLECTOR_SOURCES}
        if not sources or path.name in CROSS_CUTTING or path.name.startswith(("test_collector_", "test_collectors_")):
            continue
        # the longest matching prefix decides: test_ufm_telemetry_x.py is about ufm_telemetry, not ufm
        named = max((s for s in COLLECTOR_SOURCES if path.name.startswith(f"test_{s}_")), key=len, default=None)
        if named not in sources:
            problems.append(f"tests/{path.name} imports {sorted(sources)} but is named for {named}")
    assert problems == []


# ---------------------------------------------------------------------- one way to build, one registry
SOURCE_TREES = ("agent", "collectors", "bench", "tools", "dashboards")


def _python_files(*trees: str) -> list[Path]:
    return [p for tree in trees for p in sorted((ROOT / tree).rglob("*.py"))]


def _called(node: ast.Call) -> str:
    return node.func.id if isinstance(node.func, ast.Name) else node.func.attr if isinstance(node.func, ast.Attribute) else ""


def test_one_pipeline_construction_outside_the_tests():
    """Every command and benchmark builds its pipeline with ``assemble.build_pipeline`` (from a
    config, defaults from the config model): a second ``Pipeline(...)`` would be a second set
    of defaults and settings to keep in step."""
    sites = [f"{p.relative_to(ROOT)}:{n.lineno}" for p in _python_files(*SOURCE_TREES)
             for n in ast.walk(ast.parse(p.read_text(), str(p))) if isinstance(n, ast.Call) and _called(n) == "Pipeline"]
    assert len(sites) == 1 and sites[0].startswith("agent/assemble.py:"), sites


# Device kinds (DeviceInfo.kind: switch | ca | host | router) share a word with the host source.
DEVICE_KINDS = frozenset({"switch", "ca", "host", "router"})


def _device_kind_set(parent: ast.AST | None) -> bool:
    """A literal set/tuple/list of device kinds (``{"host", "ca"}``): the word is a device kind there."""
    if not isinstance(parent, ast.Set | ast.Tuple | ast.List):
        return False
    words = {e.value for e in parent.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)}
    return bool(words & (DEVICE_KINDS - {"host"})) and words <= DEVICE_KINDS


def _other_meaning(node: ast.Constant, parent: ast.AST | None, sources: set[str]) -> bool:
    """Where a word that names a source means something else: a device kind (a literal set of
    device kinds, or compared with a ``.kind``), a record's field (``row["host"]``, or a key of
    a dict literal whose other keys are not source names: ``{"host": h, "device": d}``). A dict
    keyed by source names only (``{"perfquery": ..., "host": ...}``) is knowledge per source."""
    if _device_kind_set(parent):
        return True
    if isinstance(parent, ast.Subscript) and parent.slice is node:
        return True
    if isinstance(parent, ast.Compare) and any(isinstance(x, ast.Attribute) and x.attr == "kind" for x in (parent.left, *parent.comparators)):
        return True
    if isinstance(parent, ast.Dict) and node in parent.keys:
        keys = {k.value for k in parent.keys if isinstance(k, ast.Constant)}
        return not keys <= sources
    return False


def test_no_source_name_in_the_agent():
    """The agent knows sources only through the registry (``collectors.SOURCES``) and what
    each collector class declares (address kind, executables, self-sharding): a source name as
    a string in agent/ is knowledge about one source in the wrong place. The word "host" is also
    a device kind and a field of job records (:func:`_other_meaning`)."""
    from fabricmon import collectors

    sources = set(collectors.SOURCES)
    problems = []
    for path in _python_files("agent"):
        tree = ast.parse(path.read_text(), str(path))
        parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and node.value in sources and not _other_meaning(node, parents.get(node), sources):
                problems.append(f"{path.relative_to(ROOT)}:{node.lineno}: {node.value!r}")
    assert problems == []


def _family_name(arg: ast.expr) -> str | None:
    """The name a ``Family(...)`` call defines when its text says it (a literal, or an f-string
    of literals and the namespace); None when data gives it (the vocabulary, a rule's metric)."""
    if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
        return arg.value
    if not isinstance(arg, ast.JoinedStr):
        return None
    out = []
    for part in arg.values:
        if isinstance(part, ast.Constant):
            out.append(str(part.value))
        elif isinstance(part, ast.FormattedValue) and isinstance(part.value, ast.Name) and part.value.id in ("N", "n", "NAMESPACE"):
            out.append("fabricmon")
        else:
            return None
    return "".join(out)


def test_each_metric_family_is_defined_once():
    """Each component defines its own families (``families()`` of the store, the scheduler,
    the targets, the state file, the HTTP listener) and no family is defined in two places."""
    sites: dict[str, list[str]] = {}
    for path in _python_files("agent", "collectors"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Call) and _called(node) == "Family" and node.args:
                name = _family_name(node.args[0])
                if name is not None:
                    sites.setdefault(name, []).append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert {"fabricmon_target_up", "fabricmon_store_series", "fabricmon_http_connections_open",
            "fabricmon_scheduler_task_restarts_total", "fabricmon_state_save_errors_total"} <= set(sites)  # it sees them
    assert {n: s for n, s in sites.items() if len(s) > 1} == {}
    from fabricmon.core.vocabulary import COUNTERS, GAUGES, metric_name

    data_given = {metric_name(d) for d in [*COUNTERS.values(), *GAUGES.values()]}
    assert data_given.isdisjoint(sites)  # a vocabulary entry is not also written out by hand


ASSEMBLERS = ("agent/exporter", "agent/web", "agent/runtime.py", "agent/assemble.py", "agent/cli.py", "agent/audit.py")
# GatedSite subclasses aiohttp's BaseSite and stops as BaseSite.stop does (a library's protocol).
LIBRARY_INTERNALS = {"self._runner._check_site"}


def test_the_exporter_and_web_view_read_no_private_attribute():
    """What /metrics, the pages and the live agent show comes from the components' own surfaces
    (``families()``, status objects, public fields): ``x._name`` of anything but ``self``/``cls``
    (or a module's own private names) is reading another component's internals."""
    problems = []
    for path in _python_files("agent"):
        rel = path.relative_to(ROOT).as_posix()
        if not rel.startswith(ASSEMBLERS):
            continue
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__")
                    and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"))
                    and ast.unparse(node) not in LIBRARY_INTERNALS):
                problems.append(f"{rel}:{node.lineno}: {ast.unparse(node)}")


# ---------------------------------------------------------------------- the detector's seams
DETECTOR = ROOT / "agent" / "detector"
RULE_FILES = sorted(p for p in (DETECTOR / "rules").glob("*.py") if p.name != "__init__.py")


def test_the_detector_framework_imports_no_rule_module():
    """The framework (``agent/detector/__init__.py``, ``base``, ``families``, ``common``), the
    analyses and the checklist know no rule: rules plug in through the registry only."""
    problems = []
    for path in sorted(DETECTOR.rglob("*.py")):
        if path.parent.name == "rules":
            continue
        problems += [f"{path.relative_to(ROOT)} imports {imp}" for imp in sorted(_imports(path))
                     if imp.startswith("fabricmon.agent.detector.rules")]
    assert problems == []


def test_rules_read_analyses_never_another_rule_and_share_no_cache():
    """No string-keyed cache passes facts between rules (``DetectContext`` has none); a rule imports
    no other rule; it reads the fabric layout through the ``fabric`` analysis, not ``ctx.fabric``;
    and every analysis it asks for (``ctx.analysis(X)``) is one it names in ``needs``."""
    from fabricmon.agent.detector import DetectContext
    from fabricmon.agent.detector.rules import RULES

    assert "cache" not in DetectContext.__dataclass_fields__
    by_module = {cls.__module__: cls for cls in RULES.values()}
    problems = []
    for path in RULE_FILES:
        module = _module_name(path)
        problems += [f"{path.name} imports {imp}" for imp in sorted(_imports(path))
                     if imp.startswith("fabricmon.agent.detector.rules") and not imp.startswith(module)]
        rule = by_module[module]
        namespace = vars(sys.modules[module])
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and node.attr in ("cache", "fabric") and _base_name(node.value) == "ctx":
                problems.append(f"{path.name}:{node.lineno}: ctx.{node.attr}")
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "analysis":
                asked = namespace[node.args[0].id].name  # type: ignore[attr-defined]
                if asked not in rule.needs:
                    problems.append(f"{path.name}:{node.lineno}: reads analysis {asked!r} not in {rule.name}.needs {rule.needs}")
    assert problems == []
