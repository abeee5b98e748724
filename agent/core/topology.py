"""Fabric topology: which port is cabled to which, merged from every source.

Each target owns the links its last topology-bearing payload reported (ibnetdiscover, UFM
links, LLDP); a new report from that target replaces its old one. Static ``links:`` from the
config fill what discovery cannot see. Lookups are symmetric: a link reported in one
direction answers from both ends.
"""

from __future__ import annotations

from collections.abc import Iterable

from fabricmon.core.model import Link

PortRef = tuple[str, str]


class Topology:
    def __init__(self) -> None:
        self._by_target: dict[str, list[Link]] = {}
        self._static: list[Link] = []
        self._peer: dict[PortRef, PortRef] = {}
        self.generation = 0  # bumped on every change, so rules can cache derived graphs

    def set_links(self, target: str, links: Iterable[Link]) -> None:
        self._by_target[target] = list(links)
        self._rebuild()

    def set_static(self, links: Iterable[Link]) -> None:
        self._static = list(links)
        self._rebuild()

    def drop_target(self, target: str) -> None:
        if self._by_target.pop(target, None) is not None:
            self._rebuild()

    def _rebuild(self) -> None:
        peer: dict[PortRef, PortRef] = {}
        for links in [*self._by_target.values(), self._static]:
            for ln in links:
                a, b = (ln.device, ln.port), (ln.peer_device, ln.peer_port)
                peer[a] = b
                peer[b] = a
        self._peer = peer
        self.generation += 1

    def peer(self, device: str, port: str) -> PortRef | None:
        return self._peer.get((device, port))

    def items(self) -> Iterable[tuple[PortRef, PortRef]]:
        return self._peer.items()

    def __len__(self) -> int:
        return len(self._peer)

    def links(self) -> list[Link]:
        """Every cable once (the end that sorts first is the ``device`` side)."""
        out = []
        for a, b in self._peer.items():
            if a <= b:
                out.append(Link(a[0], a[1], b[0], b[1]))
        return sorted(out, key=lambda ln: (ln.device, ln.port))
