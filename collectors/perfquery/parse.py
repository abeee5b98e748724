"""Pure parsers for infiniband-diags output: ``ibnetdiscover`` topology and ``perfquery`` counters.

Both formats are read line by line with anchored regular expressions built from the printing
code in infiniband-diags (``ibnetdiscover.c``, ``perfquery.c``), not from column positions:
real captures lose their tabs (PuTTY logs), carry CR/LF line ends, Quantum-2 port labels,
GUIDs without leading zeros, ``#`` inside node descriptions and stderr noise.
Counter widths and lane rates come from the one table in :mod:`fabricmon.collectors.infiniband`.

Device naming: a node's ``device`` label is its node description. When the description is
empty the node's GUID (``0x`` + 16 hex digits) is used instead; when several nodes share one
description (``"Quantum-2 Mellanox Technologies"``, ``"Mellanox Technologies Aggregation
Node"``) every one of them gets ``" " + GUID`` appended, so names are unique and do not depend
on the order nodes appear in.
"""

from __future__ import annotations

import re
from array import array
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from itertools import repeat
from typing import Any

from fabricmon.collectors.base import ParseError
from fabricmon.collectors.infiniband import BY_PERFQUERY, link_bytes_per_s
from fabricmon.collectors.perfquery.bulk import CounterLayout, PollColumns
from fabricmon.collectors.textlayout import CHECKED, FREE, Marks
from fabricmon.core.guid import norm_guid
from fabricmon.core.model import Counters, DeviceInfo, Gauge, Link, ParseResult, PortInfo, PortLayout
from fabricmon.core.slicing import sorted_in_slices

# --------------------------------------------------------------------------------------------
# ibnetdiscover
# --------------------------------------------------------------------------------------------

_KINDS = {"Switch": "switch", "Ca": "ca", "Rt": "router"}
_NO_LID = (0, 0xFFFF)  # LID 0 and 65535: no LID assigned

# `Switch\t41 "S-b8599f0300fc6de4"\t\t# "desc" enhanced port 0 lid 13 lmc 0`; tabs may be lost.
_NODE_RE = re.compile(r'^(Switch|Ca|Rt)\s*(\d+)\s+"?[A-Za-z?]-([0-9A-Fa-f]{1,16})"?\s*#\s?(.*)$')
_SWITCH_TAIL_RE = re.compile(r"^(.*?)\s*(?:(?:base|enhanced)\s+)?port\s+0\s+lid\s+(\d+)\s+lmc\s+(\d+)\s*$")
# `[23](label)(guid) \t"H-ec0d9a03007d7d0a"[1](ec0d9a03007d7d0a) \t\t# tail`
_PORT_RE = re.compile(
    r'^\[(\d+)\]((?:\s*(?:\([^()]*\)|\[ext \d+\]))*)\s*"?[A-Za-z?]-([0-9A-Fa-f]{1,16})"?\[(\d+)\]'
    r"((?:\s*(?:\([^()]*\)|\[ext \d+\]))*)\s*#\s?(.*)$"
)
# Port-line tail: CA ports start with their own `lid L lmc M`; then the peer's description and LID
# and the active width and speed (`4xEDR`, `2xNDR`, `??`/`???` when unknown).
_PORT_TAIL_RE = re.compile(
    r'^(?:lid\s+(\d+)\s+lmc\s+(\d+)\s+)?(?:"(.*)"|(.*?))\s+lid\s+(\d+)\s+(\d+x|\?\?)\s*([A-Za-z0-9?]*)'
)
_GROUP_RE = re.compile(r"\(([^()]*)\)")
_HEX_RE = re.compile(r"^[0-9A-Fa-f]{1,16}$")

@dataclass(slots=True)
class IbPort:
    """One connected port, as one ibnetdiscover port line describes it."""

    num: int
    peer_guid: str
    peer_port: int
    peer_desc: str = ""
    peer_lid: int | None = None
    guid: str = ""  # the port GUID (CAs and routers print it; a switch port uses the node GUID)
    label: str = ""  # ibdiagnet/Quantum-2 label such as "1/1/1"
    lid: int | None = None  # a CA port's own LID
    lmc: int = 0
    width: str = ""  # "4x", "" when unknown
    speed: str = ""  # "EDR", "" when unknown

    @property
    def lanes(self) -> int | None:
        return int(self.width[:-1]) if self.width else None

    @property
    def speed_bytes(self) -> float | None:
        """Effective data rate of all active lanes in bytes per second, when width and speed are known."""
        return link_bytes_per_s(self.speed, self.lanes)


