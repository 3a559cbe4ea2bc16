"""llm-d: Helm values for the llm-d-modelservice chart (``prefill``/``decode`` sections).

The chart sizes each pod's GPU request as ``parallelism.tensor × dataLocal`` and knows no
pipeline parallelism, so ``parallelism.tensor`` carries the GPUs of one pod (TP×PP / nodes)
and the containers run an explicit ``vllm serve`` (``modelCommand: custom``) with the real
TP and PP sizes.
"""

from __future__ import annotations

import re

from pdplan.errors import PdplanError
from pdplan.manifest.export import common, vllm

DEFAULT_IMAGE = "vllm/vllm-openai:v0.33.0"
SERVICE_PORT = 8000        # routing.servicePort: prefill pods listen here
PROXY_TARGET_PORT = 8200   # routing.proxy.targetPort: decode pods listen behind the routing sidecar

# The chart has one section per role; a colocated pool serves from the decode section.
_SECTIONS = {"prefill": "prefill", "decode": "decode", "colocated": "decode"}


def export(manifest: dict, *, image: str | None = None) -> dict[str, str]:
    """``llm-d/values.yaml``."""
    common.require_pool_engines(manifest, "llm-d")
    image = image or DEFAULT_IMAGE
    model = common.served_model(manifest)
    sections = {"prefill": {"create": False}, "decode": {"create": False}}
    filled = set()
    for pool in common.pools(manifest):
        key = _SECTIONS[pool["phase"]]
        if key in filled:
            raise PdplanError(f"llm-d-modelservice has one {key} section; the plan has several {key} pools",
                              field="pools")
        filled.add(key)
        sections[key] = _section(manifest, pool, image)
    values = {
        # The chart's multinode switch turns every section into a LeaderWorkerSet.
        "multinode": any(i.spans_nodes for i in common.instances(manifest)),
        "modelArtifacts": {"name": model, "uri": f"hf://{model}",
                           "labels": {"llm-d.ai/inference-serving": "true", "llm-d.ai/model": _label(model)}},
        "routing": {"servicePort": SERVICE_PORT, "proxy": {"targetPort": PROXY_TARGET_PORT}},
        **sections,
    }
    return {"llm-d/values.yaml": common.dump_yaml(values, header=common.header(manifest, "llm-d"))}


def _section(manifest: dict, pool: dict, image: str) -> dict:
    port = SERVICE_PORT if pool["phase"] == "prefill" else PROXY_TARGET_PORT
    pods = common.pods_per_instance(manifest, pool)
    gpus = common.gpus_per_pod(manifest, pool)
    command, args = vllm.pod_command(manifest, pool, port, spans_nodes=pods > 1)
    container = {"name": "vllm", "image": image, "modelCommand": "custom", "command": command, "args": args,
                 "env": vllm.pod_env(manifest, pool), "ports": vllm.pod_ports(manifest, pool, port),
                 "resources": common.gpu_resources(gpus), "mountModelVolume": True}
    return {"create": True, "replicas": pool["replicas"],
            "parallelism": {"tensor": gpus, "workers": pods},
            # Rendered by the chart as a required node affinity on this label.
            "acceleratorTypes": {"labelKey": common.NODE_NAME_LABEL,
                                 "labelValues": common.pool_nodes(manifest, pool)},
            "containers": [container]}


def _label(model: str) -> str:
    """A label value for the model id (63 characters of [A-Za-z0-9_.-])."""
    return re.sub(r"[^A-Za-z0-9_.-]", "-", model)[:63].strip("-_.")
