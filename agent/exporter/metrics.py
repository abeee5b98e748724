"""Metric families built from the pipeline: fabric counters, state, topology, findings, self.

Counters come out of the store as the totals it accumulated (monotonic across wraps,
saturation and resets), in base units, under the names of :mod:`fabricmon.core.vocabulary`.
Identity labels are ``device`` and ``port`` (plus ``priority``/``queue``/... where the
counter has them); names, GUIDs and peers live in ``fabricmon_port_info`` and
``fabricmon_device_info`` for ``group_left`` joins, so counter series stay lean.
"""

from __future__ import annotations

import platform
import weakref
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from fabricmon.agent import __version__
from fabricmon.agent.exporter.exposition import Family, escape_label, fmt_value, labels
from fabricmon.agent.store import CounterStore, PortKey
from fabricmon.core.vocabulary import COUNTERS, GAUGES, NAMESPACE, metric_name

if TYPE_CHECKING:
    from fabricmon.agent.pipeline import Pipeline

N = NAMESPACE


def _sub_labels(names: tuple[str, ...], values: tuple) -> str:
    return "".join(f',{k}="{escape_label(str(v))}"' for k, v in zip(names, values, strict=False))


def _key_order(kv: tuple) -> tuple:
    return (kv[0], tuple(str(x) for x in kv[1]))


@dataclass(slots=True)
class ExpositionPolicy:
    """Which level each target's counters are exported at, and this agent's shard.

    Given to the pipeline by the live agent (``Pipeline(exposition_policy=...)``); without one
    everything is exported in full and no shard info is shown (replay, tests).
    """

    level: str = "full"
    groups: dict[str, str] = field(default_factory=dict)
    targets: dict[str, str] = field(default_factory=dict)
    shard_index: int = 0
    shard_count: int = 1

    def full(self, target: str, group: str) -> bool:
        lvl = self.groups.get(group) or self.targets.get(target) or self.level
        return lvl == "full"


class _RenderCache:
    """What stays the same between renders: sorted ports, their label blocks, key orders."""

    __slots__ = ("bases", "keys", "layout", "order", "port_info")

    def __init__(self) -> None:
        self.order: list[tuple[PortKey, str]] = []
        self.layout = -1
        self.port_info: tuple | None = None
        self.bases: dict[PortKey, str] = {}
        self.keys: dict[PortKey, tuple[int, list, int, list]] = {}


_caches: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _cache_for(store: CounterStore) -> _RenderCache:
    c = _caches.get(store)
    if c is None:
        c = _caches[store] = _RenderCache()
    ports = store.ports
    layout = getattr(store, "layout", None)
    if layout is None or c.layout != layout or len(c.order) != len(ports):
        c.bases = {pk: c.bases.get(pk) or labels((("device", pk[0]), ("port", pk[1])))[:-1] for pk in ports}
        c.order = [(pk, c.bases[pk]) for pk in sorted(ports)]
        c.keys = {pk: v for pk, v in c.keys.items() if pk in ports}
        c.layout = layout if layout is not None else -1
    return c


def _fmt(v: float) -> str:
    if v.__class__ is float and v.is_integer() and -1e15 < v < 1e15:
        return str(int(v))
    return fmt_value(v)


def _counter_spec(key: tuple, counters: dict[str, tuple[Family, list[str]]]) -> Any:
    """(lines.append, name, extra labels + "} ") of a counter series key; False outside the vocabulary."""
    counter, sub = key
    defn = COUNTERS.get(counter)
    if defn is None:
        return False
    fl = counters.get(counter)
    if fl is None:
        fl = counters[counter] = (Family(metric_name(defn), "counter", defn.help), [])
    return (fl[1].append, fl[0].name, _sub_labels(defn.labels, sub) + "} ")


