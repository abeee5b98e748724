"""NVUE LLDP neighbours -> cabling (``links``), so the checklist knows both ends of a Cumulus port.

``nv show interface <if> lldp neighbor`` (NVIDIA NVUE command reference, "LLDP", Cumulus Linux
5.1+: columns Neighbor, Remote IP, Model, SW Version, Remote Port; verified CLI sample) is read as
``GET /nvue_v1/interface/<if>/lldp/neighbor``. Its JSON form is **inferred** (no published
sample): an object keyed by the neighbour's name, each entry carrying the remote port as
``remote-port``, or as ``port.name`` / ``port.description`` (the lldpd field names NVUE wraps),
and optionally ``chassis.system-name``. An entry without a readable remote port is skipped.
"""

from __future__ import annotations

from typing import Any

from fabricmon.collectors.nvue import parse as nvue
from fabricmon.core.model import Link


def _text(value: Any) -> str:
    return value.strip() if isinstance(value, str) else ""


def parse_lldp_neighbors(em: nvue.Emitter, port: str, body: Any, opts: nvue.NvueParseOptions) -> None:
    """One interface's neighbours -> ``em.result.links`` (a list, so the topology learns that this
    poll carried cabling, even when empty)."""
    links = em.result.links if em.result.links is not None else []
    em.result.links = links
    if not isinstance(body, dict):
        return
    for key, entry in sorted(body.items(), key=lambda kv: str(kv[0])):
        if not isinstance(entry, dict):
            continue
        peer = _text(nvue.get_path(entry, "chassis", "system-name")) or _text(key)
        peer_port = (_text(nvue.get_path(entry, "remote-port")) or _text(nvue.get_path(entry, "port", "name"))
                     or _text(nvue.get_path(entry, "port", "description")))
        if peer and peer_port:
            links.append(Link(device=em.device, port=port, peer_device=peer, peer_port=peer_port))
