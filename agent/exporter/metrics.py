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
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from fabricmon.agent import __version__
from fabricmon.agent.exporter.exposition import Family, Template, escape_label, fmt_value, format_values, labels
from fabricmon.agent.jobs.export import job_families
from fabricmon.agent.store import CounterStore, PortKey
from fabricmon.core.slicing import sorted_in_slices
from fabricmon.core.vocabulary import COUNTERS, GAUGES, NAMESPACE, metric_name

if TYPE_CHECKING:
    from fabricmon.agent.pipeline import Pipeline

N = NAMESPACE


def _sub_labels(names: tuple[str, ...], values: tuple) -> str:
    return "".join(f',{k}="{escape_label(str(v))}"' for k, v in zip(names, values, strict=False))


def _key_order(key: tuple) -> tuple:
    return (key[0], tuple(str(x) for x in key[1]))


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
    """What stays the same between renders: sorted ports, their label blocks, the gauges'
    keys, and one :class:`Template` per family for the series layout it was built for."""

    __slots__ = ("bases", "gauges", "index", "layout", "order", "port_info", "rows", "templates")

    def __init__(self) -> None:
        self.order: list[tuple[PortKey, str]] = []
        self.index: dict[PortKey, int] = {}  # a port's place in ``order``
        self.rows: dict[str, tuple[list, np.ndarray]] = {}  # health level: a family's keys -> their ports' places
        self.layout = -1
        self.port_info: tuple | None = None
        self.bases: dict[PortKey, str] = {}
        self.gauges: tuple[tuple, list[tuple[str, list, list]]] | None = None  # (signature, per gauge: keys, value objects)
        self.templates: dict[str, tuple[list, Template]] = {}

    def template(self, name: str, keys: list[tuple[PortKey, tuple]], sub_names: tuple[str, ...]) -> Template:
        """The family's template for this list of (port, sub-label values) keys: reused while
        the keys are the same list (the store hands out the same one while its layout holds)
        or an equal one."""
        hit = self.templates.get(name)
        if hit is not None and (hit[0] is keys or hit[0] == keys):
            return hit[1]
        bases = self.bases
        if sub_names:
            # A few distinct values (priorities, queues) over many ports. Sub-label values are the
            # parsers' ints and strings, so tuples that compare equal print the same.
            subs: dict[tuple, str] = {}
            for _, sub in keys:
                if sub not in subs:
                    subs[sub] = _sub_labels(sub_names, sub) + "}"
            ends = [subs[sub] for _, sub in keys]
        else:
            ends = ["}"] * len(keys)
        t = Template(name, [bases[pk] for pk, _ in keys], ends)
        self.templates[name] = (keys, t)
        return t


_caches: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _cache_for(store: CounterStore) -> _RenderCache:
    c = _caches.get(store)
    if c is None:
        c = _caches[store] = _RenderCache()
    ports = store.ports
    layout = getattr(store, "layout", None)
    if layout is None or c.layout != layout or len(c.order) != len(ports):
        c.bases = {pk: c.bases.get(pk) or labels((("device", pk[0]), ("port", pk[1])))[:-1] for pk in ports}
        c.order = [(pk, c.bases[pk]) for pk in sorted_in_slices(ports)]
        c.index = {pk: i for i, (pk, _) in enumerate(c.order)}
        c.rows = {}
        c.layout = layout if layout is not None else -1
    return c


CounterColumn = tuple[str, list[tuple[PortKey, tuple]], np.ndarray, np.ndarray | None]


def counter_columns(store: CounterStore, with_rates: bool) -> Iterator[CounterColumn]:
    """Per counter name, in exposition order: its (port, sub) keys, their totals and (when
    asked) their rates, NaN where a series has none.

    The seam between the store and the templates: the store's bulk read API
    (:meth:`CounterStore.family_rows`, :meth:`CounterStore.totals`, :meth:`CounterStore.rates`)
    gives the same ``keys`` list while the series layout holds, so the family's template is
    found by identity.
    """
    totals = store.totals()
    rates = store.rates() if with_rates else None
    for name, fr in store.family_rows().items():
        yield name, fr.keys, totals[fr.rows], None if rates is None else rates[fr.rows]


def _health_kind(counter: str, group: str) -> str | None:
    return "tx" if counter == "tx_bytes" else "rx" if counter == "rx_bytes" else \
        "problems" if group in ("errors", "drops") else None


