"""I/O for the NVUE collector: the REST calls of one poll, through fabricmon.collectors.http_util.

Per-interface calls may answer 404 (an interface that vanished, a feature this release or
platform lacks): that response is recorded and the parser skips that interface with a
warning. Any other failure (auth, TLS, 5xx, timeout) fails the poll.

A poll makes one call per interface and path, so the interfaces are bounded
(``max_interfaces``): a listing with more is refused (reason ``size``) before any call is
made (30,000 interfaces froze the loop 79 s, 100,000 ran for 12 minutes). The calls go through
:func:`fabricmon.collectors.fanout.for_each` (``concurrency`` workers, no task per call).
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import quote

from fabricmon.collectors.base import ErrorReason, FetchError
from fabricmon.collectors.fanout import for_each
from fabricmon.collectors.http_util import HttpClient, HttpResponse
from fabricmon.collectors.nvue.parse import API_PREFIX, INTERFACES_PATH

# 401/403 are still turned into FetchError("auth") by HttpClient before this range is consulted.
_ACCEPT = range(200, 405)


def api_path(relative: str, rev: str | None) -> str:
    path = API_PREFIX + relative.strip("/")
    return f"{path}?rev={quote(rev, safe='')}" if rev else path


async def get_tolerating_404(client: HttpClient, path: str) -> HttpResponse:
    """GET that returns a 404 as a response (recorded, skipped by the parser) instead of failing."""
    resp = await client.get(path, ok_statuses=_ACCEPT)
    if resp.status == 404 or 200 <= resp.status < 300:
        return resp
    raise FetchError(f"GET {path} failed with HTTP {resp.status}", ErrorReason.HTTP)


# A listing also holds interfaces the pattern leaves out (eth0, lo, bonds, VLANs): up to this many
# times max_interfaces of them are filtered; a longer listing is refused without looking further.
_LISTED_PER_POLLED = 16


def interfaces_from(resp: HttpResponse, pattern: re.Pattern[str], limit: int) -> list[str]:
    """Interface names of a ``GET interface`` answer (a JSON object keyed by name) matching
    ``pattern``, at most ``limit`` of them (else FetchError "size", before anything is sorted)."""
    if resp.status != 200 or not isinstance(resp.body, dict):
        raise FetchError(f"GET {resp.path}: expected a JSON object of interfaces, got HTTP {resp.status} {type(resp.body).__name__}",
                         ErrorReason.PROTOCOL)
    listed = len(resp.body)
    names = [n for n in resp.body if isinstance(n, str) and pattern.search(n)] if listed <= _LISTED_PER_POLLED * limit else None
    if names is None or len(names) > limit:
        what = f"{listed} interfaces" if names is None else f"{len(names)} interfaces match interface_regex"
        raise FetchError(f"GET {resp.path}: {what}, more than max_interfaces ({limit}); refused (narrow interface_regex "
                         "or list interfaces:)", ErrorReason.SIZE)
    return sorted(names, key=_natural)


def _natural(name: str) -> list[Any]:
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", name)]


async def fetch_poll(
    client: HttpClient,
    *,
    interfaces: list[str] | None,
    interface_pattern: re.Pattern[str],
    per_interface: list[str],
    global_paths: list[str],
    rev: str | None,
    concurrency: int,
    max_interfaces: int,
) -> dict[str, Any]:
    """One poll: the interface list (unless configured), then every per-interface and global call."""
    records: list[HttpResponse] = []
    if interfaces is None:
        listing = await client.get(api_path(INTERFACES_PATH, rev), want_json=True)
        records.append(listing)
        interfaces = interfaces_from(listing, interface_pattern, max_interfaces)
    paths = [api_path(t.replace("{if}", quote(name, safe="")), rev) for name in interfaces for t in per_interface]
    paths += [api_path(t, rev) for t in global_paths]
    got: list[HttpResponse | None] = [None] * len(paths)

    async def one(i: int, path: str) -> None:
        got[i] = await get_tolerating_404(client, path)

    await for_each(paths, one, concurrency)
    records += [r for r in got if r is not None]
    return {"responses": [r.record() for r in records]}
