"""Metric families built from the pipeline: fabric counters, state, topology, findings, self.

Counters come out of the store as the totals it accumulated (monotonic across wraps,
saturation and resets), in base units, under the names of :mod:`agent.vocabulary`.
Identity labels are ``device`` and ``port`` (plus ``priority``/``queue``/... where the
counter has them); names, GUIDs and peers live in ``fabricmon_port_info`` and
``fabricmon_device_info`` for ``group_left`` joins, so counter series stay lean.
"""

from __future__ import annotations

import platform
from typing import TYPE_CHECKING

from agent import __version__
from agent.exporter.exposition import Family, escape_label, fmt_value, labels
from agent.vocabulary import COUNTERS, GAUGES, NAMESPACE, metric_name

if TYPE_CHECKING:
    from agent.pipeline import Pipeline

N = NAMESPACE


def _sub_labels(names: tuple[str, ...], values: tuple) -> str:
    return "".join(f',{k}="{escape_label(str(v))}"' for k, v in zip(names, values, strict=False))


def fabric_families(p: Pipeline) -> list[Family]:
    """Counters and gauges from the store, one family per vocabulary entry seen."""
    counters: dict[str, Family] = {}
    gauges: dict[str, Family] = {}
    for (device, port), entry in sorted(p.store.ports.items()):
        base = labels((("device", device), ("port", port)))[:-1]  # without the closing brace
        for (counter, sub), se in sorted(entry.series.items(), key=lambda kv: (kv[0][0], tuple(str(x) for x in kv[0][1]))):
            defn = COUNTERS.get(counter)
            if defn is None:
                continue
            fam = counters.get(counter)
            if fam is None:
                fam = counters[counter] = Family(metric_name(defn), "counter", defn.help)
            fam.lines.append(f"{fam.name}{base}{_sub_labels(defn.labels, sub)}}} {fmt_value(se.total)}")
        for (name, sub), g in sorted(entry.gauges.items(), key=lambda kv: (kv[0][0], tuple(str(x) for x in kv[0][1]))):
            gdef = GAUGES.get(name)
            if gdef is None:
                continue
            fam = gauges.get(name)
            if fam is None:
                fam = gauges[name] = Family(metric_name(gdef), "gauge", gdef.help)
            fam.lines.append(f"{fam.name}{base}{_sub_labels(gdef.labels, sub)}}} {fmt_value(g.value)}")
    return [counters[k] for k in sorted(counters)] + [gauges[k] for k in sorted(gauges)]


def topology_families(p: Pipeline) -> list[Family]:
    dev = Family(f"{N}_device_info", "info", "Fabric devices: kind, GUID, description and the target that reports them.")
    for name in sorted(p.store.devices):
        d = p.store.devices[name]
        dev.add(labels((("device", d.name), ("kind", d.kind), ("guid", d.guid), ("description", d.description),
                        ("model", d.model), ("target", p.store.device_target.get(d.name, "")))), 1)
    port = Family(f"{N}_port_info", "info", "Ports with their GUID, LID, alias, label and the peer port they are cabled to (from the fabric topology).")
    for (device, pname), entry in sorted(p.store.ports.items()):
        info = entry.info
        peer = p.topology.peer(device, pname)
        port.add(labels((("device", device), ("port", pname),
                         ("guid", info.guid if info else ""), ("lid", info.lid if info else ""),
                         ("alias", info.alias if info else ""), ("label", info.label if info else ""),
                         ("peer_device", peer[0] if peer else ""), ("peer_port", peer[1] if peer else ""))), 1)
    links = Family(f"{N}_topology_links", "gauge", "Cables known to the topology (discovered and static).")
    links.add("", len(p.topology.links()))
    return [dev, port, links]


