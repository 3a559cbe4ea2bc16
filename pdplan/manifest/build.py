"""The deployment manifest ``pdplan optimize --out`` writes: the whole decision in one file.

It freezes what the article's release procedure needs before anything is applied (0x01A, 0x0FF):
the model and KV-cache identity, the workload and SLO it was planned for, the pools, the node
map and route epoch, the KV connector and its roles, every prediction with where it came from,
the preregistered colocated fallback, the release gates and the rollback order (0x0FG), and the
sha256 of every input. Nothing here is recomputed: each value is copied from the optimizer's
verified answer or derived by a named formula.
"""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass, replace
from importlib import resources
from pathlib import Path

import numpy as np

from pdplan import __version__, limits, names
from pdplan.errors import InternalError, PdplanError
from pdplan.fileio import WRITTEN_DIGITS, sha256_file, update_digest
from pdplan.hardware import get_gpu
from pdplan.manifest.document import API_VERSION, KIND, digest, seal
from pdplan.modelspec import KV_BYTES, ModelSpec, kv_bytes_per_token, kv_heads_per_gpu, weight_bytes_per_gpu
from pdplan.placement import Solution
from pdplan.planner import PlanReport
from pdplan.planner.measure import mean_kv_bytes_per_request
from pdplan.planner.plans import lent_path, pool_name
from pdplan.planner.report import links_dict, phase_dict, pools, search_dict, verification_dict
from pdplan.planner.request import Inputs, PlanRequest
from pdplan.planner.search import Checked
from pdplan.sim.plan import Plan
from pdplan.sim.planfile import plan_to_dict
from pdplan.vocabulary import Connector
from pdplan.workload import trace_stats

UNKNOWN = "unknown"
GIB = 2**30
#: 0x0FG: the order a rollback runs in; validate rejects any other.
ROLLBACK = ("STOP_NEW_ROUTES", "ADVANCE_ROUTE_EPOCH", "DRAIN_OR_ABORT_TRANSFERS", "ENABLE_COLOCATED_FALLBACK",
            "DISABLE_CONNECTOR", "REVOKE_CAPABILITIES", "RECLAIM_UNPUBLISHED", "ROLLBACK_COMPLETE")
RELEASE_STAGES = ("SHADOW", "CANARY", "ACTIVE")
#: vLLM's connector class per KV connector (checked against vLLM 0.33's registered connectors).
CONNECTORS = {Connector.NIXL: "NixlConnector", Connector.MOONCAKE: "MooncakeConnector",
              Connector.LMCACHE: "LMCacheConnectorV1"}
#: vLLM's KV roles: a mixed machine (Splitwise's mixed pool) both prefills and takes handoffs.
KV_ROLES = {"prefill": "kv_producer", "decode": "kv_consumer", "mixed": "kv_both"}
#: Simulator pool settings a manifest carries, to rebuild the plan it was verified as, each as the plan
#: file states it (a prefill pool's prefix-cache tier with its bandwidth in GB/s).
SCHEDULING = ("policy", "chunk_tokens", "max_prefill_batch_tokens", "max_running_requests", "prefix_cache_blocks",
              "cache_tier", "rank_router", "handoff", "first_token")
PACKAGE = Path(str(resources.files("pdplan")))
#: vLLM's default KV block (tokens per paged block), and the memory share behind the KV capacity.
KV_BLOCK_TOKENS = 16
MEMORY_UTILIZATION = 0.9


@dataclass(frozen=True, kw_only=True)
class Identity:
    """What the user says about the checkpoint; anything not given is written as ``unknown``, but
    the checkpoint, when not given, is the model's Hugging Face repository if it has one, and its
    revision the commit the model's config was read at, if known."""

    checkpoint: str | None = None
    revision: str = UNKNOWN
    tokenizer: str = UNKNOWN
    adapter: str = UNKNOWN
    position: str = UNKNOWN     #: position/RoPE policy, e.g. "rope theta=500000 llama3-scaling"

    def __post_init__(self):
        problem = None if self.revision == UNKNOWN else names.revision(self.revision)
        if problem:  # the exports pass it to the engines' --revision as one argument
            raise PdplanError(f"--revision {problem}, got {self.revision[:60]!r}", field="revision")

    def checkpoint_of(self, model: ModelSpec) -> str:
        """The checkpoint given, else ``model``'s Hugging Face repository, else ``unknown``."""
        if self.checkpoint is not None:
            return self.checkpoint
        return model.hf_repo or UNKNOWN

    def revision_of(self, model: ModelSpec) -> str:
        """The revision given, else the commit ``model`` was read at when it is its repository's, else ``unknown``."""
        if self.revision != UNKNOWN or self.checkpoint not in (None, model.hf_repo):
            return self.revision
        return model.hf_revision or UNKNOWN


