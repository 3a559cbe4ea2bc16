"""Plain Kubernetes: a Deployment per pool, or a LeaderWorkerSet (one group per instance)
when an instance of the pool spans nodes; pods pinned to the node map's nodes."""

from __future__ import annotations

from pdplan.manifest.export import common, vllm

DEFAULT_IMAGE = "vllm/vllm-openai:v0.33.0"
POD_PORT = 8000


def export(manifest: dict, *, image: str | None = None) -> dict[str, str]:
    """``k8s/<name>.yaml``: one multi-document YAML."""
    common.require_vllm_engine(manifest, "k8s")
    image = image or DEFAULT_IMAGE
    documents = [_workload(manifest, pool, image) for pool in common.pools(manifest)]
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


def _pod_spec(manifest: dict, pool: dict, image: str, pods: int) -> dict:
    command, args = vllm.pod_command(manifest, pool, POD_PORT, spans_nodes=pods > 1)
    container = {"name": "vllm", "image": image, "command": command, "args": args}
    env = vllm.pod_env(manifest, pool)
    if env:
        container["env"] = env
    container["ports"] = vllm.pod_ports(manifest, pool, POD_PORT)
    container["resources"] = common.gpu_resources(common.gpus_per_pod(manifest, pool))
    return {"affinity": common.node_affinity(common.pool_nodes(manifest, pool)), "containers": [container]}