@dataclass(slots=True)
class IbNode:
    kind: str  # switch | ca | router
    guid: str
    description: str
    nports: int
    lid: int | None = None  # a switch's LID (port 0); CA LIDs live on their ports
    ports: dict[int, IbPort] = field(default_factory=dict)
    name: str = ""
    # PCI device ID from the block's ``devid=0xd2f2`` line (verified in the public ibnetdiscover
    # of an MQM9700, gary-minghuili/infiniband-exporter): names the ASIC generation, whose
    # XmitWait tick differs (the detector's TICK_BY_DEVID). "" when the block has none.
    devid: str = ""


@dataclass(slots=True)
class Topology:
    """Nodes by GUID, plus a LID index: ``lid -> (node, port)``; port is None for a switch LID."""

    nodes: dict[str, IbNode] = field(default_factory=dict)
    by_lid: dict[int, tuple[IbNode, int | None]] = field(default_factory=dict)
    unparsed: int = 0  # port lines that could not be read

    def links(self) -> list[Link]:
        """Both directions of every cable, sorted; a one-sided line still gives both directions."""
        seen: set[Link] = set()
        for node in self.nodes.values():
            for port in node.ports.values():
                peer = self.nodes.get(port.peer_guid)
                peer_name = peer.name if peer else (port.peer_desc or port.peer_guid)
                a, b = (node.name, _once(str(port.num))), (peer_name, _once(str(port.peer_port)))
                seen.add(Link(a[0], a[1], b[0], b[1]))
                seen.add(Link(b[0], b[1], a[0], a[1]))
        return sorted_in_slices(seen, key=lambda ln: (ln.device, _port_key(ln.port), ln.peer_device, _port_key(ln.peer_port)))


def _port_key(port: str) -> tuple[int, str]:
    return (int(port), "") if port.isdigit() else (1 << 30, port)


def parse_ibnetdiscover(text: str) -> Topology:
    """Read the default ``ibnetdiscover`` topology format (also as written by ibdiagnet).

    Lines that are neither node headers nor port lines (``vendid=``, comments, banners, shell
    prompts) are skipped. Port lines that cannot be read are counted in ``unparsed``.
    """
    if not isinstance(text, str):
        raise ParseError("ibnetdiscover output must be text")
    topo = Topology()
    node: IbNode | None = None
    devid = ""  # from the `devid=` line of the block being read, for its node header
    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            continue
        first = line[0]
        if first == "[":
            port = _parse_port_line(line, node) if node is not None else None
            if port is None:
                topo.unparsed += 1
            elif node is not None:
                node.ports[port.num] = port
            continue
        if line.startswith("devid="):
            devid = _devid(line[len("devid="):])
            continue
        if first not in "SCRv":
            continue
        m = _NODE_RE.match(line)
        if m is None:
            if line.startswith(("Switch", "Ca", "Rt", "vendid=")):
                node = None  # a new node block whose header is unreadable: do not credit its ports to the last node
            continue
        kind, nports, guid, tail = m.groups()
        node = _parse_node_header(_KINDS[kind], int(nports), norm_guid(guid), tail)
        node.devid, devid = devid, ""
        topo.nodes[node.guid] = node  # a repeated GUID: the later block wins
    _name_nodes(topo)
    _index_lids(topo)
    return topo


def _devid(text: str) -> str:
    """``0xD2F2`` -> ``0xd2f2``; "" when it is not a hex number."""
    text = text.strip().lower()
    return text if re.fullmatch(r"0x[0-9a-f]{1,8}", text) else ""


def _unquote(text: str) -> str:
    text = text.strip()
    if len(text) >= 2 and text[0] == '"' and text[-1] == '"':
        return text[1:-1]
    return text


def _parse_node_header(kind: str, nports: int, guid: str, tail: str) -> IbNode:
    lid = None
    desc = tail
    if kind == "switch":
        t = _SWITCH_TAIL_RE.match(tail)
        if t:
            desc, lid = t.group(1), int(t.group(2))
    elif desc.endswith(" (scp)"):
        desc = desc[: -len(" (scp)")]
    return IbNode(kind=kind, guid=guid, description=_unquote(desc).strip(), nports=nports, lid=lid)


