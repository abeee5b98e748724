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
from collections.abc import Iterator
from dataclasses import dataclass, field
from operator import itemgetter
from typing import TYPE_CHECKING

import numpy as np

from fabricmon.agent import __version__
from fabricmon.agent.exporter.exposition import Family, Template, encoded, escape_label, fmt_value, labels, sample_blocks
from fabricmon.agent.jobs.export import job_families
from fabricmon.agent.store import CounterStore, FamilyRows, PortKey
from fabricmon.core.slicing import in_blocks
from fabricmon.core.vocabulary import COUNTERS, GAUGES, NAMESPACE, metric_name

if TYPE_CHECKING:
    from fabricmon.agent.pipeline import Pipeline

N = NAMESPACE
_FIRST = itemgetter(0)


def _sub_labels(names: tuple[str, ...], values: tuple) -> str:
    return "".join(f',{k}="{escape_label(str(v))}"' for k, v in zip(names, values, strict=False))


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
    """What stays the same between renders: the sorted ports (the store's
    :meth:`~CounterStore.port_order`) and their label blocks, and one :class:`Template` per
    family for the series layout it was built for."""

    __slots__ = ("base_of", "bases", "layout", "metric_blocks", "order", "port_info", "templates")

    def __init__(self) -> None:
        self.order: list[PortKey] = []
        self.bases: list[str] = []  # ``{device="..",port=".."`` of each port, in ``order``
        self.base_of: dict[PortKey, str] = {}
        self.layout = -1
        self.port_info: tuple | None = None
        self.templates: dict[str, tuple[object, Template]] = {}
        self.metric_blocks: dict[tuple[str, tuple[str, ...]], tuple[list, list[str]]] = {}  # the rules' metrics: keys, label blocks

    def template(self, name: str, fam: FamilyRows, sub_names: tuple[str, ...], keep: np.ndarray | None = None) -> Template:
        """The family's template for these series (``keep``: those of them that are rendered):
        reused while the store hands out the same family rows (it does while its layout holds)."""
        token = (fam, None if keep is None else keep.tobytes())
        hit = self.templates.get(name)
        if hit is not None and hit[0][0] is fam and hit[0][1] == token[1]:  # type: ignore[index]
            return hit[1]
        port_at, sub_at = (fam.port_at, fam.sub_at) if keep is None else (fam.port_at[keep], fam.sub_at[keep])
        n = len(port_at)
        if n == len(self.bases) and not sub_names:  # every port once, in order: the shared list of bases
            bases: list[str] = self.bases
        else:
            bases = list(map(self.bases.__getitem__, port_at.tolist()))
        if sub_names:
            # A few distinct values (priorities, queues) over many ports. Sub-label values are the
            # parsers' ints and strings, so tuples that compare equal print the same.
            ends_of = [_sub_labels(sub_names, sub) + "}" for sub in fam.subs]
            ends: list[str] | str = list(map(ends_of.__getitem__, sub_at.tolist()))
        else:
            ends = "}"
        t = Template(name, bases, ends, size=n)
        self.templates[name] = (token, t)
        return t


_caches: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _cache_for(store: CounterStore) -> _RenderCache:
    c = _caches.get(store)
    if c is None:
        c = _caches[store] = _RenderCache()
    order = store.port_order()
    if c.order is not order:
        old = c.base_of
        c.bases = [old.get(pk) or labels((("device", pk[0]), ("port", pk[1])))[:-1] for pk in order]
        c.base_of = dict(zip(order, c.bases, strict=True))
        c.order = order
        c.layout = store.layout
        c.metric_blocks = {}
    return c


CounterColumn = tuple[str, FamilyRows, np.ndarray, np.ndarray | None]


def counter_columns(store: CounterStore, with_rates: bool) -> Iterator[CounterColumn]:
    """Per counter name, in exposition order: its series (:class:`FamilyRows`), their totals
    and (when asked) their rates, NaN where a series has none.

    The seam between the store and the templates: the store's bulk read API
    (:meth:`CounterStore.family_rows`, :meth:`CounterStore.totals`, :meth:`CounterStore.rates`)
    gives the same family rows while the series layout holds, so the family's template is
    found by identity.
    """
    totals = store.totals()
    rates = store.rates() if with_rates else None
    for name, fr in store.family_rows().items():
        yield name, fr, totals[fr.rows], None if rates is None else rates[fr.rows]


def _health_kind(counter: str, group: str) -> str | None:
    return "tx" if counter == "tx_bytes" else "rx" if counter == "rx_bytes" else \
        "problems" if group in ("errors", "drops") else None


