"""Scenario corpus generator: simulated fabrics written as recordings with ground truth.

``python -m tools.scenarios --out tests/scenarios`` regenerates the corpus,
``python -m tools.scenarios --out tests/scenarios_physics --physics`` the corpus built from
documented physics (:mod:`tools.scenarios.physics`) and
``python -m tools.scenarios --demo agent/demo/demo.jsonl.gz`` the bundled demo recording and
``python -m tools.scenarios --out tests/scenarios_audit --audit`` the lossless-configuration
audit corpus (:mod:`tools.scenarios.audit`),
``python -m tools.scenarios --out tests/scenarios_negatives --negatives`` the hard negatives
(:mod:`tools.scenarios.negatives`: healthy converged fabrics, no truth),
``python -m tools.scenarios --out tests/scenarios_capabilities --capabilities`` the capability
scenarios of issue 27 (:mod:`tools.scenarios.capabilities`) and
``python -m tools.scenarios --out tests/scenarios_gnmi --gnmi`` SONiC fabrics seen only over
gNMI (:mod:`tools.scenarios.gnmi`).
Both are deterministic: the same seed gives the same bytes. Truth conventions are in
:mod:`tools.scenarios.catalog`.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from tools.scenarios.audit import AUDIT
from tools.scenarios.capabilities import CAPABILITIES
from tools.scenarios.catalog import SCENARIOS, demo
from tools.scenarios.gnmi import GNMI
from tools.scenarios.jobs import JOB_SCENARIOS
from tools.scenarios.negatives import NEGATIVES
from tools.scenarios.physics import PHYSICS
from tools.scenarios.writer import Scenario, encode, run, write

DEFAULT_SEED = 20251202
SCENARIOS = {**SCENARIOS, **JOB_SCENARIOS}  # families of their own modules come after the catalog (its seeds stay put)

# Families written into a folder of their own, by name (``generate_corpus(family=...)``).
FAMILIES: dict[str, dict[str, Callable[[int], Scenario]]] = {
    "negatives": NEGATIVES,
    "capabilities": CAPABILITIES,
    "gnmi": GNMI,
}


def generate_corpus(out: Path, seed: int = DEFAULT_SEED, names: list[str] | None = None,
                    physics: bool = False, audit: bool = False, family: str | None = None) -> dict[str, int]:
    """Write every scenario (or ``names``) of the rule corpus, the physics corpus, the audit
    corpus or a named family (:data:`FAMILIES`), as ``<out>/<name>.jsonl.gz``; returns sizes
    in bytes."""
    sizes = {}
    chosen = FAMILIES[family] if family else AUDIT if audit else PHYSICS if physics else SCENARIOS
    for i, (name, build) in enumerate(chosen.items()):
        if names and name not in names:
            continue
        sizes[name] = write(build(seed + i), out / f"{name}.jsonl.gz")
    return sizes


def write_demo(path: Path, seed: int = DEFAULT_SEED) -> int:
    return write(demo(seed), path)


__all__ = ["AUDIT", "CAPABILITIES", "DEFAULT_SEED", "FAMILIES", "GNMI", "NEGATIVES", "PHYSICS", "SCENARIOS", "Scenario", "encode",
           "generate_corpus", "run", "write", "write_demo"]
