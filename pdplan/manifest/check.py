"""``pdplan validate``: is a manifest what ``optimize`` sealed, self-consistent, and still current?

Each check returns violations as (field path, message); none means valid. The order: the schema
(a manifest that breaks it is not checked further), the content hash (a hand edit is tampering,
traced to the sections whose hashes changed), consistency (capacity against the target, GPUs per
instance as the engines count them (TP × DP × PP), expert parallelism against the experts, memory,
prefix caches on the pools that have them, a prefill pool's prompt budget, the node map
(:mod:`pdplan.manifest.node_map`), link demand, KV roles, a prefill router only in a P/D plan, the
KV-cache ABI, the rollback order, the preregistered fallback, the shapes the recorded engine can run),
identity under ``strict``, the inputs' sha256 when they are given, and a re-simulation when asked.
"""

from __future__ import annotations

from pathlib import Path

from pdplan import engines, names
from pdplan.errors import PdplanError
from pdplan.experts import all_to_all_rejection
from pdplan.fileio import input_file
from pdplan.handoff import handoff_copies
from pdplan.hardware import get_gpu, gpu_catalog, load_cluster
from pdplan.latency.compose import moe
from pdplan.manifest.build import (
    CLUSTER,
    GIB,
    KV_ROLES,
    PROFILES,
    ROLLBACK,
    TRACE,
    UNKNOWN,
    abi_kv_bytes_per_token,
    input_sha256,
    kv_cache_abi,
)
from pdplan.manifest.document import (
    all_to_all,
    content_hash,
    digest,
    ep_field,
    pool_shape,
    prompt_budget,
    redundant_experts,
    routed_experts,
    schema_errors,
    search_engine,
    section_hashes,
)
from pdplan.manifest.node_map import domain_violations, node_map_violations, spanned_node_gpus
from pdplan.manifest.violation import Violation
from pdplan.modelref import get_model
from pdplan.modelspec import expert_placement_rejection, weight_bytes_per_gpu
from pdplan.placement import serves
from pdplan.schema import shown

#: Relative slack for values derived from others (they are written at 6 significant digits).
DERIVED_TOLERANCE = 1e-4
#: Pools that take KV handoffs: decode pools and Splitwise's mixed machines.
DECODING = ("decode", "mixed")


def check_manifest(manifest: dict, *, strict: bool = False, trace: Path | None = None,
                   profiles: Path | None = None, cluster: Path | None = None) -> list[Violation]:
    """Every violation of ``manifest``; an empty list means it is valid."""
    errors = schema_errors(manifest)
    if errors:
        return [Violation(field, message) for field, message in errors]
    found = tampering(manifest)
    for check in (_pools, _placement, _transfer, _engine, _identity, _fallback_and_rollback, _predictions,
                  name_violations):
        found += check(manifest)
    if strict:
        found += _strict_identity(manifest)
    found += stale_inputs(manifest, trace=trace, profiles=profiles, cluster=cluster)
    if cluster is not None:
        found += domain_violations(manifest["placement"]["nodes"], load_cluster(cluster))
    return found


def tampering(manifest: dict) -> list[Violation]:
    """A content hash that does not match: name each part whose own hash changed (or appeared,
    or went missing); with none, the edit was to the provenance, the metadata or the hash."""
    provenance = manifest["provenance"]
    if content_hash(manifest) == provenance["content_hash"]:
        return []
    recorded, now = provenance.get("sections", {}), section_hashes(manifest)
    edited = sorted(part for part in set(recorded) | set(now) if recorded.get(part) != now.get(part))
    if not edited:
        return [Violation("provenance.content_hash", "content hash mismatch: the manifest was edited after it was "
                                                     "sealed (provenance, metadata or the hash itself)")]
    return [Violation(part, "edited after the manifest was sealed (content hash mismatch)") for part in edited]


def _close(a: float, b: float) -> bool:
    return abs(a - b) <= DERIVED_TOLERANCE * max(abs(a), abs(b), 1e-12)


