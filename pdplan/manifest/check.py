"""``pdplan validate``: is a manifest what ``optimize`` sealed, self-consistent, and still current?

Each check returns violations as (field path, message); none means valid. The order: the schema
(a manifest that breaks it is not checked further), the content hash (a hand edit is tampering,
traced to the sections whose hashes changed), consistency (capacity against the target, GPUs per
node, tensor parallelism inside one node and NVLink domain, memory, link demand, KV roles, the
KV-cache ABI, the rollback order of 0x0FG, the preregistered fallback of 0x0FF, the shapes the
recorded engine can run), identity under
``strict``, the inputs' sha256 when they are given, and a re-simulation when asked.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pdplan import engines, names
from pdplan.errors import PdplanError
from pdplan.fileio import input_file
from pdplan.hardware import get_gpu
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
from pdplan.manifest.document import content_hash, digest, schema_errors, section_hashes
from pdplan.modelcatalog import get_model
from pdplan.modelspec import weight_bytes_per_gpu
from pdplan.placement import serves
from pdplan.schema import shown

#: Relative slack for values derived from others (they are written at 6 significant digits).
DERIVED_TOLERANCE = 1e-4
#: Pools that take KV handoffs: decode pools and Splitwise's mixed machines.
DECODING = ("decode", "mixed")


@dataclass(frozen=True)
class Violation:
    field: str
    message: str

    def __str__(self) -> str:
        """One line, whatever a hand-edited manifest put into the field or the value quoted."""
        return " ".join(f"{self.field}: {self.message}".split())


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
        where = f"pools[{i}]"
        if p["gpus"] != p["replicas"] * p["tp"] * p["pp"]:
            found.append(Violation(f"{where}.gpus", f"{p['gpus']} != replicas × TP × PP = "
                                   f"{p['replicas'] * p['tp'] * p['pp']}"))
        found += _memory(where, p, model)
    return found


def _model(manifest: dict):
    identity = manifest["identity"]
    kv = identity["kv_cache"]["dtype"]
    try:
        return get_model(identity["model"], dtype=identity["weights_dtype"], kv_dtype=kv)
    except PdplanError:
        return None  # a model YAML: its geometry is checked through the KV-cache ABI instead


def catalog_gpu(name: str):
    """The catalog GPU, or None for a name the catalog lacks (reported once, by the memory check)."""
    try:
        return get_gpu(name)
    except PdplanError:
        return None


def _physical(name: str) -> str:
    """The hardware a GPU type runs on: a power-capped setting's base GPU (Splitwise's HHcap), else itself."""
    gpu = catalog_gpu(name)
    return name if gpu is None else gpu.physical


def _memory(where: str, pool: dict, model) -> list[Violation]:
    memory = pool["memory"]
    found = []
    gpu = catalog_gpu(pool["gpu"])
    if gpu is None:
        return [Violation(f"{where}.gpu", f"unknown GPU {pool['gpu']!r}")]
    if not _close(memory["gpu_memory_gib"], gpu.memory_bytes / GIB):
        found.append(Violation(f"{where}.memory.gpu_memory_gib", f"{pool['gpu']} has {gpu.memory_bytes / GIB:g} GiB"))
    if model is not None:
        ep = memory.get("expert_parallel", 1)  # absent: experts split over TP, as every plan before MoE
        try:
            weights = weight_bytes_per_gpu(model, pool["tp"], pool["pp"], ep=ep) / GIB
        except PdplanError as err:  # experts that cannot be placed, or a model pdplan does not size
            key = "expert_parallel" if err.field == "ep" else "weights_gib_per_gpu"
            return [*found, Violation(f"{where}.memory.{key}", err.detail)]
        if not _close(memory["weights_gib_per_gpu"], weights):
            found.append(Violation(f"{where}.memory.weights_gib_per_gpu",
                                   f"{memory['weights_gib_per_gpu']:g} GiB, but {model.name} at TP{pool['tp']} "
                                   f"PP{pool['pp']} puts {weights:.4g} GiB on a GPU"))
    if memory["weights_gib_per_gpu"] >= memory["gpu_memory_gib"] * memory["memory_utilization"]:
        found.append(Violation(f"{where}.memory", "the weights do not fit in the usable memory"))
    if memory["kv_capacity_tokens_per_instance"] <= 0:
        found.append(Violation(f"{where}.memory.kv_capacity_tokens_per_instance", "no room for any KV"))
    return found


def _placement(manifest: dict) -> list[Violation]:
    index = {p["name"]: i for i, p in enumerate(manifest["pools"])}
    return node_map_violations({p["name"]: p for p in manifest["pools"]}, manifest["placement"]["nodes"],
                               at="placement.nodes", pool_field=lambda name, key: f"pools[{index[name]}].{key}")


def node_map_violations(pools: dict[str, dict], nodes: list[dict], *, at: str, pool_field) -> list[Violation]:
    """The node map ``nodes`` (at field path ``at``) holds every instance stage of ``pools``
    (name → gpu, tp, pp, replicas) once: TP ranks on one node within its NVLink domain, indices
    inside the node, no GPU held twice, the pool's GPU type, exactly replicas × PP stages per
    pool. ``pool_field(name, key)`` names a pool's field in the document."""
    found = []
    stages: dict[str, set] = {}
    for n, node in enumerate(nodes):
        used: set[int] = set()
        for k, inst in enumerate(node["instances"]):
            where = f"{at}[{n}].instances[{k}]"
            pool = pools.get(inst["pool"])
            if pool is None:
                found.append(Violation(f"{where}.pool", f"names no pool: {inst['pool']!r}"))
                continue
            indices = inst["gpu_indices"]
            if len(indices) != pool["tp"]:
                found.append(Violation(f"{where}.gpu_indices", f"{len(indices)} GPUs for a TP{pool['tp']} stage"))
            if any(i >= node["gpus"] for i in indices):
                found.append(Violation(f"{where}.gpu_indices", f"outside node {node['node']}'s {node['gpus']} GPUs"))
            for g in sorted(used & set(indices)):
                found.append(Violation(f"{where}.gpu_indices", f"GPU {g} is held twice on {node['node']}"))
            used |= set(indices)
            if node["gpu"] != _physical(pool["gpu"]):  # a power-capped setting runs on its own hardware's nodes
                found.append(Violation(f"{at}[{n}].gpu", f"{node['gpu']} node holds a {pool['gpu']} pool"))
            gpu = catalog_gpu(pool["gpu"])
            room = min(node["gpus"], pool["tp"] if gpu is None else gpu.nvlink_domain)
            if pool["tp"] > room:
                found.append(Violation(pool_field(inst["pool"], "tp"), f"TP{pool['tp']} spans more than one node or "
                                                                       f"NVLink domain ({room} GPUs)"))
            if inst["stage"] >= pool["pp"]:
                found.append(Violation(f"{where}.stage", f"stage {inst['stage']} of a PP{pool['pp']} instance"))
            stages.setdefault(inst["pool"], set()).add((inst["instance"], inst["stage"]))
    for name, pool in pools.items():
        placed = stages.get(name, set())
        if len(placed) != pool["replicas"] * pool["pp"]:
            found.append(Violation(pool_field(name, "replicas"), f"{pool['replicas']} replicas × PP{pool['pp']} need "
                                   f"{pool['replicas'] * pool['pp']} placed stages; the node map has {len(placed)}"))
    return found