def _parse_port_line(line: str, node: IbNode) -> IbPort | None:
    m = _PORT_RE.match(line)
    if m is None:
        return None
    num, local_groups, peer_guid, peer_port, _peer_groups, tail = m.groups()
    t = _PORT_TAIL_RE.match(tail)
    if t is None:
        return None
    own_lid, lmc, qdesc, udesc, peer_lid, width, speed = t.groups()
    # The texts of a port line repeat across the fabric (widths, speeds, the peers' GUIDs and
    # descriptions): each is kept once (a 100,000-port topology stays in the parse state).
    port = IbPort(
        num=int(num),
        peer_guid=_once(norm_guid(peer_guid)),
        peer_port=int(peer_port),
        peer_desc=_once((qdesc if qdesc is not None else udesc or "").strip()),
        peer_lid=_lid(peer_lid),
        width=_once("" if width.startswith("?") else width),
        speed=_once("" if not speed or "?" in speed else speed),
    )
    groups = _GROUP_RE.findall(local_groups)
    if node.kind != "switch" and groups and _HEX_RE.match(groups[-1]):
        # CAs and routers print their port GUID in the last parentheses; a label may precede it.
        port.guid = norm_guid(groups.pop())
    elif node.kind == "switch":
        port.guid = node.guid
    port.label = "/".join(g.strip() for g in groups if g.strip())
    if own_lid is not None:
        port.lid = _lid(own_lid)
        port.lmc = min(int(lmc), 7)
    return port


_ONCE: dict[str, str] = {}
_LANES: dict[int, float] = {}  # one float object per lane count


def _once(text: str) -> str:
    """One string object per distinct text of the topologies parsed (bounded)."""
    got = _ONCE.get(text)
    if got is None:
        if len(_ONCE) >= 1 << 20:
            _ONCE.clear()
        got = _ONCE[text] = text
    return got


def _lid(text: str | None) -> int | None:
    if text is None:
        return None
    lid = int(text)
    return None if lid in _NO_LID else lid


def _name_nodes(topo: Topology) -> None:
    counts = Counter(n.description for n in topo.nodes.values() if n.description)
    for n in topo.nodes.values():
        if not n.description:
            n.name = n.guid
        elif counts[n.description] > 1:
            n.name = f"{n.description} {n.guid}"
        else:
            n.name = n.description


def _index_lids(topo: Topology) -> None:
    for n in topo.nodes.values():
        if n.kind == "switch":
            if n.lid is not None and n.lid not in _NO_LID:
                topo.by_lid[n.lid] = (n, None)
            continue
        for p in n.ports.values():
            if p.lid is not None:
                for lid in range(p.lid, p.lid + (1 << p.lmc)):
                    topo.by_lid[lid] = (n, p.num)
    # A CA whose own section is missing is still known by the LID its switch peer reports.
    for n in topo.nodes.values():
        if n.kind != "switch":
            continue
        for p in n.ports.values():
            peer = topo.nodes.get(p.peer_guid)
            if p.peer_lid is not None and peer is not None and peer.kind != "switch":
                topo.by_lid.setdefault(p.peer_lid, (peer, p.peer_port))


# --------------------------------------------------------------------------------------------
# perfquery
# --------------------------------------------------------------------------------------------

_HEADER_RE = re.compile(
    r"#\s*Port\s+(extended\s+)?counters:\s*Lid\s+(\d+)\s+port\s+(\d+)"
    r"(?:\s*\(\s*CapMask:\s*(0x[0-9A-Fa-f]+)(?:\s+CapMask2:\s*(0x[0-9A-Fa-f]+))?)?",
    re.IGNORECASE,
)
_VALUE_RE = re.compile(r"^([A-Za-z][A-Za-z0-9_]*):\.*\s*(\S+)\s*$")

CAPMASK_XMIT_WAIT = 1 << 12
CAPMASK_QP1_DROP = 1 << 15
CAPMASK2_ADDL_EXT = 1 << 1  # IsAdditionalPortCountersExtendedSupported: -x error counters are real
ALL_PORTS = 255  # perfquery -a: an aggregate, not a port


# perfquery field -> the one InfiniBand counter table (widths, scale, which -x values are real).
COUNTERS = BY_PERFQUERY


@dataclass(slots=True)
class CounterBlock:
    """One ``# Port counters:`` (basic) or ``# Port extended counters:`` block.

    Its valid values are ``fields`` (in the order first seen) with ``numbers`` and the index
    of the line each was read from in ``lines`` (-1 when that line cannot be read in bulk:
    not a plain decimal ending the line, or a text whose line breaks were rewritten): packed,
    because a 100,000-port poll has that many blocks. ``values`` gives them as a dict."""

    lid: int
    port: int
    extended: bool
    cap_mask: int | None = None
    cap_mask2: int | None = None
    fields: tuple[str, ...] = ()
    numbers: Sequence[int] = ()
    lines: Sequence[int] = ()
    invalid: list[str] = field(default_factory=list)  # known counters whose value was not a number
    text: int = -1  # which of the poll's texts it came from (set by parse_payload)

    @property
    def values(self) -> dict[str, int]:
        return dict(zip(self.fields, self.numbers, strict=True))

    @property
    def ext_errors_valid(self) -> bool:
        return self.cap_mask2 is not None and bool(self.cap_mask2 & CAPMASK2_ADDL_EXT)