def _pools(manifest: dict) -> list[Violation]:
    found = []
    pools = manifest["pools"]
    names = [p["name"] for p in pools]
    if len(set(names)) != len(names):
        found.append(Violation("pools", "pool names must be unique"))
    phases = {p["phase"] for p in pools}
    if phases not in ({"colocated"}, {"prefill", "decode"}, {"prefill", "decode", "mixed"}):
        found.append(Violation("pools", f"must be all colocated, or prefill and decode with or without a mixed "
                                        f"pool, got {sorted(phases)}"))
    target = manifest["workload"]["target_rps"]
    verified = manifest["predictions"]["verification"]
    if verified["passed"] and target is not None and verified["rate_rps"] >= target:
        target = None  # the simulation passed the whole plan at the target: it wins over the decomposition
    for phase in sorted(phases - {"mixed"}):  # a mixed pool counts in both phases (Splitwise's ledger)
        indices = [i for i, p in enumerate(pools) if serves(p["phase"], phase)]
        capacity = sum(pools[i]["capacity"]["pool_rps"] for i in indices)
        if target is not None and capacity < target * (1 - DERIVED_TOLERANCE):
            found.append(Violation(f"pools[{indices[0]}].capacity.pool_rps",
                                   f"{phase} capacity {capacity:.4g} req/s is below the target {target:.4g} req/s"))
    model = _model(manifest)
    for i, p in enumerate(pools):
        found += pool_violations(f"pools[{i}]", p, model) + _prefix_cache_violations(f"pools[{i}]", p)
        found += _prompt_budget_violations(f"pools[{i}]", p) + _handoff_violations(f"pools[{i}]", p)
    return found + _drafting(manifest, model) + _activations(manifest, model)


def _handoff_violations(where: str, pool: dict) -> list[Violation]:
    """How a pool takes a prefilled request and where its first token comes from (``scheduling.handoff``,
    ``scheduling.first_token``), as the plan file admits them: stated on decode pools only
    (:class:`pdplan.sim.plan.Pool`)."""
    if pool["phase"] == "decode":
        return []
    return [Violation(f"{where}.scheduling.{key}", f"applies to decode pools, not a {pool['phase']} pool")
            for key in ("handoff", "first_token") if key in pool["scheduling"]]


def _prompt_budget_violations(where: str, pool: dict) -> list[Violation]:
    """The prompt budget a pool's verification ran (:func:`pdplan.manifest.build.recorded_prompt_budget`): recorded on
    prefill pools only, and the pool's own cap when it states one."""
    recorded = pool["profile"].get("max_prefill_batch_tokens")
    if recorded is None:
        return []
    field = f"{where}.profile.max_prefill_batch_tokens"
    if pool["phase"] != "prefill":
        return [Violation(field, f"applies to prefill pools, not a {pool['phase']} pool")]
    cap = pool["scheduling"].get("max_prefill_batch_tokens")
    if cap is not None and cap != recorded:
        return [Violation(field, f"{recorded}, but the pool's scheduling.max_prefill_batch_tokens is {cap}: the "
                                 "verification ran the pool's cap")]
    return []


def _prefix_cache_violations(where: str, pool: dict) -> list[Violation]:
    """A pool's prefix cache as the plan file admits it (:class:`pdplan.sim.plan.Pool`): its HBM size
    (``scheduling.prefix_cache_blocks``) on prefill, decode and colocated pools, a second tier
    (``scheduling.cache_tier``) on prefill pools only."""
    scheduling, found = pool["scheduling"], []
    if "prefix_cache_blocks" in scheduling and pool["phase"] == "mixed":
        found.append(Violation(f"{where}.scheduling.prefix_cache_blocks", "applies to prefill, decode and colocated "
                                                                          "pools, not a mixed pool"))
    if "cache_tier" in scheduling and pool["phase"] != "prefill":
        found.append(Violation(f"{where}.scheduling.cache_tier", f"applies to prefill pools, not a {pool['phase']} "
                                                                 "pool"))
    return found


