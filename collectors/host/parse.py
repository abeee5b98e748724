"""Pure parsing of host NIC counters: sysfs ``/sys/class/infiniband`` files and ``ethtool -S``
(the lossless configuration in the same payload is read by :mod:`fabricmon.collectors.host.dcb`).

Naming: ``device`` is the host (option ``hostname``, default the target name), ``port`` is
``<rdma device>/<port number>`` (``mlx5_0/1``), so a finding names both the host and the NIC.

Counter widths follow the kernel (``drivers/infiniband/core/sysfs.c``): the PortCounters
error fields are 4/8/16-bit and saturate, ``port_xmit_wait`` is 32-bit and saturates (a
value of 4294967295 is stuck, not busy). ``port_{xmit,rcv}_{data,packets}`` are 64-bit when
the kernel chose the extended counter table (it then also shows ``unicast_*``/``multicast_*``)
and 32-bit saturating otherwise; on pre-4.5 kernels the 64-bit values sit in ``counters_ext``
as ``*_64`` and are preferred. ``*_data`` counts 4-byte words (scale 4). ``hw_counters`` and
``ethtool -S`` values are 64-bit.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from fabricmon.collectors.base import ParseError, ParseOptions, ResultBuilder
from fabricmon.collectors.host import dcb
from fabricmon.collectors.infiniband import BY_SYSFS, parse_kernel_rate
from fabricmon.core.guid import norm_guid
from fabricmon.core.model import DeviceInfo, Gauge, ParseResult, PortInfo, TargetSpec

NO_PMA = "N/A (no PMA)"
US = 1e-6  # mlx5 {rx,tx}_prio<p>_pause_duration count microseconds (kernel mlx5 counters.rst)
U32_MAX = (1 << 32) - 1

# sysfs counters/ -> (vocabulary name, width) from the one InfiniBand table; all saturate
# (IB PortCounters semantics).
IB_ERROR_COUNTERS: dict[str, tuple[str, int]] = {f: (c.counter, c.width) for f, c in BY_SYSFS.items() if not c.data}
# Data/packet counters whose width depends on the kernel's counter table.
IB_DATA_COUNTERS: dict[str, tuple[str, float]] = {f: (c.counter, c.scale) for f, c in BY_SYSFS.items() if c.data}
EXT_GROUP_MARKERS = ("unicast_xmit_packets", "unicast_rcv_packets", "multicast_xmit_packets", "multicast_rcv_packets")
HW_COUNTERS: dict[str, str] = {
    "np_ecn_marked_roce_packets": "np_ecn_marked",
    "np_cnp_sent": "np_cnp_sent",
    "rp_cnp_handled": "rp_cnp_handled",
    "rp_cnp_ignored": "rp_cnp_ignored",
    "out_of_sequence": "out_of_sequence",
    "packet_seq_err": "packet_seq_err",
    "implied_nak_seq_err": "implied_nak_seq_err",
    "local_ack_timeout_err": "local_ack_timeout_err",
    "rnr_nak_retry_err": "rnr_nak_retry_err",
    "roce_adp_retrans": "roce_adp_retrans",
    "out_of_buffer": "rx_out_of_buffer",
}
# ethtool -S (mlx5) plain names -> vocabulary; per-priority names are matched by ETHTOOL_PRIO.
ETHTOOL_COUNTERS: dict[str, str] = {
    "rx_discards_phy": "rx_discards_phy",
    "rx_out_of_buffer": "rx_out_of_buffer",
    "tx_pause_storm_warning_events": "tx_pause_storm_warning_events",
    "tx_pause_storm_error_events": "tx_pause_storm_error_events",
    "rx_pause_ctrl_phy": "pause_rx_frames",
    "tx_pause_ctrl_phy": "pause_tx_frames",
    "link_down_events_phy": "link_downed",
}
# Per priority (kernel mlx5 en_stats.c, counters.rst): pause frames, pause time (us) and XOFF->XON
# transitions; the traffic of each priority (``rx_prio%d_bytes``/``_packets``, ``tx_prio%d_...``:
# what tells a RoCE-only port from a converged one, and how much a paused priority drained);
# the receive-buffer drops of each priority (``rx_prio%d_buf_discard``).
ETHTOOL_PRIO = re.compile(r"^(rx|tx)_prio([0-7])_(pause|pause_duration|pause_transition|bytes|packets|buf_discard)$")
_PRIO_NAMES = {
    ("rx", "pause"): ("pfc_rx_pause_frames", 1.0),
    ("tx", "pause"): ("pfc_tx_pause_frames", 1.0),
    ("rx", "pause_duration"): ("pfc_rx_pause_seconds", US),
    ("tx", "pause_duration"): ("pfc_tx_pause_seconds", US),
    ("rx", "pause_transition"): ("pfc_rx_pause_transitions", 1.0),
    ("rx", "bytes"): ("prio_rx_bytes", 1.0),
    ("tx", "bytes"): ("prio_tx_bytes", 1.0),
    ("rx", "packets"): ("prio_rx_packets", 1.0),
    ("tx", "packets"): ("prio_tx_packets", 1.0),
    ("rx", "buf_discard"): ("prio_rx_buffer_drops", 1.0),
}

_PORT_FILE = re.compile(r"^infiniband/([^/]+)/ports/(\d{1,3})/(counters|counters_ext|hw_counters)/([^/]+)$", re.ASCII)
_PORT_ATTR = re.compile(r"^infiniband/([^/]+)/ports/(\d{1,3})/(state|phys_state|rate|link_layer|gid_attrs/ndevs/0)$", re.ASCII)
_DEV_ATTR = re.compile(r"^infiniband/([^/]+)/(node_guid|hca_type|fw_ver|board_id)$")
_DEV_NET = re.compile(r"^infiniband/([^/]+)/device/net/([^/]+)/dev_port$")
_STATE = re.compile(r"^\s*(\d+)\s*:\s*(\S+)", re.ASCII)
_ETHTOOL_LINE = re.compile(r"^\s*([A-Za-z0-9_.\[\]:-]+?)\s*:\s*(-?\d+)\s*$", re.ASCII)

def read_int(text: str) -> int | None:
    """A sysfs/ethtool counter value; None when it is not a non-negative integer."""
    s = text.strip()
    return int(s) if s.isascii() and s.isdigit() and len(s) <= 20 else None


def parse_ethtool(text: str) -> dict[str, int]:
    """``ethtool -S`` stdout -> {name: value}. Non-numeric and header lines are skipped."""
    out: dict[str, int] = {}
    for line in text.splitlines():
        m = _ETHTOOL_LINE.match(line)
        if m and not m.group(2).startswith("-"):
            out.setdefault(m.group(1), int(m.group(2)))
    return out


def parse_rate(text: str, link_layer: str) -> tuple[float | None, int | None]:
    """``100 Gb/sec (4X EDR)`` -> (bytes/s, lanes), see :func:`fabricmon.collectors.infiniband.parse_kernel_rate`."""
    return parse_kernel_rate(text, link_layer.lower().startswith("infiniband"))


@dataclass
class RdmaPort:
    dev: str
    num: str
    attrs: dict[str, str] = field(default_factory=dict)
    counters: dict[str, str] = field(default_factory=dict)
    counters_ext: dict[str, str] = field(default_factory=dict)
    hw: dict[str, str] = field(default_factory=dict)

    @property
    def label(self) -> str:
        return f"{self.dev}/{self.num}"


@dataclass
class Collect(ResultBuilder):
    bad: dict[str, list[str]] = field(default_factory=dict)

    def value(self, port: RdmaPort, where: str, name: str, text: str) -> int | None:
        v = read_int(text)
        if v is None:
            what = "N/A (no PMA)" if text.strip() == NO_PMA else f"not a number ({text.strip()[:40]!r})"
            self.bad.setdefault(f"{port.label}: {where} {what}", []).append(name)
        return v


def _group(files: dict[str, Any]) -> tuple[dict[tuple[str, str], RdmaPort], dict[str, dict[str, str]], dict[str, dict[str, str]]]:
    ports: dict[tuple[str, str], RdmaPort] = {}
    devattrs: dict[str, dict[str, str]] = {}
    devnets: dict[str, dict[str, str]] = {}
    for path, text in files.items():
        if not isinstance(path, str) or not isinstance(text, str):
            raise ParseError(f"host payload files entry {path!r} is not path -> text")
        if m := _PORT_FILE.match(path):
            port = ports.setdefault((m.group(1), m.group(2)), RdmaPort(m.group(1), m.group(2)))
            {"counters": port.counters, "counters_ext": port.counters_ext, "hw_counters": port.hw}[m.group(3)][m.group(4)] = text
        elif m := _PORT_ATTR.match(path):
            port = ports.setdefault((m.group(1), m.group(2)), RdmaPort(m.group(1), m.group(2)))
            port.attrs[m.group(3)] = text.replace("\\n", "\n").strip()
        elif m := _DEV_ATTR.match(path):
            devattrs.setdefault(m.group(1), {})[m.group(2)] = text.strip()
        elif m := _DEV_NET.match(path):
            devnets.setdefault(m.group(1), {})[m.group(2)] = text.strip()
    return ports, devattrs, devnets


def netdev_of(port: RdmaPort, devnets: dict[str, dict[str, str]]) -> str | None:
    """The netdev of an RDMA port: ``gid_attrs/ndevs/0``, else ``device/net/<if>/dev_port`` = port - 1,
    else the device's only netdev."""
    nd = port.attrs.get("gid_attrs/ndevs/0", "").strip()
    if nd:
        return nd
    nets = devnets.get(port.dev, {})
    want = str(int(port.num) - 1)
    matches = sorted(name for name, dev_port in nets.items() if dev_port.strip() == want)
    if len(matches) == 1:
        return matches[0]
    return next(iter(nets)) if len(nets) == 1 else None