# One stripped line of a perfquery stdout: a header (starts with ``#``) or a value line. The
# text is first rejoined with ``\n`` (str.splitlines's own line breaks) and given a leading
# ``\n``, so every line starts after a ``\n`` (a literal the regex engine scans for fast,
# where ``^`` would be tried at every character), ``$`` marks its end and ``[^\S\n]`` is the
# whitespace str.strip removes.
_HEADER_LINE_RE = re.compile(r"\n[^\S\n]*(#[^\n]*?)[^\S\n]*$", re.MULTILINE)
_VALUE_LINES_RE = re.compile(r"\n[^\S\n]*([A-Za-z][A-Za-z0-9_]*):\.*[^\S\n]*(\S+)[^\S\n]*$", re.MULTILINE)
_OTHER_BREAKS = re.compile("[\r\x0b\x0c\x1c-\x1e\x85\u2028\u2029]")  # str.splitlines's, but "\n"
_BASIC_LIMIT = {name: 1 << d.width for name, d in COUNTERS.items()}
_EXTENDED_LIMIT = dict.fromkeys(COUNTERS, 1 << 64)
_U64 = (1 << 64) - 1  # a limit of 2^64 is 0 for textlayout (any 64-bit value)
_FIELDS: dict[tuple[str, ...], tuple[str, ...]] = {}  # one tuple per order of fields (few per fabric)


def parse_perfquery(text: str, numbers: Marks | None = None, values: bool = True) -> list[CounterBlock]:
    """All counter blocks of one perfquery stdout, in order.

    Value lines are ``Name:`` + dots + value. Other block kinds (``-E``/``-D`` details,
    ``PortSamplesControl``), stderr lines and the aggregate port 255 are skipped. A header
    wrapped onto the next line is joined back. The value lines between two headers are read
    by one regex scan (a 100,000-port poll is 2 million lines; a loop over lines in Python
    was most of its parse).

    ``numbers``, when given, gets the lines whose number this parser reads, for
    :mod:`fabricmon.collectors.textlayout`: FREE for a name that is not a counter, CHECKED with
    its limit for a valid value (the rest is FIXED). ``values=False`` reads the headers only
    (what the fetcher checks: which blocks a command printed, and their CapMask2).
    """
    if not isinstance(text, str):
        raise ParseError("perfquery output must be text")
    # Rejoined only when it has line breaks other than "\n" (rare): a poll's text is large.
    rejoined = _OTHER_BREAKS.search(text) is not None
    norm = "\n" + ("\n".join(text.splitlines()) if rejoined else text)
    if rejoined:
        numbers = None  # its lines are no longer the text's
    heads = list(_HEADER_LINE_RE.finditer(norm))
    blocks: list[CounterBlock] = []
    line, at = 0, 1  # the text's line at norm position ``at`` (norm[0] is the "\n" added above)
    for k, m in enumerate(heads):
        head, start = m.group(1), m.end()  # the value lines start at the "\n" ending the header
        stop = heads[k + 1].start() if k + 1 < len(heads) else len(norm)
        if "counters:" in head and ")" not in head and start < len(norm):
            # A header wrapped by a terminal or a paste: "(CapMask: 0x5300" + "CapMask2: 0x2)".
            nl = norm.find("\n", start + 1)
            nxt = norm[start + 1:nl if nl >= 0 else len(norm)].strip()
            if not nxt.startswith("#") and (("(" in head and ")" in nxt) or nxt.startswith("(")):
                head = f"{head} {nxt}"
                start = len(norm) if nl < 0 else nl
        current = _parse_header(head)
        if current is None or current.port == ALL_PORTS:
            continue
        blocks.append(current)
        if not values:
            continue
        line += norm.count("\n", at, start)  # the line ``start`` ends; value lines follow it
        at = start
        _read_values(current, norm, start, stop, line + 1, numbers, not rejoined)
    return blocks


