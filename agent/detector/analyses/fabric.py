"""fabric: the fabric's layout, the one place that says what the fabric looks like.

* **QoS layout**: the config's ``fabric:`` section (lossless priorities, priority -> egress
  queue and ingress priority group; :class:`~fabricmon.core.vocabulary.PriorityMap`), handed
  to every pass by the pipeline. Its config home is ``fabric:``, not ``detector:``: the audit
  and the web view read it too.
* **Which device is a host** (:meth:`FabricShape.is_host`), used by the detector, the
  lossless audit (:mod:`fabricmon.agent.detector.checklist`) and the web view's fabric
  picture: a device the store describes is a host when its kind is ``host`` or ``ca`` (an
  InfiniBand channel adapter: ibnetdiscover and UFM call HCAs ``CA``); a device polled but not
  described is a switch (NVUE and SNMP describe no device, and hosts are described by the
  host collector); a device only the topology knows (not polled) is a host when it has exactly
  one cabled port, an end point.
  A CA inside a switch is not a host: the SHARP aggregation node every Quantum switch carries
  (node description "Mellanox Technologies Aggregation Node", on the switch's last port; in
  the real Selene topology, 666 of them, one per switch, each with the switch's system image
  GUID) belongs to its switch (:meth:`FabricShape.inside`). Counted as hosts they made every
  switch a leaf. A device only the topology knows whose single cable goes to another such
  device (a static switch-to-switch link in the config's ``links:``) is not a host either.
* **Cable peers by the store's names** (:meth:`FabricShape.peer`): a host reports its RDMA port
  (``mlx5_0/1``) with its netdev as alias, the name LLDP gives the cable (``eth0``).
* **Links, tiers and planes** from the topology (:meth:`FabricShape.peers`,
  :meth:`FabricShape.tiers`, :meth:`FabricShape.planes`): tier 0 are the switches that face
  hosts (leaves), each further tier one switch hop away (spines, cores); a plane is a set of
  switches connected among themselves and to no other (a multi-plane or rail fabric has
  several: each is its own network). Derived where the topology shows it; nothing is guessed
  for switches without cables.
* **Groups** (:meth:`FabricShape.layout`, the fabric view's): in a fabric of three or more
  tiers, a *pod* is a set of leaves and spines connected among themselves below the core (in
  Selene, 33: the leaves of one rail of seven scalable units and their ten spines); the
  switches above are grouped by the pods they reach; hosts by the leaves they are cabled to
  (one scalable unit of a rail-optimised fabric). A ``names:`` map's ``pod``/``rail``/``plane``
  wins over the cabling where it names one.
* **Names** (:meth:`FabricShape.host_of`, :meth:`FabricShape.label`): the host an adapter
  belongs to and what to call a device, from the best source there is: the ``names:`` map,
  the host source (its adapters' GUIDs), the node description unless it is the vendor's
  default (rdma-ndd sets it to "<host name> <device>", rdma-ndd(8)), the UFM system name.
  A default description ("Mellanox Technologies ...") never stands alone: it gets the GUID and
  the switch port the adapter is cabled to.

Growth (issue 29 item 3): the shape is per topology generation and store layout, so a
whole-array pass over the moved ports can take it as arrays (device code -> host flag, tier,
plane) built once per generation here.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from fabricmon.agent.detector.base import Analysis, DetectContext, Params
from fabricmon.agent.store import CounterStore
from fabricmon.core.names import Names
from fabricmon.core.topology import PortRef, Topology
from fabricmon.core.vocabulary import PriorityMap

HOST_KINDS = frozenset({"host", "ca"})
# The SHARP aggregation node's node description (verified: every switch of the Selene topology,
# ../shared/fixtures/public/ib/Mellanox__ufm_sdk_3.0/topo__selene.compute.txt, devid 0xcf09).
AGGREGATION_NODE = "Aggregation Node"
# A node description the firmware sets when nobody (rdma-ndd, opensm's node-name-map) named the
# node: "Mellanox Technologies Aggregation Node", "MT4123 ConnectX6 Mellanox Technologies",
# "Quantum-2 Mellanox Technologies" (seen in the fixtures' ibnetdiscover outputs).
VENDOR_DEFAULT = re.compile(r"\bMellanox Technologies\b|\bNVIDIA Technologies\b", re.IGNORECASE)
# rdma-ndd's default node description is "%h %d": host name, then the RDMA device (rdma-ndd(8)).
_HOST_DEVICE = re.compile(r"^(?P<hostname>\S+)\s+(?P<dev>\S*\d\S*)$")
TIER_NAMES = ("leaf", "spine", "core")


@dataclass(slots=True)
class Group:
    """Devices the fabric view draws as one tile: a pod's leaves, a set of hosts."""

    id: str
    name: str
    tier: int  # the switch tier; -1 for hosts
    members: list[str] = field(default_factory=list)
    why: str = ""  # how the group was derived, for the page


