"""UFM Telemetry endpoint I/O: one GET per shard, recorded as RESPONSE objects."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from fabricmon.collectors.http_util import HttpClient, run_all


def shard_paths(path: str, num_shards: int, shard: int | None, sharding_field: str) -> list[str]:
    """The request paths of one poll: one per shard (all shards, or only ``shard``)."""
    if num_shards <= 1:
        return [path]
    sep = "&" if "?" in path else "?"
    wanted = range(num_shards) if shard is None else [shard]
    return [f"{path}{sep}{urlencode({'num_shards': num_shards, 'shard': s, 'sharding_field': sharding_field})}" for s in wanted]


async def fetch_all(client: HttpClient, paths: list[str]) -> dict[str, Any]:
    """GET every shard concurrently (the endpoint's sharding exists for that); one failure fails the poll.

    The endpoint serves only its last sample, so a partial poll would mix nothing useful:
    a shard that fails (including a body shorter than its Content-Length: reason ``size``)
    fails the whole poll with that shard's error.
    """
    return {"responses": [r.record() for r in await run_all([client.get(p) for p in paths])]}
