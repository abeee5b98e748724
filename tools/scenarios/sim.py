"""A small discrete-time fabric simulator: per-port, per-priority state integrated step by step.

The simulator knows nothing about output formats (see :mod:`tools.scenarios.render`). A
scenario builds a :class:`Fabric`, then for each poll interval hands :meth:`Fabric.step` a
:class:`StepPlan` saying what happened during it: offered load per egress and priority, how
long each egress was paused by its peer (Ethernet PFC) or stalled for credits (InfiniBand),
ECN marking, drops, watchdog events, error bursts, links down. ``step`` turns that into
counter increments that are consistent by construction:

- what one port transmits, its peer receives (bytes and packets);
- an egress paused for a fraction ``f`` of the step transmits at most ``1 - f`` of line rate;
  the pause time it received is the pause time its peer sent, and the pause frames follow
  from the durations: XOFF with quanta 0xFFFF (65535 x 512 bit times) refreshed at half the
  quanta time while continuously paused, XOFF+XON pairs for brief pauses;
- InfiniBand XmitWait counts ticks of 64 bit times at the link rate (so a fully stalled port
  gains ``rate x dt / 64`` ticks, the ib-traffic-monitor convention), data in 4-byte words,
  unless the device declares its ASIC generation (``Device.asic``): then the tick is the one
  NVIDIA's ibdiagnet user manual ("Congestion Assessment on InfiniBand Links") documents for
  it, see :data:`XMIT_WAIT_TICK`;
- a port whose credits are rationed (``StepPlan.credit``, a credit loop broken only by
  head-of-queue lifetime drops) sends at most that fraction of line rate, however long it
  waited: wait and data are not complementary there.

:func:`propagate_pause` derives the hop-by-hop spreading of a storm: an egress that stays
paused fills its queue, the ingress buffers holding traffic for it pass XOFF upstream, and
so on along every flow that crosses it.
"""

from __future__ import annotations

import random
import zlib
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field

PortRef = tuple[str, str]
NPRIO = 8
QUANTA_BITS = 65535 * 512
IB_TICK_BITS = 64
BRIEF_PAUSE_EPISODE_US = 25.0  # a typical short XOFF..XON episode under load

# XmitWait tick per ASIC generation: (bytes of port transmit time per tick, per lane?).
# NVIDIA ibdiagnet user manual v2.13, "Congestion Assessment on InfiniBand Links": Quantum,
# Quantum-2 and Quantum-3 count one tick per 8 bytes of port transmit time whatever the width
# (Tick = 7); Switch-IB 2, Switch-IB and SwitchX one tick per 32 bytes per lane (Tick = 31,
# lost bytes = ticks x 32 x lanes). ConnectX adapters: 8 bytes, inferred from
# NVIDIA/ib-traffic-monitor#3 ("(7+1)*8" bits per tick on modern devices).
XMIT_WAIT_TICK: dict[str, tuple[int, bool]] = {
    "quantum": (8, False), "quantum2": (8, False), "quantum3": (8, False),
    "switchib2": (32, True), "switchib": (32, True), "switchx": (32, True),
    "connectx": (8, False),
}


@dataclass
class PrioState:
    """Cumulative per-priority (= per egress queue / traffic class) state of one port."""

    q_tx_pkts: float = 0.0
    q_tx_bytes: float = 0.0
    ecn_marked: float = 0.0
    q_drops: float = 0.0
    nobuf_drops: float = 0.0
    rx_pause_frames: float = 0.0  # received by this port: its transmitter is paused
    tx_pause_frames: float = 0.0  # sent by this port: it pauses its peer
    rx_pause_us: float = 0.0
    tx_pause_us: float = 0.0
    rx_pause_transitions: float = 0.0
    wd_storms: float = 0.0
    wd_restores: float = 0.0
    wd_drops: float = 0.0
    wd_stormed: bool = False
    occupancy: float = 0.0  # bytes, gauge at sample time
    # Ingress side of the same priority (its priority group / ingress queue on this port).
    pg_nobuf_drops: float = 0.0
    pg_shared_drops: float = 0.0
    pg_occupancy: float = 0.0
    ingress_q_drops: float = 0.0