class HostParseOptions(ParseOptions):
    """What a host parse reads from the target's options (``HostOptions`` has the same field)."""

    hostname: str | None = None  # the device label; default (None or ""): the target name


@dataclass(frozen=True, slots=True)
class HostState:
    """What a host poll cannot tell by itself: the (device, port) pairs whose ``counters/`` data
    files have shown 64-bit values (the extended table, or a value above 2^32). The kernel
    picks that table once per port, so a port stays wide even when its values are small again
    (after a reset) and its counters are never read as 32-bit ones that wrap."""

    wide_ports: frozenset[tuple[str, str]] = frozenset()


def _ib_counters(c: Collect, port: RdmaPort, wide: set[tuple[str, str]]) -> None:
    label = port.label
    for fname, text in port.counters.items():
        if fname in IB_ERROR_COUNTERS:
            name, width = IB_ERROR_COUNTERS[fname]
            v = c.value(port, "counters", fname, text)
            if v is not None:
                c.sample(label, name, v, bits=width, saturating=True)
    # Data/packet counters: which table did the kernel pick for counters/? The extended table
    # shows unicast_*/multicast_* too; a value above 2^32 also proves it (the "noietf" table).
    # Without the extended table, the 64-bit values of pre-4.5 kernels (counters_ext/*_64) win.
    ext_group = any(m in port.counters for m in EXT_GROUP_MARKERS)
    values: dict[str, tuple[int, bool]] = {}  # file -> (value, from counters_ext)
    for fname in IB_DATA_COUNTERS:
        ext = None if ext_group else port.counters_ext.get(fname + "_64")
        if ext is not None and (v := c.value(port, "counters_ext", fname + "_64", ext)) is not None:
            values[fname] = (v, True)
        elif fname in port.counters and (v := c.value(port, "counters", fname, port.counters[fname])) is not None:
            values[fname] = (v, False)
    if ext_group or any(v > U32_MAX for v, ext in values.values() if not ext):
        wide.add((port.dev, port.num))  # sticky: a 64-bit table never turns 32-bit again
    for fname, (v, from_ext) in values.items():
        name, scale = IB_DATA_COUNTERS[fname]
        is_wide = from_ext or (port.dev, port.num) in wide
        c.sample(label, name, v, bits=64 if is_wide else 32, saturating=not is_wide, scale=scale)


