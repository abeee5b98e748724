"""Rule registry: rule name -> class. Each rule lives in its own module here.

A rule is enabled unless the config says ``rules: {<name>: {enabled: false}}``; its other keys
there are its parameters (its ``Params`` model: thresholds, windows, ``raise_polls``,
``clear_polls``), checked at config load key by key. The analyses' parameters and the fabric
layout are not a rule's: a rule given one of those keys is an error that says where it is set.

Adding a rule: its module here (a :class:`~fabricmon.agent.detector.base.Rule` subclass with
``name``, ``kinds``, ``needs``, ``Params``), one line in :data:`RULES`, and the vocabulary's
``read_by`` of the counters it reads.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from fabricmon.agent.detector.analyses import ANALYSES
from fabricmon.agent.detector.base import Rule
from fabricmon.agent.detector.rules.congestion import CongestionRule
from fabricmon.agent.detector.rules.credit_deadlock import CreditDeadlockRule
from fabricmon.agent.detector.rules.link_degraded import LinkDegradedRule
from fabricmon.agent.detector.rules.link_flap import LinkFlapRule
from fabricmon.agent.detector.rules.misconfig import MisconfigRule
from fabricmon.agent.detector.rules.packet_loss import PacketLossRule
from fabricmon.agent.detector.rules.pfc_deadlock import PfcDeadlockRule
from fabricmon.agent.detector.rules.pfc_storm import PfcStormRule

RULES: dict[str, type[Rule]] = {
    cls.name: cls
    for cls in [
        PfcStormRule, PfcDeadlockRule, CreditDeadlockRule, CongestionRule, PacketLossRule, LinkDegradedRule, LinkFlapRule, MisconfigRule,
    ]
}

# Keys that are not a rule's, and where they are set instead.
ELSEWHERE: dict[str, str] = {
    **{key: "the fabric layout is set once, under fabric: (every rule, the audit and the web view read it)"
       for key in ("lossless_priorities", "priority_to_queue", "priority_to_pg")},
    **{key: f"a parameter of the {name} analysis, which every rule that reads it shares: set it under detector: {{{name}: ...}}"
       for name, cls in ANALYSES.items() for key in cls.Params.model_fields},
}

Problem = tuple[tuple[Any, ...], "ValidationError | str"]  # (key path, what is wrong)


def problems(config: Any) -> list[Problem]:
    """What is wrong with the config's ``rules:`` section, per key: an unknown rule, a key that is
    set elsewhere, a value its rule's ``Params`` refuses. Values that are not mappings are left
    to the config's own model."""
    if not isinstance(config, Mapping):
        return []
    out: list[Problem] = []
    for name, raw in config.items():
        cls = RULES.get(name)
        if cls is None:
            out.append((("rules", name), f"unknown rule; known: {', '.join(sorted(RULES))}"))
            continue
        if raw is not None and not isinstance(raw, Mapping):
            continue
        raw = dict(raw or {})
        for key in [k for k in raw if k not in cls.Params.model_fields and k in ELSEWHERE]:
            out.append((("rules", name, key), f"not a parameter of the {name} rule: {ELSEWHERE[key]}"))
            del raw[key]
        try:
            cls.Params.model_validate(raw)
        except ValidationError as exc:
            out.append((("rules", name), exc))
    return out


def describe(found: list[Problem]) -> str:
    """Problems in one line each (``rules.link_flap.critical_flaps: ...``), for callers without a file's positions."""
    lines = []
    for loc, what in found:
        if isinstance(what, str):
            lines.append(f"{'.'.join(map(str, loc))}: {what}")
            continue
        for err in what.errors():
            msg = "unknown key" if err["type"] == "extra_forbidden" else err["msg"].removeprefix("Value error, ")
            lines.append(f"{'.'.join(map(str, (*loc, *err['loc'])))}: {msg}")
    return "; ".join(lines)


def build(config: Mapping[str, Mapping[str, Any] | None] | None = None) -> list[Rule]:
    """Instantiate the enabled rules with their configured parameters (ValueError on a bad one)."""
    config = config or {}
    found = problems(config)
    if found:
        raise ValueError(describe(found))
    rules = []
    for name, cls in RULES.items():
        params = cls.Params.model_validate(dict(config.get(name) or {}))
        if params.enabled:
            rules.append(cls(params))
    return rules
