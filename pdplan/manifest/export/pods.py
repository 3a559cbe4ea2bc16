"""What a pod of the pod formats (k8s, llm-d, Dynamo) needs besides its command: node selection by
label, a model cache sized from the weights, the Hugging Face token from a Secret, health probes
with a startup budget from the weight-load time, and CPU and memory requests.

Each number here is an assumption or a reading of an upstream source, named where it is defined.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from pdplan import names
from pdplan.errors import PdplanError
from pdplan.hardware import GIB, GPU_PRODUCT_LABEL, gpu_catalog
from pdplan.manifest.export import common
from pdplan.schedule.timeline import LOAD_BYTES_PER_S, weight_load_s

#: vLLM's Kubernetes guide (vllm-project/vllm ``docs/deployment/k8s.md``) mounts the model cache at
#: the Hugging Face cache of the image's root user and reads the token from a Secret of this name,
#: key ``token``.
HF_HOME = "/root/.cache/huggingface"
DEFAULT_HF_TOKEN_SECRET = "hf-token-secret"
HF_TOKEN_KEY = "token"

#: The cache holds the checkpoint plus its tokenizer and config files and the partial file of a
#: download in flight: 10% over the weights, an assumption.
CACHE_MARGIN = 1.10
#: Downloading a checkpoint from the Hugging Face hub into an empty cache, an assumption (about
#: 1 Gbit/s); a pod's first start downloads the whole checkpoint before it loads it.
DOWNLOAD_BYTES_PER_S = 125e6
#: vLLM's start after the weights are in GPU memory (KV cache profiling, CUDA graph capture,
#: compilation), an assumption, and the factor over the load estimate for a slower disk.
ENGINE_INIT_S = 300
LOAD_MARGIN = 2.0
#: How often the kubelet probes /health.
PROBE_PERIOD_S = 10

#: CPU cores requested per GPU: vLLM runs one worker process per GPU beside its API server and
#: engine core; the GPU example of vLLM's Kubernetes guide requests 2 CPUs for 1 GPU.
CPU_PER_GPU = 2
#: Host memory per GPU beyond the weights it loads (its worker process: CUDA context, Python,
#: pinned transfer buffers), an assumption.
HOST_GIB_PER_GPU = 4


@dataclass(frozen=True)
class PodOptions:
    """Export options of the pod formats."""

    image: str | None = None                       #: the engine image; None: the format's release image
    router_image: str | None = None                #: the router image (k8s); None: the format's default
    hf_token_secret: str = DEFAULT_HF_TOKEN_SECRET  #: Secret holding the Hugging Face token under key ``token``

    def __post_init__(self):
        for name, value, rule in (("--image", self.image, names.image_reference),
                                  ("--router-image", self.router_image, names.image_reference),
                                  ("--hf-token-secret", self.hf_token_secret, names.dns_subdomain)):
            problem = None if value is None else rule(value)
            if problem:
                raise PdplanError(f"{name} {problem}", field=name.removeprefix("--"))


def instance_weight_bytes(pool: dict) -> float:
    """Bytes of one instance's weights: the manifest's weights per GPU over its TP × DP × PP GPUs (with
    DP ranks this counts the weights every rank holds whole, attention and dense layers, once per rank: an
    upper bound on the checkpoint)."""
    return pool["memory"]["weights_gib_per_gpu"] * GIB * common.parallel(pool).gpus


def cache_gib(pool: dict) -> int:
    """Whole GiB of the model cache of one pod: every pod downloads the whole checkpoint (vLLM's
    default loader fetches every weight file whichever ranks the pod runs, and skips the tensors of
    other pipeline stages only when loading; vllm-project/vllm
    ``vllm/model_executor/model_loader/default_loader.py``), CACHE_MARGIN over the instance's weights."""
    return math.ceil(instance_weight_bytes(pool) * CACHE_MARGIN / GIB)


def startup_budget_s(pool: dict) -> float:
    """Seconds a pod may take to answer /health the first time: downloading the checkpoint at
    DOWNLOAD_BYTES_PER_S, loading each GPU's share at the planner's weight-load rate
    (:func:`pdplan.schedule.timeline.weight_load_s`, LOAD_BYTES_PER_S) times LOAD_MARGIN, and
    ENGINE_INIT_S of engine start. Assumes an empty cache: a warm start only needs less."""
    download = instance_weight_bytes(pool) * CACHE_MARGIN / DOWNLOAD_BYTES_PER_S
    load = weight_load_s(pool["memory"]["weights_gib_per_gpu"] * GIB) * LOAD_MARGIN
    return download + load + ENGINE_INIT_S


def health_probes(pool: dict, port: str = "http") -> dict:
    """Startup, readiness and liveness probes on the engine's ``GET /health``: vLLM's (200 while the engine
    runs, 503 once it is dead; vllm-project/vllm ``vllm/entrypoints/serve/instrumentator/health.py``) and SGLang's
    (503 while it starts and once it shuts down, else 200; SGLang 0.5.23 ``srt/entrypoints/http_server.py``).
    The startup probe allows :func:`startup_budget_s`; liveness and readiness start after it."""
    get = {"path": "/health", "port": port}
    failures = math.ceil(startup_budget_s(pool) / PROBE_PERIOD_S)
    return {"startupProbe": {"httpGet": get, "periodSeconds": PROBE_PERIOD_S, "failureThreshold": failures},
            "readinessProbe": {"httpGet": get, "periodSeconds": PROBE_PERIOD_S, "failureThreshold": 3},
            "livenessProbe": {"httpGet": get, "periodSeconds": PROBE_PERIOD_S, "failureThreshold": 3}}


