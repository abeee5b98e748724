"""``slurm`` and ``slurmrestd``: the running jobs of a Slurm cluster and the nodes they hold.

``slurm`` runs ``squeue --json`` (or ``scontrol show job --json``, Slurm 23.02+) on this node:
the management node is a Slurm client (``slurm.conf`` and munge, or a configless setup).
``slurmrestd`` asks the REST daemon (``GET /slurm/<version>/jobs``) with a JWT. Both read the
same job-info shape (parse.py) and record what they read. See README.md.
"""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import Field, model_validator

from fabricmon.collectors.base import AddressKind, Collector, Executable, FetchError, SourceOptions, resolve_secret
from fabricmon.collectors.http_util import TLS_FILES, ClientSlot, HttpAuth, RestOptions, base_url
from fabricmon.collectors.slurm.fetch import reduce, run_json
from fabricmon.collectors.slurm.parse import Label, SlurmParseOptions, parse_payload
from fabricmon.core.durations import Duration
from fabricmon.core.model import ParseResult, TargetSpec


class SlurmOptions(SourceOptions):
    squeue_path: str = "squeue"
    # Read `scontrol show job --json` instead of `squeue --json` (Slurm 23.02 and later).
    scontrol: bool = False
    scontrol_path: str = "scontrol"
    command_timeout: Duration = Field(30.0, gt=0)
    labels: list[Label] = Field(default_factory=list)


class _JobSource(Collector):
    """What the two Slurm sources share: the parse and its options."""

    parse_options_model = SlurmParseOptions
    every_shard: ClassVar[bool] = True  # a job inventory: every shard joins its findings to the jobs

    @classmethod
    def parse(cls, payload: dict[str, Any], spec: TargetSpec, state: None) -> tuple[ParseResult, None]:
        return parse_payload(payload, spec), None


class SlurmCollector(_JobSource):
    source: ClassVar[str] = "slurm"
    address_kind: ClassVar[AddressKind] = AddressKind.NONE
    executables: ClassVar[tuple[Executable, ...]] = (Executable("squeue_path"), Executable("scontrol_path", "scontrol"))
    options_model: ClassVar[type[SourceOptions]] = SlurmOptions

    async def fetch(self) -> dict[str, Any]:
        o: SlurmOptions = self.options  # type: ignore[assignment]
        # --states=RUNNING: Slurm 22.05 ignores it with --json (checked); the jobs are filtered here either way.
        argv = [o.scontrol_path, "show", "job", "--json"] if o.scontrol else [o.squeue_path, "--json", "--states=RUNNING"]
        return await run_json(argv, o.command_timeout, list(o.labels))


class SlurmRestOptions(RestOptions):
    port: int | None = 6820
    api_version: str = Field("v0.0.40", pattern=r"^v\d+\.\d+\.\d+$")
    user_name: str = Field(min_length=1)
    token: str | None = None
    token_file: str | None = None
    token_env: str | None = None
    labels: list[Label] = Field(default_factory=list)

    @model_validator(mode="after")
    def _token(self) -> SlurmRestOptions:
        if not (self.token or self.token_file or self.token_env):
            raise ValueError("slurmrestd needs a JWT: token_file, token_env or token (scontrol token)")
        return self


class SlurmRestCollector(_JobSource):
    source: ClassVar[str] = "slurmrestd"
    address_kind: ClassVar[AddressKind] = AddressKind.REMOTE
    default_port: ClassVar[int | None] = 6820
    options_model: ClassVar[type[SourceOptions]] = SlurmRestOptions
    files = TLS_FILES

    def __init__(self, name: str, address: str, options: SourceOptions) -> None:
        super().__init__(name, address, options)
        self._slot = ClientSlot()

    async def fetch(self) -> dict[str, Any]:
        o: SlurmRestOptions = self.options  # type: ignore[assignment]
        if not self.address.strip():
            raise FetchError("a slurmrestd target needs an address: (the slurmrestd host)", "connection")
        token = resolve_secret("token", o.token, o.token_file, o.token_env) or ""
        # slurmrestd's auth/jwt: the user and the token as headers of their own (slurmrestd(8)).
        auth = HttpAuth(extra=(("X-SLURM-USER-NAME", o.user_name), ("X-SLURM-USER-TOKEN", token)))
        client = await self._slot.client(base_url(o.scheme, self.address, o.port), auth, ca_file=o.ca_file,
                                         insecure=o.tls_insecure_skip_verify, max_body_bytes=o.max_body_bytes)
        path = f"/slurm/{o.api_version}/jobs"
        resp = await client.get(path, want_json=True)
        body = reduce(resp.body, list(o.labels), f"GET {path}")
        return {"responses": [{"method": "GET", "path": path, "status": resp.status, "body": body}]}

    async def close(self) -> None:
        await self._slot.close()


__all__ = ["SlurmCollector", "SlurmOptions", "SlurmRestCollector", "SlurmRestOptions"]
