"""Where a job's host sits in the fabric: host -> its NIC ports -> the switch ports they are cabled to.

Read from the store and the topology through their public read APIs (``store.devices``,
``store.ports`` with their ``PortInfo``, ``Topology.peer``/``items``), plus the config's
``jobs.hosts`` map for what no source can see. A scheduler's host name ``H`` is matched to a
fabric device by one of these rules, in this order, and the first that gives a switch port
for a NIC wins for that NIC:

1. **config** (``jobs.hosts``): switch ports the operator wrote down.
2. **device name**: a device named ``H``, or whose name is ``H``'s short form or has it as
   its short form (``gpu001`` and ``gpu001.cluster``; two different domains never match).
   Such a device is the ``host`` source's (its ports ``mlx5_0/1``), or an LLDP neighbour's
   system name (Ethernet switches name the host and its port ``ens1f0np0``). Its ports'
   cable peers are the switch ports; a host-source port with no cable of its own is joined
   through its netdev (the port's alias, which is how LLDP names it) or through its port
   GUID (the same GUID ibnetdiscover and UFM give the HCA port).
3. **node description**: an InfiniBand CA whose node description starts with ``H`` (rdma-core's
   default NodeDescription is ``<hostname> <device>``, e.g. ``gpu001 mlx5_0``; older
   OFED writes ``gpu001 HCA-1``), as ibnetdiscover and UFM name it.

Nothing else is tried: a host none of these place is *unmatched* (reported once, and counted
in ``fabricmon_job_hosts_unmatched``), never guessed from a similar name.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from fabricmon.agent.store import CounterStore
from fabricmon.core.model import DeviceInfo
from fabricmon.core.topology import Topology

PortRef = tuple[str, str]


@dataclass(frozen=True, slots=True)
class NicPort:
    """One NIC port of a host and the switch port at the other end of its cable (None when unknown)."""

    device: str
    port: str
    switch: PortRef | None
    via: str  # which rule placed it, in words


@dataclass(slots=True)
class HostPlace:
    host: str
    nics: list[NicPort] = field(default_factory=list)
    keys: set[PortRef] = field(default_factory=set)  # every name of its NIC ports, and their switch ports

    @property
    def switch_ports(self) -> list[PortRef]:
        return [n.switch for n in self.nics if n.switch is not None]

    @property
    def placed(self) -> bool:
        """At least one NIC port is cabled to a known switch port."""
        return any(n.switch is not None for n in self.nics)


def short(name: str) -> str:
    return name.split(".", 1)[0].lower()


def same_host(a: str, b: str) -> bool:
    """Equal names, or one is the other's short form (``gpu001`` and ``gpu001.cluster``)."""
    la, lb = a.lower(), b.lower()
    if la == lb:
        return True
    return ("." not in la and la == short(lb)) or ("." not in lb and lb == short(la))


class _Index:
    """What placement looks up, built once per store layout and topology generation."""

    def __init__(self, store: CounterStore, topo: Topology) -> None:
        self.topo = topo
        self.devices: dict[str, DeviceInfo] = dict(store.devices)
        ports: dict[str, set[str]] = {}
        for d, p in store.ports:
            ports.setdefault(d, set()).add(p)
        for (d, p), _ in topo.items():
            ports.setdefault(d, set()).add(p)
        self.ports = {d: sorted(ps) for d, ps in ports.items()}
        self.by_short: dict[str, list[str]] = {}
        for name in self.ports:
            self.by_short.setdefault(short(name), []).append(name)
        self.alias: dict[PortRef, str] = {}
        self.guid_port: dict[str, PortRef] = {}
        for pk, entry in store.ports.items():
            info = entry.info
            if info is None:
                continue
            if info.alias:
                self.alias[pk] = info.alias
            kind = self.devices[pk[0]].kind if pk[0] in self.devices else ""
            if info.guid and kind == "ca":  # the fabric's view of an HCA port (ibnetdiscover, UFM)
                self.guid_port.setdefault(info.guid.lower(), pk)
        cas = {n for n, d in self.devices.items() if d.kind == "ca"}
        self.guid: dict[PortRef, str] = {pk: e.info.guid.lower() for pk, e in store.ports.items()
                                          if e.info is not None and e.info.guid and pk[0] not in cas}
        self.ca_by_host: dict[str, list[str]] = {}
        for name, info in self.devices.items():
            if info.kind == "ca" and name.split():
                self.ca_by_host.setdefault(short(name.split()[0]), []).append(name)

    def devices_named(self, host: str) -> list[str]:
        """The devices that are ``host``: the host source's first (its NIC ports have the names to show)."""
        names = [n for n in self.by_short.get(short(host), ()) if same_host(n, host)]
        return sorted(names, key=lambda n: (self.devices.get(n, DeviceInfo(n, "")).kind != "host", n))