@dataclass(slots=True)
class Layout:
    """Tiers (top first) of switch groups, then the host groups; ``group_of`` for every device
    drawn (a host's adapters and a switch's aggregation node map to their host and switch)."""

    tiers: list[tuple[int, str, list[Group]]]
    hosts: list[Group]
    group_of: dict[str, str]
    host_of: dict[str, str]  # adapter device -> host name (hosts map to themselves)


class FabricShape:
    """What the store and the topology say about the fabric's devices: hosts, neighbours,
    tiers, planes, groups and names. Per-cable facts are cached per topology generation;
    descriptions are read live from the store (a device described later changes its answer at once)."""

    def __init__(self, store: CounterStore, topology: Topology) -> None:
        self.store = store
        self.topology = topology
        self._cables: tuple[int, dict[str, int]] | None = None  # device -> cabled ports, per topology generation
        self._peers: tuple[int, dict[str, set[str]]] | None = None  # device -> the devices it is cabled to
        self._aliases: tuple[int, dict[PortRef, PortRef]] | None = None  # topology name -> store name, per store layout

    def _cable_count(self) -> dict[str, int]:
        generation = self.topology.generation
        if self._cables is None or self._cables[0] != generation:
            cables: dict[str, int] = {}
            for (d, _), _ in self.topology.items():
                cables[d] = cables.get(d, 0) + 1
            self._cables = (generation, cables)
        return self._cables[1]

    def inside(self, device: str) -> str | None:
        """The switch a CA is part of (a SHARP aggregation node), or None."""
        info = self.store.devices.get(device)
        desc = info.description if info is not None else ""
        if AGGREGATION_NODE not in (desc or device):
            return None
        peers = self.peers().get(device, set())
        return next(iter(sorted(peers)), None) if len(peers) == 1 else None

    def is_host(self, device: str) -> bool:
        """A device the store describes as ``host``/``ca`` (unless it is part of a switch); a
        polled device nobody describes is a switch; a device only the topology knows is a host
        when it has a single cable, to a device that is not such a single-cable unknown too."""
        info = self.store.devices.get(device)
        if info is not None:
            return info.kind in HOST_KINDS and self.inside(device) is None
        if device in self.store.device_seen:
            return False  # polled but not described (NVUE describes no device): a switch source
        cables = self._cable_count()
        if cables.get(device, 0) != 1:
            return False
        peer = next(iter(self.peers().get(device, ())), None)
        return peer is not None and not (peer not in self.store.devices and peer not in self.store.device_seen
                                         and cables.get(peer, 0) == 1)

    def canonical(self, pk: PortRef) -> PortRef:
        """The store's name of a port the topology names differently: a host reports its RDMA
        port (``mlx5_0/1``) with the netdev as ``alias``, which is the name LLDP gives the cable."""
        if self.store.port(pk) is not None:
            return pk
        if self._aliases is None or self._aliases[0] != self.store.layout:
            self._aliases = (self.store.layout, {(d, e.info.alias): (d, p) for (d, p), e in self.store.ports.items()
                                                 if e.info is not None and e.info.alias and e.info.alias != p})
        return self._aliases[1].get(pk, pk)

    def peer(self, pk: PortRef) -> PortRef | None:
        """The other end of a port's cable, by the store's names (see :meth:`canonical`): a host's
        RDMA port finds its switch port through its netdev's name, and the other way round."""
        got = self.topology.peer(*pk)
        if got is None:
            entry = self.store.port(pk)
            if entry is None or entry.info is None or not entry.info.alias:
                return None
            got = self.topology.peer(pk[0], entry.info.alias)
        return None if got is None else self.canonical(got)

    def peers(self) -> dict[str, set[str]]:
        """Device -> the other devices it is cabled to (from the topology, both directions)."""
        generation = self.topology.generation
        if self._peers is None or self._peers[0] != generation:
            peers: dict[str, set[str]] = {}
            for (a, _), (b, _) in self.topology.items():
                if a != b:
                    peers.setdefault(a, set()).add(b)
            self._peers = (generation, peers)
        return self._peers[1]

    def tiers(self, switches: set[str], hosts: set[str]) -> dict[str, int]:
        """Switch -> tier: 0 for a switch cabled to a host (or to nothing), then hops between
        switches; a switch the walk does not reach is tier 1."""
        peers = self.peers()
        tier = {s: 0 for s in switches if peers.get(s, set()) & hosts or not peers.get(s, set()) & switches}
        frontier = sorted(tier)
        while frontier:
            nxt = []
            for s in frontier:
                for m in sorted(peers.get(s, ())):
                    if m in switches and m not in tier:
                        tier[m] = tier[s] + 1
                        nxt.append(m)
            frontier = nxt
        for s in switches:
            tier.setdefault(s, 1)
        return tier

    def planes(self, switches: set[str]) -> dict[str, int]:
        """Switch -> plane: the switches connected to it through switch-to-switch cables, numbered
        from 0 in the order of each plane's first switch name."""
        return {s: n for n, comp in enumerate(self._components(switches)) for s in comp}

    def _components(self, among: set[str]) -> list[list[str]]:
        """Connected components of the cabling restricted to ``among``, each sorted, in the order
        of their first member."""
        peers = self.peers()
        seen: set[str] = set()
        out: list[list[str]] = []
        for start in sorted(among):
            if start in seen:
                continue
            seen.add(start)
            comp, todo = [start], [start]
            while todo:
                for m in peers.get(todo.pop(), ()):
                    if m in among and m not in seen:
                        seen.add(m)
                        comp.append(m)
                        todo.append(m)
            out.append(sorted(comp))
        return out

    # ------------------------------------------------------------------ names
    def _guid_hosts(self) -> dict[str, str]:
        """Adapter GUID -> host name, from the host source (a host target's ports carry their
        adapter's node GUID)."""
        out: dict[str, str] = {}
        for (dev, _), e in self.store.ports.items():
            info = self.store.devices.get(dev)
            if info is not None and info.kind == "host" and e.info is not None and e.info.guid:
                out[e.info.guid] = dev
        return out

    def host_of(self, device: str, names: Names | None = None, guid_hosts: dict[str, str] | None = None) -> str:
        """The host a host device belongs to: itself for a host; for an adapter, the host the
        ``names:`` map, the host source or its node description names, else the adapter."""
        info = self.store.devices.get(device)
        if info is None or info.kind == "host":
            return device
        named = names.get(device, info.guid) if names else None
        if named and named.name:
            return _host_part(named.name)
        if info.guid and guid_hosts and info.guid in guid_hosts:
            return guid_hosts[info.guid]
        desc = info.description or device
        if VENDOR_DEFAULT.search(desc):
            return device
        return _host_part(desc)

    def label(self, device: str, names: Names | None = None) -> str:
        """What to call a device: the ``names:`` map's name, else its name unless that is the
        vendor's default description, which gets its GUID and where it is cabled."""
        info = self.store.devices.get(device)
        named = names.get(device, info.guid if info else "") if names else None
        if named and named.name:
            return named.name
        if not VENDOR_DEFAULT.search(device):
            return device
        owner = self.inside(device)
        if owner is not None:
            return f"aggregation node of {owner}"
        guid = (info.guid if info else "") or device.rsplit(" ", 1)[-1]
        where = self._cabled_to(device)
        return f"adapter {guid}" + (f" on {where}" if where else "")

    def _cabled_to(self, device: str) -> str:
        peers = sorted(self.peers().get(device, ()))
        return peers[0] if len(peers) == 1 else ""

    # ------------------------------------------------------------------ groups
    def layout(self, devices: Iterable[str], names: Names | None = None, max_host_groups: int = 300) -> Layout:
        """The fabric view's tiers and groups of ``devices`` (see the module docstring)."""
        devices = set(devices)
        owner = {d: o for d in devices if (o := self.inside(d)) is not None}
        hosts = {d for d in devices - set(owner) if self.is_host(d)}
        switches = devices - hosts - set(owner)
        guid_hosts = self._guid_hosts()
        host_of = {d: self.host_of(d, names, guid_hosts) for d in hosts}
        tier = self.tiers(switches, hosts)
        top = max(tier.values(), default=0)
        groups = self._switch_groups(switches, tier, top, names)
        group_of = {m: g.id for gs in groups.values() for g in gs for m in g.members}
        group_of.update({d: group_of.get(o, o) for d, o in owner.items()})
        host_groups = self._host_groups(host_of, group_of, names, max_host_groups)
        adapters: dict[str, list[str]] = {}
        for d, h in host_of.items():
            adapters.setdefault(h, []).append(d)
        group_of.update({d: g.id for g in host_groups for h in g.members for d in adapters[h]})
        tiers = [(t, tier_name(t, top), groups.get(t, [])) for t in range(top, -1, -1) if groups.get(t)]
        return Layout(tiers, host_groups, group_of, host_of)

    def _switch_groups(self, switches: set[str], tier: dict[str, int], top: int, names: Names | None) -> dict[int, list[Group]]:
        """Per tier, its groups: a names map's place; else a pod (three tiers or more: a
        component of the leaves and spines), the plane (two tiers), or for the tiers above the
        pods, the set of pods a switch reaches."""
        placed = _named_places(switches, self.store, names)
        pods = self._pods({s for s in switches if s not in placed}, tier, top, len(switches), _shortener(switches))
        peers = self.peers()
        # A spine's position in its pod (its index in the pod's spines by name): the cores cabled
        # to the same positions form one core group (a folded Clos wires core c to spine c mod k
        # of every pod).
        position: dict[str, int] = {}
        for pod in set(pods.values()):
            for i, sp in enumerate(sorted(x for x, p in pods.items() if p == pod and tier[x] == 1)):
                position[sp] = i + 1
        key: dict[str, tuple[str, str]] = {}
        for s in switches:
            if s in placed:
                key[s] = placed[s]
            elif s in pods:
                key[s] = (pods[s], "cabling: " + ("pod" if top >= 2 else "plane"))
            elif tier[s] == 2 and (at := sorted({position[m] for m in peers.get(s, ()) if m in position})):
                key[s] = ("to spine " + _numbers(at) + " of each pod", "cabling: the spine positions it reaches")
            else:
                key[s] = (f"tier {tier[s]}", "cabling: hops from the hosts")
        return _by_key(switches, tier, key)

    def _pods(self, switches: set[str], tier: dict[str, int], top: int, total: int, short: Callable[[str], str]) -> dict[str, str]:
        """Switch -> its pod (three tiers or more: a component of the leaves and spines, named by
        its leaves' ``short`` names) or plane (two tiers: a component of the fabric)."""
        pods: dict[str, str] = {}
        if top >= 2:
            for comp in self._components({s for s in switches if tier[s] <= 1}):
                pods.update(dict.fromkeys(comp, "pod " + _span([short(s) for s in comp if tier[s] == 0] or [short(s) for s in comp])))
        else:
            for n, comp in enumerate(self._components(switches)):
                pods.update(dict.fromkeys(comp, f"plane {n + 1}" if len(comp) < total else "fabric"))
        return pods

    def _host_groups(self, host_of: dict[str, str], group_of: dict[str, str], names: Names | None,
                     max_groups: int) -> list[Group]:
        """Hosts grouped by the leaves their adapters are cabled to (a names map's place first);
        by the leaves' groups instead when that gives more than ``max_groups``."""
        peers = self.peers()
        by_host: dict[str, set[str]] = {}
        for d, h in host_of.items():
            by_host.setdefault(h, set()).update(m for m in peers.get(d, ()) if m in group_of)
        placed = {h: place for h in by_host if (place := _host_place(h, names))}

        def grouping(key_of) -> dict[str, list[str]]:
            out: dict[str, list[str]] = {}
            for h in sorted(by_host):
                out.setdefault(placed.get(h) or key_of(h), []).append(h)
            return out

        groups = grouping(lambda h: "\0".join(sorted(by_host[h])))
        why = "cabling: the same leaves"
        if len(groups) > max_groups:
            groups = grouping(lambda h: "\0".join(sorted({group_of[s] for s in by_host[h]})))
            why = "cabling: the same leaf groups"
        out = []
        for k, members in sorted(groups.items(), key=lambda kv: kv[1][0]):
            name = k if k in placed.values() else (_span(members) if len(members) > 1 else members[0])
            out.append(Group(f"h:{members[0]}", name, -1, members, "names map" if k in placed.values() else why))
        return out


