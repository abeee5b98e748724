"""Synthetic fabrics scaled from the real Selene compute topology, and their poll payloads.

The Selene ``ibnetdiscover`` output (666 switches, 4341 CAs, 25,704 cabled ports) is copied
into "pods": each copy gets its own GUIDs (top GUID byte = pod number), LIDs (+6000 per pod)
and node descriptions (``podN/`` prefix), so the copies are disjoint fabrics with Selene's
exact shape. A fabric of N ports is the first N cabled ports of enough pods.

Counter values are deterministic: port i's counter c grows by a fixed per-(i, c) step per
poll, so every run of the benchmark feeds identical data. The perfquery texts are what the
perfquery collector gets (collectors/perfquery/fetch.py): one ``perfquery -x`` output per switch
(all its ports) and one per CA port, with every field real ``-x`` output prints (the
treydock/infiniband_exporter capture in the shared fixtures), the collector's 18 counters and
the five it skips.

``python -m bench.fabric DIR PORTS --polls K ...`` writes a run's payloads to files (see
:func:`write`), so the process that measures the agent holds only what the agent holds.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from pathlib import Path

from fabricmon.collectors.perfquery.parse import COUNTERS as PQ_COUNTERS
from fabricmon.collectors.perfquery.parse import parse_ibnetdiscover

SELENE = Path(__file__).resolve().parents[2] / "shared" / "fixtures" / "public" / "ib" / "Mellanox__ufm_sdk_3.0" / "topo__selene.compute.txt"
LID_STEP = 6000  # Selene's highest LID is 5994
_GUID = re.compile(r"(?<![0-9A-Za-z])([0-9a-f]{12,16})(?![0-9a-f])")
_LID = re.compile(r"\blid (\d+)")
_DESC = re.compile(r'# "')
_QUOTED_DESC = re.compile(r'("[SH]-[0-9a-f]+"\[\d+\](?:\([0-9a-f]+\))?\s+# ")')

# perfquery field -> UFM Telemetry "converted" CSV column (collectors/ufm/names.py maps them back)
UFM_COLUMNS = {
    "PortXmitData": "Infiniband_MBOut_u_Gb", "PortRcvData": "Infiniband_MBIn_u_Gb",
    "PortXmitPkts": "Infiniband_PckOut_u_Packets", "PortRcvPkts": "Infiniband_PckIn_u_Packets",
    "PortXmitWait": "Infiniband_XmitWait_u_Ticks", "SymbolErrorCounter": "Infiniband_SymbolErrors_u_Errors",
    "LinkErrorRecoveryCounter": "Infiniband_LinkRecovers_u_Errors", "LinkDownedCounter": "Infiniband_LinkDowned_u_Errors",
    "PortRcvErrors": "Infiniband_RcvErrors_u_Errors", "PortRcvRemotePhysicalErrors": "Infiniband_RcvRemotePhysErrors_u_Errors",
    "PortRcvSwitchRelayErrors": "Infiniband_RcvSwRelayErrors_u_Errors", "PortXmitDiscards": "Infiniband_XmtDiscards_u_Errors",
    "PortXmitConstraintErrors": "Infiniband_XmtConstraintErrors_u_Errors",
    "PortRcvConstraintErrors": "Infiniband_RcvConstraintErrors_u_Errors",
    "LocalLinkIntegrityErrors": "Infiniband_LinkIntegrityErrors_u_Errors",
    "ExcessiveBufferOverrunErrors": "Infiniband_ExcBufOverrunErrors_u_Errors",
    "VL15Dropped": "Infiniband_VL15Dropped_u_Drops", "QP1Dropped": "QP1Dropped",
}
FIELDS = list(PQ_COUNTERS)  # the 18 IB counters of a port
# What ``perfquery -x`` prints for a port with CapMask2 bit 1 (treydock/infiniband_exporter's
# capture of an EDR switch, in the shared fixtures): the 18 counters and the fields the
# collector skips, in print order; a skipped field is (name, the counter it is derived from, divisor).
X_LINES: list[str | tuple[str, str, int]] = [
    ("PortSelect", "", 0), ("CounterSelect", "", 0), "PortXmitData", "PortRcvData", "PortXmitPkts", "PortRcvPkts",
    ("PortUnicastXmitPkts", "PortXmitPkts", 1), ("PortUnicastRcvPkts", "PortRcvPkts", 1),
    ("PortMulticastXmitPkts", "PortXmitPkts", 1000), ("PortMulticastRcvPkts", "PortRcvPkts", 1000), ("CounterSelect2", "", 0),
    *(f for f in FIELDS if f not in ("PortXmitData", "PortRcvData", "PortXmitPkts", "PortRcvPkts")),
]
# The congested case: one port in HOT_EVERY (1 %) waits about 30 % of each 10 s poll and sends
# at half its line rate. Selene is 4x HDR on Quantum switches, which count one XmitWait tick per
# 8 bytes of port transmit time (NVIDIA ibdiagnet user manual, quoted in fabric-reference.md):
# 25e9 B/s / 8 B = 3.1e9 ticks/s blocked, so 30 % of 10 s is 9.4e9 ticks; half of 25e9 B/s for
# 10 s is 3.1e10 PortXmitData words (4 bytes each).
HOT_EVERY = 100
HOT_WAIT = 9_400_000_000
HOT_DATA = 31_000_000_000
TRAFFIC = {"PortXmitData", "PortRcvData", "PortXmitPkts", "PortRcvPkts", "PortXmitWait"}


def pod_text(text: str, pod: int) -> str:
    """One renamed copy of an ibnetdiscover text (pod 0 is the original)."""
    if pod == 0:
        return text
    def guid(m: re.Match[str]) -> str:
        s = m.group(1)
        v = int(s, 16) ^ (pod << 56)
        return f"{v:0{len(s)}x}" if len(s) == 16 else f"{v:x}"
    out = _GUID.sub(guid, text)
    out = _LID.sub(lambda m: f"lid {int(m.group(1)) + pod * LID_STEP}", out)
    return out.replace('# "', f'# "pod{pod}/')


def _first_ports(text: str, nports: int) -> str:
    """The node blocks of an ibnetdiscover text up to the one that holds the ``nports``-th port line."""
    out, seen = [], 0
    for block in text.split("\n\n"):
        out.append(block)
        seen += sum(1 for ln in block.splitlines() if ln.startswith("["))
        if seen >= nports:
            break
    return "\n\n".join(out) + "\n"


@dataclass(slots=True)
class PortRef:
    device: str
    port: int
    lid: int  # the LID perfquery addresses: the switch LID, or the CA port's own LID
    node_guid: str
    kind: str


class Fabric:
    """N cabled ports of a Selene-shaped fabric, with deterministic counter values per poll."""

    def __init__(self, nports: int, source: Path = SELENE, switch_ports: bool = False) -> None:
        """``switch_ports``: poll only the switches' ports of the (whole) topology, as the
        perfquery collector does by default (``include_cas: false``): on Selene, 21,363 ports."""
        if not source.exists():
            raise SystemExit(f"the benchmark scales the real Selene topology and needs it at {source} (../shared is absent)")
        base = source.read_text()
        per_pod = sum(1 for ln in base.splitlines() if ln.startswith("["))
        self.pods = max(1, math.ceil(nports / max(per_pod, 1)))
        self.ibnetdiscover = _first_ports("".join(pod_text(base, k) for k in range(self.pods)), nports)
        topo = parse_ibnetdiscover(self.ibnetdiscover)
        self.topology = topo
        ports: list[PortRef] = []
        for node in topo.nodes.values():
            for num in sorted(node.ports):
                p = node.ports[num]
                lid = node.lid if node.kind == "switch" else p.lid
                if lid is None:
                    continue
                if node.kind == "switch" or not switch_ports:
                    ports.append(PortRef(node.name, num, lid, node.guid, node.kind))
        self.ports = ports[:nports]
        self.nports = len(self.ports)
        self.switches = sorted({p.device for p in self.ports if p.kind == "switch"})

    # ------------------------------------------------------------------ values
    @staticmethod
    def value(i: int, j: int, k: int, congested_from: int | None = None) -> int:
        """Counter j of port i at poll k: a healthy fabric with a little trouble.

        Traffic (j < 4) grows by 1-1.05 M per poll; XmitWait (j == 4) by under 1,000 ticks
        (no congestion); error and drop counters grow on one port in 997 only.
        ``congested_from``: from that poll on, one port in :data:`HOT_EVERY` (1 %) is congested
        (see :data:`HOT_WAIT`).
        """
        hot = max(0, k - congested_from + 1) if congested_from is not None and i % HOT_EVERY == 0 else 0
        if j < 4:
            return 10**9 + (i * 7919 + j * 104729) % 10**9 + k * (1_000_000 + (i * 31 + j) % 50_000) + hot * HOT_DATA * (j == 0)
        if j == 4:
            return (i * 7919) % 10**6 + k * ((i * 7) % 1000) + hot * HOT_WAIT
        return (i + j) % 3 + k * (i % 997 == 0)

    def perfquery_texts(self, k: int, congested_from: int | None = None) -> list[str]:
        """``perfquery -x`` stdout as the collector gets it: one text per switch (all its
        ports), one per CA port; ``congested_from``: see :meth:`value`."""
        col = {f: j for j, f in enumerate(FIELDS)}
        texts: list[str] = []
        buf: list[str] = []
        last = None
        for i, p in enumerate(self.ports):
            node = (p.device, p.lid) if p.kind == "switch" else (p.device, p.lid, p.port)
            if node != last and buf:
                texts.append("".join(buf))
                buf = []
            last = node
            buf.append(f"# Port extended counters: Lid {p.lid} port {p.port} (CapMask: 0x5300 CapMask2: 0x0000002)\n")
            for line in X_LINES:
                if isinstance(line, str):
                    buf.append(f"{line}:{'.' * max(1, 32 - len(line))}{self.value(i, col[line], k, congested_from)}\n")
                    continue
                name, base, div = line
                v = p.port if name == "PortSelect" else "0x00000000" if name == "CounterSelect2" else "0x0000" if not base \
                    else self.value(i, col[base], k, congested_from) // div
                buf.append(f"{name}:{'.' * max(1, 32 - len(name))}{v}\n")
        if buf:
            texts.append("".join(buf))
        return texts

    def ufm_csv(self, k: int, t_us: int) -> str:
        cols = [UFM_COLUMNS[f] for f in FIELDS]
        lines = ["timestamp,source_id,node_guid,port_guid,port_num,node_description," + ",".join(cols)]
        for i, p in enumerate(self.ports):
            vals = ",".join(str(self.value(i, j, k)) for j in range(len(FIELDS)))
            lines.append(f"{t_us},{p.node_guid},{p.node_guid},{p.node_guid},{p.port},{p.device},{vals}")
        return "\n".join(lines) + "\n"

    def ufm_prometheus(self, k: int, t_ms: int) -> str:
        out = []
        for j, f in enumerate(FIELDS):
            name = f"{f}Extended" if f in TRAFFIC else f
            out.append(f"# TYPE {name} counter")
            for i, p in enumerate(self.ports):
                out.append(f'{name}{{node_guid="{p.node_guid}",port_guid="{p.node_guid}",port_num="{p.port}",'
                           f'node_desc="{p.device}"}} {self.value(i, j, k)} {t_ms}')
        return "\n".join(out) + "\n"


# ------------------------------------------------------------------ a replayable recording
REC_T0 = 1764691200.0  # 2025-12-02T16:00:00Z, as the scenario corpus
# The planted fault of :func:`write_recording`: from poll PLANT_POLL on, one spine-facing leaf
# port's LinkDownedCounter and SymbolErrorCounter climb (a failing cable): link_degraded.
PLANT_POLL = 2


def write_recording(path: Path, nports: int = 25_704, polls: int = 4, interval: float = 10.0,
                    plant: tuple[str, int] | None = None) -> tuple[Fabric, tuple[str, int]]:
    """The fabric polled ``polls`` times by one ``perfquery`` target (its first poll carries the
    ``ibnetdiscover`` topology), written as a recording (docs/recording-format.md) at ``path``.

    ``plant``: (switch, port) whose link fails from :data:`PLANT_POLL` on (default: the first
    uplink of the first leaf, a switch with adapters other than aggregation nodes). Returns the
    fabric and the planted port."""
    import gzip
    import json

    fab = Fabric(nports, switch_ports=True)
    if plant is None:
        topo = fab.topology
        kind = {n.guid: (n.kind, n.description) for n in topo.nodes.values()}
        leaves = [n for n in sorted(topo.nodes.values(), key=lambda n: n.name) if n.kind == "switch"
                  and any(kind.get(p.peer_guid, ("", ""))[0] == "ca" and "Aggregation" not in kind[p.peer_guid][1] for p in n.ports.values())]
        plant = next((n.name, num) for n in leaves for num, p in sorted(n.ports.items()) if kind.get(p.peer_guid, ("",))[0] == "switch")
    at = next(i for i, p in enumerate(fab.ports) if (p.device, p.port) == plant)
    down, sym = FIELDS.index("LinkDownedCounter"), FIELDS.index("SymbolErrorCounter")
    with gzip.open(path, "wt", encoding="utf-8", compresslevel=1) as fh:
        fh.write(json.dumps({"type": "header", "format": "fabricmon-recording", "version": 1, "created": "2025-12-02T16:00:00Z",
                             "description": f"Selene-shaped fabric, {fab.nports} switch ports; {plant[0]} port {plant[1]} fails",
                             "targets": [{"name": "selene", "source": "perfquery"}]}) + "\n")
        for k in range(polls):
            texts = fab.perfquery_texts(k)
            if k >= PLANT_POLL:
                texts = [_bump(t, fab.ports[at], {FIELDS[down]: 1 + k - PLANT_POLL, FIELDS[sym]: 5000 * (k - PLANT_POLL + 1)})
                         for t in texts]
            payload: dict[str, object] = {"perfquery": texts}
            if k == 0:
                payload["ibnetdiscover"] = fab.ibnetdiscover
            fh.write(json.dumps({"type": "poll", "target": "selene", "source": "perfquery", "t": REC_T0 + k * interval,
                                 "duration_s": 1.0, "ok": True, "payload": payload}) + "\n")
    return fab, plant


def _bump(text: str, p: PortRef, extra: dict[str, int]) -> str:
    """``text`` with the counters of port ``p`` raised by ``extra``."""
    head = f"# Port extended counters: Lid {p.lid} port {p.port} "
    i = text.find(head)
    if i < 0:
        return text
    end = text.find("# Port", i + len(head))
    block = text[i:end if end >= 0 else len(text)]
    for f, n in extra.items():
        block = re.sub(rf"^({f}:\.*)(\d+)$", lambda m, n=n: f"{m.group(1)}{int(m.group(2)) + n}", block, flags=re.M)
    return text[:i] + block + (text[end:] if end >= 0 else "")


def write(folder: Path, nports: int, polls: int, switch_ports: bool = False, hot_from: int | None = None,
          hot_polls: int = 0, formats_ports: int = 0) -> None:
    """The payloads of a benchmark run, one file each, and ``fabric.json`` (what the run
    reports about the fabric): ``ibnetdiscover.txt``; ``poll-K.json``, the perfquery texts of
    poll K for ``polls`` polls, then ``hot_polls`` more with 1 % of the ports congested from
    poll ``hot_from`` on; and, when ``formats_ports``, the parse-format payloads of that many
    ports (``formats-*``)."""
    fab = Fabric(nports, switch_ports=switch_ports)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "ibnetdiscover.txt").write_text(fab.ibnetdiscover)
    for k in range(polls + hot_polls):
        texts = fab.perfquery_texts(k, congested_from=hot_from if k >= polls else None)
        write_texts(folder / f"poll-{k}", texts)
    info = {"fabric_ports": fab.nports, "pods": fab.pods, "switches": len(fab.switches),
            "hot_ports": sum(1 for i in range(fab.nports) if i % HOT_EVERY == 0)}
    if formats_ports:
        sub = fab if fab.nports <= formats_ports else Fabric(formats_ports)
        (folder / "formats-ibnetdiscover.txt").write_text(sub.ibnetdiscover)
        write_texts(folder / "formats-perfquery", sub.perfquery_texts(1))
        (folder / "formats-ufm.csv").write_text(sub.ufm_csv(1, int(T0 * 1e6)))
        (folder / "formats-ufm.prom").write_text(sub.ufm_prometheus(1, int(T0 * 1e3)))
        info["formats_ports"] = sub.nports
    (folder / "fabric.json").write_text(json.dumps(info))


def write_texts(path: Path, texts: list[str]) -> None:
    """Texts as ``path.txt`` (one after the other) and ``path.json`` (their lengths)."""
    path.with_suffix(".txt").write_text("".join(texts))
    path.with_suffix(".json").write_text(json.dumps([len(t) for t in texts]))


def read_texts(path: Path) -> list[str]:
    """What :func:`write_texts` wrote, each text read from the file on its own (as a fetcher
    gets each command's output): no copy of the whole poll besides the texts."""
    with path.with_suffix(".txt").open() as f:
        return [f.read(n) for n in json.loads(path.with_suffix(".json").read_text())]


T0 = 1_700_000_000.0

if __name__ == "__main__":
    import argparse

    ap = argparse.ArgumentParser(prog="python -m bench.fabric", description=write.__doc__.split("\n\n")[0])
    ap.add_argument("folder", type=Path)
    ap.add_argument("ports", type=int)
    ap.add_argument("--polls", type=int, default=3)
    ap.add_argument("--switch-ports", action="store_true")
    ap.add_argument("--hot-from", type=int, default=None)
    ap.add_argument("--hot-polls", type=int, default=0)
    ap.add_argument("--formats-ports", type=int, default=0)
    a = ap.parse_args()
    write(a.folder, a.ports, a.polls, a.switch_ports, a.hot_from, a.hot_polls, a.formats_ports)
