"""Port labels for SNMP interfaces, unique per device, and LLDP local ports mapped onto them.

Why this exists: ifName is not unique on every agent. Extreme SLX 20.x (LibreNMS
``tests/snmpsim/slxos_slx9150.snmprec``) lists 48 front ports twice, an admin-down row and a
live row under the same ifName, and for 20 of them the live row has the higher ifIndex. A
label per name would keep one row and drop the other's traffic.

The rule, computed from one poll's payload so a replay gives the same labels:

- a name held by one ifIndex is the label;
- of the ifIndexes sharing a name, one keeps the plain name: the ifAdminStatus up(1) one,
  then the one that is a bridge port (BRIDGE-MIB dot1dBasePortIfIndex points at it), then
  the lowest ifIndex; each other one is labelled ``<name> (ifIndex <N>)``.

Only configuration picks the plain name: admin state and bridge membership change when an
operator changes them, while ifOperStatus flips with every link flap, which would swap the
labels and splice one interface's counters onto the other's series. ifIndex itself is stable
while the agent runs (RFC 2863 ifIndex: "at least from one re-initialization of the entity's
network management system to the next"). On the SLX recording the rule gives the plain name
to the live twin in every pair where one twin has traffic and the other none.
"""

from __future__ import annotations

from dataclasses import dataclass

ADMIN_UP = 1  # IF-MIB ifAdminStatus up(1)


def twin_label(name: str, if_index: int) -> str:
    return f"{name} (ifIndex {if_index})"


@dataclass(frozen=True, slots=True)
class PortNames:
    """ifIndex -> unique label, and the names that more than one ifIndex reported."""

    labels: dict[int, str]
    members: dict[str, tuple[int, ...]]  # reported name -> its ifIndexes, the plain-name holder first

    def label(self, if_index: int) -> str:
        return self.labels.get(if_index) or f"ifIndex{if_index}"

    @property
    def shared(self) -> dict[str, tuple[int, ...]]:
        """Names reported by more than one ifIndex."""
        return {name: m for name, m in self.members.items() if len(m) > 1}

    def warning(self) -> str | None:
        shared = self.shared
        if not shared:
            return None
        name, members = min(shared.items())
        return (f"interface names reported by more than one ifIndex: {len(shared)} (e.g. {name!r}: "
                f"{', '.join(map(str, members))}); ifIndex {members[0]} (admin-up, then bridge port, then lowest) "
                f"keeps the name, the others are exported as {twin_label(name, members[1])!r}")


def port_names(raw: dict[int, str], admin: dict[int, int], bridge_ports: set[int]) -> PortNames:
    """``raw``: ifIndex -> ifName (else ifDescr); ``admin``: ifIndex -> ifAdminStatus;
    ``bridge_ports``: the ifIndexes dot1dBasePortIfIndex names."""
    groups: dict[str, list[int]] = {}
    for if_index, name in raw.items():
        groups.setdefault(name, []).append(if_index)
    labels: dict[int, str] = {}
    ordered: dict[str, tuple[int, ...]] = {}
    for name, members in groups.items():
        keeper = min(members, key=lambda i: (admin.get(i) != ADMIN_UP, i not in bridge_ports, i))
        ordered[name] = (keeper, *sorted(i for i in members if i != keeper))
        for i in members:
            labels[i] = name if i == keeper else twin_label(name, i)
    return PortNames(labels=dict(sorted(labels.items())), members=ordered)


def lldp_local_port(num: int, local_texts: list[str], bridge: dict[int, int], names: PortNames) -> str:
    """The label of LLDP local port ``num``.

    LLDP-MIB LldpPortNumber: on an IEEE 802.1D/802.1Q bridge the number is the port's
    dot1dBasePort (BRIDGE-MIB dot1dBasePortIfIndex gives its ifIndex); on other systems it
    is the ifIndex. Agents differ in practice, so: the interface whose name equals
    lldpLocPortId/PortDesc when exactly one does; among twins sharing that name the one the
    bridge port (else the number as ifIndex) points at; with no name match the bridge port's
    interface, else the number as ifIndex, else the local port text itself.
    """
    via_bridge = bridge.get(num)
    for text in local_texts:
        hits = names.members.get(text, ())
        if len(hits) == 1:
            return names.label(hits[0])
        if hits:
            chosen = next((i for i in (via_bridge, num) if i in hits), hits[0])
            return names.label(chosen)
    if via_bridge is not None and via_bridge in names.labels:
        return names.label(via_bridge)
    if num in names.labels or not local_texts:
        return names.label(num)
    return local_texts[0]