def fabric_families(p: Pipeline) -> list[Family]:
    """Counters and gauges from the store, one family per vocabulary entry seen.

    Full level: every counter as the store's total. Health level (per target and counter
    group, see :class:`ExpositionPolicy`): per-port rates of traffic and of problems
    (errors + drops), link state, and per-target fabric sums of the counters, instead of
    every raw counter. Sorted ports and label blocks are cached across renders.
    """
    policy = p.exposition_policy
    store = p.store
    cache = _cache_for(store)
    counters: dict[str, tuple[Family, list[str]]] = {}
    gauges: dict[str, tuple[Family, list[str]]] = {}
    cdefs, gdefs = COUNTERS, GAUGES
    sub_cache: dict[tuple, tuple[str, str]] = {}
    kspec: dict[tuple, Any] = {}
    health: dict[str, list[str]] = {}
    sums: dict[tuple[str, str], float] = {}
    full_cache: dict[tuple[str, str], bool] = {}
    ports = store.ports
    for pk, base in cache.order:
        entry = ports[pk]
        series, gvals = entry.series, entry.gauges
        ck = cache.keys.get(pk)
        if ck is None or ck[0] != len(series) or ck[2] != len(gvals):
            ck = cache.keys[pk] = (len(series), [k for k, _ in sorted(series.items(), key=lambda kv: _key_order(kv[0]))],
                                   len(gvals), [k for k, _ in sorted(gvals.items(), key=lambda kv: _key_order(kv[0]))])
        target = entry.target
        port_health: dict[str, float] | None = None
        if policy is None:  # the hot path: one spec lookup and one f-string per series
            for key in ck[1]:
                ks = kspec.get(key)
                if ks is None:
                    ks = kspec[key] = _counter_spec(key, counters)
                if ks is False:
                    continue
                t = series[key].total
                ks[0](f"{ks[1]}{base}{ks[2]}{int(t) if t.__class__ is float and t.is_integer() and -1e15 < t < 1e15 else fmt_value(t)}")
        for key in ck[1] if policy is not None else ():
            counter, sub = key
            defn = cdefs.get(counter)
            if defn is None:
                continue
            se = series[key]
            if policy is not None:
                fk = (target, defn.group)
                full = full_cache.get(fk)
                if full is None:
                    full = full_cache[fk] = policy.full(target, defn.group)
                if not full:
                    sk = (target, counter)
                    sums[sk] = sums.get(sk, 0.0) + se.total
                    if se.rate is not None:
                        if port_health is None:
                            port_health = {}
                        h = "tx" if counter == "tx_bytes" else "rx" if counter == "rx_bytes" else \
                            "problems" if defn.group in ("errors", "drops") else None
                        if h is not None:
                            port_health[h] = port_health.get(h, 0.0) + se.rate
                    continue
            fl = counters.get(counter)
            if fl is None:
                fl = counters[counter] = (Family(metric_name(defn), "counter", defn.help), [])
            sl = sub_cache.get((counter, sub))
            if sl is None:
                sl = sub_cache[(counter, sub)] = (fl[0].name, _sub_labels(defn.labels, sub) + "} ")
            fl[1].append(f"{sl[0]}{base}{sl[1]}{_fmt(se.total)}")
        if port_health:
            for h, v in port_health.items():
                health.setdefault(h, []).append(f"{base}}} {_fmt(v)}")
        for key in ck[3]:
            name, sub = key
            gdef = gdefs.get(name)
            if gdef is None:
                continue
            if policy is not None and name != "link_up":
                full = full_cache.get((target, gdef.group))
                if full is None:
                    full = full_cache[(target, gdef.group)] = policy.full(target, gdef.group)
                if not full:
                    continue
            fl = gauges.get(name)
            if fl is None:
                fl = gauges[name] = (Family(metric_name(gdef), "gauge", gdef.help), [])
            sl = sub_cache.get(("g", name, sub))
            if sl is None:
                sl = sub_cache[("g", name, sub)] = (fl[0].name, _sub_labels(gdef.labels, sub) + "} ")
            fl[1].append(f"{sl[0]}{base}{sl[1]}{_fmt(gvals[key].value)}")
    out: list[Family] = []
    for k in sorted(counters):
        fam, lines = counters[k]
        if lines:
            fam.lines = ["\n".join(lines)]  # one string per family: the per-line strings are freed now
        out.append(fam)
    for k in sorted(gauges):
        fam, lines = gauges[k]
        if lines:
            fam.lines = ["\n".join(lines)]
        out.append(fam)
    if policy is not None and (health or sums):
        out.extend(_health_families(health, sums))
    return out


HEALTH_RATES = {
    "tx": ("port_transmit_bytes_per_second", "Health level: bytes per second the port transmitted over the last poll interval."),
    "rx": ("port_receive_bytes_per_second", "Health level: bytes per second the port received over the last poll interval."),
    "problems": ("port_problems_per_second", "Health level: errors plus discards per second on the port (every errors and drops counter)."),
}


def _health_families(health: dict[str, list[str]], sums: dict[tuple[str, str], float]) -> list[Family]:
    out = []
    for h in ("tx", "rx", "problems"):
        metric, help_ = HEALTH_RATES[h]
        fam = Family(f"{N}_{metric}", "gauge", help_)
        if h in health:
            fam.lines = ["\n".join(fam.name + line for line in health[h])]
        out.append(fam)
    agg: dict[str, Family] = {}
    for (target, counter) in sorted(sums):
        defn = COUNTERS[counter]
        name = f"{N}_fabric_{defn.metric}"
        fam = agg.get(name)
        if fam is None:
            fam = agg[name] = Family(name, "counter", f"Health level: sum over the target's ports of {metric_name(defn)}.")
        fam.add(labels((("target", target),)), sums[(target, counter)])
    out.extend(agg[k] for k in sorted(agg))
    return out