@dataclass(frozen=True, kw_only=True)
class Release:
    """The promotion gates (0x0FF) a canary must hold before P/D becomes active."""

    connector: Connector = Connector.NIXL
    canary_share: float = 0.05
    transfer_failure_rate_max: float = 0.001


def build_manifest(report: PlanReport, *, identity: Identity = Identity(), release: Release = Release(),
                   timestamp: str | None = None) -> dict:
    """The sealed manifest of ``report``'s verified answer: its simulator plan timed as the
    request's profile source times it, the files the request read and the seed it ran with."""
    answer, chosen, request = report.answer, report.chosen, report.request
    if answer is None:
        raise InternalError("only a verified answer has a manifest")
    files = input_files(request_inputs(request))
    source = request.profiles
    plan = replace(answer.plan, engine=source.engine, engine_version=source.engine_version, compose=source.compose,
                   speculative=source.speculative_for(request.model), moe_activations=source.moe_activations)
    manifest = {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"name": _name(request.model, chosen.mode), **({"created": timestamp} if timestamp else {})},
        "identity": _identity(request.model, identity),
        "workload": _workload(request, files["trace"]),
        "pools": _pools(report, plan),
        "placement": {"route_epoch": 1, "affinity": chosen.affinity or "high",
                      "nodes": node_map(answer.solution, request.cluster)},
        "transfer": _transfer(plan, links_dict(request, answer, chosen.affinity), request, release.connector,
                              answer.solution, chosen.affinity or "high"),
        "predictions": _predictions(report),
        "fallback": _fallback(report),
        "release": _release(request, release),
        "rollback": list(ROLLBACK),
        "provenance": _provenance(report, plan, files),
    }
    return seal(manifest)


def request_inputs(request: PlanRequest) -> Inputs:
    """The files ``request`` was read from, which every document records."""
    if request.inputs is None:
        raise InternalError("a document records its input files: the request names none")
    return request.inputs


def _name(model: ModelSpec, mode: str) -> str:
    return f"{model.name.replace('@', '-').replace(',', '-').replace('=', '-')}-{mode}".lower()


def kv_cache_abi(model: ModelSpec, block_tokens: int = KV_BLOCK_TOKENS) -> dict:
    """How each KV byte is decoded (0x01A, 0x10): without an equal ABI on both sides a handoff is
    not exact. Its hash is what the producer and consumer compare."""
    abi = {"layers": model.layers, "kv_heads": model.kv_heads, "head_dim": model.head_dim,
           "dtype": model.kv_dtype, "block_tokens": block_tokens,
           "layout": "paged, per layer: K and V blocks of [block_tokens, kv_heads, head_dim]"}
    if model.attention == "mla":  # additive: a GQA model's ABI, and its hash, are as before
        abi.update(attention="mla", kv_lora_rank=model.kv_lora_rank, qk_rope_head_dim=model.qk_rope_head_dim,
                   layout="paged, per layer: one block of [block_tokens, kv_lora_rank + qk_rope_head_dim]")
    return {**abi, "hash": digest(abi)}


def abi_kv_bytes_per_token(abi: dict) -> int:
    """KV bytes per token a KV-cache ABI implies (K/V heads, or the latent of multi-head latent
    attention), by the one formula :func:`pdplan.modelspec.kv_bytes_per_token`."""
    latent = abi.get("kv_lora_rank", 0) + abi.get("qk_rope_head_dim", 0) if abi.get("attention") == "mla" else 0
    return kv_bytes_per_token(abi["layers"], abi["kv_heads"], abi["head_dim"], KV_BYTES[abi["dtype"]],
                              latent_width=latent)


