"""The ``snmp`` source: Ethernet/RoCE switches over SNMP v2c or v3 (see README.md)."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any, ClassVar, Literal

from pydantic import Field, model_validator

from fabricmon.collectors.base import Collector, ParseOptions, SourceOptions, resolve_secret
from fabricmon.collectors.snmp import fetch as snmp_fetch
from fabricmon.collectors.snmp import parse as snmp_parse
from fabricmon.collectors.snmp import profiles as snmp_profiles
from fabricmon.core.durations import Duration
from fabricmon.core.model import ParseResult, TargetSpec


class SnmpOptions(SourceOptions):
    port: int = Field(161, ge=1, le=65535)
    version: Literal["2c", "3"] = "2c"
    community: str | None = None  # inline secrets are discouraged: prefer _file or _env
    community_file: str | None = None
    community_env: str | None = None
    user: str | None = None
    auth_protocol: Literal["none", "md5", "sha", "sha224", "sha256", "sha384", "sha512"] = "sha"
    auth_key: str | None = None
    auth_key_file: str | None = None
    auth_key_env: str | None = None
    priv_protocol: Literal["none", "des", "3des", "aes", "aes128", "aes192", "aes256"] = "aes"
    priv_key: str | None = None
    priv_key_file: str | None = None
    priv_key_env: str | None = None
    context: str = ""  # SNMPv3 context name
    profile: str | None = None  # vendor profile name; default: chosen by sysObjectID/sysDescr
    profile_dirs: list[str] = Field(default_factory=list)
    max_repetitions: int = Field(25, ge=1, le=500)
    retries: int = Field(1, ge=0, le=10)
    snmp_timeout: Duration = Field(2.0, gt=0, le=60)  # per request, before a retry
    # Transport (fetch.BACKENDS); not a parse option: both write the same payload. Unset: gufo,
    # or pysnmp for what only pysnmp does (3DES privacy, a v3 context name).
    backend: Literal["gufo", "pysnmp"] | None = None

    @model_validator(mode="after")
    def _check(self) -> SnmpOptions:
        if self.version == "2c" and not (self.community or self.community_file or self.community_env):
            raise ValueError("SNMP v2c needs community, community_file or community_env")
        if self.version == "3":
            if not self.user:
                raise ValueError("SNMP v3 needs user")
            has_auth = bool(self.auth_key or self.auth_key_file or self.auth_key_env)
            has_priv = bool(self.priv_key or self.priv_key_file or self.priv_key_env)
            if self.auth_protocol != "none" and not has_auth:
                raise ValueError(f"SNMP v3 auth_protocol {self.auth_protocol} needs auth_key, auth_key_file or auth_key_env")
            if self.priv_protocol != "none" and not has_priv:
                raise ValueError(f"SNMP v3 priv_protocol {self.priv_protocol} needs priv_key, priv_key_file or priv_key_env")
            if self.priv_protocol != "none" and self.auth_protocol == "none":
                raise ValueError("SNMP v3 privacy needs authentication (auth_protocol)")
            if self.backend == "gufo" and self.priv_protocol in snmp_fetch.PYSNMP_ONLY_PRIV:
                raise ValueError(f"backend gufo (gufo-snmp) has no priv_protocol {self.priv_protocol}: use backend: pysnmp")
            if self.backend == "gufo" and self.context:
                raise ValueError("backend gufo (gufo-snmp) cannot send an SNMPv3 context name: use backend: pysnmp")
        try:
            known = snmp_profiles.load_profiles(tuple(self.profile_dirs))
        except snmp_profiles.ProfileError as exc:
            raise ValueError(str(exc)) from None
        if self.profile and self.profile not in known:
            raise ValueError(f"unknown profile {self.profile!r}; known: {', '.join(sorted(known))}")
        return self


class SnmpCollector(Collector):
    source: ClassVar[str] = "snmp"
    options_model: ClassVar[type[SourceOptions]] = SnmpOptions
    parse_options_model: ClassVar[type[ParseOptions]] = snmp_parse.SnmpParseOptions
    default_port = SnmpOptions.model_fields["port"].default

    options: SnmpOptions

    def _credentials(self) -> snmp_fetch.Credentials:
        o = self.options
        if o.version == "2c":
            community = resolve_secret("community", o.community, o.community_file, o.community_env)
            return snmp_fetch.Credentials("2c", community=community or "")
        return snmp_fetch.Credentials(
            "3", user=o.user or "", context=o.context,
            auth_protocol=o.auth_protocol, priv_protocol=o.priv_protocol,
            auth_key=resolve_secret("auth_key", o.auth_key, o.auth_key_file, o.auth_key_env),
            priv_key=resolve_secret("priv_key", o.priv_key, o.priv_key_file, o.priv_key_env))

    def _backend(self) -> snmp_fetch.Backend:
        o = self.options
        if o.backend:
            return o.backend
        v3_only_pysnmp = o.version == "3" and (o.priv_protocol in snmp_fetch.PYSNMP_ONLY_PRIV or o.context)
        return "pysnmp" if v3_only_pysnmp else "gufo"

    def _plan(self, rows: list[snmp_fetch.Row]) -> list[snmp_fetch.Oid]:
        """Subtrees to walk: structure + IF-MIB + the profile the device's sysObjectID/sysDescr picks."""
        profiles = snmp_profiles.load_profiles(tuple(self.options.profile_dirs))
        table = {oid: value for oid, _tag, value in rows}
        sys_oid_text = table.get(snmp_parse.SYS_OBJECT_ID)
        sys_oid = tuple(int(c) for c in sys_oid_text.split(".")) if isinstance(sys_oid_text, str) else None
        descr = snmp_parse.text(table.get(snmp_parse.SYS_DESCR))
        vendor = snmp_profiles.select_profile(profiles, sys_oid, descr, self.options.profile).profile
        roots = [*snmp_parse.STRUCTURE_WALKS, *profiles[snmp_profiles.BASE_PROFILE].walk_oids(), *vendor.walk_oids()]
        return list(dict.fromkeys(roots))

    async def prepare(self) -> None:
        await snmp_fetch.prepare(self._backend())
        with contextlib.suppress(snmp_profiles.ProfileError):  # a bad profile is the first poll's error, as before
            await asyncio.to_thread(snmp_profiles.load_profiles, tuple(self.options.profile_dirs))  # files: not on the loop

    async def fetch(self) -> dict[str, Any]:
        o = self.options
        uses_files = o.community_file or o.auth_key_file or o.priv_key_file
        credentials = await asyncio.to_thread(self._credentials) if uses_files else self._credentials()  # a file: not on the loop
        session = snmp_fetch.Session(host=self.address, port=o.port, credentials=credentials,
                                     timeout=o.snmp_timeout, retries=o.retries, max_repetitions=o.max_repetitions,
                                     backend=self._backend())
        text = await snmp_fetch.poll(session, snmp_parse.SCALARS, self._plan)
        return {"snmprec": text}

    @classmethod
    def reset_caches(cls) -> None:
        snmp_profiles.load_profiles.cache_clear()  # user profile files may have changed

    @classmethod
    def new_state(cls) -> snmp_parse.SnmpState:
        return snmp_parse.SnmpState()

    @classmethod
    def parse(cls, payload: dict[str, Any], spec: TargetSpec, state: snmp_parse.SnmpState) -> tuple[ParseResult, snmp_parse.SnmpState]:
        return snmp_parse.parse_payload(payload, spec, state)


__all__ = ["SnmpCollector", "SnmpOptions"]