def shard_family(p: Pipeline) -> list[Family]:
    policy = p.exposition_policy
    if policy is None or policy.shard_count <= 1:
        return []  # unsharded (and replay): nothing, so a live agent and its replay stay identical
    fam = Family(f"{N}_shard_info", "info", "This agent's shard: it polls the targets whose name hashes to index (mod count).")
    fam.add(labels((("index", str(policy.shard_index)), ("count", str(policy.shard_count)))), 1)
    return [fam]


def topology_families(p: Pipeline) -> list[Family]:
    dev = Family(f"{N}_device_info", "info", "Fabric devices: kind, GUID, description and the target that reports them.")
    for name in sorted(p.store.devices):
        d = p.store.devices[name]
        dev.add(labels((("device", d.name), ("kind", d.kind), ("guid", d.guid), ("description", d.description),
                        ("model", d.model), ("target", p.store.device_target.get(d.name, "")))), 1)
    port = Family(f"{N}_port_info", "info", "Ports with their GUID, LID, alias, label and the peer port they are cabled to (from the fabric topology).")
    cache = _cache_for(p.store)
    ports = p.store.ports
    infos = [ports[pk].info for pk, _ in cache.order]
    topo_gen = getattr(p.topology, "generation", None)
    cached = cache.port_info
    if (cached is not None and cached[0] == cache.layout and cached[1] == topo_gen and cached[1] is not None
            and len(cached[2]) == len(infos) and all(a is b for a, b in zip(cached[2], infos, strict=True))):
        body, nlinks = cached[3], cached[4]  # same ports, same info objects, same cables: same lines
    else:
        lines = []
        for ((device, pname), _), info in zip(cache.order, infos, strict=True):
            peer = p.topology.peer(device, pname)
            lines.append(port.name + labels((("device", device), ("port", pname),
                                             ("guid", info.guid if info else ""), ("lid", info.lid if info else ""),
                                             ("alias", info.alias if info else ""), ("label", info.label if info else ""),
                                             ("peer_device", peer[0] if peer else ""), ("peer_port", peer[1] if peer else ""))) + " 1")
        body = "\n".join(lines)
        nlinks = sum(1 for a, b in p.topology.items() if a <= b)  # what len(links()) counts, without sorting
        cache.port_info = (cache.layout, topo_gen, infos, body, nlinks)
    if body:
        port.lines = [body]
    links = Family(f"{N}_topology_links", "gauge", "Cables known to the topology (discovered and static).")
    links.add("", nlinks)
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
    for m in [*p.detector.metrics(), *(m for rule in p.detector.rules for m in rule.metrics())]:
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
    info = Family(f"{N}_target_info", "info", "Facts the target's last parse reported: the SNMP vendor profile and the match that chose it.")
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
        if s.info:
            info.add(labels((("target", s.name), ("source", s.source), *sorted(s.info.items()))), 1)
    reload = Family(f"{N}_config_last_reload_successful", "gauge", "1 when the last configuration (re)load succeeded.")
    reload.add("", 1 if reload_ok else 0)
    reload_ts = Family(f"{N}_config_last_reload_success_timestamp_seconds", "gauge", "Time of the last successful configuration load.")
    reload_ts.add("", reload_t)
    series = Family(f"{N}_store_series", "gauge", "Counter series held in the store.")
    series.add("", p.store.series_count())
    store_refused = Family(f"{N}_store_refused_total", "counter",
                     "Readings the store refused by its bounds: a new port over max_ports, a new series of a port at max_series_per_port.")
    for what, n in sorted(p.store.refused.items()):
        store_refused.add(labels((("what", what),)), n)
    render = Family(f"{N}_exposition_render_seconds", "gauge", "Time the previous exposition render took (rendered once per change, never per scrape).")
    render.add("", last_render_s)
    refused = Family(f"{N}_refused_targets_total", "counter", "Polls refused because a new target would exceed the pipeline's target limit.")
    refused.add("", p.refused_targets)
    return [build, *shard_family(p), up, dur, last, polls, errs, info, reload, reload_ts, series, store_refused, render, refused, *(extra or [])]


def state_family(save_errors: int) -> Family:
    """Failed saves of the persisted state (the last good file stays; see fabricmon.agent.state)."""
    fam = Family(f"{N}_state_save_errors_total", "counter", "Saves of the agent state file that failed (disk full, permissions, a planted file).")
    fam.add("", save_errors)
    return fam


def demo_family() -> Family:
    """``fabricmon_demo 1``: this agent serves the bundled demo recording, not a real fabric."""
    demo = Family(f"{N}_demo", "gauge", "1 when this process serves the built-in demo (fabricmon demo): its findings are made up.")
    demo.add("", 1)
    return demo


def all_families(p: Pipeline, reload_ok: bool = True, reload_t: float = 0.0, last_render_s: float = 0.0,
                 extra: list[Family] | None = None) -> list[Family]:
    return [*self_families(p, reload_ok, reload_t, last_render_s, extra), *fabric_families(p),
            *topology_families(p), *finding_families(p)]


__all__ = ["ExpositionPolicy", "all_families", "fmt_value"]
