"""``jobs-file``: job placement from a static file (host lists per job, or a job per host).

For clusters whose scheduler fabricmon cannot ask (or tests): the file is read at every poll,
so an external tool may rewrite it (write to a temporary file and rename it over, so a poll
never reads half a file). See README.md for the format.
"""

from __future__ import annotations

import asyncio
from typing import Any, ClassVar

from pydantic import Field

from fabricmon.collectors.base import AddressKind, Collector, ErrorReason, LocalFile, SourceOptions
from fabricmon.collectors.files import read_bounded
from fabricmon.collectors.jobs_file.parse import JobsFileParseOptions, LabelName, parse_payload
from fabricmon.core.model import ParseResult, TargetSpec


class JobsFileOptions(SourceOptions):
    path: str = Field(min_length=1)
    max_bytes: int = Field(16 << 20, ge=1)
    labels: list[LabelName] = Field(default_factory=list)


class JobsFileCollector(Collector):
    source: ClassVar[str] = "jobs-file"
    address_kind: ClassVar[AddressKind] = AddressKind.NONE
    every_shard: ClassVar[bool] = True  # a job inventory: every shard joins its findings to the jobs
    options_model: ClassVar[type[SourceOptions]] = JobsFileOptions
    parse_options_model = JobsFileParseOptions
    files = (LocalFile("path"),)

    async def fetch(self) -> dict[str, Any]:
        o: JobsFileOptions = self.options  # type: ignore[assignment]
        data = await asyncio.to_thread(read_bounded, o.path, o.max_bytes, "the jobs file", ErrorReason.COMMAND)
        return {"text": data.decode("utf-8", "replace")}

    @classmethod
    def parse(cls, payload: dict[str, Any], spec: TargetSpec, state: None) -> tuple[ParseResult, None]:
        return parse_payload(payload, spec), None


__all__ = ["JobsFileCollector", "JobsFileOptions"]
