"""Analysis registry: name -> class, in the order a pass updates them (an analysis after those it needs).

An analysis computes a fact several rules share, once per pass (see
:class:`fabricmon.agent.detector.base.Analysis`). Its parameters, when it has any, are set under
``detector: {<name>: {...}}`` in the config; ``fabric`` takes the config's top-level ``fabric:``
section instead.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from fabricmon.agent.detector.analyses.fabric import FabricAnalysis
from fabricmon.agent.detector.analyses.ib import IbAnalysis
from fabricmon.agent.detector.analyses.loss import LossAnalysis
from fabricmon.agent.detector.analyses.pfc import PfcAnalysis
from fabricmon.agent.detector.base import Analysis, Params

ANALYSES: dict[str, type[Analysis]] = {cls.name: cls for cls in (FabricAnalysis, PfcAnalysis, IbAnalysis, LossAnalysis)}
# Analyses with parameters of their own: the keys of the config's ``detector:`` section they own.
CONFIGURABLE = tuple(name for name, cls in ANALYSES.items() if cls.Params.model_fields)


def params(config: Mapping[str, Any] | None = None) -> dict[str, Params]:
    """Each analysis's typed parameters from ``{name: {key: value}}`` (the config's ``detector:``
    analyses); a missing name takes the defaults. Raises ValueError naming the key on a bad value."""
    config = config or {}
    unknown = set(config) - set(ANALYSES)
    if unknown:
        raise ValueError(f"unknown analysis(es): {', '.join(sorted(unknown))}; known: {', '.join(ANALYSES)}")
    out: dict[str, Params] = {}
    for name, cls in ANALYSES.items():
        raw = config.get(name)
        try:
            out[name] = raw if isinstance(raw, cls.Params) else cls.Params.model_validate(dict(raw or {}))
        except ValidationError as exc:
            raise ValueError(f"detector.{name}: {exc}") from None
    return out


def problems(config: Any) -> list[tuple[tuple[str, str], ValidationError]]:
    """What is wrong with the analyses' sections of the config's ``detector:``, per section (the
    errors name the key). Values that are not mappings are left to the config's own model."""
    if not isinstance(config, Mapping):
        return []
    out: list[tuple[tuple[str, str], ValidationError]] = []
    for name in CONFIGURABLE:
        raw = config.get(name)
        if not isinstance(raw, Mapping):
            continue
        try:
            ANALYSES[name].Params.model_validate(dict(raw))
        except ValidationError as exc:
            out.append((("detector", name), exc))
    return out
