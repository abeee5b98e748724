"""Stable finding ids for URLs: the same finding has the same id across renders and restarts."""

from __future__ import annotations

import hashlib

from fabricmon.core.model import Finding


def finding_id(f: Finding) -> str:
    """12 hex digits of SHA-256 over kind, device, port, priority, role (a misconfig's check) and start.

    These fields are the finding's identity (``Finding.key`` plus its start), none of which
    change while it is active, and the state file keeps them across restarts.
    """
    ident = "\0".join(str(x) for x in (*f.key, repr(float(f.start))))
    return hashlib.sha256(ident.encode("utf-8", "replace")).hexdigest()[:12]
