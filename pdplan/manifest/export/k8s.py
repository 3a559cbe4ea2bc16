"""Plain Kubernetes: per pool a Deployment, or a LeaderWorkerSet (one group per instance) when an
instance of the pool spans nodes, and a Service; the router in front with its Service; a
kustomization that applies them. The pods run the plan's engine where it is vLLM or SGLang
(:func:`common.format_engine`), behind vllm-router or sglang-router.

A pool's pods are gated on the engine's health endpoint (:func:`pods.health_probes`); in a LeaderWorkerSet
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

An SGLang pool's pods run ``python3 -m sglang.launch_server`` with the SGLang scripts' flags
(:func:`sglang.engine_args`), a prefill's bootstrap server on :data:`sglang.BOOTSTRAP_PORT_BASE` (every pod has its
own IP), and across the pods of a LeaderWorkerSet SGLang's rendezvous as SGLang's own LeaderWorkerSet guide writes it
(sgl-project/sglang ``docs/references/multi_node_deployment/lws_pd/lws_pd_deploy.md`` @59e54757: ``--dist-init-addr
$(LWS_LEADER_ADDRESS):<port> --node-rank $(LWS_WORKER_INDEX)``, the index from the pod's LWS label). sglang-router
0.3.2 finds them by the same labels (``--service-discovery`` with ``--prefill-selector``/``--decode-selector``) and
reads a prefill pod's bootstrap port from its ``sglang.ai/bootstrap-port`` annotation (its default
``bootstrap_port_annotation``); it runs from the SGLang image, as that guide runs its router.
"""

from __future__ import annotations

from pdplan.engines import ENGINE_ROUTERS
from pdplan.errors import PdplanError
from pdplan.manifest.export import common, pods, sglang, vllm

#: The engine's image per engine: vLLM's OpenAI server release, SGLang's (``lmsysorg/sglang``, which also carries
#: sglang-router).
DEFAULT_IMAGES = {"vllm": "vllm/vllm-openai:v0.33.0", "sglang": "lmsysorg/sglang:v0.5.23"}
#: vllm-router's image as vLLM's docs run it (vllm-project/vllm ``docs/features/moriio_connector.md``:
#: ``docker.io/vllm/vllm-router:nightly``); no release tag is published, so pin one with --router-image.
DEFAULT_ROUTER_IMAGE = "docker.io/vllm/vllm-router:nightly"
#: The router's image per engine: sglang-router runs from the SGLang image.
DEFAULT_ROUTER_IMAGES = {"vllm": DEFAULT_ROUTER_IMAGE, "sglang": DEFAULT_IMAGES["sglang"]}
POD_PORT = 8000
ROUTER_PORT = 8000
#: The router's own probes: vllm-router 0.1.17 and sglang-router 0.3.2 serve ``/liveness`` and ``/readiness``.
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
#: The annotation sglang-router 0.3.2 reads a discovered prefill pod's bootstrap port from (its
#: ``bootstrap_port_annotation`` default).
SGLANG_BOOTSTRAP_ANNOTATION = "sglang.ai/bootstrap-port"


