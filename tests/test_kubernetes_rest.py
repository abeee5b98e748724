"""The ``kubernetes`` source against an API-server stand-in on loopback (TLS, bearer token, paging).

Pods are written in the shapes of the Kubernetes API reference (v1.31, "Pod v1 core":
``metadata.ownerReferences``, ``spec.nodeName``, ``spec.containers[].resources.{requests,limits}``,
``status.phase``/``startTime``), with the fields a real pod carries that the collector must not
record (environment, image, command, volumes).
"""

from __future__ import annotations

import base64

import pytest

from fabricmon.collectors.base import FetchError
from fabricmon.collectors.kubernetes import KubernetesCollector, KubernetesOptions
from tests.http_standins import KubeApiStandIn
from tests.pki import make_pki, self_signed_cert

TOKEN = "eyJhbGciOiJSUzI1NiJ9.test-service-account-token"


def pod(name: str, node: str | None, *, ns: str = "team-a", phase: str = "Running", start: str = "2025-12-02T14:00:00Z",
        labels: dict | None = None, owner: tuple[str, str] | None = None, resources: dict | None = None) -> dict:
    meta = {"name": name, "namespace": ns, "uid": f"uid-{name}", "labels": labels or {}, "resourceVersion": "42",
            "creationTimestamp": "2025-12-02T13:59:00Z"}
    if owner:
        meta["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": owner[0], "name": owner[1], "uid": f"uid-{owner[1]}",
                                    "controller": True, "blockOwnerDeletion": True}]
    container = {"name": "trainer", "image": "nvcr.io/nvidia/pytorch:24.05-py3", "command": ["torchrun", "train.py"],
                 "env": [{"name": "WANDB_API_KEY", "value": "secret-in-env"}],
                 "resources": resources if resources is not None else {"limits": {"nvidia.com/gpu": "8"},
                                                                        "requests": {"nvidia.com/gpu": "8", "cpu": "64"}}}
    spec = {"containers": [container], "restartPolicy": "Never", "volumes": [{"name": "data", "emptyDir": {}}]}
    if node:
        spec["nodeName"] = node
    status = {"phase": phase, "hostIP": "10.0.0.1", "podIP": "10.1.0.1"}
    if phase == "Running":
        status["startTime"] = start
    return {"metadata": meta, "spec": spec, "status": status}


PODS = [
    # a PyTorchJob of the Kubeflow training operator: 3 workers on 3 nodes
    *[pod(f"llama-worker-{i}", f"gpu00{i + 1}", labels={"training.kubeflow.org/job-name": "llama",
                                                          "training.kubeflow.org/replica-index": str(i)},
          owner=("PyTorchJob", "llama"), start=f"2025-12-02T14:0{i}:00Z") for i in range(3)],
    # a batch/v1 Job with RDMA only (the RDMA shared device plugin's resource)
    pod("nccl-test-abcde", "gpu004", ns="infra", labels={"batch.kubernetes.io/job-name": "nccl-test", "job-name": "nccl-test"},
        owner=("Job", "nccl-test"), resources={"limits": {"rdma/rdma_shared_device_a": "1"}}),
    # a GPU Deployment pod: its job is its controller (the ReplicaSet)
    pod("inference-7d9f-xk2", "gpu005", ns="serving", owner=("ReplicaSet", "inference-7d9f")),
    pod("web-1", "cpu001", resources={"requests": {"cpu": "2"}}),  # no GPU nor RDMA: not a fabric job
    pod("queued-0", None, phase="Pending", labels={"training.kubeflow.org/job-name": "queued"}),  # not running
    pod("zero-gpu", "gpu006", resources={"limits": {"nvidia.com/gpu": "0"}}),  # asks for none
]


@pytest.fixture
def cert(tmp_path):
    return self_signed_cert(tmp_path)


def collector(srv: KubeApiStandIn, **options) -> KubernetesCollector:
    return KubernetesCollector("k8s", srv.address, KubernetesOptions(port=srv.port, **options))


async def poll(c: KubernetesCollector):
    try:
        payload = await c.fetch()
    finally:
        await c.close()
    result, _ = KubernetesCollector.parse_poll(payload, c.spec(), None)
    return payload, result


async def test_running_gpu_and_rdma_pods_grouped_into_jobs(cert) -> None:
    async with KubeApiStandIn(PODS, TOKEN, cert) as srv:
        payload, result = await poll(collector(srv, token=TOKEN, ca_file=str(cert[0]), page_size=2))
    jobs = {j.id: j for j in result.inventory}
    assert set(jobs) == {"team-a/llama", "infra/nccl-test", "serving/inference-7d9f"}
    assert jobs["team-a/llama"].hosts == ("gpu001", "gpu002", "gpu003")
    assert jobs["team-a/llama"].start == 1764684000.0  # the earliest startTime, 2025-12-02T14:00:00Z
    assert jobs["infra/nccl-test"].hosts == ("gpu004",)
    assert all(j.labels == () for j in jobs.values())  # the namespace as a label only when enabled
    # paged: 7 running pods, 2 a page -> 4 calls, each with the phase selector, the limit and the token
    paths = [s.path_qs for s in srv.seen]
    assert len(paths) == 4 and all("fieldSelector=status.phase%3DRunning" in p and "limit=2" in p for p in paths)
    assert [s.query.get("continue") for s in srv.seen] == [None, "page-2", "page-4", "page-6"]
    assert all(s.headers["Authorization"] == f"Bearer {TOKEN}" for s in srv.seen)
    text = str(payload)
    for private in ("secret-in-env", "torchrun", "nvcr.io", "emptyDir", "replica-index", TOKEN):
        assert private not in text  # what a pod runs and holds is never recorded, nor the token


