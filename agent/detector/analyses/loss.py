"""loss: which class each drop belongs to, from evidence (issue 27 item 1).

A drop counter of the vocabulary says where it counts and what it may cover
(:class:`fabricmon.core.vocabulary.DropClass`: its stage, and a priority, a priority group, a
queue mapped to priorities, or the whole port). A drop on a lossless (PFC) priority is loss that
must not happen (IEEE 802.1Qbb); the same drop of best effort is that class's normal congestion
control, every minute on a busy converged fabric. So a drop is lossless loss only where evidence
puts it on a lossless class, by the first of these rules that holds (``Loss.how``, and in plain
words ``Loss.attribution``):

1. **class**: the row names a class (priority, PG, queue, traffic class) that carries only
   lossless priorities under the fabric layout (``fabric:``; identity by default). A lossless
   priority group is also the stage where only lossless traffic is held: only PFC priority
   groups have headroom (NVIDIA, "Understanding Buffer Headroom"), so its drops are lossless.
   A row whose class carries only lossy priorities is best effort: not loss of interest.
2. **traffic**: the row covers lossy priorities too (a port total, a record without its class,
   a queue shared by both), but the traffic that passed that stage in the interval was all
   lossless by per-priority or per-queue counters: the port's own transmit per queue for an
   egress stage; for an ingress stage or a NIC, its own receive per priority, else its cable
   peer's transmit per queue (the peer's egress is this port's ingress). "All lossless" means
   the lossy share of the bytes (packets where no byte counter exists) is at most
   ``lossy_share_max`` (1 %): a RoCE-only port still carries control frames (LLDP, ARP) and,
   in the NVIDIA defaults, CNPs on their own strict-priority class (DSCP 48 -> priority 6,
   Cumulus Linux "RoCE"), all small frames far under 1 % of the bytes, while a converged port
   carries tens of percent of best effort (issue 27: ~30 % in the held-back Cumulus set). A
   judgement call, no public figure.
3. **corroboration**: RoCE itself saw the loss in the same interval: the host receiving the
   dropped packets counted out-of-sequence packets (mlx5 ``out_of_sequence``), or the host that
   sent them counted NAKs or ACK timeouts (``packet_seq_err``, ``local_ack_timeout_err``:
   kernel mlx5 counters.rst; RoCE RC is go-back-N, so a lost packet shows at both ends).
   Which end depends on the stage: an egress drop toward a host shows at that host as the
   receiver, an ingress drop of a host's packets at that host as the sender, a NIC's own
   receive drop at the NIC as the receiver. RoCE runs on the lossless class, so this puts the
   drop there. A class-less row on a port where a per-class row shows lossless loss in the same
   interval goes with that loss (the lossless queue's own counter shows the missing packets).

Otherwise the drop is loss of an unknown class: not a finding (INTERFACES section 4), counted
per port and stage (:attr:`LossAnalysis.unattributed`, exported as
``fabricmon_port_unattributed_drops_total{device,port,stage}``) and handed to the web view by
:meth:`LossAnalysis.unattributed_at`, with why the class is unknown and which counter would tell.

Read by ``packet_loss`` (:attr:`LossAnalysis.losses`). Parameters under ``detector: {loss: ...}``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Annotated, Any

from pydantic import BeforeValidator

from fabricmon.agent.detector.analyses.fabric import FabricAnalysis, FabricShape
from fabricmon.agent.detector.base import Analysis, DetectContext, ExportedGauge, Fraction, Params
from fabricmon.agent.detector.common import link_ok
from fabricmon.agent.store import PortEntry, PortKey, Series
from fabricmon.core.vocabulary import AGGREGATE, COUNTERS, CounterDef, PriorityMap, lossless_drop_counters

Text = Annotated[str, BeforeValidator(str)]  # a WJH reason id written as a number is the same id

EGRESS = frozenset({"egress_queue", "wjh"})  # stages that drop on the way out of the port
# Who counts a lost RoCE packet (kernel mlx5 counters.rst): the receiver counts packets out of
# sequence; the sender counts the NAKs it receives and its ACK timeouts.
RECEIVER_SIGNS = ("out_of_sequence",)
SENDER_SIGNS = ("packet_seq_err", "local_ack_timeout_err")
STAGE_WORDS = {"ingress_pg": "ingress priority-group buffer", "ingress_queue": "ingress queue",
               "ingress_port": "ingress buffer", "egress_queue": "egress queue", "nic": "NIC", "wjh": "buffer (WJH)"}
# Which counter would put a drop of that stage on its class: for the port's page.
WOULD_TELL = {
    "egress_queue": "a per-queue drop counter (ARISTA-QUEUE-MIB egress PktsDropped, SONiC SAI_QUEUE_STAT_DROPPED_PACKETS, "
                    "NVUE egress-queue-stats) or per-queue transmit counters",
    "ingress_port": "per-priority-group drops (MELLANOX-QOS-MIB PG NoBufferDiscard, NVUE ingress-buffer-stats) or the "
                    "peer's per-queue transmit counters",
    "ingress_pg": "a layout that maps each priority group to lossless or lossy priorities only (fabric: priority_to_pg)",
    "ingress_queue": "a layout that maps each queue to lossless or lossy priorities only (fabric: priority_to_queue)",
    "nic": "per-priority receive counters on the NIC (mlx5 rx_prio<p>_buf_discard, rx_prio<p>_bytes)",
    "wjh": "WJH buffer records with their traffic class",
}
_TRAFFIC = {  # direction -> (per-queue counters, per-priority counters), bytes first
    "tx": (("queue_tx_bytes", "queue_tx_packets"), ("prio_tx_bytes", "prio_tx_packets")),
    "rx": ((), ("prio_rx_bytes", "prio_rx_packets")),
}


class LossParams(Params):
    """``detector: {loss: ...}``: which records are drops, and how small a lossy share is "none"."""

    # WJH buffer-group reasons that are drops (NVIDIA WJH buffer drop reasons, Cumulus Linux user
    # guide "What Just Happened": 503 tail drop, 504 WRED, 505 port TC congestion threshold).
    wjh_reasons: tuple[Text, ...] = ("503", "504", "505")
    # The share of best effort (bytes) at or under which a port's traffic counts as all lossless
    # (module doc, rule 2). Judgement call, no public figure.
    lossy_share_max: Fraction = 0.01


@dataclass(frozen=True, slots=True)
class DropRow:
    name: str
    sub: tuple[Any, ...]
    count: float
    stage: str


@dataclass(slots=True)
class Loss:
    """Lossless loss on one port and priority in the last interval (one finding)."""

    pk: PortKey
    priority: int | None
    rows: list[DropRow]
    how: list[str]  # "class" | "traffic" | "corroboration", one per rule that placed rows here
    attribution: list[str]  # the same in plain words
    packets: float  # dropped in the interval (a port total that also counts a class's drops is not added twice)
    evidence: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class UnattributedDrops:
    """Drops at one port and stage that no evidence places on a class: what a port's page shows."""

    stage: str
    total: float  # packets since the agent started
    last: float  # packets in the port's last interval with such drops
    rate: float | None  # packets per second over that interval
    interval_s: float | None
    last_t: float  # poll time of that interval's end
    counters: tuple[str, ...]  # vocabulary names of the counters that counted them
    why: str  # why the class is unknown, in words
    would_tell: str  # which counter would tell

    @property
    def stage_words(self) -> str:
        return STAGE_WORDS[self.stage]


