"""``ufm-telemetry``: IB port counters from a UFM Telemetry HTTP endpoint (CSV or Prometheus text)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import model_validator

from fabricmon.collectors.http_util import RestCollector, TokenRestOptions
from fabricmon.collectors.ufm_telemetry.fetch import fetch_all, shard_paths
from fabricmon.collectors.ufm_telemetry.parse import BodyFormat, UfmTelemetryParseOptions, parse_payload
from fabricmon.core.model import ParseResult, TargetSpec


class UfmTelemetryOptions(TokenRestOptions):
    scheme: Literal["https", "http"] = "http"
    port: int = 9001
    path: str = "/csv/cset/converted_enterprise"
    format: BodyFormat = "auto"
    num_shards: int = 1
    shard: int | None = None  # None: fetch every shard in each poll
    sharding_field: str = "port_guid"
    node_names: dict[str, str] | None = None  # node GUID -> device label, when rows carry no description
    auth: Literal["none", "basic", "token"] = "none"
    token_scheme: str = "Bearer"

    @model_validator(mode="after")
    def _check(self) -> UfmTelemetryOptions:
        if not self.path.startswith("/"):
            self.path = "/" + self.path
        if self.num_shards < 1:
            raise ValueError("num_shards must be >= 1")
        if self.shard is not None and not 0 <= self.shard < self.num_shards:
            raise ValueError(f"shard must be in 0..{self.num_shards - 1}")
        if self.auth == "basic" and not self.username:
            raise ValueError("auth basic needs username")
        return self


class UfmTelemetryCollector(RestCollector):
    source = "ufm-telemetry"
    options_model = UfmTelemetryOptions
    parse_options_model = UfmTelemetryParseOptions
    default_port = UfmTelemetryOptions.model_fields["port"].default
    self_sharding = True  # the endpoint serves one of num_shards shares (see docs/scaling.md)

    async def fetch(self) -> dict[str, Any]:
        o: UfmTelemetryOptions = self.options  # type: ignore[assignment]
        client = await self.client()
        return await fetch_all(client, shard_paths(o.path, o.num_shards, o.shard, o.sharding_field))

    @classmethod
    def parse(cls, payload: dict[str, Any], spec: TargetSpec, state: None) -> tuple[ParseResult, None]:
        return parse_payload(payload, spec), None

