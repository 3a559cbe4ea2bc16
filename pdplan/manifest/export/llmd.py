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
  for the whole group (``templates/decode-lws.yaml``: a ``workerTemplate`` only, of ``size`` = the section's
  ``parallelism.workers``). Pipeline stages across nodes serve HTTP from the leader alone, so such a section
  is not probed.
- A pool with attention data parallelism (wide EP) states the chart's ``parallelism.data`` (DP) and
  ``parallelism.dataLocal`` (DP ranks per node) besides ``tensor`` and ``workers`` (nodes per instance): the
  chart renders them as env ``DP_SIZE``, ``DP_SIZE_LOCAL``, ``TP_SIZE`` (``parallelismEnv``), fails a ``data``
  that is not ``dataLocal`` x ``workers`` (``dataLocalParallelism``/``numWorkers``), and counts
  ``dataLocal`` x ``tensor`` GPUs per pod (``numGpuPerWorker``). Its command is vLLM's DP flags
  (:func:`vllm.parallel_args`) and, across nodes, every pod serving its own ranks by hybrid load balancing
  (:func:`vllm.data_parallel_launch`), its start rank from LWS's ``LWS_WORKER_INDEX``, as llm-d's wide-EP guide
  runs it with this chart (llm-d/llm-d's v0.2 ``guides/wide-ep-lws/ms-wide-ep/values.yaml``, read in the fork
  zhiyingfang2022/llm-d @e52045bd: ``--data-parallel-hybrid-lb``,
  start rank ``LWS_WORKER_INDEX`` x ``DP_SIZE_LOCAL``, address ``LWS_LEADER_ADDRESS``): every pod of the group is an
  endpoint of the section, as the chart's one template makes it, so every pod is probed.
"""

from __future__ import annotations

import re

from pdplan.errors import PdplanError
from pdplan.manifest.export import common, pods, vllm
from pdplan.vocabulary import Router

DEFAULT_IMAGE = "vllm/vllm-openai:v0.33.0"
SERVICE_PORT = 8000        # routing.servicePort: prefill pods listen here
PROXY_TARGET_PORT = 8200   # routing.proxy.targetPort: decode pods listen behind the routing sidecar

#: What the header says of a plan's prefill router that is not least-loaded. llm-d routes through its inference
#: scheduler, the InferencePool's endpoint picker, which its own chart deploys beside this one (llm-d-modelservice
#: v0.4.12 renders no scheduler): its EndpointPickerConfig scores prefill endpoints by their prefix-cache hits with
#: the prefix-cache-scorer plugin in the prefill scheduling profile (llm-d/llm-d-inference-scheduler
#: deploy/config/pd-epp-config.yaml @0bb9fa833ee064adb8a0caf74d162c5bdcc9fe7e: prefix-cache-scorer weight 2 beside
#: queue-scorer weight 1, max-score-picker). No round-robin plugin was read there, so a round-robin plan says so.
ROUTER_NOTES = {
    Router.CACHE_AWARE: "The plan routes prefills cache-aware: give the llm-d inference scheduler's prefill profile "
                        "(its EndpointPickerConfig, deployed with the InferencePool) the prefix-cache-scorer plugin.",
    Router.ROUND_ROBIN: "The plan routes prefills round-robin, which the llm-d inference scheduler (its "
                        "EndpointPickerConfig, deployed with the InferencePool) is not set to by this export.",
}

# The chart has one section per role; a colocated pool serves from the decode section.
_SECTIONS = {"prefill": "prefill", "decode": "decode", "colocated": "decode"}


def export(manifest: dict, options: pods.PodOptions = pods.PodOptions()) -> dict[str, str]:
    """``llm-d/values.yaml``."""
    common.require_pool_engines(manifest, "llm-d")
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
    router = common.router_policy(manifest, ROUTER_NOTES)
    header = "\n".join([header, *([] if router is None else [router]),
                        *common.cache_tier_notes(common.pools(manifest), vllm.TIER_OPTIONS)])
    return {"llm-d/values.yaml": common.dump_yaml(values, header=header)}


def _section(manifest: dict, pool: dict, image: str, options: pods.PodOptions) -> dict:
    port = SERVICE_PORT if pool["phase"] == "prefill" else PROXY_TARGET_PORT
    size = common.pods_per_instance(manifest, pool)
    found = common.parallel(pool)
    command, args = vllm.pod_command(manifest, pool, port, spans_nodes=size > 1, hybrid=True)
    container = {"name": "vllm", "image": image, "modelCommand": "custom", "command": command, "args": args,
                 "env": [*vllm.pod_env(manifest, pool), pods.hf_token_env(options)],  # the chart sets HF_HOME
                 "ports": vllm.pod_ports(manifest, pool, port),
                 "resources": pods.resources(manifest, pool), "mountModelVolume": True}
    if size == 1 or found.dp > 1:  # every pod serves HTTP
        container["extraConfig"] = pods.health_probes(pool)
    labels = pods.node_labels(manifest, pool)
    if len(labels) > 1:
        raise PdplanError(f"pool {pool['name']} runs on nodes selected by several label keys "
                          f"({', '.join(labels)}); llm-d-modelservice's acceleratorTypes takes one", field="placement")
    (key, values), = labels.items()
    section = {"create": True, "replicas": pool["replicas"],
               "parallelism": _parallelism(manifest, pool, size),
               # Rendered by the chart as a required node affinity: labelKey In labelValues.
               "acceleratorTypes": {"labelKey": key, "labelValues": values},
               "containers": [container]}
    shm = pods.shm_volume(pool)
    if shm:  # the section's volumes and the container's volumeMounts, as the chart's values take them
        section["volumes"] = [volume for volume, _ in shm]
        container["volumeMounts"] = [mount for _, mount in shm]
    return section


def _parallelism(manifest: dict, pool: dict, size: int) -> dict:
    """The section's ``parallelism`` block: TP and the nodes of an instance, and with DP ranks the instance's DP
    and the ranks each node runs (:func:`vllm.local_data_parallel`)."""
    found = common.parallel(pool)
    if found.dp == 1:
        return {"tensor": found.tp, "workers": size}
    return {"tensor": found.tp, "data": found.dp, "dataLocal": vllm.local_data_parallel(manifest, pool, size),
            "workers": size}


def _label(model: str) -> str:
    """A label value for the model id (63 characters of [A-Za-z0-9_.-])."""
    return re.sub(r"[^A-Za-z0-9_.-]", "-", model)[:63].strip("-_.")