async def test_namespace_label_when_enabled(cert) -> None:
    async with KubeApiStandIn(PODS, TOKEN, cert) as srv:
        _, result = await poll(collector(srv, token=TOKEN, ca_file=str(cert[0]), labels=["namespace"]))
    assert {j.id: j.labels for j in result.inventory}["infra/nccl-test"] == (("namespace", "infra"),)


async def test_wrong_token_is_an_auth_error(cert) -> None:
    async with KubeApiStandIn(PODS, TOKEN, cert) as srv:
        with pytest.raises(FetchError) as err:
            await poll(collector(srv, token="not-the-token", ca_file=str(cert[0])))
    assert err.value.reason == "auth" and "401" in str(err.value)


async def test_unknown_certificate_is_a_tls_error(cert) -> None:
    async with KubeApiStandIn(PODS, TOKEN, cert) as srv:
        with pytest.raises(FetchError) as err:
            await poll(collector(srv, token=TOKEN))  # the system store does not know the stand-in's certificate
    assert err.value.reason == "tls"


def kubeconfig(tmp_path, cert, user: dict) -> str:
    ca = base64.b64encode(cert[0].read_bytes()).decode()
    path = tmp_path / "kubeconfig"
    path.write_text(f"""apiVersion: v1
kind: Config
current-context: fabricmon@lab
contexts:
- name: fabricmon@lab
  context: {{cluster: lab, user: fabricmon}}
clusters:
- name: lab
  cluster: {{server: "https://kube-api.example:6443", certificate-authority-data: {ca}}}
users:
- name: fabricmon
  user: {user}
""")
    return str(path)


async def test_kubeconfig_gives_token_and_ca(cert, tmp_path) -> None:
    cfg = kubeconfig(tmp_path, cert, {"token": TOKEN})
    async with KubeApiStandIn(PODS, TOKEN, cert) as srv:
        _, result = await poll(collector(srv, kubeconfig=cfg))
    assert len(result.inventory) == 3


def b64(path) -> str:
    return base64.b64encode(path.read_bytes()).decode()


@pytest.mark.parametrize("inline", [True, False], ids=["data", "files"])
async def test_kubeconfig_client_certificate_authenticates_without_a_token(cert, tmp_path, inline) -> None:
    """X509 client-certificate authentication, the kubeconfig shape kubeadm writes for an admin:
    ``client-certificate-data``/``client-key-data`` inline, or ``client-certificate``/``client-key``
    paths. The stand-in asks for a certificate of its client CA and lets a verified one in with no
    token; its CN is the user the API server sees."""
    (tmp_path / "pki").mkdir()
    pki = make_pki(tmp_path / "pki")
    user = ({"client-certificate-data": b64(pki["client.crt"]), "client-key-data": b64(pki["client.key"])} if inline
            else {"client-certificate": str(pki["client.crt"]), "client-key": str(pki["client.key"])})
    cfg = kubeconfig(tmp_path, cert, user)
    async with KubeApiStandIn(PODS, TOKEN, cert, client_ca=pki["client-ca.crt"]) as srv:
        _, result = await poll(collector(srv, kubeconfig=cfg))
    assert len(result.inventory) == 3
    assert srv.users and set(srv.users) == {"prometheus"}
    assert all("Authorization" not in s.headers for s in srv.seen)


async def test_kubeconfig_client_certificate_of_another_ca_is_refused(cert, tmp_path) -> None:
    """A client certificate the API server's client CA did not sign is refused: an error naming
    the target, never a poll that looks empty. Under TLS 1.3 the server judges the client's
    certificate after the client has finished its side of the handshake, so the client sees the
    connection closed under its request (``connection``), not a handshake error (RFC 8446 §4.4.2.4)."""
    (tmp_path / "pki").mkdir()
    pki = make_pki(tmp_path / "pki")
    cfg = kubeconfig(tmp_path, cert, {"client-certificate-data": b64(pki["client-foreign.crt"]),
                                      "client-key-data": b64(pki["client-foreign.key"])})
    async with KubeApiStandIn(PODS, TOKEN, cert, client_ca=pki["client-ca.crt"]) as srv:
        with pytest.raises(FetchError) as err:
            await poll(collector(srv, kubeconfig=cfg))
    assert err.value.reason in {"tls", "connection"}, err.value
    assert "127.0.0.1" in str(err.value) and srv.users == [] and srv.seen == []


async def test_kubeconfig_credential_plugins_are_refused_with_the_reason(cert, tmp_path) -> None:
    cfg = kubeconfig(tmp_path, cert, {"exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": "aws"}})
    async with KubeApiStandIn(PODS, TOKEN, cert) as srv:
        with pytest.raises(FetchError) as err:
            await poll(collector(srv, kubeconfig=cfg))
    assert err.value.reason == "auth" and "credential plugin" in str(err.value) and srv.seen == []


def test_options_need_exactly_one_credential() -> None:
    with pytest.raises(ValueError, match="bearer token"):
        KubernetesOptions()
    with pytest.raises(ValueError, match="not both"):
        KubernetesOptions(token_file="/t", kubeconfig="/k")
