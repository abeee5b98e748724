"""``ufm``: port state, topology and (optionally) counters from the UFM Enterprise REST API."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import model_validator

from fabricmon.collectors.http_util import RestCollector, TokenRestOptions
from fabricmon.collectors.ufm.fetch import LINKS_PATH, PORTS_PATH, SYSTEMS_PATH, gather_calls, payload_of, prefix_for
from fabricmon.collectors.ufm.parse import DeviceNaming, UfmParseOptions, parse_payload
from fabricmon.core.model import ParseResult, TargetSpec


class UfmOptions(TokenRestOptions):
    auth: Literal["basic", "token"] = "basic"
    # GET path (after the prefix) of a counters call; its JSON shape is not published (unverified), see README.
    pm_counters_path: str | None = None
    device_name: DeviceNaming = "node_description"

    @model_validator(mode="after")
    def _credentials(self) -> UfmOptions:
        if self.auth == "basic":
            if not self.username:
                raise ValueError("auth basic needs username")
            if not (self.password or self.password_file or self.password_env):
                raise ValueError("auth basic needs password_file, password_env or password")
        elif not (self.token or self.token_file or self.token_env):
            raise ValueError("auth token needs token_file, token_env or token")
        return self


class UfmCollector(RestCollector):
    source = "ufm"
    options_model = UfmOptions
    parse_options_model = UfmParseOptions
    default_port = 443  # https (RestOptions: no port given, the scheme's)
    token_scheme = "Basic"  # UFM /ufmRestV3: "Authorization: Basic <token>", not Bearer

    async def fetch(self) -> dict[str, Any]:
        o: UfmOptions = self.options  # type: ignore[assignment]
        client = await self.client()
        prefix = prefix_for(o.auth)
        paths = [f"{prefix}/{p}" for p in (PORTS_PATH, LINKS_PATH, SYSTEMS_PATH)]
        optional = f"{prefix}/{o.pm_counters_path.lstrip('/')}" if o.pm_counters_path else None
        return payload_of(await gather_calls(client, paths, optional))

    @classmethod
    def parse(cls, payload: dict[str, Any], spec: TargetSpec, state: None) -> tuple[ParseResult, None]:
        return parse_payload(payload, spec), None