def _identity(model: ModelSpec, identity: Identity) -> dict:
    # The checkpoint's precision tells an export whether the engines quantize it at load
    # (export/common.py ``precision``); it is the model's own checkpoint's (catalog or config.json).
    checkpoint = {"id": identity.checkpoint_of(model), "revision": identity.revision_of(model),
                  "dtype": model.checkpoint_dtype}
    if model.remote_code:  # written only when set: every other manifest reads as before
        checkpoint["trust_remote_code"] = True
    return {"model": model.name, "checkpoint": checkpoint,
            "tokenizer": identity.tokenizer, "adapter": identity.adapter, "position": identity.position,
            "weights_dtype": model.weight_dtype, "kv_cache": kv_cache_abi(model),
            "kv_bytes_per_token": model.kv_bytes_per_token}


def _workload(request: PlanRequest, trace: dict) -> dict:
    stats = trace_stats(request.workload)
    # only a gridded trace records its grid, so the manifests of continuous traces read as before
    grid = {} if stats.arrival_grid_s is None else {"arrival_grid_s": stats.arrival_grid_s}
    return {"trace": {**trace, **{k: getattr(stats, k) for k in ("requests", "duration_s", "mean_rate_rps",
                                                               "peak_rate_rps", "interarrival_cv")}, **grid,
                      "prompt_tokens": asdict(stats.prompt_tokens), "output_tokens": asdict(stats.output_tokens)},
            "slo": {"objectives": [{"metric": o.metric, "threshold_ms": o.threshold_s * 1e3,
                                    "attainment": o.attainment} for o in request.slo.objectives]},
            "target_rps": request.target_rps,
            "arrivals": request.settings.arrivals}


def _pools(report: PlanReport, plan: Plan) -> list[dict]:
    """One entry per simulator pool: its capacity from the optimizer, and its memory plan with
    the KV capacity of the profile its verification ran on."""
    model = report.request.model
    settings = scheduling(plan)
    facts = {(p["phase"], p["gpu"], p["tp"], p["pp"], p.get("dp", 1), p.get("ep", 1)): p
             for p in pools(report.answer.solution, report)}
    profiles = {(m.shape.gpu, m.shape.tp, m.shape.pp, m.shape.dp, m.shape.ep): m.profile for m in report.measured}
    found = []
    for pool in plan.pools:
        fact = facts[(pool.phase, pool.gpu, pool.tp, pool.pp, pool.dp, pool.ep)]
        gpu = get_gpu(pool.gpu)
        weights = weight_bytes_per_gpu(model, pool.tp, pool.pp, ep=pool.ep, redundant_experts=pool.redundant_experts,
                                       dp=pool.dp)
        # a wide profile describes one DP rank: its KV capacity is the rank's, and the instance holds dp of them
        profile = profiles[(pool.gpu, pool.tp, pool.pp, pool.dp, pool.ep)]
        kv_tokens = profile.kv_capacity_tokens * pool.dp
        found.append({
            "name": pool.name, "phase": pool.phase, "model": pool.model, "gpu": pool.gpu, "tp": pool.tp,
            "pp": pool.pp, "dp": pool.dp, "ep": pool.ep,
            **({"redundant_experts": pool.redundant_experts} if pool.redundant_experts else {}),
            **({"all_to_all": str(pool.all_to_all)} if pool.exchanges_tokens else {}),
            "replicas": pool.replicas, "gpus": pool.replicas * pool.gpus,
            "engine": report.request.profiles.engine,
            "scheduling": settings[pool.name],
            "capacity": {"per_instance_rps": fact["goodput_rps_per_instance"], "pool_rps": fact["capacity_rps"]},
            # EP is the pool's ``ep``; manifests before it recorded memory.expert_parallel (document.pool_shape)
            "memory": {"gpu_memory_gib": gpu.memory_bytes / GIB, "memory_utilization": MEMORY_UTILIZATION,
                       "weights_gib_per_gpu": weights / GIB, "kv_capacity_tokens_per_instance": kv_tokens,
                       "kv_heads_per_gpu": kv_heads_per_gpu(model, pool.tp)},
            "profile": {"source": fact["profile"], "method": fact["profile_method"],
                        "fallback": fact["profile_fallback"], **recorded_prompt_budget(pool, profile),
                        # only where the source was replayed against measured deployments like the pool
                        **({} if fact["profile_accuracy"] is None else {"accuracy": fact["profile_accuracy"]})},
        })
    return found