def fabric_families(p: Pipeline) -> list[Family]:
    """Counters and gauges from the store, one family per vocabulary entry seen.

    Full level: every counter as the store's total, rendered through the family's cached
    template (label blocks built once per series layout, values formatted in bulk). Health
    level (per target and counter group, see :class:`ExpositionPolicy`): per-port rates of
    traffic and of problems (errors + drops), link state, and per-target fabric sums of the
    counters, instead of every raw counter.
    """
    policy = p.exposition_policy
    store = p.store
    cache = _cache_for(store)
    ports = store.ports
    full_of: dict[tuple[str, str], bool] = {}

    def full(target: str, group: str) -> bool:
        f = full_of.get((target, group))
        if f is None:
            f = full_of[(target, group)] = policy is None or policy.full(target, group)
        return f

    targets = sorted({e.target for e in ports.values()}) if policy is not None else []
    out: list[Family] = []
    health = _Health(cache, ports) if policy is not None else None
    rendered: set[str] = set()
    for counter, keys, values, rates in counter_columns(store, with_rates=policy is not None):
        defn = COUNTERS.get(counter)
        if defn is None:
            continue
        fulls = {full(t, defn.group) for t in targets}
        if health is not None and False in fulls:  # some (or all) of the rows at the health level
            if True not in fulls:
                health.add(keys, counter, defn.group, values, rates)  # type: ignore[arg-type]
                continue
            mask = np.fromiter((full(ports[pk].target, defn.group) for pk, _ in keys), bool, len(keys))
            health.add([k for k, m in zip(keys, mask.tolist(), strict=True) if not m], counter, defn.group,
                       values[~mask], rates[~mask])  # type: ignore[index]
            keys, values = [k for k, m in zip(keys, mask.tolist(), strict=True) if m], values[mask]
            if not keys:
                continue
        name = metric_name(defn)
        tmpl = cache.template(name, keys, defn.labels)
        rendered.add(name)
        out.append(Family(name, "counter", defn.help, [tmpl.fill(values)]))
    out.extend(_gauge_families(store, cache, policy, full, rendered))
    for name in [n for n in cache.templates if n not in rendered]:
        del cache.templates[name]  # a family that is gone: its template goes with it
    if health is not None and (health.rates or health.sums):
        out.extend(_health_families(cache, health))
    return out


class _Health:
    """The health level's figures of one render, added up on whole arrays: per port (in the
    render cache's port order) the rate of each health kind, and per (target, counter) the
    sum of the totals.

    Families come in name order and rows in (port, sub) order, and both sums are taken in
    that order (``np.add.at`` and ``np.bincount`` add one row after the other), so each figure
    is the same float a loop over the rows gives.
    """

    __slots__ = ("cache", "rates", "sums", "target_names", "targets")

    def __init__(self, cache: _RenderCache, ports: dict) -> None:
        self.cache = cache
        names = sorted({ports[pk].target for pk, _ in cache.order})
        code = {t: i for i, t in enumerate(names)}
        self.target_names = names
        self.targets = np.fromiter((code[ports[pk].target] for pk, _ in cache.order), np.int64, len(cache.order))
        self.rates: dict[str, tuple[np.ndarray, np.ndarray]] = {}  # kind -> (rate per port, port has one)
        self.sums: dict[tuple[str, str], float] = {}

    def add(self, keys: list[tuple[PortKey, tuple]], counter: str, group: str, totals: np.ndarray,
            rates: np.ndarray) -> None:
        """One counter's health-level rows: its per-target sum, and its rate into the port's kind."""
        if not keys:
            return
        hit = self.cache.rows.get(counter)
        if hit is not None and hit[0] is keys:  # the store's same list while its layout holds
            at = hit[1]
        else:
            index = self.cache.index
            at = np.fromiter((index[pk] for pk, _ in keys), np.int64, len(keys))
            self.cache.rows[counter] = (keys, at)
        codes = self.targets[at]
        per_target = np.bincount(codes, weights=totals, minlength=len(self.target_names))
        for t in np.unique(codes).tolist():
            self.sums[(self.target_names[t], counter)] = float(per_target[t])
        kind = _health_kind(counter, group)
        if kind is None:
            return
        got = self.rates.get(kind)
        if got is None:
            got = self.rates[kind] = (np.zeros(len(self.targets)), np.zeros(len(self.targets), bool))
        ok = rates == rates  # NaN: no rate over the last interval
        np.add.at(got[0], at[ok], rates[ok])
        got[1][at[ok]] = True


