"""Trim a public snmprec recording to the subtrees fabricmon reads, lines kept byte for byte.

Usage: ``python -m tools.trim_snmprec SRC DEST``. Kept: the system group, ifTable,
ifXTable, BRIDGE-MIB dot1dBasePortIfIndex, the LLDP-MIB local-port and remote tables, and
every column of every shipped SNMP profile. Everything else in a LibreNMS recording (sensors,
routing tables, ...) is not walked by a poll, so dropping it changes nothing a poll sees.
"""

from __future__ import annotations

import sys
from pathlib import Path

from fabricmon.collectors.snmp import profiles
from fabricmon.collectors.snmp.snmprec import Oid

KEEP: tuple[Oid, ...] = (
    (1, 3, 6, 1, 2, 1, 1),  # system
    (1, 3, 6, 1, 2, 1, 2, 2, 1),  # ifTable
    (1, 3, 6, 1, 2, 1, 31, 1, 1, 1),  # ifXTable
    (1, 3, 6, 1, 2, 1, 17, 1, 4, 1, 2),  # dot1dBasePortIfIndex
    (1, 0, 8802, 1, 1, 2, 1, 3, 7),  # lldpLocPortTable
    (1, 0, 8802, 1, 1, 2, 1, 4, 1),  # lldpRemTable
)


def roots() -> tuple[Oid, ...]:
    shipped = profiles.load_profiles()
    return KEEP + tuple(oid for p in shipped.values() for oid in p.walk_oids())


def keep(line: bytes, prefixes: tuple[Oid, ...]) -> bool:
    head = line.split(b"|", 1)[0].strip().lstrip(b".")
    try:
        oid = tuple(int(c) for c in head.split(b"."))
    except ValueError:
        return False
    return any(oid[: len(p)] == p for p in prefixes)


def trim(src: Path, dest: Path) -> None:
    prefixes = roots()
    lines = src.read_bytes().splitlines(keepends=True)
    dest.write_bytes(b"".join(line for line in lines if keep(line, prefixes)))


if __name__ == "__main__":
    trim(Path(sys.argv[1]), Path(sys.argv[2]))
