"""I/O for the NVUE collector: the REST calls of one poll, through fabricmon.collectors.http_util.

Per-interface calls may answer 404 (an interface that vanished, a feature this release or
platform lacks): that response is recorded and the parser skips that interface with a
warning. Any other failure (auth, TLS, 5xx, timeout) fails the poll.
"""

from __future__ import annotations

import asyncio
import re
from typing import Any
from urllib.parse import quote

from fabricmon.collectors.base import ErrorReason, FetchError
from fabricmon.collectors.http_util import HttpClient, HttpResponse, run_all
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


def interfaces_from(resp: HttpResponse, pattern: re.Pattern[str]) -> list[str]:
    """Interface names of a ``GET interface`` answer (a JSON object keyed by name) matching ``pattern``."""
    if resp.status != 200 or not isinstance(resp.body, dict):
        raise FetchError(f"GET {resp.path}: expected a JSON object of interfaces, got HTTP {resp.status} {type(resp.body).__name__}",
                         ErrorReason.PROTOCOL)
    return sorted((n for n in resp.body if isinstance(n, str) and pattern.search(n)), key=_natural)


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
) -> dict[str, Any]:
    """One poll: the interface list (unless configured), then every per-interface and global call."""
    records: list[HttpResponse] = []
    if interfaces is None:
        listing = await client.get(api_path(INTERFACES_PATH, rev), want_json=True)
        records.append(listing)
        interfaces = interfaces_from(listing, interface_pattern)
    sem = asyncio.Semaphore(max(1, concurrency))

    async def limited(path: str) -> HttpResponse:
        async with sem:
            return await get_tolerating_404(client, path)

    paths = [api_path(t.replace("{if}", quote(name, safe="")), rev) for name in interfaces for t in per_interface]
    paths += [api_path(t, rev) for t in global_paths]
    records += await run_all([limited(p) for p in paths])
    return {"responses": [r.record() for r in records]}