@dataclass(slots=True)
class _Port:
    """One port's drop rows of the interval and what the analysis needs to place them."""

    pk: PortKey
    entry: PortEntry
    peer: PortKey | None
    peer_entry: PortEntry | None
    shape: FabricShape | None
    t: float
    dt: float | None = None


class LossAnalysis(Analysis):
    """Per pass: the lossless loss evidence places (:attr:`losses`) and the drops it cannot place
    (:attr:`unattributed`, kept per port and stage)."""

    name = "loss"
    Params = LossParams
    needs = ("fabric",)

    def __init__(self, params: LossParams | None = None) -> None:
        super().__init__(params)
        self.p: LossParams = self.params  # type: ignore[assignment]
        self.drops: dict[str, CounterDef] = {c.name: c for c in lossless_drop_counters()}
        self.wjh_reasons = set(self.p.wjh_reasons)
        self.pmap = PriorityMap()
        self.losses: list[Loss] = []
        self.unattributed: dict[PortKey, dict[str, UnattributedDrops]] = {}

    def update(self, ctx: DetectContext) -> None:
        fabric = ctx.analysis(FabricAnalysis)
        self.pmap = fabric.layout
        self.losses = []
        ports = ctx.store.ports
        for pk in sorted(ctx.moved(*self.drops)):
            entry = ports.get(pk)
            if entry is None or not link_ok(entry):
                continue  # a link that flapped drops what is in flight: link_degraded reports it
            peer = fabric.shape.peer(pk) if fabric.shape is not None else ctx.topology.peer(*pk)
            port = _Port(pk, entry, peer, ports.get(peer) if peer else None, fabric.shape, ctx.t)
            self.losses.extend(self._port(port))
        for pk in [pk for pk in self.unattributed if pk not in ports]:
            del self.unattributed[pk]

    # ------------------------------------------------------------------ one port
    def _rows(self, port: _Port) -> tuple[dict[int | None, list[DropRow]], list[DropRow]]:
        """The interval's drop rows on lossless priorities: those a class places (by priority;
        None when the class carries several lossless priorities) and those it does not."""
        placed: dict[int | None, list[DropRow]] = {}
        mixed: list[DropRow] = []
        lossless = set(self.pmap.lossless)
        for name, sub, se in port.entry.counters():
            defn = self.drops.get(name)
            if defn is None or not se.delta or not self._is_drop(defn, sub):
                continue
            port.dt = port.dt or se.dt
            drop = defn.drop
            assert drop is not None
            labels = dict(zip(defn.labels, sub, strict=False))
            prios = set(self.pmap.priorities_of(drop, labels.get(drop.label) if drop.label else None))
            if not prios & lossless:
                continue  # best effort only: its normal congestion control
            row = DropRow(name, sub, se.delta, drop.stage)
            if prios <= lossless:
                placed.setdefault(next(iter(prios)) if len(prios) == 1 else None, []).append(row)
            else:
                mixed.append(row)
        return placed, mixed

    def _is_drop(self, defn: CounterDef, sub: tuple[Any, ...]) -> bool:
        """A WJH record is a drop of interest only in the buffer group with a drop reason."""
        drop = defn.drop
        assert drop is not None
        labels = dict(zip(defn.labels, ("" if v is None else str(v) for v in sub), strict=False))
        if any(labels.get(k, "").lower() != v for k, v in drop.only):
            return False
        return defn.name != "wjh_drops" or labels.get("reason", "") in self.wjh_reasons

    def _port(self, port: _Port) -> list[Loss]:
        placed, mixed = self._rows(port)
        out = [Loss(port.pk, prio, rows, ["class"], [self._class_words(rows, prio)], _count(rows)) for prio, rows in sorted(
            placed.items(), key=lambda kv: -1 if kv[0] is None else kv[0])]
        if out and mixed:  # the per-class counter shows the lossless packets: the port totals count them too
            out[0].rows.extend(mixed)
            out[0].attribution.append(f"{_names(mixed)} counted {int(_count(mixed))} at the same time (all classes)")
            return out
        by_stage: dict[str, list[DropRow]] = {}
        for row in mixed:
            by_stage.setdefault(row.stage, []).append(row)
        for stage, rows in sorted(by_stage.items()):
            got = self._traffic(port, stage, rows) or self._corroborated(port, stage, rows)
            if got is None:
                self._unplaced(port, stage, rows)
                continue
            same = next((loss for loss in out if loss.priority == got.priority), None)
            if same is None:
                out.append(got)
            else:
                same.rows.extend(got.rows)
                same.packets += got.packets
                same.how.extend(got.how)
                same.attribution.extend(got.attribution)
                same.evidence.update(got.evidence)
        return out

    def _class_words(self, rows: list[DropRow], prio: int | None) -> str:
        row = rows[0]
        defn = self.drops[row.name]
        drop = defn.drop
        assert drop is not None
        value = dict(zip(defn.labels, row.sub, strict=False)).get(drop.label) if drop.label else None
        kind = {"pg": "priority group", "queue": "queue", "traffic_class": "traffic class", "priority": "priority"}[drop.maps_by]
        on = f"lossless priority {prio}" if prio is not None else f"lossless priorities {list(self.pmap.lossless)}"
        why = ": only lossless priority groups hold PFC headroom" if drop.maps_by == "pg" else ""
        return f"{_names(rows)} names {kind} {value}, which carries only {on} in the fabric layout{why}"

    # ------------------------------------------------------------------ rule 2: the port's traffic
    def _traffic(self, port: _Port, stage: str, rows: list[DropRow]) -> Loss | None:
        """The stage saw lossless traffic only (module doc, rule 2)."""
        got = self._shares(port, stage)
        if got is None:
            return None
        lossy, by_prio, source = got
        if lossy > self.p.lossy_share_max:
            return None
        carried = sorted(p for p, v in by_prio.items() if v > 0)
        prio = carried[0] if len(carried) == 1 else self._only_lossless()
        where = "this port sent" if stage in EGRESS else "reached this port"
        words = (f"{_names(rows)} does not name a class, but the traffic that {where} in the interval was lossless: "
                 f"best effort carried {lossy:.2%} of it (by {source})")
        return Loss(port.pk, prio, list(rows), ["traffic"], [words], _count(rows), {"lossy_share": round(lossy, 6)})

    def _shares(self, port: _Port, stage: str) -> tuple[float, dict[int, float], str] | None:
        """(lossy share, volume per lossless priority, which counters said so) of the traffic
        through ``stage`` in the interval; None when no per-class counter shows it."""
        if stage in EGRESS:
            sources = [(port.entry, "tx", port.pk)]
        else:
            sources = [(port.entry, "rx", port.pk)]
            if port.peer_entry is not None and port.peer is not None:
                sources.append((port.peer_entry, "tx", port.peer))
        for entry, side, pk in sources:
            got = self._split(entry, side)
            if got is not None:
                return got[0], got[1], f"{got[2]} of {pk[0]} {pk[1]}"
        return None

    def _split(self, entry: PortEntry, side: str) -> tuple[float, dict[int, float], str] | None:
        per_queue, per_prio = _TRAFFIC[side]
        for names, to_prios in ((per_queue, self._queue_prios), (per_prio, lambda v: (v,))):
            for name in names:
                volume: dict[tuple[int, ...], float] = {}
                for n, sub, se in entry.counters():
                    if n == name and len(sub) == 1 and isinstance(sub[0], int) and se.delta is not None:
                        key = tuple(to_prios(sub[0]))
                        volume[key] = volume.get(key, 0.0) + se.delta
                total = sum(volume.values())
                if total > 0:
                    return self._lossy_share(volume, total, name)
        return None

    def _lossy_share(self, volume: dict[tuple[int, ...], float], total: float, name: str) -> tuple[float, dict[int, float], str]:
        lossless = set(self.pmap.lossless)
        lossy = 0.0
        by_prio: dict[int, float] = {}
        for prios, v in volume.items():
            if prios and set(prios) <= lossless:
                for p in prios:
                    by_prio[p] = by_prio.get(p, 0.0) + v / len(prios)
            else:
                lossy += v  # a lossy class, or one shared with lossy priorities: cannot be called lossless
        return lossy / total, by_prio, COUNTERS[name].help.split(" (")[0].lower()

    def _queue_prios(self, q: int) -> tuple[int, ...]:
        return tuple(p for p in range(8) if self.pmap.queue(p) == q)

    def _only_lossless(self) -> int | None:
        lossless = self.pmap.lossless
        return lossless[0] if len(lossless) == 1 else None

    # ------------------------------------------------------------------ rule 3: RoCE saw it
    def _corroborated(self, port: _Port, stage: str, rows: list[DropRow]) -> Loss | None:
        """The host at the receiving or sending end counted RoCE loss in the same interval."""
        if stage == "nic":
            who, signs, role = port.pk, RECEIVER_SIGNS, "the receiving NIC"
        elif port.peer is not None and port.shape is not None and port.shape.is_host(port.peer[0]):
            who = port.peer
            signs, role = (RECEIVER_SIGNS, "the receiving host") if stage in EGRESS else (SENDER_SIGNS, "the sending host")
        else:
            return None
        entry = port.entry if who == port.pk else port.peer_entry
        if entry is None:
            return None
        drop_t = max(self._series(port.entry, r).poll_t for r in rows)
        seen = {n: se.delta for n in signs if (se := entry.counter(n, ())) is not None and se.delta
                and abs(se.poll_t - drop_t) <= max(se.dt or 0.0, port.dt or 0.0)}
        if not seen:
            return None
        what = ", ".join(f"{int(v)} {n}" for n, v in sorted(seen.items()))
        words = (f"{_names(rows)} does not name a class, but {role} {who[0]} {who[1]} counted RoCE loss in the same "
                 f"interval ({what}): RoCE runs on the lossless class")
        return Loss(port.pk, self._only_lossless(), list(rows), ["corroboration"], [words], _count(rows),
                    {"corroborated_by": f"{who[0]}:{who[1]}", "transport_loss": seen})

    @staticmethod
    def _series(entry: PortEntry, row: DropRow) -> Series:
        se = entry.counter(row.name, row.sub)
        assert se is not None
        return se

    # ------------------------------------------------------------------ unknown class
    def _unplaced(self, port: _Port, stage: str, rows: list[DropRow]) -> None:
        n = _count(rows)
        share = self._shares(port, stage)
        why = (f"{_names(rows)} does not name a class and best effort carried {share[0]:.1%} of the traffic there"
               if share is not None else f"{_names(rows)} does not name a class and no per-class counter shows what the port carried")
        by_stage = self.unattributed.setdefault(port.pk, {})
        prev = by_stage.get(stage)
        by_stage[stage] = UnattributedDrops(
            stage=stage, total=(prev.total if prev else 0.0) + n, last=n, rate=n / port.dt if port.dt else None,
            interval_s=port.dt, last_t=port.t, counters=tuple(sorted({r.name for r in rows})), why=why,
            would_tell=WOULD_TELL[stage])

    def unattributed_at(self, device: str, port: str) -> tuple[UnattributedDrops, ...]:
        """The drops of unknown class counted on one port since the agent started, by stage: for
        the port's page (count, last interval's rate, why, which counter would tell)."""
        return tuple(v for _, v in sorted(self.unattributed.get((device, port), {}).items()))

    def metrics(self) -> Iterable[ExportedGauge]:
        values = [((pk[0], pk[1], stage), u.total) for pk, by in sorted(self.unattributed.items()) for stage, u in sorted(by.items())]
        return (ExportedGauge(
            "fabricmon_port_unattributed_drops_total",
            "Packets dropped at a stage by counters that cannot say whether the class was lossless or best effort, and "
            "that no evidence placed (not a finding): counted since the agent started.",
            ("device", "port", "stage"), values, type="counter"),)


