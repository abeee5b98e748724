"""The one internal vocabulary of counters and gauges.

Every collector maps its source's names (perfquery's ``PortXmitWait``, Arista's
``aristaPfcPriorityIndications``, NVUE's ``pause-packets``, UFM Telemetry's
``Infiniband_XmitWait_u_Ticks``...) onto these names, so the store, the detector, the
exporter, the dashboards and the alert rules never care which source fed a value.

Exported names are ``fabricmon_`` + ``metric``; counters are exported as the value the
store accumulated across wraps, saturation and resets (so Prometheus never sees a false
reset), in base units: bytes, seconds, packets.
"""

from __future__ import annotations

from dataclasses import dataclass

NAMESPACE = "fabricmon"


@dataclass(frozen=True, slots=True)
class CounterDef:
    name: str
    metric: str  # without namespace; ends in _total
    help: str
    labels: tuple[str, ...] = ()  # extra labels after device, port
    group: str = "traffic"  # exposition group: traffic, errors, pfc, ecn, drops, watchdog, transport


@dataclass(frozen=True, slots=True)
class GaugeDef:
    name: str
    metric: str
    help: str
    labels: tuple[str, ...] = ()
    group: str = "state"


_C = CounterDef
_PRIO = ("priority",)
_QUEUE = ("queue",)