def export(manifest: dict, options: pods.PodOptions = pods.PodOptions()) -> dict[str, str]:
    """``k8s/<name>.yaml`` (every object, one multi-document YAML) and ``k8s/kustomization.yaml``
    listing it, so ``kubectl apply -k k8s/`` applies the bundle."""
    common.require_pool_engines(manifest, "k8s")
    engine = common.format_engine(manifest, "k8s")
    image = options.image or DEFAULT_IMAGES[engine]
    documents = []
    for pool in common.pools(manifest):
        if pool["name"] == ROUTER:
            raise PdplanError(f"pool {pool['name']} would share its objects' name with the router; rename the pool",
                              field="pools")
        documents += [_workload(manifest, pool, image, options, engine), _service(manifest, pool)]
    documents += _router(manifest, options, engine)
    name = manifest["metadata"]["name"]
    budgets = "\n".join(pods.budget_comment(pool) for pool in common.pools(manifest))
    header = (f"{common.header(manifest, 'k8s')}\n"
              "Pods are scheduled by node label (the cluster file's node_label, else the GPU product label that\n"
              "NVIDIA GPU Feature Discovery writes). Create the Secret "
              f"{options.hf_token_secret} (key {pods.HF_TOKEN_KEY}) for a gated model.\n"
              f"{ENGINE_ROUTERS[engine]} discovers the serving pods by label through the Kubernetes API and "
              "balances over\n"
              "their pod IPs; the pools' Services are for direct access.\n"
              f"{budgets}")
    tiers = {"vllm": vllm.TIER_OPTIONS, "sglang": sglang.TIER_OPTIONS}[engine]
    header = "\n".join([header, *common.cache_tier_notes(common.pools(manifest), tiers)])
    kustomization = {"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
                     "resources": [f"{name}.yaml"]}
    return {f"k8s/{name}.yaml": common.dump_yaml(*documents, header=header),
            "k8s/kustomization.yaml": common.dump_yaml(kustomization, header=common.header(manifest, "k8s"))}


def _labels(manifest: dict, pool: dict) -> dict[str, str]:
    return {"pdplan.dev/pool": pool["name"], "pdplan.dev/phase": pool["phase"], **common.manifest_labels(manifest)}


def _metadata(manifest: dict, name: str, labels: dict[str, str]) -> dict:
    return {"name": name, "labels": labels, "annotations": common.manifest_annotations(manifest)}


def _workload(manifest: dict, pool: dict, image: str, options: pods.PodOptions, engine: str) -> dict:
    size = common.pods_per_instance(manifest, pool)
    labels = _labels(manifest, pool)
    annotations = common.manifest_annotations(manifest)
    if engine == "vllm" and vllm.has_bootstrap(manifest, pool):
        annotations = {**annotations, BOOTSTRAP_ANNOTATION: str(vllm.MOONCAKE_BOOTSTRAP_BASE)}
    if engine == "sglang" and sglang.serves_bootstrap(pool):
        annotations = {**annotations, SGLANG_BOOTSTRAP_ANNOTATION: str(sglang.BOOTSTRAP_PORT_BASE)}
    serving = {"metadata": {"labels": {**labels, ENDPOINT_LABEL: "http"}, "annotations": annotations},
               "spec": _pod_spec(manifest, pool, image, options, size, engine, probed=True)}
    if size == 1:
        return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": _metadata(manifest, pool["name"], labels),
                "spec": {"replicas": pool["replicas"],
                         "selector": {"matchLabels": {"pdplan.dev/pool": pool["name"]}},
                         "template": serving}}
    worker = {"metadata": {"labels": labels, "annotations": common.manifest_annotations(manifest)},
              "spec": _pod_spec(manifest, pool, image, options, size, engine, probed=False)}
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


def _pod_spec(manifest: dict, pool: dict, image: str, options: pods.PodOptions, size: int, engine: str, *,
              probed: bool) -> dict:
    if engine == "sglang":
        command, args, env, ports = _sglang_container(manifest, pool, size)
    else:
        command, args = vllm.pod_command(manifest, pool, POD_PORT, spans_nodes=size > 1)
        env, ports = vllm.pod_env(manifest, pool), vllm.pod_ports(manifest, pool, POD_PORT)
    container = {"name": engine, "image": image, "command": command, "args": args,
                 "env": env + pods.hf_env(options), "ports": ports, "resources": pods.resources(manifest, pool)}
    if probed:
        container.update(pods.health_probes(pool))
    volume, mount = pods.cache_volume(pool)
    volumes, mounts = [volume], [mount]
    for shm, shm_mount in pods.shm_volume(pool):
        volumes.append(shm)
        mounts.append(shm_mount)
    container["volumeMounts"] = mounts
    return {**pods.node_selection(manifest, pool), "containers": [container], "volumes": volumes}