def _hw_counters(c: Collect, port: RdmaPort) -> None:
    for fname, text in port.hw.items():
        name = HW_COUNTERS.get(fname)
        if name is None:
            continue
        v = c.value(port, "hw_counters", fname, text)
        if v is not None:
            c.sample(port.label, name, v)


def _ethtool(c: Collect, port: str, text: str) -> int:
    stats = parse_ethtool(text)
    mapped = 0
    for name, value in stats.items():
        if (m := ETHTOOL_PRIO.match(name)) and (got := _PRIO_NAMES.get((m.group(1), m.group(3)))):
            c.sample(port, got[0], value, (int(m.group(2)),), scale=got[1])
            mapped += 1
        elif name in ETHTOOL_COUNTERS:
            c.sample(port, ETHTOOL_COUNTERS[name], value)
            mapped += 1
    return mapped


def _gauges(c: Collect, port: RdmaPort) -> None:
    label = port.label
    state = port.attrs.get("state")
    if state:
        m = _STATE.match(state)
        word = (m.group(2) if m else state).upper()
        c.result.gauges.append(Gauge(c.device, label, "link_up", 1.0 if word == "ACTIVE" else 0.0))
    rate = port.attrs.get("rate")
    if rate and (not state or "ACTIVE" in state.upper()):  # a down port's rate is a leftover
        speed, lanes = parse_rate(rate, port.attrs.get("link_layer", ""))
        if lanes:
            c.result.gauges.append(Gauge(c.device, label, "link_width_lanes", float(lanes)))
        if speed:
            c.result.gauges.append(Gauge(c.device, label, "link_speed_bytes", speed))


