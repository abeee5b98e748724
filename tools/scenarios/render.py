"""Render simulator state as the raw payloads a collector would have received.

- SNMP: snmprec text (``OID|TYPE|VALUE``, numeric OID order) with the system group, IF-MIB,
  LLDP and the vendor PFC/ECN/queue/watchdog tables the SNMP profiles walk (collectors/snmp/profiles/*.yaml);
- host: ``{"files": {...}, "ethtool": {"eth0": TEXT}}`` (mlx5 hw_counters and ethtool -S);
- a :class:`tools.scenarios.qos.QosDevice` also shows its lossless configuration to each source;
- InfiniBand: ``ibnetdiscover`` default-format text and ``perfquery -x`` blocks.
"""

from __future__ import annotations

import zlib

from tools.scenarios import qos
from tools.scenarios.sim import NPRIO, Device, Fabric, Port

C32 = 2**32
C64 = 2**64
LOSSLESS = (3,)

SYS_DESCR = {
    "arista": "Arista Networks EOS version 4.31.2F running on an Arista Networks DCS-7060DX5-64S",
    "cisco": "Cisco NX-OS(tm) Nexus9000 C9364D-GX2A, Software (NXOS 64-bit), Version 10.3(4a)",
    "onyx": "Mellanox Onyx SN4700, Onyx 3.10.4206",
    "cumulus": "Cumulus-Linux 5.9.2 (Linux Kernel 6.1.94-1+cl5.9.2u6)",
    "sonic": "SONiC Software Version: SONiC.202311.1 - HwSku: Mellanox-SN4700-O8C48 - Distribution: Debian 12.5 - Kernel: 6.1.0-11-2-amd64",
    "ieee8021-pfc": "Dell EMC Networking OS10 Enterprise, Version 10.5.5.0",
}
SYS_OID = {
    "arista": "1.3.6.1.4.1.30065.1.3011.7060.4288.64",
    "cisco": "1.3.6.1.4.1.9.12.3.1.3.2334",
    "onyx": "1.3.6.1.4.1.33049.2.1.1.1.29",
    "cumulus": "1.3.6.1.4.1.40310",
    "sonic": "1.3.6.1.4.1.8072.3.2.10",
    "ieee8021-pfc": "1.3.6.1.4.1.674.11000.5000.100.2.1.13",
}


def _oid(text: str, *index: int) -> tuple[int, ...]:
    return (*(int(x) for x in text.split(".")), *index)


class _Rec:
    """Accumulates varbinds; renders them in numeric OID order."""

    def __init__(self) -> None:
        self.rows: list[tuple[tuple[int, ...], str, str]] = []

    def add(self, oid: tuple[int, ...], tag: str, value: object) -> None:
        if tag == "70":
            value = int(value) % C64  # type: ignore[call-overload]
        elif tag in ("65", "66", "67"):
            value = int(value) % C32  # type: ignore[call-overload]
        self.rows.append((oid, tag, str(value)))

    def text(self) -> str:
        self.rows.sort(key=lambda r: r[0])
        return "".join(f"{'.'.join(map(str, o))}|{t}|{v}\n" for o, t, v in self.rows)


def render_snmp(fabric: Fabric, dev: Device, t: float, offsets: dict[str, float] | None = None) -> dict[str, str]:
    """One SNMP poll of an Ethernet switch. ``offsets`` adds a constant to named Counter32
    columns (used to place a counter just below its 2^32 wrap): ``pfc_requests:<port>`` and
    ``pfc_indications:<port>`` (IEEE8021-PFC), ``if_in_discards:<port>`` and
    ``if_out_discards:<port>`` (IF-MIB ifInDiscards / ifOutDiscards, Counter32 in RFC 2863)."""
    offsets = offsets or {}
    prof = dev.profile
    r = _Rec()
    r.add(_oid("1.3.6.1.2.1.1.1.0"), "4", dev.sys_descr or SYS_DESCR[prof])
    r.add(_oid("1.3.6.1.2.1.1.2.0"), "6", dev.sys_oid or SYS_OID[prof])
    r.add(_oid("1.3.6.1.2.1.1.3.0"), "67", round((t - dev.boot_t) * 100))
    r.add(_oid("1.3.6.1.2.1.1.5.0"), "4", dev.name)
    for p in dev.ports.values():
        i = p.index
        c = p.c
        r.add(_oid("1.3.6.1.2.1.2.2.1.8", i), "2", 1 if p.up else 2)
        r.add(_oid("1.3.6.1.2.1.2.2.1.13", i), "65", c["in_discards"] + offsets.get(f"if_in_discards:{p.name}", 0))
        r.add(_oid("1.3.6.1.2.1.2.2.1.14", i), "65", c["in_errors"])
        r.add(_oid("1.3.6.1.2.1.2.2.1.19", i), "65", c["out_discards"] + offsets.get(f"if_out_discards:{p.name}", 0))
        r.add(_oid("1.3.6.1.2.1.2.2.1.20", i), "65", c["out_errors"])
        r.add(_oid("1.3.6.1.2.1.31.1.1.1.1", i), "4", p.name)
        r.add(_oid("1.3.6.1.2.1.31.1.1.1.6", i), "70", c["in_octets"])
        r.add(_oid("1.3.6.1.2.1.31.1.1.1.7", i), "70", c["in_pkts"])
        r.add(_oid("1.3.6.1.2.1.31.1.1.1.10", i), "70", c["out_octets"])
        r.add(_oid("1.3.6.1.2.1.31.1.1.1.11", i), "70", c["out_pkts"])
        r.add(_oid("1.3.6.1.2.1.31.1.1.1.15", i), "66", int(p.speed_gbps * 1000))
        r.add(_oid("1.0.8802.1.1.2.1.3.7.1.3", i), "4", p.name)
        if p.peer is not None and p.up:
            r.add(_oid("1.0.8802.1.1.2.1.4.1.1.6", 0, i, 1), "2", 5)  # lldpRemPortIdSubtype interfaceName
            r.add(_oid("1.0.8802.1.1.2.1.4.1.1.7", 0, i, 1), "4", p.peer[1])
            r.add(_oid("1.0.8802.1.1.2.1.4.1.1.8", 0, i, 1), "4", p.peer[1])
            r.add(_oid("1.0.8802.1.1.2.1.4.1.1.9", 0, i, 1), "4", p.peer[0])
        _VENDOR[prof](r, p, offsets, dev)
    if isinstance(dev, qos.QosDevice):  # lossless configuration: the DCBX tables (tools/scenarios/qos.py)
        peers = {p.ref: _peer_qos(fabric, p) for p in dev.ports.values()}
        for oid, tag, value in qos.snmp_rows(dev, peers):
            r.add(oid, tag, value)
    return {"snmprec": r.text()}


