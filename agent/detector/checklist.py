"""The lossless-fabric checklist: the RoCEv2 configuration checked on every port and link.

RoCEv2 is lossless only when every device on the path agrees: PFC on the lossless priority and
only there, ECN marking that engages before PFC, a PFC watchdog and buffer headroom for the
lossless class, and the same trust and priority mapping at both ends of every cable. This
module computes, for every check and every port (and link, for two-ended checks), a status:

* ``pass``: every input the check needs is visible and the configuration is right;
* ``fail``: the configuration (or the fabric's behaviour) breaks the check;
* ``unknown``: an input is absent (the source cannot see that setting, the other end of the
  link is not polled). Never ``pass`` without the inputs.

Inputs, all through the store's read API: the configuration gauges of
:mod:`fabricmon.core.vocabulary` (``pfc_enabled``, ``pfc_peer_enabled``, ``ecn_enabled``, ...;
a gauge that is absent means the source could not see the setting), counters for behaviour and
severity (PFC frames on a priority, traffic on the lossless queue), the topology (cable peers;
which device is a host is the ``fabric`` analysis's one classification,
:meth:`~fabricmon.agent.detector.analyses.fabric.FabricShape.is_host`) and the ``fabric:`` section (a
:class:`~fabricmon.core.vocabulary.PriorityMap`: which priorities must be lossless, and their
egress queue and ingress priority group).

One root cause is reported once: a failure that another check already explains on the same
port and priority (PFC off explains a missing watchdog, missing headroom and an unusable ECN
threshold; ECN off explains PFC without ECN marks; a port that deviates from the fabric's
lossless set explains the priority mismatch on its link) keeps status ``fail`` with
``covered_by`` naming the explaining result, and raises no finding of its own.

The public source of each check is in :data:`CHECKS` and in docs/audit.md.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from itertools import count
from operator import itemgetter
from typing import Any, NamedTuple

import numpy as np

from fabricmon.agent.detector.analyses.fabric import FabricShape
from fabricmon.agent.detector.analyses.pfc_state import STORM_PAUSE_FRACTION
from fabricmon.agent.store import CounterStore, PortColumns, PortEntry, PortKey
from fabricmon.core.slicing import group_index
from fabricmon.core.topology import Topology
from fabricmon.core.vocabulary import PriorityMap

PASS, FAIL, UNKNOWN = "pass", "fail", "unknown"
STATUSES = (PASS, FAIL, UNKNOWN)
PRIORITIES = range(8)  # IEEE 802.1Q priority code points 0..7
DSCPS = range(64)  # the 6-bit DSCP field (RFC 2474)
PFC_FRAMES = ("pfc_rx_pause_frames", "pfc_tx_pause_frames")  # per priority: only Ethernet ports have them
# "Sustained" PFC for the behaviour half of ecn_after_pfc: pause frames sent in each of this many
# consecutive intervals (30 s at the default 10 s poll). One interval of PFC is an ordinary burst
# that outran ECN's reaction time (DCQCN reacts per RTT and CNP interval, not instantly).
SUSTAINED_INTERVALS = 3
HOST_TRAFFIC = [("tx_bytes", ()), ("rx_bytes", ())]  # a host's RDMA port counts RoCE only (mlx5 port counters)


@dataclass(frozen=True, slots=True)
class CheckDef:
    """One item of the checklist: what must hold, what to fix, and where the rule comes from."""

    name: str
    scope: str  # "port" or "link"
    what: str
    fix: str
    source: str


CHECKS: dict[str, CheckDef] = {c.name: c for c in [
    CheckDef("pfc_not_enabled", "port",
             "PFC is on for every lossless priority on a port that carries RoCE (it faces a host, is a host, is cabled to "
             "another switch, or its counters show traffic on that priority)",
             "enable PFC on the lossless priority",
             "IEEE 802.1Qbb (per-priority pause: a priority is lossless only where PFC is enabled for it); NVIDIA Cumulus "
             "Linux 'RDMA over Converged Ethernet - RoCE' (lossless mode enables PFC on switch priority 3)"),
    CheckDef("pfc_on_lossy_priority", "port",
             "PFC is off on every priority outside the fabric's lossless set, and no PFC frames are seen on one",
             "disable PFC on priorities outside the lossless set",
             "IEEE 802.1Qbb (a paused priority blocks all of its traffic: head-of-line blocking for best-effort "
             "classes); NVIDIA Cumulus Linux RoCE defaults (PFC on priority 3 only)"),
    CheckDef("pfc_priorities_mismatch", "link",
             "both ends of the cable enable PFC on the same priorities",
             "make both ends enable PFC on the same (lossless) priorities",
             "IEEE 802.1Qaz DCBX: the PFC configuration TLV is symmetric, and a PFC frame is honoured only on priorities "
             "the receiver enabled (lldptool-pfc(8); Aruba AOS-CX DCBx: a peer PFC configuration that differs is a "
             "misconfiguration)"),
    CheckDef("ecn_not_enabled", "port",
             "ECN marking is on for the lossless queue (switch) and the NIC's notification and reaction points are on "
             "for the lossless priority (host)",
             "enable ECN marking on the lossless queue (switch) or roce_np/roce_rp ECN for the priority (host)",
             "NVIDIA Cumulus Linux RoCE (ECN on traffic class 3 in both RoCE modes); NVIDIA MLNX_OFED DCQCN "
             "(/sys/class/net/<if>/ecn/roce_np|roce_rp/enable/<prio>); Zhu et al., 'Congestion Control for Large-Scale "
             "RDMA Deployments' (DCQCN), SIGCOMM 2015"),
    CheckDef("ecn_after_pfc", "port",
             "ECN starts marking below the PFC XOFF threshold of the lossless priority group, and the port does not "
             "keep pausing its peer while no lossless queue of its (unpaused) switch marks a packet",
             "lower the ECN minimum threshold below the PFC XOFF threshold",
             "Zhu et al., DCQCN, SIGCOMM 2015 (ECN must be marked before PFC triggers, or PFC does the congestion "
             "control); NVIDIA Onyx 'show roce' defaults (ECN min 150 KB, max 1500 KB); NVIDIA NVUE command "
             "reference, 'nv show qos pfc default-global' (xoff-threshold in bytes)"),
    CheckDef("pfc_watchdog_off", "port",
             "the PFC watchdog (deadlock/storm detection) is on for every lossless priority",
             "enable the PFC watchdog on the lossless priority",
             "SONiC 'PFC Watchdog Design' (detects and mitigates PFC storms on lossless queues); Juniper 'PFC "
             "watchdog'; NVIDIA Cumulus Linux PFC watchdog"),
    CheckDef("trust_mismatch", "link",
             "a host and its switch port classify alike: both trust DSCP (L3) or both PCP (L2), and with DSCP "
             "trust they map the lossless DSCP values to the same priorities",
             "set the same trust mode and DSCP-to-priority map on the host and its switch port",
             "NVIDIA MLNX_OFED/MLNX_EN 'Quality of Service' (mlnx_qos --trust dscp, dscp2prio); NVIDIA Onyx 'show "
             "roce' (port trust mode L3, DSCP 26 -> priority 3)"),
    CheckDef("headroom_missing", "port",
             "the ingress priority group of each lossless priority has headroom buffer reserved",
             "reserve headroom for the lossless priority group (RoCE lossless mode does)",
             "Linux mlxsw 'Add IEEE 802.1Qbb PFC support' and mlx5e 'Receive buffer configuration' (lossless PG size = "
             "XOFF + delay x cell factor + MTU: the headroom absorbs what arrives after XOFF); Juniper cable-length "
             "(headroom for PFC)"),
]}


@dataclass(slots=True)
class Result:
    """One check on one port (or link), for one priority where the check is per priority.

    ``device``/``port`` is the end to fix first; ``peer_device``/``peer_port`` the other end of
    the cable (link checks) or the cable peer (port checks, for reference). ``lossless_traffic``:
    the port (either end, for a link) carried lossless traffic in the last interval.
    """

    check: str
    status: str
    device: str
    port: str
    priority: int | None = None
    peer_device: str | None = None
    peer_port: str | None = None
    evidence: dict[str, Any] = field(default_factory=dict)
    summary: str = ""
    lossless_traffic: bool = False
    covered_by: str | None = None  # "check device port": the result that explains this one

    @property
    def reported(self) -> bool:
        """A failure to raise as a finding (not explained by another one)."""
        return self.status == FAIL and self.covered_by is None

    def to_json(self) -> dict[str, Any]:
        return {"check": self.check, "status": self.status, "device": self.device, "port": self.port,
                "priority": self.priority, "peer_device": self.peer_device, "peer_port": self.peer_port,
                "summary": self.summary, "evidence": self.evidence, "lossless_traffic": self.lossless_traffic,
                "covered_by": self.covered_by}


def _gauge(entry: PortEntry | None, name: str, *sub: Any) -> float | None:
    """A config gauge; sub-label integers are also looked up as strings (a source that kept
    the label as text, before the pipeline knew the label was numeric)."""
    if entry is None:
        return None
    v = entry.gauge(name, sub)
    if v is None and any(isinstance(x, int) for x in sub):
        v = entry.gauge(name, tuple(str(x) if isinstance(x, int) else x for x in sub))
    return v


def _on(v: float | None) -> bool | None:
    return None if v is None else v >= 0.5


class FabricView:
    """What the checks read: the store (read API), the topology, the fabric's priority map and
    shape (which device is a host: ``shape``, the ``fabric`` analysis's, or one of its own)."""

    def __init__(self, store: CounterStore, topology: Topology, pmap: PriorityMap, shape: FabricShape | None = None) -> None:
        self.store = store
        self.topology = topology
        self.pmap = pmap
        self.shape = shape if shape is not None else FabricShape(store, topology)
        self._by_device: tuple[int, dict[str, list[PortKey]]] | None = None  # device -> its ports, per store layout
        self._pfc_ecn: dict[tuple[str, int], tuple[float, tuple[bool, int, bool]]] = {}  # see _device_pfc_ecn
        self._evidence: dict[PortKey, tuple[PortEntry, tuple[object, int], bool]] = {}  # see ethernet_evidence

    def entry(self, pk: PortKey) -> PortEntry | None:
        return self.store.port(pk)

    def canonical(self, pk: PortKey) -> PortKey:
        """The store's name of a port the topology names differently (:meth:`FabricShape.canonical`)."""
        return self.shape.canonical(pk)

    def is_host(self, device: str) -> bool:
        """The fabric's one host classification (:meth:`FabricShape.is_host`)."""
        return self.shape.is_host(device)

    def peer(self, pk: PortKey) -> PortKey | None:
        """The other end of the cable, by the store's names (:meth:`FabricShape.peer`)."""
        return self.shape.peer(pk)

    def ethernet_evidence(self, pk: PortKey) -> bool:
        """The port shows lossless-Ethernet state: a config gauge for a lossless priority, or a
        PFC counter (InfiniBand ports have neither, so they stay out of the audit).

        Asked for every updated port of every pass, and it depends only on which series the
        port has: the answer is kept per port until its series change (``PortEntry.shape``)."""
        entry = self.entry(pk)
        if entry is None:
            return False
        shape = entry.shape
        got = self._evidence.get(pk)
        if got is None or got[0] is not entry or got[1] != shape:
            if len(self._evidence) > 2 * len(self.store.ports) + 1024:  # ports that left the store
                self._evidence = {k: v for k, v in self._evidence.items() if self.store.port(k) is v[0]}
            got = self._evidence[pk] = (entry, shape, self._has_evidence(entry))
        return got[2]

    def _has_evidence(self, entry: PortEntry) -> bool:
        pm = self.pmap
        for p in pm.lossless:
            if any(_gauge(entry, n, p) is not None for n in ("pfc_enabled", "pfc_peer_enabled", "pfc_watchdog_enabled")):
                return True
            if _gauge(entry, "ecn_enabled", pm.queue(p)) is not None or _gauge(entry, "headroom_bytes", pm.pg(p)) is not None:
                return True
            if _gauge(entry, "nic_ecn_enabled", p, "np") is not None or _gauge(entry, "nic_ecn_enabled", p, "rp") is not None:
                return True
        if _gauge(entry, "qos_trust_dscp") is not None:
            return True
        return any(entry.counter(n, (p,)) is not None for n in PFC_FRAMES for p in PRIORITIES)

    def device_ports(self, device: str) -> list[PortKey]:
        """The store's ports of one device (cached per store layout)."""
        if self._by_device is None or self._by_device[0] != self.store.layout:
            got: dict[str, list[PortKey]] = {}
            for pk in self.store.ports:
                got.setdefault(pk[0], []).append(pk)
            self._by_device = (self.store.layout, got)
        return self._by_device[1].get(device, [])

    def pfc_without_ecn(self, pk: PortKey, priority: int) -> dict[str, Any] | None:
        """Evidence that PFC engaged before ECN on ``priority`` at this switch port, or None (see
        :func:`check_ecn_after_pfc`). None also when the device shows no ECN mark counter for the
        queue: no marks that cannot be counted are not "zero marks"."""
        entry = self.entry(pk)
        sent = entry.counter("pfc_tx_pause_frames", (priority,)) if entry is not None else None
        if sent is None or sent.increases(SUSTAINED_INTERVALS) < SUSTAINED_INTERVALS:
            return None
        if self._storm_level(entry, priority):
            return None
        paused, marks_seen, marked = self._device_pfc_ecn(pk[0], priority, sent.poll_t)
        if paused or not marks_seen or marked:
            return None  # paused itself (its queues fill because of the pause), no mark counter, or ECN marked
        return {"pfc_sent_intervals": SUSTAINED_INTERVALS, "pfc_tx_pause_frames": sent.delta,
                "ecn_marked_queues_seen": marks_seen, "ecn_marked_packets": 0}

    @staticmethod
    def _storm_level(entry: PortEntry, priority: int) -> bool:
        """The port kept its peer paused for (nearly) the whole last interval: an ingress that
        never drains is a PFC storm (the ``pfc`` analysis's default ``storm_pause_fraction``), not congestion
        control that engaged too late, whose XOFF/XON cycles leave the peer sending between pauses."""
        se = entry.counter("pfc_tx_pause_seconds", (priority,))
        delta, dt = (se.delta, se.dt) if se is not None else (None, None)
        return bool(delta is not None and dt and delta / dt >= STORM_PAUSE_FRACTION)

    def _device_pfc_ecn(self, device: str, priority: int, poll_t: float) -> tuple[bool, int, bool]:
        """(the device received PFC on ``priority``, how many ECN mark counters of its queue it
        shows, whether one of them increased), over the last :data:`SUSTAINED_INTERVALS`
        intervals; once per device, priority and poll (every port of a device shares its poll)."""
        key = (device, priority)
        got = self._pfc_ecn.get(key)
        if got is not None and got[0] == poll_t:
            return got[1]
        q = self.pmap.queue(priority)
        paused, seen, marked = False, 0, False
        for pk in self.device_ports(device):
            e = self.store.ports[pk]
            rx = e.counter("pfc_rx_pause_frames", (priority,))
            paused = paused or (rx is not None and rx.increases(SUSTAINED_INTERVALS) > 0)
            m = e.counter("ecn_marked_packets", (q,))
            if m is not None:
                seen += 1
                marked = marked or m.increases(SUSTAINED_INTERVALS) > 0
        self._pfc_ecn[key] = (poll_t, (paused, seen, marked))
        return paused, seen, marked

    # ------------------------------------------------------------------ traffic
    def traffic_keys(self) -> list[tuple[str, tuple[Any, ...]]]:
        """The counters that show lossless-class traffic on any port (:meth:`lossless_traffic`)."""
        pm = self.pmap
        keys: list[tuple[str, tuple[Any, ...]]] = []
        for p in pm.lossless:
            q = pm.queue(p)
            keys += [("queue_tx_packets", (q,)), ("queue_tx_bytes", (q,)), ("pfc_rx_pause_frames", (p,)), ("pfc_tx_pause_frames", (p,))]
        return keys

    def lossless_traffic(self, pk: PortKey, recent: bool) -> bool | None:
        """Did lossless-class traffic cross the port? ``recent``: in the last interval, else within
        the kept history. None when no counter that could show it exists.

        Evidence: the egress queue of a lossless priority transmitted, or PFC frames on a lossless
        priority (pause is only sent for traffic of that class). On a host, the RDMA port's
        data counters count RoCE traffic only (mlx5 port counters), which the fabric carries on
        the lossless priority.
        """
        entry = self.entry(pk)
        if entry is None:
            return None
        keys = self.traffic_keys()
        if self.is_host(pk[0]):
            keys += HOST_TRAFFIC
        seen = False
        for name, sub in keys:
            se = entry.counter(name, sub)
            if se is None:
                continue
            seen = True
            if (se.delta or 0) > 0 if recent else se.moved_in_history():
                return True
        return False if seen else None

    def carries_roce(self, pk: PortKey) -> tuple[bool | None, str]:
        """(whether the port is part of the lossless path, why). A host port, a port facing a host
        or cabled to another switch carries the fabric's RoCE; otherwise the counters decide."""
        if self.is_host(pk[0]):
            return True, "a host port"
        peer = self.peer(pk)
        if peer is not None:
            return True, f"faces host {peer[0]}" if self.is_host(peer[0]) else f"cabled to {peer[0]} {peer[1]}"
        moved = self.lossless_traffic(pk, recent=False)
        if moved is None:
            return None, "no cable known and no traffic counter for the lossless priority"
        return moved, "traffic on the lossless priority" if moved else "no cable known and no traffic on the lossless priority"

    def pfc_set(self, pk: PortKey) -> tuple[dict[int, bool], str]:
        """The port's PFC enable per priority as far as visible, and where it was read: its own
        ``pfc_enabled``, else the DCBX view its cable peer received (``pfc_peer_enabled``)."""
        own = {p: v for p in PRIORITIES if (v := _on(_gauge(self.entry(pk), "pfc_enabled", p))) is not None}
        if own:
            return own, "own configuration"
        peer = self.peer(pk)
        if peer is not None:
            seen = {p: v for p in PRIORITIES if (v := _on(_gauge(self.entry(peer), "pfc_peer_enabled", p))) is not None}
            if seen:
                return seen, f"DCBX as received by {peer[0]} {peer[1]}"
        return {}, "not visible"


def _prios(d: dict[int, bool]) -> list[int]:
    return sorted(p for p, v in d.items() if v)


def _where(pk: PortKey) -> str:
    return f"{pk[0]} {pk[1]}"


def _result(check: str, status: str, pk: PortKey, view: FabricView, priority: int | None = None,
            evidence: dict[str, Any] | None = None, what: str = "", peer: PortKey | None = None) -> Result:
    peer = peer if peer is not None else view.peer(pk)
    defn = CHECKS[check]
    r = Result(check, status, pk[0], pk[1], priority, peer[0] if peer else None, peer[1] if peer else None,
               {"check": check, **(evidence or {})})
    if status == FAIL:
        link = f" (cable to {_where(peer)})" if peer and _where(peer) not in what else ""
        r.summary = f"{_where(pk)}: {what}{link}. Fix first: {defn.fix} on {_where(pk)}."
        r.lossless_traffic = bool(view.lossless_traffic(pk, recent=True)) or (
            defn.scope == "link" and peer is not None and bool(view.lossless_traffic(peer, recent=True)))
    elif status == UNKNOWN:
        r.summary = f"{check} on {_where(pk)}: not verified ({(evidence or {}).get('missing', 'an input is not visible')})"
    else:
        r.summary = f"{check} on {_where(pk)}: pass"
    return r


# ---------------------------------------------------------------------- port checks
def _per_lossless(check: str, view: FabricView, pk: PortKey, read: Any, what_off: str,
                  relevant: tuple[bool | None, str] | None) -> list[Result]:
    """A check that a setting is on for each lossless priority: ``read(priority)`` gives
    (on: bool | None, evidence). ``relevant`` (None: always) gates a failure to RoCE ports."""
    out = []
    for p in view.pmap.lossless:
        on, ev = read(p)
        if on is None:
            out.append(_result(check, UNKNOWN, pk, view, p, {**ev, "missing": ev.get("missing", "setting not visible")}))
        elif on:
            out.append(_result(check, PASS, pk, view, p, ev))
        elif relevant is None or relevant[0] is True:
            why = f" ({relevant[1]})" if relevant else ""
            out.append(_result(check, FAIL, pk, view, p, {**ev, **({"carries_roce": relevant[1]} if relevant else {})},
                               f"{what_off} for lossless priority {p}{why}"))
        elif relevant[0] is False:
            out.append(_result(check, PASS, pk, view, p, {**ev, "carries_roce": relevant[1]}))
        else:
            out.append(_result(check, UNKNOWN, pk, view, p, {**ev, "missing": relevant[1]}))
    return out


def check_pfc_not_enabled(view: FabricView, pk: PortKey) -> list[Result]:
    entry = view.entry(pk)

    def read(p: int) -> tuple[bool | None, dict[str, Any]]:
        v = _on(_gauge(entry, "pfc_enabled", p))
        return v, ({"pfc_enabled": int(v)} if v is not None else {"missing": f"pfc_enabled for priority {p}"})

    return _per_lossless("pfc_not_enabled", view, pk, read, "PFC is off", view.carries_roce(pk))


def check_pfc_on_lossy_priority(view: FabricView, pk: PortKey) -> list[Result]:
    """Config: PFC enabled on a priority outside the lossless set. Behaviour: PFC frames on such
    a priority in the last interval, sent by this port or received from a peer that is not
    polled (a polled peer reports its own frames)."""
    entry = view.entry(pk)
    lossless = set(view.pmap.lossless)
    lossy = [p for p in PRIORITIES if p not in lossless]
    cfg = {p: _on(_gauge(entry, "pfc_enabled", p)) for p in lossy}
    peer = view.peer(pk)
    peer_polled = peer is not None and view.entry(peer) is not None
    bad: dict[int, dict[str, Any]] = {}
    for p in lossy:
        ev: dict[str, Any] = {}
        if cfg[p]:
            ev["pfc_enabled"] = 1
        for name, who in (("pfc_tx_pause_frames", "sent"), ("pfc_rx_pause_frames", "received")):
            if who == "received" and peer_polled:
                continue
            se = entry.counter(name, (p,)) if entry is not None else None
            if se is not None and (se.delta or 0) > 0:
                ev[f"pfc_frames_{who}"] = se.delta
        if ev:
            bad[p] = ev
    if bad:
        out = []
        for p, ev in sorted(bad.items()):
            how = "PFC is enabled" if "pfc_enabled" in ev else "PFC frames are " + " and ".join(
                k.removeprefix("pfc_frames_") for k in ev if k.startswith("pfc_frames_"))
            out.append(_result("pfc_on_lossy_priority", FAIL, pk, view, p, {**ev, "lossless": sorted(lossless)},
                               f"{how} on priority {p}, outside the lossless set {sorted(lossless)}"))
        return out
    missing = [p for p in lossy if cfg[p] is None]
    if missing:
        return [_result("pfc_on_lossy_priority", UNKNOWN, pk, view, None, {"missing": f"pfc_enabled for priorities {missing}"})]
    return [_result("pfc_on_lossy_priority", PASS, pk, view, None, {"pfc_priorities": _prios({p: bool(v) for p, v in cfg.items()})})]


def check_ecn_not_enabled(view: FabricView, pk: PortKey) -> list[Result]:
    entry = view.entry(pk)
    host = view.is_host(pk[0])

    def read(p: int) -> tuple[bool | None, dict[str, Any]]:
        if host:
            roles = {r: _on(_gauge(entry, "nic_ecn_enabled", p, r)) for r in ("np", "rp")}
            ev: dict[str, Any] = {f"nic_ecn_{r}": int(v) for r, v in roles.items() if v is not None}
            if any(v is False for v in roles.values()):
                return False, ev
            if any(v is None for v in roles.values()):
                return None, {**ev, "missing": f"nic_ecn_enabled np/rp for priority {p}"}
            return True, ev
        q = view.pmap.queue(p)
        v = _on(_gauge(entry, "ecn_enabled", q))
        return v, ({"queue": q, "ecn_enabled": int(v)} if v is not None else {"queue": q, "missing": f"ecn_enabled for queue {q}"})

    return _per_lossless("ecn_not_enabled", view, pk, read, "ECN is off", view.carries_roce(pk))


def check_ecn_after_pfc(view: FabricView, pk: PortKey) -> list[Result]:
    """ECN must mark before PFC triggers, checked two ways per lossless priority.

    Configuration: the ECN minimum marking threshold of the lossless queue against the PFC XOFF
    threshold of its ingress priority group, where both are visible (``kmin >= xoff`` fails).

    Behaviour (:meth:`FabricView.pfc_without_ecn`): the port kept sending PFC on the priority
    for :data:`SUSTAINED_INTERVALS` intervals, below storm level (a port that pauses its peer
    all the time is a storm, reported as such), while its device received no PFC on it (the
    congestion starts at this switch, so its own queues filled up to XOFF) and no queue of the
    lossless class on the device ECN-marked a packet. With marking below XOFF the queue would
    have marked long before its ingress paused the peer (DCQCN, SIGCOMM 2015). A device that is
    itself paused on that priority is left out: its queues fill because it is paused (a storm
    spreading, a deadlock), which says nothing about where ECN marks.
    """
    entry = view.entry(pk)
    pm = view.pmap
    out = []
    host = host_port(view, pk)
    for p in pm.lossless:
        q, pg = pm.queue(p), pm.pg(p)
        kmin = _gauge(entry, "ecn_min_threshold_bytes", q)
        kmax = _gauge(entry, "ecn_max_threshold_bytes", q)
        xoff = _gauge(entry, "pfc_xoff_threshold_bytes", pg)
        ev: dict[str, Any] = {"queue": q, "pg": pg}
        ev.update({k: v for k, v in (("ecn_min_threshold_bytes", kmin), ("ecn_max_threshold_bytes", kmax),
                                      ("pfc_xoff_threshold_bytes", xoff)) if v is not None})
        seen = None if host else view.pfc_without_ecn(pk, p)
        if kmin is not None and xoff is not None and kmin >= xoff:
            out.append(_result("ecn_after_pfc", FAIL, pk, view, p, ev,
                               f"ECN starts marking at {kmin:.0f} B, at or above the PFC XOFF threshold {xoff:.0f} B, "
                               f"on priority {p}"))
        elif seen:
            out.append(_result("ecn_after_pfc", FAIL, pk, view, p, {**ev, **seen},
                               f"PFC was sent on priority {p} for {seen['pfc_sent_intervals']} intervals while no queue "
                               f"{q} of {pk[0]} ECN-marked a packet and {pk[0]} was not paused itself"))
        elif kmin is not None and xoff is not None:
            out.append(_result("ecn_after_pfc", PASS, pk, view, p, ev))
        elif kmin is None and xoff is None and host:
            continue  # a NIC has no switch ECN threshold: not applicable
        else:
            miss = [n for n, v in (("ecn_min_threshold_bytes", kmin), ("pfc_xoff_threshold_bytes", xoff)) if v is None]
            out.append(_result("ecn_after_pfc", UNKNOWN, pk, view, p, {**ev, "missing": " and ".join(miss)}))
    return out


def host_port(view: FabricView, pk: PortKey) -> bool:
    return view.is_host(pk[0])


def _switch_setting(check: str, gauge: str, index: str, what_off: str, positive: bool = False) -> Any:
    """A per-lossless-priority switch setting (``index``: "priority" or "pg"); on a host port the
    check applies only where the host reports the setting."""
    def run(view: FabricView, pk: PortKey) -> list[Result]:
        entry = view.entry(pk)
        host = host_port(view, pk)

        def read(p: int) -> tuple[bool | None, dict[str, Any]]:
            key = view.pmap.pg(p) if index == "pg" else p
            v = _gauge(entry, gauge, key)
            base = {index: key} if index != "priority" else {}
            if v is None:
                return None, {**base, "missing": f"{gauge} for {index} {key}"}
            return (v > 0) if positive else bool(_on(v)), {**base, gauge: v}

        results = _per_lossless(check, view, pk, read, what_off, None)
        return [r for r in results if not (host and r.status == UNKNOWN)]
    return run


check_pfc_watchdog_off = _switch_setting("pfc_watchdog_off", "pfc_watchdog_enabled", "priority", "the PFC watchdog is off")
check_headroom_missing = _switch_setting("headroom_missing", "headroom_bytes", "pg", "no headroom buffer is reserved",
                                         positive=True)

PORT_CHECKS = (check_pfc_not_enabled, check_pfc_on_lossy_priority, check_ecn_not_enabled, check_ecn_after_pfc,
               check_pfc_watchdog_off, check_headroom_missing)


# ---------------------------------------------------------------------- link checks
def _fix_end(view: FabricView, a: PortKey, b: PortKey, a_bad: bool, b_bad: bool) -> tuple[PortKey, PortKey]:
    """(the end to fix first, the other): the one that deviates; if both or neither, the host end,
    else the end that sorts first."""
    if a_bad != b_bad:
        return (a, b) if a_bad else (b, a)
    if view.is_host(a[0]) != view.is_host(b[0]):
        return (a, b) if view.is_host(a[0]) else (b, a)
    return (a, b) if a <= b else (b, a)


def check_pfc_priorities_mismatch(view: FabricView, a: PortKey, b: PortKey) -> list[Result]:
    """Both ends' PFC sets (own gauges, or the DCBX view the other end received), compared on
    the priorities visible at both; pass only when all eight are visible at both ends."""
    sa, how_a = view.pfc_set(a)
    sb, how_b = view.pfc_set(b)
    lossless = set(view.pmap.lossless)
    ev = {"ends": {_where(a): {"pfc_priorities": _prios(sa), "seen": how_a}, _where(b): {"pfc_priorities": _prios(sb), "seen": how_b}}}
    common = sorted(set(sa) & set(sb))
    differ = [p for p in common if sa[p] != sb[p]]
    if differ:
        a_bad = any(sa[p] != (p in lossless) for p in differ)
        b_bad = any(sb[p] != (p in lossless) for p in differ)
        bad, good = _fix_end(view, a, b, a_bad, b_bad)
        sbad, sgood = (sa, sb) if bad == a else (sb, sa)
        out = [_result("pfc_priorities_mismatch", FAIL, bad, view, p, ev,
                       f"PFC priority {p} is {'on' if sbad[p] else 'off'} here and {'on' if sgood[p] else 'off'} at "
                       f"{_where(good)}", peer=good) for p in differ]
        if view.entry(bad) is None and view.entry(good) is not None:
            # Seen through DCBX only: the finding goes on the polled end (a device nobody polls
            # never brings the fresh data a finding needs), the fix stays on the other.
            for r in out:
                r.device, r.port, r.peer_device, r.peer_port = good[0], good[1], bad[0], bad[1]
                r.summary = (f"{_where(good)}: its link partner {_where(bad)} has PFC priority {r.priority} "
                             f"{'on' if sbad[r.priority] else 'off'} (seen through DCBX), here it is "
                             f"{'on' if sgood[r.priority] else 'off'}. Fix first: {CHECKS['pfc_priorities_mismatch'].fix} "
                             f"on {_where(bad)}.")
        return out
    end = a if a <= b else b
    other = b if end == a else a
    if len(common) == len(PRIORITIES):
        return [_result("pfc_priorities_mismatch", PASS, end, view, None, ev, peer=other)]
    unseen = [_where(x) for x, s in ((a, sa), (b, sb)) if len(s) < len(PRIORITIES)]
    return [_result("pfc_priorities_mismatch", UNKNOWN, end, view, None,
                    {**ev, "missing": f"the PFC configuration of {', '.join(unseen)}"}, peer=other)]


def check_dcbx_partner(view: FabricView, pk: PortKey) -> list[Result]:
    """``pfc_priorities_mismatch`` on a port whose cable the topology does not know but whose DCBX
    table shows the link partner's PFC set (``pfc_peer_enabled``): the two ends are still this
    port and whoever sent that TLV. Nothing when the port shows no partner set."""
    entry = view.entry(pk)
    partner = {p: v for p in PRIORITIES if (v := _on(_gauge(entry, "pfc_peer_enabled", p))) is not None}
    if not partner:
        return []
    own = {p: v for p in PRIORITIES if (v := _on(_gauge(entry, "pfc_enabled", p))) is not None}
    lossless = set(view.pmap.lossless)
    ev = {"ends": {_where(pk): {"pfc_priorities": _prios(own), "seen": "own configuration" if own else "not visible"},
                   "DCBX link partner": {"pfc_priorities": _prios(partner), "seen": f"DCBX as received by {_where(pk)}"}}}
    common = sorted(set(own) & set(partner))
    differ = [p for p in common if own[p] != partner[p]]
    out = []
    for p in differ:
        here_bad = own[p] != (p in lossless)
        what = (f"PFC priority {p} is {'on' if own[p] else 'off'} here and {'on' if partner[p] else 'off'} at the DCBX link "
                f"partner (not in the topology)")
        r = _result("pfc_priorities_mismatch", FAIL, pk, view, p, ev, what)
        if not here_bad:
            r.summary = (f"{_where(pk)}: {what}. Fix first: make the link partner of {_where(pk)} enable PFC on the lossless "
                         f"priorities only.")
        out.append(r)
    if out:
        return out
    if len(common) == len(PRIORITIES):
        return [_result("pfc_priorities_mismatch", PASS, pk, view, None, ev)]
    return [_result("pfc_priorities_mismatch", UNKNOWN, pk, view, None,
                    {**ev, "missing": "eight priorities of PFC configuration at both ends"})]


def _dscp_map(entry: PortEntry | None) -> dict[int, int]:
    """DSCP -> priority as far as the port shows it (64 probes; the text form of the DSCP label
    only when no integer one is there, as :func:`_gauge` does for one value)."""
    if entry is None:
        return {}
    got = {d: int(v) for d in DSCPS if (v := entry.gauge("dscp_priority", (d,))) is not None}
    return got or {d: int(v) for d in DSCPS if (v := entry.gauge("dscp_priority", (str(d),))) is not None}


def check_trust_mismatch(view: FabricView, a: PortKey, b: PortKey) -> list[Result]:
    """Host vs its switch port: trust mode, and with DSCP trust the DSCP -> priority map on the
    DSCP values either end sends to a lossless priority."""
    host, switch = (a, b) if view.is_host(a[0]) else (b, a)
    eh, es = view.entry(host), view.entry(switch)
    th, ts = _on(_gauge(eh, "qos_trust_dscp")), _on(_gauge(es, "qos_trust_dscp"))
    name = {True: "DSCP (L3)", False: "PCP (L2)", None: "not visible"}
    ev: dict[str, Any] = {"trust": {_where(host): name[th], _where(switch): name[ts]}}
    if th is None or ts is None:
        missing = " and ".join(_where(x) for x, t in ((host, th), (switch, ts)) if t is None)
        return [_result("trust_mismatch", UNKNOWN, host, view, None, {**ev, "missing": f"the trust mode of {missing}"}, peer=switch)]
    if th != ts:
        bad, good = (host, switch) if not th else (switch, host)  # RoCEv2 guides trust DSCP (L3)
        return [_result("trust_mismatch", FAIL, bad, view, None, ev,
                        f"trusts {name[th if bad == host else ts]} but {_where(good)} trusts "
                        f"{name[ts if bad == host else th]}", peer=good)]
    if not th:
        return [_result("trust_mismatch", PASS, host, view, None, ev, peer=switch)]
    return _check_dscp_maps(view, host, switch, eh, es, ev)


def _check_dscp_maps(view: FabricView, host: PortKey, switch: PortKey, eh: PortEntry | None, es: PortEntry | None,
                     ev: dict[str, Any]) -> list[Result]:
    """Both ends trust DSCP: the DSCP -> priority maps must agree on every DSCP value either end
    sends to a lossless priority."""
    mh, ms = _dscp_map(eh), _dscp_map(es)
    lossless = set(view.pmap.lossless)
    keys = sorted(d for d in set(mh) | set(ms) if mh.get(d) in lossless or ms.get(d) in lossless)
    ev["dscp_to_lossless"] = {_where(host): {d: mh.get(d) for d in keys}, _where(switch): {d: ms.get(d) for d in keys}}
    differ = [d for d in keys if d in mh and d in ms and mh[d] != ms[d]]
    if differ:
        bad = host if any(mh[d] not in lossless for d in differ) or all(ms[d] not in lossless for d in differ) else switch
        good = switch if bad == host else host
        return [_result("trust_mismatch", FAIL, bad, view, None, {**ev, "dscp_differ": differ},
                        f"DSCP {', '.join(map(str, differ))} map to other priorities than at {_where(good)}", peer=good)]
    if not keys or any(d not in mh or d not in ms for d in keys):
        return [_result("trust_mismatch", UNKNOWN, host, view, None,
                        {**ev, "missing": "the DSCP-to-priority map of the lossless DSCP values at both ends"}, peer=switch)]
    return [_result("trust_mismatch", PASS, host, view, None, ev, peer=switch)]


# ---------------------------------------------------------------------- what the checks read from counters
class Behaviour(NamedTuple):
    """What the port checks read from counters, per port (:func:`behaviour`). ``recent`` and
    ``history``: :meth:`FabricView.lossless_traffic` in the last interval and within the kept
    history, as 0 (no counter could show it), 1 (no) or 2 (yes). ``volatile``: a check fails
    from behaviour now (PFC frames on a priority outside the lossless set, or
    :meth:`FabricView.pfc_without_ecn`), and its evidence carries this interval's counts."""

    recent: np.ndarray
    history: np.ndarray
    volatile: np.ndarray


def behaviour(view: FabricView, ports: Sequence[PortKey]) -> Behaviour:
    """Every counter input of the port checks on ``ports``, in whole-array passes over the
    store's columns (no visit per port).

    With its configuration gauges (noted by the store when they change), its cable and which
    devices are hosts, that is every input of a port's results, and with its cable peer's,
    every input of its link's. ``recent`` is read only by a failing result (its severity),
    ``history`` only for a port no cable and no host kind says carries RoCE
    (:meth:`FabricView.carries_roce`): the misconfig rule compares each where it is read."""
    n = len(ports)
    cols = view.store.columns(ports)
    devices: dict[str, int] = {}
    device_at = np.fromiter(map(devices.setdefault, map(itemgetter(0), ports), count()), np.int64, n)
    names = list(devices)  # (a device's code is its first port's position: codes index ``names`` once renumbered)
    first = np.fromiter(devices.values(), np.int64, len(names))
    device_at = np.searchsorted(first, device_at)
    host = np.fromiter(map(view.is_host, names), bool, len(names))[device_at]
    seen, recent, moved = np.zeros(n, bool), np.zeros(n, bool), np.zeros(n, bool)
    for key, where in [*((k, None) for k in view.traffic_keys()), *((k, host) for k in HOST_TRAFFIC)]:
        col = cols.counter(*key)
        has = ~np.isnan(col.poll_t) if where is None else ~np.isnan(col.poll_t) & where
        seen |= has
        recent |= has & (col.delta > 0)
        moved |= has & cols.moved_in_history(*key)
    volatile = np.zeros(n, bool)
    lossless = set(view.pmap.lossless)
    with np.errstate(invalid="ignore"):
        for p in PRIORITIES:
            if p not in lossless:
                for name in PFC_FRAMES:
                    volatile |= cols.counter(name, (p,)).delta > 0
    for p in view.pmap.lossless:
        volatile |= _pfc_without_ecn(view, names, device_at, cols, ~host, p)
    return Behaviour(np.where(seen, 1 + recent, 0), np.where(seen, 1 + moved, 0), volatile)


def _pfc_without_ecn(view: FabricView, names: list[str], device_at: np.ndarray, cols: PortColumns, switch: np.ndarray,
                     p: int) -> np.ndarray:
    """:meth:`FabricView.pfc_without_ecn` on every switch port at once (``names[device_at[i]]``
    is port i's device): PFC sent in each of the last :data:`SUSTAINED_INTERVALS` intervals,
    below storm level, on a device that received no PFC on ``p`` and shows ECN mark counters
    of its queue that did not move."""
    sent = switch & (cols.increases("pfc_tx_pause_frames", (p,), SUSTAINED_INTERVALS) >= SUSTAINED_INTERVALS)
    if sent.any():
        se = cols.counter("pfc_tx_pause_seconds", (p,))
        with np.errstate(all="ignore"):
            sent &= ~(~np.isnan(se.delta) & ~np.isnan(se.dt) & (se.dt != 0) & (se.delta / se.dt >= STORM_PAUSE_FRACTION))
    if not sent.any():
        return sent
    used = np.unique(device_at[sent])  # the devices of the ports that sent: all of their ports count
    members = [view.device_ports(names[d]) for d in used.tolist()]
    group = group_index([len(m) for m in members])
    dev = view.store.columns([pk for m in members for pk in m])
    q = view.pmap.queue(p)
    marks = ~np.isnan(dev.counter("ecn_marked_packets", (q,)).poll_t)
    paused, marked = np.zeros(len(used), bool), np.zeros(len(used), bool)
    np.logical_or.at(paused, group, dev.increases("pfc_rx_pause_frames", (p,), SUSTAINED_INTERVALS) > 0)
    np.logical_or.at(marked, group, marks & (dev.increases("ecn_marked_packets", (q,), SUSTAINED_INTERVALS) > 0))
    quiet = np.zeros(len(names), bool)
    quiet[used] = ~paused & (np.bincount(group, weights=marks, minlength=len(used)) > 0) & ~marked
    return sent & quiet[device_at]


# ---------------------------------------------------------------------- the checklist
# Port checks a failing check explains on the same port and priority.
_EXPLAINS = {"pfc_not_enabled": ("pfc_watchdog_off", "headroom_missing", "ecn_after_pfc"),
             "ecn_not_enabled": ("ecn_after_pfc",)}


def mark_explained(results: list[Result]) -> None:
    """Mark failures another failure explains (see the module docstring)."""
    causes: dict[tuple[str, str, str, int | None], Result] = {}
    for r in results:
        if r.status == FAIL and r.check in ("pfc_not_enabled", "pfc_on_lossy_priority", "ecn_not_enabled"):
            causes.setdefault((r.check, r.device, r.port, r.priority), r)
    for r in results:
        if r.status != FAIL:
            continue
        found = [c for cause, effects in _EXPLAINS.items() if r.check in effects
                 if (c := causes.get((cause, r.device, r.port, r.priority))) is not None]
        if r.check == "pfc_priorities_mismatch":
            found += [c for end in ((r.device, r.port), (r.peer_device or "", r.peer_port or ""))
                      for cause in ("pfc_not_enabled", "pfc_on_lossy_priority")
                      if (c := causes.get((cause, end[0], end[1], r.priority))) is not None]
        if found:
            r.covered_by = f"{found[0].check} {found[0].device} {found[0].port}"


def audit_ports(view: FabricView) -> tuple[list[PortKey], list[tuple[PortKey, PortKey]]]:
    """The ports and links the audit covers: every port with lossless-Ethernet evidence, the
    cabled ports of the same devices, and their cable peers (polled or not: a peer nobody polls
    is reported ``unknown``, so the summary shows what was not verified)."""
    direct = {pk for pk in view.store.ports if view.ethernet_evidence(pk)}
    devices = {d for d, _ in direct}
    ports = set(direct)
    for raw, _ in view.topology.items():
        a = view.canonical(raw)
        b = view.peer(a)
        if b is not None and (a in direct or a[0] in devices):
            ports.add(a)
            ports.add(b)
    links = sorted({(a, b) if a <= b else (b, a) for a in ports if (b := view.peer(a)) is not None})
    return sorted(ports), links


def port_results(view: FabricView, pk: PortKey) -> list[Result]:
    out: list[Result] = []
    for check in PORT_CHECKS:
        out.extend(check(view, pk))
    if view.peer(pk) is None:
        out.extend(check_dcbx_partner(view, pk))
    return out


def link_results(view: FabricView, a: PortKey, b: PortKey) -> list[Result]:
    out = check_pfc_priorities_mismatch(view, a, b)
    if view.is_host(a[0]) != view.is_host(b[0]):
        out += check_trust_mismatch(view, a, b)
    return out


def run(view: FabricView, ports: Iterable[PortKey] | None = None,
        links: Iterable[tuple[PortKey, PortKey]] | None = None) -> list[Result]:
    """The checklist over ``ports`` and ``links`` (default: :func:`audit_ports`), explained
    failures marked, in a stable order (device, port, check, priority)."""
    if ports is None or links is None:
        all_ports, all_links = audit_ports(view)
        ports = all_ports if ports is None else ports
        links = all_links if links is None else links
    results: list[Result] = []
    for pk in ports:
        results.extend(port_results(view, pk))
    for a, b in links:
        results.extend(link_results(view, a, b))
    mark_explained(results)
    results.sort(key=sort_key)
    return results


def sort_key(r: Result) -> tuple[str, str, str, int]:
    return (r.device, r.port, r.check, -1 if r.priority is None else r.priority)


def counts(results: Iterable[Result]) -> dict[str, dict[str, int]]:
    """check -> status -> count, every check and status present (zeros included)."""
    out = {c: dict.fromkeys(STATUSES, 0) for c in CHECKS}
    for r in results:
        out[r.check][r.status] += 1
    return out


def failing(results: Iterable[Result]) -> Iterator[Result]:
    """The failures to fix (explained ones left out)."""
    return (r for r in results if r.reported)