def _host_part(name: str) -> str:
    m = _HOST_DEVICE.match(name.strip())
    return m.group("hostname") if m else name.strip()


def _by_key(switches: set[str], tier: dict[str, int], key: dict[str, tuple[str, str]]) -> dict[int, list[Group]]:
    """Per tier, the groups of the switches that share a (name, why) key, ordered by first member."""
    out: dict[int, dict[str, Group]] = {}
    for s in sorted(switches):
        name, why = key[s]
        t = tier[s]
        g = out.setdefault(t, {}).get(name)
        if g is None:
            g = out[t][name] = Group(f"t{t}:{name}", name, t, why=why)
        g.members.append(s)
    return {t: sorted(gs.values(), key=lambda g: g.members[0]) for t, gs in out.items()}


def _named_places(switches: set[str], store: CounterStore, names: Names | None) -> dict[str, tuple[str, str]]:
    """Switch -> (group name, "names map") where the names map gives a pod, rail or plane."""
    out: dict[str, tuple[str, str]] = {}
    if not names:
        return out
    for s in switches:
        info = store.devices.get(s)
        n = names.get(s, info.guid if info else "")
        if n is not None and (n.pod or n.rail or n.plane):
            out[s] = (" ".join(f"{k} {v}" for k, v in (("plane", n.plane), ("pod", n.pod), ("rail", n.rail)) if v), "names map")
    return out