def _peer_qos(fabric: Fabric, p: Port) -> qos.PortQos | None:
    peer = fabric.devices[p.peer[0]] if p.peer is not None else None
    return peer.port_qos(p.peer[1]) if isinstance(peer, qos.QosDevice) and p.peer is not None else None


def _arista(r: _Rec, p: Port, offsets: dict[str, float], dev: Device) -> None:
    """PFC rows are per priority; queue rows show the priority the device maps to that queue."""
    i = p.index
    prio_of = {dev.queue_map.get(pr, pr): pr for pr in range(NPRIO)}
    for q in range(NPRIO):
        s = p.prio[q]
        sq = p.prio[prio_of[q]]
        r.add(_oid("1.3.6.1.4.1.30065.3.11.1.1.1.3", i, q), "70", s.tx_pause_frames)  # Requests: sent
        r.add(_oid("1.3.6.1.4.1.30065.3.11.1.1.1.4", i, q), "70", s.rx_pause_frames)  # Indications: received
        r.add(_oid("1.3.6.1.4.1.30065.3.11.1.2.1.4", i, 0, q), "2", int(s.wd_storms) % 2**31)  # StuckCount
        r.add(_oid("1.3.6.1.4.1.30065.3.11.1.2.1.5", i, 0, q), "2", int(s.wd_restores) % 2**31)  # RecoveredCount
        r.add(_oid("1.3.6.1.4.1.30065.3.13.1.9.1.3", i, q), "2", 1 if prio_of[q] in (0, 3) else 2)  # EcnQueueEnabled
        r.add(_oid("1.3.6.1.4.1.30065.3.13.1.9.1.4", i, q), "70", sq.ecn_marked)
        r.add(_oid("1.3.6.1.4.1.30065.3.6.1.2.1.4", i, q, 0), "70", sq.q_tx_pkts)
        r.add(_oid("1.3.6.1.4.1.30065.3.6.1.2.1.5", i, q, 0), "70", sq.q_tx_bytes)
        r.add(_oid("1.3.6.1.4.1.30065.3.6.1.2.1.6", i, q, 0), "70", sq.q_drops)
        r.add(_oid("1.3.6.1.4.1.30065.3.6.1.2.1.9", i, q, 0), "70", sq.nobuf_drops)
        if "arista_ingress" in dev.extras:  # ARISTA-QUEUE-MIB aristaIngressQueueCounterTable PktsDropped
            r.add(_oid("1.3.6.1.4.1.30065.3.6.1.1.1.3", i, q), "70", sq.ingress_q_drops)


def _cisco(r: _Rec, p: Port, offsets: dict[str, float], dev: Device) -> None:
    i = p.index
    r.add(_oid("1.3.6.1.4.1.9.9.813.1.1.1.1", i), "70", sum(s.tx_pause_frames for s in p.prio))
    r.add(_oid("1.3.6.1.4.1.9.9.813.1.1.1.2", i), "70", sum(s.rx_pause_frames for s in p.prio))
    for q in range(NPRIO):
        s = p.prio[q]
        r.add(_oid("1.3.6.1.4.1.9.9.813.1.2.1.2", i, q), "70", s.tx_pause_frames)
        r.add(_oid("1.3.6.1.4.1.9.9.813.1.2.1.3", i, q), "70", s.rx_pause_frames)
        state = (2 if s.wd_stormed else 1) if q in LOSSLESS else 3
        r.add(_oid("1.3.6.1.4.1.9.9.813.1.3.1.2", i, q), "2", state)
        r.add(_oid("1.3.6.1.4.1.9.9.813.1.3.1.3", i, q), "70", s.wd_storms)
        r.add(_oid("1.3.6.1.4.1.9.9.813.1.3.1.4", i, q), "70", s.wd_restores)
        r.add(_oid("1.3.6.1.4.1.9.9.813.1.3.1.5", i, q), "70", s.wd_drops)
        r.add(_oid("1.3.6.1.4.1.9.9.813.1.4.1.2", i, q), "70", s.rx_pause_us)
        r.add(_oid("1.3.6.1.4.1.9.9.813.1.4.1.3", i, q), "70", s.tx_pause_us)


def _sonic(r: _Rec, p: Port, offsets: dict[str, float], dev: Device) -> None:
    """sonic-snmpagent: cpfcIf (priority 3 only, its known bug) and cpfcIfPriority tables;
    csqIfQosGroupStats egress rows (ifIndex, 2, queue + 1, counter id) for 8 unicast + 8
    multicast queues: ids 1/2/5 unicast pkts/bytes/dropped pkts, 3/4/7 multicast (no multicast
    traffic here: 0); dropped bytes (6/8) are not modelled."""
    i = p.index
    r.add(_oid("1.3.6.1.4.1.9.9.813.1.1.1.1", i), "70", p.prio[3].tx_pause_frames)
    r.add(_oid("1.3.6.1.4.1.9.9.813.1.1.1.2", i), "70", p.prio[3].rx_pause_frames)
    for q in range(NPRIO):
        r.add(_oid("1.3.6.1.4.1.9.9.813.1.2.1.2", i, q), "70", p.prio[q].tx_pause_frames)
        r.add(_oid("1.3.6.1.4.1.9.9.813.1.2.1.3", i, q), "70", p.prio[q].rx_pause_frames)
        s = p.prio[q]
        for cid, value in ((1, s.q_tx_pkts), (2, s.q_tx_bytes), (3, 0), (4, 0), (5, s.q_drops), (7, 0)):
            r.add(_oid("1.3.6.1.4.1.9.9.580.1.5.5.1.4", i, 2, q + 1, cid), "70", value)


