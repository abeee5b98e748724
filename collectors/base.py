"""The collector interface: ``fetch`` (async I/O, returns the raw payload) and ``parse`` (pure).

A collector class is registered under its source name (``snmp``, ``perfquery``, ``ufm``,
``ufm-telemetry``, ``nvue``, ``host``). The scheduler calls ``fetch`` on an instance made
for one target; the pipeline calls the class's ``parse`` on the payload, live or from a
recording. Nothing outside the collector's own package knows which source it is.
"""

from __future__ import annotations

import abc
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict

from fabricmon.core.model import ParseResult, TargetSpec


class ParseError(ValueError):
    """A payload the parser cannot read. The only exception a parser may raise."""


class FetchError(Exception):
    """A poll that failed. ``reason`` is a short class for the error metric's label:
    ``timeout``, ``connection``, ``http``, ``auth``, ``tls``, ``command``, ``protocol``,
    ``size``. The message names what went wrong; the scheduler adds the target name."""

    def __init__(self, message: str, reason: str = "protocol") -> None:
        super().__init__(message)
        self.reason = reason


def resolve_secret(what: str, inline: str | None, file: str | None, env: str | None) -> str | None:
    """The plain value of secret option ``what`` (inline, ``<what>_file`` or ``<what>_env``),
    through :func:`fabricmon.core.secrets.resolve`; a problem is this poll's ``auth`` error, naming
    the option and never the value."""
    from fabricmon.core.secrets import SecretError, resolve

    try:
        secret = resolve({what: inline, f"{what}_file": file, f"{what}_env": env}, what)
    except SecretError as exc:
        raise FetchError(str(exc), "auth") from None
    return secret.reveal() if secret is not None else None


class SourceOptions(BaseModel):
    """Base of each collector's per-target options; unknown keys are errors."""

    model_config = ConfigDict(extra="forbid")


class Collector(abc.ABC):
    """One collector instance polls one target."""

    source: ClassVar[str]
    options_model: ClassVar[type[SourceOptions]] = SourceOptions
    # Option names that change how payloads are parsed; they go into the recording header.
    parse_options: ClassVar[tuple[str, ...]] = ()

    def __init__(self, name: str, address: str, options: SourceOptions) -> None:
        self.name = name
        self.address = address
        self.options = options

    def spec(self) -> TargetSpec:
        """The parse-relevant view of this target, as written to a recording header."""
        dumped = self.options.model_dump(mode="json")
        opts = {k: dumped[k] for k in self.parse_options if dumped.get(k) is not None}
        return TargetSpec(name=self.name, source=self.source, options=opts)

    @abc.abstractmethod
    async def fetch(self) -> dict[str, Any]:
        """Fetch one poll's raw payload (recording-format.md). Raise FetchError on failure."""

    @classmethod
    @abc.abstractmethod
    def parse(cls, payload: dict[str, Any], spec: TargetSpec, state: dict[str, Any]) -> ParseResult:
        """Turn a raw payload into samples. No I/O. Raise only ParseError.

        ``state`` is a per-target dict the pipeline keeps between polls, for what a payload
        may omit (perfquery polls carry ibnetdiscover output only when it was refreshed).
        """

    async def close(self) -> None:
        """Release sessions, engines, subprocesses. Called on shutdown and reload."""
        return None

    @classmethod
    def reset_caches(cls) -> None:
        """Forget anything cached from files the user may have changed (called on reload)."""
        return None
