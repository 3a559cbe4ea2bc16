"""llm-d: Helm values for the llm-d-modelservice chart (``prefill``/``decode`` sections).

Read against llm-d-incubation/llm-d-modelservice ``charts/llm-d-modelservice/templates/_helpers.tpl``
at 3051935e (tag llm-d-modelservice-v0.4.12):

- The chart knows no pipeline parallelism: it renders env ``TP_SIZE`` from ``parallelism.tensor``
  and auto-fills a container's GPU request as ``tensor × dataLocal`` only when the container does
  not state one. So ``parallelism.tensor`` is the pool's real TP, the container states its GPUs
  (TP × PP / nodes) as requests and limits (the chart warns of an "Accelerator mismatch" for PP > 1
  and uses the stated value), and runs an explicit ``vllm serve`` (``modelCommand: custom``) with
  the real TP and PP sizes.
- With an ``hf://`` model the model volume is an emptyDir of ``modelArtifacts.size`` (default 5Mi)
  at ``modelArtifacts.mountPath``, which the chart sets as ``HF_HOME``: the size comes from the
  weights (:func:`pods.cache_gib`).
- ``modelArtifacts.authSecretName`` would read ``HF_TOKEN`` from key ``HF_TOKEN`` and fail the pod
  when the Secret is missing, so the token comes instead from the container env as in the other
  pod formats: optional, key ``token``.
- Probes go through the container's ``extraConfig``; a multinode section renders one pod template
  for the whole group, whose workers serve no HTTP, so only single-node sections are probed.
"""

from __future__ import annotations

import re

from pdplan.errors import PdplanError
from pdplan.manifest.export import common, pods, vllm

DEFAULT_IMAGE = "vllm/vllm-openai:v0.33.0"
SERVICE_PORT = 8000        # routing.servicePort: prefill pods listen here
PROXY_TARGET_PORT = 8200   # routing.proxy.targetPort: decode pods listen behind the routing sidecar

# The chart has one section per role; a colocated pool serves from the decode section.
_SECTIONS = {"prefill": "prefill", "decode": "decode", "colocated": "decode"}


def export(manifest: dict, options: pods.PodOptions = pods.PodOptions()) -> dict[str, str]:
    """``llm-d/values.yaml``."""
    common.require_pool_engines(manifest, "llm-d")
    common.refuse_wide(manifest, "llm-d")
    image = options.image or DEFAULT_IMAGE
    model = common.served_model(manifest)
    sections = {"prefill": {"create": False}, "decode": {"create": False}}
    filled = set()
    for pool in common.pools(manifest):
        key = _SECTIONS[pool["phase"]]
        if key in filled:
            raise PdplanError(f"llm-d-modelservice has one {key} section; the plan has several {key} pools",
                              field="pools")
        filled.add(key)
        sections[key] = _section(manifest, pool, image, options)
    values = {
        # The chart's multinode switch turns every section into a LeaderWorkerSet.
        "multinode": any(i.spans_nodes for i in common.instances(manifest)),
        "modelArtifacts": {"name": model, "uri": f"hf://{model}",
                           "size": f"{max(pods.cache_gib(p) for p in common.pools(manifest))}Gi",
                           "labels": {"llm-d.ai/inference-serving": "true", "llm-d.ai/model": _label(model)}},
        "routing": {"servicePort": SERVICE_PORT, "proxy": {"targetPort": PROXY_TARGET_PORT}},
        **sections,
    }
    budgets = "\n".join(pods.budget_comment(pool) for pool in common.pools(manifest))
    header = (f"{common.header(manifest, 'llm-d')}\nCreate the Secret {options.hf_token_secret} (key "
              f"{pods.HF_TOKEN_KEY}) for a gated model.\n{budgets}")
    return {"llm-d/values.yaml": common.dump_yaml(values, header=header)}


def _section(manifest: dict, pool: dict, image: str, options: pods.PodOptions) -> dict:
    port = SERVICE_PORT if pool["phase"] == "prefill" else PROXY_TARGET_PORT
    size = common.pods_per_instance(manifest, pool)
    command, args = vllm.pod_command(manifest, pool, port, spans_nodes=size > 1)
    container = {"name": "vllm", "image": image, "modelCommand": "custom", "command": command, "args": args,
                 "env": [*vllm.pod_env(manifest, pool), pods.hf_token_env(options)],  # the chart sets HF_HOME
                 "ports": vllm.pod_ports(manifest, pool, port),
                 "resources": pods.resources(manifest, pool), "mountModelVolume": True}
    if size == 1:
        container["extraConfig"] = pods.vllm_probes(pool)
    labels = pods.node_labels(manifest, pool)
    if len(labels) > 1:
        raise PdplanError(f"pool {pool['name']} runs on nodes selected by several label keys "
                          f"({', '.join(labels)}); llm-d-modelservice's acceleratorTypes takes one", field="placement")
    (key, values), = labels.items()
    section = {"create": True, "replicas": pool["replicas"],
               "parallelism": {"tensor": pool["tp"], "workers": size},
               # Rendered by the chart as a required node affinity: labelKey In labelValues.
               "acceleratorTypes": {"labelKey": key, "labelValues": values},
               "containers": [container]}
    shm = pods.shm_volume(pool)
    if shm:  # the section's volumes and the container's volumeMounts, as the chart's values take them
        section["volumes"] = [volume for volume, _ in shm]
        container["volumeMounts"] = [mount for _, mount in shm]
    return section


def _label(model: str) -> str:
    """A label value for the model id (63 characters of [A-Za-z0-9_.-])."""
    return re.sub(r"[^A-Za-z0-9_.-]", "-", model)[:63].strip("-_.")