def _drafting(manifest: dict, model) -> list[Violation]:
    """MTP drafts with the checkpoint's own multi-token-prediction layers: a manifest timed with it for
    a model that has none describes engines that refuse to start (the planner refuses the flag too,
    :meth:`pdplan.latency.source.ProfileSource.speculative_for`)."""
    drafting = manifest["provenance"]["profiles"].get("speculative")
    if model is None or drafting is None or drafting["method"] != "mtp" or model.mtp_layers:
        return []
    return [Violation("provenance.profiles.speculative.method", f"mtp drafts with the checkpoint's multi-token-"
                      f"prediction layers, and {model.base_name} has none (config.json num_nextn_predict_layers)")]


def _activations(manifest: dict, model) -> list[Violation]:
    """The precision of MXFP4 experts' activations the plan was composed at, held to the planner's rule on every
    pool's GPU (:func:`pdplan.latency.compose.moe.asked_activations`: only MXFP4 experts take it, MXFP8 only on
    Blackwell); each broken rule once."""
    asked = manifest["provenance"]["profiles"].get("moe_activations")
    if asked is None or model is None:
        return []
    broken = []
    for pool in manifest["pools"]:
        try:
            moe.asked_activations(model, get_gpu(pool["gpu"]), asked)
        except PdplanError as err:
            if err.detail not in broken:
                broken.append(err.detail)
    return [Violation("provenance.profiles.moe_activations", detail) for detail in broken]


def pool_violations(where: str, pool: dict, model) -> list[Violation]:
    """One pool (at field path ``where``) of a schema-checked manifest: its GPUs are replicas × TP × DP
    × PP, as the engines count an instance; EP is recorded once; its experts can be placed and its
    memory plan holds (:func:`_memory`; ``model`` None: a model YAML, sized through its ABI instead)."""
    shape, found = pool_shape(pool), []
    if pool["gpus"] != pool["replicas"] * shape.gpus:
        rule = "replicas × TP × PP" if shape.dp == 1 else "replicas × TP × DP × PP"
        found.append(Violation(f"{where}.gpus", f"{pool['gpus']} != {rule} = {pool['replicas'] * shape.gpus}"))
    recorded = pool["memory"].get("expert_parallel")
    if "ep" in pool and recorded is not None and recorded != pool["ep"]:
        found.append(Violation(f"{where}.memory.expert_parallel", f"{recorded}, but the pool's ep is {pool['ep']}: "
                               "EP is recorded once, as ep (memory.expert_parallel is its older home)"))
    wrong = all_to_all_rejection(all_to_all(pool), shape.tp, shape.dp, shape.ep, redundant_experts(pool))
    if wrong is not None:
        found.append(Violation(f"{where}.all_to_all", wrong))
    return found + _memory(where, pool, model)


def _model(manifest: dict):
    identity = manifest["identity"]
    kv = identity["kv_cache"]["dtype"]
    try:
        return get_model(identity["model"], dtype=identity["weights_dtype"], kv_dtype=kv)
    except PdplanError:
        return None  # a model YAML: its geometry is checked through the KV-cache ABI instead