def _gauge_families(store: CounterStore, cache: _RenderCache, policy: ExpositionPolicy | None,
                    full: Callable[[str, str], bool], rendered: set[str]) -> list[Family]:
    """The state gauges (link state, speed, occupancy...), one family per vocabulary entry seen.

    A port's gauges are only ever added to (a reading updates its :class:`GaugeValue` in
    place; ports leave only with a ``layout`` change), so while the layout, the number of
    gauges and the policy are the same, so are every family's keys and value objects: they
    are gathered once and each render reads the values through them.
    """
    ports = store.ports
    sig = (cache.layout, sum(len(e.gauges) for e in ports.values()), policy)
    if cache.gauges is None or cache.gauges[0] != sig or cache.gauges[0][2] is not policy:
        per: dict[str, tuple[list, list]] = {}
        for pk, _ in cache.order:
            entry = ports[pk]
            gvals = entry.gauges
            for key in sorted(gvals, key=_key_order):
                name = key[0]
                gdef = GAUGES.get(name)
                if gdef is None or (policy is not None and name != "link_up" and not full(entry.target, gdef.group)):
                    continue
                kv = per.get(name)
                if kv is None:
                    kv = per[name] = ([], [])
                kv[0].append((pk, key[1]))
                kv[1].append(gvals[key])
        cache.gauges = (sig, [(g, *per[g]) for g in sorted(per)])
    out = []
    for g, keys, refs in cache.gauges[1]:
        gdef = GAUGES[g]
        name = metric_name(gdef)
        tmpl = cache.template(name, keys, gdef.labels)
        rendered.add(name)
        out.append(Family(name, "gauge", gdef.help, [tmpl.fill([r.value for r in refs])]))
    return out


HEALTH_RATES = {
    "tx": ("port_transmit_bytes_per_second", "Health level: bytes per second the port transmitted over the last poll interval."),
    "rx": ("port_receive_bytes_per_second", "Health level: bytes per second the port received over the last poll interval."),
    "problems": ("port_problems_per_second", "Health level: errors plus discards per second on the port (every errors and drops counter)."),
}


def _health_families(cache: _RenderCache, health: _Health) -> list[Family]:
    out = []
    order, sums = cache.order, health.sums
    for h in ("tx", "rx", "problems"):
        metric, help_ = HEALTH_RATES[h]
        fam = Family(f"{N}_{metric}", "gauge", help_)
        got = health.rates.get(h)
        if got is not None and got[1].any():
            at = np.flatnonzero(got[1])
            fam.lines = ["\n".join(map(f"{fam.name}%s}} %s".__mod__,
                                        zip([order[i][1] for i in at.tolist()], format_values(got[0][at]), strict=True)))]
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
    port = Family(f"{N}_port_info", "info",
                  "Ports with their GUID, LID, alias, label and the peer port they are cabled to (from the fabric topology).")
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
    """The detector's families (findings, rule failures, the analyses' and rules' gauges), with
    the render cache's per-port label blocks."""
    return p.detector.families(_cache_for(p.store).bases, p.external_url)


def self_families(p: Pipeline, reload_ok: bool, reload_t: float, last_render_s: float, extra: list[Family] | None = None) -> list[Family]:
    """The agent's own families: build and shard info, then each component's (the targets',
    the store's, the pipeline's) in the order /metrics has always had them, then ``extra``
    (the live agent's scheduler, state file and listener)."""
    build = Family(f"{N}_build_info", "info", "fabricmon version and Python version.")
    build.add(labels((("version", __version__), ("python_version", platform.python_version()))), 1)
    web = Family(f"{N}_web_info", "info", "The URL this agent's pages, runbooks and finding links are under (web.external_url); "
                 "the agent alerts join it for their runbook_url.")
    web.add(labels((("external_url", p.external_url),)), 1)
    reload = Family(f"{N}_config_last_reload_successful", "gauge", "1 when the last configuration (re)load succeeded.")
    reload.add("", 1 if reload_ok else 0)
    reload_ts = Family(f"{N}_config_last_reload_success_timestamp_seconds", "gauge", "Time of the last successful configuration load.")
    reload_ts.add("", reload_t)
    render = Family(f"{N}_exposition_render_seconds", "gauge",
                    "Time the previous exposition render took (rendered once per change, never per scrape).")
    render.add("", last_render_s)
    return [build, web, *shard_family(p), *p.targets.families(), reload, reload_ts, *p.store.families(), render, *p.families(),
            *(extra or [])]


def demo_family() -> Family:
    """``fabricmon_demo 1``: this agent serves the bundled demo recording, not a real fabric."""
    demo = Family(f"{N}_demo", "gauge", "1 when this process serves the built-in demo (fabricmon demo): its findings are made up.")
    demo.add("", 1)
    return demo


def all_families(p: Pipeline, reload_ok: bool = True, reload_t: float = 0.0, last_render_s: float = 0.0,
                 extra: list[Family] | None = None) -> list[Family]:
    return [*self_families(p, reload_ok, reload_t, last_render_s, extra), *fabric_families(p),
            *topology_families(p), *finding_families(p), *job_families(p)]


__all__ = ["ExpositionPolicy", "all_families", "fmt_value"]
