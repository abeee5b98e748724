"""Stable finding ids and the page URL built from them: one place for both.

The same finding has the same id across renders and restarts (:func:`finding_id`); its page is
``<external URL>/findings/<id>`` (:func:`finding_url`). ``/api/findings``, the findings file of
``fabricmon replay --findings-out``, the ``id`` and ``url`` labels of
``fabricmon_finding_active`` (hence the alert annotations) and the job view all take them from
here.
"""

from __future__ import annotations

import hashlib
import socket
from functools import lru_cache
from typing import Any

from fabricmon.core.model import Finding


@lru_cache(maxsize=65536)
def _hash(key: tuple[Any, ...], start: float) -> str:
    ident = "\0".join(str(x) for x in (*key, repr(float(start))))
    return hashlib.sha256(ident.encode("utf-8", "replace")).hexdigest()[:12]


def finding_id(f: Finding) -> str:
    """12 hex digits of SHA-256 over kind, device, port, priority, role (a misconfig's check) and start.

    These fields are the finding's identity (``Finding.key`` plus its start), none of which
    change while it is active, and the state file keeps them across restarts. (Cached: the
    exposition, ``/api/findings`` and the pages ask for the ids of every active finding per pass.)
    """
    return _hash(f.key, f.start)


def finding_path(f: Finding) -> str:
    return f"/findings/{finding_id(f)}"


def finding_url(f: Finding, base: str = "") -> str:
    """The finding page's URL under ``base`` (the agent's external URL, :func:`external_url`);
    without one, the path on the agent (``/findings/<id>``)."""
    return base.rstrip("/") + finding_path(f)


def finding_json(f: Finding, base: str = "") -> dict[str, Any]:
    """The finding as ``/api/findings`` and the findings file write it: the shared format's
    fields exactly (:meth:`Finding.to_json`), then fabricmon's ``id`` and ``url``."""
    return {**f.to_json(), "id": finding_id(f), "url": finding_url(f, base)}


def external_url(configured: str | None, listen: str | None, tls: bool = False) -> str:
    """The URL under which people reach this agent, like Prometheus' ``--web.external-url``:
    ``web.external_url`` when set (a reverse proxy's address), else derived from the listen
    address (its host, or this machine's name when it listens on every address) and the
    scheme; "" when the agent serves nothing (a replay without ``--serve``: URLs stay paths)."""
    if configured:
        return configured.rstrip("/")
    if not listen:
        return ""
    host, _, port = listen.rpartition(":")
    host = host.strip("[]")
    if host in ("", "0.0.0.0", "::"):
        host = socket.gethostname()
    if ":" in host:
        host = f"[{host}]"
    return f"{'https' if tls else 'http'}://{host}:{port}"
