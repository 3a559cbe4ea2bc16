"""Plain Kubernetes: a Deployment per pool, or a LeaderWorkerSet (one group per instance)
when an instance of the pool spans nodes; pods pinned to the node map's nodes.

A Deployment's pods are gated on vLLM's health endpoint (``GET /health``: 200, or 503 once the
engine is dead; vllm-project/vllm ``vllm/entrypoints/serve/instrumentator/health.py``) and reached
through a Service of the pool's name. A pod of a TP > 1 instance mounts a memory-backed
``/dev/shm``: a container's default 64 MiB is too small for the tensor-parallel ranks' shared
memory (vllm-project/production-stack PR #994, "Bus error"), as vLLM's Kubernetes guide mounts one.
"""

from __future__ import annotations

from pdplan.manifest.export import common, vllm

DEFAULT_IMAGE = "vllm/vllm-openai:v0.33.0"
POD_PORT = 8000
#: vLLM's health endpoint: 200 while the engine runs.
HEALTH_PATH = "/health"


def export(manifest: dict, *, image: str | None = None) -> dict[str, str]:
    """``k8s/<name>.yaml``: one multi-document YAML."""
    common.require_pool_engines(manifest, "k8s")
    image = image or DEFAULT_IMAGE
    documents = []
    for pool in common.pools(manifest):
        documents.append(_workload(manifest, pool, image))
        if common.pods_per_instance(manifest, pool) == 1:
            documents.append(_service(manifest, pool))
    header = (f"{common.header(manifest, 'k8s')}\n"
              f"Pods are pinned to the node map's nodes by the node label {common.NODE_NAME_LABEL}.")
    return {f"k8s/{manifest['metadata']['name']}.yaml": common.dump_yaml(*documents, header=header)}


def _workload(manifest: dict, pool: dict, image: str) -> dict:
    pods = common.pods_per_instance(manifest, pool)
    labels = {"pdplan.dev/pool": pool["name"], "pdplan.dev/phase": pool["phase"], **common.manifest_labels(manifest)}
    metadata = {"name": pool["name"], "labels": labels, "annotations": common.manifest_annotations(manifest)}
    template = {"metadata": {"labels": labels, "annotations": common.manifest_annotations(manifest)},
                "spec": _pod_spec(manifest, pool, image, pods)}
    if pods == 1:
        return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": metadata,
                "spec": {"replicas": pool["replicas"],
                         "selector": {"matchLabels": {"pdplan.dev/pool": pool["name"]}},
                         "template": template}}
    return {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet", "metadata": metadata,
            "spec": {"replicas": pool["replicas"],
                     # one group = one instance; its pods are its nodes
                     "leaderWorkerTemplate": {"size": pods, "restartPolicy": "RecreateGroupOnPodRestart",
                                              "workerTemplate": template}}}


def _service(manifest: dict, pool: dict) -> dict:
    """The pool's Service: its pods' HTTP port under the pool's name, for the router."""
    return {"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": pool["name"], "labels": {"pdplan.dev/pool": pool["name"],
                                                          **common.manifest_labels(manifest)},
                         "annotations": common.manifest_annotations(manifest)},
            "spec": {"selector": {"pdplan.dev/pool": pool["name"]},
                     "ports": [{"name": "http", "port": POD_PORT, "targetPort": "http", "protocol": "TCP"}]}}


def _pod_spec(manifest: dict, pool: dict, image: str, pods: int) -> dict:
    command, args = vllm.pod_command(manifest, pool, POD_PORT, spans_nodes=pods > 1)
    container = {"name": "vllm", "image": image, "command": command, "args": args}
    env = vllm.pod_env(manifest, pool)
    if env:
        container["env"] = env
    container["ports"] = vllm.pod_ports(manifest, pool, POD_PORT)
    container["resources"] = common.gpu_resources(common.gpus_per_pod(manifest, pool))
    if pods == 1:  # a multinode group's workers serve no HTTP: only a lone pod is probed
        container["readinessProbe"] = {"httpGet": {"path": HEALTH_PATH, "port": "http"}, "periodSeconds": 10}
    spec = {"affinity": common.node_affinity(common.pool_nodes(manifest, pool)), "containers": [container]}
    if pool["tp"] > 1:
        container["volumeMounts"] = [{"name": "dshm", "mountPath": "/dev/shm"}]
        spec["volumes"] = [{"name": "dshm", "emptyDir": {"medium": "Memory"}}]
    return spec