def recorded_prompt_budget(pool, profile) -> dict:
    """A prefill pool's prompt tokens per batch of one rank, as its verification ran (the pool's cap, else its
    profile's): the exports start the engine with it (an engine's own default may be smaller, and SGLang
    divides its chunk among attention-DP ranks). Empty for the other pools."""
    if pool.phase != "prefill":
        return {}
    return {"max_prefill_batch_tokens": pool.max_prefill_batch_tokens or profile.max_prefill_batch_tokens}


def scheduling(plan: Plan) -> dict[str, dict]:
    """Each pool's simulator settings, by pool name, as the plan file states them
    (:func:`pdplan.sim.planfile.plan_to_dict`): only those set, so a manifest of a plan without them reads,
    and hashes, as before; :func:`pdplan.manifest.plan.plan_of_manifest` hands them back to the plan
    file's rules."""
    return {p["name"]: {k: p[k] for k in SCHEDULING if k in p} for p in plan_to_dict(plan)["pools"]}


def routing(plan: Plan) -> dict:
    """The prefill router of a P/D plan and its early rejection as the manifest's transfer section
    states them: ``router`` only when it is not least-loaded and ``early_rejection`` only when set
    (the plan file's rules, :func:`pdplan.sim.planfile.plan_to_dict`), so a manifest of a plan without
    them, and every manifest written before they were settings, reads and hashes as before."""
    doc = plan_to_dict(plan)
    found = {} if doc.get("router") is None else {"router": str(doc["router"])}
    return found | ({"early_rejection": doc["early_rejection"]} if "early_rejection" in doc else {})


def node_map(solution, cluster) -> list[dict]:
    """The node map: each node, its GPUs, the Kubernetes node label that selects its type when one is
    known (:attr:`pdplan.hardware.NodeType.selector`), and the instance stages on it with their GPU indices (and
    the instance's node rank there when a stage spans nodes). A node's GPU is its hardware (a
    power-capped setting runs on its base GPU's nodes), whichever instance lands there first."""
    per_type = {n.name: n.gpus_per_node for n in cluster.nodes}
    hardware = {n.name: n.gpu.physical for n in cluster.nodes}
    labels = {n.name: n.selector for n in cluster.nodes}
    nodes: dict[str, dict] = {}
    for inst in solution.instances:
        ranks = node_ranks(inst.stage_nodes)
        for stage, _, node, gpus in inst.parts():
            label = labels[inst.node_type]
            entry = nodes.setdefault(node, {"node": node, "node_type": inst.node_type, "gpu": hardware[inst.node_type],
                                            "gpus": per_type[inst.node_type],
                                            **({"node_label": {"key": label[0], "value": label[1]}} if label else {}),
                                            "instances": []})
            entry["instances"].append({"instance": inst.id, "pool": pool_name(inst.candidate), "stage": stage,
                                       **({"node_rank": ranks[node]} if len(ranks) > 1 else {}),
                                       "gpu_indices": list(gpus)})
    return [nodes[name] for name in sorted(nodes, key=_node_order)]


def node_ranks(stage_nodes) -> dict[str, int]:
    """Each node of an instance and its node rank: the order the nodes first hold a stage, so rank 0, the
    leader, holds stage 0 and global rank 0, where the engines' distributed init address lives (SGLang
    ``--node-rank``, ``--dist-init-addr``). A node map writes them only for an instance spanning nodes."""
    return {node: rank for rank, node in enumerate(dict.fromkeys(stage_nodes))}


def _node_order(name: str) -> tuple[str, int]:
    kind, _, index = name.rpartition("-")
    return (kind, int(index)) if index.isdigit() else (name, 0)