def _read_values(block: CounterBlock, norm: str, start: int, stop: int, first: int, numbers: Marks | None,
                 bulk: bool) -> None:
    """The value lines between ``start`` and ``stop`` of ``norm`` into ``block``; ``first`` is
    the index of the first of them in the text. When every line there is a value line (the
    normal case) the k-th one read is line ``first + k``; otherwise lines are counted per value."""
    # A basic counter cannot exceed its width, an extended one 64 bits: anything else is garbage.
    limits = _EXTENDED_LIMIT if block.extended else _BASIC_LIMIT
    found = _VALUE_LINES_RE.findall(norm, start, stop)
    body = stop - 1 if stop == len(norm) and norm.endswith("\n") else stop  # a final "\n" starts no line
    if bulk and len(found) == norm.count("\n", start, body):
        places: Any = range(first, first + len(found))
    elif bulk:
        places = [first - 1 + norm.count("\n", start, v.start() + 1) for v in _VALUE_LINES_RE.finditer(norm, start, stop)]
    else:
        places = repeat(-1)
    got: dict[str, tuple[int, int]] = {}
    free: list[int] = []  # lines whose value is not read (not a counter)
    invalid = block.invalid
    for (name, value), place in zip(found, places, strict=False):
        limit = limits.get(name)
        if limit is None:
            free.append(place)
            continue
        try:
            number = int(value, 0)
        except ValueError:
            number = -1
        if 0 <= number < limit:
            got[name] = (number, place)
        else:
            invalid.append(name)
    if got:
        names = tuple(got)
        if len(_FIELDS) >= 4096:  # a payload that orders its fields differently in every block
            _FIELDS.clear()
        block.fields = _FIELDS.setdefault(names, names)
        block.numbers = array("Q", [v for v, _ in got.values()])
        block.lines = array("q", [p for _, p in got.values()])
    if numbers is not None:  # a value that a later line of the same name overrides stays FIXED
        numbers.extend(free, FREE)
        numbers.extend(block.lines, CHECKED, [limits[name] & _U64 for name in block.fields])


def _parse_header(line: str) -> CounterBlock | None:
    m = _HEADER_RE.search(line)
    if m is None:
        return None
    ext, lid, port, cap, cap2 = m.groups()
    return CounterBlock(
        lid=int(lid),
        port=int(port),
        extended=ext is not None,
        cap_mask=int(cap, 16) if cap else None,
        cap_mask2=int(cap2, 16) if cap2 else None,
    )


# ``perfquery -c`` (--smplctl): ``# PortSamplesControl: Lid 1719 port 1`` and then the attribute's
# fields, one ``Name:`` + dots + value line each, ``Tick`` among them as ``0x%02x``. Verified in
# rdma-core's printing code (linux-rdma/rdma-core@691953d8: infiniband-diags/perfquery.c
# dump_portsamples_control; libibmad/fields.c: Tick is the 8-bit field at bit 16, dumped with
# mad_dump_hex; libibmad/portid.c portid2str gives "Lid N", with " Gid ..."/"DR path ..."
# when addressed so). No public capture of this output was found: the test fixtures are
# built from that code, and their values are inferred.
_SMPLCTL_RE = re.compile(r"#\s*PortSamplesControl:\s*Lid\s+(\d+)\b.*?\bport\s+(\d+)", re.IGNORECASE)
SAMPLES_CONTROL_TICK = "samples_control_tick"  # the gauge: the Tick field as the device reports it


def parse_samples_control(text: str) -> dict[tuple[int, int], int]:
    """``(LID, port) -> Tick`` of every PortSamplesControl block in one ``perfquery -c`` stdout.

    A block without a readable Tick (a value that is not an 8-bit number) is left out; other
    lines (stderr noise, other block kinds) are skipped.
    """
    if not isinstance(text, str):
        raise ParseError("perfquery -c output must be text")
    ticks: dict[tuple[int, int], int] = {}
    key: tuple[int, int] | None = None
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith("#"):
            m = _SMPLCTL_RE.search(line)
            key = (int(m.group(1)), int(m.group(2))) if m else None
            continue
        if key is None or not line.startswith("Tick:"):
            continue
        m = _VALUE_RE.match(line)
        try:
            tick = int(m.group(2), 0) if m else -1
        except ValueError:
            tick = -1
        if 0 <= tick <= 0xFF:
            ticks[key] = tick
    return ticks


# What each perfquery field becomes, from a basic block (the field's own width, saturating) and
# from an extended one (64 bits, wrapping): ``(counter, sub, bits, saturating, scale)``.
_BASIC = {name: (d.counter, (), d.width, True, d.scale) for name, d in COUNTERS.items()}
_EXTENDED = {name: (d.counter, (), 64, False, d.scale) for name, d in COUNTERS.items()}
# One PortLayout per shape of port (which fields, from which block, in which order): a fabric
# has a handful of shapes, however many ports, so a port costs one lookup and its values list.
# Keyed by the fields' descriptions, or, for a port with only a valid extended block, by the
# field names alone (all from _EXTENDED).
_LAYOUTS: dict[tuple[Any, ...], PortLayout] = {}


