"""Running GPU/RDMA pods of a Kubernetes cluster, grouped into jobs, from the API server's pod list.

The payload is the pod list as ``GET /api/v1/pods`` returns it, page by page (``PodList``:
``{"kind": "PodList", "metadata": {"continue": ...}, "items": [Pod, ...]}``; Kubernetes API
reference, "Pod v1 core" and "List Pod": **verified** field names, see README), reduced by
fetch.py to the fields read here:

* a pod counts when ``status.phase`` is ``Running``, ``spec.nodeName`` is set, and one of its
  containers (or init containers) requests or limits a resource named in ``resources``
  (default: ``nvidia.com/gpu``, ``amd.com/gpu``, ``nvidia.com/mig-*``, ``nvidia.com/hostdev``,
  ``rdma/*``: the NVIDIA and AMD GPU device plugins, the RDMA shared device plugin and the
  NVIDIA network operator's host-device resources) with a quantity other than zero;
* its job is the first of ``job_label_keys`` its labels carry (Kubeflow training jobs,
  JobSet, Volcano, LeaderWorkerSet, batch/v1 Job), else its controller's
  ``ownerReferences`` name, else the pod's own name; the job id is ``<namespace>/<name>``
  (names are unique only within a namespace);
* the job's hosts are its pods' ``spec.nodeName``; its start the earliest ``status.startTime``.

Label ``namespace`` (off by default) repeats the namespace as a label of its own.
"""

from __future__ import annotations

import datetime as dt
from typing import Any, Literal

from pydantic import Field

from fabricmon.collectors.base import ParseError, ParseOptions
from fabricmon.core.model import JobInfo, ParseResult, TargetSpec

DEFAULT_RESOURCES = ["nvidia.com/gpu", "amd.com/gpu", "nvidia.com/mig-", "nvidia.com/hostdev", "rdma/"]
DEFAULT_JOB_LABEL_KEYS = [
    "training.kubeflow.org/job-name",  # Kubeflow training operator (PyTorchJob, MPIJob, ...)
    "jobset.sigs.k8s.io/jobset-name",  # JobSet
    "volcano.sh/job-name",  # Volcano
    "leaderworkerset.sigs.k8s.io/name",  # LeaderWorkerSet
    "batch.kubernetes.io/job-name",  # batch/v1 Job (Kubernetes 1.27+)
    "job-name",  # batch/v1 Job (older label)
]


class KubernetesParseOptions(ParseOptions):
    resources: list[str] = Field(default_factory=lambda: list(DEFAULT_RESOURCES))
    job_label_keys: list[str] = Field(default_factory=lambda: list(DEFAULT_JOB_LABEL_KEYS))
    labels: list[Literal["namespace"]] = Field(default_factory=list)


def resource_matches(name: str, wanted: list[str]) -> bool:
    """``name`` is one of ``wanted``, or starts with an entry that ends in ``/``, ``-`` or ``.``."""
    return any(name == w or (w.endswith(("/", "-", ".")) and name.startswith(w)) for w in wanted)


def _nonzero(quantity: Any) -> bool:
    """A Kubernetes quantity (``"1"``, ``"500m"``, 2) other than zero."""
    text = str(quantity).strip()
    digits = text.rstrip("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
    try:
        return float(digits or "0") != 0
    except ValueError:
        return bool(text)


def uses_fabric(pod: dict[str, Any], wanted: list[str]) -> bool:
    spec = pod.get("spec") if isinstance(pod.get("spec"), dict) else {}
    for key in ("containers", "initContainers"):
        for c in spec.get(key) or []:
            res = c.get("resources") if isinstance(c, dict) else None
            if not isinstance(res, dict):
                continue
            for part in ("requests", "limits"):
                amounts = res.get(part)
                if isinstance(amounts, dict) and any(resource_matches(str(n), wanted) and _nonzero(q) for n, q in amounts.items()):
                    return True
    return False


def _time(text: Any) -> float | None:
    """An RFC 3339 time (``2025-12-02T14:00:00Z``) as Unix seconds."""
    if not isinstance(text, str) or not text:
        return None
    try:
        t = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return t.timestamp() if t.tzinfo is not None else None


def job_name(meta: dict[str, Any], keys: list[str]) -> str:
    labels = meta.get("labels") if isinstance(meta.get("labels"), dict) else {}
    for key in keys:
        v = labels.get(key)
        if isinstance(v, str) and v:
            return v
    owners = meta.get("ownerReferences") if isinstance(meta.get("ownerReferences"), list) else []
    for ref in owners:
        if isinstance(ref, dict) and ref.get("controller") and isinstance(ref.get("name"), str) and ref["name"]:
            return ref["name"]
    return str(meta.get("name") or "")


def pods_of(payload: dict[str, Any]) -> list[dict[str, Any]]:
    """Every pod of every recorded page."""
    responses = payload.get("responses")
    if not isinstance(responses, list) or not responses:
        raise ParseError("kubernetes payload: 'responses' must be a list of the pod-list pages")
    pods: list[dict[str, Any]] = []
    for r in responses:
        body = r.get("body") if isinstance(r, dict) else None
        if not isinstance(body, dict) or not isinstance(body.get("items"), list):
            raise ParseError(f"kubernetes {r.get('path', '') if isinstance(r, dict) else ''}: not a PodList (no 'items' list)")
        pods.extend(p for p in body["items"] if isinstance(p, dict))
    return pods


def parse_payload(payload: dict[str, Any], spec: TargetSpec) -> ParseResult:
    opts = KubernetesParseOptions.from_spec(spec)
    jobs: dict[str, dict[str, Any]] = {}
    for pod in pods_of(payload):
        meta = pod.get("metadata") if isinstance(pod.get("metadata"), dict) else {}
        status = pod.get("status") if isinstance(pod.get("status"), dict) else {}
        node = (pod.get("spec") or {}).get("nodeName") if isinstance(pod.get("spec"), dict) else None
        if status.get("phase") != "Running" or not isinstance(node, str) or not node or not uses_fabric(pod, opts.resources):
            continue
        ns = str(meta.get("namespace") or "default")
        name = job_name(meta, opts.job_label_keys)
        if not name:
            continue
        job = jobs.setdefault(f"{ns}/{name}", {"hosts": {}, "start": None, "ns": ns})
        job["hosts"][node] = None
        start = _time(status.get("startTime"))
        if start is not None and (job["start"] is None or start < job["start"]):
            job["start"] = start
    result = ParseResult(inventory=[])
    for jid in sorted(jobs):
        j = jobs[jid]
        labels = (("namespace", j["ns"]),) if "namespace" in opts.labels else ()
        result.inventory.append(JobInfo(jid, tuple(sorted(j["hosts"])), j["start"], (), labels))  # type: ignore[union-attr]
    return result