def _memory(where: str, pool: dict, model) -> list[Violation]:
    memory = pool["memory"]
    found = []
    gpu = gpu_catalog().get(pool["gpu"])
    if gpu is None:
        return [Violation(f"{where}.gpu", f"unknown GPU {pool['gpu']!r}")]
    if not _close(memory["gpu_memory_gib"], gpu.memory_bytes / GIB):
        found.append(Violation(f"{where}.memory.gpu_memory_gib", f"{pool['gpu']} has {gpu.memory_bytes / GIB:g} GiB"))
    if model is not None:
        shape, redundant = pool_shape(pool), redundant_experts(pool)
        placement = expert_placement_rejection(model, shape.tp, shape.ep, redundant, dp=shape.dp)
        if placement is not None:  # EP 1 or dividing TP × DP, the experts (and redundant ones) spread evenly
            key = {"ep": ep_field(pool)}.get(placement[0], placement[0])
            return [*found, Violation(f"{where}.{key}", placement[1])]
        try:
            weights = weight_bytes_per_gpu(model, shape.tp, shape.pp, ep=shape.ep, redundant_experts=redundant,
                                           dp=shape.dp) / GIB
        except PdplanError as err:  # a model pdplan does not size
            return [*found, Violation(f"{where}.memory.weights_gib_per_gpu", err.detail)]
        if not _close(memory["weights_gib_per_gpu"], weights):
            found.append(Violation(f"{where}.memory.weights_gib_per_gpu",
                                   f"{memory['weights_gib_per_gpu']:g} GiB, but {model.name} at "
                                   f"{shape.shape_label()} puts {weights:.4g} GiB on a GPU"))
    if memory["weights_gib_per_gpu"] >= memory["gpu_memory_gib"] * memory["memory_utilization"]:
        found.append(Violation(f"{where}.memory", "the weights do not fit in the usable memory"))
    if memory["kv_capacity_tokens_per_instance"] <= 0:
        found.append(Violation(f"{where}.memory.kv_capacity_tokens_per_instance", "no room for any KV"))
    return found


def _placement(manifest: dict) -> list[Violation]:
    index = {p["name"]: i for i, p in enumerate(manifest["pools"])}
    return node_map_violations({p["name"]: p for p in manifest["pools"]}, manifest["placement"]["nodes"],
                               at="placement.nodes", pool_field=lambda name, key: f"pools[{index[name]}].{key}")


def _transfer(manifest: dict) -> list[Violation]:
    transfer, pools = manifest["transfer"], manifest["pools"]
    colocated = all(p["phase"] == "colocated" for p in pools)
    if colocated:
        found = [] if transfer["connector"] == "none" else [
            Violation("transfer.connector", "a colocated plan moves no KV: must be none")]
        for key in ("router", "early_rejection"):
            if key in transfer:
                found.append(Violation(f"transfer.{key}", "a colocated plan has no prefill instance: it applies "
                                                          "only to disaggregated plans"))
        return found
    found = []
    if transfer["connector"] == "none":
        found.append(Violation("transfer.connector", "a P/D plan needs a KV connector"))
    for p in pools:
        want = KV_ROLES.get(p["phase"])
        if transfer["roles"].get(p["name"]) != want:
            found.append(Violation(f"transfer.roles.{p['name']}", f"a {p['phase']} pool is a {want}"))
    mixed = any(p["phase"] == "mixed" for p in pools)
    borrows = transfer.get("spill", {}).get("borrow", False)
    if (mixed or borrows) != ("spill" in transfer):
        found.append(Violation("transfer.spill", "must be given exactly when the plan has a mixed pool or borrows"))
    by_name = {p["name"]: p for p in pools}
    model = _model(manifest)
    for i, path in enumerate(transfer["paths"]):
        where = f"transfer.paths[{i}]"
        src, dst = by_name.get(path["from"]), by_name.get(path["to"])
        if src is None or src["phase"] != "prefill" or dst is None or dst["phase"] not in DECODING:
            found.append(Violation(where, "must run from a prefill pool to a decode or mixed pool of this manifest"))
            continue
        if not _close(path["capacity_gb_s"], path["bandwidth_gb_s"] * dst["replicas"]):
            found.append(Violation(f"{where}.capacity_gb_s", f"{path['capacity_gb_s']:g} GB/s, but "
                                   f"{dst['replicas']} {dst['phase']} instances × {path['bandwidth_gb_s']:g} GB/s = "
                                   f"{path['bandwidth_gb_s'] * dst['replicas']:g} GB/s"))
        if path["demand_gb_s"] > path["capacity_gb_s"]:
            found.append(Violation(f"{where}.demand_gb_s", f"KV demand {path['demand_gb_s']:g} GB/s exceeds the "
                                   f"path's {path['capacity_gb_s']:g} GB/s"))
        found += _path_follows_placement(manifest, where, path)
        found += _path_copies(model, where, path, dst)
    pairs = {(p["from"], p["to"]) for p in transfer["paths"]}
    for src in (p["name"] for p in pools if p["phase"] == "prefill"):
        for dst in (p["name"] for p in pools if p["phase"] in DECODING):
            if (src, dst) not in pairs:
                found.append(Violation("transfer.paths", f"no path from {src} to {dst}"))
    return found


