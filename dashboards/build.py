"""Build fabricmon's Grafana dashboards and Grafana alert provisioning from code.

Run ``python -m dashboards.build`` (or ``python dashboards/build.py``) after editing this
file; it rewrites ``dashboards/grafana/*.json`` and
``dashboards/provisioning/alerting/fabricmon-alerts.yaml`` (generated from
``dashboards/prometheus/alerts.yml``, the primary alert definitions). CI regenerates into a
temp dir and fails when the committed files differ (tests/test_dashboards.py).

Needs ``grafana-foundation-sdk~=0.0.21`` (the unpinned package resolves to an old epoch build).

Every panel names the scenario of ``tests/scenarios`` in which it must show data
(:data:`PANEL_SCENARIOS`) and the exposition levels it is recommended for (:data:`PANEL_LEVELS`:
``full``, and ``health``, the level the README recommends at scale, unless it reads raw counters
that level does not export); tests/test_dashboards_prometheus.py runs each query against a real
Prometheus scraping ``fabricmon replay --serve`` of that scenario at each of its levels.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from grafana_foundation_sdk.builders import bargauge, dashboard, heatmap, prometheus, stat, statetimeline, table, timeseries
from grafana_foundation_sdk.builders.common import VizLegendOptions
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models.common import DataSourceRef, LegendDisplayMode, LegendPlacement
from grafana_foundation_sdk.models.dashboard import DataTransformerConfig, VariableRefresh, VariableSort
from grafana_foundation_sdk.models.prometheus import PromQueryFormat

ROOT = Path(__file__).resolve().parent
ALERTS_FILE = ROOT / "prometheus" / "alerts.yml"
GRAFANA_ALERTING_FILE = ROOT / "provisioning" / "alerting" / "fabricmon-alerts.yaml"
DATASOURCE_UID = "fabricmon-prometheus"  # the uid provisioned in provisioning/datasources/
DS = DataSourceRef(type_val="prometheus", uid="${datasource}")

# Label filters every fabric query applies; agent queries use $target.
DP = 'device=~"$device", port=~"$port"'
D = 'device=~"$device"'
TG = 'target=~"$target"'
RI = "[$__rate_interval]"
# A port is an InfiniBand port when it exports XmitWait (no Ethernet source has it) or, at the health
# level, which exports no raw counter, when fabricmon_port_info gives it a LID (an InfiniBand address).
IB_MARK = '(fabricmon_port_transmit_wait_ticks_total or fabricmon_port_info{lid!=""})'
IB_PORT = f"and on (instance, device, port) {IB_MARK}"
NOT_IB_PORT = f"unless on (instance, device, port) {IB_MARK}"
PEER_JOIN = "* on (instance, device, port) group_left (peer_device, peer_port) fabricmon_port_info"

# (dashboard uid, panel title) -> the scenario (tests/scenarios/<name>.jsonl.gz) in which the panel must
# show data; "" = no scenario exports its metrics yet: the live test then only checks that its queries
# parse and evaluate. (No queue-occupancy panel: only NVUE's tc-usage reports fabricmon_queue_occupancy_bytes
# and no scenario renders it, so the panel would stay empty; the gauge is still exported and queryable.)
PANEL_SCENARIOS: dict[tuple[str, str], str] = {}
# (dashboard uid, panel title) -> the exposition levels the panel is recommended for (and tested at).
PANEL_LEVELS: dict[tuple[str, str], tuple[str, ...]] = {}
BOTH = ("full", "health")
# Raw counters (or gauges of a counter group) that the health level replaces by per-port rates and
# per-target sums: such a panel needs its group at the full level (exposition.groups).
FULL = ("full",)
FULL_NOTE = " Needs the full exposition level for this counter group (exposition.groups, docs/scaling.md)."


@dataclass
class Q:
    """One PromQL target of a panel."""

    expr: str
    legend: str = ""
    instant: bool = False
    table: bool = False


@dataclass
class P:
    """A panel spec: kind (timeseries|stat|table|bargauge|heatmap|timeline), queries, unit."""

    kind: str
    title: str
    queries: list[Q]
    unit: str
    scenario: str
    description: str = ""
    w: int = 12
    h: int = 8
    max: float | None = None
    hide: list[str] = field(default_factory=list)  # table columns to hide
    levels: tuple[str, ...] = BOTH  # exposition levels it shows data at (FULL: raw counters only)


def _target(q: Q, ref: str) -> prometheus.Dataquery:
    t = prometheus.Dataquery().expr(q.expr).ref_id(ref).datasource(DS)
    if q.legend:
        t = t.legend_format(q.legend)
    if q.instant or q.table:
        t = t.instant()
    else:
        t = t.range()
    if q.table:
        t = t.format(PromQueryFormat.TABLE)
    return t


def _legend() -> VizLegendOptions:
    return VizLegendOptions().show_legend(True).display_mode(LegendDisplayMode.TABLE).placement(LegendPlacement.RIGHT).calcs(["max", "last"])


def _panel(spec: P, pid: int) -> Any:
    kind = spec.kind
    if kind == "timeseries":
        b = timeseries.Panel().legend(_legend()).fill_opacity(10)
    elif kind == "stat":
        b = stat.Panel()
    elif kind == "table":
        b = table.Panel()
        hidden = {"Time": True, "__name__": True, "job": True, **{c: True for c in spec.hide}}
        b = b.with_transformation(DataTransformerConfig(id_val="organize", options={"excludeByName": hidden}))
    elif kind == "bargauge":
        b = bargauge.Panel()
    elif kind == "heatmap":
        b = heatmap.Panel()
    elif kind == "timeline":
        b = statetimeline.Panel()
    else:
        raise ValueError(f"unknown panel kind {kind}")
    b = b.id(pid).title(spec.title).datasource(DS).unit(spec.unit).span(spec.w).height(spec.h)
    description = spec.description + (FULL_NOTE if "health" not in spec.levels else "")
    if description:
        b = b.description(description.strip())
    if kind in ("timeseries", "bargauge", "heatmap"):
        b = b.min(0)
    if spec.max is not None:
        b = b.max(spec.max)
    for i, q in enumerate(spec.queries):
        b = b.with_target(_target(q, chr(ord("A") + i)))
    return b


def _var_datasource() -> dashboard.DatasourceVariable:
    return dashboard.DatasourceVariable("datasource").label("Data source").type("prometheus")


def _var_query(name: str, label: str, query: str) -> dashboard.QueryVariable:
    return (dashboard.QueryVariable(name).label(label).datasource(DS)
            .query({"query": query, "refId": f"{name}-var", "qryType": 1})
            .definition(query).multi(True).include_all(True).all_value(".*")
            .refresh(VariableRefresh.ON_TIME_RANGE_CHANGED).sort(VariableSort.ALPHABETICAL_ASC))


def build_dashboard(uid: str, title: str, description: str, rows: list[tuple[str, list[P]]], extra_vars: list[Any] = ()) -> Any:
    """A fabricmon dashboard: datasource/device/port variables, rows of panels, stable uid."""
    d = (dashboard.Dashboard(title).uid(uid).description(description).tags(["fabricmon"]).refresh("30s")
         .time("now-1h", "now").timezone("browser").editable()
         .with_variable(_var_datasource())
         .with_variable(_var_query("device", "Device", "label_values(fabricmon_port_info, device)"))
         .with_variable(_var_query("port", "Port", 'label_values(fabricmon_port_info{device=~"$device"}, port)')))
    for v in extra_vars:
        d = d.with_variable(v)
    pid = 1
    for row_title, panels in rows:
        d = d.with_row(dashboard.Row(row_title).id(pid))
        pid += 1
        for spec in panels:
            PANEL_SCENARIOS[(uid, spec.title)] = spec.scenario
            PANEL_LEVELS[(uid, spec.title)] = spec.levels
            d = d.with_panel(_panel(spec, pid))
            pid += 1
    return d.build()


# ---------------------------------------------------------------- dashboards


def overview() -> Any:
    paused = f"(clamp_max(rate(fabricmon_pfc_receive_pause_seconds_total{{{DP}}}{RI}), 1) or fabricmon_port_pause_ratio{{{DP}}})"
    wait = f"rate(fabricmon_port_transmit_wait_ticks_total{{{DP}}}{RI})"
    tx = f"rate(fabricmon_port_transmit_bytes_total{{{DP}}}{RI})"
    r_wait = f"({wait} / ({wait} + {tx} / 4 > 0) or fabricmon_port_xmit_wait_ratio{{{DP}}})"
    tx_any = f"({tx} or fabricmon_port_transmit_bytes_per_second{{{DP}}})"
    ecn = f"rate(fabricmon_ecn_marked_packets_total{{{DP}}}{RI}) / (rate(fabricmon_queue_transmit_packets_total{{{DP}}}{RI}) > 0)"
    return build_dashboard("fabricmon-overview", "fabricmon / Fabric overview",
                           "Active findings, worst ports and fabric-wide trends for InfiniBand and RoCE Ethernet.", [
        ("Findings", [
            P("stat", "Active critical findings", [Q(f'count(fabricmon_finding_active{{severity="critical", {D}}}) or vector(0)', instant=True)],
              "none", "nic_pause_storm_arista", w=6, h=6),
            P("stat", "Active warning findings", [Q(f'count(fabricmon_finding_active{{severity="warning", {D}}}) or vector(0)', instant=True)],
              "none", "benign_heavy_load", w=6, h=6),
            P("bargauge", "Active findings by kind and severity",
              [Q(f"count by (kind, severity) (fabricmon_finding_active{{{D}}})", "{{kind}} {{severity}}", instant=True)],
              "none", "nic_pause_storm_arista", w=12, h=6),
        ]),
        ("Worst ports", [
            P("table", "Worst ports: paused share (Ethernet, per priority)",
              [Q(f"topk(10, {paused})", table=True)], "percentunit", "switch_storm_watchdog",
              "Share of time the port's transmitter was held by PFC pause, worst 10 (health level: the detector's "
              "fabricmon_port_pause_ratio).", hide=["instance"]),
            P("table", "Worst ports: XmitWait ratio (InfiniBand)",
              [Q(f"topk(10, {r_wait})", table=True)], "percentunit", "ib_credit_loop",
              "r_wait = XmitWait / (XmitWait + XmitData words): share of time with data but no credits, worst 10 "
              "(health level: the detector's f_wait, fabricmon_port_xmit_wait_ratio).", hide=["instance"]),
        ]),
        ("Throughput", [
            P("timeseries", "Fabric throughput: InfiniBand vs Ethernet", [
                Q(f"sum({tx_any} {IB_PORT})", "InfiniBand transmit"),
                Q(f"sum({tx_any} {NOT_IB_PORT})", "Ethernet transmit"),
            ], "Bps", "benign_heavy_load", "Bytes per second sent by all selected ports; a port is InfiniBand when it reports XmitWait "
              "or has a LID.", w=24),
        ]),
        ("Pause and ECN trends", [
            P("timeseries", "Paused share by priority (fabric max)", [Q(f"max by (priority) {paused}", "priority {{priority}}")],
              "percentunit", "switch_storm_watchdog", max=1),
            P("timeseries", "ECN mark ratio by queue (fabric max)",
              [Q(f"max by (queue) ({ecn} or fabricmon_queue_ecn_mark_ratio{{{DP}}})", "queue {{queue}}")],
              "percentunit", "incast_congestion", "CE-marked share of the packets each egress queue sent, worst port.", max=1),
        ]),
        ("Health: InfiniBand | Ethernet", [
            P("timeseries", "InfiniBand: XmitWait ratio (worst port)", [Q(f"max{r_wait}", "worst port")],
              "percentunit", "ib_credit_loop", w=6, max=1),
            P("timeseries", "InfiniBand: errors and discards per second", [
                Q(f"sum(rate(fabricmon_port_symbol_errors_total{{{DP}}}{RI}))", "symbol errors"),
                Q(f"sum(rate(fabricmon_port_transmit_discards_total{{{DP}}}{RI}) {IB_PORT})", "transmit discards"),
                Q(f"sum(fabricmon_port_problems_per_second{{{DP}}} {IB_PORT})", "errors and discards (health level)"),
            ], "cps", "ib_credit_loop", w=6),
            P("timeseries", "Ethernet: lossless-class drops per second", [
                Q(f"sum(rate(fabricmon_queue_no_buffer_dropped_packets_total{{{DP}}}{RI}))", "no-buffer drops"),
                Q(f"sum(rate(fabricmon_pfc_watchdog_dropped_packets_total{{{DP}}}{RI}))", "watchdog drops"),
            ], "pps", "lossless_drops_arista", w=6, levels=FULL),
            P("timeseries", "Ethernet: PFC watchdog storms", [Q(f"sum(increase(fabricmon_pfc_watchdog_storms_total{{{DP}}}{RI}))", "storms")],
              "none", "switch_storm_watchdog", w=6, levels=FULL),
        ]),
        ("Links", [
            P("stat", "Ports down", [Q(f"count(fabricmon_port_up{{{DP}}} == 0) or vector(0)", instant=True)], "none", "benign_heavy_load", w=6, h=6),
            P("stat", "Cables in topology", [Q("sum(fabricmon_topology_links)", instant=True)], "none", "benign_heavy_load", w=6, h=6),
        ]),
    ])


def ethernet() -> Any:
    prio = "{{device}} {{port}} p{{priority}}"
    queue = "{{device}} {{port}} q{{queue}}"
    ecn = f"rate(fabricmon_ecn_marked_packets_total{{{DP}}}{RI})"
    qtx = f"rate(fabricmon_queue_transmit_packets_total{{{DP}}}{RI})"
    return build_dashboard("fabricmon-ethernet", "fabricmon / Ethernet (RoCEv2)",
                           "PFC pause, ECN, PFC watchdogs, queue drops and What Just Happened drops per device, port and priority.", [
        ("PFC pause", [
            P("timeseries", "Paused share received (transmitter held) per priority",
              [Q(f"clamp_max(rate(fabricmon_pfc_receive_pause_seconds_total{{{DP}}}{RI}), 1)", prio)], "percentunit",
              "nic_pause_storm_arista", "Pause time received / wall time: 1 = the port could not send at all on that priority.", max=1, levels=FULL),
            P("timeseries", "Paused share sent (peer held) per priority",
              [Q(f"clamp_max(rate(fabricmon_pfc_transmit_pause_seconds_total{{{DP}}}{RI}), 1)", prio)], "percentunit",
              "nic_pause_storm_arista", max=1, levels=FULL),
            P("timeseries", "Pause frames received per second", [Q(f"rate(fabricmon_pfc_receive_pause_frames_total{{{DP}}}{RI})", prio)],
              "pps", "nic_pause_storm_arista", "Frame counts include XON and refreshes: prefer the paused share when it exists.", levels=FULL),
            P("timeseries", "Pause frames sent per second", [Q(f"rate(fabricmon_pfc_transmit_pause_frames_total{{{DP}}}{RI})", prio)],
              "pps", "nic_pause_storm_arista", levels=FULL),
            P("timeseries", "Detector paused share (fabricmon_port_pause_ratio)", [Q(f"fabricmon_port_pause_ratio{{{DP}}}", prio)],
              "percentunit", "switch_storm_watchdog", "The share of the last poll interval the detector used, per priority.", max=1),
            P("timeseries", "Link-level pause frames per second", [
                Q(f"rate(fabricmon_pause_receive_frames_total{{{DP}}}{RI})", "{{device}} {{port}} rx"),
                Q(f"rate(fabricmon_pause_transmit_frames_total{{{DP}}}{RI})", "{{device}} {{port}} tx"),
            ], "pps", "nic_pause_storm_sonic", levels=FULL),
        ]),
        ("ECN and congestion", [
            P("timeseries", "ECN mark ratio per queue", [Q(f"{ecn} / ({qtx} > 0)", queue)], "percentunit", "incast_congestion",
              "CE-marked share of the packets each egress queue sent.", max=1, levels=FULL),
            P("timeseries", "Detector ECN mark ratio (fabricmon_queue_ecn_mark_ratio)", [Q(f"fabricmon_queue_ecn_mark_ratio{{{DP}}}", queue)],
              "percentunit", "incast_congestion", max=1),
            P("timeseries", "Queue transmit rate", [Q(f"rate(fabricmon_queue_transmit_bytes_total{{{DP}}}{RI}) > 0", queue)], "Bps", "incast_congestion", levels=FULL),
        ]),
        ("Watchdogs", [
            P("timeseries", "PFC watchdog storms and restores", [
                Q(f"increase(fabricmon_pfc_watchdog_storms_total{{{DP}}}{RI}) > 0", "{{device}} {{port}} p{{priority}} storm"),
                Q(f"increase(fabricmon_pfc_watchdog_restores_total{{{DP}}}{RI}) > 0", "{{device}} {{port}} p{{priority}} restore"),
            ], "none", "switch_storm_watchdog", levels=FULL),
            P("timeline", "PFC watchdog state (1 = stormed)", [Q(f"fabricmon_pfc_watchdog_stormed{{{DP}}}", prio)], "none",
              "switch_storm_watchdog", levels=FULL),
            P("timeseries", "Packets dropped by PFC watchdogs", [Q(f"rate(fabricmon_pfc_watchdog_dropped_packets_total{{{DP}}}{RI}) > 0", prio)],
              "pps", "switch_storm_watchdog", levels=FULL),
            P("timeseries", "NIC pause storm events", [
                Q(f"increase(fabricmon_nic_pause_storm_warning_events_total{{{DP}}}{RI})", "{{device}} {{port}} warning"),
                Q(f"increase(fabricmon_nic_pause_storm_error_events_total{{{DP}}}{RI})", "{{device}} {{port}} error"),
            ], "none", "nic_pause_storm_arista", levels=FULL),
        ]),
        ("Drops", [
            P("timeseries", "Queue drops per second", [
                Q(f"rate(fabricmon_queue_no_buffer_dropped_packets_total{{{DP}}}{RI}) > 0", queue + " no buffer"),
                Q(f"rate(fabricmon_queue_dropped_packets_total{{{DP}}}{RI}) > 0", queue + " tail"),
                Q(f"rate(fabricmon_queue_wred_dropped_packets_total{{{DP}}}{RI}) > 0", queue + " WRED"),
            ], "pps", "lossless_drops_arista", "No-buffer drops on a PFC priority are a lossless-class violation.", levels=FULL),
            P("timeseries", "WJH drops by reason", [
                Q(f"sum by (device, group, reason, traffic_class) (rate(fabricmon_wjh_dropped_packets_total{{{D}}}{RI}))",
                  "{{device}} {{group}} {{reason}} TC{{traffic_class}}"),
            ], "pps", "wjh_buffer_drops_nvue", "What Just Happened drop records by group and reason id (503-505 on a lossless TC are buffer drops).", levels=FULL),
            P("timeseries", "Host NIC transport errors per second", [
                Q(f"rate(fabricmon_nic_out_of_sequence_packets_total{{{DP}}}{RI})", "{{device}} {{port}} out of sequence"),
                Q(f"rate(fabricmon_nic_packet_sequence_errors_total{{{DP}}}{RI})", "{{device}} {{port}} sequence NAKs"),
                Q(f"rate(fabricmon_nic_local_ack_timeouts_total{{{DP}}}{RI})", "{{device}} {{port}} local ACK timeouts"),
                Q(f"rate(fabricmon_nic_receive_discards_phy_total{{{DP}}}{RI})", "{{device}} {{port}} rx_discards_phy"),
            ], "pps", "nic_pause_storm_arista", levels=FULL),
            P("timeseries", "Host NIC CNPs per second", [
                Q(f"rate(fabricmon_nic_cnp_sent_total{{{DP}}}{RI})", "{{device}} {{port}} sent"),
                Q(f"rate(fabricmon_nic_cnp_handled_total{{{DP}}}{RI})", "{{device}} {{port}} handled"),
                Q(f"rate(fabricmon_nic_ecn_marked_packets_total{{{DP}}}{RI})", "{{device}} {{port}} CE received"),
            ], "pps", "nic_pause_storm_arista", levels=FULL),
        ]),
    ])


def infiniband() -> Any:
    port = "{{device}} {{port}}"
    wait = f"rate(fabricmon_port_transmit_wait_ticks_total{{{DP}}}{RI})"
    tx = f"rate(fabricmon_port_transmit_bytes_total{{{DP}}}{RI})"
    ratio = f"{wait} / ({wait} + {tx} / 4 > 0) or fabricmon_port_xmit_wait_ratio{{{DP}}}"
    tx_any = f"({tx} or fabricmon_port_transmit_bytes_per_second{{{DP}}})"
    rx_any = f"(rate(fabricmon_port_receive_bytes_total{{{DP}}}{RI}) or fabricmon_port_receive_bytes_per_second{{{DP}}})"

    def err(metric: str, name: str) -> Q:
        return Q(f"rate({metric}{{{DP}}}{RI}) {IB_PORT} > 0", f"{port} {name}")

    return build_dashboard("fabricmon-infiniband", "fabricmon / InfiniBand",
                           "Throughput, XmitWait congestion, discards, error counters, symbol error rate, link flaps and topology.", [
        ("Throughput and congestion", [
            P("timeseries", "Transmit throughput", [Q(f"{tx_any} {IB_PORT}", port)], "Bps", "benign_heavy_load"),
            P("timeseries", "Receive throughput", [Q(f"{rx_any} {IB_PORT}", port)], "Bps", "benign_heavy_load"),
            P("heatmap", "XmitWait ratio across ports", [Q(ratio, port)], "percentunit", "ib_credit_loop",
              "Distribution of r_wait = XmitWait / (XmitWait + XmitData words) over the selected ports (health level: the "
              "detector's f_wait of the ports that waited)."),
            P("timeseries", "Detector stalled share (fabricmon_port_xmit_wait_ratio)", [Q(f"fabricmon_port_xmit_wait_ratio{{{DP}}}", port)],
              "percentunit", "ib_credit_loop", "f_wait: share of the last poll interval the port waited for credits.", max=1),
        ]),
        ("Discards and errors", [
            P("timeseries", "Discards per second", [
                err("fabricmon_port_transmit_discards_total", "xmit discards"),
                err("fabricmon_port_excessive_buffer_overrun_errors_total", "buffer overrun"),
                err("fabricmon_port_vl15_dropped_total", "VL15 dropped"),
            ], "cps", "ib_credit_loop", "PortXmitDiscards: HOQ lifetime and VL stall timeouts, port down.", levels=FULL),
            P("timeseries", "Error counters per second", [
                err("fabricmon_port_receive_errors_total", "rcv errors"),
                err("fabricmon_port_receive_remote_physical_errors_total", "remote physical"),
                err("fabricmon_port_receive_switch_relay_errors_total", "switch relay"),
                err("fabricmon_port_local_link_integrity_errors_total", "link integrity"),
                err("fabricmon_port_transmit_constraint_errors_total", "xmit constraint"),
                err("fabricmon_port_receive_constraint_errors_total", "rcv constraint"),
                err("fabricmon_port_symbol_errors_total", "symbol errors"),
                Q(f"fabricmon_port_problems_per_second{{{DP}}} {IB_PORT} > 0", f"{port} errors and discards (health level)"),
            ], "cps", "ber_creep_ib", "Each error counter at the full level; their sum with the discards at the health level."),
            P("timeseries", "Symbol error rate (per bit at line rate)", [
                Q(f"rate(fabricmon_port_symbol_errors_total{{{DP}}}{RI}) / on (instance, device, port) (fabricmon_port_speed_bytes{{{DP}}} * 8) > 0",
                  port),
            ], "sci", "ber_creep_ib", "A BER-ish estimate: symbol errors per second / line bits per second. PDR flags > 1e-12.", levels=FULL),
            P("table", "Symbol errors per bit over the dashboard range", [
                Q(f"topk(10, increase(fabricmon_port_symbol_errors_total{{{DP}}}[$__range]) / on (instance, device, port) "
                  f"(fabricmon_port_speed_bytes{{{DP}}} * 8 * $__range_s) > 0)", table=True),
            ], "sci", "ber_creep_ib", hide=["instance"], levels=FULL),
        ]),
        ("Links", [
            P("timeseries", "Link downs and retrains", [
                Q(f"increase(fabricmon_port_link_downed_total{{{DP}}}{RI}) > 0", f"{port} down"),
                Q(f"increase(fabricmon_port_link_error_recovery_total{{{DP}}}{RI}) > 0", f"{port} retrain"),
            ], "none", "link_flap_ib", levels=FULL),
            P("timeline", "Link state (1 = up)", [Q(f"fabricmon_port_up{{{DP}}} {IB_PORT}", port)], "none", "link_flap_ib"),
            P("table", "Link flaps over the dashboard range", [
                Q(f"sort_desc(increase(fabricmon_port_link_downed_total{{{DP}}}[$__range]) > 0)", table=True),
            ], "none", "link_flap_ib", hide=["instance"], levels=FULL),
            P("timeseries", "Active link width", [Q(f"fabricmon_port_width_lanes{{{DP}}}", port)], "none", "benign_heavy_load", levels=FULL),
            # Rated rates come from UFM REST (supported/enabled speed and width); no scenario of
            # tests/scenarios reads UFM, so the live test checks the query only.
            P("table", "Links below their rated rate (share of it)", [
                Q(f"fabricmon_port_speed_bytes{{{DP}}} / on (instance, device, port) fabricmon_port_speed_rated_bytes{{{DP}}} < 1",
                  table=True),
            ], "percentunit", "", "Active link rate over the rate both ends support and have enabled (UFM). The link_degraded "
              "finding also judges links without a rated rate, against their usual.", hide=["instance"], levels=FULL),
        ]),
        ("Topology", [
            P("table", "Ports and cables (fabricmon_port_info)", [Q(f"fabricmon_port_info{{{DP}}}", table=True)], "none", "ib_credit_loop",
              "Device, port, GUID, LID, alias, split label and the peer each port is cabled to.", w=24, h=10, hide=["Value", "instance"]),
        ]),
    ])


def findings() -> Any:
    key = "{{kind}} {{device}}:{{port}} p{{priority}} {{role}}"
    active = f"fabricmon_finding_active{{{DP}}}"
    return build_dashboard("fabricmon-findings", "fabricmon / Findings",
                           "Detector findings over time, storm trees (origin and victims), deadlock cycles and failed lossless-checklist items.", [
        ("Timeline", [
            P("timeline", "Findings timeline", [Q(active, key)], "none", "nic_pause_storm_arista", w=24, h=10),
            P("table", "Active findings with start time", [Q(f"fabricmon_finding_start_timestamp_seconds{{{DP}}} * 1000", table=True)],
              "dateTimeAsIso", "nic_pause_storm_arista", "kind, severity, device, port, priority and role of each active finding.",
              w=16, hide=["instance"]),
            P("bargauge", "Findings raised over the dashboard range",
              [Q("sum by (kind, severity) (increase(fabricmon_findings_total[$__range]))", "{{kind}} {{severity}}", instant=True)],
              "none", "nic_pause_storm_arista", w=8),
        ]),
        ("Evidence", [
            P("timeseries", "Paused share of ports with a finding",
              [Q(f"fabricmon_port_pause_ratio{{{DP}}} and on (instance, device, port) fabricmon_finding_active", "{{device}} {{port}} p{{priority}}")],
              "percentunit", "switch_storm_watchdog", max=1),
            P("timeseries", "XmitWait share of ports with a finding",
              [Q(f"fabricmon_port_xmit_wait_ratio{{{DP}}} and on (instance, device, port) fabricmon_finding_active", "{{device}} {{port}}")],
              "percentunit", "ib_credit_loop", max=1),
        ]),
        ("Storm trees", [
            P("table", "PFC storm ports by role (with the peer they face)",
              [Q(f'fabricmon_finding_active{{kind="pfc_storm", {DP}}} {PEER_JOIN}', table=True)], "none", "nic_pause_storm_arista",
              "origin: pauses its peer without being paused; victim: paused by the tree.", w=16, hide=["Value", "instance", "kind"]),
            P("bargauge", "Storm ports by priority and role",
              [Q(f'count by (priority, role) (fabricmon_finding_active{{kind="pfc_storm", {DP}}})', "p{{priority}} {{role}}", instant=True)],
              "none", "nic_pause_storm_arista", w=8),
        ]),
        ("Deadlocks and stalled ports", [
            P("table", "Deadlock cycle members (PFC and credit loops)",
              [Q(f'fabricmon_finding_active{{kind=~"pfc_deadlock|credit_deadlock", role="member", {DP}}} {PEER_JOIN}', table=True)],
              "none", "ib_credit_loop",
              "Every member pauses (or waits for credits from) the next one; the peer columns show the cycle.", w=14,
              hide=["Value", "instance"]),
            P("table", "Stalled InfiniBand ports (with the receiver they wait for)",
              [Q(f'fabricmon_finding_active{{kind="credit_deadlock", role="stalled", {DP}}} {PEER_JOIN}', table=True)],
              "none", "ib_stalled_port",
              "A port stalled alone: it holds data and its cable peer (the peer columns: a dead or slow receiver, a stuck HCA) "
              "returns no credits. Same alert as a credit loop (FabricmonCreditDeadlock); the ports waiting behind it are "
              "congestion findings that name it.", w=10, hide=["Value", "instance", "kind", "role"]),
        ]),
        # No scenario of tests/scenarios carries configuration state (the audit recordings live in
        # tests/scenarios_audit), so these panels have no scenario: the live test checks their queries.
        ("Lossless checklist", [
            P("table", "Failed checklist items (misconfig, with the other end of the cable)",
              [Q(f'fabricmon_finding_active{{kind="misconfig", {DP}}} {PEER_JOIN}', table=True)], "none", "",
              "check: the checklist item; device/port: the end to fix first; peer: the other end. "
              "`fabricmon audit` lists what passed and what could not be verified.", w=16, hide=["Value", "instance", "kind", "role"]),
            P("bargauge", "Failed checklist items by check",
              [Q(f'count by (check, severity) (fabricmon_finding_active{{kind="misconfig", {DP}}})', "{{check}} {{severity}}",
                 instant=True)], "none", "", w=8),
        ]),
    ])


def agent() -> Any:
    tl = "{{target}} ({{source}})"
    target_var = _var_query("target", "Target", "label_values(fabricmon_target_up, target)")
    return build_dashboard("fabricmon-agent", "fabricmon / Agent",
                           "The agent itself: targets up, poll durations and errors, staleness, reloads, store and rendering.", [
        ("Targets", [
            P("stat", "Targets down", [Q(f"count(fabricmon_target_up{{{TG}}} == 0) or vector(0)", instant=True)], "none", "target_outage", w=6, h=6),
            P("stat", "Agents scraped", [Q('count(up{job=~"fabricmon.*"} == 1) or vector(0)', instant=True)], "none", "benign_heavy_load",
              w=6, h=6),
            P("timeline", "Target up (1) / down (0)", [Q(f"fabricmon_target_up{{{TG}}}", tl)], "none", "target_outage", w=12, h=6),
            P("bargauge", "Targets up by source", [Q(f"count by (source) (fabricmon_target_up{{{TG}}} == 1)", "{{source}}", instant=True)],
              "none", "benign_heavy_load",
              "Sources: perfquery, ufm, ufm-telemetry, snmp, nvue, host, gnmi (gNMI Subscribe streams, cut into polls at the "
              "poll interval: a broken stream shows its target down with the reason).", w=8, h=6),
            P("timeseries", "Poll duration", [Q(f"fabricmon_target_poll_duration_seconds{{{TG}}}", tl)], "s", "benign_heavy_load"),
            P("timeseries", "Staleness (time since the last successful poll)",
              [Q(f"time() - fabricmon_target_last_success_timestamp_seconds{{{TG}}}", tl)], "s", "benign_heavy_load",
              "Grows when polls fail or hang; the FabricmonTargetStale alert fires above 5 minutes."),
            P("timeseries", "Polls per second", [Q(f"rate(fabricmon_target_polls_total{{{TG}}}{RI})", tl)], "cps", "benign_heavy_load"),
            P("timeseries", "Poll errors per second by reason",
              [Q(f"sum by (target, reason) (rate(fabricmon_target_poll_errors_total{{{TG}}}{RI}))", "{{target}} {{reason}}")],
              "cps", "target_outage"),
        ]),
        ("Agent", [
            P("stat", "Last config reload successful", [Q("min(fabricmon_config_last_reload_successful)", instant=True)], "bool_yes_no",
              "benign_heavy_load", w=6, h=6),
            P("stat", "Time since the last successful reload",
              [Q("time() - max(fabricmon_config_last_reload_success_timestamp_seconds)", instant=True)], "s", "benign_heavy_load", w=6, h=6),
            P("table", "Agent versions", [Q("fabricmon_build_info", table=True)], "none", "benign_heavy_load", w=12, h=6, hide=["Value"]),
            P("timeseries", "Series in the store", [Q("fabricmon_store_series", "{{instance}}")], "short", "benign_heavy_load", w=8),
            P("timeseries", "Exposition render time", [Q("fabricmon_exposition_render_seconds", "{{instance}}")], "s", "benign_heavy_load", w=8),
            P("timeseries", "Detector rule failures", [Q("increase(fabricmon_rule_failures_total[$__range])", "{{instance}} {{rule}}")],
              "none", "benign_heavy_load", w=8),
        ]),
    ], extra_vars=[target_var])


DASHBOARDS = {"overview": overview, "ethernet": ethernet, "infiniband": infiniband, "findings": findings, "agent": agent}


# ---------------------------------------------------------------- Grafana alerting


def _grafana_template(text: str) -> str:
    """Prometheus alert templates -> Grafana's: ``$value`` is the value of query A there."""
    return text.replace("$value", "$values.A.Value")


