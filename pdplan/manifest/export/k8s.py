"""Plain Kubernetes: per pool a Deployment, or a LeaderWorkerSet (one group per instance) when an
instance of the pool spans nodes, and a Service; vllm-router in front with its Service; a
kustomization that applies them.

A pool's pods are gated on vLLM's health endpoint (:func:`pods.vllm_probes`); in a LeaderWorkerSet
only the leader serves HTTP, so only it is probed and its Service selects leaders (LWS labels a
group's pods ``leaderworkerset.sigs.k8s.io/worker-index``, 0 for the leader; kubernetes-sigs/lws
``api/leaderworkerset/v1/leaderworkerset_types.go``). A pod of several GPUs mounts a
memory-backed ``/dev/shm`` (:func:`pods.shm_volume`).

The router finds its workers through Kubernetes service discovery (vllm-project/router
``src/main.rs``: ``--service-discovery`` with ``--prefill-selector``/``--decode-selector`` in P/D
mode, ``--selector`` otherwise; ``src/service_discovery.rs`` watches pods by label and registers a
pod's IP once it is Running and Ready), so it balances over pods itself, never through a Service's
kube-proxy; it needs a Role to watch pods, as the router's own example with discovery grants
(``scripts/k8s/llama3/llm-d/vllm-router-deployment-with-discovery.yaml``).
"""

from __future__ import annotations

from pdplan.errors import PdplanError
from pdplan.manifest.export import common, pods, vllm

DEFAULT_IMAGE = "vllm/vllm-openai:v0.33.0"
#: vllm-router's image as vLLM's docs run it (vllm-project/vllm ``docs/features/moriio_connector.md``:
#: ``docker.io/vllm/vllm-router:nightly``); no release tag is published, so pin one with --router-image.
DEFAULT_ROUTER_IMAGE = "docker.io/vllm/vllm-router:nightly"
POD_PORT = 8000
ROUTER_PORT = 8000
#: The router's own probes: vllm-router 0.1.17 serves ``/liveness`` and ``/readiness``.
ROUTER_LIVENESS = "/liveness"
ROUTER_READINESS = "/readiness"
#: The router pod's requests, as the router's Kubernetes examples request them
#: (vllm-project/router ``scripts/k8s/pd_disagg/router-deployment.yaml``: 2 CPUs, 4 GiB).
ROUTER_RESOURCES = {"requests": {"cpu": "2", "memory": "4Gi"}, "limits": {"memory": "4Gi"}}
#: The name of the router's objects (Deployment, Service, ServiceAccount, Role, RoleBinding).
ROUTER = "router"
#: Label of the pods that serve vLLM's HTTP API: a Deployment's pods, a LeaderWorkerSet's leaders.
ENDPOINT_LABEL = "pdplan.dev/endpoint"
LWS_WORKER_INDEX = "leaderworkerset.sigs.k8s.io/worker-index"
#: With Mooncake, vllm-router asks each prefill server's Mooncake bootstrap server; under service
#: discovery it reads that port from this pod annotation (vllm-project/router ``src/main.rs``,
#: ``bootstrap_port_annotation``). Each pod has its own IP, so every prefiller serves it on vLLM's
#: default port (:data:`vllm.MOONCAKE_BOOTSTRAP_BASE`).
BOOTSTRAP_ANNOTATION = "vllm.ai/bootstrap-port"