def parse_payload(payload: dict[str, Any], spec: TargetSpec, state: HostState) -> tuple[ParseResult, HostState]:
    """A recorded host poll -> (ParseResult, next state) (see the module docstring for naming and widths)."""
    host = HostParseOptions.from_spec(spec).hostname or spec.name
    if not isinstance(payload, dict):
        raise ParseError("host payload must be an object")
    files = payload.get("files", {})
    ethtool = payload.get("ethtool", {})
    if not isinstance(files, dict) or not isinstance(ethtool, dict):
        raise ParseError("host payload needs 'files' and 'ethtool' objects")
    c = Collect(host)
    wide = set(state.wide_ports)
    ports, devattrs, devnets = _group(files)
    netdev_port = _rdma_ports(c, ports, devattrs, devnets, wide)
    _ethtool_outputs(c, ethtool, netdev_port)
    # Lossless configuration (ECN sysfs, dcb, mlnx_qos): collectors/host/dcb.py
    c.result.warnings.extend(dcb.config_gauges(c, files, payload.get("dcb"), netdev_port))
    for what, names in sorted(c.bad.items()):
        shown = ", ".join(sorted(names)[:6]) + (f" (+{len(names) - 6} more)" if len(names) > 6 else "")
        c.result.warnings.append(f"{what}: {shown} skipped")
    if ports or devattrs:
        hcas = []
        for dev in sorted({d for d, _n in ports} | set(devattrs)):
            attrs = devattrs.get(dev, {})
            hcas.append(" ".join(x for x in (dev, attrs.get("hca_type", ""), f"fw {attrs['fw_ver']}" if attrs.get("fw_ver") else "") if x))
        c.result.devices.append(DeviceInfo(name=host, kind="host", description="; ".join(hcas)))
    return c.result, state if wide == state.wide_ports else HostState(frozenset(wide))


def _rdma_ports(c: Collect, ports: dict[tuple[str, str], RdmaPort], devattrs: dict[str, dict[str, str]],
                devnets: dict[str, dict[str, str]], wide: set[str]) -> dict[str, str]:
    """Every RDMA port's info, counters and gauges; its netdev -> port label."""
    netdev_port: dict[str, str] = {}
    for key in sorted(ports, key=lambda k: (k[0], int(k[1]))):
        port = ports[key]
        nd = netdev_of(port, devnets)
        if nd:
            netdev_port.setdefault(nd, port.label)
        guid = norm_guid(devattrs.get(port.dev, {}).get("node_guid", ""))
        c.result.ports.append(PortInfo(device=c.device, port=port.label, guid=guid, alias=nd or ""))
        _ib_counters(c, port, wide)
        _hw_counters(c, port)
        _gauges(c, port)
        if not port.counters and not port.hw and not port.counters_ext:
            c.result.warnings.append(f"{port.label}: no counters were readable (see the agent log)")
    return netdev_port


def _ethtool_outputs(c: Collect, ethtool: dict[Any, Any], netdev_port: dict[str, str]) -> None:
    """``ethtool -S`` counters, on the RDMA port of their netdev (else named by the netdev)."""
    for ifname in sorted(ethtool):
        text = ethtool[ifname]
        if not isinstance(ifname, str) or not isinstance(text, str):
            raise ParseError(f"host payload ethtool entry {ifname!r} is not name -> text")
        port_label = netdev_port.get(ifname)
        if port_label is None:
            port_label = ifname
            c.result.warnings.append(f"ethtool {ifname}: no RDMA port maps to this netdev; counters named by the netdev")
        if _ethtool(c, port_label, text) == 0:
            c.result.warnings.append(f"ethtool {ifname}: no known counters in the output")
