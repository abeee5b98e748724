"""``kubernetes``: the jobs of a Kubernetes cluster that hold GPUs or RDMA devices, and their nodes.

Polls the API server's pod list (running pods only, paged) with a bearer token (a ServiceAccount
token, inline, from a file or an environment variable) or a kubeconfig, over verified TLS. The
pods that request GPU or RDMA resources are grouped into jobs (parse.py). See README.md.
"""

from __future__ import annotations

import asyncio
import ssl
from typing import Any, ClassVar, Literal

from pydantic import Field, model_validator

from fabricmon.collectors.base import AddressKind, Collector, FetchError, LocalFile, SourceOptions, resolve_secret
from fabricmon.collectors.http_util import TLS_FILES, ClientSlot, HttpAuth, RestOptions, base_url
from fabricmon.collectors.kubernetes import kubeconfig
from fabricmon.collectors.kubernetes.fetch import list_pods
from fabricmon.collectors.kubernetes.parse import DEFAULT_JOB_LABEL_KEYS, DEFAULT_RESOURCES, KubernetesParseOptions, parse_payload
from fabricmon.core import secrets
from fabricmon.core.model import ParseResult, TargetSpec


class KubernetesOptions(RestOptions):
    port: int | None = 6443
    token: str | None = None
    token_file: str | None = None  # in a pod: /var/run/secrets/kubernetes.io/serviceaccount/token
    token_env: str | None = None
    kubeconfig: str | None = None
    context: str | None = None
    page_size: int = Field(500, ge=1, le=10_000)
    resources: list[str] = Field(default_factory=lambda: list(DEFAULT_RESOURCES))
    job_label_keys: list[str] = Field(default_factory=lambda: list(DEFAULT_JOB_LABEL_KEYS))
    labels: list[Literal["namespace"]] = Field(default_factory=list)

    @model_validator(mode="after")
    def _credentials(self) -> KubernetesOptions:
        token = self.token or self.token_file or self.token_env
        if not token and not self.kubeconfig:
            raise ValueError("kubernetes needs a bearer token (token_file, token_env or token) or a kubeconfig")
        if token and self.kubeconfig:
            raise ValueError("give a token or a kubeconfig, not both")
        return self


class KubernetesCollector(Collector):
    source: ClassVar[str] = "kubernetes"
    address_kind: ClassVar[AddressKind] = AddressKind.REMOTE
    default_port: ClassVar[int | None] = 6443
    every_shard: ClassVar[bool] = True  # a job inventory: every shard joins its findings to the jobs
    options_model: ClassVar[type[SourceOptions]] = KubernetesOptions
    parse_options_model = KubernetesParseOptions
    files = (*TLS_FILES, LocalFile("kubeconfig"))

    def __init__(self, name: str, address: str, options: SourceOptions) -> None:
        super().__init__(name, address, options)
        self._slot = ClientSlot()
        self._tls_key: object = None  # digest of the kubeconfig the client's TLS context was made from

    async def fetch(self) -> dict[str, Any]:
        o: KubernetesOptions = self.options  # type: ignore[assignment]
        if not self.address.strip():
            raise FetchError("a kubernetes target needs an address: (the API server host)", "connection")
        # The kubeconfig (and the files it names) or the token file, read in a thread: never on the loop.
        token, ctx, key = await asyncio.to_thread(self._credentials, o)
        auth = HttpAuth("token", secret=token) if token else HttpAuth()
        client = await self._slot.client(base_url(o.scheme, self.address, o.port), auth, ca_file=o.ca_file,
                                         insecure=o.tls_insecure_skip_verify, max_body_bytes=o.max_body_bytes,
                                         ssl_context=ctx, tls_key=key)
        return await list_pods(client, o.page_size, list(o.job_label_keys))

    def _credentials(self, o: KubernetesOptions) -> tuple[str, ssl.SSLContext | None, object]:
        """The bearer token, a new TLS context when the kubeconfig's changed (else None), and what it was made from."""
        if not o.kubeconfig:
            return resolve_secret("token", o.token, o.token_file, o.token_env) or "", None, None
        creds = kubeconfig.load(o.kubeconfig, o.context)
        token = creds.token or ""
        if token:
            secrets.remember(token)
        ctx = None
        if creds.digest != self._tls_key:  # a new context only when the kubeconfig changed: the slot then makes a new client
            ctx, self._tls_key = creds.ssl_context(o.ca_file), creds.digest
        return token, ctx, creds.digest

    @classmethod
    def parse(cls, payload: dict[str, Any], spec: TargetSpec, state: None) -> tuple[ParseResult, None]:
        return parse_payload(payload, spec), None

    async def close(self) -> None:
        await self._slot.close()


__all__ = ["KubernetesCollector", "KubernetesOptions"]