def export(manifest: dict, options: pods.PodOptions = pods.PodOptions()) -> dict[str, str]:
    """``k8s/<name>.yaml`` (every object, one multi-document YAML) and ``k8s/kustomization.yaml``
    listing it, so ``kubectl apply -k k8s/`` applies the bundle."""
    common.require_pool_engines(manifest, "k8s")
    image = options.image or DEFAULT_IMAGE
    documents = []
    for pool in common.pools(manifest):
        if pool["name"] == ROUTER:
            raise PdplanError(f"pool {pool['name']} would share its objects' name with the router; rename the pool",
                              field="pools")
        documents += [_workload(manifest, pool, image, options), _service(manifest, pool)]
    documents += _router(manifest, options)
    name = manifest["metadata"]["name"]
    budgets = "\n".join(pods.budget_comment(pool) for pool in common.pools(manifest))
    header = (f"{common.header(manifest, 'k8s')}\n"
              "Pods are scheduled by node label (the cluster file's node_label, else the GPU product label that\n"
              "NVIDIA GPU Feature Discovery writes). Create the Secret "
              f"{options.hf_token_secret} (key {pods.HF_TOKEN_KEY}) for a gated model.\n"
              "vllm-router discovers the serving pods by label through the Kubernetes API and balances over\n"
              "their pod IPs; the pools' Services are for direct access.\n"
              f"{budgets}")
    header = "\n".join([header, *common.cache_tier_notes(common.pools(manifest), vllm.TIER_OPTIONS)])
    kustomization = {"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
                     "resources": [f"{name}.yaml"]}
    return {f"k8s/{name}.yaml": common.dump_yaml(*documents, header=header),
            "k8s/kustomization.yaml": common.dump_yaml(kustomization, header=common.header(manifest, "k8s"))}


def _labels(manifest: dict, pool: dict) -> dict[str, str]:
    return {"pdplan.dev/pool": pool["name"], "pdplan.dev/phase": pool["phase"], **common.manifest_labels(manifest)}


def _metadata(manifest: dict, name: str, labels: dict[str, str]) -> dict:
    return {"name": name, "labels": labels, "annotations": common.manifest_annotations(manifest)}


def _workload(manifest: dict, pool: dict, image: str, options: pods.PodOptions) -> dict:
    size = common.pods_per_instance(manifest, pool)
    labels = _labels(manifest, pool)
    annotations = common.manifest_annotations(manifest)
    if vllm.has_bootstrap(manifest, pool):
        annotations = {**annotations, BOOTSTRAP_ANNOTATION: str(vllm.MOONCAKE_BOOTSTRAP_BASE)}
    serving = {"metadata": {"labels": {**labels, ENDPOINT_LABEL: "http"}, "annotations": annotations},
               "spec": _pod_spec(manifest, pool, image, options, size, probed=True)}
    if size == 1:
        return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": _metadata(manifest, pool["name"], labels),
                "spec": {"replicas": pool["replicas"],
                         "selector": {"matchLabels": {"pdplan.dev/pool": pool["name"]}},
                         "template": serving}}
    worker = {"metadata": {"labels": labels, "annotations": common.manifest_annotations(manifest)},
              "spec": _pod_spec(manifest, pool, image, options, size, probed=False)}
    return {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
            "metadata": _metadata(manifest, pool["name"], labels),
            "spec": {"replicas": pool["replicas"],
                     # one group = one instance; its pods are its nodes, the leader serves HTTP
                     "leaderWorkerTemplate": {"size": size, "restartPolicy": "RecreateGroupOnPodRestart",
                                              "leaderTemplate": serving, "workerTemplate": worker}}}


def _service(manifest: dict, pool: dict) -> dict:
    """The pool's Service: its serving pods' HTTP port under the pool's name (a LeaderWorkerSet's
    leaders only)."""
    selector = {"pdplan.dev/pool": pool["name"]}
    if common.pods_per_instance(manifest, pool) > 1:
        selector[LWS_WORKER_INDEX] = "0"
    return {"apiVersion": "v1", "kind": "Service",
            "metadata": _metadata(manifest, pool["name"], {"pdplan.dev/pool": pool["name"],
                                                           **common.manifest_labels(manifest)}),
            "spec": {"selector": selector,
                     "ports": [{"name": "http", "port": POD_PORT, "targetPort": "http", "protocol": "TCP"}]}}