def _host_place(host: str, names: Names | None) -> str:
    n = names.get(host) if names else None
    return " ".join(f"{k} {v}" for k, v in (("plane", n.plane), ("pod", n.pod), ("rail", n.rail)) if v) if n else ""


def _shortener(names: set[str]) -> Callable[[str], str]:
    """A name without what every name of the set shares: the prefix up to a separator
    (``MF0;``) and a model suffix from ``:`` or ``/`` (``:MQM8700/U1``), for group names."""
    ordered = sorted(names)
    if len(ordered) < 2:
        return lambda s: s
    head = _common(ordered[0], ordered[-1])
    for s in ordered:
        head = _common(head, s)
    while head and head[-1].isalnum():
        head = head[:-1]
    tail = ordered[0][::-1]
    for s in ordered:
        tail = _common(tail, s[::-1])
    tail = tail[::-1]
    cut = min((tail.find(c) for c in ":/" if c in tail), default=-1)
    tail = tail[cut:] if cut >= 0 else ""
    return lambda s: s[len(head):len(s) - len(tail)] or s


def _span(names: list[str]) -> str:
    """``first … last`` of a group of names (the last without what it shares with the first,
    cut at a separator: ``MF0;LG01-01:MQM8700/U1 … LG07-01``), or the one name."""
    names = sorted(names)
    if len(names) == 1:
        return names[0]
    a, b = names[0], names[-1]
    i = len(_common(a, b))
    while i and b[i - 1].isalnum():
        i -= 1
    shared_end = _common(a[::-1], b[::-1])[::-1]
    cut = min((shared_end.find(c) for c in ":/" if c in shared_end), default=-1)  # ":MQM8700/U1", a model
    tail = b[i:len(b) - len(shared_end) + cut] if cut >= 0 else b[i:]
    return f"{a} … {tail or b}"


