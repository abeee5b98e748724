"""UFM REST I/O: the calls of one poll, returned as recorded RESPONSE objects."""

from __future__ import annotations

from typing import Any

from fabricmon.collectors.http_util import HttpClient, HttpResponse, run_all

# One huge page, as NVIDIA's own client does (Mellanox/ufm_sdk_3.0 requests
# page_number=1&rpp=1000000000): it works around a paging bug of resources/links.
PORTS_PATH = "resources/ports"
LINKS_PATH = "resources/links?page_number=1&rpp=1000000000"
SYSTEMS_PATH = "resources/systems"


def prefix_for(auth: str) -> str:
    """``/ufmRest`` takes basic auth; ``/ufmRestV3`` takes the access token."""
    return "/ufmRestV3" if auth == "token" else "/ufmRest"


async def gather_calls(client: HttpClient, paths: list[str], optional: str | None) -> list[HttpResponse]:
    """GET every path concurrently (the first failure fails the poll).

    ``optional`` (the counters path) may answer with an HTTP error without failing the
    poll: its response is recorded and the parser reports it as a warning.
    """
    calls = [client.get(p, want_json=True) for p in paths]
    if optional:
        calls.append(client.get(optional, ok_statuses=range(200, 600)))
    return await run_all(calls)


def payload_of(responses: list[HttpResponse]) -> dict[str, Any]:
    return {"responses": [r.record() for r in responses]}