def _path_copies(model, where: str, path: dict, dst: dict) -> list[Violation]:
    """A path's stated KV copies are those its receiving pool's TP ranks each cache
    (:func:`pdplan.handoff.handoff_copies`); a manifest written before them states none, and a model YAML's
    geometry is not known here (``model`` None)."""
    if "kv_copies" not in path or model is None:
        return []
    copies = handoff_copies(model, dst["tp"])
    if _close(path["kv_copies"], copies):
        return []
    return [Violation(f"{where}.kv_copies", f"{path['kv_copies']:g}, but each of the {dst['tp']} TP ranks of "
                                            f"{dst['name']} caches its part of {model.name}'s KV: {copies:g} copies")]


def _path_follows_placement(manifest: dict, where: str, path: dict) -> list[Violation]:
    """A handoff between pools whose instances all sit on one node stays inside it; at high
    affinity, pools spread over several nodes hand off across them (as the planner derives it,
    :func:`pdplan.planner.plans.link_path`; at low affinity each segment pairs its stages on a node)."""
    placement = manifest["placement"]
    nodes = sorted({node["node"] for node in placement["nodes"] for slot in node["instances"]
                    if slot["pool"] in (path["from"], path["to"])})
    if path["path"] == "inter-node" and len(nodes) == 1:
        return [Violation(f"{where}.path", f"inter-node, but every instance of {path['from']} and {path['to']} "
                                           f"sits on node {nodes[0]}: the handoff is intra-node")]
    if path["path"] == "intra-node" and placement.get("affinity") == "high" and len(nodes) > 1:
        return [Violation(f"{where}.path", f"intra-node, but {path['from']} and {path['to']} sit on "
                                           f"{len(nodes)} nodes at high affinity: the handoff is inter-node")]
    return []


def engine_refusal(manifest: dict, engine: str | None) -> str | None:
    """Why ``engine`` cannot load this manifest's weights or run its pools with its KV connector, their experts and
    their prompt chunks (the rule and its reason, see :mod:`pdplan.engines`), or None when it can or no engine is
    named. A model YAML's experts are not known here, so the expert rules pass it."""
    why = engines.weights_refusal(engine, manifest["identity"]["weights_dtype"])
    if why:
        return why
    spanning = spanned_node_gpus(manifest["placement"]["nodes"])
    roles = [_role(manifest, pool, spanning) for pool in manifest["pools"]]
    return engines.plan_refusal(engine, manifest["transfer"]["connector"], roles)


def _role(manifest: dict, pool: dict, spanning: dict[str, int]) -> engines.Role:
    """A manifest pool as the engine rules see it (an unknown GPU, which ``validate`` names, is not a Blackwell),
    ``spanning`` the pools whose instances span nodes, with the GPUs of the smallest such node."""
    shape, gpu = pool_shape(pool), gpu_catalog().get(pool["gpu"])
    return engines.Role(phase=pool["phase"], gpu=pool["gpu"], tp=shape.tp, pp=shape.pp, dp=shape.dp, ep=shape.ep,
                        experts=routed_experts(manifest, pool), chunk_tokens=prompt_budget(pool)[0] or 0,
                        blackwell=gpu is not None and gpu.blackwell, all_to_all=all_to_all(pool),
                        spans_nodes=pool["name"] in spanning, node_gpus=spanning.get(pool["name"], 0))


