"""Scenario corpus generator: simulated fabrics written as recordings with ground truth.

``python -m tools.scenarios --out tests/scenarios`` regenerates the corpus,
``python -m tools.scenarios --out tests/scenarios_physics --physics`` the corpus built from
documented physics (:mod:`tools.scenarios.physics`) and
``python -m tools.scenarios --demo agent/demo/demo.jsonl.gz`` the bundled demo recording and
``python -m tools.scenarios --out tests/scenarios_audit --audit`` the lossless-configuration
audit corpus (:mod:`tools.scenarios.audit`) and
``python -m tools.scenarios --out tests/scenarios_gnmi --gnmi`` SONiC fabrics seen only over
gNMI (:mod:`tools.scenarios.gnmi`).
Both are deterministic: the same seed gives the same bytes. Truth conventions are in
:mod:`tools.scenarios.catalog`.
"""

from __future__ import annotations

from pathlib import Path

from tools.scenarios.audit import AUDIT
from tools.scenarios.catalog import SCENARIOS, demo
from tools.scenarios.gnmi import GNMI
from tools.scenarios.physics import PHYSICS
from tools.scenarios.writer import Scenario, encode, run, write

DEFAULT_SEED = 20251202


def generate_corpus(out: Path, seed: int = DEFAULT_SEED, names: list[str] | None = None,
                    physics: bool = False, audit: bool = False, gnmi: bool = False) -> dict[str, int]:
    """Write every scenario (or ``names``) of the rule corpus, the physics corpus or the audit
    corpus, as ``<out>/<name>.jsonl.gz``; returns sizes in bytes."""
    sizes = {}
    for i, (name, build) in enumerate((GNMI if gnmi else AUDIT if audit else PHYSICS if physics else SCENARIOS).items()):
        if names and name not in names:
            continue
        sizes[name] = write(build(seed + i), out / f"{name}.jsonl.gz")
    return sizes


def write_demo(path: Path, seed: int = DEFAULT_SEED) -> int:
    return write(demo(seed), path)


__all__ = ["AUDIT", "DEFAULT_SEED", "GNMI", "PHYSICS", "SCENARIOS", "Scenario", "encode", "generate_corpus", "run", "write", "write_demo"]