COUNTERS: dict[str, CounterDef] = {
    c.name: c
    for c in [
        # Traffic, both fabric kinds. InfiniBand data words are scaled by 4 to bytes.
        _C("rx_bytes", "port_receive_bytes_total", "Data bytes received on the port (IB PortRcvData x4, IF-MIB ifHCInOctets)."),
        _C("tx_bytes", "port_transmit_bytes_total", "Data bytes transmitted by the port (IB PortXmitData x4, IF-MIB ifHCOutOctets)."),
        _C("rx_packets", "port_receive_packets_total", "Packets received on the port."),
        _C("tx_packets", "port_transmit_packets_total", "Packets transmitted by the port."),
        # Errors and discards, both fabric kinds.
        _C("rx_errors", "port_receive_errors_total", "Received packets with errors (IB PortRcvErrors, IF-MIB ifInErrors).", group="errors"),
        _C("tx_errors", "port_transmit_errors_total", "Packets that could not be transmitted because of errors (IF-MIB ifOutErrors).", group="errors"),
        _C("rx_discards", "port_receive_discards_total", "Received packets discarded without error (IF-MIB ifInDiscards).", group="drops"),
        _C("tx_discards", "port_transmit_discards_total", "Outbound packets discarded (IB PortXmitDiscards: port down, congestion, HOQ timeout; IF-MIB ifOutDiscards).", group="drops"),
        _C("symbol_errors", "port_symbol_errors_total", "Minor link errors detected on one or more physical lanes (IB SymbolErrorCounter).", group="errors"),
        _C("link_error_recovery", "port_link_error_recovery_total", "Successful link retrains (IB LinkErrorRecoveryCounter).", group="errors"),
        _C("link_downed", "port_link_downed_total", "Times the link went down after failing to recover (IB LinkDownedCounter).", group="errors"),
        _C("rx_remote_physical_errors", "port_receive_remote_physical_errors_total", "Packets received marked with the EBP delimiter (IB PortRcvRemotePhysicalErrors).", group="errors"),
        _C("rx_switch_relay_errors", "port_receive_switch_relay_errors_total", "Packets the switch could not forward (IB PortRcvSwitchRelayErrors).", group="errors"),
        _C("tx_constraint_errors", "port_transmit_constraint_errors_total", "Packets not transmitted because of constraints (IB PortXmitConstraintErrors).", group="errors"),
        _C("rx_constraint_errors", "port_receive_constraint_errors_total", "Packets received that violated constraints (IB PortRcvConstraintErrors).", group="errors"),
        _C("local_link_integrity_errors", "port_local_link_integrity_errors_total", "Local physical errors beyond threshold (IB LocalLinkIntegrityErrors).", group="errors"),
        _C("excessive_buffer_overrun_errors", "port_excessive_buffer_overrun_errors_total", "Consecutive flow-control update periods with buffer overrun (IB ExcessiveBufferOverrunErrors).", group="errors"),
        _C("vl15_dropped", "port_vl15_dropped_total", "Subnet-management packets dropped for lack of resources (IB VL15Dropped).", group="drops"),
        _C("qp1_dropped", "port_qp1_dropped_total", "QP1 (general service) packets dropped (IB QP1Dropped).", group="drops"),
        # InfiniBand congestion.
        _C("xmit_wait", "port_transmit_wait_ticks_total", "Ticks during which the port had data to send but sent none (IB PortXmitWait; tick length is device-defined).", group="traffic"),
        # Ethernet PFC, per priority. rx = pause frames received (this port is paused); tx = sent (this port pauses its peer).
        _C("pfc_rx_pause_frames", "pfc_receive_pause_frames_total", "PFC pause frames received per priority (the port is being paused; may include XON).", _PRIO, "pfc"),
        _C("pfc_tx_pause_frames", "pfc_transmit_pause_frames_total", "PFC pause frames sent per priority (the port is pausing its peer).", _PRIO, "pfc"),
        _C("pfc_rx_pause_seconds", "pfc_receive_pause_seconds_total", "Time the port's transmitter was paused per priority, in seconds (Onyx ms, Cisco/mlx5 us, converted).", _PRIO, "pfc"),
        _C("pfc_tx_pause_seconds", "pfc_transmit_pause_seconds_total", "Time the port kept its peer paused per priority, in seconds.", _PRIO, "pfc"),
        _C("pfc_rx_pause_transitions", "pfc_receive_pause_transitions_total", "XOFF to XON transitions seen per priority (mlx5 rx_prio_pause_transition).", _PRIO, "pfc"),
        _C("pause_rx_frames", "pause_receive_frames_total", "Link-level (802.3x) or all-priority pause frames received.", group="pfc"),
        _C("pause_tx_frames", "pause_transmit_frames_total", "Link-level (802.3x) or all-priority pause frames sent.", group="pfc"),
        # PFC watchdogs (device-confirmed storms).
        _C("pfc_watchdog_storms", "pfc_watchdog_storms_total", "PFC watchdog storm (stuck queue / deadlock) detections per priority.", _PRIO, "watchdog"),
        _C("pfc_watchdog_restores", "pfc_watchdog_restores_total", "PFC watchdog restorations per priority.", _PRIO, "watchdog"),
        _C("pfc_watchdog_drops", "pfc_watchdog_dropped_packets_total", "Packets dropped by the PFC watchdog while a queue was stormed, per priority.", _PRIO, "watchdog"),
        # Queues: ECN, drops, transmit progress per traffic class.
        _C("queue_tx_packets", "queue_transmit_packets_total", "Packets transmitted from an egress queue (traffic class).", _QUEUE, "ecn"),
        _C("queue_tx_bytes", "queue_transmit_bytes_total", "Bytes transmitted from an egress queue (traffic class).", _QUEUE, "ecn"),
        _C("ecn_marked_packets", "ecn_marked_packets_total", "Packets ECN-marked (CE) by the queue.", _QUEUE, "ecn"),
        _C("queue_drops", "queue_dropped_packets_total", "Packets dropped by an egress queue (tail drop, queue full).", _QUEUE, "drops"),
        _C("queue_no_buffer_drops", "queue_no_buffer_dropped_packets_total", "Packets dropped for lack of buffer (lossless-class violation when on a PFC priority).", _QUEUE, "drops"),
        _C("wred_drops", "queue_wred_dropped_packets_total", "Packets dropped by WRED.", _QUEUE, "drops"),
        _C("cnp_packets", "roce_cnp_packets_total", "RoCE congestion notification packets counted by the switch.", _QUEUE, "ecn"),
        _C("wjh_drops", "wjh_dropped_packets_total", "What Just Happened drops by group, reason id and traffic class (\"\" when the record has none).", ("group", "reason", "traffic_class"), "drops"),
        # Host NIC (mlx5 hw_counters and ethtool -S).
        _C("np_ecn_marked", "nic_ecn_marked_packets_total", "RoCE packets received with CE marks (np_ecn_marked_roce_packets).", group="transport"),
        _C("np_cnp_sent", "nic_cnp_sent_total", "CNPs sent by the notification point (np_cnp_sent).", group="transport"),
        _C("rp_cnp_handled", "nic_cnp_handled_total", "CNPs handled by the reaction point: the sender slowed down (rp_cnp_handled).", group="transport"),
        _C("rp_cnp_ignored", "nic_cnp_ignored_total", "CNPs ignored: DCQCN off for that QP or priority (rp_cnp_ignored).", group="transport"),
        _C("out_of_sequence", "nic_out_of_sequence_packets_total", "Out-of-sequence packets received (out_of_sequence).", group="transport"),
        _C("packet_seq_err", "nic_packet_sequence_errors_total", "NAKs for sequence gaps received (packet_seq_err).", group="transport"),
        _C("implied_nak_seq_err", "nic_implied_nak_sequence_errors_total", "Implied NAK sequence errors (implied_nak_seq_err).", group="transport"),
        _C("local_ack_timeout_err", "nic_local_ack_timeouts_total", "Local ACK timeouts: a retransmission followed (local_ack_timeout_err).", group="transport"),
        _C("rnr_nak_retry_err", "nic_rnr_nak_retry_errors_total", "Receiver-not-ready NAK retries exceeded: the application is slow (rnr_nak_retry_err).", group="transport"),
        _C("roce_adp_retrans", "nic_adaptive_retransmissions_total", "Adaptive retransmissions (roce_adp_retrans).", group="transport"),
        _C("rx_out_of_buffer", "nic_receive_out_of_buffer_total", "Packets dropped because the receive queue had no buffer: host too slow (rx_out_of_buffer, out_of_buffer).", group="drops"),
        _C("rx_discards_phy", "nic_receive_discards_phy_total", "Packets dropped in the NIC port buffer: a lossless violation (rx_discards_phy).", group="drops"),
        _C("tx_pause_storm_warning_events", "nic_pause_storm_warning_events_total", "NIC pause storm warnings: the stall passed the minor watermark.", group="watchdog"),
        _C("tx_pause_storm_error_events", "nic_pause_storm_error_events_total", "NIC pause storm errors: the NIC stopped sending pause (device-confirmed storm).", group="watchdog"),
    ]
}

_G = GaugeDef

GAUGES: dict[str, GaugeDef] = {
    g.name: g
    for g in [
        _G("link_up", "port_up", "1 when the port's link is up (IB Active, ifOperStatus up), 0 otherwise."),
        _G("link_speed_bytes", "port_speed_bytes", "Link speed in bytes per second (all lanes, effective data rate)."),
        _G("link_width_lanes", "port_width_lanes", "Active link width in lanes (IB 1x/2x/4x/8x/12x)."),
        _G("queue_occupancy_bytes", "queue_occupancy_bytes", "Bytes held in an egress queue at poll time.", _QUEUE),
        _G("pfc_watchdog_stormed", "pfc_watchdog_stormed", "1 while the switch's PFC watchdog holds the priority in storm/deadlock state.", _PRIO),
        _G("temperature_celsius", "port_module_temperature_celsius", "Module (optics) temperature in degrees Celsius."),
    ]
}


def metric_name(defn: CounterDef | GaugeDef) -> str:
    return f"{NAMESPACE}_{defn.metric}"