def _engine(manifest: dict) -> list[Violation]:
    """The engine the plan was made for can run its shapes: the one its search kept the rules of
    (``provenance.profiles.serving_engine``; in older manifests the ``optimize --engine`` it named),
    and any engine a pool is pinned to."""
    engine, field = search_engine(manifest)
    named = {engine: field}
    for i, pool in enumerate(manifest["pools"]):
        named.setdefault(pool.get("engine"), f"pools[{i}].engine")
    found = []
    for engine, field in named.items():
        why = engine_refusal(manifest, engine)
        if why is not None:
            found.append(Violation(field, f"{engine} cannot run this plan: {why}"))
    return found


def _identity(manifest: dict) -> list[Violation]:
    """The KV-cache ABI hash and the KV bytes per token follow from the ABI's own fields."""
    identity = manifest["identity"]
    abi = identity["kv_cache"]
    found = []
    expected = {k: v for k, v in abi.items() if k != "hash"}
    if abi["hash"] != digest(expected):
        found.append(Violation("identity.kv_cache.hash", "does not match the ABI fields (layers, heads, head "
                                                         "dim, dtype, block, layout)"))
    per_token = abi_kv_bytes_per_token(abi)
    formula = ("layers × (kv_lora_rank + qk_rope_head_dim) × bytes" if abi.get("attention") == "mla"
               else "layers × 2 × KV heads × head dim × bytes")
    if identity["kv_bytes_per_token"] != per_token:
        found.append(Violation("identity.kv_bytes_per_token", f"{identity['kv_bytes_per_token']}, but the ABI "
                               f"gives {formula} = {per_token}"))
    model = _model(manifest)
    if model is not None:
        shipped = kv_cache_abi(model, abi["block_tokens"])
        for key in ("layers", "kv_heads", "head_dim", "attention", "kv_lora_rank", "qk_rope_head_dim"):
            if abi.get(key) != shipped.get(key):
                found.append(Violation(f"identity.kv_cache.{key}", f"{abi.get(key)}, but {model.name} has "
                                       f"{shipped.get(key)}"))
    for i, pool in enumerate(manifest["pools"]):
        if pool["model"] != identity["model"]:
            found.append(Violation(f"pools[{i}].model", f"{pool['model']!r} is not the manifest's model "
                                                        f"{identity['model']!r}"))
    return found


def _strict_identity(manifest: dict) -> list[Violation]:
    identity = manifest["identity"]
    fields = {"identity.checkpoint.id": identity["checkpoint"]["id"],
              "identity.checkpoint.revision": identity["checkpoint"]["revision"],
              "identity.tokenizer": identity["tokenizer"], "identity.adapter": identity["adapter"],
              "identity.position": identity["position"]}
    return [Violation(field, "is unknown; an exact KV handoff needs it stated (optimize --checkpoint, "
                             "--revision, --tokenizer, --adapter, --position)")
            for field, value in fields.items() if value == UNKNOWN]


def _fallback_and_rollback(manifest: dict) -> list[Violation]:
    found = []
    if manifest["rollback"] != list(ROLLBACK):
        for i, (got, want) in enumerate(zip(manifest["rollback"], ROLLBACK)):
            if got != want:
                found.append(Violation(f"rollback[{i}]", f"is {got}, must be {want} (the order is "
                                                         f"{' → '.join(ROLLBACK)})"))
                break
    fallback = manifest["fallback"]
    if not fallback["pools"] or not fallback["verified"]:
        found.append(Violation("fallback", "a verified colocated fallback must be registered before release"))
    elif fallback["gpus"] != sum(p["replicas"] * p["tp"] * p.get("dp", 1) * p["pp"] for p in fallback["pools"]):
        found.append(Violation("fallback.gpus", "is not the sum of its pools' replicas × TP × DP × PP"))
    return found


