"""The ``snmp`` source: Ethernet/RoCE switches over SNMP v2c or v3 (see README.md)."""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field, model_validator

from fabricmon.collectors.base import Collector, SourceOptions, resolve_secret
from fabricmon.collectors.snmp import fetch as snmp_fetch
from fabricmon.collectors.snmp import parse as snmp_parse
from fabricmon.collectors.snmp import profiles as snmp_profiles
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
    snmp_timeout: float = Field(2.0, gt=0, le=60)

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
    # profile_dirs too: a user profile is needed to read the payload again on replay.
    parse_options: ClassVar[tuple[str, ...]] = ("profile", "profile_dirs")

    options: SnmpOptions

    def _auth(self) -> Any:
        o = self.options
        hl = snmp_fetch.hl
        if o.version == "2c":
            community = resolve_secret("community", o.community, o.community_file, o.community_env)
            return hl.CommunityData(community or "", mpModel=1)
        auth_key = resolve_secret("auth_key", o.auth_key, o.auth_key_file, o.auth_key_env)
        priv_key = resolve_secret("priv_key", o.priv_key, o.priv_key_file, o.priv_key_env)
        return hl.UsmUserData(
            o.user,
            authKey=auth_key if o.auth_protocol != "none" else None,
            privKey=priv_key if o.priv_protocol != "none" else None,
            authProtocol=snmp_fetch.AUTH_PROTOCOLS[o.auth_protocol],
            privProtocol=snmp_fetch.PRIV_PROTOCOLS[o.priv_protocol],
        )

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

    async def fetch(self) -> dict[str, Any]:
        o = self.options
        session = snmp_fetch.Session(host=self.address, port=o.port, auth=self._auth(), timeout=o.snmp_timeout,
                                     retries=o.retries, max_repetitions=o.max_repetitions,
                                     context=o.context if o.version == "3" else "")
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
