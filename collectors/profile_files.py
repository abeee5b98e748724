"""Vendor profiles kept as YAML files, for the sources that keep vendor knowledge as data
(SNMP table columns in collectors/snmp/profiles/, gNMI paths in collectors/gnmi/profiles/):
the shipped folder, then the user's ``profile_dirs`` in order, a later file of the same name
replacing an earlier one. What a profile says is each source's own schema (``build``)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, Protocol, TypeVar

import yaml

from fabricmon.core.files import FileRefused, read_regular

MAX_PROFILE_BYTES = 1 << 20  # a vendor profile is a few KB of YAML


class _Named(Protocol):
    name: str


P = TypeVar("P", bound=_Named)


def load_dirs(shipped: Path, extra_dirs: Iterable[str], build: Callable[[Any, str, str], P],
              error: type[ValueError]) -> dict[str, P]:
    """``name -> profile`` of every ``*.yaml`` in ``shipped`` and then in each of ``extra_dirs``;
    ``build(document, file stem, path)`` reads one file. A file that cannot be read, or a folder
    that does not exist, raises ``error`` naming it."""
    profiles: dict[str, P] = {}
    for i, directory in enumerate([shipped, *(Path(d) for d in extra_dirs)]):
        if i and not directory.is_dir():
            raise error(f"profile directory {directory} does not exist")
        for path in sorted(directory.glob("*.yaml")):
            try:  # opened without blocking, a regular file of bounded size (a FIFO is refused at once)
                doc = yaml.safe_load(read_regular(path, MAX_PROFILE_BYTES, "profile").decode("utf-8"))
            except (FileRefused, UnicodeDecodeError, yaml.YAMLError) as exc:
                raise error(f"{path}: cannot read: {exc}") from None
            prof = build(doc, path.stem, str(path))
            profiles[prof.name] = prof
    return profiles