def _transfer(plan: Plan, links: list[dict], request: PlanRequest, connector: Connector, solution: Solution,
              affinity: str) -> dict:
    """The KV handoff: connector, roles, bytes per request (the whole prompt's KV, 0x08D), each
    path's demand against its capacity, the router that picks each arrival's prefill instance when it
    is not least-loaded (:func:`routing`), and with a mixed pool or borrowing when work spills (and,
    borrowing, the link a lent prefill instance receives on). A colocated plan moves no KV: connector
    ``none``."""
    if plan.colocated:
        return {"connector": "none", "schedule": None, "roles": {}, "kv_bytes_per_request": None, "paths": []}
    p99_prompt = float(np.percentile(request.workload.prompt_tokens, 99))
    demand = {(link["from"], link["to"]): link for link in links}
    paths = []
    for link in plan.links:
        row = demand[(link.from_pool, link.to_pool)]
        paths.append({"from": link.from_pool, "to": link.to_pool, "path": row["path"],
                      "bandwidth_gb_s": link.bandwidth_bytes_per_s / 1e9, "setup_ms": link.setup_s * 1e3,
                      "demand_gb_s": row["demand_gb_s"], "capacity_gb_s": row["capacity_gb_s"],
                      "kv_copies": row["kv_copies"]})
    roles = {p.name: KV_ROLES[p.phase] for p in plan.pools}
    spill = ({"spill": {"prefill_queue_tokens": plan.spill_tokens, "decode_kv_share": plan.kv_share}}
             if plan.pools_of("mixed") or plan.borrow else {})
    if plan.borrow:
        spill["spill"] |= {"borrow": True, "borrow_chunk_tokens": plan.borrow_chunk_tokens, "lent_link": {
            "path": lent_path(solution, affinity), "bandwidth_gb_s": plan.default_link.bandwidth_bytes_per_s / 1e9,
            "setup_ms": plan.default_link.setup_s * 1e3}}
    return {"connector": connector, "connector_class": CONNECTORS[connector], "schedule": plan.transfer_schedule,
            **routing(plan), "roles": roles,
            "kv_bytes_per_request": {"mean": mean_kv_bytes_per_request(request.workload, request.model),
                                     "p99": p99_prompt * request.model.kv_bytes_per_token},
            "paths": paths, **spill}


def _valued(value, source: str) -> dict:
    return {"value": value, "source": source}


def _predictions(report: PlanReport) -> dict:
    request, chosen, solution = report.request, report.chosen, report.answer.solution
    v = verification_dict(request, report.answer.verification)
    attainment = [{"metric": o["metric"], "threshold_ms": o["threshold_s"] * 1e3, "target": o["target"],
                   "mean": o["mean"], "low": o["low"], "high": o["high"]} for o in v["per_objective"]]
    return {
        "goodput_rps": _valued(solution.goodput_rps, "simulated per pool, combined by the integer program"),
        "end_to_end_goodput_rps": _valued(report.end_to_end.goodput_rps, "simulated: the whole plan"),
        "attainment": {"per_objective": attainment, "joint": v["joint"],
                       "source": "simulated: the whole plan, 95% t-intervals over the runs"},
        "gpus": _valued(solution.gpus_total, "derived: replicas × TP × DP × PP"),
        "cost_per_hour": _valued(solution.usd_per_hour, "derived: GPUs × cluster price"),
        "power_w": _valued(solution.power_w, "derived: GPUs × power limit"),
        "verification": {"passed": v["passed"], "rule": v["rule"], "rate_rps": v["rate_rps"],
                         "seeds": list(v["seeds"]), "requests": list(v["requests"]), "base_seed": request.seed,
                         "min_run_s": v["min_run_s"], "run_s": v["run_s"]},
        "search": search_dict(chosen, request.objective),
    }


def _fallback_pool(shape: dict) -> dict:
    """A fallback pool: its GPU, TP, PP and replicas, and a wide shape's DP and EP."""
    return {k: shape[k] for k in ("gpu", "tp", "pp", "dp", "ep", "replicas") if k in shape}


def _fallback(report: PlanReport) -> dict:
    """0x0FF: the same-target colocated plan, evaluated before release, that rollback enables; when
    no colocated plan meets the target on the cluster, the one that serves the most, verified at the
    rate it holds (``rate_rps`` below the answer's: the share of traffic a rollback keeps)."""
    found = report.rollback
    if found is report.answer:
        return {"mode": "colocated", "is_answer": True, "pools": [
            _fallback_pool(p) for p in pools(found.solution, report)],
            **_verified_totals(found)}
    if found is None:
        return {"mode": "colocated", "is_answer": False, "pools": [], "gpus": 0, "cost_per_hour": 0.0,
                "verified": False, "joint_attainment": None}
    return {"mode": "colocated", "is_answer": False,
            "pools": [_fallback_pool(s) for s in phase_dict(found.solution, "colocated")["shapes"]],
            **_verified_totals(found), "rate_rps": found.verification.rate_rps}


