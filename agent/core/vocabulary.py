"""The one internal vocabulary of counters and gauges.

Every collector maps its source's names (perfquery's ``PortXmitWait``, Arista's
``aristaPfcPriorityIndications``, NVUE's ``pause-packets``, UFM Telemetry's
``Infiniband_XmitWait_u_Ticks``...) onto these names, so the store, the detector, the
exporter, the dashboards and the alert rules never care which source fed a value.

Exported names are ``fabricmon_`` + ``metric``; counters are exported as the value the
store accumulated across wraps, saturation and resets (so Prometheus never sees a false
reset), in base units: bytes, seconds, packets.

Drop counters carry a :class:`DropClass`: the pipeline stage that dropped (an ingress
priority-group buffer is not an egress queue), how the counter's sub-label maps to a priority
(through the fabric's :class:`PriorityMap`), and whether a drop there on a lossless priority is
loss that must not happen. :func:`lossless_drop_counters` is the list a lossless-loss rule
iterates, so a new vendor counter is read as soon as the vocabulary describes it. Every
counter also says which rules read it (``read_by``) or that it is ``informational`` (exported
for dashboards, read by no rule); tests/test_orphan_counters.py holds every collector to that.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

NAMESPACE = "fabricmon"

# Where in the forwarding path a drop counter counts.
STAGES = ("ingress_pg", "ingress_queue", "ingress_port", "egress_queue", "nic", "wjh")
# How a drop counter's sub-label names the priority it belongs to.
#   priority: the label is the priority; queue: an egress/ingress queue, priority_to_queue;
#   pg: an ingress priority group, priority_to_pg; traffic_class: a switch traffic class
#   (Spectrum TC = egress queue), priority_to_queue; port: no split (any priority on the port).
MAPPINGS = ("priority", "queue", "pg", "traffic_class", "port")
AGGREGATE = "all"  # a sub-label for a per-port total of a per-queue counter (Cumulus discardClCounters)


@dataclass(frozen=True, slots=True)
class DropClass:
    """What a drop counter means for lossless service.

    ``lossless``: a drop here attributable to a lossless (PFC) priority is loss that must not
    happen (headroom, buffer or PFC misconfiguration); on a lossy priority the same drop (tail,
    WRED) is normal congestion control. ``label`` is the sub-label carrying the queue, PG,
    traffic class or priority (None for ``port``); ``only`` restricts the counter to rows whose
    other labels have these values (WJH: only the buffer group is a buffer drop); the other
    rows are informational (exported and charted, read by no loss rule).
    """

    stage: str
    maps_by: str
    lossless: bool = True
    label: str | None = None
    only: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        if self.stage not in STAGES or self.maps_by not in MAPPINGS:
            raise ValueError(f"drop class: stage {self.stage!r} / mapping {self.maps_by!r} not in {STAGES} / {MAPPINGS}")


@dataclass(frozen=True, slots=True)
class CounterDef:
    name: str
    metric: str  # without namespace; ends in _total
    help: str
    labels: tuple[str, ...] = ()  # extra labels after device, port
    group: str = "traffic"  # exposition group: traffic, errors, pfc, ecn, drops, watchdog, transport
    drop: DropClass | None = None
    # A per-port total of a per-class counter (sub-label ``all``) that rules do not read: they
    # read the per-class rows; the total is exported for dashboards.
    aggregate_informational: bool = False
    read_by: tuple[str, ...] = ()  # detector rules that read it
    informational: bool = False  # exported and charted, read by no rule on purpose


@dataclass(frozen=True, slots=True)
class GaugeDef:
    name: str
    metric: str
    help: str
    labels: tuple[str, ...] = ()
    group: str = "state"
    read_by: tuple[str, ...] = ()
    informational: bool = False


_C = CounterDef
_PRIO = ("priority",)
_QUEUE = ("queue",)
_PG = ("pg",)
_INFO = {"informational": True}
_CFG: dict[str, Any] = {"group": "config", "read_by": ("misconfig",)}  # configuration gauges, read by the checklist
_PFC_RULES = ("pfc_storm", "pfc_deadlock")
_IB_RULES = ("credit_deadlock", "congestion")


def _drop(stage: str, maps_by: str, label: str | None = None, **kw: Any) -> DropClass:
    return DropClass(stage, maps_by, label=label, **kw)


_EGRESS_Q = _drop("egress_queue", "queue", "queue")

COUNTERS: dict[str, CounterDef] = {
    c.name: c
    for c in [
        # Traffic, both fabric kinds. InfiniBand data words are scaled by 4 to bytes.
        _C("rx_bytes", "port_receive_bytes_total", "Data bytes received on the port (IB PortRcvData x4, IF-MIB ifHCInOctets).", **_INFO),
        _C("tx_bytes", "port_transmit_bytes_total", "Data bytes transmitted by the port (IB PortXmitData x4, IF-MIB ifHCOutOctets).",
           read_by=("pfc_storm", "pfc_deadlock", "congestion", "credit_deadlock")),
        _C("rx_packets", "port_receive_packets_total", "Packets received on the port.", read_by=("packet_loss",)),
        _C("tx_packets", "port_transmit_packets_total", "Packets transmitted by the port.",
           read_by=("pfc_storm", "pfc_deadlock", "congestion")),
        # Errors and discards, both fabric kinds.
        _C("rx_errors", "port_receive_errors_total", "Received packets with errors (IB PortRcvErrors, IF-MIB ifInErrors).", group="errors",
           **_INFO),
        _C("tx_errors", "port_transmit_errors_total", "Packets that could not be transmitted because of errors (IF-MIB ifOutErrors).",
           group="errors", **_INFO),
        _C("rx_discards", "port_receive_discards_total", "Received packets discarded without error (IF-MIB ifInDiscards).", group="drops",
           **_INFO),
        _C("tx_discards", "port_transmit_discards_total",
           "Outbound packets discarded (IB PortXmitDiscards: port down, congestion, HOQ timeout; IF-MIB ifOutDiscards).", group="drops",
           read_by=("packet_loss", "credit_deadlock")),
        _C("symbol_errors", "port_symbol_errors_total", "Minor link errors detected on one or more physical lanes (IB SymbolErrorCounter).",
           group="errors", read_by=("link_degraded",)),
        _C("link_error_recovery", "port_link_error_recovery_total", "Successful link retrains (IB LinkErrorRecoveryCounter).",
           group="errors", read_by=("link_flap", "link_degraded")),
        _C("link_downed", "port_link_downed_total", "Times the link went down after failing to recover (IB LinkDownedCounter).",
           group="errors", read_by=("link_flap", "link_degraded")),
        _C("rx_remote_physical_errors", "port_receive_remote_physical_errors_total",
           "Packets received marked with the EBP delimiter (IB PortRcvRemotePhysicalErrors).", group="errors", **_INFO),
        _C("rx_switch_relay_errors", "port_receive_switch_relay_errors_total",
           "Packets the switch could not forward (IB PortRcvSwitchRelayErrors).", group="errors", **_INFO),
        _C("tx_constraint_errors", "port_transmit_constraint_errors_total",
           "Packets not transmitted because of constraints (IB PortXmitConstraintErrors).", group="errors", **_INFO),
        _C("rx_constraint_errors", "port_receive_constraint_errors_total",
           "Packets received that violated constraints (IB PortRcvConstraintErrors).", group="errors", **_INFO),
        _C("local_link_integrity_errors", "port_local_link_integrity_errors_total",
           "Local physical errors beyond threshold (IB LocalLinkIntegrityErrors).", group="errors", **_INFO),
        _C("excessive_buffer_overrun_errors", "port_excessive_buffer_overrun_errors_total",
           "Consecutive flow-control update periods with buffer overrun (IB ExcessiveBufferOverrunErrors).", group="errors",
           read_by=("packet_loss",)),
        _C("vl15_dropped", "port_vl15_dropped_total", "Subnet-management packets dropped for lack of resources (IB VL15Dropped).",
           group="drops", **_INFO),
        _C("qp1_dropped", "port_qp1_dropped_total", "QP1 (general service) packets dropped (IB QP1Dropped).", group="drops", **_INFO),
        # InfiniBand congestion.
        _C("xmit_wait", "port_transmit_wait_ticks_total",
           "Ticks during which the port had data to send but sent none (IB PortXmitWait; tick length is device-defined).", group="traffic",
           read_by=("credit_deadlock", "congestion", "packet_loss")),
        # Ethernet PFC, per priority. rx = pause frames received (this port is paused); tx = sent (this port pauses its peer).
        _C("pfc_rx_pause_frames", "pfc_receive_pause_frames_total",
           "PFC pause frames received per priority (the port is being paused; may include XON).", _PRIO, "pfc", read_by=_PFC_RULES),
        _C("pfc_tx_pause_frames", "pfc_transmit_pause_frames_total", "PFC pause frames sent per priority (the port is pausing its peer).",
           _PRIO, "pfc", read_by=_PFC_RULES),
        _C("pfc_rx_pause_seconds", "pfc_receive_pause_seconds_total",
           "Time the port's transmitter was paused per priority, in seconds (Onyx ms, Cisco/mlx5 us, converted).", _PRIO, "pfc",
           read_by=(*_PFC_RULES, "congestion")),
        _C("pfc_tx_pause_seconds", "pfc_transmit_pause_seconds_total", "Time the port kept its peer paused per priority, in seconds.",
           _PRIO, "pfc", read_by=(*_PFC_RULES, "congestion")),
        _C("pfc_rx_pause_transitions", "pfc_receive_pause_transitions_total",
           "XOFF to XON transitions seen per priority (mlx5 rx_prio_pause_transition).", _PRIO, "pfc", read_by=_PFC_RULES),
        _C("pause_rx_frames", "pause_receive_frames_total", "Link-level (802.3x) or all-priority pause frames received.", group="pfc",
           **_INFO),
        _C("pause_tx_frames", "pause_transmit_frames_total", "Link-level (802.3x) or all-priority pause frames sent.", group="pfc",
           **_INFO),
        # PFC watchdogs (device-confirmed storms).
        _C("pfc_watchdog_storms", "pfc_watchdog_storms_total", "PFC watchdog storm (stuck queue / deadlock) detections per priority.",
           _PRIO, "watchdog", read_by=_PFC_RULES),
        _C("pfc_watchdog_restores", "pfc_watchdog_restores_total", "PFC watchdog restorations per priority.", _PRIO, "watchdog", **_INFO),
        _C("pfc_watchdog_drops", "pfc_watchdog_dropped_packets_total",
           "Packets dropped by the PFC watchdog while a queue was stormed, per priority.", _PRIO, "watchdog", read_by=_PFC_RULES),
        # Queues: ECN, drops, transmit progress per traffic class.
        _C("queue_tx_packets", "queue_transmit_packets_total", "Packets transmitted from an egress queue (traffic class).", _QUEUE, "ecn",
           read_by=(*_PFC_RULES, "congestion")),
        _C("queue_tx_bytes", "queue_transmit_bytes_total", "Bytes transmitted from an egress queue (traffic class).", _QUEUE, "ecn",
           read_by=_PFC_RULES),
        _C("ecn_marked_packets", "ecn_marked_packets_total", "Packets ECN-marked (CE) by the queue.", _QUEUE, "ecn",
           read_by=("congestion",), aggregate_informational=True),
        _C("queue_drops", "queue_dropped_packets_total", "Packets dropped by an egress queue (tail drop, queue full).", _QUEUE, "drops",
           drop=_EGRESS_Q, read_by=("packet_loss", *_PFC_RULES)),
        _C("queue_no_buffer_drops", "queue_no_buffer_dropped_packets_total",
           "Packets dropped for lack of buffer (lossless-class violation when on a PFC priority).", _QUEUE, "drops", drop=_EGRESS_Q,
           read_by=("packet_loss", *_PFC_RULES)),
        _C("wred_drops", "queue_wred_dropped_packets_total", "Packets dropped by WRED.", _QUEUE, "drops", drop=_EGRESS_Q,
           read_by=("packet_loss",)),
        _C("cnp_packets", "roce_cnp_packets_total", "RoCE congestion notification packets counted by the switch.", _QUEUE, "ecn", **_INFO),
        _C("wjh_drops", "wjh_dropped_packets_total",
           "What Just Happened drops by group, reason id and traffic class (\"\" when the record has none).",
           ("group", "reason", "traffic_class"), "drops", drop=_drop("wjh", "traffic_class", "traffic_class", only=(("group", "buffer"),)),
           read_by=("packet_loss",)),
        # Ingress buffers. Spectrum implements lossless service on ingress priority-group
        # buffers (headroom absorbs what arrives after XOFF), so undersized headroom or a
        # shared-pool shortfall shows up here, not in an egress queue (MELLANOX-QOS-MIB
        # mlnxQosPgTable NoBufferDiscard .6 / SharedBufferDiscard .7, verified in the MIB).
        _C("pg_no_buffer_drops", "pg_no_buffer_dropped_packets_total",
           "Packets dropped at an ingress priority group for lack of buffer (headroom exhausted after XOFF).", _PG, "drops",
           drop=_drop("ingress_pg", "pg", "pg"), read_by=("packet_loss",)),
        _C("pg_shared_buffer_drops", "pg_shared_buffer_dropped_packets_total",
           "Packets dropped at an ingress priority group because the shared buffer pool was exhausted.", _PG, "drops",
           drop=_drop("ingress_pg", "pg", "pg"), read_by=("packet_loss",)),
        # ARISTA-QUEUE-MIB aristaIngressQueueCounterTable PktsDropped (.3): ingress (VOQ) drops per queue.
        _C("ingress_queue_drops", "ingress_queue_dropped_packets_total",
           "Packets dropped by an ingress queue (virtual output queue) per traffic class.", _QUEUE, "drops",
           drop=_drop("ingress_queue", "queue", "queue"), read_by=("packet_loss",)),
        # CUMULUS-COUNTERS-MIB discardClCounters clBufferOverflowDiscards (.3): ingress buffer
        # overflow for the whole port, no priority split.
        _C("ingress_buffer_overflow_drops", "ingress_buffer_overflow_dropped_packets_total",
           "Packets dropped because the port's ingress buffer overflowed (all priorities).", group="drops",
           drop=_drop("ingress_port", "port"), read_by=("packet_loss",)),
        # Host NIC traffic per priority (mlx5 ethtool -S rx_prio<p>_bytes / _packets, tx_prio<p>_...,
        # kernel en_stats.c): the share of each class on the port (is its traffic all lossless?)
        # and how much a paused priority drained.
        _C("prio_rx_bytes", "priority_receive_bytes_total", "Bytes received per priority (mlx5 rx_prio<p>_bytes).", _PRIO,
           read_by=("packet_loss", "pfc_storm")),
        _C("prio_rx_packets", "priority_receive_packets_total", "Packets received per priority (mlx5 rx_prio<p>_packets).", _PRIO,
           read_by=("packet_loss",)),
        _C("prio_tx_bytes", "priority_transmit_bytes_total", "Bytes transmitted per priority (mlx5 tx_prio<p>_bytes).", _PRIO,
           read_by=("packet_loss",)),
        _C("prio_tx_packets", "priority_transmit_packets_total", "Packets transmitted per priority (mlx5 tx_prio<p>_packets).",
           _PRIO, read_by=("packet_loss",)),
        # mlx5 rx_prio<p>_buf_discard: the NIC's receive buffer dropped packets of that priority
        # (kernel mlx5 counters.rst), so the drop names its class.
        _C("prio_rx_buffer_drops", "nic_priority_buffer_dropped_packets_total",
           "Packets the NIC's receive buffer dropped, per priority (mlx5 rx_prio<p>_buf_discard).", _PRIO, "drops",
           drop=_drop("nic", "priority", "priority"), read_by=("packet_loss",)),
        # Host NIC (mlx5 hw_counters and ethtool -S).
        _C("np_ecn_marked", "nic_ecn_marked_packets_total", "RoCE packets received with CE marks (np_ecn_marked_roce_packets).",
           group="transport", **_INFO),
        _C("np_cnp_sent", "nic_cnp_sent_total", "CNPs sent by the notification point (np_cnp_sent).", group="transport", **_INFO),
        _C("rp_cnp_handled", "nic_cnp_handled_total", "CNPs handled by the reaction point: the sender slowed down (rp_cnp_handled).",
           group="transport", **_INFO),
        _C("rp_cnp_ignored", "nic_cnp_ignored_total", "CNPs ignored: DCQCN off for that QP or priority (rp_cnp_ignored).",
           group="transport", **_INFO),
        _C("out_of_sequence", "nic_out_of_sequence_packets_total", "Out-of-sequence packets received (out_of_sequence).", group="transport",
           read_by=("packet_loss",)),
        _C("packet_seq_err", "nic_packet_sequence_errors_total", "NAKs for sequence gaps received (packet_seq_err).", group="transport",
           read_by=("packet_loss",)),
        _C("implied_nak_seq_err", "nic_implied_nak_sequence_errors_total", "Implied NAK sequence errors (implied_nak_seq_err).",
           group="transport", **_INFO),
        _C("local_ack_timeout_err", "nic_local_ack_timeouts_total",
           "Local ACK timeouts: a retransmission followed (local_ack_timeout_err).", group="transport", read_by=("packet_loss",)),
        _C("rnr_nak_retry_err", "nic_rnr_nak_retry_errors_total",
           "Receiver-not-ready NAK retries exceeded: the application is slow (rnr_nak_retry_err).", group="transport", **_INFO),
        _C("roce_adp_retrans", "nic_adaptive_retransmissions_total", "Adaptive retransmissions (roce_adp_retrans).", group="transport",
           **_INFO),
        _C("rx_out_of_buffer", "nic_receive_out_of_buffer_total",
           "Packets dropped because the receive queue had no buffer: host too slow (rx_out_of_buffer, out_of_buffer).", group="drops",
           drop=_drop("nic", "port"), read_by=("packet_loss",)),
        _C("rx_discards_phy", "nic_receive_discards_phy_total",
           "Packets dropped in the NIC port buffer: a lossless violation (rx_discards_phy).", group="drops", drop=_drop("nic", "port"),
           read_by=("packet_loss",)),
        _C("tx_pause_storm_warning_events", "nic_pause_storm_warning_events_total",
           "NIC pause storm warnings: the stall passed the minor watermark.", group="watchdog", read_by=("pfc_storm",)),
        _C("tx_pause_storm_error_events", "nic_pause_storm_error_events_total",
           "NIC pause storm errors: the NIC stopped sending pause (device-confirmed storm).", group="watchdog", read_by=("pfc_storm",)),
    ]
}

_G = GaugeDef

GAUGES: dict[str, GaugeDef] = {
    g.name: g
    for g in [
        _G("link_up", "port_up", "1 when the port's link is up (IB Active, ifOperStatus up), 0 otherwise.",
           read_by=("link_flap", "link_degraded", "pfc_storm")),
        _G("link_speed_bytes", "port_speed_bytes", "Link speed in bytes per second (all lanes, effective data rate).",
           read_by=("link_degraded", "credit_deadlock", "congestion")),
        _G("link_width_lanes", "port_width_lanes", "Active link width in lanes (IB 1x/2x/4x/8x/12x).", read_by=("link_degraded",)),
        # What the port can train to, where a source reports it (UFM's supported/enabled
        # width and speed): the reference of a lasting degradation (rules/link_degraded.py).
        _G("link_width_rated_lanes", "port_width_rated_lanes",
           "The widest link width the port can train to: the widest it supports and has enabled (UFM supported_width, enabled_width).",
           read_by=("link_degraded",)),
        _G("link_speed_rated_bytes", "port_speed_rated_bytes",
           "The link rate the port can train to, in bytes per second: its fastest supported and enabled lane speed at its rated "
           "width (UFM supported_speed, enabled_speed).", read_by=("link_degraded",)),
        # PortSamplesControl.Tick (perfquery -c): XmitWait's tick is Tick+1 bytes of transmit
        # time (NVIDIA/ib-traffic-monitor#3: 7 on current generations, 31 on legacy ones).
        _G("samples_control_tick", "port_samples_control_tick",
           "PortSamplesControl.Tick as the device reports it (perfquery -c): one XmitWait tick is Tick+1 bytes of transmit time (of the "
           "port on Quantum and later, of one lane on Switch-IB and older).", read_by=_IB_RULES),
        _G("queue_occupancy_bytes", "queue_occupancy_bytes", "Bytes held in an egress queue at poll time.", _QUEUE, read_by=_PFC_RULES),
        _G("pg_occupancy_bytes", "pg_occupancy_bytes",
           "Bytes held in an ingress priority-group buffer at poll time (Onyx PG QueueDepth; unit inferred).", _PG, **_INFO),
        _G("pfc_watchdog_stormed", "pfc_watchdog_stormed", "1 while the switch's PFC watchdog holds the priority in storm/deadlock state.",
           _PRIO, read_by=_PFC_RULES),
        _G("temperature_celsius", "port_module_temperature_celsius", "Module (optics) temperature in degrees Celsius.", **_INFO),
        # Lossless configuration state (issue 19). An absent gauge means the source cannot see
        # the setting: the checklist says "unknown", never "pass".
        _G("pfc_enabled", "port_pfc_enabled",
           "1 when PFC is enabled on the priority on this port (operational/local configuration), 0 when disabled.", _PRIO, **_CFG),
        _G("pfc_peer_enabled", "port_pfc_peer_enabled",
           "The link partner's PFC enable per priority as received by DCBX (LLDP remote PFC TLV).", _PRIO, **_CFG),
        _G("pfc_watchdog_enabled", "port_pfc_watchdog_enabled",
           "1 when the PFC (deadlock/storm) watchdog is active on the priority, 0 when off.", _PRIO, **_CFG),
        _G("ecn_enabled", "port_ecn_enabled", "1 when ECN marking is enabled on the egress queue (traffic class), 0 when off.", _QUEUE,
           **_CFG),
        _G("ecn_min_threshold_bytes", "port_ecn_min_threshold_bytes", "ECN/WRED minimum marking threshold of the egress queue, in bytes.",
           _QUEUE, **_CFG),
        _G("ecn_max_threshold_bytes", "port_ecn_max_threshold_bytes", "ECN/WRED maximum marking threshold of the egress queue, in bytes.",
           _QUEUE, **_CFG),
        _G("pfc_xoff_threshold_bytes", "port_pfc_xoff_threshold_bytes", "Ingress priority-group XOFF threshold, in bytes.", _PG, **_CFG),
        _G("headroom_bytes", "port_headroom_bytes", "Buffer headroom reserved for the ingress priority group, in bytes.", _PG, **_CFG),
        _G("nic_ecn_enabled", "port_nic_ecn_enabled",
           "1 when the NIC's RoCE ECN is on for the priority, as notification point (np) or reaction point (rp).", ("priority", "role"),
           **_CFG),
        _G("qos_trust_dscp", "port_qos_trust_dscp", "1 when the port classifies by DSCP (L3 trust), 0 when by PCP (L2 trust).", **_CFG),
        _G("dscp_priority", "port_dscp_priority", "The priority a DSCP value maps to on this port.", ("dscp",), **_CFG),
    ]
}
# The configuration gauges: the store notes which ports' configuration changed, so the checklist
# re-checks those and not every port of every poll.
CONFIG_GAUGES = frozenset(name for name, g in GAUGES.items() if g.group == "config")


def metric_name(defn: CounterDef | GaugeDef) -> str:
    return f"{NAMESPACE}_{defn.metric}"


# ----------------------------------------------------------------------------- priorities

@dataclass(frozen=True, slots=True)
class PriorityMap:
    """The fabric's lossless priorities and where each priority lands in a switch.

    ``priority_to_queue`` (egress queue = traffic class) and ``priority_to_pg`` (ingress
    priority group) are identity for a priority they do not list: that is the default
    Spectrum/Onyx, Arista and NX-OS RoCE mapping (switch priority n -> TC n, PG n). RoCE's
    conventional lossless priority is 3 (NVIDIA "RoCE configuration" guides, DSCP 26 -> 3).
    """

    lossless: tuple[int, ...] = (3,)
    priority_to_queue: Mapping[int, int] = field(default_factory=dict)
    priority_to_pg: Mapping[int, int] = field(default_factory=dict)

    def queue(self, priority: int) -> int:
        return self.priority_to_queue.get(priority, priority)

    def pg(self, priority: int) -> int:
        return self.priority_to_pg.get(priority, priority)

    def priorities_of(self, drop: DropClass, value: Any) -> tuple[int, ...]:
        """The priorities a drop counter's sub-label value belongs to: all 8 for a port total
        or a row that does not say its class (a WJH buffer record without ``traffic_class``)."""
        if drop.maps_by == "port" or value is None or str(value) in (AGGREGATE, ""):
            return tuple(range(8))
        try:
            n = int(value)
        except (TypeError, ValueError):
            return ()
        if drop.maps_by == "priority":
            return (n,)
        to = self.pg if drop.maps_by == "pg" else self.queue
        return tuple(p for p in range(8) if to(p) == n)


def lossless_drop_counters() -> tuple[CounterDef, ...]:
    """Every drop counter a drop of which on a lossless priority is loss that must not happen."""
    return tuple(c for c in COUNTERS.values() if c.drop is not None and c.drop.lossless)


def lossless_priorities_hit(defn: CounterDef, sub: tuple[Any, ...], pmap: PriorityMap) -> tuple[int, ...]:
    """The lossless priorities one sample of a drop counter is attributable to.

    Empty when the row is not a drop of that kind (a WJH record outside the buffer group) or
    lands only on lossy priorities (tail and WRED drops there are normal). A port total
    (``maps_by`` port, or the ``all`` aggregate) returns every lossless priority: the drop
    may be on one of them, and the rule says so in its evidence.
    """
    drop = defn.drop
    if drop is None or not drop.lossless:
        return ()
    labels = dict(zip(defn.labels, sub, strict=False))
    if any(str(labels.get(k, "")).lower() != v for k, v in drop.only):
        return ()
    value = labels.get(drop.label) if drop.label else None
    return tuple(p for p in pmap.priorities_of(drop, value) if p in pmap.lossless)
