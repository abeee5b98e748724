"""The ``gnmi`` source: gNMI dial-in Subscribe streams from SONiC, Cumulus/NVUE, Arista EOS and
OpenConfig switches, cut into polls (see README.md)."""

from __future__ import annotations

import asyncio
from typing import Any, ClassVar, Literal

from pydantic import Field, model_validator

from fabricmon.collectors.base import AddressKind, Collector, ParseOptions, SourceOptions, resolve_secret
from fabricmon.collectors.gnmi import parse as gnmi_parse
from fabricmon.collectors.gnmi import profiles as gnmi_profiles
from fabricmon.collectors.http_util import TLS_FILES, TlsPasswordOptions, read_pem
from fabricmon.core.durations import bounded
from fabricmon.core.model import ParseResult, TargetSpec

# A sample interval of more than a day is not streaming telemetry; gNMI counts it in ns (uint64).
SampleInterval = bounded(0.001, 86400.0, "a SAMPLE subscription between 1 ms and a day")
DEFAULT_PORT = 9339  # gNMI's IANA-registered port; SONiC's server commonly listens on 8080 or 50051


class GnmiOptions(TlsPasswordOptions):
    port: int | None = Field(None, ge=1, le=65535)  # default DEFAULT_PORT
    profile: str | None = None  # a profile name; default: chosen from Capabilities
    profile_dirs: list[str] = Field(default_factory=list)
    # Interfaces spelled out in subscriptions ({port}); unset: the wildcard "*". A device that
    # takes no wildcard keys (Cumulus) needs them.
    interfaces: list[str] | None = None
    # stream (default; falls back to poll, then get, when the device refuses), or force one.
    mode: Literal["stream", "poll", "get"] | None = None
    sample_interval: SampleInterval | None = None  # default: the poll interval
    max_notifications_per_poll: int = Field(200_000, ge=1)
    max_updates_per_poll: int = Field(4_000_000, ge=1)
    max_message_bytes: int = Field(64 << 20, ge=4096, le=1 << 30)

    @model_validator(mode="after")
    def _check(self) -> GnmiOptions:
        if self.username and not (self.password or self.password_file or self.password_env):
            raise ValueError("gnmi username needs password_file, password_env or password")
        try:
            known = gnmi_profiles.load_profiles(tuple(self.profile_dirs))
        except gnmi_profiles.ProfileError as exc:
            raise ValueError(str(exc)) from None
        if self.profile and self.profile not in known:
            raise ValueError(f"unknown profile {self.profile!r}; known: {', '.join(sorted(known))}")
        return self


class GnmiCollector(Collector):
    source: ClassVar[str] = "gnmi"
    options_model: ClassVar[type[SourceOptions]] = GnmiOptions
    parse_options_model: ClassVar[type[ParseOptions]] = gnmi_parse.GnmiParseOptions
    address_kind: ClassVar[AddressKind] = AddressKind.REMOTE
    default_port: ClassVar[int | None] = DEFAULT_PORT
    files = TLS_FILES  # gNMI always runs over TLS here

    options: GnmiOptions

    def __init__(self, name: str, address: str, options: GnmiOptions) -> None:  # type: ignore[override]
        super().__init__(name, address, options)
        self._client: Any = None
        self._metadata: list[tuple[str, str]] = []  # username/password call metadata of the current poll
        self.poll_interval = 10.0  # the scheduler sets the target's own (set_schedule)
        self.poll_timeout = 8.0

    def set_schedule(self, interval: float, timeout: float) -> None:
        """The target's poll interval (the SAMPLE interval, unless ``sample_interval`` is set) and timeout."""
        self.poll_interval, self.poll_timeout = interval, timeout

    def _endpoint(self) -> tuple[str, int]:
        host = self.address.strip()
        return host, self.options.port or DEFAULT_PORT

    async def _tls(self) -> Any:
        from fabricmon.collectors.gnmi import fetch as gnmi_fetch

        o = self.options
        # Each file opened without blocking, bounded, and read in a thread (a FIFO must not hang the loop).
        key, chain = await asyncio.to_thread(read_pem, o.key_file, "key_file"), await asyncio.to_thread(read_pem, o.cert_file, "cert_file")
        if o.tls_insecure_skip_verify:
            host, port = self._endpoint()
            pem = await gnmi_fetch.fetch_server_certificate(host, port, self.poll_timeout)
            return gnmi_fetch.Tls(pem, key, chain, gnmi_fetch.server_name(pem))
        return gnmi_fetch.Tls(await asyncio.to_thread(read_pem, o.ca_file, "ca_file"), key, chain)

    def _auth(self) -> list[tuple[str, str]]:
        """gNMI's username/password call metadata (gNMI specification 3.1, Authentication), as
        read for this poll (:meth:`fetch`)."""
        return self._metadata

    def _read_auth(self) -> list[tuple[str, str]]:
        o = self.options
        if not o.username:
            return []
        password = resolve_secret("password", o.password, o.password_file, o.password_env) or ""
        return [("username", o.username), ("password", password)]

    def _plan(self, models: list[str], encodings: list[str]) -> Any:
        from fabricmon.collectors.gnmi import fetch as gnmi_fetch

        profiles = gnmi_profiles.load_profiles(tuple(self.options.profile_dirs))
        chosen, why = gnmi_profiles.select_profile(profiles, models, self.options.profile)
        encoding = chosen.encoding
        if encodings and encoding not in encodings:
            encoding = next((e for e in ("json_ietf", "json", "proto") if e in encodings), encoding)
        return gnmi_fetch.Plan(chosen.name, why, gnmi_fetch.ENCODING_CODES[encoding], gnmi_profiles.groups_of(profiles, chosen.name))

    def _make_client(self) -> Any:
        from fabricmon.collectors.gnmi import fetch as gnmi_fetch

        o = self.options
        host, port = self._endpoint()
        endpoint = f"[{host}]:{port}" if ":" in host and not host.startswith("[") else f"{host}:{port}"
        return gnmi_fetch.StreamClient(
            name=self.name, endpoint=endpoint, tls=self._tls, auth=self._auth, plan=self._plan, interfaces=o.interfaces,
            interval=o.sample_interval or self.poll_interval, mode=o.mode, max_notifications=o.max_notifications_per_poll,
            max_updates=o.max_updates_per_poll, max_message_bytes=o.max_message_bytes)

    async def fetch(self) -> dict[str, Any]:
        # The password is read once a poll (a rotated file is picked up), in a thread: a file read never runs on the loop.
        self._metadata = await asyncio.to_thread(self._read_auth) if self.options.password_file else self._read_auth()
        if self._client is None:
            self._client = self._make_client()
        budget = max(0.1, self.poll_timeout * 0.9)  # our own, named error before the scheduler's timeout
        return {"notifications": await self._client.poll_once(budget)}

    async def close(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            await client.close()

    @classmethod
    def reset_caches(cls) -> None:
        gnmi_profiles.load_profiles.cache_clear()  # user profile files may have changed
        gnmi_profiles.rules.cache_clear()

    @classmethod
    def new_state(cls) -> gnmi_parse.GnmiState:
        return gnmi_parse.GnmiState()

    @classmethod
    def parse(cls, payload: dict[str, Any], spec: TargetSpec, state: gnmi_parse.GnmiState) -> tuple[ParseResult, gnmi_parse.GnmiState]:
        return gnmi_parse.parse_payload(payload, spec, state)


__all__ = ["GnmiCollector", "GnmiOptions"]
