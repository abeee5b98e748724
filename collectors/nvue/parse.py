"""Pure parsing of Cumulus Linux 5.x NVUE REST responses into the counter vocabulary.

NVUE's JSON mirrors ``nv show``. Only ``interface/<if>/link/stats`` has a published JSON
sample (NVIDIA Cumulus Linux 5.x docs, NVUE API page); the other shapes are inferred from the
``nv show`` CLI tables in the same docs, so
every section is read defensively: a per-index table may be a dict keyed by the index or a
list of rows carrying it, numbers may be JSON numbers or numeric strings, and a value the
parser cannot read exactly (a humanised ``56.52 MB``) is skipped with a warning rather than
guessed. Anything unknown is ignored.

WJH aggregate records are drop counts over an aggregation window, not monotonic counters, and
the device keeps no running total to read; they are summed into one monotonic counter per
(port, group, reason, traffic class) carried in :class:`NvueState` (see :func:`wjh_samples`).
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import Field

from fabricmon.collectors.base import BadValues, ParseError, ParseOptions, ResultBuilder
from fabricmon.collectors.nvue import lldp, roce_config  # they import this module back for its readers (used at call time)
from fabricmon.core import boundedjson
from fabricmon.core.model import ParseResult, TargetSpec

API_PREFIX = "/nvue_v1/"
US = 1e-6  # PFC pause durations are microseconds (gNMI docs; the CLI prints bare numbers): inferred

DEFAULT_PATHS: dict[str, str] = {
    "qos_counters_path": "interface/{if}/counters/qos",
    "roce_counters_path": "interface/{if}/qos/roce/counters",
    "pfc_watchdog_path": "interface/{if}/qos/pfc-watchdog",
    "roce_status_path": "interface/{if}/qos/roce/status",
    "lldp_path": "interface/{if}/lldp/neighbor",
    "link_stats_path": "interface/{if}/link/stats",
    "wjh_path": "system/wjh/packet-buffer",
    "pfc_profile_path": "qos/pfc/default-global",  # device-wide PFC thresholds (roce_config.py)
}
INTERFACES_PATH = "interface"
KIND_LABEL = {
    "qos_counters_path": "QoS counters",
    "roce_counters_path": "RoCE counters",
    "pfc_watchdog_path": "PFC watchdog",
    "roce_status_path": "RoCE status",
    "lldp_path": "LLDP neighbors",
    "link_stats_path": "link stats",
    "wjh_path": "WJH",
    "pfc_profile_path": "PFC profile",
}
# Order matters: the first writer of a (port, counter, sub) wins, and the explicitly indexed
# QoS tables are more trustworthy than the RoCE view, whose TC/priority comes from options.
PARSE_ORDER = ("link_stats_path", "qos_counters_path", "roce_counters_path", "pfc_watchdog_path", "roce_status_path",
               "lldp_path")

MAX_DIGITS = 40  # a 128-bit counter has 39 digits; a longer string is no counter (and int() of 4,300+ digits raises)
_UNIT_RE = re.compile(r"^\s*(-?\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*$", re.ASCII)


# ---------------------------------------------------------------- small readers


def to_count(value: Any) -> int | None:
    """A counter value as an int: JSON int, integral float, or a digits-only string (SONiC's
    redis values; optionally followed by ``Bytes``/``B``, the NVUE CLI's unit for byte values). ``None`` when the
    value is absent, ``n/a``, negative or humanised (``56.52 MB``: not exact)."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int):
        return value if value >= 0 else None
    if isinstance(value, float):
        return int(value) if math.isfinite(value) and value >= 0 and value.is_integer() else None
    if isinstance(value, str):
        m = _UNIT_RE.match(value)
        if not m or "." in m.group(1) or m.group(1).startswith("-") or len(m.group(1)) > MAX_DIGITS:
            return None
        unit = m.group(2).lower()
        if unit not in ("", "b", "bytes", "byte", "pkts", "packets"):
            return None
        return int(m.group(1))
    return None


def humanised(value: Any) -> bool:
    """True for a CLI-style value with a multiplier unit (``56.52 MB``): present but inexact."""
    return isinstance(value, str) and bool(_UNIT_RE.match(value)) and to_count(value) is None


def get_path(obj: Any, *keys: str) -> Any:
    """``obj[k1][k2]...`` over dicts, trying ``-``/``_`` spellings; None when any step is missing."""
    for k in keys:
        if not isinstance(obj, dict):
            return None
        if k in obj:
            obj = obj[k]
        elif k.replace("-", "_") in obj:
            obj = obj[k.replace("-", "_")]
        else:
            return None
    return obj


def table_rows(section: Any, index_keys: tuple[str, ...]) -> dict[int, dict[str, Any]]:
    """An indexed table (``{"3": {...}}``, ``{3: {...}}`` or ``[{"traffic-class": 3, ...}]``) as
    {index: row}; rows whose index is not a small integer are ignored."""
    rows: dict[int, dict[str, Any]] = {}
    items: list[tuple[Any, Any]]
    if isinstance(section, dict):
        items = list(section.items())
    elif isinstance(section, list):
        items = [(next((r[k] for k in index_keys if k in r), None), r) for r in section if isinstance(r, dict)]
    else:
        return rows
    for key, row in items:
        digits = isinstance(key, str) and key.strip().isascii() and key.strip().isdigit()
        idx = to_count(key.strip()) if digits else (key if type(key) is int else None)
        if idx is None or not 0 <= idx <= 255 or not isinstance(row, dict):
            continue
        rows[idx] = row
    return rows


# ---------------------------------------------------------------- emitter


@dataclass
class Emitter(ResultBuilder):
    """Builds the ParseResult (first writer wins per port, name, sub); notes problems once each."""

    inexact: dict[str, set[str]] = field(default_factory=dict)
    bad: BadValues = field(default_factory=BadValues)
    link_up: dict[str, bool] = field(default_factory=dict)  # interface -> its state in the interface list

    def counter(self, port: str, name: str, raw: Any, sub: tuple[Any, ...] = (), scale: float = 1.0, where: str = "") -> None:
        if self.has(port, name, sub):
            return
        value = to_count(raw)
        if value is None:
            if humanised(raw):
                self.inexact.setdefault(where or name, set()).add(port)
            else:
                self.bad.note(where or name, f"{self.device} port {port}", raw)
            return
        self.sample(port, name, value, sub, scale=scale)

    def gauge(self, port: str, name: str, value: Any, sub: tuple[Any, ...] = (), where: str = "") -> bool:
        if self.has_gauge(port, name, sub):
            return False
        if not isinstance(value, float):
            count = to_count(value)
            if count is None:
                if humanised(value):
                    self.inexact.setdefault(where or name, set()).add(port)
                return False
            value = count
        return super().gauge(port, name, float(value), sub)

    def finish(self) -> ParseResult:
        for what, ports in sorted(self.inexact.items()):
            self.result.warnings.append(f"{what}: humanised value (not exact) skipped on {', '.join(sorted(ports))}")
        self.result.warnings.extend(self.bad.warnings())
        return self.result


# ---------------------------------------------------------------- sections


LINK_STATS = {
    "in-bytes": "rx_bytes", "out-bytes": "tx_bytes", "in-pkts": "rx_packets", "out-pkts": "tx_packets",
    "in-drops": "rx_discards", "out-drops": "tx_discards", "in-errors": "rx_errors", "out-errors": "tx_errors",
}


def parse_link_stats(em: Emitter, port: str, body: Any, opts: NvueParseOptions) -> None:
    """``link/stats`` (verified: the NVUE API docs' published sample). ``link_downed`` is the
    number of times the link went down: :func:`carrier_downs`."""
    if not isinstance(body, dict):
        return
    for key, name in LINK_STATS.items():
        em.counter(port, name, get_path(body, key))
    downs = carrier_downs(get_path(body, "carrier-down-count"), get_path(body, "carrier-transitions"), em.link_up.get(port))
    if downs is not None:
        em.counter(port, "link_downed", downs)


def carrier_downs(down_count: Any, transitions: Any, up_now: bool | None) -> int | None:
    """How many times the link went down, from the kernel's carrier counters (NVUE shows the
    Linux netdev's). ``carrier-down-count`` when present (Linux ``carrier_down_count``, 4.16+;
    the NVUE key is inferred from the kernel name). Else ``carrier-transitions``, Linux
    ``carrier_changes`` ("number of times the link has seen a change from UP to DOWN and vice
    versa", sysfs-class-net ABI; since 4.16 the sum of the up and down counts, kernel commit
    b2d3bcfa26a7): transitions alternate, so counted back from the state now, the last one was a
    down when the link is down: downs = ceil(n / 2) when down, floor(n / 2) when up, exactly,
    whatever the state at boot. The state is the interface list's (same poll); without it, the
    kernel's own start is assumed (no carrier until the first up: floor(n / 2)). One reboot of
    the peer is then one down, counted in the poll that shows the link down."""
    n = to_count(down_count)
    if n is not None:
        return n
    n = to_count(transitions)
    if n is None:
        return None
    return (n + (up_now is False)) // 2

def parse_qos_counters(em: Emitter, port: str, body: Any, opts: NvueParseOptions) -> None:
    """``counters/qos`` (inferred): the four ``nv show interface <if> counters qos`` CLI tables
    (pfc-stats, egress-queue-stats, ingress-buffer-stats, port-stats), keys as the CLI spells them."""
    if not isinstance(body, dict):
        return
    for tc, row in table_rows(get_path(body, "egress-queue-stats"), ("traffic-class", "tc")).items():
        q = (str(tc),)
        em.counter(port, "queue_tx_packets", get_path(row, "tx-frames"), q)
        em.counter(port, "queue_tx_bytes", get_path(row, "tx-bytes"), q)
        em.counter(port, "queue_no_buffer_drops", get_path(row, "tx-uc-buffer-discards"), q)
        em.counter(port, "wred_drops", get_path(row, "wred-discards"), q)
    for pg, row in table_rows(get_path(body, "ingress-buffer-stats"), ("priority-group", "pg")).items():
        em.counter(port, "pg_no_buffer_drops", get_path(row, "rx-buffer-discards"), (pg,))
    for prio, row in table_rows(get_path(body, "pfc-stats"), ("switch-priority", "priority")).items():
        if prio > 7:
            continue
        p = (prio,)
        em.counter(port, "pfc_rx_pause_frames", get_path(row, "rx-pause-frames"), p)
        em.counter(port, "pfc_tx_pause_frames", get_path(row, "tx-pause-frames"), p)
        em.counter(port, "pfc_rx_pause_seconds", get_path(row, "rx-pause-duration"), p, US)
        em.counter(port, "pfc_tx_pause_seconds", get_path(row, "tx-pause-duration"), p, US)
    stats = get_path(body, "port-stats")
    if isinstance(stats, dict):
        # Either {"rx-stats": {...}, "tx-stats": {...}} or {"ecn-marked-packets": {"transmit": n}}.
        for direction, name in (("rx", "pause_rx_frames"), ("tx", "pause_tx_frames")):
            em.counter(port, name, _port_stat(stats, direction, "pause-frames"))
        em.counter(port, "ecn_marked_packets", _port_stat(stats, "tx", "ecn-marked-packets"), ("all",))


def _port_stat(stats: dict[str, Any], direction: str, name: str) -> Any:
    value = get_path(stats, f"{direction}-stats", name)
    if value is None:
        value = get_path(stats, name, "receive" if direction == "rx" else "transmit")
    return value


def parse_roce_counters(em: Emitter, port: str, body: Any, opts: NvueParseOptions) -> None:
    """``qos/roce/counters`` (inferred JSON; the CLI sample is verified): the RoCE and CNP classes only; the
    priority/TC they belong to come from the options (Cumulus RoCE defaults: PFC priority 3,
    RoCE TC 3, CNP TC 6)."""
    if not isinstance(body, dict):
        return
    prio, tc, cnp = (opts.roce_priority,), (str(opts.roce_tc),), (str(opts.cnp_tc),)
    em.counter(port, "pfc_rx_pause_frames", get_path(body, "rx-stats", "rx-pfc-stats", "pause-packets"), prio)
    em.counter(port, "pfc_rx_pause_seconds", get_path(body, "rx-stats", "rx-pfc-stats", "pause-duration"), prio, US)
    em.counter(port, "pfc_tx_pause_frames", get_path(body, "tx-stats", "tx-pfc-stats", "pause-packets"), prio)
    em.counter(port, "pfc_tx_pause_seconds", get_path(body, "tx-stats", "tx-pfc-stats", "pause-duration"), prio, US)
    em.counter(port, "pg_no_buffer_drops", get_path(body, "rx-stats", "rx-roce-stats", "no-buffer-discard"), (opts.roce_priority,))
    em.counter(port, "ecn_marked_packets", get_path(body, "tx-stats", "tx-ecn-stats", "ecn-marked-packets"), tc)
    roce = get_path(body, "tx-stats", "tx-roce-stats")
    if isinstance(roce, dict):
        em.counter(port, "queue_tx_packets", get_path(roce, "roce-packets"), tc)
        em.counter(port, "queue_tx_bytes", get_path(roce, "roce-bytes"), tc, where="tx-roce-stats roce-bytes")
        em.counter(port, "queue_no_buffer_drops", get_path(roce, "unicast-no-buffer-discard"), tc)
        em.gauge(port, "queue_occupancy_bytes", get_path(roce, "tc-usage"), tc, "tx-roce-stats tc-usage")
    cnps = get_path(body, "tx-stats", "tx-cnp-stats")
    if isinstance(cnps, dict):
        em.counter(port, "cnp_packets", get_path(cnps, "cnp-packets"), cnp)
        em.counter(port, "queue_no_buffer_drops", get_path(cnps, "unicast-no-buffer-discard"), cnp)
        em.gauge(port, "queue_occupancy_bytes", get_path(cnps, "tc-usage"), cnp, "tx-cnp-stats tc-usage")


def parse_pfc_watchdog(em: Emitter, port: str, body: Any, opts: NvueParseOptions) -> None:
    """``qos/pfc-watchdog`` (inferred): per traffic class ``status`` OK|DEADLOCK and ``deadlock-count``.
    Exported per priority = the traffic-class number (Cumulus' default switch-priority -> TC
    map is the identity)."""
    if not isinstance(body, dict):
        return
    rows: dict[int, dict[str, Any]] = {}
    for key in ("status", "traffic-class", "pfc-wd-status", "tc"):
        rows = table_rows(get_path(body, key), ("traffic-class", "tc"))
        if rows:
            break
    if not rows:
        rows = table_rows(body, ("traffic-class", "tc"))
    for tc, row in rows.items():
        if tc > 7:
            continue
        em.counter(port, "pfc_watchdog_storms", get_path(row, "deadlock-count"), (tc,))
        status = get_path(row, "status")
        if isinstance(status, str) and status.strip():
            em.gauge(port, "pfc_watchdog_stormed", 1.0 if status.strip().upper() == "DEADLOCK" else 0.0, (tc,))
    roce_config.parse_watchdog_state(em, port, body)  # the watchdog's configuration (config gauge)


_SPEED_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([GMT])(?:b(?:ps|/s)?)?\s*$", re.IGNORECASE | re.ASCII)
_SPEED_MULT = {"M": 1e6, "G": 1e9, "T": 1e12}


def parse_interface_list(em: Emitter, body: Any) -> None:
    """``GET interface`` (inferred): link state/speed gauges when the entries carry them."""
    if not isinstance(body, dict):
        return
    for name, info in body.items():
        link = get_path(info, "link")
        if not isinstance(name, str) or not isinstance(link, dict):
            continue
        state = get_path(link, "oper-status")
        if state is None:
            state = get_path(link, "state")
        if isinstance(state, dict) and len(state) == 1:  # NVUE sometimes nests {"up": {}}
            state = next(iter(state))
        if isinstance(state, str) and state.lower() in ("up", "down"):
            em.link_up[name] = state.lower() == "up"
            em.gauge(name, "link_up", 1.0 if em.link_up[name] else 0.0)
        speed = get_path(link, "speed")
        m = _SPEED_RE.match(speed) if isinstance(speed, str) else None
        if m:
            em.gauge(name, "link_speed_bytes", float(m.group(1)) * _SPEED_MULT[m.group(2).upper()] / 8)


# ---------------------------------------------------------------- WJH

AGG_COUNT_KEYS = ("AggCount", "agg-count", "aggCount")
COUNT_KEYS = ("count", "drop-count", "drops", "counter", "Count")
GROUP_KEYS = ("DropType", "drop-type", "group", "drop-group", "DropGroup")
REASON_KEYS = ("ReasonId", "reason-id", "reason_id", "id")
END_KEYS = ("EndTimestamp", "end-timestamp", "end_timestamp")
PORT_KEYS = ("IngressPort", "ingress-port", "port", "interface", "sPort", "s-port")
EGRESS_KEYS = ("EgressPort", "egress-port", "dPort", "d-port")
TC_KEYS = ("traffic_class", "traffic-class", "TrafficClass", "trafficClass", "tc")  # buffer drops: traffic_class verified in a gNMI sample


def _first(row: dict[str, Any], keys: tuple[str, ...]) -> Any:
    return next((row[k] for k in keys if k in row and row[k] not in (None, "")), None)


_GROUPS = frozenset({"l1", "l2", "router", "tunnel", "buffer", "acl"})
_IFNAME_RE = re.compile(r"^[A-Za-z][\w.:-]*\d[\w.:-]*$")


def wjh_records(obj: Any, context: str | None = None, depth: int = 0) -> Iterator[tuple[dict[str, Any], str | None]]:
    """Every dict that looks like a WJH record (has a group and a reason id) anywhere in the body,
    with the nearest enclosing key that looks like an interface name (for bodies keyed by port).
    A JSON string value is decoded first (the gNMI ``state/drop`` leaf is a JSON string)."""
    if depth > 8:
        return
    if isinstance(obj, str):
        s = obj.strip()
        if s[:1] in ("[", "{"):
            try:
                decoded = boundedjson.loads(s, what="a JSON string value")  # bounded like a body (a string may hold megabytes)
            except ValueError:
                return
            yield from wjh_records(decoded, context, depth + 1)
        return
    if isinstance(obj, dict):
        if _first(obj, REASON_KEYS) is not None and _first(obj, GROUP_KEYS) is not None:
            yield obj, context
            return
        for k, v in obj.items():
            sub = k if isinstance(k, str) and k.lower() not in _GROUPS and _IFNAME_RE.match(k) else context
            yield from wjh_records(v, sub, depth + 1)
    elif isinstance(obj, list):
        for v in obj:
            yield from wjh_records(v, context, depth + 1)


def _traffic_class(row: dict[str, Any]) -> str:
    """The record's egress traffic class as a label ("3"), "" when absent or not a class
    number (0..15), so the detector can tell a lossless-class drop from an unknown one."""
    tc = _first(row, TC_KEYS)
    if isinstance(tc, bool):
        return ""
    if isinstance(tc, float) and tc.is_integer():
        tc = int(tc)
    if isinstance(tc, str) and tc.strip().isascii() and tc.strip().isdigit():
        tc = int(tc.strip())
    return str(tc) if isinstance(tc, int) and 0 <= tc <= 15 else ""


def _wjh_key(row: dict[str, Any], context: str | None) -> tuple[str, str, str, str] | None:
    group = _first(row, GROUP_KEYS)
    reason = _first(row, REASON_KEYS)
    if not isinstance(group, str) or not group.strip() or isinstance(reason, bool) or not isinstance(reason, (int, str)):
        return None
    reason_s = str(reason).strip()
    if not (reason_s.isascii() and reason_s.isdigit()):
        return None
    group_l = group.strip().lower()
    port = None
    if group_l == "buffer":  # a buffer drop belongs to the congested egress queue
        port = _first(row, EGRESS_KEYS)
    if not isinstance(port, str) or not port.strip():
        port = _first(row, PORT_KEYS)
    if not isinstance(port, str) or not port.strip():
        port = context or "all"
    return port.strip(), group_l, str(int(reason_s)), _traffic_class(row)


WjhKey = tuple[str, str, str, str]  # (port, group, reason, traffic class)


@dataclass(frozen=True, slots=True)
class NvueState:
    """The WJH drop totals of one target: key -> (drops counted, ``EndTimestamp`` of the newest
    window counted). Needed because the switch reports only per-window counts (an ``AggCount``
    per ~30 s aggregation window; NVIDIA "gNMI Streaming" ``state/drop`` sample, Cumulus Linux
    5.12 docs): no device counter exists whose deltas the store could take. Never changed after
    it is made: a poll that counts new windows returns a new state."""

    wjh: Mapping[WjhKey, tuple[int, float]] = field(default_factory=dict)


def wjh_samples(em: Emitter, body: Any, state: NvueState) -> NvueState:
    """WJH drops -> monotonic ``wjh_drops{group, reason, traffic_class}`` per port; returns the
    state with this poll's windows counted.

    * Aggregate records (``AggCount`` + ``EndTimestamp``, the gNMI/NetQ shape) count the drops
      of one window (~30 s). A record adds its ``AggCount`` to the running total of its
      (port, group, reason) only when its ``EndTimestamp`` is newer than the newest window
      already counted for that key, so a window re-listed by the next poll is not counted twice.
    * Counter records (``count``/``drop-count`` without ``AggCount``) are already totals and are
      exported as they are (the store takes their deltas).
    * ``traffic_class`` is the record's class (buffer drops carry ``traffic_class``), "" when
      it has none; a window's drops split by class are separate keys.
    Every key counted before is exported on each poll.
    """
    newest: dict[WjhKey, float] = {}
    pending: dict[WjhKey, int] = {}
    direct: dict[WjhKey, int] = {}
    untimed = 0
    for row, context in wjh_records(body):
        key = _wjh_key(row, context)
        if key is None:
            continue
        agg = to_count(_first(row, AGG_COUNT_KEYS))
        if agg is None:
            count = to_count(_first(row, COUNT_KEYS))
            if count is not None:
                direct[key] = direct.get(key, 0) + count
            continue
        end = _first(row, END_KEYS)
        if isinstance(end, bool) or not isinstance(end, (int, float)) or not math.isfinite(end):
            untimed += 1
            continue
        last = state.wjh[key][1] if key in state.wjh else -math.inf
        if end > last:
            pending[key] = pending.get(key, 0) + agg
        newest[key] = max(newest.get(key, -math.inf), float(end))
    totals = dict(state.wjh)
    for key, end in newest.items():
        total, last = totals.get(key, (0, -math.inf))
        totals[key] = (total + pending.get(key, 0), max(last, end))
    if untimed:
        em.result.warnings.append(f"WJH: {untimed} aggregate record(s) without EndTimestamp not counted")
    for (port, group, reason, tc), value in sorted(direct.items()):
        em.counter(port, "wjh_drops", value, (group, reason, tc))
    for (port, group, reason, tc), (total, _end) in sorted(totals.items()):
        em.counter(port, "wjh_drops", int(total), (group, reason, tc))
    return state if totals == state.wjh else NvueState(totals)


# ---------------------------------------------------------------- payload


class NvueParseOptions(ParseOptions):
    """What an NVUE parse reads from the target's options (``NvueOptions`` has the same fields,
    in the order the recording header lists them). A path "" (how the header records a call that
    was switched off) or None switches that call off, so a replay does not fall back to the default."""

    link_stats_path: str | None = DEFAULT_PATHS["link_stats_path"]
    qos_counters_path: str | None = DEFAULT_PATHS["qos_counters_path"]
    roce_counters_path: str | None = DEFAULT_PATHS["roce_counters_path"]
    pfc_watchdog_path: str | None = DEFAULT_PATHS["pfc_watchdog_path"]
    roce_status_path: str | None = DEFAULT_PATHS["roce_status_path"]
    lldp_path: str | None = DEFAULT_PATHS["lldp_path"]
    wjh_path: str | None = DEFAULT_PATHS["wjh_path"]
    pfc_profile_path: str | None = DEFAULT_PATHS["pfc_profile_path"]
    # The priority / traffic classes the RoCE counters view describes (Cumulus RoCE defaults);
    # a priority is a 3-bit IEEE 802.1Q PCP value, a class is in the range NvueOptions accepts.
    roce_priority: int = Field(3, ge=0, le=7)
    roce_tc: int = Field(3, ge=0, le=15)
    cnp_tc: int = Field(6, ge=0, le=15)

    def paths(self) -> dict[str, str]:
        """Option name -> path template of each call switched on, in DEFAULT_PATHS order."""
        return {k: v for k in DEFAULT_PATHS if (v := getattr(self, k))}


@functools.lru_cache(maxsize=64)
def template_regex(template: str) -> re.Pattern[str]:
    """``interface/{if}/link/stats`` -> a regex with a named group for the interface."""
    parts = template.strip("/").split("{if}")
    return re.compile("^" + "(?P<ifname>[^/]+)".join(re.escape(p) for p in parts) + "$")


def classify(path: str, paths: dict[str, str]) -> tuple[str, str | None] | None:
    """(option name or ``interfaces``, interface) of a recorded path; None when unknown."""
    from urllib.parse import unquote

    bare = path.split("?", 1)[0]
    if bare.startswith(API_PREFIX):
        bare = bare[len(API_PREFIX):]
    bare = unquote(bare.strip("/"))
    if bare == INTERFACES_PATH:
        return "interfaces", None
    for kind, template in paths.items():
        m = template_regex(template).match(bare)
        if m:
            return kind, m.groupdict().get("ifname")
    return None


PARSERS = {
    "link_stats_path": parse_link_stats,
    "qos_counters_path": parse_qos_counters,
    "roce_counters_path": parse_roce_counters,
    "pfc_watchdog_path": parse_pfc_watchdog,
    "roce_status_path": roce_config.parse_roce_status,  # configuration state: collectors/nvue/roce_config.py
    "lldp_path": lldp.parse_lldp_neighbors,  # cabling: collectors/nvue/lldp.py
}


def parse_payload(payload: dict[str, Any], spec: TargetSpec, state: NvueState) -> tuple[ParseResult, NvueState]:
    """A recorded NVUE poll -> (ParseResult, next state). Device = the target name, port = interface name."""
    if not isinstance(payload, dict) or not isinstance(payload.get("responses"), list):
        raise ParseError("nvue payload must be an object with a 'responses' list")
    opts = NvueParseOptions.from_spec(spec)
    paths = opts.paths()
    em = Emitter(spec.name)
    by_kind: dict[str, list[tuple[str | None, Any]]] = {}
    missing: dict[str, list[str]] = {}
    failed: list[str] = []
    for i, resp in enumerate(payload["responses"]):
        if not isinstance(resp, dict) or not isinstance(resp.get("path"), str):
            raise ParseError(f"nvue response #{i} is not an object with a 'path'")
        status = resp.get("status")
        where = classify(resp["path"], paths)
        if where is None:
            continue
        kind, ifname = where
        if status == 404:
            missing.setdefault(KIND_LABEL.get(kind, kind), []).append(ifname or resp["path"])
            continue
        if not isinstance(status, int) or not 200 <= status < 300:
            failed.append(f"{resp['path'].split('?', 1)[0]} (HTTP {status})")
            continue
        by_kind.setdefault(kind, []).append((ifname, resp.get("body")))
    for ifname_body in by_kind.get("interfaces", []):
        parse_interface_list(em, ifname_body[1])
    for kind in PARSE_ORDER:
        for ifname, body in by_kind.get(kind, []):
            if ifname is None:
                continue
            if not isinstance(body, dict):
                em.result.warnings.append(f"{ifname}: {KIND_LABEL[kind]} body is not a JSON object, skipped")
                continue
            PARSERS[kind](em, ifname, body, opts)
    for _i, body in by_kind.get("pfc_profile_path", []):  # after the ports' PFC configuration: it applies to them
        roce_config.parse_pfc_profile(em, body)
    wjh_bodies = [body for _i, body in by_kind.get("wjh_path", [])]
    if wjh_bodies or state.wjh:
        state = wjh_samples(em, wjh_bodies, state)
    for what, names in sorted(missing.items()):
        em.result.warnings.append(f"{what}: not found (HTTP 404) on {', '.join(sorted(names))}; skipped")
    if failed:
        em.result.warnings.append("failed calls skipped: " + ", ".join(sorted(failed)))
    return em.finish(), state