class _Levels:
    """Which ports' series of a group are rendered in full: per port of the render cache's
    order, from its target and the policy (a few targets, so a step per target, not per port)."""

    __slots__ = ("codes", "full", "names", "policy")

    def __init__(self, cache: _RenderCache, ports: dict, policy: ExpositionPolicy | None) -> None:
        self.policy = policy
        names: dict[str, int] = {}
        self.codes = np.fromiter((names.setdefault(ports[pk].target, len(names)) for pk in cache.order), np.int64,
                                 len(cache.order)) if policy is not None else np.zeros(0, np.int64)
        self.names = list(names)
        self.full: dict[str, np.ndarray] = {}  # group -> per target code, rendered in full

    def of(self, group: str) -> np.ndarray:
        got = self.full.get(group)
        if got is None:
            policy = self.policy
            got = self.full[group] = np.array([policy is None or policy.full(t, group) for t in self.names], bool)
        return got

    def mask(self, group: str, port_at: np.ndarray) -> np.ndarray | None:
        """Per series (by its port), rendered in full; None when every one is."""
        if self.policy is None:
            return None
        by_target = self.of(group)
        if by_target.all():
            return None
        return by_target[self.codes[port_at]]


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
    levels = _Levels(cache, store.ports, policy)
    out: list[Family] = []
    health = _Health(cache, levels) if policy is not None else None
    rendered: set[str] = set()
    for counter, fam, values, rates in counter_columns(store, with_rates=policy is not None):
        defn = COUNTERS.get(counter)
        if defn is None:
            continue
        keep = levels.mask(defn.group, fam.port_at)
        if health is not None and keep is not None:  # some (or all) of the rows at the health level
            health.add(fam.port_at[~keep], counter, defn.group, values[~keep], rates[~keep])  # type: ignore[index]
            if not keep.any():
                continue
            values = values[keep]
        name = metric_name(defn)
        tmpl = cache.template(name, fam, defn.labels, keep)
        rendered.add(name)
        out.append(Family(name, "counter", defn.help, tmpl.fill(values)))
    out.extend(_gauge_families(store, cache, levels, rendered))
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

    __slots__ = ("levels", "rates", "sums")

    def __init__(self, cache: _RenderCache, levels: _Levels) -> None:
        self.levels = levels
        self.rates: dict[str, tuple[np.ndarray, np.ndarray]] = {}  # kind -> (rate per port, port has one)
        self.sums: dict[tuple[str, str], float] = {}

    def add(self, at: np.ndarray, counter: str, group: str, totals: np.ndarray, rates: np.ndarray) -> None:
        """One counter's health-level rows (``at``: their ports' places): its per-target sum,
        and its rate into the port's kind."""
        if not len(at):
            return
        levels = self.levels
        codes = levels.codes[at]
        per_target = np.bincount(codes, weights=totals, minlength=len(levels.names))
        for t in np.unique(codes).tolist():
            self.sums[(levels.names[t], counter)] = float(per_target[t])
        kind = _health_kind(counter, group)
        if kind is None:
            return
        got = self.rates.get(kind)
        if got is None:
            got = self.rates[kind] = (np.zeros(len(levels.codes)), np.zeros(len(levels.codes), bool))
        ok = rates == rates  # NaN: no rate over the last interval
        np.add.at(got[0], at[ok], rates[ok])
        got[1][at[ok]] = True


def _gauge_families(store: CounterStore, cache: _RenderCache, levels: _Levels, rendered: set[str]) -> list[Family]:
    """The state gauges (link state, speed, occupancy...), one family per vocabulary entry
    seen, from the store's gauge columns (:meth:`CounterStore.gauge_rows`): a template per
    gauge kept while the store's gauge layout and the policy hold, the values read in bulk.
    ``link_up`` is rendered at every level."""
    values = store.gauge_values()
    out = []
    for g, fam in store.gauge_rows().items():
        gdef = GAUGES.get(g)
        if gdef is None:
            continue
        keep = None if g == "link_up" else levels.mask(gdef.group, fam.port_at)
        if keep is not None and not keep.any():
            continue
        name = metric_name(gdef)
        tmpl = cache.template(name, fam, gdef.labels, keep)
        rendered.add(name)
        rows = fam.rows if keep is None else fam.rows[keep]
        out.append(Family(name, "gauge", gdef.help, tmpl.fill(values[rows])))
    return out


HEALTH_RATES = {
    "tx": ("port_transmit_bytes_per_second", "Health level: bytes per second the port transmitted over the last poll interval."),
    "rx": ("port_receive_bytes_per_second", "Health level: bytes per second the port received over the last poll interval."),
    "problems": ("port_problems_per_second", "Health level: errors plus discards per second on the port (every errors and drops counter)."),
}


def _health_families(cache: _RenderCache, health: _Health) -> list[Family]:
    out = []
    bases, sums = cache.bases, health.sums
    for h in ("tx", "rx", "problems"):
        metric, help_ = HEALTH_RATES[h]
        fam = Family(f"{N}_{metric}", "gauge", help_)
        got = health.rates.get(h)
        if got is not None and got[1].any():
            at = np.flatnonzero(got[1])
            fam.lines = sample_blocks(f"{fam.name}%s}} %s", list(map(bases.__getitem__, at.tolist())), got[0][at])
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
    topo_gen = getattr(p.topology, "generation", None)
    stamp = (p.store.info_stamp, topo_gen)
    cached = cache.port_info
    if cached is not None and cached[0] == stamp and topo_gen is not None:
        body, nlinks = cached[1], cached[2]  # same ports, same info objects, same cables: same lines
    else:
        infos = [ports[pk].info for pk in cache.order]
        lines = []
        for (device, pname), info in zip(cache.order, infos, strict=True):
            peer = p.topology.peer(device, pname)
            lines.append(port.name + labels((("device", device), ("port", pname),
                                             ("guid", info.guid if info else ""), ("lid", info.lid if info else ""),
                                             ("alias", info.alias if info else ""), ("label", info.label if info else ""),
                                             ("peer_device", peer[0] if peer else ""), ("peer_port", peer[1] if peer else ""))) + " 1")
        body = [encoded(b) for b in in_blocks(lines)]  # bytes: the body holds these objects, not copies
        nlinks = sum(1 for a, b in p.topology.items() if a <= b)  # what len(links()) counts, without sorting
        cache.port_info = (stamp, body, nlinks)
    port.lines = list(body)
    links = Family(f"{N}_topology_links", "gauge", "Cables known to the topology (discovered and static).")
    links.add("", nlinks)
    return [dev, port, links]


def finding_families(p: Pipeline) -> list[Family]:
    """The detector's families (findings, rule failures, the analyses' and rules' gauges), with
    the render cache's per-port label blocks and its blocks of each gauge's last series."""
    cache = _cache_for(p.store)
    return p.detector.families(cache.base_of, cache.metric_blocks, p.external_url)


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
