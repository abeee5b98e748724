"""Lossless (RoCEv2) configuration of simulated devices, and how each source shows it.

A :class:`QosDevice` is a simulator device with a :class:`PortQos` per port; the renderers
(:mod:`tools.scenarios.render`) add what each collector would read about it:

- SNMP: the IEEE 802.1Q LLDP-EXT-DOT1-DCBX-MIB tables (local PFC enable per priority, the
  link partner's PFC TLV when the partner runs DCBX, the DSCP application-priority table),
  the OIDs of collectors/snmp/profiles/if-mib.yaml;
- NVUE: ``interface/<if>/qos/roce/status`` (the JSON form of the ``nv show interface <if> qos
  roce status`` sample, tests/data/nvue/roce-status-swp16.json), ``qos/pfc-watchdog`` (state
  and per-TC status) and ``lldp/neighbor``; where the device sets ``pfc_xoff``, the global PFC
  profile ``qos/pfc/default-global`` (the JSON form of the public ``nv show qos pfc
  default-global`` sample, tests/data/nvue/pfc-default-global.json) with that XOFF threshold on
  the lossless priorities;
- host: ``/sys/class/net/<if>/ecn/roce_{np,rp}/enable/<prio>`` and ``dcb pfc|app show dev``
  text (iproute2 dcb formats).

The defaults are the NVIDIA RoCE lossless defaults (Cumulus Linux "RDMA over Converged Ethernet -
RoCE" and the public ``qos roce status`` sample): PFC on switch priority 3, ECN on traffic classes
0 and 3 with min 153 KB / max 1.43 MB (the sample's thresholds, read as decimal bytes), trust
DSCP with DSCP 26 -> priority 3 (RoCE) and 48 -> 6 (CNP), a reserved ingress pool for priority
3, the PFC watchdog on; hosts run DCQCN (roce_np and roce_rp) on priority 3.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tools.scenarios.sim import NPRIO, Device, Port

DCBX = "1.3.111.2.802.1.1.13.1.5.32962.5.1"  # lldpXdot1dcbxObjects (LLDP-EXT-DOT1-DCBX-MIB)
POOL_BYTES = 15_160_000  # the public sample's roce-reserved-ingress size (15.16 MB)


@dataclass(frozen=True)
class PortQos:
    pfc: frozenset[int] = frozenset({3})  # priorities with PFC enabled
    ecn_tcs: frozenset[int] = frozenset({0, 3})  # switch egress TCs that mark ECN
    ecn_min: int = 153_000
    ecn_max: int = 1_430_000
    trust_dscp: bool = True
    dscp_map: tuple[tuple[int, int], ...] = ((26, 3), (48, 6))
    watchdog: bool = True
    reserved: frozenset[int] = frozenset({3})  # priorities with a reserved (lossless) ingress pool
    nic_np: frozenset[int] = frozenset({3})  # host: DCQCN notification point per priority
    nic_rp: frozenset[int] = frozenset({3})  # host: reaction point
    dcbx: bool = True  # the port sends the DCBX PFC TLV (its partner's SNMP agent shows it)


DEFAULT = PortQos()


@dataclass
class QosDevice(Device):
    """A device whose ports carry a lossless configuration (``qos``; unlisted ports: DEFAULT)."""

    qos: dict[str, PortQos] = field(default_factory=dict)
    # The global PFC profile's XOFF threshold in bytes; None: the switch shows no PFC profile
    # (then the XOFF threshold is not visible and ecn_after_pfc's configuration half is unknown).
    pfc_xoff: int | None = None

    def port_qos(self, port: str) -> PortQos:
        return self.qos.get(port, DEFAULT)


def _oid(text: str, *index: int) -> tuple[int, ...]:
    return (*(int(x) for x in text.split(".")), *index)


def _truth(on: bool) -> int:
    return 1 if on else 2  # SNMPv2-TC TruthValue


def snmp_rows(dev: QosDevice, peers: dict[tuple[str, str], PortQos | None]) -> list[tuple[tuple[int, ...], str, int]]:
    """DCBX rows of every port: local PFC enable, the partner's PFC TLV (``peers``: the peer's
    configuration, None when the peer sends no DCBX) and the DSCP application priorities."""
    rows: list[tuple[tuple[int, ...], str, int]] = []
    for p in dev.ports.values():
        q = dev.port_qos(p.name)
        for prio in range(NPRIO):
            rows.append((_oid(f"{DCBX}.2.3.2.1.2", p.index, prio), "2", _truth(prio in q.pfc)))
        peer = peers.get(p.ref)
        if peer is not None and peer.dcbx and p.up:
            for prio in range(NPRIO):  # TimeMark 0, destination address index 1, remote index 1
                rows.append((_oid(f"{DCBX}.3.3.2.1.2", 0, p.index, 1, 1, prio), "2", _truth(prio in peer.pfc)))
        if q.trust_dscp:
            for dscp, prio in q.dscp_map:  # selector asDSCPValue(5)
                rows.append((_oid(f"{DCBX}.2.4.1.3", p.index, 5, dscp), "66", prio))
    return rows


def _list(values: frozenset[int]) -> str:
    return ",".join(str(v) for v in sorted(values))


def roce_status(q: PortQos) -> dict[str, object]:
    """The JSON form of ``nv show interface <if> qos roce status`` for one port."""
    others = frozenset(range(NPRIO)) - q.reserved
    return {
        "congestion-control": {"congestion-mode": "ecn, absolute", "enabled-tc": _list(q.ecn_tcs),
                               "max-threshold": q.ecn_max, "min-threshold": q.ecn_min, "probability": 100},
        "lldp-app-tlv": {"priority": 3, "protocol-id": 4791, "selector": "UDP"},
        "pfc": {"pfc-priority": _list(q.pfc), "rx-enabled": "yes" if q.pfc else "no", "tx-enabled": "yes" if q.pfc else "no"},
        "trust": {"trust-mode": "pcp,dscp" if q.trust_dscp else "pcp"},
        "mode": "lossless" if q.pfc else "lossy",
        "pcp-dscp-mapping": {name: {"pcp": prio, "dscp": dscp, "switch-prio": prio}
                             for name, (dscp, prio) in zip(("roce", "cnp"), q.dscp_map, strict=False)},
        "pool": {
            "0": {"name": "lossy-default-ingress", "mode": "DYNAMIC", "pool-id": 2, "switch-priorities": _list(others),
                  "traffic-class": "-", "size": POOL_BYTES},
            **({"1": {"name": "roce-reserved-ingress", "mode": "DYNAMIC", "pool-id": 3, "switch-priorities": _list(q.reserved),
                      "traffic-class": "-", "size": POOL_BYTES}} if q.reserved else {}),
        },
    }


def lldp_neighbors(p: Port) -> tuple[str, object]:
    """``interface/<if>/lldp/neighbor`` of one port: its cable peer while the link is up. Every
    Cumulus switch answers it, with or without a lossless configuration: "Cumulus Linux enables
    the lldp service by default" (NVIDIA Cumulus Linux user guide, "Link Layer Discovery
    Protocol"; the JSON form is the collector's, collectors/nvue/lldp.py)."""
    neighbours = {p.peer[0]: {"remote-port": p.peer[1]}} if p.peer is not None and p.up else {}
    return (f"interface/{p.name}/lldp/neighbor", neighbours)


