"""Functions a maintainer can read: in agent/ and collectors/ no function (or method, or
nested function) above cyclomatic complexity 25 (radon's measure) or 60 lines, unless a
comment ``# one piece: <why>`` right above its ``def`` (or its decorators) says why it must
stay whole. Lines wider than 140 characters are ruff's E501 (pyproject.toml)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from radon.visitors import ComplexityVisitor  # the test extra (pyproject.toml)

from tests.conftest import ROOT

MAX_COMPLEXITY = 25
MAX_LINES = 60
MARK = "# one piece:"


def _functions(blocks: list) -> Iterator:
    for b in blocks:
        if hasattr(b, "methods"):  # a class
            yield from _functions(b.methods)
            yield from _functions(getattr(b, "inner_classes", []))
        else:
            yield b
            yield from _functions(b.closures)


def _marked(lines: list[str], def_line: int) -> bool:
    """A ``# one piece:`` comment on the def line or in the comment/decorator lines above it."""
    i = def_line - 1
    if MARK in lines[i]:
        return True
    i -= 1
    while i >= 0 and lines[i].lstrip().startswith(("#", "@")):
        if lines[i].lstrip().startswith(MARK):
            return True
        i -= 1
    return False


def _offenders(path: Path, root: Path = ROOT) -> list[str]:
    text = path.read_text()
    lines = text.splitlines()
    out = []
    seen = set()
    for f in _functions(ComplexityVisitor.from_code(text).blocks):
        if (f.lineno, f.name) in seen:
            continue
        seen.add((f.lineno, f.name))
        length = f.endline - f.lineno + 1
        if (f.complexity > MAX_COMPLEXITY or length > MAX_LINES) and not _marked(lines, f.lineno):
            name = f"{f.classname}.{f.name}" if getattr(f, "classname", None) else f.name
            out.append(f"{path.relative_to(root)}:{f.lineno} {name}: complexity {f.complexity}, {length} lines")
    return out


def test_no_function_is_too_complex_or_too_long():
    paths = [p for tree in ("agent", "collectors") for p in sorted((ROOT / tree).rglob("*.py"))]
    assert len(paths) > 50  # it sees the code
    problems = [o for p in paths for o in _offenders(p)]
    assert problems == [], "split these functions, or say at the def why one must stay whole (# one piece: ...):\n" + "\n".join(problems)


def test_the_check_sees_a_long_function_and_honours_the_mark(tmp_path):
    body = "".join(f"    x{i} = {i}\n" for i in range(MAX_LINES))
    branches = "".join(f"    if a == {i}:\n        return {i}\n" for i in range(MAX_COMPLEXITY))
    src = f"def long(a):\n{body}\n\ndef branchy(a):\n{branches}    return -1\n\n\n{MARK} a table of cases\ndef kept(a):\n{body}"
    path = tmp_path / "probe.py"
    path.write_text(src)
    got = _offenders(path, tmp_path)
    assert [g.split(" ", 1)[1].split(":")[0] for g in got] == ["long", "branchy"]