def _predictions(manifest: dict) -> list[Violation]:
    predictions = manifest["predictions"]
    found = []
    gpus = sum(p["gpus"] for p in manifest["pools"])
    if predictions["gpus"]["value"] != gpus:
        found.append(Violation("predictions.gpus.value", f"{predictions['gpus']['value']}, but the pools hold {gpus}"))
    if not predictions["verification"]["passed"]:
        found.append(Violation("predictions.verification.passed", "the plan did not pass its end-to-end simulation"))
    for i, o in enumerate(predictions["attainment"]["per_objective"]):
        if not o["low"] <= o["mean"] <= o["high"]:
            found.append(Violation(f"predictions.attainment.per_objective[{i}]", "mean outside its interval"))
    return found


def refuse_unreadable_inputs(*, trace: Path | None, profiles: Path | None, cluster: Path | None) -> None:
    """An input flag naming a path that cannot be read as that input (missing, a directory where a
    file is meant, a FIFO, a device, too large) is an error before any check runs, whether or not
    the manifest gets as far as comparing it."""
    profiles = None if profiles is None or profiles.is_dir() else profiles  # a folder of profiles is welcome
    for path, (what, limit) in ((trace, TRACE), (cluster, CLUSTER), (profiles, PROFILES)):
        if path is not None:
            input_file(path, what=what, limit=limit)


def stale_inputs(manifest: dict, *, trace: Path | None, profiles: Path | None,
                 cluster: Path | None) -> list[Violation]:
    """Inputs given on the command line whose sha256 differs from the manifest's: it is stale."""
    inputs = manifest["provenance"]["inputs"]
    found = []
    if trace is not None and input_sha256(trace, *TRACE) != inputs["trace"]["sha256"]:
        found.append(Violation("provenance.inputs.trace.sha256", f"stale: {trace} is not the trace this plan was "
                                                                 f"made from ({inputs['trace']['path']})"))
    if cluster is not None and input_sha256(cluster, *CLUSTER) != inputs["cluster"]["sha256"]:
        found.append(Violation("provenance.inputs.cluster.sha256", f"stale: {cluster} is not the cluster this plan "
                                                                   f"was made for ({inputs['cluster']['path']})"))
    if profiles is not None and input_sha256(profiles, *PROFILES) not in {p["sha256"] for p in inputs["profiles"]}:
        found.append(Violation("provenance.inputs.profiles", f"stale: {profiles} is not among the profiles this "
                                                             "plan was timed with"))
    return found


def name_violations(manifest: dict) -> list[Violation]:
    """The names export writes into file names, scripts and Kubernetes objects follow the rules
    of :mod:`pdplan.names` (the cluster file's node types do where they enter), and an instance
    name, which names its script, belongs to one pool."""
    found = []

    def follow(field: str, value: str, rule) -> None:
        problem = rule(value)
        if problem:
            found.append(Violation(field, f"{problem}, got {shown(value)!r}"))

    follow("metadata.name", manifest["metadata"]["name"], names.dns_subdomain)
    for i, pool in enumerate(manifest["pools"]):
        follow(f"pools[{i}].name", pool["name"], names.dns_label)
    owners: dict[str, set[str]] = {}
    for n, node in enumerate(manifest["placement"]["nodes"]):
        follow(f"placement.nodes[{n}].node", node["node"], names.node)
        follow(f"placement.nodes[{n}].node_type", node["node_type"], names.node_type)
        if "node_label" in node:
            follow(f"placement.nodes[{n}].node_label.key", node["node_label"]["key"], names.label_key)
            follow(f"placement.nodes[{n}].node_label.value", node["node_label"]["value"], names.label_value)
        for k, inst in enumerate(node["instances"]):
            follow(f"placement.nodes[{n}].instances[{k}].instance", inst["instance"], names.dns_label)
            owners.setdefault(inst["instance"], set()).add(inst["pool"])
    for name, pools in sorted(owners.items()):
        if len(pools) > 1:
            found.append(Violation("placement.nodes", f"instance {shown(name)!r} is placed for pools "
                                                      f"{', '.join(sorted(pools))}; an instance belongs to one pool"))
    return found