def grafana_alerting(alerts_file: Path = ALERTS_FILE) -> dict[str, Any]:
    """The Prometheus alert rules as Grafana unified-alerting file provisioning.

    Each rule queries the provisioned Prometheus datasource (instant query A = the alert
    expression, which returns series only while the condition holds) and B = ``$A == $A``,
    true for every returned series. No data means OK, as in Prometheus.
    """
    src = yaml.safe_load(alerts_file.read_text())
    groups = []
    for g in src["groups"]:
        rules = []
        for r in g["rules"]:
            name = r["alert"]
            rules.append({
                "uid": f"fabricmon-{name.removeprefix('Fabricmon').lower()}",
                "title": name,
                "condition": "B",
                "data": [
                    {"refId": "A", "relativeTimeRange": {"from": 600, "to": 0}, "datasourceUid": DATASOURCE_UID,
                     "model": {"refId": "A", "expr": r["expr"].strip(), "instant": True, "range": False,
                               "intervalMs": 1000, "maxDataPoints": 43200}},
                    {"refId": "B", "datasourceUid": "__expr__",
                     "model": {"refId": "B", "type": "math", "expression": "$A == $A",
                               "datasource": {"type": "__expr__", "uid": "__expr__"}}},
                ],
                "noDataState": "OK",
                "execErrState": "Error",
                "for": r.get("for", "0s"),
                "labels": {k: _grafana_template(v) for k, v in r.get("labels", {}).items()},
                "annotations": {k: _grafana_template(v) for k, v in r.get("annotations", {}).items()},
                "isPaused": False,
            })
        groups.append({"orgId": 1, "name": g["name"], "folder": "fabricmon", "interval": "30s", "rules": rules})
    return {"apiVersion": 1, "groups": groups}