class Placement:
    """Host -> :class:`HostPlace`, cached until the store's port layout, its device list, the
    topology or the config map changes."""

    def __init__(self, static: dict[str, list[tuple[str, str, str]]] | None = None) -> None:
        self.static = static or {}  # host -> [(switch, port, nic)], from the config
        self._stamp: tuple | None = None
        self._index: _Index | None = None
        self._places: dict[str, HostPlace] = {}

    def refresh(self, store: CounterStore, topo: Topology) -> bool:
        """Rebuild the index when its inputs changed; True when they did."""
        stamp = (store.layout, len(store.devices), topo.generation)
        if stamp == self._stamp and self._index is not None:
            return False
        self._stamp = stamp
        self._index = _Index(store, topo)
        self._places = {}
        return True

    @property
    def stamp(self) -> tuple | None:
        return self._stamp

    def place(self, host: str) -> HostPlace:
        hit = self._places.get(host)
        if hit is None:
            hit = self._places[host] = self._place(host)
        return hit

    def _place(self, host: str) -> HostPlace:
        ix = self._index
        assert ix is not None, "refresh() first"
        out = HostPlace(host)
        seen_switch: set[PortRef] = set()

        def add(nic: NicPort, *names: PortRef) -> None:
            out.keys.update(names)
            out.keys.add((nic.device, nic.port))
            if nic.switch is not None:
                out.keys.add(nic.switch)
                if nic.switch in seen_switch:
                    return
                seen_switch.add(nic.switch)
            elif any((n.device, n.port) == (nic.device, nic.port) for n in out.nics):
                return
            out.nics.append(nic)

        for name, entries in self.static.items():
            if same_host(name, host):
                for switch, port, nic in entries:
                    add(NicPort(host, nic or "", (switch, port), "config (jobs.hosts)"))
        names = ix.devices_named(host)  # the host source's FQDN and LLDP's short name are one host
        for dev in names:
            for port in ix.ports.get(dev, ()):
                peer = ix.topo.peer(dev, port)
                if peer is not None:
                    add(NicPort(dev, port, peer, "cable of the host's own port (LLDP, ibnetdiscover, UFM or links:)"))
                    continue
                alias = ix.alias.get((dev, port))
                named = next(((d, alias) for d in names if alias and ix.topo.peer(d, alias) is not None), None)
                if named is not None:
                    add(NicPort(dev, port, ix.topo.peer(*named), f"LLDP: the switch names its neighbour {named[0]} {alias}"), named)
                    continue
                ca = ix.guid_port.get(ix.guid.get((dev, port), ""))
                peer = ix.topo.peer(*ca) if ca else None
                if ca is not None and peer is not None:
                    add(NicPort(dev, port, peer, f"port GUID: the fabric's {ca[0]} port {ca[1]}"), ca)
                    continue
                if (dev, port) in ix.alias or ix.devices.get(dev, DeviceInfo(dev)).kind == "host":
                    add(NicPort(dev, port, None, "host source (no cable known)"))
        for ca in ix.ca_by_host.get(short(host), ()):
            if not same_host(ca.split()[0], host):
                continue
            for port in ix.ports.get(ca, ()):
                peer = ix.topo.peer(ca, port)
                add(NicPort(ca, port, peer, "node description (ibnetdiscover, UFM)"))
        return out
