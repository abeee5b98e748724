"""Names of fabric nodes that no counter source gives: the config's ``names:`` map files.

Two file formats, told apart by their first meaningful line:

* **node-name-map** (infiniband-diags ``--node-name-map``, OpenSM's ``ib-node-name-map``):
  one node per line, ``<GUID> "<name>"``; ``#`` starts a comment. The GUID may carry the
  ``0x`` of OpenSM's files or the ``H-``/``S-`` prefix of ibnetdiscover's node ids (both
  verified: infiniband-diags' ``ibnetdiscover(8)`` and the real map of
  ``../shared/fixtures/public/ib/ltaulell__HPC_toolset/infiniband__X5.map``, whose names are
  not quoted).
* **YAML**: a mapping from a device name or GUID to a name, or to ``{name:, pod:, rail:,
  plane:}`` where the layout is known but not visible in the cabling (a rail-optimised design
  whose rails share spines; pods named by the site).

Keys match a device by its GUID (any spelling :func:`~fabricmon.core.guid.norm_guid` reads)
or by its exact device name.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from fabricmon.core.guid import norm_guid

MAX_BYTES = 64 * 1024 * 1024  # a name map of a million nodes is about 40 MB
_LINE = re.compile(r'^\s*(?:[HSR]-)?((?:0x)?[0-9A-Fa-f]{1,16})\s+(?:"([^"]*)"|(\S.*?))\s*$')
PLACES = ("pod", "rail", "plane")


@dataclass(frozen=True, slots=True)
class NodeName:
    name: str = ""
    pod: str = ""
    rail: str = ""
    plane: str = ""


@dataclass(slots=True)
class Names:
    """The merged maps: by GUID and by device name (later files win)."""

    by_guid: dict[str, NodeName] = field(default_factory=dict)
    by_device: dict[str, NodeName] = field(default_factory=dict)

    def get(self, device: str, guid: str = "") -> NodeName | None:
        hit = self.by_device.get(device)
        if hit is None and guid:
            hit = self.by_guid.get(norm_guid(guid))
        return hit

    def __len__(self) -> int:
        return len(self.by_guid) + len(self.by_device)

    def add(self, key: str, node: NodeName) -> None:
        guid = norm_guid(key)
        if guid:
            self.by_guid[guid] = node
        else:
            self.by_device[key] = node


def parse(text: str, where: str = "<names>") -> Names:
    """One map file's text; ValueError naming the file and line on anything unreadable."""
    out = Names()
    meaningful = [(i, ln) for i, ln in enumerate(text.splitlines(), 1) if ln.strip() and not ln.lstrip().startswith("#")]
    if not meaningful:
        return out
    if _LINE.match(meaningful[0][1]) and ":" not in meaningful[0][1].split("#")[0]:
        for i, ln in meaningful:
            m = _LINE.match(ln if '"' in ln else ln.split("#", 1)[0])
            if m is None:
                raise ValueError(f"{where}:{i}: expected a node-name-map line like 0x0002c90300080d28 \"node1\", got {ln[:80]!r}")
            out.add(m.group(1), NodeName(name=m.group(2) if m.group(2) is not None else m.group(3)))
        return out
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ValueError(f"{where}: neither a node-name-map nor YAML: {exc}") from None
    if not isinstance(data, dict):
        raise ValueError(f"{where}: a YAML names file is a mapping of device name or GUID to a name or {{name, pod, rail, plane}}")
    for key, v in data.items():
        out.add(str(key), _entry(v, f"{where}: {key}"))
    return out


def _entry(v: Any, where: str) -> NodeName:
    if isinstance(v, str):
        return NodeName(name=v)
    if not isinstance(v, dict) or not set(v) <= {"name", *PLACES}:
        raise ValueError(f"{where}: expected a name or a mapping with name, pod, rail, plane")
    return NodeName(**{k: str(x) for k, x in v.items() if x is not None})


def load(paths: list[str], inline: dict[str, Any] | None = None) -> Names:
    """The ``names:`` section: its files in order, then its inline ``map`` (which wins)."""
    out = Names()
    for path in paths:
        p = Path(path)
        try:
            with p.open("rb") as fh:
                raw = fh.read(MAX_BYTES + 1)
        except OSError as exc:
            raise ValueError(f"names file {path}: {exc.strerror or exc}") from None
        if len(raw) > MAX_BYTES:
            raise ValueError(f"names file {path}: larger than {MAX_BYTES // (1024 * 1024)} MB")
        part = parse(raw.decode("utf-8", "replace"), path)
        out.by_guid.update(part.by_guid)
        out.by_device.update(part.by_device)
    for key, v in (inline or {}).items():
        out.add(str(key), _entry(v, f"names.map: {key}"))
    return out