def port_counters(out: Counters | PollColumns, device: str, port: str, ext: CounterBlock | None,
                  basic: CounterBlock | None) -> None:
    """Add one port's readings from its extended and/or basic block to ``out``.

    A 64-bit extended value wins over the basic one. The extended error counters (and
    XmitWait, QP1Dropped) count only when CapMask2 bit 1 is set; otherwise older perfquery
    printed zeros for them, so the basic (saturating) values are used when present. A
    :class:`PollColumns` also gets the text and line each value was read from.
    """
    sources = isinstance(out, PollColumns)
    if basic is None and ext is not None and ext.ext_errors_valid:  # perfquery -x on current devices
        names = ext.fields
        layout = _LAYOUTS.get(names) or _layout(names, [_EXTENDED[name] for name in names])
        if sources:
            out.add_port(device, port, layout, ext.numbers, repeat(ext.text, len(names)), ext.lines)
        else:
            out.add_port(device, port, layout, list(ext.numbers))
        return
    fields, values = _merged_fields(ext, basic)
    shape = tuple(fields.values())
    layout = _LAYOUTS.get(shape) or _layout(shape, shape)
    if sources:
        out.add_port(device, port, layout, [v for v, _, _ in values.values()], [t for _, t, _ in values.values()],
                     [ln for _, _, ln in values.values()])
    else:
        out.add_port(device, port, layout, [v for v, _, _ in values.values()])


def _merged_fields(ext: CounterBlock | None, basic: CounterBlock | None) -> tuple[
        dict[str, tuple[str, tuple[Any, ...], int, bool, float]], dict[str, tuple[int, int, int]]]:
    """A port's fields from its basic then extended block (an extended value wins), as
    :func:`port_counters` describes: (name -> field description, name -> (value, text, line))."""
    fields: dict[str, tuple[str, tuple[Any, ...], int, bool, float]] = {}
    values: dict[str, tuple[int, int, int]] = {}
    for block, kind in ((basic, _BASIC), (ext, _EXTENDED)):
        if block is None:
            continue
        cap, errors_ok = block.cap_mask, block.ext_errors_valid
        for name, value, line in zip(block.fields, block.numbers, block.lines or repeat(-1), strict=False):
            if block is basic and cap is not None and (
                    (name == "PortXmitWait" and not cap & CAPMASK_XMIT_WAIT) or (name == "QP1Dropped" and not cap & CAPMASK_QP1_DROP)):
                continue  # unsupported: the 0 printed means nothing
            if block is ext and not errors_ok and not COUNTERS[name].data:
                continue  # CapMask2 bit 1 clear: the extended error counters are not real
            fields[name] = kind[name]
            values[name] = (value, block.text, line)
    return fields, values


def _layout(key: tuple[Any, ...], fields: Iterable[tuple[str, tuple[Any, ...], int, bool, float]]) -> PortLayout:
    """A new layout, kept under ``key``."""
    if len(_LAYOUTS) >= 4096:  # a payload that orders its fields differently on every port
        _LAYOUTS.clear()
    layout = _LAYOUTS[key] = PortLayout.of(fields)
    return layout


# --------------------------------------------------------------------------------------------
# The collector's payload
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PerfqueryState:
    """What a perfquery poll without ibnetdiscover output needs from earlier polls.

    ``topology``: the latest ibnetdiscover topology (names the LIDs of counter blocks);
    ``gone``: ports connected in an earlier topology but missing from it (exported as
    ``link_up 0``); ``facts``: the devices, port infos and link gauges of that topology, built
    once per topology (tens of thousands of objects on a large fabric); ``ticks``: the
    ``samples_control_tick`` gauges from the latest ``perfquery -c`` outputs, for ports still in
    the topology (the payload carries them only on topology refreshes); ``counters``: the layout
    of the last poll's perfquery texts (:class:`CounterLayout`), so the next poll's values are
    read in bulk. Never changed after it is made: a parse that learns something returns a new one."""

    topology: Topology | None = None
    gone: frozenset[tuple[str, str]] = frozenset()
    facts: tuple[tuple[DeviceInfo, ...], tuple[PortInfo, ...], tuple[Gauge, ...]] = ((), (), ())
    ticks: tuple[Gauge, ...] = ()
    counters: CounterLayout | None = None