PORT_COUNTERS = (
    "in_octets", "out_octets", "in_pkts", "out_pkts", "in_discards", "out_discards", "in_errors", "out_errors",
    # InfiniBand / PHY
    "symbol_errors", "link_error_recovery", "link_downed", "rcv_errors", "xmit_discards", "xmit_wait",
    # host NIC
    "tx_pause_storm_warning", "tx_pause_storm_error", "rx_discards_phy", "np_ecn_marked", "np_cnp_sent",
    "rp_cnp_handled", "out_of_sequence", "packet_seq_err", "local_ack_timeout_err", "rx_out_of_buffer",
    # switch ingress buffer overflow for the whole port (no priority split)
    "ingress_overflow",
    # carrier changes both ways (Linux ``carrier_changes``: NVUE link stats ``carrier-transitions``)
    "carrier_changes",
)


@dataclass
class Port:
    device: str
    name: str
    index: int  # ifIndex (Ethernet) or port number (InfiniBand)
    speed_gbps: float
    peer: PortRef | None = None
    lanes: int = 4
    up: bool = True
    c: dict[str, float] = field(default_factory=lambda: dict.fromkeys(PORT_COUNTERS, 0.0))
    prio: list[PrioState] = field(default_factory=lambda: [PrioState() for _ in range(NPRIO)])

    @property
    def ref(self) -> PortRef:
        return (self.device, self.name)

    @property
    def bytes_per_s(self) -> float:
        return self.speed_gbps * 1e9 / 8

    def reset(self) -> None:
        """What a reboot or a counter clear does: every counter back to zero."""
        self.c = dict.fromkeys(PORT_COUNTERS, 0.0)
        self.prio = [PrioState() for _ in range(NPRIO)]


@dataclass
class Device:
    name: str
    kind: str  # eth_switch | host | ib_switch | ib_ca
    profile: str = ""
    sys_oid: str = ""
    sys_descr: str = ""
    guid: int = 0
    lid: int = 0  # switch LID (port 0); a CA's port LID
    boot_t: float = 0.0
    asic: str = ""  # InfiniBand ASIC generation (XMIT_WAIT_TICK key); "" = 64 bit times
    firmware: str = ""  # "old": no CapMask2 bit 1, so no 64-bit XmitWait/errors (basic counters only)
    extras: frozenset[str] = frozenset()  # optional MIB tables the renderer adds (see render)
    queue_map: dict[int, int] = field(default_factory=dict)  # priority -> egress queue; unlisted: identity
    ports: dict[str, Port] = field(default_factory=dict)

    def add_port(self, name: str, index: int, speed_gbps: float) -> Port:
        p = Port(self.name, name, index, speed_gbps)
        self.ports[name] = p
        return p


@dataclass
class StepPlan:
    """What happens during one poll interval. Keys are egress ports; fractions are of the step."""

    load: dict[PortRef, dict[int, float]] = field(default_factory=dict)  # offered, fraction of line rate
    paused: dict[PortRef, dict[int, float]] = field(default_factory=dict)  # egress paused by its peer
    ecn: dict[PortRef, dict[int, float]] = field(default_factory=dict)  # fraction of sent packets marked
    occupancy: dict[PortRef, dict[int, float]] = field(default_factory=dict)  # bytes queued at the end
    nobuf_drops: dict[PortRef, dict[int, float]] = field(default_factory=dict)
    q_drops: dict[PortRef, dict[int, float]] = field(default_factory=dict)
    # (storms, restores, drops, stormed at the end of the step)
    watchdog: dict[PortRef, dict[int, tuple[int, int, int, bool]]] = field(default_factory=dict)
    wait: dict[PortRef, float] = field(default_factory=dict)  # IB: fraction of the step stalled for credits
    credit: dict[PortRef, float] = field(default_factory=dict)  # IB: most the credits let through, fraction of line rate
    # ingress side, keyed by the ingress port: {priority: drops} / {priority: bytes}
    pg_nobuf_drops: dict[PortRef, dict[int, float]] = field(default_factory=dict)
    pg_shared_drops: dict[PortRef, dict[int, float]] = field(default_factory=dict)
    pg_occupancy: dict[PortRef, dict[int, float]] = field(default_factory=dict)
    ingress_q_drops: dict[PortRef, dict[int, float]] = field(default_factory=dict)
    bump: dict[PortRef, dict[str, float]] = field(default_factory=dict)  # raw counter increments
    down: set[PortRef] = field(default_factory=set)  # link down for the whole step (both ends)
    flaps: set[PortRef] = field(default_factory=set)  # link went down and came back within the step
    resets: set[str] = field(default_factory=set)  # devices whose counters are cleared during the step
    # Mean length (us) of each pause episode of a partially paused egress, when longer than the
    # brief XOFF..XON episodes of a busy fabric (BRIEF_PAUSE_EPISODE_US): a storm victim is held
    # for hundreds of microseconds at a time, so its XOFF is refreshed within each episode.
    pause_episode_us: dict[PortRef, dict[int, float]] = field(default_factory=dict)
    # Pause the peer sent for this fraction of the step that the egress neither honoured nor
    # counted (a switch whose PFC watchdog disabled PFC on the priority: sonic-buildimage#29203).
    unheeded: dict[PortRef, dict[int, float]] = field(default_factory=dict)
    # XON frames (zero quanta) the egress received from its peer: counted as PFC frames, no pause.
    xon_frames: dict[PortRef, dict[int, float]] = field(default_factory=dict)
    # The most an egress priority may send, fraction of line rate (a queue a watchdog drops).
    cap: dict[PortRef, dict[int, float]] = field(default_factory=dict)
    # DCQCN seen by the hosts: CE marks on an egress toward a host are counted by that host's
    # NIC (np_ecn_marked_roce_packets), which returns this share of them as CNPs (np_cnp_sent;
    # one CNP per QP at most every few microseconds, so fewer CNPs than marks: Zhu et al.,
    # SIGCOMM 2015, section 3); the senders handle them (rp_cnp_handled), spread over the hosts
    # sending RoCE in the step (an all-to-all's symmetry). None: hosts count nothing.
    host_cnp_share: float | None = None


