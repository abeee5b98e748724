"""NVUE lossless configuration: ``qos/roce/status`` and the PFC watchdog state, as config gauges.

What a RoCE port is configured to do, read from the switch itself (NVIDIA Cumulus Linux 5.x
"RDMA over Converged Ethernet - RoCE": ``nv show interface <if> qos roce status``; "Quality of
Service": ``nv show interface <if> qos pfc-watchdog``). Both CLI outputs are public samples
(verified); their JSON form under ``/nvue_v1/`` is **inferred** from the CLI tree, as for the
other NVUE sections (NVIDIA publishes no JSON sample of either), so every field is read
defensively and a value that cannot be read exactly is left out: an absent gauge means
"not visible", and the checklist then says ``unknown``, never ``pass``.

Gauges (vocabulary group ``config``):

- ``pfc.pfc-priority`` ("3", "3,4", a list) with ``rx-enabled``/``tx-enabled`` -> ``pfc_enabled``
  for all eight priorities (1 listed and enabled in either direction, else 0);
- ``congestion-control.enabled-tc`` ("0,3") and ``congestion-mode`` ("ecn, absolute") ->
  ``ecn_enabled`` for traffic classes 0..7; ``min-threshold``/``max-threshold`` ->
  ``ecn_min/max_threshold_bytes`` on each enabled class (exact bytes only: the CLI's
  ``153.00 KB`` is humanised and skipped with a warning);
- ``trust.trust-mode`` ("pcp,dscp", "dscp", "pcp") -> ``qos_trust_dscp`` (DSCP listed: the port
  classifies IP traffic by DSCP, as Cumulus does with both trusted);
- the "RoCE PCP/DSCP->SP mapping" rows (``dscp``, ``switch-prio``) -> ``dscp_priority``;
- the "RoCE Pool Status" rows: an ingress pool reserved for RoCE (``roce-reserved-ingress``,
  listing its ``switch-priorities``) is the lossless class's buffer -> ``headroom_bytes`` for
  the priority group of each priority (PG = switch priority: inferred), 0 for a priority no
  reserved pool covers when the pool table is shown;
- PFC watchdog ``state`` ("enabled"/"disabled") -> ``pfc_watchdog_enabled`` for priorities 0..7
  (the watchdog is a port setting that covers every lossless priority of the port);
- the global PFC profile ``qos/pfc/default-global`` (``nv show qos pfc default-global``: NVIDIA
  NVUE command reference, Show Commands / QoS, sample with ``xoff-threshold 10000 B``,
  ``xon-threshold 2000 B``, ``port-buffer 25000 B``, ``[switch-priority] 0``; verified CLI, JSON
  form inferred) -> ``pfc_xoff_threshold_bytes`` for the priority group of each listed switch
  priority (PG = switch priority, inferred as for the pools), on every port of the poll whose
  PFC configuration was read. Inferred: a port bound to a PFC profile of its own (``nv set
  interface <if> qos pfc profile``) is not told apart, because the interface's profile binding is
  not read.
"""

from __future__ import annotations

from typing import Any

from fabricmon.collectors.nvue import parse as nvue

PRIORITIES = range(8)
TRAFFIC_CLASSES = range(8)
# Inferred JSON keys of the two tables the CLI prints under titles (first found wins).
DSCP_MAP_KEYS = ("pcp-dscp-mapping", "dscp-sp-mapping", "mapping")
POOL_KEYS = ("pool", "pool-status", "pools")
_YES = {"yes", "on", "enabled", "enable", "true", "up"}
_NO = {"no", "off", "disabled", "disable", "false", "down"}


def int_set(value: Any, hi: int = 7) -> set[int] | None:
    """``"0,3"``, ``"3"``, ``3``, ``[0, 3]`` or ``""``/``"none"``/``"-"`` (empty) as a set; None when any
    element is not an integer 0..hi (a shape we cannot read is not a setting)."""
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, int):
        items: list[Any] = [value]
    elif isinstance(value, list):
        items = value
    elif isinstance(value, str):
        text = value.strip().lower()
        items = [] if text in ("", "none", "-") else [t.strip() for t in text.split(",")]
    else:
        return None
    out: set[int] = set()
    for item in items:
        n = item if type(item) is int else (int(item) if isinstance(item, str) and item.isascii() and item.isdigit() else None)
        if n is None or not 0 <= n <= hi:
            return None
        out.add(n)
    return out


def yes_no(value: Any) -> bool | None:
    if isinstance(value, bool):
        return value
    if isinstance(value, str):
        text = value.strip().lower()
        return True if text in _YES else False if text in _NO else None
    return None


def _rows(section: Any) -> list[dict[str, Any]]:
    """A CLI table's rows: ``{"roce": {...}}``, ``{"0": {...}}`` or ``[{...}]``."""
    if isinstance(section, dict):
        return [r for r in section.values() if isinstance(r, dict)]
    if isinstance(section, list):
        return [r for r in section if isinstance(r, dict)]
    return []


def _first_section(body: dict[str, Any], keys: tuple[str, ...]) -> Any:
    return next((v for k in keys if (v := nvue.get_path(body, k)) is not None), None)


def _listed(em: nvue.Emitter, where: str, raw: Any, what: str, keyed: bool = False) -> set[int] | None:
    """``raw`` as a set of priorities or traffic classes (``keyed``: a dict keyed by them);
    None, with a warning naming ``where`` when a value was there but is not such a list."""
    got = int_set(sorted(raw) if keyed and isinstance(raw, dict) else raw)
    if got is None and raw is not None:
        em.result.warnings.append(f"{where} {str(raw)[:40]!r} is not a {what} list, skipped")
    return got