def parse_payload(payload: Any, state: PerfqueryState) -> tuple[ParseResult, PerfqueryState]:
    """``{"ibnetdiscover": TEXT?, "perfquery": [TEXT, ...], "samples_control": [TEXT, ...]?}``
    -> (ParseResult, next state).

    The latest topology is carried in the state for the polls that carry none.
    Devices, ports and link gauges come from that topology on every poll; ``links`` only
    when this payload carried ibnetdiscover output. ``samples_control`` (``perfquery -c``
    outputs, on topology refreshes) gives the ``samples_control_tick`` gauges, repeated on
    every poll until the next one.
    """
    texts, disc, smplctl = _payload_parts(payload)
    result = ParseResult()
    if disc is not None:
        new = parse_ibnetdiscover(disc)
        if new.nodes:
            state = _with_topology(state, new)
            result.links = new.links()
            if new.unparsed:
                result.warnings.append(f"ibnetdiscover: {new.unparsed} port line(s) could not be read")
        else:
            result.warnings.append("ibnetdiscover output holds no nodes; keeping the previous topology")
    if smplctl:
        state = _with_ticks(state, smplctl, result.warnings)
    result.gauges.extend(state.ticks)
    devices, ports, gauges = state.facts
    result.devices.extend(devices)
    result.ports.extend(ports)
    result.gauges.extend(gauges)
    return result, _counters(result, texts, state)


def _payload_parts(payload: Any) -> tuple[list[str], str | None, list[str] | None]:
    """(perfquery outputs, ibnetdiscover output or None, perfquery -c outputs or None), checked."""
    if not isinstance(payload, dict):
        raise ParseError("perfquery payload must be a JSON object")
    texts = payload.get("perfquery", [])
    if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
        raise ParseError("perfquery payload: 'perfquery' must be a list of strings")
    disc = payload.get("ibnetdiscover")
    if disc is not None and not isinstance(disc, str):
        raise ParseError("perfquery payload: 'ibnetdiscover' must be a string")
    smplctl = payload.get("samples_control")
    if smplctl is not None and (not isinstance(smplctl, list) or not all(isinstance(t, str) for t in smplctl)):
        raise ParseError("perfquery payload: 'samples_control' must be a list of strings")
    return texts, disc, smplctl


def _counters(result: ParseResult, texts: list[str], state: PerfqueryState) -> PerfqueryState:
    """The counters of every (LID, port) block into ``result``: in bulk when the texts are
    those of the last poll but for their values (the state's :class:`CounterLayout`), else
    line by line; the state with the layout for the next poll."""
    topo = state.topology
    fast = state.counters.fit(topo) if state.counters is not None else None
    values = fast.numbers.read(texts) if fast is not None else None
    if fast is not None and values is not None:  # the texts are those of the last poll but for their values
        result.counters = fast.columns.counters(values)
        result.warnings.extend(fast.warnings)
        result.ports.extend(fast.ports_named_by_lid)
    else:
        fast = _read_counters(texts, topo, result)
    return state if fast is state.counters else replace(state, counters=fast)


def _read_counters(texts: list[str], topo: Topology | None, result: ParseResult) -> CounterLayout | None:
    """The counters of every (LID, port) block into ``result``, read line by line, named by the
    topology (``lid-<LID>`` when it does not know the LID; extended and basic blocks of one port
    are one port's counters); their layout for the next poll (None when they cannot be read in bulk)."""
    warned, named = len(result.warnings), len(result.ports)
    ext_blocks: dict[tuple[int, int], CounterBlock] = {}
    basic_blocks: dict[tuple[int, int], CounterBlock] = {}
    marks = [Marks() for _ in texts]
    for ti, text in enumerate(texts):
        for block in parse_perfquery(text, marks[ti]):
            block.text = ti
            (ext_blocks if block.extended else basic_blocks)[(block.lid, block.port)] = block
            if block.invalid:
                result.warnings.append(f"LID {block.lid} port {block.port}: values of {', '.join(block.invalid)} are not numbers")
    unknown: set[int] = set()
    names: dict[int, str | None] = {}
    cols = PollColumns()
    for key in sorted_in_slices(ext_blocks.keys() | basic_blocks.keys()):  # 100,000 keys: not one C call (a GIL hold)
        lid, portnum = key
        entry = topo.by_lid.get(lid) if topo is not None else None
        if entry is None:
            device = f"lid-{lid}"
            unknown.add(lid)
            result.ports.append(PortInfo(device=device, port=str(portnum), lid=str(lid)))
        else:
            device = entry[0].name
        names[lid] = None if entry is None else device
        port_counters(cols, device, _once(str(portnum)), ext_blocks.get(key), basic_blocks.get(key))
    if unknown:
        lids = ", ".join(str(x) for x in sorted(unknown))
        if topo is None:
            result.warnings.append(f"no ibnetdiscover topology yet: counters of LID(s) {lids} are named lid-<LID>")
        else:
            result.warnings.append(f"LID(s) {lids} are not in the ibnetdiscover topology: named lid-<LID>")
    del ext_blocks, basic_blocks
    result.counters = cols.counters()
    return CounterLayout.of(texts, cols, result.counters, marks, topo, names, result.warnings[warned:], result.ports[named:])