def _common(a: str, b: str) -> str:
    """The longest common prefix of two strings."""
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return a[:n]


def _numbers(ns: list[int]) -> str:
    """``1``, ``1, 3`` or ``1-4``."""
    if len(ns) > 2 and ns == list(range(ns[0], ns[-1] + 1)):
        return f"{ns[0]}-{ns[-1]}"
    return ", ".join(map(str, ns[:4])) + (f" +{len(ns) - 4}" if len(ns) > 4 else "")


def tier_name(t: int, top: int) -> str:
    """leaf, spine, core for the levels of a fat tree; "tier N" beyond."""
    return TIER_NAMES[t] if t < len(TIER_NAMES) and top >= t else f"tier {t}"


class FabricAnalysis(Analysis):
    """The pass's fabric layout (:attr:`layout`, the config's ``fabric:``) and shape (:attr:`shape`)."""

    name = "fabric"

    def __init__(self, params: Params | None = None) -> None:
        super().__init__(params)
        self.layout = PriorityMap()
        self.shape: FabricShape | None = None

    def update(self, ctx: DetectContext) -> None:
        self.layout = ctx.fabric
        shape = self.shape
        if shape is None or shape.store is not ctx.store or shape.topology is not ctx.topology:
            self.shape = FabricShape(ctx.store, ctx.topology)