def _pod_spec(manifest: dict, pool: dict, image: str, options: pods.PodOptions, size: int, *, probed: bool) -> dict:
    command, args = vllm.pod_command(manifest, pool, POD_PORT, spans_nodes=size > 1)
    container = {"name": "vllm", "image": image, "command": command, "args": args,
                 "env": vllm.pod_env(manifest, pool) + pods.hf_env(options),
                 "ports": vllm.pod_ports(manifest, pool, POD_PORT),
                 "resources": pods.resources(manifest, pool)}
    if probed:
        container.update(pods.vllm_probes(pool))
    volume, mount = pods.cache_volume(pool)
    volumes, mounts = [volume], [mount]
    for shm, shm_mount in pods.shm_volume(pool):
        volumes.append(shm)
        mounts.append(shm_mount)
    container["volumeMounts"] = mounts
    return {**pods.node_selection(manifest, pool), "containers": [container], "volumes": volumes}


def router_args(manifest: dict) -> list[str]:
    """vllm-router's arguments: service discovery of this manifest's serving pods in the router's
    own namespace (``$(POD_NAMESPACE)``: the kubelet expands ``$(VAR)`` in a container's args from its
    env, kubernetes ``pkg/kubelet/container/helpers.go`` ExpandContainerCommandAndArgs)."""
    selector = [f"{ENDPOINT_LABEL}=http", f"pdplan.dev/manifest-hash={common.hash_hex(manifest)[:16]}"]
    args = ["--host", "0.0.0.0", "--port", str(ROUTER_PORT), "--service-discovery",
            "--service-discovery-port", str(POD_PORT), "--service-discovery-namespace", "$(POD_NAMESPACE)"]
    if not common.is_disaggregated(manifest):
        return args + ["--selector", "pdplan.dev/phase=colocated", *selector]
    args.append("--vllm-pd-disaggregation")
    connector = manifest["transfer"]["connector"]
    if connector in vllm.ROUTER_CONNECTORS:
        args += ["--kv-connector", connector]
    args += vllm.prefill_policy_args(manifest)
    return args + ["--prefill-selector", "pdplan.dev/phase=prefill", *selector,
                   "--decode-selector", "pdplan.dev/phase=decode", *selector]


def _router(manifest: dict, options: pods.PodOptions) -> list[dict]:
    """The router's ServiceAccount, the Role to watch pods and its binding, its Deployment and Service."""
    labels = {"pdplan.dev/component": ROUTER, **common.manifest_labels(manifest)}
    meta = _metadata(manifest, ROUTER, labels)
    container = {"name": ROUTER, "image": options.router_image or DEFAULT_ROUTER_IMAGE,
                 "command": ["vllm-router"], "args": router_args(manifest),
                 "env": [{"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}}],
                 "ports": [{"name": "http", "containerPort": ROUTER_PORT, "protocol": "TCP"}],
                 "resources": ROUTER_RESOURCES,
                 "readinessProbe": {"httpGet": {"path": ROUTER_READINESS, "port": "http"}, "periodSeconds": 10},
                 "livenessProbe": {"httpGet": {"path": ROUTER_LIVENESS, "port": "http"}, "periodSeconds": 10}}
    selector = {"pdplan.dev/component": ROUTER}
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": meta,
         "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}]},
        # A ServiceAccount subject without a namespace is the binding's own (kubernetes
        # pkg/registry/rbac/validation/rule.go, appliesToUser), so the bundle applies in any namespace.
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": meta,
         "subjects": [{"kind": "ServiceAccount", "name": ROUTER}],
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": ROUTER}},
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta,
         "spec": {"replicas": 1, "selector": {"matchLabels": selector},
                  "template": {"metadata": {"labels": labels, "annotations": common.manifest_annotations(manifest)},
                               "spec": {"serviceAccountName": ROUTER, "containers": [container]}}}},
        {"apiVersion": "v1", "kind": "Service", "metadata": meta,
         "spec": {"selector": selector,
                  "ports": [{"name": "http", "port": ROUTER_PORT, "targetPort": "http", "protocol": "TCP"}]}},
    ]
