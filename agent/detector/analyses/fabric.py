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
* **Cable peers by the store's names** (:meth:`FabricShape.peer`): a host reports its RDMA port
  (``mlx5_0/1``) with its netdev as alias, the name LLDP gives the cable (``eth0``).
* **Links, tiers and planes** from the topology (:meth:`FabricShape.peers`,
  :meth:`FabricShape.tiers`, :meth:`FabricShape.planes`): tier 0 are the switches that face
  hosts (leaves), each further tier one switch hop away (spines, cores); a plane is a set of
  switches connected among themselves and to no other (a multi-plane or rail fabric has
  several: each is its own network). Derived where the topology shows it; nothing is guessed
  for switches without cables.

Growth (issue 29 item 3): the shape is per topology generation and store layout, so a
whole-array pass over the moved ports can take it as arrays (device code -> host flag, tier,
plane) built once per generation here.
"""

from __future__ import annotations

from fabricmon.agent.detector.base import Analysis, DetectContext, Params
from fabricmon.agent.store import CounterStore
from fabricmon.core.topology import PortRef, Topology
from fabricmon.core.vocabulary import PriorityMap

HOST_KINDS = frozenset({"host", "ca"})


class FabricShape:
    """What the store and the topology say about the fabric's devices: hosts, neighbours,
    tiers, planes. Per-cable facts are cached per topology generation; descriptions are read
    live from the store (a device described later changes its answer at once)."""

    def __init__(self, store: CounterStore, topology: Topology) -> None:
        self.store = store
        self.topology = topology
        self._cables: tuple[int, dict[str, int]] | None = None  # device -> cabled ports, per topology generation
        self._peers: tuple[int, dict[str, set[str]]] | None = None  # device -> the devices it is cabled to
        self._aliases: tuple[int, dict[PortRef, PortRef]] | None = None  # topology name -> store name, per store layout

    def is_host(self, device: str) -> bool:
        """A device the store describes as ``host``/``ca``; a polled device nobody describes is a
        switch; a device only the topology knows is a host when it has a single cable."""
        info = self.store.devices.get(device)
        if info is not None:
            return info.kind in HOST_KINDS
        if device in self.store.device_seen:
            return False  # polled but not described (NVUE describes no device): a switch source
        generation = self.topology.generation
        if self._cables is None or self._cables[0] != generation:
            cables: dict[str, int] = {}
            for (d, _), _ in self.topology.items():
                cables[d] = cables.get(d, 0) + 1
            self._cables = (generation, cables)
        return self._cables[1].get(device, 0) == 1

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
        tier = {s: 0 for s in switches if peers.get(s, set()) & hosts or not peers.get(s)}
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
        peers = self.peers()
        plane: dict[str, int] = {}
        n = -1
        for start in sorted(switches):
            if start in plane:
                continue
            n += 1
            todo = [start]
            plane[start] = n
            while todo:
                s = todo.pop()
                for m in peers.get(s, ()):
                    if m in switches and m not in plane:
                        plane[m] = n
                        todo.append(m)
        return plane


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