def _onyx(r: _Rec, p: Port, offsets: dict[str, float], dev: Device) -> None:
    i = p.index
    for q in range(NPRIO):
        s = p.prio[q]
        if "onyx_pg" in dev.extras:  # mlnxQosPgTable, PG n = priority n: QueueDepth .5, NoBuffer .6, SharedBuffer .7
            r.add(_oid("1.3.6.1.4.1.33049.15.1.3.1.5", i, q), "70", s.pg_occupancy)
            r.add(_oid("1.3.6.1.4.1.33049.15.1.3.1.6", i, q), "70", s.pg_nobuf_drops)
            r.add(_oid("1.3.6.1.4.1.33049.15.1.3.1.7", i, q), "70", s.pg_shared_drops)
        r.add(_oid("1.3.6.1.4.1.33049.15.1.2.1.3", i, q), "70", s.rx_pause_frames)
        r.add(_oid("1.3.6.1.4.1.33049.15.1.2.1.4", i, q), "70", s.rx_pause_us // 1000)  # ms
        r.add(_oid("1.3.6.1.4.1.33049.15.1.2.1.5", i, q), "70", s.tx_pause_frames)
        r.add(_oid("1.3.6.1.4.1.33049.15.1.2.1.6", i, q), "70", s.tx_pause_us // 1000)
        r.add(_oid("1.3.6.1.4.1.33049.15.1.4.1.3", i, q), "70", s.q_tx_pkts)
        r.add(_oid("1.3.6.1.4.1.33049.15.1.4.1.4", i, q), "70", s.q_tx_bytes)
        r.add(_oid("1.3.6.1.4.1.33049.15.1.4.1.6", i, q), "70", s.occupancy)  # UnicastQueueDepth (C64 in the MIB)
        r.add(_oid("1.3.6.1.4.1.33049.15.1.4.1.8", i, q), "70", s.nobuf_drops)
        r.add(_oid("1.3.6.1.4.1.33049.15.1.4.1.9", i, q), "70", 0)
    r.add(_oid("1.3.6.1.4.1.33049.15.1.5.1.2", i), "70", sum(s.rx_pause_frames for s in p.prio))
    r.add(_oid("1.3.6.1.4.1.33049.15.1.5.1.3", i), "70", sum(s.tx_pause_frames for s in p.prio))


def _cumulus(r: _Rec, p: Port, offsets: dict[str, float], dev: Device) -> None:
    i = p.index
    r.add(_oid("1.3.6.1.4.1.40310.2.2.3.1.1", i), "4", p.name)
    r.add(_oid("1.3.6.1.4.1.40310.2.2.3.1.2", i), "70", 0)  # link-level (802.3x) pause: not used
    r.add(_oid("1.3.6.1.4.1.40310.2.2.3.1.3", i), "70", 0)
    for q in range(NPRIO):
        r.add(_oid("1.3.6.1.4.1.40310.2.2.3.1", 4 + 2 * q, i), "70", p.prio[q].rx_pause_frames)
        r.add(_oid("1.3.6.1.4.1.40310.2.2.3.1", 5 + 2 * q, i), "70", p.prio[q].tx_pause_frames)
    r.add(_oid("1.3.6.1.4.1.40310.2.1.2.1.1", i), "4", p.name)
    r.add(_oid("1.3.6.1.4.1.40310.2.1.2.1.3", i), "70", p.c["ingress_overflow"])  # clBufferOverflowDiscards
    r.add(_oid("1.3.6.1.4.1.40310.2.1.2.1.6", i), "70", sum(s.q_drops for s in p.prio))


def _ieee(r: _Rec, p: Port, offsets: dict[str, float], dev: Device) -> None:
    """IEEE8021-PFC-MIB: Counter32 totals, no priority split."""
    i = p.index
    r.add(_oid("1.3.111.2.802.1.1.21.1.1.1.2", i), "65", sum(s.tx_pause_frames for s in p.prio) + offsets.get(f"pfc_requests:{p.name}", 0))
    r.add(_oid("1.3.111.2.802.1.1.21.1.1.1.3", i), "65", sum(s.rx_pause_frames for s in p.prio) + offsets.get(f"pfc_indications:{p.name}", 0))


_VENDOR = {"arista": _arista, "cisco": _cisco, "sonic": _sonic, "onyx": _onyx, "cumulus": _cumulus, "ieee8021-pfc": _ieee}
PROFILES = tuple(_VENDOR)


# ------------------------------------------------------------------------------------- host

HW_COUNTERS = {
    "np_ecn_marked_roce_packets": "np_ecn_marked",
    "np_cnp_sent": "np_cnp_sent",
    "rp_cnp_handled": "rp_cnp_handled",
    "rp_cnp_ignored": None,
    "out_of_sequence": "out_of_sequence",
    "packet_seq_err": "packet_seq_err",
    "implied_nak_seq_err": None,
    "local_ack_timeout_err": "local_ack_timeout_err",
    "rnr_nak_retry_err": None,
    "roce_adp_retrans": None,
    "out_of_buffer": "rx_out_of_buffer",
}


def render_host(dev: Device, sysfs: bool = False, fabric: Fabric | None = None) -> dict[str, object]:
    """A host NIC poll: mlx5 RDMA hw_counters files and ``ethtool -S eth0`` (PFC on priority 3).

    ``sysfs`` adds what a real ``/sys/class/infiniband`` walk also holds: device and port
    attributes (the netdev link, so ethtool counters land on ``mlx5_0/1`` too) and the PMA
    ``counters/`` (extended table: 64-bit data in 4-byte words, packets; error counters).

    Device ``extras`` change what the NIC prints: ``no_storm_counters`` leaves out
    ``tx_pause_storm_{warning,error}_events`` (a NIC without the ``pfcc_mask``/``stall_detect``
    capabilities has no such lines: kernel mlx5 counters.rst); ``prio_stats`` adds the
    per-priority traffic counters of every priority (kernel en_stats.c ``rx_prio%d_bytes`` /
    ``_packets``, ``tx_prio%d_bytes`` / ``_packets``; rx from the cable peer's per-priority
    transmit, so it needs ``fabric``) and, with ``prio_buf_discard`` too, the NIC's
    receive-buffer drops per priority (``rx_prio%d_buf_discard``). Those drops
    (``StepPlan.pg_nobuf_drops`` on the host port) count in ``rx_discards_phy`` whether or not
    the NIC breaks them out."""
    p = next(iter(dev.ports.values()))
    c = p.c
    base = "infiniband/mlx5_0/ports/1/hw_counters/"
    files = {base + name: f"{int(c[key]) if key else 0}\n" for name, key in HW_COUNTERS.items()}
    if sysfs:
        files.update(_host_sysfs(dev, p))
    s = p.prio[3]
    prio_stats = "prio_stats" in dev.extras
    buf_discards = sum(st.pg_nobuf_drops for st in p.prio)  # the NIC's receive buffer: all in rx_discards_phy
    stats = [
        ("rx_packets", c["in_pkts"]), ("tx_packets", c["out_pkts"]),
        ("rx_bytes", c["in_octets"]), ("tx_bytes", c["out_octets"]),
        ("rx_out_of_buffer", c["rx_out_of_buffer"]), ("rx_discards_phy", c["rx_discards_phy"] + buf_discards),
        ("tx_discards_phy", 0),
        ("rx_prio3_pause", s.rx_pause_frames),
        ("rx_prio3_pause_duration", s.rx_pause_us), ("rx_prio3_pause_transition", s.rx_pause_transitions),
        ("tx_prio3_pause", s.tx_pause_frames), ("tx_prio3_pause_duration", s.tx_pause_us),
    ]
    if "no_storm_counters" not in dev.extras:
        stats += [("tx_pause_storm_warning_events", c["tx_pause_storm_warning"]),
                  ("tx_pause_storm_error_events", c["tx_pause_storm_error"])]
    if prio_stats:
        if fabric is None or p.peer is None:
            raise ValueError(f"{dev.name}: prio_stats needs the fabric and a cabled port")
        peer = fabric.port(p.peer)
        for q in range(NPRIO):
            stats += [(f"rx_prio{q}_bytes", peer.prio[q].q_tx_bytes), (f"rx_prio{q}_packets", peer.prio[q].q_tx_pkts),
                      (f"tx_prio{q}_bytes", p.prio[q].q_tx_bytes), (f"tx_prio{q}_packets", p.prio[q].q_tx_pkts)]
            if "prio_buf_discard" in dev.extras:
                stats.append((f"rx_prio{q}_buf_discard", p.prio[q].pg_nobuf_drops))
    text = "NIC statistics:\n" + "".join(f"     {k}: {int(v)}\n" for k, v in stats)
    payload: dict[str, object] = {"files": files, "ethtool": {p.name: text}}
    if isinstance(dev, qos.QosDevice):  # lossless configuration: ECN sysfs and dcb (tools/scenarios/qos.py)
        ecn, payload["dcb"] = qos.host_files(dev)
        files.update(ecn)
    return payload


def _host_sysfs(dev: Device, p: Port) -> dict[str, str]:
    c = p.c
    port = "infiniband/mlx5_0/ports/1/"
    guid = f"{dev.guid or 0x1070FD0300B00000 + zlib.crc32(dev.name.encode()) % 0x10000 * 0x10:016x}"
    files = {
        "infiniband/mlx5_0/node_guid": ":".join(guid[i:i + 4] for i in range(0, 16, 4)) + "\n",
        "infiniband/mlx5_0/hca_type": "MT4129\n",  # ConnectX-7
        "infiniband/mlx5_0/fw_ver": "28.39.1002\n",
        "infiniband/mlx5_0/board_id": "MT_0000000838\n",
        f"infiniband/mlx5_0/device/net/{p.name}/dev_port": "0\n",
        port + "state": "4: ACTIVE\n" if p.up else "1: DOWN\n",
        port + "phys_state": "5: LinkUp\n" if p.up else "3: Disabled\n",
        port + "rate": f"{p.speed_gbps:g} Gb/sec (4X HDR)\n",
        port + "link_layer": "Ethernet\n",
        port + "gid_attrs/ndevs/0": f"{p.name}\n",
    }
    values = {
        "port_xmit_data": c["out_octets"] // 4, "port_rcv_data": c["in_octets"] // 4,
        "port_xmit_packets": c["out_pkts"], "port_rcv_packets": c["in_pkts"],
        "unicast_xmit_packets": c["out_pkts"], "unicast_rcv_packets": c["in_pkts"],
        "multicast_xmit_packets": 0, "multicast_rcv_packets": 0,
        "symbol_error": c["symbol_errors"], "link_error_recovery": c["link_error_recovery"],
        "link_downed": c["link_downed"], "port_rcv_errors": c["rcv_errors"], "port_xmit_discards": c["xmit_discards"],
        "port_rcv_remote_physical_errors": 0, "port_rcv_switch_relay_errors": 0, "port_xmit_constraint_errors": 0,
        "port_rcv_constraint_errors": 0, "local_link_integrity_errors": 0, "excessive_buffer_overrun_errors": 0,
        "VL15_dropped": 0, "port_xmit_wait": c["xmit_wait"],
    }
    files.update({f"{port}counters/{k}": f"{int(v)}\n" for k, v in values.items()})
    return files


# ------------------------------------------------------------------------------- InfiniBand

def _g(guid: int) -> str:
    return f"{guid:016x}"


# ibnetdiscover devid per ASIC generation: the Mellanox part number in hex. Verified in public
# topologies: 0xd2f0 Quantum (MQM8700), 0xd2f2 Quantum-2 (MQM9700), 0xcb20 Switch-IB (EDR);
# rdma-core ibdiag_common.c lists 0xcf08 Switch-IB 2. 0xc738 SwitchX-2 (MT51000) and 0xd2f4
# Quantum-3 (MT54004) are inferred from the same numbering.
DEVID = {"quantum": 0xD2F0, "quantum2": 0xD2F2, "quantum3": 0xD2F4, "switchib2": 0xCF08, "switchib": 0xCB20,
         "switchx": 0xC738, "connectx": 0x1021}
SPEED_NAME = {56.0: "FDR", 100.0: "EDR", 200.0: "HDR", 400.0: "NDR", 800.0: "XDR"}  # 4x link rates, Gb/s


def _rate(p: Port) -> str:
    return f"{p.lanes}x{SPEED_NAME.get(p.speed_gbps * 4 / p.lanes, 'HDR')}"


def render_ibnetdiscover(fabric: Fabric, when: str) -> str:
    """``ibnetdiscover`` default format: switches first, then CAs; only linked ports."""
    ib = [d for d in fabric.devices.values() if d.kind in ("ib_switch", "ib_ca")]
    switches = [d for d in ib if d.kind == "ib_switch"]
    cas = [d for d in ib if d.kind == "ib_ca"]
    first = switches[0]
    out = [f"#\n# Topology file: generated on {when}\n#\n# Initiated from node {_g(first.guid)} port {_g(first.guid)}\n\n"]
    for d in switches:
        out.append(f"vendid=0x2c9\ndevid=0x{DEVID.get(d.asic, 0xCF08):x}\nsysimgguid=0x{d.guid:x}\nswitchguid=0x{d.guid:x}({d.guid:x})\n")
        out.append(f'Switch\t36 "S-{_g(d.guid)}"\t\t# "{d.name}" enhanced port 0 lid {d.lid} lmc 0\n')
        for p in sorted(d.ports.values(), key=lambda p: p.index):
            if p.peer is None or not p.up:
                continue
            peer_dev = fabric.devices[p.peer[0]]
            peer = fabric.port(p.peer)
            if peer_dev.kind == "ib_switch":
                out.append(f'[{p.index}]\t"S-{_g(peer_dev.guid)}"[{peer.index}]\t\t# "{peer_dev.name}" lid {peer_dev.lid} {_rate(p)}\n')
            else:
                pg = peer_dev.guid + peer.index
                out.append(f'[{p.index}]\t"H-{_g(peer_dev.guid)}"[{peer.index}]({pg:x}) \t\t# "{peer_dev.name}" lid {peer_dev.lid} {_rate(p)}\n')
        out.append("\n")
    for d in cas:
        out.append(f"vendid=0x2c9\ndevid=0x{DEVID.get(d.asic, 0x101B):x}\nsysimgguid=0x{d.guid:x}\ncaguid=0x{d.guid:x}\n")
        out.append(f'Ca\t1 "H-{_g(d.guid)}"\t\t# "{d.name}"\n')
        for p in d.ports.values():
            if p.peer is None or not p.up:
                continue
            sw = fabric.devices[p.peer[0]]
            sp = fabric.port(p.peer)
            out.append(f'[{p.index}]({d.guid + p.index:x}) \t"S-{_g(sw.guid)}"[{sp.index}]\t\t# lid {d.lid} lmc 0 "{sw.name}" lid {sw.lid} {_rate(p)}\n')
        out.append("\n")
    return "".join(out)


PERFQUERY_FIELDS = (
    "PortSelect", "CounterSelect", "PortXmitData", "PortRcvData", "PortXmitPkts", "PortRcvPkts",
    "PortUnicastXmitPkts", "PortUnicastRcvPkts", "PortMulticastXmitPkts", "PortMulticastRcvPkts",
    "CounterSelect2", "SymbolErrorCounter", "LinkErrorRecoveryCounter", "LinkDownedCounter", "PortRcvErrors",
    "PortRcvRemotePhysicalErrors", "PortRcvSwitchRelayErrors", "PortXmitDiscards", "PortXmitConstraintErrors",
    "PortRcvConstraintErrors", "LocalLinkIntegrityErrors", "ExcessiveBufferOverrunErrors", "VL15Dropped",
    "PortXmitWait", "QP1Dropped",
)


# Basic PortCounters widths (IBA PortCounters attribute): saturating, not wrapping.
BASIC_FIELDS = (
    ("SymbolErrorCounter", "symbol_errors", 16), ("LinkErrorRecoveryCounter", "link_error_recovery", 8),
    ("LinkDownedCounter", "link_downed", 8), ("PortRcvErrors", "rcv_errors", 16),
    ("PortRcvRemotePhysicalErrors", "", 16), ("PortRcvSwitchRelayErrors", "", 16),
    ("PortXmitDiscards", "xmit_discards", 16), ("PortXmitConstraintErrors", "", 8), ("PortRcvConstraintErrors", "", 8),
    ("CounterSelect2", "", 0), ("LocalLinkIntegrityErrors", "", 4), ("ExcessiveBufferOverrunErrors", "", 4),
    ("QP1Dropped", "", 16), ("VL15Dropped", "", 16), ("PortXmitData", "out_octets/4", 32), ("PortRcvData", "in_octets/4", 32),
    ("PortXmitPkts", "out_pkts", 32), ("PortRcvPkts", "in_pkts", 32), ("PortXmitWait", "xmit_wait", 32),
)


def basic_block(lid: int, p: Port) -> str:
    """``perfquery`` (basic PortCounters): every counter saturates at its width."""
    lines = [f"# Port counters: Lid {lid} port {p.index} (CapMask: 0x1300)\n",
             f"PortSelect:{'.' * 22}{p.index}\n", f"CounterSelect:{'.' * 19}0x0000\n"]
    for name, key, width in BASIC_FIELDS:
        if not width:
            lines.append(f"{name}:{'.' * (32 - len(name))}0x00\n")
            continue
        raw = p.c[key[:-2]] / 4 if key.endswith("/4") else (p.c[key] if key else 0)
        lines.append(f"{name}:{'.' * (32 - len(name))}{min(int(raw), 2**width - 1)}\n")
    return "".join(lines)


def perfquery_block(lid: int, p: Port, old_firmware: bool = False) -> str:
    c = p.c
    values: dict[str, object] = dict.fromkeys(PERFQUERY_FIELDS, 0)
    values.update({
        "PortSelect": p.index, "CounterSelect": "0x0000", "CounterSelect2": "0x00000000",
        "PortXmitData": int(c["out_octets"] // 4), "PortRcvData": int(c["in_octets"] // 4),
        "PortXmitPkts": int(c["out_pkts"]), "PortRcvPkts": int(c["in_pkts"]),
        "PortUnicastXmitPkts": int(c["out_pkts"]), "PortUnicastRcvPkts": int(c["in_pkts"]),
        "SymbolErrorCounter": int(c["symbol_errors"]), "LinkErrorRecoveryCounter": int(c["link_error_recovery"]),
        "LinkDownedCounter": int(c["link_downed"]), "PortRcvErrors": int(c["rcv_errors"]),
        "PortXmitDiscards": int(c["xmit_discards"]), "PortXmitWait": int(c["xmit_wait"]),
    })
    cap2 = "0x0000002"
    if old_firmware:  # no CapMask2 bit 1: the 64-bit errors and XmitWait print as 0
        cap2 = "0x0000000"
        values.update(dict.fromkeys(PERFQUERY_FIELDS[PERFQUERY_FIELDS.index("CounterSelect2") + 1:], 0))
        values["CounterSelect2"] = "0x00000000"
    lines = [f"# Port extended counters: Lid {lid} port {p.index} (CapMask: 0x5300 CapMask2: {cap2})\n"]
    for name in PERFQUERY_FIELDS:
        v = values[name]
        if isinstance(v, int):
            v %= C64
        lines.append(f"{name}:{'.' * (32 - len(name))}{v}\n")
    return "".join(lines)


def render_perfquery_runs(fabric: Fabric) -> list[str]:
    """One ``perfquery -x -l`` run per IB node (switches, then CAs), one block per linked port."""
    runs = []
    for kind in ("ib_switch", "ib_ca"):
        for d in fabric.devices.values():
            if d.kind != kind:
                continue
            linked = [p for p in sorted(d.ports.values(), key=lambda p: p.index) if p.peer is not None]
            old = d.firmware == "old"
            blocks = [perfquery_block(d.lid, p, old) for p in linked]
            if old:  # the collector adds a basic run for the counters -x cannot give
                blocks += [basic_block(d.lid, p) for p in linked]
            if blocks:
                runs.append("".join(blocks))
    return runs


# ------------------------------------------------------------------------------- NVUE

NVUE_PREFIX = "/nvue_v1/"


def _nvue(path: str, body: object) -> dict[str, object]:
    return {"method": "GET", "path": f"{NVUE_PREFIX}{path}?rev=operational", "status": 200, "body": body}


def render_nvue(dev: Device, t: float, memo: dict[str, float]) -> dict[str, object]:
    """One NVUE REST poll of a Cumulus 5.x switch: ``{"responses": [...]}`` as the nvue
    collector records it (interface list, link stats, QoS counters, LLDP neighbours, WJH buffer drops).

    WJH reports buffer drops as aggregate records (one per window, here the poll interval)
    on the egress port whose queue overflowed, with the traffic class: a tail drop is reason
    503 whichever the class (a lossy TC tail-drops as a matter of course). ``memo`` keeps the
    per-port drop totals and the time of the previous poll to form each window.
    ``carrier-transitions`` is the kernel's ``carrier_changes``: every carrier change, down or
    up, counts one (Linux ``Documentation/ABI/testing/sysfs-class-net``: "number of times the
    link has seen a change from UP to DOWN and vice versa"), so a flap within a poll is two and
    a link seen down at a poll has added one.
    """
    ports = sorted(dev.ports.values(), key=lambda p: p.index)
    window = round(t - memo["_t"]) if "_t" in memo else 10  # the WJH aggregation window: since the last poll
    memo["_t"] = t
    out: list[dict[str, object]] = [_nvue("interface", {
        p.name: {"type": "swp", "link": {"oper-status": "up" if p.up else "down", "speed": f"{int(p.speed_gbps)}G"}}
        for p in ports
    })]
    records: list[dict[str, object]] = []
    for p in ports:
        c = p.c
        out.append(_nvue(f"interface/{p.name}/link/stats", {
            "carrier-transitions": int(c["carrier_changes"]), "in-bytes": int(c["in_octets"]), "in-drops": 0,
            "in-errors": 0, "in-pkts": int(c["in_pkts"]), "out-bytes": int(c["out_octets"]),
            "out-drops": int(sum(s.q_drops for s in p.prio)), "out-errors": 0, "out-pkts": int(c["out_pkts"]),
        }))
        out.append(_nvue(f"interface/{p.name}/counters/qos", {
            "egress-queue-stats": {str(q): {"tx-frames": int(s.q_tx_pkts), "tx-bytes": int(s.q_tx_bytes),
                                            "tx-uc-buffer-discards": int(s.nobuf_drops), "wred-discards": 0}
                                   for q, s in enumerate(p.prio)},
            "pfc-stats": {str(q): {"rx-pause-frames": int(s.rx_pause_frames), "rx-pause-duration": int(s.rx_pause_us),
                                   "tx-pause-frames": int(s.tx_pause_frames), "tx-pause-duration": int(s.tx_pause_us)}
                          for q, s in enumerate(p.prio)},
        }))
        for q in range(NPRIO):  # every traffic class: WJH reports buffer drops of lossy TCs too
            key = f"{p.name}:{q}"
            total = p.prio[q].q_drops
            prev = memo.get(key)
            memo[key] = total
            if prev is not None and total > prev:
                records.append({"AggCount": int(total - prev), "DropType": "Buffer", "ReasonId": 503, "Severity": "Warning",
                                "FirstTimestamp": int(t) - window, "EndTimestamp": int(t), "EgressPort": p.name,
                                "traffic_class": q, "Reason": "Tail drop"})
    if isinstance(dev, qos.QosDevice):  # lossless configuration and LLDP (tools/scenarios/qos.py)
        out += [_nvue(path, body) for path, body in qos.nvue_bodies(dev)]
    else:  # LLDP runs on every Cumulus switch (qos.lldp_neighbors)
        out += [_nvue(*qos.lldp_neighbors(p)) for p in ports]
    out.append(_nvue("system/wjh/packet-buffer", records))
    return {"responses": out}


# ------------------------------------------------------------------------------- UFM

# UFM ``resources/systems`` model per ASIC generation, the switch systems NVIDIA sells on each
# (MQM8700 Quantum HDR, MQM9700 Quantum-2 NDR: verified in public UFM topologies, see DEVID;
# MSB7800 Switch-IB 2 EDR, MSB7700 Switch-IB EDR, SX6036 SwitchX FDR, Q3400 Quantum-3 XDR:
# inferred from NVIDIA's product names). The model string UFM prints is [U].
UFM_MODEL = {"quantum": "MQM8700", "quantum2": "MQM9700", "quantum3": "Q3400", "switchib2": "MSB7800",
             "switchib": "MSB7700", "switchx": "SX6036", "connectx": "ConnectX-7"}


def ib_port_guid(dev: Device, p: Port) -> int:
    """A port's GUID as both UFM sources name it: a switch's ports share the switch GUID; an
    HCA port has its own (node GUID + port number, as the ibnetdiscover renderer writes it)."""
    return dev.guid if dev.kind == "ib_switch" else dev.guid + p.index


def _ib_linked(fabric: Fabric) -> list[tuple[Device, Port]]:
    """Every cabled InfiniBand port, switches first (ibnetdiscover order), then HCAs."""
    out = []
    for kind in ("ib_switch", "ib_ca"):
        for d in fabric.devices.values():
            if d.kind == kind:
                out += [(d, p) for p in sorted(d.ports.values(), key=lambda p: p.index) if p.peer is not None]
    return out


def render_ufm(fabric: Fabric, prefix: str = "/ufmRest") -> dict[str, object]:
    """One UFM REST poll (collectors/ufm: ports, links, systems), the v6.20 shapes of the
    reference (fabric-reference.md section 1.5): a port object per cabled port with its state,
    ``active_speed`` (null when down) and ``active_width`` (``4x``, ``2x``), its peer and its
    ``node_description`` as ``<NodeDescription>:<port>``; a link object per cable (switch side
    first); a system per device with its model. No counters call: counters come from UFM
    Telemetry in the split the README recommends."""
    ports, links, systems = [], [], []
    for d, p in _ib_linked(fabric):
        g = f"{ib_port_guid(d, p):016x}"
        peer_dev = fabric.devices[p.peer[0]]  # type: ignore[index]
        peer = fabric.port(p.peer)  # type: ignore[arg-type]
        pg = f"{ib_port_guid(peer_dev, peer):016x}"
        up = p.up and peer.up
        ports.append({
            "guid": g, "number": p.index, "name": f"{g}_{p.index}", "dname": str(p.index), "external_number": p.index,
            "node_description": f"{d.name}:{p.index}", "system_name": d.name.split(" ")[0], "systemID": f"{d.guid:016x}",
            "lid": d.lid, "physical_state": "Link Up" if up else "Link Down", "logical_state": "Active" if up else "Down",
            "active_speed": SPEED_NAME.get(p.speed_gbps * 4 / p.lanes) if up else None,
            "active_width": f"{p.lanes}x" if up else None, "peer": f"{pg}_{peer.index}", "severity": "Info",
        })
        if d.kind == "ib_switch" and (peer_dev.kind == "ib_ca" or (d.guid, p.index) < (peer_dev.guid, peer.index)):
            links.append({"source_guid": g, "source_port": str(p.index), "destination_guid": pg,
                          "destination_port": str(peer.index), "source_port_dname": str(p.index),
                          "destination_port_dname": str(peer.index), "width": f"{p.lanes}x",
                          "name": f"{g}_{p.index}:{pg}_{peer.index}"})
    for d in fabric.devices.values():
        if d.kind not in ("ib_switch", "ib_ca"):
            continue
        systems.append({"system_guid": f"{d.guid:016x}", "name": f"{d.guid:016x}", "system_name": d.name.split(" ")[0],
                        "type": "switch" if d.kind == "ib_switch" else "host", "model": UFM_MODEL.get(d.asic or "", ""),
                        "description": d.name, "ports": [f"{ib_port_guid(d, p):016x}_{p.index}" for p in
                                                         sorted(d.ports.values(), key=lambda p: p.index) if p.peer]})
    calls = (("resources/ports", ports), ("resources/links?page_number=1&rpp=1000000000", links), ("resources/systems", systems))
    return {"responses": [{"method": "GET", "path": f"{prefix}/{path}", "status": 200, "body": body} for path, body in calls]}


UFM_TELEMETRY_PATH = "/csv/cset/converted_enterprise"
# The converted counter columns of UFM Telemetry's public sample (Mellanox/ufm_sdk_3.0
# fluentd_telemetry_plugin small_telemetry.json), in its order: (column, port counter key or
# "" for 0, divisor). MBOut/MBIn count octets / 4 like PortXmitData (UFM guide; unit [U]).
UFM_TELEMETRY_COLUMNS = (
    ("Infiniband_MBOut_u_Gb", "out_octets", 4), ("Infiniband_MBIn_u_Gb", "in_octets", 4),
    ("Infiniband_PckOut_u_Packets", "out_pkts", 1), ("Infiniband_PckIn_u_Packets", "in_pkts", 1),
    ("Infiniband_SymbolErrors_u_Errors", "symbol_errors", 1), ("Infiniband_LinkRecovers_u_Errors", "link_error_recovery", 1),
    ("Infiniband_LinkDowned_u_Errors", "link_downed", 1), ("Infiniband_RcvErrors_u_Errors", "rcv_errors", 1),
    ("Infiniband_RcvRemotePhysErrors_u_Errors", "", 1), ("Infiniband_RcvSwRelayErrors_u_Errors", "", 1),
    ("Infiniband_XmtDiscards_u_Errors", "xmit_discards", 1), ("Infiniband_XmtConstraintErrors_u_Errors", "", 1),
    ("Infiniband_RcvConstraintErrors_u_Errors", "", 1), ("Infiniband_LinkIntegrityErrors_u_Errors", "", 1),
    ("Infiniband_ExcBufOverrunErrors_u_Errors", "", 1), ("Infiniband_VL15Dropped_u_Drops", "", 1),
    ("Infiniband_XmitWait_u_Ticks", "xmit_wait", 1),
    ("hist0_u_count", "", 1), ("hist1_u_count", "", 1), ("hist2_u_count", "", 1), ("hist3_u_count", "", 1),
    ("hist4_u_count", "", 1),
)


def render_ufm_telemetry(fabric: Fabric, sampled: float) -> dict[str, object]:
    """One UFM Telemetry poll (collectors/ufm_telemetry): ``GET /csv/cset/converted_enterprise``,
    one CSV row per cabled port, identified by GUIDs only (``node_guid``, ``port_guid``,
    ``port_num``: the public sample has no node description) and stamped with the sample's
    time in microseconds (the device clock: the endpoint serves its latest sample, taken at
    ``sampled``, not when it is fetched). Counters are the 64-bit extended ones, wrapping."""
    head = ["timestamp", "source_id", "tag", "node_guid", "port_guid", "sys_image_guid", "aport", "port_num",
            *(col for col, _, _ in UFM_TELEMETRY_COLUMNS)]
    rows = [",".join(head)]
    stamp = round(sampled * 1e6)
    for d, p in _ib_linked(fabric):
        node, port = f"0x{d.guid:016x}", f"0x{ib_port_guid(d, p):016x}"
        values = [str(int(p.c[key] // div) % C64) if key else "0" for _, key, div in UFM_TELEMETRY_COLUMNS]
        rows.append(",".join([str(stamp), node, "0", node, port, node, f"{d.guid:x}_{p.index}", str(p.index), *values]))
    body = "\n".join(rows) + "\n\n"  # the last row is empty (fabric-reference.md 1.6)
    return {"responses": [{"method": "GET", "path": UFM_TELEMETRY_PATH, "status": 200, "body": body}]}


# ------------------------------------------------------------------------------- job schedulers

def render_squeue(jobs: list[tuple[int, str, str, int, float]]) -> dict[str, object]:
    """``squeue --json`` of Slurm 22.05 (openapi/v0.0.38) as the slurm collector keeps it: the
    running jobs ``(job_id, name, nodes host list, node count, start time)`` with the fields it reads. The
    shape is the one a real Slurm 22.05.8 printed (collectors/slurm/testcases/squeue_22_05)."""
    return {
        "meta": {"plugin": {"type": "openapi/v0.0.38", "name": "Slurm OpenAPI v0.0.38"},
                 "Slurm": {"version": {"major": 22, "micro": 8, "minor": 5}, "release": "22.05.8"}},
        "errors": [],
        "jobs": [{"job_id": jid, "name": name, "job_state": "RUNNING", "nodes": nodes, "node_count": count,
                  "start_time": int(start), "array_job_id": 0, "array_task_id": None, "het_job_id": 0,
                  "het_job_offset": 0, "partition": "gpu"} for jid, name, nodes, count, start in jobs],
    }


# SONiC CONFIG_DB as the scenarios configure it: PFC and the software watchdog on the lossless
# priority, the AZURE_LOSSLESS WRED profile (ECN on) on its queue (SONiC qos_config.j2 defaults).
SONIC_WRED_LOSSLESS = {"ecn": "ecn_all", "wred_green_enable": "true", "green_min_threshold": "1048576",
                       "green_max_threshold": "2097152", "green_drop_probability": "5"}


def render_gnmi(fabric: Fabric, dev: Device, t: float, memo: dict[str, float], pfcwd: bool = True) -> dict[str, object]:
    """One poll of a SONiC switch over gNMI, as the collector records it: the SAMPLE round of
    the COUNTERS_DB virtual paths (one notification per port with ``/<port>``, its
    ``/<port>/Queues`` map, 8 unicast then 8 multicast queues as sonic-snmpagent counts them,
    and ``/<port>/Pfcwd`` for the lossless queues when the watchdog runs), timestamped with the
    device time in ns. The first poll of a target also carries the initial sync of CONFIG_DB and
    of APPL_DB's LLDP neighbours (ON_CHANGE: sent once) and the ``sync_response`` markers. Counter values are redis-style
    decimal strings, as in sonic-gnmi's test data; pause durations are SAI's microseconds."""
    ts = round(t * 1e9)
    notes: list[dict[str, object]] = []
    for p in dev.ports.values():
        c = p.c
        port_hash = {
            "SAI_PORT_STAT_IF_IN_OCTETS": c["in_octets"], "SAI_PORT_STAT_IF_OUT_OCTETS": c["out_octets"],
            "SAI_PORT_STAT_IF_IN_UCAST_PKTS": c["in_pkts"], "SAI_PORT_STAT_IF_OUT_UCAST_PKTS": c["out_pkts"],
            "SAI_PORT_STAT_IF_IN_DISCARDS": c["in_discards"], "SAI_PORT_STAT_IF_OUT_DISCARDS": c["out_discards"],
            "SAI_PORT_STAT_IF_IN_ERRORS": c["in_errors"], "SAI_PORT_STAT_IF_OUT_ERRORS": c["out_errors"],
        }
        for q in range(NPRIO):
            s = p.prio[q]
            port_hash |= {f"SAI_PORT_STAT_PFC_{q}_RX_PKTS": s.rx_pause_frames, f"SAI_PORT_STAT_PFC_{q}_TX_PKTS": s.tx_pause_frames,
                          f"SAI_PORT_STAT_PFC_{q}_ON2OFF_RX_PKTS": s.rx_pause_transitions,
                          f"SAI_PORT_STAT_PFC_{q}_RX_PAUSE_DURATION_US": s.rx_pause_us,
                          f"SAI_PORT_STAT_PFC_{q}_TX_PAUSE_DURATION_US": s.tx_pause_us}
        queues: dict[str, dict[str, str]] = {}
        for q in range(2 * NPRIO):
            s = p.prio[q] if q < NPRIO else None
            queues[f"{p.name}:{q}"] = {
                "SAI_QUEUE_STAT_PACKETS": _dec(s.q_tx_pkts if s else 0), "SAI_QUEUE_STAT_BYTES": _dec(s.q_tx_bytes if s else 0),
                "SAI_QUEUE_STAT_DROPPED_PACKETS": _dec(s.q_drops if s else 0),
                "SAI_QUEUE_STAT_WRED_ECN_MARKED_PACKETS": _dec(s.ecn_marked if s else 0),
                "SAI_QUEUE_STAT_CURR_OCCUPANCY_BYTES": _dec(s.occupancy if s else 0),
            }
        updates: list[dict[str, object]] = [{"path": f"/{p.name}", "val": {"json_ietf_val": {k: _dec(v) for k, v in port_hash.items()}}},
                                            {"path": f"/{p.name}/Queues", "val": {"json_ietf_val": queues}}]
        if pfcwd:
            wd = {f"{p.name}:{q}": {
                "PFC_WD_ACTION": "drop", "PFC_WD_DETECTION_TIME": "200000", "PFC_WD_RESTORATION_TIME": "200000",
                "PFC_WD_STATUS": "stormed" if p.prio[q].wd_stormed else "operational",
                "PFC_WD_QUEUE_STATS_DEADLOCK_DETECTED": _dec(p.prio[q].wd_storms),
                "PFC_WD_QUEUE_STATS_DEADLOCK_RESTORED": _dec(p.prio[q].wd_restores),
                "PFC_WD_QUEUE_STATS_TX_DROPPED_PACKETS": _dec(p.prio[q].wd_drops),
            } for q in LOSSLESS}
            updates.append({"path": f"/{p.name}/Pfcwd", "val": {"json_ietf_val": wd}})
        notes.append({"timestamp": ts, "prefix": "/COUNTERS", "update": updates, "delete": [], "target": "COUNTERS_DB"})
    if not memo.get("synced"):
        memo["synced"] = 1.0
        lossless = ",".join(map(str, LOSSLESS))
        config = {
            "PORT_QOS_MAP": {p.name: {"pfc_enable": lossless, **({"pfcwd_sw_enable": lossless} if pfcwd else {})} for p in dev.ports.values()},
            "PFC_WD": {p.name: {"action": "drop", "detection_time": "200", "restoration_time": "200"} for p in dev.ports.values()} if pfcwd else {},
            "QUEUE": {f"{p.name}|{q}": {"scheduler": "scheduler.1", "wred_profile": "AZURE_LOSSLESS"} for p in dev.ports.values() for q in LOSSLESS},
            "WRED_PROFILE": {"AZURE_LOSSLESS": SONIC_WRED_LOSSLESS},
        }
        lldp = {p.name: {"lldp_rem_sys_name": p.peer[0], "lldp_rem_port_id": p.peer[1], "lldp_rem_port_id_subtype": "5",
                         "lldp_rem_port_desc": p.peer[1]} for p in dev.ports.values() if p.peer is not None and p.up}
        notes = [*notes, {"sync_response": True},
                 {"timestamp": ts, "prefix": "/", "update": [{"path": f"/{table}", "val": {"json_ietf_val": rows}} for table, rows in config.items()],
                  "delete": [], "target": "CONFIG_DB"}, {"sync_response": True},
                 {"timestamp": ts, "prefix": "/", "update": [
                     {"path": "/PORT_TABLE", "val": {"json_ietf_val": {p.name: {"admin_status": "up", "oper_status": "up" if p.up else "down",
                                                                                "speed": str(int(p.speed_gbps * 1000))} for p in dev.ports.values()}}},
                     {"path": "/LLDP_ENTRY_TABLE", "val": {"json_ietf_val": lldp}}],
                  "delete": [], "target": "APPL_DB"}, {"sync_response": True}]
    return {"notifications": notes}


def _dec(value: float) -> str:
    """A counter as redis keeps it: a decimal string (64-bit wrap like the SAI counter)."""
    return str(int(value) % C64)