# ---------------------------------------------------------------- output


class _Dumper(yaml.SafeDumper):
    """Multi-line strings (PromQL) as literal blocks, so the YAML reads like alerts.yml."""


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style="|" if "\n" in value else None)


_Dumper.add_representer(str, _str)


def render_all() -> dict[str, str]:
    """Relative path (from dashboards/) -> file text, for every generated file."""
    PANEL_SCENARIOS.clear()
    out = {}
    for name, fn in DASHBOARDS.items():
        out[f"grafana/{name}.json"] = json.dumps(fn(), cls=JSONEncoder, indent=2, sort_keys=True) + "\n"
    header = "# GENERATED by `python -m dashboards.build` from dashboards/prometheus/alerts.yml: do not edit.\n"
    out[str(GRAFANA_ALERTING_FILE.relative_to(ROOT))] = header + yaml.dump(grafana_alerting(), Dumper=_Dumper, sort_keys=False, width=1000)
    return out


def write_all(root: Path = ROOT) -> list[Path]:
    paths = []
    for rel, text in render_all().items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
        paths.append(p)
    return paths


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=ROOT, help="write under this directory instead of dashboards/")
    ap.add_argument("--check", action="store_true", help="exit 1 when the committed files differ from the generated ones")
    args = ap.parse_args(argv)
    if args.check:
        stale = [rel for rel, text in render_all().items() if not (ROOT / rel).exists() or (ROOT / rel).read_text() != text]
        for rel in stale:
            print(f"stale: dashboards/{rel} (run python -m dashboards.build)", file=sys.stderr)
        return 1 if stale else 0
    for p in write_all(args.out):
        print(p)
    return 0


if __name__ == "__main__":
    if __package__ in (None, ""):
        sys.path.insert(0, str(ROOT.parent))
    raise SystemExit(main())