def _with_topology(state: PerfqueryState, new: Topology) -> PerfqueryState:
    """The state with a new topology; ports connected before but missing now are remembered as down."""
    gone = set(state.gone)
    if state.topology is not None:
        gone |= {(n.name, str(p)) for n in state.topology.nodes.values() for p in n.ports}
    connected = {(n.name, str(p)) for n in new.nodes.values() for p in n.ports}
    gone -= connected
    devices, ports, gauges = _topology_facts(new, gone)
    ticks = tuple(g for g in state.ticks if (g.device, g.port) in connected)
    return replace(state, topology=new, gone=frozenset(gone), facts=(tuple(devices), tuple(ports), tuple(gauges)), ticks=ticks)


def _with_ticks(state: PerfqueryState, texts: list[str], warnings: list[str]) -> PerfqueryState:
    """The state with the Tick of every PortSamplesControl block in ``texts``.

    A CA port's reading is that port's. The fetcher asks one port per switch: its Tick is
    taken for every port of the switch (NVIDIA's ibdiagnet manual gives one value per switch
    ASIC generation; inferred for other vendors), unless a port has a reading of its own.
    Ports without a new reading keep the one they had.
    """
    topo = state.topology
    own: dict[tuple[str, str], int] = {}
    switch_wide: dict[str, tuple[IbNode, int]] = {}
    unknown: set[int] = set()
    for text in texts:
        for (lid, portnum), tick in parse_samples_control(text).items():
            entry = topo.by_lid.get(lid) if topo is not None else None
            if entry is None:
                unknown.add(lid)
                continue
            node, ca_port = entry
            if ca_port is not None:
                own[(node.name, str(ca_port))] = tick
            elif portnum in node.ports:
                own[(node.name, str(portnum))] = tick
                switch_wide.setdefault(node.name, (node, tick))
    if unknown:
        lids = ", ".join(str(x) for x in sorted(unknown))
        warnings.append(f"perfquery -c: LID(s) {lids} are not in the ibnetdiscover topology; their Tick is not used")
    ticks = {(g.device, g.port): g.value for g in state.ticks}
    for name, (node, tick) in switch_wide.items():
        ticks.update(((name, str(p)), float(tick)) for p in node.ports)
    ticks.update((k, float(v)) for k, v in own.items())
    gauges = tuple(Gauge(d, p, SAMPLES_CONTROL_TICK, v) for (d, p), v in sorted(ticks.items()))
    return replace(state, ticks=gauges)


def _topology_facts(topo: Topology, gone: set[tuple[str, str]]) -> tuple[list[DeviceInfo], list[PortInfo], list[Gauge]]:
    """Devices, port infos and link gauges of a topology (link_up 0 for ports that vanished from it)."""
    devices: list[DeviceInfo] = []
    ports: list[PortInfo] = []
    gauges: list[Gauge] = []
    for n in topo.nodes.values():
        devices.append(DeviceInfo(name=n.name, kind=n.kind, guid=n.guid, description=n.description, model=n.devid))
        for p in n.ports.values():
            port = _once(str(p.num))  # "1".."64" once each, not once per port and place (12 MB at 100,000 ports)
            lid = n.lid if n.kind == "switch" else p.lid
            ports.append(PortInfo(device=n.name, port=port, guid=p.guid, lid="" if lid is None else _once(str(lid)),
                                  label=p.label))
            gauges.append(Gauge(n.name, port, "link_up", 1.0))
            lanes = p.lanes
            if lanes:
                gauges.append(Gauge(n.name, port, "link_width_lanes", _LANES.setdefault(lanes, float(lanes))))
            speed = p.speed_bytes
            if speed is not None:
                gauges.append(Gauge(n.name, port, "link_speed_bytes", speed))
    for device, port in sorted(gone):
        gauges.append(Gauge(device, port, "link_up", 0.0))
    return devices, ports, gauges