def finding_families(p: Pipeline) -> list[Family]:
    active = Family(f"{N}_finding_active", "gauge",
                    "1 while a finding is active. role is origin/victim for storm trees, member for deadlock cycles.")
    since = Family(f"{N}_finding_start_timestamp_seconds", "gauge", "When the active finding was first shown by a poll.")
    for f in p.findings():
        lb = labels((("kind", f.kind), ("severity", f.severity), ("device", f.device), ("port", f.port or ""),
                     ("priority", "" if f.priority is None else str(f.priority)), ("role", f.role or "")))
        active.add(lb, 1)
        since.add(lb, f.start)
    total = Family(f"{N}_findings_total", "counter", "Findings raised (or escalated to this severity) since the agent started.")
    for (kind, severity), n in sorted(p.detector.raised_total.items()):
        total.add(labels((("kind", kind), ("severity", severity))), n)
    errors = Family(f"{N}_detector_rule_errors_total", "counter", "Detector rule evaluations that failed (a bug; see the log).")
    for rule in sorted(r.name for r in p.detector.rules):
        errors.add(labels((("rule", rule),)), p.detector.errors.get(rule, 0))
    out = [active, since, total, errors]
    rule_fams: dict[str, Family] = {}
    for rule in p.detector.rules:
        for m in rule.metrics():
            fam = rule_fams.get(m.name)
            if fam is None:
                fam = rule_fams[m.name] = Family(m.name, "gauge", m.help)
            for values, v in m.values:
                fam.add(labels(tuple(zip(m.labels, values, strict=False))), v)
    out.extend(rule_fams[k] for k in sorted(rule_fams))
    return out


def self_families(p: Pipeline, reload_ok: bool, reload_t: float, last_render_s: float, extra: list[Family] | None = None) -> list[Family]:
    build = Family(f"{N}_build_info", "info", "fabricmon version and Python version.")
    build.add(labels((("version", __version__), ("python_version", platform.python_version()))), 1)
    up = Family(f"{N}_target_up", "gauge", "1 when the target's last poll succeeded and parsed, 0 when it failed. fabricmon polls on its own timer; values are from the last poll.")
    dur = Family(f"{N}_target_poll_duration_seconds", "gauge", "Duration of the target's last poll.")
    last = Family(f"{N}_target_last_success_timestamp_seconds", "gauge", "Start time of the target's last successful poll.")
    polls = Family(f"{N}_target_polls_total", "counter", "Polls of the target that finished (successful or not).")
    errs = Family(f"{N}_target_poll_errors_total", "counter", "Failed polls by reason: timeout, connection, http, auth, tls, command, protocol, size, parse.")
    for name in sorted(p.targets):
        s = p.targets[name]
        lb = labels((("target", s.name), ("source", s.source)))
        up.add(lb, 1 if s.up else 0)
        dur.add(lb, s.last_duration_s)
        polls.add(lb, s.polls)
        if s.last_success_t is not None:
            last.add(lb, s.last_success_t)
        for reason in sorted(s.errors):
            errs.add(labels((("target", s.name), ("source", s.source), ("reason", reason))), s.errors[reason])
    reload = Family(f"{N}_config_last_reload_successful", "gauge", "1 when the last configuration (re)load succeeded.")
    reload.add("", 1 if reload_ok else 0)
    reload_ts = Family(f"{N}_config_last_reload_success_timestamp_seconds", "gauge", "Time of the last successful configuration load.")
    reload_ts.add("", reload_t)
    series = Family(f"{N}_store_series", "gauge", "Counter series held in the store.")
    series.add("", p.store.series_count())
    render = Family(f"{N}_exposition_render_seconds", "gauge", "Time the previous exposition render took (rendered once per change, never per scrape).")
    render.add("", last_render_s)
    return [build, up, dur, last, polls, errs, reload, reload_ts, series, render, *(extra or [])]


def all_families(p: Pipeline, reload_ok: bool = True, reload_t: float = 0.0, last_render_s: float = 0.0,
                 extra: list[Family] | None = None) -> list[Family]:
    return [*self_families(p, reload_ok, reload_t, last_render_s, extra), *fabric_families(p),
            *topology_families(p), *finding_families(p)]


__all__ = ["all_families", "fmt_value"]
