"""``nvue``: Cumulus Linux 5.x NVUE REST — RoCE/QoS counters, PFC watchdog, link stats, WJH drops."""

from __future__ import annotations

import re
from typing import Any

from pydantic import Field, field_validator, model_validator

from fabricmon.collectors.base import SourceOptions
from fabricmon.collectors.http_util import RestCollector, RestOptions
from fabricmon.collectors.nvue.fetch import fetch_poll
from fabricmon.collectors.nvue.parse import DEFAULT_PATHS, NvueParseOptions, NvueState, parse_payload
from fabricmon.core.model import ParseResult, TargetSpec

PER_INTERFACE = ("link_stats_path", "qos_counters_path", "roce_counters_path", "pfc_watchdog_path", "roce_status_path",
                 "lldp_path")
GLOBAL_PATHS = ("wjh_path", "pfc_profile_path")  # one call per poll, not per interface


class NvueOptions(RestOptions):
    username: str  # required: NVUE takes basic auth only
    port: int = 8765
    # Interfaces to poll; when unset, `GET interface` each poll, filtered by interface_regex.
    interfaces: list[str] | None = None
    interface_regex: str = r"^swp\d"
    rev: str | None = "operational"
    # Path templates under /nvue_v1/ ({if} = interface name); "" or null disables a call.
    qos_counters_path: str | None = DEFAULT_PATHS["qos_counters_path"]
    roce_counters_path: str | None = DEFAULT_PATHS["roce_counters_path"]
    pfc_watchdog_path: str | None = DEFAULT_PATHS["pfc_watchdog_path"]
    roce_status_path: str | None = DEFAULT_PATHS["roce_status_path"]  # lossless configuration (roce_config.py)
    lldp_path: str | None = DEFAULT_PATHS["lldp_path"]  # cabling (lldp.py)
    link_stats_path: str | None = DEFAULT_PATHS["link_stats_path"]
    wjh_path: str | None = DEFAULT_PATHS["wjh_path"]
    pfc_profile_path: str | None = DEFAULT_PATHS["pfc_profile_path"]  # PFC XOFF threshold (roce_config.py)
    # Which priority / traffic classes the RoCE counters view describes (Cumulus RoCE defaults).
    roce_priority: int = 3
    roce_tc: int = 3
    cnp_tc: int = 6
    concurrency: int = 8
    max_body_bytes: int = 16 * 1024 * 1024
    # Interfaces polled at most: a Spectrum-4 switch has 64 ports, 256 swp interfaces fully broken
    # out; each costs one call per path and poll, so a listing of thousands is refused, not polled.
    max_interfaces: int = Field(1024, ge=1, le=65536)

    @field_validator("interface_regex")
    @classmethod
    def _regex(cls, v: str) -> str:
        try:
            re.compile(v)
        except re.error as exc:
            raise ValueError(f"interface_regex is not a valid regular expression: {exc}") from None
        return v

    @model_validator(mode="after")
    def _check(self) -> NvueOptions:
        if not (self.password or self.password_file or self.password_env):
            raise ValueError("nvue needs password_file, password_env or password")
        if not 0 <= self.roce_priority <= 7:
            raise ValueError("roce_priority must be 0..7")
        for name in ("roce_tc", "cnp_tc"):
            if not 0 <= getattr(self, name) <= 15:
                raise ValueError(f"{name} must be 0..15")
        for name in PER_INTERFACE:
            value = getattr(self, name)
            if value and "{if}" not in value:
                raise ValueError(f"{name} must contain {{if}} (the interface name), got {value!r}")
        if self.concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        return self


class NvueCollector(RestCollector):
    source = "nvue"
    options_model = NvueOptions
    parse_options_model = NvueParseOptions
    default_port = NvueOptions.model_fields["port"].default

    def __init__(self, name: str, address: str, options: NvueOptions) -> None:  # type: ignore[override]
        super().__init__(name, address, options)
        self.options: NvueOptions = options
        self._pattern = re.compile(options.interface_regex)

    @classmethod
    def target_spec(cls, name: str, options: SourceOptions) -> TargetSpec:
        """Disabled paths are recorded as "" so a replay does not fall back to the defaults."""
        spec = super().target_spec(name, options)
        dumped = options.model_dump(mode="json")
        for key in (*PER_INTERFACE, *GLOBAL_PATHS):
            if not dumped.get(key):
                spec.options[key] = ""
        return spec

    async def fetch(self) -> dict[str, Any]:
        o = self.options
        client = await self.client()
        per_if = [t for t in (getattr(o, k) for k in PER_INTERFACE) if t]
        return await fetch_poll(
            client, interfaces=o.interfaces, interface_pattern=self._pattern, per_interface=per_if,
            global_paths=[t for t in (o.wjh_path, o.pfc_profile_path) if t], rev=o.rev, concurrency=o.concurrency,
            max_interfaces=o.max_interfaces,
        )

    @classmethod
    def new_state(cls) -> NvueState:
        return NvueState()

    @classmethod
    def parse(cls, payload: dict[str, Any], spec: TargetSpec, state: NvueState) -> tuple[ParseResult, NvueState]:
        return parse_payload(payload, spec, state)