def budget_comment(pool: dict) -> str:
    """The startup budget of a pool in words, for a header."""
    gib = instance_weight_bytes(pool) / GIB
    return (f"pool {pool['name']} ({common.pool_label(pool)}): {gib:.0f} GiB of weights, "
            f"cache {cache_gib(pool)} Gi, startup budget {startup_budget_s(pool):.0f} s (download at "
            f"{DOWNLOAD_BYTES_PER_S / 1e6:.0f} MB/s, load at {LOAD_BYTES_PER_S / 1e9:.0f} GB/s per GPU x "
            f"{LOAD_MARGIN:g}, {ENGINE_INIT_S} s engine start)")


def resources(manifest: dict, pool: dict) -> dict:
    """Requests and limits of a pool's pod: its GPUs (request = limit, as Kubernetes requires of an
    extended resource), CPU_PER_GPU cores per GPU, and host memory for the weights its GPUs load
    plus HOST_GIB_PER_GPU per GPU (limit = request)."""
    gpus = common.gpus_per_pod(manifest, pool)
    memory = f"{math.ceil(pool['memory']['weights_gib_per_gpu'] * gpus + HOST_GIB_PER_GPU * gpus)}Gi"
    return {"requests": {"cpu": str(CPU_PER_GPU * gpus), "memory": memory, "nvidia.com/gpu": str(gpus)},
            "limits": {"memory": memory, "nvidia.com/gpu": str(gpus)}}


def hf_token_env(options: PodOptions) -> dict:
    """``HF_TOKEN`` from the Secret's key ``token``, optional so an ungated model starts without it."""
    return {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": options.hf_token_secret, "key": HF_TOKEN_KEY,
                                                               "optional": True}}}


def hf_env(options: PodOptions) -> list[dict]:
    """The token (:func:`hf_token_env`) and ``HF_HOME`` at the cache volume."""
    return [hf_token_env(options), {"name": "HF_HOME", "value": HF_HOME}]


def cache_volume(pool: dict) -> tuple[dict, dict]:
    """The model cache of a pod, (volume, mount): a generic ephemeral volume, a
    PersistentVolumeClaim per pod from the cluster's default StorageClass sized by
    :func:`cache_gib`, so replicas on different nodes never share a ReadWriteOnce claim."""
    claim = {"spec": {"accessModes": ["ReadWriteOnce"],
                      "resources": {"requests": {"storage": f"{cache_gib(pool)}Gi"}}}}
    return ({"name": "model-cache", "ephemeral": {"volumeClaimTemplate": claim}},
            {"name": "model-cache", "mountPath": HF_HOME})


def shm_volume(pool: dict) -> list[tuple[dict, dict]]:
    """A memory-backed ``/dev/shm`` for a pod of several GPUs (TP, DP or PP > 1), [(volume, mount)], else
    []: a container's default 64 MiB is too small for the shared memory its ranks exchange through
    (vllm-project/production-stack PR #994, "Bus error"), as vLLM's Kubernetes guide mounts one."""
    if common.parallel(pool).gpus <= 1:
        return []
    return [({"name": "dshm", "emptyDir": {"medium": "Memory"}}, {"name": "dshm", "mountPath": "/dev/shm"})]


def node_labels(manifest: dict, pool: dict) -> dict[str, list[str]]:
    """Label key -> sorted values that select the nodes of a pool: each node's ``node_label``, or
    for a manifest written before nodes carried one, its GPU's product label
    (:data:`pdplan.hardware.GPU_PRODUCT_LABEL`)."""
    used = set(common.pool_nodes(manifest, pool))
    found: dict[str, set[str]] = {}
    for index, node in enumerate(manifest["placement"]["nodes"]):
        if node["node"] not in used:
            continue
        field = f"placement.nodes[{index}].node_label"
        label = node.get("node_label")
        if label is None:
            gpu = gpu_catalog().get(node["gpu"])  # a capped type inherits its base's product label
            product = None if gpu is None else gpu.product_label
            if product is None:
                raise PdplanError(f"node {node['node']} has no node_label and its GPU {node['gpu']!r} no known "
                                  f"{GPU_PRODUCT_LABEL} value; name one in the cluster file (node_label)", field=field)
            label = {"key": GPU_PRODUCT_LABEL, "value": product}
        for part, rule in (("key", names.label_key), ("value", names.label_value)):
            problem = rule(str(label[part]))
            if problem:
                raise PdplanError(f"{field}.{part} {problem}", field=f"{field}.{part}")
        found.setdefault(label["key"], set()).add(label["value"])
    return {key: sorted(values) for key, values in sorted(found.items())}


def node_selection(manifest: dict, pool: dict) -> dict:
    """Pod spec fields that schedule a pool's pods on its nodes' label: a nodeSelector for one
    label, else a required node affinity that accepts any of them."""
    labels = node_labels(manifest, pool)
    if len(labels) == 1 and len(next(iter(labels.values()))) == 1:
        key, (value,) = next(iter(labels.items()))
        return {"nodeSelector": {key: value}}
    terms = [{"matchExpressions": [{"key": key, "operator": "In", "values": values}]}
             for key, values in labels.items()]
    return {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution":
                                          {"nodeSelectorTerms": terms}}}}