def _count(rows: Iterable[DropRow]) -> float:
    """Packets dropped by some rows: per stage, the rows that name a class add up, and a port
    total of the same stage counts them too (so the larger of the two); stages add up."""
    named: dict[str, float] = {}
    totals: dict[str, float] = {}
    for r in rows:
        if _names_class(r):
            named[r.stage] = named.get(r.stage, 0.0) + r.count
        else:
            totals[r.stage] = max(totals.get(r.stage, 0.0), r.count)
    return sum(max(named.get(st, 0.0), totals.get(st, 0.0)) for st in {*named, *totals})


def _names_class(r: DropRow) -> bool:
    defn = COUNTERS[r.name]
    drop = defn.drop
    if drop is None or drop.label is None or drop.maps_by == "port":
        return False
    value = dict(zip(defn.labels, r.sub, strict=False)).get(drop.label)
    return value is not None and str(value) not in (AGGREGATE, "")


def _names(rows: Iterable[DropRow]) -> str:
    """The counters of some rows in words: ``queue_drops (queue all)``, ``rx_discards_phy``."""
    out: list[str] = []
    for r in rows:
        defn = COUNTERS[r.name]
        drop = defn.drop
        value = dict(zip(defn.labels, r.sub, strict=False)).get(drop.label) if drop is not None and drop.label else None
        word = r.name + (f" ({drop.label} {value if value not in (None, '') else 'not given'})"  # type: ignore[union-attr]
                         if value is not None or (drop is not None and drop.label) else "")
        if word not in out:
            out.append(word)
    return " and ".join(out)


__all__ = ["DropRow", "Loss", "LossAnalysis", "LossParams", "UnattributedDrops"]