def pkt_size(prio: int) -> float:
    """Mean wire size: RoCE (priority 3) carries 4 KiB MTU frames, the rest mostly 1.5 KB."""
    return 4174.0 if prio == 3 else 1514.0


class Fabric:
    def __init__(self, seed: int) -> None:
        self.devices: dict[str, Device] = {}
        self.rng = random.Random(seed)

    # ---------------------------------------------------------------- construction

    def add(self, dev: Device) -> Device:
        self.devices[dev.name] = dev
        return dev

    def port(self, ref: PortRef) -> Port:
        return self.devices[ref[0]].ports[ref[1]]

    def connect(self, a: PortRef, b: PortRef) -> None:
        self.port(a).peer = b
        self.port(b).peer = a

    def seed_counters(self, scale_s: float = 86400.0) -> None:
        """Give every counter a plausible history (as if the fabric ran ``scale_s`` before)."""
        for dev in self.devices.values():
            for p in dev.ports.values():
                if p.peer is None:
                    continue
                u = self.rng.uniform(0.05, 0.3)
                out = p.bytes_per_s * scale_s * u
                p.c["out_octets"] += out
                p.c["out_pkts"] += out / 2500
                self.port(p.peer).c["in_octets"] += out
                self.port(p.peer).c["in_pkts"] += out / 2500
                for prio in (0, 3):
                    share = out * (0.8 if prio == 3 else 0.2)
                    p.prio[prio].q_tx_bytes += share
                    p.prio[prio].q_tx_pkts += share / pkt_size(prio)
                p.prio[3].ecn_marked += out / 4174 * 1e-4
                frames = int(scale_s * self.rng.uniform(0.5, 3))
                p.prio[3].rx_pause_frames += frames
                p.prio[3].rx_pause_us += frames * 10.0
                self.port(p.peer).prio[3].tx_pause_frames += frames
                self.port(p.peer).prio[3].tx_pause_us += frames * 10.0
                p.prio[3].rx_pause_transitions += frames / 2
                p.c["xmit_wait"] += scale_s * u * 0.002 * p.bytes_per_s * 8 / IB_TICK_BITS

    # ---------------------------------------------------------------- routing

    def links(self) -> Iterable[tuple[Port, Port]]:
        for dev in self.devices.values():
            for p in dev.ports.values():
                if p.peer is not None:
                    yield p, self.port(p.peer)

    def route(self, src: str, dst: str) -> list[PortRef]:
        """Egress ports along a shortest path from device src to device dst (BFS, deterministic)."""
        prev: dict[str, PortRef | None] = {src: None}
        queue = deque([src])
        while queue:
            d = queue.popleft()
            if d == dst:
                break
            ports = list(self.devices[d].ports.values())
            up = [p for p in ports if p.peer and self.devices[p.peer[0]].kind in ("eth_switch", "ib_switch")]
            if up:  # ECMP-like: spread (src, dst) pairs over the switch-facing ports
                spin = zlib.crc32(f"{src}>{dst}".encode()) % len(up)
                ports = [p for p in ports if p not in up] + up[spin:] + up[:spin]
            for p in ports:
                if p.peer is None or p.peer[0] in prev:
                    continue
                # traffic does not transit hosts / CAs
                if p.peer[0] != dst and self.devices[p.peer[0]].kind in ("host", "ib_ca"):
                    continue
                prev[p.peer[0]] = p.ref
                queue.append(p.peer[0])
        if dst not in prev:
            raise ValueError(f"no route {src} -> {dst}")
        path: list[PortRef] = []
        node = dst
        while prev[node] is not None:
            hop = prev[node]
            assert hop is not None
            path.append(hop)
            node = hop[0]
        return path[::-1]

    # ---------------------------------------------------------------- integration

    def step(self, plan: StepPlan, dt: float) -> None:
        for name in sorted(plan.resets):
            for p in self.devices[name].ports.values():
                p.reset()
        down = set(plan.down)
        for ref in list(down):
            peer = self.port(ref).peer
            if peer:
                down.add(peer)
        for dev in self.devices.values():
            for p in dev.ports.values():
                up = p.ref not in down
                if up != p.up:
                    p.c["carrier_changes"] += 1
                p.up = up
        for p, q in self.links():
            self._egress(p, q, plan, dt, p.ref in down)
        for ref in plan.flaps:
            for end in (ref, self.port(ref).peer):
                if end:
                    self.port(end).c["link_downed"] += 1
                    self.port(end).c["link_error_recovery"] += 1
                    self.port(end).c["carrier_changes"] += 2
        for ref, bumps in plan.bump.items():
            for name, n in bumps.items():
                self.port(ref).c[name] += n
        for attr, field_name in (("pg_nobuf_drops", "pg_nobuf_drops"), ("ingress_q_drops", "ingress_q_drops"),
                                 ("pg_shared_drops", "pg_shared_drops")):
            for ref, by_prio in getattr(plan, attr).items():
                for prio, n in by_prio.items():
                    st = self.port(ref).prio[prio]
                    setattr(st, field_name, getattr(st, field_name) + n)
        for dev in self.devices.values():
            for p in dev.ports.values():
                for prio, st in enumerate(p.prio):
                    st.pg_occupancy = plan.pg_occupancy.get(p.ref, {}).get(prio, 0.0)
        if plan.host_cnp_share is not None:
            self._host_dcqcn(plan, dt, plan.host_cnp_share)

    def _host_dcqcn(self, plan: StepPlan, dt: float, share: float) -> None:
        cnps = 0.0
        for ref, by_prio in plan.ecn.items():
            p = self.port(ref)
            if p.peer is None or self.devices[p.peer[0]].kind != "host" or not p.up:
                continue
            sent = min(plan.load.get(ref, {}).get(3, 0.0), 1.0 - plan.paused.get(ref, {}).get(3, 0.0))
            marks = p.bytes_per_s * dt * max(0.0, sent) / pkt_size(3) * by_prio.get(3, 0.0)
            host = self.port(p.peer)
            host.c["np_ecn_marked"] += round(marks)
            host.c["np_cnp_sent"] += round(marks * share)
            cnps += marks * share
        senders = sorted(ref for ref, d in plan.load.items() if d.get(3) and self.devices[ref[0]].kind == "host")
        for ref in senders:
            self.port(ref).c["rp_cnp_handled"] += round(cnps / len(senders))

    def xmit_wait_ticks(self, p: Port, seconds: float) -> float:
        """XmitWait ticks for ``seconds`` of waiting on port ``p`` (see XMIT_WAIT_TICK)."""
        asic = self.devices[p.device].asic
        if not asic:
            return seconds * p.speed_gbps * 1e9 / IB_TICK_BITS
        nbytes, per_lane = XMIT_WAIT_TICK[asic]
        return seconds * p.bytes_per_s / (nbytes * (p.lanes if per_lane else 1))

    def _egress(self, p: Port, q: Port, plan: StepPlan, dt: float, down: bool) -> None:
        ref = p.ref
        loads = plan.load.get(ref, {})
        paused = plan.paused.get(ref, {})
        wait = 0.0 if down else plan.wait.get(ref, 0.0)
        total_bytes = 0.0
        total_pkts = 0.0
        for prio in range(NPRIO):
            st, peer_st = p.prio[prio], q.prio[prio]
            st.occupancy = plan.occupancy.get(ref, {}).get(prio, 0.0)
            if down:
                continue
            frac = paused.get(prio, 0.0)
            sent = min(loads.get(prio, 0.0), max(0.0, 1.0 - frac), max(0.0, 1.0 - wait), plan.credit.get(ref, 1.0),
                       plan.cap.get(ref, {}).get(prio, 1.0))
            nbytes = p.bytes_per_s * dt * sent
            npkts = nbytes / pkt_size(prio)
            total_bytes += nbytes
            total_pkts += npkts
            st.q_tx_bytes += nbytes
            st.q_tx_pkts += npkts
            st.ecn_marked += npkts * plan.ecn.get(ref, {}).get(prio, 0.0)
            st.nobuf_drops += plan.nobuf_drops.get(ref, {}).get(prio, 0.0)
            st.q_drops += plan.q_drops.get(ref, {}).get(prio, 0.0) + plan.nobuf_drops.get(ref, {}).get(prio, 0.0)
            quanta_us = QUANTA_BITS / (p.speed_gbps * 1e9) * 1e6
            if frac > 0:
                us = frac * dt * 1e6
                episode = plan.pause_episode_us.get(ref, {}).get(prio)
                if frac >= 0.9:  # continuous XOFF, refreshed at half the quanta time
                    frames = us / (quanta_us / 2)
                    transitions = 1.0 if frac < 0.999 else 0.0
                elif episode is None:  # brief episodes: one XOFF and one XON each
                    episodes = us / BRIEF_PAUSE_EPISODE_US
                    frames = 2 * episodes
                    transitions = episodes
                else:  # longer episodes: XOFF, its refreshes at half the quanta time, XON
                    episodes = us / episode
                    frames = episodes * (2 + max(0.0, episode / (quanta_us / 2) - 1))
                    transitions = episodes
                frames = round(frames)
                st.rx_pause_us += us
                st.rx_pause_frames += frames
                st.rx_pause_transitions += round(transitions)
                peer_st.tx_pause_us += us
                peer_st.tx_pause_frames += frames
            unheeded = plan.unheeded.get(ref, {}).get(prio, 0.0)
            if unheeded > 0:  # sent by the peer, neither honoured nor counted here
                peer_st.tx_pause_us += unheeded * dt * 1e6
                peer_st.tx_pause_frames += round(unheeded * dt * 1e6 / (quanta_us / 2))
            xon = plan.xon_frames.get(ref, {}).get(prio, 0.0)
            if xon > 0:
                st.rx_pause_frames += xon
                peer_st.tx_pause_frames += xon
            wd = plan.watchdog.get(ref, {}).get(prio)
            if wd is not None:
                storms, restores, drops, stormed = wd
                st.wd_storms += storms
                st.wd_restores += restores
                st.wd_drops += drops
                st.wd_stormed = stormed
            else:
                st.wd_stormed = False
        p.c["out_octets"] += total_bytes
        p.c["out_pkts"] += total_pkts
        q.c["in_octets"] += total_bytes
        q.c["in_pkts"] += total_pkts
        p.c["xmit_wait"] += self.xmit_wait_ticks(p, wait * dt)


def propagate_pause(flows: Iterable[list[PortRef]], seeds: dict[PortRef, float], threshold: float = 0.5) -> dict[PortRef, float]:
    """Hop-by-hop spreading of a lasting pause along flows.

    ``flows`` are egress paths (from :meth:`Fabric.route`); ``seeds`` the egresses paused from
    outside (a storming NIC, a deadlock). An egress paused for at least ``threshold`` of the
    time holds its queue full; the switch's ingress carrying a flow into it then pauses the
    previous hop of that flow for the same fraction, and so on upstream.
    """
    flows = [f for f in flows if f]
    paused = dict(seeds)
    changed = True
    while changed:
        changed = False
        for path in flows:
            for i in range(len(path) - 1, 0, -1):
                f = paused.get(path[i], 0.0)
                if f >= threshold and paused.get(path[i - 1], 0.0) < f:
                    paused[path[i - 1]] = f
                    changed = True
    return paused