def nvue_bodies(dev: QosDevice) -> list[tuple[str, object]]:
    """Per port: RoCE status, PFC watchdog (state and per-TC status) and LLDP neighbours."""
    out: list[tuple[str, object]] = []
    for p in sorted(dev.ports.values(), key=lambda p: p.index):
        q = dev.port_qos(p.name)
        out.append((f"interface/{p.name}/qos/roce/status", roce_status(q)))
        out.append((f"interface/{p.name}/qos/pfc-watchdog", {
            "state": "enabled" if q.watchdog else "disabled",
            "status": {str(tc): {"status": "DEADLOCK" if p.prio[tc].wd_stormed else "OK",
                                 "deadlock-count": int(p.prio[tc].wd_storms)} for tc in range(NPRIO)},
        }))
        out.append(lldp_neighbors(p))
    if dev.pfc_xoff is not None:
        out.append(("qos/pfc/default-global", {
            "cable-length": 50, "port-buffer": "25000 B", "rx": "enable", "tx": "enable",
            "xoff-threshold": f"{dev.pfc_xoff} B", "xon-threshold": "2000 B",
            "switch-priority": {str(p): {} for p in sorted(DEFAULT.pfc)}}))
    return out


def host_files(dev: QosDevice) -> tuple[dict[str, str], dict[str, dict[str, str]]]:
    """(ECN sysfs files, the payload's ``dcb`` object) of a host's RoCE netdevs."""
    files: dict[str, str] = {}
    tools: dict[str, dict[str, str]] = {}
    for p in dev.ports.values():
        q = dev.port_qos(p.name)
        for role, on in (("np", q.nic_np), ("rp", q.nic_rp)):
            for prio in range(NPRIO):
                files[f"net/{p.name}/ecn/roce_{role}/enable/{prio}"] = f"{int(prio in on)}\n"
        pfc = " ".join(f"{prio}:{'on' if prio in q.pfc else 'off'}" for prio in range(NPRIO))
        app = ("dscp-prio " + " ".join(f"{d}:{prio}" for d, prio in q.dscp_map) + " \n") if q.trust_dscp else ""
        tools[p.name] = {"pfc": f"pfc-cap 8 macsec-bypass off delay 0 \nprio-pfc {pfc} \n", "app": app}
    return files, tools
