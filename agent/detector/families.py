"""The detector's metric families: findings, rule failures, and the analyses' and rules' gauges (and counters).

Each family is defined here once; :meth:`fabricmon.agent.detector.Detector.families` yields
them and the exporter only places them in the body.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from fabricmon.agent.detector.base import ExportedGauge
from fabricmon.agent.exporter.exposition import Family, labels, sample_blocks
from fabricmon.agent.store import PortKey
from fabricmon.agent.web.ids import finding_id, finding_url
from fabricmon.core.model import Finding
from fabricmon.core.vocabulary import NAMESPACE

N = NAMESPACE


def finding_families(active: Iterable[Finding], raised_total: Mapping[tuple[str, str], int], base_url: str = "") -> list[Family]:
    """``finding_active`` and ``finding_start_timestamp_seconds`` per active finding (in the order
    given), ``findings_total`` per kind and severity.

    ``id`` and ``url`` (the finding page under ``base_url``, the agent's external URL) join a
    series to ``/api/findings`` and the findings file and give alerts their link. They add no
    series: one finding is one series either way (its key, which the other labels already
    carry, and its start); a finding that ends and is raised again starts a new series instead
    of reusing the old one, which the detector's hysteresis keeps to a few per hour.
    """
    act = Family(f"{N}_finding_active", "gauge",
                 "1 while a finding is active. role is origin/victim for storm trees, member for deadlock cycles; "
                 "id and url name the finding's page (as in /api/findings).")
    since = Family(f"{N}_finding_start_timestamp_seconds", "gauge", "When the active finding was first shown by a poll.")
    for f in active:
        # A misconfig finding also carries its check: one port can fail several on one priority.
        check = (("check", str(f.evidence.get("check", ""))),) if f.kind == "misconfig" else ()
        lb = labels((("kind", f.kind), ("severity", f.severity), ("device", f.device), ("port", f.port or ""),
                     ("priority", "" if f.priority is None else str(f.priority)), ("role", f.role or ""), *check,
                     ("id", finding_id(f)), ("url", finding_url(f, base_url))))
        act.add(lb, 1)
        since.add(lb, f.start)
    total = Family(f"{N}_findings_total", "counter", "Findings raised (or escalated to this severity) since the agent started.")
    for (kind, severity), n in sorted(raised_total.items()):
        total.add(labels((("kind", kind), ("severity", severity))), n)
    return [act, since, total]


def failure_family(rules: Iterable[str], failures: Mapping[str, int]) -> Family:
    """``rule_failures_total{rule}`` for every installed rule (0 when it never failed)."""
    fam = Family(f"{N}_rule_failures_total", "counter",
                 "Detector rule evaluations that failed (a bug, or an analysis it needs failed); the log and the landing page name it.")
    for rule in sorted(rules):
        fam.add(labels((("rule", rule),)), failures.get(rule, 0))
    return fam


def gauge_families(gauges: Iterable[ExportedGauge], port_labels: Mapping[PortKey, str] | None = None,
                   block_cache: dict[tuple[str, tuple[str, ...]], tuple[list, list[str]]] | None = None) -> list[Family]:
    """One family per gauge name, in name order. ``port_labels``: the ``{device="..",port=".."``
    block of each port (no closing brace), when the caller keeps them (the exporter does, per
    store layout): the per-port ratios have a series per port of a busy fabric (XmitWait moves on
    most), so their label blocks come from it and the values are formatted in bulk.
    ``block_cache`` (the exporter's, emptied when the store's layout changes): each gauge's keys
    and label blocks of the last render, reused while the same series come again."""
    bases = port_labels or {}
    fams: dict[str, Family] = {}
    for m in gauges:
        fam = fams.get(m.name)
        if fam is None:
            fam = fams[m.name] = Family(m.name, m.type, m.help)
        blocks = _blocks(m, bases, block_cache)
        if blocks:
            fam.lines.extend(sample_blocks(f"{fam.name.replace('%', '%%')}%s %s", blocks, [v for _, v in m.values]))
    return [fams[k] for k in sorted(fams)]


def _blocks(m: ExportedGauge, bases: Mapping[PortKey, str],
            cache: dict[tuple[str, tuple[str, ...]], tuple[list, list[str]]] | None) -> list[str]:
    """The label block of each of ``m``'s series: from the cache when its keys are the last ones."""
    keys = [values for values, _ in m.values]
    hit = cache.get((m.name, m.labels)) if cache is not None else None
    if hit is not None and hit[0] == keys:
        return hit[1]
    per_port = m.labels == ("device", "port")
    blocks = [(b + "}" if per_port and (b := bases.get(values)) is not None else  # type: ignore[arg-type]
               labels(tuple(zip(m.labels, values, strict=False)))) for values in keys]
    if cache is not None:
        cache[(m.name, m.labels)] = (keys, blocks)
    return blocks
