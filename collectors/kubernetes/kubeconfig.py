"""Credentials and trust from a kubeconfig file (the format ``kubectl`` reads, ``clientcmd/api/v1``).

Read at every poll, so a rotated file is picked up. From the chosen context (``context``, else
``current-context``): the cluster's ``certificate-authority`` / ``certificate-authority-data``
and ``insecure-skip-tls-verify``, and the user's ``token`` / ``tokenFile`` or
``client-certificate[-data]`` + ``client-key[-data]``. Credential plugins (``exec``,
``auth-provider``) are not run: the error says to give a token instead. The cluster's
``server`` is not used: the target's address and port say where the API server is.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import os
import ssl
import tempfile
from dataclasses import dataclass
from typing import Any

import yaml

from fabricmon.collectors.base import ErrorReason, FetchError
from fabricmon.collectors.files import read_bounded
from fabricmon.core.files import checked_path

MAX_KUBECONFIG = 1 << 20


@dataclass(frozen=True, slots=True)
class KubeCredentials:
    token: str | None
    ca_pem: str | None  # certificate-authority-data, decoded
    ca_file: str | None
    cert_pem: bytes | None  # client certificate and key, from *-data or the files
    key_pem: bytes | None
    insecure: bool
    digest: str  # of what the TLS context is made from: a new context only when it changes

    def ssl_context(self, ca_file: str | None) -> ssl.SSLContext:
        """The TLS context: the kubeconfig's CA (else ``ca_file``, else the system store), its
        client certificate, and verification unless the kubeconfig turns it off."""
        cafile = self.ca_file or (ca_file if not self.ca_pem else None)
        try:
            if cafile:  # opened without blocking, a regular file of bounded size (fabricmon.core.files)
                with checked_path(cafile, MAX_KUBECONFIG, "certificate-authority") as path:
                    ctx = ssl.create_default_context(cafile=path, cadata=self.ca_pem)
            else:
                ctx = ssl.create_default_context(cadata=self.ca_pem)
            if self.insecure:
                ctx.check_hostname = False
                ctx.verify_mode = ssl.CERT_NONE
            if self.cert_pem and self.key_pem:
                _load_chain(ctx, self.cert_pem, self.key_pem)
        except (OSError, ssl.SSLError, ValueError) as exc:  # FileRefused is a ValueError
            raise FetchError(f"kubeconfig: cannot set up TLS: {exc}", ErrorReason.TLS) from None
        return ctx


def _load_chain(ctx: ssl.SSLContext, cert: bytes, key: bytes) -> None:
    """``load_cert_chain`` takes paths only: the PEMs go through a private file removed at once."""
    fd, path = tempfile.mkstemp(prefix="fabricmon-kube-", suffix=".pem")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(cert.rstrip(b"\n") + b"\n" + key)
        ctx.load_cert_chain(path)
    finally:
        with contextlib.suppress(OSError):
            os.unlink(path)


def _read(path: str, what: str) -> bytes:
    return read_bounded(path, MAX_KUBECONFIG, f"kubeconfig {what}", ErrorReason.AUTH)


def _named(doc: dict[str, Any], section: str, name: str, path: str) -> dict[str, Any]:
    for entry in doc.get(section) or []:
        if isinstance(entry, dict) and entry.get("name") == name:
            body = entry.get(section[:-1])
            return body if isinstance(body, dict) else {}
    raise FetchError(f"kubeconfig {path}: no {section[:-1]} named {name!r}", ErrorReason.AUTH)


def _data_or_file(d: dict[str, Any], key: str, base: str, path: str) -> bytes | None:
    raw = d.get(f"{key}-data")
    if isinstance(raw, str) and raw:
        try:
            return base64.b64decode(raw, validate=True)
        except ValueError:
            raise FetchError(f"kubeconfig {path}: {key}-data is not base64", ErrorReason.AUTH) from None
    ref = d.get(key)
    if isinstance(ref, str) and ref:
        return _read(ref if os.path.isabs(ref) else os.path.join(base, ref), key)
    return None


def load(path: str, context: str | None) -> KubeCredentials:
    """The credentials of ``context`` (else the current one) in the kubeconfig at ``path``."""
    raw = _read(path, "file")
    try:
        doc = yaml.safe_load(raw)
    except yaml.YAMLError as exc:
        raise FetchError(f"kubeconfig {path}: not YAML: {str(exc).splitlines()[0]}", ErrorReason.AUTH) from None
    if not isinstance(doc, dict):
        raise FetchError(f"kubeconfig {path}: not a kubeconfig (a YAML mapping with contexts, clusters, users)", ErrorReason.AUTH)
    name = context or doc.get("current-context")
    if not isinstance(name, str) or not name:
        raise FetchError(f"kubeconfig {path}: no current-context; set the context option", ErrorReason.AUTH)
    ctx = _named(doc, "contexts", name, path)
    cluster = _named(doc, "clusters", str(ctx.get("cluster")), path)
    user = _named(doc, "users", str(ctx.get("user")), path)
    if "exec" in user or "auth-provider" in user:
        raise FetchError(f"kubeconfig {path}: user {ctx.get('user')!r} uses a credential plugin (exec/auth-provider), "
                         "which fabricmon does not run; give it a ServiceAccount token (kubectl create token ...)",
                         ErrorReason.AUTH)
    base = os.path.dirname(os.path.abspath(path))
    token = user.get("token") if isinstance(user.get("token"), str) else None
    if not token and isinstance(user.get("tokenFile"), str):
        token = _read(user["tokenFile"], "tokenFile").decode("utf-8", "replace").strip()
    ca = cluster.get("certificate-authority-data")
    ca_pem = _data_or_file(cluster, "certificate-authority", base, path) if isinstance(ca, str) and ca else None
    ca_file = cluster.get("certificate-authority") if ca_pem is None and isinstance(cluster.get("certificate-authority"), str) else None
    if ca_file and not os.path.isabs(ca_file):
        ca_file = os.path.join(base, ca_file)
    cert = _data_or_file(user, "client-certificate", base, path)
    key = _data_or_file(user, "client-key", base, path)
    if not token and not (cert and key):
        raise FetchError(f"kubeconfig {path}: user {ctx.get('user')!r} has neither a token nor a client certificate and key",
                         ErrorReason.AUTH)
    # Everything the client is made from (a rotated tokenFile too), so a change makes a new client with its TLS context.
    digest = hashlib.sha256(b"\0".join([raw, cert or b"", key or b"", (token or "").encode()])).hexdigest()
    return KubeCredentials(token or None, ca_pem.decode("utf-8", "replace") if ca_pem else None, ca_file, cert, key,
                           cluster.get("insecure-skip-tls-verify") is True, digest)
