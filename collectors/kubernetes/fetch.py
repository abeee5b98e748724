"""I/O of the kubernetes source: list the running pods page by page and keep what the parser reads.

``GET /api/v1/pods?fieldSelector=status.phase%3DRunning&limit=N`` then ``&continue=<token>``
while ``metadata.continue`` is set (Kubernetes API reference, "List Pod", and API Concepts,
"Retrieving large results sets in chunks"). Each page is recorded as one RESPONSE whose body
is the PodList with each pod reduced to ``metadata.{name, namespace, labels (the job label
keys only), ownerReferences (kind, name, controller)}``, ``spec.nodeName``, the containers'
and init containers' ``resources`` and ``status.{phase, startTime}``: the rest of a pod (its
environment, command lines, volumes) is never recorded.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from fabricmon.collectors.base import ErrorReason, FetchError
from fabricmon.collectors.http_util import HttpClient

POD_LIST = "/api/v1/pods"
MAX_PAGES = 1000  # at 500 pods a page: half a million running pods


def _containers(spec: dict[str, Any], key: str) -> list[dict[str, Any]]:
    out = []
    for c in spec.get(key) or []:
        if isinstance(c, dict) and isinstance(c.get("resources"), dict):
            res = c["resources"]
            out.append({"resources": {k: res[k] for k in ("requests", "limits") if isinstance(res.get(k), dict)}})
    return out


def reduce_pod(pod: Any, label_keys: list[str]) -> dict[str, Any] | None:
    if not isinstance(pod, dict):
        return None
    meta = pod.get("metadata") if isinstance(pod.get("metadata"), dict) else {}
    spec = pod.get("spec") if isinstance(pod.get("spec"), dict) else {}
    status = pod.get("status") if isinstance(pod.get("status"), dict) else {}
    labels = meta.get("labels") if isinstance(meta.get("labels"), dict) else {}
    owners = [{k: o[k] for k in ("kind", "name", "controller") if k in o}
              for o in meta.get("ownerReferences") or [] if isinstance(o, dict)]
    out_spec: dict[str, Any] = {"nodeName": spec.get("nodeName"), "containers": _containers(spec, "containers")}
    if spec.get("initContainers"):
        out_spec["initContainers"] = _containers(spec, "initContainers")
    return {
        "metadata": {"name": meta.get("name"), "namespace": meta.get("namespace"),
                     "labels": {k: labels[k] for k in label_keys if k in labels}, "ownerReferences": owners},
        "spec": out_spec,
        "status": {k: status[k] for k in ("phase", "startTime") if k in status},
    }


async def list_pods(client: HttpClient, page_size: int, label_keys: list[str]) -> dict[str, Any]:
    """Every page of running pods, as the payload's RESPONSE list."""
    responses = []
    token = ""
    for _ in range(MAX_PAGES):
        path = f"{POD_LIST}?fieldSelector={quote('status.phase=Running', safe='')}&limit={page_size}"
        if token:
            path += f"&continue={quote(token, safe='')}"
        resp = await client.get(path, want_json=True)
        body = resp.body
        if not isinstance(body, dict) or not isinstance(body.get("items"), list):
            kind = body.get("kind") if isinstance(body, dict) else type(body).__name__
            raise FetchError(f"GET {POD_LIST}: expected a PodList, got {kind!r}", ErrorReason.PROTOCOL)
        meta = body.get("metadata") if isinstance(body.get("metadata"), dict) else {}
        items = [p for p in (reduce_pod(x, label_keys) for x in body["items"]) if p is not None]
        responses.append({"method": "GET", "path": path, "status": resp.status,
                          "body": {"kind": body.get("kind", "PodList"), "apiVersion": body.get("apiVersion", "v1"),
                                   "metadata": {k: meta[k] for k in ("resourceVersion", "continue") if k in meta},
                                   "items": items}})
        token = meta.get("continue") if isinstance(meta.get("continue"), str) else ""
        if not token:
            return {"responses": responses}
    raise FetchError(f"GET {POD_LIST}: more than {MAX_PAGES} pages of {page_size} pods; refused", ErrorReason.SIZE)