def _sglang_container(manifest: dict, pool: dict, size: int) -> tuple[list[str], list[str], list[dict], list[dict]]:
    """Command, args, env and ports of an SGLang pod of an instance of ``size`` pods (see the module's docstring);
    the DeepEP low-latency budget its decode steps were verified within in the env, as the scripts export it."""
    args = sglang.engine_args(manifest, pool, spans_nodes=size > 1, backend=sglang.transfer_backend(manifest),
                              port=POD_PORT)
    env = [{"name": name, "value": value} for name, value in sglang.deepep_environment(pool, size > 1).items()]
    ports = [{"name": "http", "containerPort": POD_PORT, "protocol": "TCP"}]
    if sglang.serves_bootstrap(pool):
        args += ["--disaggregation-bootstrap-port", str(sglang.BOOTSTRAP_PORT_BASE)]
        ports.append({"name": "bootstrap", "containerPort": sglang.BOOTSTRAP_PORT_BASE, "protocol": "TCP"})
    if size > 1:
        args += [*sglang.rendezvous_args(size, "$(LWS_LEADER_ADDRESS)"), "--node-rank", "$(LWS_WORKER_INDEX)"]
        env.append({"name": "LWS_WORKER_INDEX", "valueFrom": {"fieldRef": {"fieldPath":
                                                                           f"metadata.labels['{LWS_WORKER_INDEX}']"}}})
    return ["python3", "-m", "sglang.launch_server"], args, env, ports


def router_args(manifest: dict, engine: str = "vllm") -> list[str]:
    """The router's arguments: service discovery of this manifest's serving pods in the router's
    own namespace (``$(POD_NAMESPACE)``: the kubelet expands ``$(VAR)`` in a container's args from its
    env, kubernetes ``pkg/kubelet/container/helpers.go`` ExpandContainerCommandAndArgs), flags vllm-router and
    sglang-router 0.3.2 share; in P/D mode each router's own (:func:`_pd_args`)."""
    selector = [f"{ENDPOINT_LABEL}=http", f"pdplan.dev/manifest-hash={common.hash_hex(manifest)[:16]}"]
    args = ["--host", "0.0.0.0", "--port", str(ROUTER_PORT), "--service-discovery",
            "--service-discovery-port", str(POD_PORT), "--service-discovery-namespace", "$(POD_NAMESPACE)"]
    if not common.is_disaggregated(manifest):
        return args + ["--selector", "pdplan.dev/phase=colocated", *selector]
    return args + _pd_args(manifest, engine) + ["--prefill-selector", "pdplan.dev/phase=prefill", *selector,
                                                "--decode-selector", "pdplan.dev/phase=decode", *selector]


def _pd_args(manifest: dict, engine: str) -> list[str]:
    """P/D mode of the engine's router with the plan's prefill policy: vllm-router's with its KV connector,
    sglang-router's (:data:`sglang.ROUTER_POLICIES`), which reads each prefill pod's bootstrap port from its
    annotation."""
    if engine == "sglang":
        return ["--pd-disaggregation", *common.prefill_policy_args(manifest, sglang.ROUTER_POLICIES)]
    args = ["--vllm-pd-disaggregation"]
    connector = manifest["transfer"]["connector"]
    if connector in vllm.ROUTER_CONNECTORS:
        args += ["--kv-connector", connector]
    return args + common.prefill_policy_args(manifest, vllm.ROUTER_POLICIES)


def _router(manifest: dict, options: pods.PodOptions, engine: str) -> list[dict]:
    """The router's ServiceAccount, the Role to watch pods and its binding, its Deployment and Service."""
    labels = {"pdplan.dev/component": ROUTER, **common.manifest_labels(manifest)}
    meta = _metadata(manifest, ROUTER, labels)
    command = ["python3", "-m", "sglang_router.launch_router"] if engine == "sglang" else ["vllm-router"]
    args = router_args(manifest, engine)
    container = {"name": ROUTER, "image": options.router_image or DEFAULT_ROUTER_IMAGES[engine],
                 "command": command, "args": args,
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