def _pfc(em: nvue.Emitter, port: str, body: dict[str, Any]) -> None:
    pfc = nvue.get_path(body, "pfc")
    if not isinstance(pfc, dict):
        return
    prios = _listed(em, f"{port}: RoCE status pfc-priority", nvue.get_path(pfc, "pfc-priority"), "priority")
    if prios is None:
        return
    directions = [d for d in (yes_no(nvue.get_path(pfc, "rx-enabled")), yes_no(nvue.get_path(pfc, "tx-enabled"))) if d is not None]
    active = not directions or any(directions)
    for p in PRIORITIES:
        em.gauge(port, "pfc_enabled", 1.0 if active and p in prios else 0.0, (p,))


def _congestion_control(em: nvue.Emitter, port: str, body: dict[str, Any]) -> None:
    cc = nvue.get_path(body, "congestion-control")
    if not isinstance(cc, dict):
        return
    tcs = _listed(em, f"{port}: RoCE status enabled-tc", nvue.get_path(cc, "enabled-tc"), "traffic-class")
    if tcs is None:
        return
    mode = nvue.get_path(cc, "congestion-mode")
    marking = not isinstance(mode, str) or "ecn" in mode.lower()  # "ecn, absolute"; a RED-only mode drops instead
    for q in TRAFFIC_CLASSES:
        em.gauge(port, "ecn_enabled", 1.0 if marking and q in tcs else 0.0, (str(q),))
    for q in sorted(tcs):
        for key, name in (("min-threshold", "ecn_min_threshold_bytes"), ("max-threshold", "ecn_max_threshold_bytes")):
            em.gauge(port, name, nvue.get_path(cc, key), (str(q),), f"RoCE status {key}")


def _trust(em: nvue.Emitter, port: str, body: dict[str, Any]) -> None:
    mode = nvue.get_path(body, "trust", "trust-mode")
    if not isinstance(mode, str):
        return
    words = {w.strip().lower() for w in mode.split(",")}
    if "dscp" in words:
        em.gauge(port, "qos_trust_dscp", 1.0)
    elif "pcp" in words:
        em.gauge(port, "qos_trust_dscp", 0.0)
    else:
        em.result.warnings.append(f"{port}: RoCE status trust-mode {mode[:40]!r} is neither DSCP nor PCP, skipped")


def _dscp_map(em: nvue.Emitter, port: str, body: dict[str, Any]) -> None:
    for row in _rows(_first_section(body, DSCP_MAP_KEYS)):
        dscp = int_set(nvue.get_path(row, "dscp"), hi=63)
        prio = int_set(nvue.get_path(row, "switch-prio"))
        if dscp and prio and len(prio) == 1:
            for d in sorted(dscp):
                em.gauge(port, "dscp_priority", float(next(iter(prio))), (d,))


def _headroom(em: nvue.Emitter, port: str, body: dict[str, Any]) -> None:
    pools = [r for r in _rows(_first_section(body, POOL_KEYS)) if "ingress" in str(nvue.get_path(r, "name") or "").lower()]
    if not pools:
        return
    reserved: dict[int, list[Any]] = {}
    for row in pools:
        name = str(nvue.get_path(row, "name")).lower()
        prios = int_set(nvue.get_path(row, "switch-priorities")) or set()
        if "reserved" in name or "lossless" in name:
            for p in prios:
                reserved.setdefault(p, []).append(nvue.get_path(row, "size"))
    for p in PRIORITIES:
        sizes = reserved.get(p)
        if not sizes:
            em.gauge(port, "headroom_bytes", 0.0, (p,))
        elif len(sizes) == 1:
            em.gauge(port, "headroom_bytes", sizes[0], (p,), "RoCE pool size")


def parse_roce_status(em: nvue.Emitter, port: str, body: Any, opts: nvue.NvueParseOptions) -> None:
    """``interface/<if>/qos/roce/status`` -> the config gauges of the module docstring."""
    if not isinstance(body, dict):
        return
    _pfc(em, port, body)
    _congestion_control(em, port, body)
    _trust(em, port, body)
    _dscp_map(em, port, body)
    _headroom(em, port, body)


def parse_pfc_profile(em: nvue.Emitter, body: Any) -> None:
    """``qos/pfc/default-global`` -> ``pfc_xoff_threshold_bytes`` (see the module docstring).
    Exact bytes only (``10000``, ``"10000 B"``); a humanised or missing threshold, or a priority
    list that cannot be read, leaves the threshold unknown."""
    if not isinstance(body, dict):
        return
    prios = _listed(em, "PFC profile switch-priority", nvue.get_path(body, "switch-priority"), "priority", keyed=True)
    xoff = nvue.get_path(body, "xoff-threshold")
    if prios is None:
        return
    ports = sorted({g.port for g in em.result.gauges if g.name == "pfc_enabled"})
    for port in ports:
        for p in sorted(prios):
            em.gauge(port, "pfc_xoff_threshold_bytes", xoff, (p,), "PFC profile xoff-threshold")


def parse_watchdog_state(em: nvue.Emitter, port: str, body: Any) -> None:
    """``qos/pfc-watchdog`` ``state`` -> ``pfc_watchdog_enabled`` per priority; absent or
    unreadable: nothing (unknown)."""
    state = yes_no(nvue.get_path(body, "state")) if isinstance(body, dict) else None
    if state is None:
        return
    for p in PRIORITIES:
        em.gauge(port, "pfc_watchdog_enabled", 1.0 if state else 0.0, (p,))
