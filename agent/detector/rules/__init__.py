"""Rule registry: rule name -> class. Each rule lives in its own module here.

A rule is enabled unless the config says ``rules: {<name>: {enabled: false}}``; its other
keys there override the rule's ``defaults`` (thresholds) and ``raise_polls``/``clear_polls``.
"""

from __future__ import annotations

from typing import Any

from fabricmon.agent.detector import Rule
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


def build(config: dict[str, dict[str, Any]] | None = None) -> list[Rule]:
    """Instantiate the enabled rules with their configured parameters."""
    config = config or {}
    unknown = set(config) - set(RULES)
    if unknown:
        raise ValueError(f"unknown rule(s): {', '.join(sorted(unknown))}; known: {', '.join(sorted(RULES))}")
    rules = []
    for name, cls in RULES.items():
        params = dict(config.get(name) or {})
        if not params.pop("enabled", True):
            continue
        rules.append(cls(params))
    return rules
