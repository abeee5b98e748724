"""Host lossless configuration: RoCE ECN in sysfs, iproute2 ``dcb`` and ``mlnx_qos``, as config gauges.

Pure parsing of what :mod:`fabricmon.collectors.host.fetch` recorded for each RoCE netdev:

- ``/sys/class/net/<if>/ecn/roce_np/enable/<prio>`` and ``roce_rp/enable/<prio>`` (mlx5: the
  DCQCN notification and reaction points per priority, one ``0``/``1`` file each; verified: the
  prometheus/procfs sysfs fixture) -> ``nic_ecn_enabled{priority, role}``, role ``np``/``rp``;
- ``dcb pfc show dev <if>`` (iproute2 dcb-pfc(8); the text form is ``pfc-cap 8 macsec-bypass off
  delay 0`` then ``prio-pfc 0:off 1:off ... 3:on ...``, verified from dcb/dcb_pfc.c and published
  captures) -> ``pfc_enabled{priority}``;
- ``dcb app show dev <if>`` (dcb-app(8), dcb/dcb_app.c): ``dscp-prio KEY:PRIO ...`` where KEY is a
  DSCP number, or its rt_dsfield name (``AF31``, ``CS6``, ``EF``) unless ``-N`` is given ->
  ``dscp_priority{dscp}``; DSCP entries present mean the NIC trusts DSCP (mlx5 switches its trust
  state to DSCP when the first DSCP app entry is added, drivers/net/ethernet/mellanox/mlx5/core/
  en_dcbnl.c: inferred for other drivers) -> ``qos_trust_dscp``;
- ``mlnx_qos -i <if>`` (NVIDIA MLNX_OFED/mlnx-tools; format from published outputs: ``Priority trust
  state: dscp``, a ``PFC configuration:`` table with ``priority`` and ``enabled`` rows, ``dscp2prio
  mapping:`` lines ``prio:3 dscp:26,27,``) -> ``qos_trust_dscp``, and ``pfc_enabled`` /
  ``dscp_priority`` where ``dcb`` gave none.

A text that does not have the expected shape gives one warning naming the command and the
interface, and that setting stays absent (the checklist says ``unknown``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from fabricmon.collectors.base import ResultBuilder

PRIORITIES = range(8)
ECN_FILE = re.compile(r"^net/([^/]+)/ecn/roce_(np|rp)/enable/([0-7])$", re.ASCII)
_PRIO_PFC = re.compile(r"\bprio-pfc((?:\s+[0-7]:(?:on|off))+)", re.ASCII)
_MAPPING = re.compile(r"^([A-Za-z0-9]+):([0-7])$", re.ASCII)
_TRUST = re.compile(r"^\s*Priority trust state:\s*(\S+)", re.MULTILINE | re.ASCII)
_MLNX_PFC = re.compile(r"^\s*priority((?:\s+[0-7]){8})\s*$\n^\s*enabled((?:\s+[01]){8})\s*$", re.MULTILINE | re.ASCII)
_MLNX_DSCP = re.compile(r"\bprio:([0-7])\s+dscp:((?:\d{1,2},?)+)", re.ASCII)
# RFC 2474 class selectors CSn = 8n, RFC 2597 assured forwarding AFxy = 8x + 2y, RFC 3246 EF = 46,
# RFC 8622 LE = 1: the names iproute2's rt_dsfield table gives DSCP values.
_DSCP_NAME = re.compile(r"^(?:CS([0-7])|AF([1-4])([1-3])|(EF)|(LE)|(default))$", re.IGNORECASE | re.ASCII)


def dscp_value(key: str) -> int | None:
    """A ``dcb app`` DSCP key: a number 0..63 or a standard rt_dsfield name; None otherwise."""
    if key.isdigit():
        n = int(key)
        return n if n <= 63 else None
    m = _DSCP_NAME.match(key)
    if not m:
        return None
    cs, af_class, af_drop, ef, le, default = m.groups()
    if cs is not None:
        return 8 * int(cs)
    if af_class is not None:
        return 8 * int(af_class) + 2 * int(af_drop)
    return 46 if ef else 1 if le else 0 if default else None


def parse_dcb_pfc(text: str) -> dict[int, bool] | None:
    """``dcb pfc show`` -> {priority: enabled}; None when there is no ``prio-pfc`` with all 8."""
    m = _PRIO_PFC.search(text)
    if not m:
        return None
    out = {int(p): v == "on" for p, v in (tok.split(":") for tok in m.group(1).split())}
    return out if set(out) == set(PRIORITIES) else None


def parse_dcb_app(text: str) -> tuple[dict[int, int], list[str]] | None:
    """``dcb app show`` -> ({dscp: priority}, keys that are not DSCP values); None when the text
    is not ``dcb app`` output (an empty table prints nothing, which is a valid empty map)."""
    tokens = text.split()
    out: dict[int, int] = {}
    unknown: list[str] = []
    i = 0
    while i < len(tokens):
        if tokens[i] != "dscp-prio":
            if not tokens[i].endswith("-prio") and not _MAPPING.match(tokens[i]) and not tokens[i].isdigit():
                return None  # a word no dcb app line has: not this tool's output
            i += 1
            continue
        i += 1
        while i < len(tokens) and (m := _MAPPING.match(tokens[i])):
            dscp = dscp_value(m.group(1))
            if dscp is None:
                unknown.append(m.group(1))
            else:
                out[dscp] = int(m.group(2))
            i += 1
    return out, unknown


def parse_mlnx_qos(text: str) -> tuple[bool | None, dict[int, bool] | None, dict[int, int]]:
    """``mlnx_qos -i`` -> (trusts DSCP, {priority: PFC enabled}, {dscp: priority})."""
    trust = _TRUST.search(text)
    trust_dscp = None if trust is None else {"dscp": True, "pcp": False}.get(trust.group(1).lower())
    pfc = None
    if m := _MLNX_PFC.search(text):
        prios, enabled = (list(map(int, g.split())) for g in m.groups())
        if sorted(prios) == list(PRIORITIES):
            pfc = {p: e == 1 for p, e in zip(prios, enabled, strict=True)}
    dscp: dict[int, int] = {}
    for prio, values in _MLNX_DSCP.findall(text):
        for v in values.strip(",").split(","):
            if v and int(v) <= 63:
                dscp[int(v)] = int(prio)
    return trust_dscp, pfc, dscp


def _ecn(c: ResultBuilder, files: Mapping[str, Any], port_of: Mapping[str, str], warnings: list[str]) -> None:
    for path, raw in sorted(files.items()):
        m = ECN_FILE.match(path)
        if not m or not isinstance(raw, str):
            continue
        ifname, role, prio = m.groups()
        value = raw.strip()
        if value not in ("0", "1"):
            warnings.append(f"/sys/class/{path}: not 0 or 1 ({value[:20]!r}), skipped")
            continue
        c.gauge(port_of.get(ifname, ifname), "nic_ecn_enabled", float(value), (int(prio), role))


def _tools(c: ResultBuilder, port: str, ifname: str, out: Mapping[str, Any], warnings: list[str]) -> None:
    mlnx = out.get("mlnx_qos")
    if isinstance(mlnx, str):
        trust, pfc, dscp = parse_mlnx_qos(mlnx)
        if trust is None and pfc is None and not dscp:
            warnings.append(f"mlnx_qos -i {ifname}: no trust state, PFC table or dscp2prio mapping in the output, skipped")
    else:
        trust, pfc, dscp = None, None, {}
    if trust is not None:
        c.gauge(port, "qos_trust_dscp", 1.0 if trust else 0.0)
    text = out.get("pfc")
    if isinstance(text, str):
        parsed = parse_dcb_pfc(text)
        if parsed is None:
            warnings.append(f"dcb pfc show dev {ifname}: no prio-pfc map of priorities 0-7 in the output, skipped")
        else:
            pfc = parsed
    for p, on in sorted((pfc or {}).items()):
        c.gauge(port, "pfc_enabled", 1.0 if on else 0.0, (p,))
    text = out.get("app")
    if isinstance(text, str):
        app = parse_dcb_app(text)
        if app is None:
            warnings.append(f"dcb app show dev {ifname}: not dcb app output, skipped")
        else:
            mapping, unknown = app
            if unknown:
                warnings.append(f"dcb app show dev {ifname}: DSCP names not known ({', '.join(unknown[:6])}), those entries skipped")
            dscp = mapping or dscp
            c.gauge(port, "qos_trust_dscp", 1.0 if mapping or unknown else 0.0)
    for d, prio in sorted(dscp.items()):
        c.gauge(port, "dscp_priority", float(prio), (d,))


def config_gauges(c: ResultBuilder, files: Mapping[str, Any], tools: Any, port_of: Mapping[str, str]) -> list[str]:
    """Emit the host's config gauges on the RDMA port of each netdev (``port_of``; the netdev name
    when no RDMA port maps to it). Returns the warnings."""
    warnings: list[str] = []
    _ecn(c, files, port_of, warnings)
    if not isinstance(tools, dict):
        if tools is not None:
            warnings.append("host payload 'dcb' is not an object of interface -> outputs, skipped")
        return warnings
    for ifname, out in sorted(tools.items()):
        if not isinstance(ifname, str) or not isinstance(out, dict):
            warnings.append(f"host payload dcb entry {str(ifname)[:40]!r} is not interface -> outputs, skipped")
            continue
        _tools(c, port_of.get(ifname, ifname), ifname, out, warnings)
    return warnings
