"""Exposition bodies, rendered once per change and served as-is to every scrape.

Samples are rendered to text lines once; the Prometheus text (0.0.4) and OpenMetrics
bodies differ only in their HELP/TYPE headers and the ``# EOF`` trailer, so both are
joined from the same lines. gzip is applied at most once per body and format (lazily, on
the first scrape that accepts it), never per scrape.
"""

from __future__ import annotations

import gzip
import math
from dataclasses import dataclass, field

TEXT_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
OPENMETRICS_CONTENT_TYPE = "application/openmetrics-text; version=1.0.0; charset=utf-8"


def escape_label(v: str) -> str:
    if "\\" in v or '"' in v or "\n" in v:
        v = v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return v


def escape_help(v: str) -> str:
    return v.replace("\\", "\\\\").replace("\n", "\\n")


def fmt_value(v: float) -> str:
    if v != v:
        return "NaN"
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    if float(v).is_integer() and abs(v) < 1e15:
        return str(int(v))
    return repr(float(v))


def labels(pairs: tuple[tuple[str, str], ...] | list[tuple[str, str]]) -> str:
    if not pairs:
        return ""
    return "{" + ",".join(f'{k}="{escape_label(str(v))}"' for k, v in pairs) + "}"


@dataclass(slots=True)
class Family:
    """One metric family: ``name`` is the sample name (``..._total`` for counters,
    ``..._info`` for info metrics); ``lines`` are rendered sample lines without newline."""

    name: str
    type: str  # counter | gauge | info
    help: str
    lines: list[str] = field(default_factory=list)

    def add(self, label_block: str, value: float) -> None:
        self.lines.append(f"{self.name}{label_block} {fmt_value(value)}")


def _om_name(f: Family) -> str:
    if f.type == "counter" and f.name.endswith("_total"):
        return f.name[: -len("_total")]
    if f.type == "info" and f.name.endswith("_info"):
        return f.name[: -len("_info")]
    return f.name


def render(families: list[Family]) -> tuple[bytes, bytes]:
    """(Prometheus text 0.0.4, OpenMetrics 1.0) bodies. Empty families are still declared."""
    text: list[str] = []
    om: list[str] = []
    for f in families:
        body = "\n".join(f.lines)
        h = escape_help(f.help)
        ptype = "gauge" if f.type == "info" else f.type
        text.append(f"# HELP {f.name} {h}\n# TYPE {f.name} {ptype}\n")
        omn = _om_name(f)
        om.append(f"# HELP {omn} {h}\n# TYPE {omn} {f.type}\n")
        if body:
            text.append(body + "\n")
            om.append(body + "\n")
    om.append("# EOF\n")
    # Payload strings are cleaned at the parse boundary (collectors/sanitize.py); "replace" is
    # the backstop that keeps one string no code point can encode (a lone surrogate from a
    # config or a bug) from failing the whole body for every target: it costs that one "?".
    return "".join(text).encode("utf-8", "replace"), "".join(om).encode("utf-8", "replace")


class Exposition:
    """A rendered body pair plus its lazily-built gzip variants."""

    def __init__(self, text: bytes, openmetrics: bytes, generation: int, rendered_at: float, render_seconds: float) -> None:
        self.text = text
        self.openmetrics = openmetrics
        self.generation = generation
        self.rendered_at = rendered_at
        self.render_seconds = render_seconds
        self._gz: dict[bool, bytes] = {}

    def body(self, openmetrics: bool, gzipped: bool) -> bytes:
        raw = self.openmetrics if openmetrics else self.text
        if not gzipped:
            return raw
        gz = self._gz.get(openmetrics)
        if gz is None:
            gz = self._gz[openmetrics] = gzip.compress(raw, compresslevel=3, mtime=0)
        return gz


EMPTY = Exposition(b"", b"# EOF\n", -1, 0.0, 0.0)