def _verified_totals(checked: Checked) -> dict:
    """A checked plan's GPUs and cost, and its verdict with the joint attainment behind it."""
    return {"gpus": checked.solution.gpus_total, "cost_per_hour": checked.solution.usd_per_hour,
            "verified": checked.verification.passed, "joint_attainment": checked.verification.clocks["joint"].mean}


def _release(request, release: Release) -> dict:
    attainment = min(o.attainment for o in request.slo.objectives)
    return {"stages": list(RELEASE_STAGES), "state": "PINNED",
            "gates": {"exactness_mismatches_max": 0, "stale_publications_max": 0,
                      "unauthorized_transfers_max": 0, "slo_attainment_min": attainment,
                      "transfer_failure_rate_max": release.transfer_failure_rate_max,
                      "canary_share": release.canary_share}}


def _input(path: Path, what: str, limit: int) -> dict:
    """An input as the user named it, with its sha256 (see :func:`input_sha256`)."""
    return {"path": str(path), "sha256": input_sha256(path, what, limit)}


def _shipped(name: str, what: str) -> dict:
    """A file or folder shipped in the package, named ``pdplan:<name>``, with its sha256."""
    return {"path": f"pdplan:{name}", "sha256": input_sha256(PACKAGE / name, what, limits.TABLE_BYTES)}


def input_sha256(path: Path, what: str, limit: int) -> str:
    """An input's sha256 as a manifest records it: a folder's (see :func:`folder_digest`), else the
    file's. Each file is read as every input is: a FIFO, device or missing path given as ``what``
    is an error naming it, and no file may hold more than ``limit`` bytes."""
    return folder_digest(path, what, limit) if Path(path).is_dir() else sha256_file(path, what=what, limit=limit)


def folder_digest(folder: Path, what: str, limit: int) -> str:
    """sha256 over every regular file under a folder, each as its relative path, NUL, its bytes,
    in path order. FIFOs, devices and sockets in it are passed over, never opened."""
    h = hashlib.sha256()
    for f in sorted(p for p in Path(folder).rglob("*") if p.is_file()):
        h.update(f.relative_to(folder).as_posix().encode() + b"\0")
        update_digest(h, f, what=f"file of the {what} folder", limit=limit)
    return h.hexdigest()


#: What each input a manifest records is called in errors, and the most one of its files may hold.
TRACE = ("trace", limits.TRACE_BYTES)
CLUSTER = ("cluster file", limits.YAML_BYTES)
PROFILES = ("profiles", limits.TABLE_BYTES)
MODEL = ("model file", limits.YAML_BYTES)


def input_files(inputs: Inputs) -> dict:
    """Every input read once: the user's files, then the shipped profiles and catalog."""
    return {"trace": _input(inputs.trace, *TRACE),
            "cluster": _shipped("data/cluster.yaml", CLUSTER[0]) if inputs.cluster is None
            else _input(inputs.cluster, *CLUSTER),
            "profiles": [_input(p, *PROFILES) for p in inputs.profiles],
            "shipped_profiles": _shipped("data/profiles", "shipped profiles"),
            "catalog": _shipped("catalog", "catalog"),
            **({"model": _input(inputs.model, *MODEL)} if inputs.model else {})}


def _provenance(report: PlanReport, plan: Plan, files: dict) -> dict:
    request, solution = report.request, report.answer.solution
    return {
        "pdplan_version": __version__,
        "float_precision": f"{WRITTEN_DIGITS} significant digits",
        "seed": request.seed,
        "inputs": files,
        "profiles": {"engine": plan.engine, "engine_version": plan.engine_version, "compose": plan.compose,
                     "sources": request.profiles.describe(), "serving_engine": request.profiles.serving_engine,
                     # written only when the deployment drafts, so other manifests read (and hash) as before
                     **({} if plan.speculative is None else {"speculative": plan.speculative.to_dict()}),
                     # likewise only when the run stated it, so every other manifest reads (and hashes) as before
                     **({} if plan.moe_activations is None else {"moe_activations": str(plan.moe_activations)})},
        "solver": {"status": solution.status, "objective": solution.objective, "bound": solution.bound,
                   "gap": solution.gap, "objective_name": request.objective},
    }