def _transfer(manifest: dict) -> list[Violation]:
    transfer, pools = manifest["transfer"], manifest["pools"]
    colocated = all(p["phase"] == "colocated" for p in pools)
    if colocated:
        return [] if transfer["connector"] == "none" else [
            Violation("transfer.connector", "a colocated plan moves no KV: must be none")]
    found = []
    if transfer["connector"] == "none":
        found.append(Violation("transfer.connector", "a P/D plan needs a KV connector"))
    for p in pools:
        want = KV_ROLES.get(p["phase"])
        if transfer["roles"].get(p["name"]) != want:
            found.append(Violation(f"transfer.roles.{p['name']}", f"a {p['phase']} pool is a {want}"))
    mixed = any(p["phase"] == "mixed" for p in pools)
    if mixed != ("spill" in transfer):
        found.append(Violation("transfer.spill", "must be given exactly when the plan has a mixed pool"))
    by_name = {p["name"]: p for p in pools}
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
    pairs = {(p["from"], p["to"]) for p in transfer["paths"]}
    for src in (p["name"] for p in pools if p["phase"] == "prefill"):
        for dst in (p["name"] for p in pools if p["phase"] in DECODING):
            if (src, dst) not in pairs:
                found.append(Violation("transfer.paths", f"no path from {src} to {dst}"))
    return found


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
    """Why ``engine`` cannot run this manifest's pools with its KV connector (the rule and its
    reason, see :mod:`pdplan.engines`), or None when it can or no engine is named."""
    return engines.plan_refusal(engine, manifest["transfer"]["connector"], (
        engines.Role(phase=p["phase"], gpu=p["gpu"], tp=p["tp"], pp=p["pp"]) for p in manifest["pools"]))


def _engine(manifest: dict) -> list[Violation]:
    """The engine the plan was made for can run its shapes: the one its search kept the rules of
    (``provenance.profiles.serving_engine``; in older manifests the ``optimize --engine`` it named),
    and any engine a pool is pinned to."""
    profiles = manifest["provenance"]["profiles"]
    key = "serving_engine" if profiles.get("serving_engine") else "engine"
    named = {profiles[key]: f"provenance.profiles.{key}"}
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
    elif fallback["gpus"] != sum(p["replicas"] * p["tp"] * p["pp"] for p in fallback["pools"]):
        found.append(Violation("fallback.gpus", "is not the sum of its pools' replicas × TP × PP"))
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
