"""How every export format reads a manifest: served model, instances, pods, KV roles, labels."""

from __future__ import annotations

import json
from dataclasses import dataclass

import yaml

from pdplan import engines, names
from pdplan.engines import DEEPEP_LOW_LATENCY_TOKENS, FORMAT_ENGINES
from pdplan.errors import PdplanError
from pdplan.hardware import gpu_catalog
from pdplan.manifest.build import CONNECTORS as VLLM_CONNECTORS
from pdplan.manifest.build import UNKNOWN
from pdplan.manifest.document import all_to_all, pool_shape, search_engine
from pdplan.manifest.export import shell
from pdplan.manifest.node_map import spanning_pools
from pdplan.modelcatalog import model_catalog
from pdplan.modelspec import PRECISION_MARK, WEIGHT_BYTES
from pdplan.shape import shape_label
from pdplan.vocabulary import AllToAll, Router

# The argument a script of an instance spanning nodes is run with on each node (instance_preamble).
NODE_RANK = shell.Var("NODE_RANK")

_PHASE_ORDER = {"prefill": 0, "decode": 1, "mixed": 2, "colocated": 3}


@dataclass(frozen=True)
class Parallel:
    """A pool's parallel coordinates as the manifest records them, read with their defaults so a
    manifest written before wide expert parallelism reads as TP x PP: ``dp`` attention data-parallel
    ranks per instance (1: none), ``ep`` expert-parallel size (1: experts split by TP) and the
    redundant expert slots spread over the EP ranks (0: none)."""

    tp: int
    pp: int
    dp: int = 1
    ep: int = 1
    redundant_experts: int = 0

    @property
    def gpus(self) -> int:
        """GPUs of one instance, as the engines count them: TP x DP x PP."""
        return self.tp * self.dp * self.pp


def parallel(pool: dict) -> Parallel:
    """The parallel coordinates of a pool (:class:`Parallel`). The manifest schema makes dp and ep integers of
    at least 1 and redundant_experts one of at least 0; they are checked again here because they become engine
    flags and GPU counts."""
    found = Parallel(pool["tp"], pool["pp"], pool.get("dp", 1), pool.get("ep", 1), pool.get("redundant_experts", 0))
    for key, value, least in (("dp", found.dp, 1), ("ep", found.ep, 1), ("redundant_experts",
                                                                          found.redundant_experts, 0)):
        if not _whole(value, least):
            raise PdplanError(f"pool {pool['name']}: {key} must be an integer of at least {least}, got {value!r}",
                              field=f"pools.{key}")
    return found


def _whole(value, least: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= least


def pool_label(pool: dict) -> str:
    """A pool's shape as every output names it: ``h100-80gb TP2 PP1``, ``h200-141gb TP1 DP8 EP8 PP1``."""
    found = parallel(pool)
    return shape_label(pool["gpu"], found.tp, found.pp, dp=found.dp, ep=found.ep)


def pool_field(manifest: dict, pool: dict, key: str) -> str:
    """The plan-file field ``pools[i].<key>`` of a pool, for messages."""
    index = next(i for i, p in enumerate(manifest["pools"]) if p["name"] == pool["name"])
    return f"pools[{index}].{key}"


@dataclass(frozen=True)
class Instance:
    """One engine instance of a pool, as placed by the node map."""

    name: str
    pool: dict
    nodes: tuple[str, ...]        # its nodes, leader first: node_rank order, else stage order; no repeats
    gpu_indices: tuple[int, ...]  # all its GPU indices when it sits on one node, else ()
    node_gpu_indices: tuple[tuple[int, ...], ...] = ()  # its GPU indices on each of its nodes, in node order

    @property
    def spans_nodes(self) -> bool:
        return len(self.nodes) > 1


def served_model(manifest: dict) -> str:
    """The checkpoint the engines load: the identity's checkpoint id. An ``unknown`` one (a model
    with no Hugging Face repository, or a manifest written before the catalog named them) has
    nothing to load, and is refused."""
    checkpoint = manifest["identity"]["checkpoint"]["id"]
    if checkpoint == UNKNOWN:
        raise PdplanError(f"identity.checkpoint.id is unknown, so the engines have no model to load: set it with "
                          f"optimize --checkpoint (the Hugging Face repository or path of "
                          f"{manifest['identity']['model']})", field="identity.checkpoint.id")
    return checkpoint


def runs_remote_code(manifest: dict) -> bool:
    """The checkpoint's config or tokenizer is code in its repository (``identity.checkpoint.trust_remote_code``;
    in a manifest written before it was recorded, the catalog model's when the checkpoint is its repository)."""
    checkpoint = manifest["identity"]["checkpoint"]
    if "trust_remote_code" in checkpoint:
        return checkpoint["trust_remote_code"] is True
    known = model_catalog().get(manifest["identity"]["model"].partition(PRECISION_MARK)[0])
    return known is not None and known.remote_code and known.hf_repo == checkpoint["id"]


def checkpoint_args(manifest: dict) -> list[str]:
    """The flags vLLM and SGLang alike take for the checkpoint: ``--revision`` (:func:`revision_args`) and
    ``--trust-remote-code`` when its config or tokenizer is code in its repository (:func:`runs_remote_code`);
    without it both refuse to load such a model."""
    return revision_args(manifest) + (["--trust-remote-code"] if runs_remote_code(manifest) else [])


def revision_args(manifest: dict) -> list[str]:
    """``--revision`` (vLLM's and SGLang's flag alike) when the identity pins the checkpoint's revision, so
    the engines load the weights the plan names; nothing when it is ``unknown`` or, in a manifest of a
    pdplan that took any text there, not a branch, tag or commit id (:func:`header` says so)."""
    revision = manifest["identity"]["checkpoint"]["revision"]
    return [] if revision == UNKNOWN or names.revision(revision) else ["--revision", revision]


@dataclass(frozen=True)
class Precision:
    """The precisions a deployment must start its engines at, as the manifest records them."""

    weights: str     #: the plan's weight precision (``identity.weights_dtype``)
    kv: str          #: the plan's KV-cache precision (``identity.kv_cache.dtype``, the KV-cache ABI)
    checkpoint: str  #: the precision the served checkpoint stores its weights at

    @property
    def quantized_at_load(self) -> bool:
        """The engines must quantize the checkpoint as they load it (the plan's weights are below it)."""
        return self.weights != self.checkpoint


def precision(manifest: dict) -> Precision:
    """The plan's weight and KV precision and its checkpoint's. A manifest written before it recorded
    the checkpoint's (``identity.checkpoint.dtype``) serves the catalog model's checkpoint when it names
    that repository, at the precision the catalog states, else a bf16 one. A plan above its checkpoint's
    precision (bf16 weights of an fp8 checkpoint) cannot be served from it, and is refused."""
    identity = manifest["identity"]
    checkpoint = identity["checkpoint"]
    stated = checkpoint.get("dtype")
    if stated is None:
        known = model_catalog().get(identity["model"].split(PRECISION_MARK, 1)[0])
        stated = known.checkpoint_dtype if known is not None and known.hf_repo == checkpoint["id"] else "bf16"
    found = Precision(identity["weights_dtype"], identity["kv_cache"]["dtype"], stated)
    if WEIGHT_BYTES[found.weights] > WEIGHT_BYTES[found.checkpoint]:
        raise PdplanError(f"the plan serves {identity['model']} at {found.weights} weights, but its checkpoint "
                          f"{checkpoint['id']} stores them at {found.checkpoint}, and no engine serves a checkpoint "
                          f"above its own precision: plan at {found.checkpoint} (--dtype {found.checkpoint}) or name "
                          f"a {found.weights} checkpoint (optimize --checkpoint)", field="identity.weights_dtype")
    return found


def load_quantization(manifest: dict, found: Precision, engine: str,
                      methods: dict[tuple[str, str], str]) -> str | None:
    """The ``--quantization`` method ``engine`` quantizes the checkpoint with as it loads it to ``found``'s
    weight precision (``methods``: the engine's, by checkpoint and plan weight precision); None when the
    checkpoint already is at the plan's precision (the engine reads its config.json's quantization_config).
    A plan whose weights the engine cannot quantize to at load is refused."""
    if not found.quantized_at_load:
        return None
    method = methods.get((found.checkpoint, found.weights))
    if method is None:
        raise PdplanError(f"the plan serves {manifest['identity']['model']} at {found.weights} weights, but its "
                          f"checkpoint {manifest['identity']['checkpoint']['id']} stores them at {found.checkpoint} "
                          f"and {engine} cannot quantize every block matrix to {found.weights} as it loads them: serve "
                          f"a {found.weights} checkpoint (plan with --model its config.json, and --checkpoint)",
                          field="identity.weights_dtype")
    return method


def precision_args(manifest: dict, engine: str, kv_cache_dtypes: dict[str, str],
                   methods: dict[tuple[str, str], str]) -> list[str]:
    """``--kv-cache-dtype`` at the KV precision the plan's capacity was verified at (``kv_cache_dtypes``:
    the engine's names), and ``--quantization`` when the checkpoint must be brought to the plan's weight
    precision as it loads (:func:`load_quantization`)."""
    found = precision(manifest)
    method = load_quantization(manifest, found, engine, methods)
    args = ["--kv-cache-dtype", kv_cache_dtypes[found.kv]]
    return args + (["--quantization", method] if method else [])


def pools(manifest: dict) -> list[dict]:
    """Pools in serving order: prefill, decode, mixed, colocated; by name within a phase."""
    return sorted(manifest["pools"], key=lambda p: (_PHASE_ORDER[p["phase"]], p["name"]))


def is_disaggregated(manifest: dict) -> bool:
    return any(p["phase"] != "colocated" for p in manifest["pools"])


def instances(manifest: dict) -> list[Instance]:
    """Every placed instance, pools in serving order, instances by name. An instance's nodes are in
    the order of their ``node_rank`` (0: the leader, where rank 0 and the distributed init address
    live), and without one (a manifest written before instances spanned nodes by DP) in the order of
    their pipeline stages."""
    stages: dict[tuple[str, str], list[tuple[int, int, str, list[int]]]] = {}
    ranked: dict[tuple[str, str], dict[str, tuple[int, str]]] = {}
    for n, node in enumerate(manifest["placement"]["nodes"]):
        for s, slot in enumerate(node["instances"]):
            key = (slot["pool"], slot["instance"])
            if "node_rank" in slot and not _whole(slot["node_rank"], 0):
                raise PdplanError(f"instance {slot['instance']}: node_rank must be an integer of at least 0, got "
                                  f"{slot['node_rank']!r}", field=f"placement.nodes[{n}].instances[{s}].node_rank")
            stages.setdefault(key, []).append((slot.get("node_rank", 0), slot["stage"], node["node"],
                                               slot["gpu_indices"]))
            if "node_rank" in slot:
                field = f"placement.nodes[{n}].instances[{s}].node_rank"
                seen = ranked.setdefault(key, {}).setdefault(node["node"], (slot["node_rank"], field))
                if seen[0] != slot["node_rank"]:
                    raise PdplanError(f"instance {slot['instance']} has node_rank {seen[0]} and {slot['node_rank']} "
                                      f"on node {node['node']}; a node has one rank in an instance", field=field)
    result = []
    for pool in pools(manifest):
        for (pool_name, name), placed in sorted(stages.items()):
            if pool_name != pool["name"]:
                continue
            placed.sort()
            nodes = tuple(dict.fromkeys(node for _, _, node, _ in placed))
            _check_node_ranks(name, nodes, ranked.get((pool_name, name), {}))
            indices = tuple(i for _, _, _, gpus in placed for i in gpus) if len(nodes) == 1 else ()
            per_node = tuple(tuple(i for _, _, on, gpus in placed if on == node for i in gpus) for node in nodes)
            result.append(Instance(name, pool, nodes, indices, per_node))
    return result


def _check_node_ranks(name: str, nodes: tuple[str, ...], ranks: dict[str, tuple[int, str]]) -> None:
    """The node ranks an instance's nodes state number them 0 .. k-1, each once (k: its nodes)."""
    if not ranks:
        return
    stated = sorted(rank for rank, _ in ranks.values())
    if stated != list(range(len(nodes))):
        field = next(iter(ranks.values()))[1]
        raise PdplanError(f"instance {name} spans {len(nodes)} nodes ({', '.join(nodes)}) but their node_rank values "
                          f"are {stated}: each of its nodes needs one of 0 to {len(nodes) - 1}, 0 on the leader",
                          field=field)


def script_name(fmt: str, inst: Instance) -> str:
    """The launch script of an instance, ``<fmt>/<instance>.sh``, beside ``<fmt>/router.sh``."""
    if inst.name == "router":
        raise PdplanError(f"instance {inst.name} of pool {inst.pool['name']} would share its script with the "
                          f"{fmt} router (router.sh); rename the instance", field="placement.nodes")
    return f"{fmt}/{inst.name}.sh"


def pool_instances(manifest: dict, pool: dict) -> list[Instance]:
    return [i for i in instances(manifest) if i.pool["name"] == pool["name"]]


def pool_nodes(manifest: dict, pool: dict) -> list[str]:
    """The nodes any instance of the pool uses, sorted."""
    return sorted({node for i in pool_instances(manifest, pool) for node in i.nodes})


def pods_per_instance(manifest: dict, pool: dict) -> int:
    """Nodes (hence pods) one instance needs: the most nodes any of its instances spans,
    and at least enough nodes to hold its TP×DP×PP GPUs."""
    node_gpus = {n["node"]: n["gpus"] for n in manifest["placement"]["nodes"]}
    per_instance = parallel(pool).gpus
    size = 1
    for inst in pool_instances(manifest, pool):
        smallest = min(node_gpus[n] for n in inst.nodes)
        size = max(size, len(inst.nodes), -(-per_instance // smallest))
    if per_instance % size:
        raise PdplanError(f"pool {pool['name']}: {per_instance} GPUs per instance do not split evenly "
                          f"over {size} nodes", field="placement")
    return size


def gpus_per_pod(manifest: dict, pool: dict) -> int:
    return parallel(pool).gpus // pods_per_instance(manifest, pool)


def kv_transfer_config(manifest: dict, pool: dict) -> dict | None:
    """vLLM ``--kv-transfer-config`` of a pool; None for colocated pools.

    Only ``kv_connector`` and ``kv_role``: vLLM 0.32 removed kv_rank, kv_parallel_size,
    kv_ip and kv_buffer_size and rejects unknown keys.
    """
    if pool["phase"] == "colocated":
        return None
    transfer = manifest["transfer"]
    connector = transfer["connector"]
    if connector not in VLLM_CONNECTORS:
        raise PdplanError(f"pool {pool['name']} is {pool['phase']} but transfer.connector is {connector!r}",
                          field="transfer.connector")
    role = transfer["roles"].get(pool["name"])
    if role is None:
        raise PdplanError(f"transfer.roles has no role for pool {pool['name']}", field="transfer.roles")
    return {"kv_connector": VLLM_CONNECTORS[connector], "kv_role": role}


def prefill_router(manifest: dict) -> str:
    """How the plan's router picks each arrival's prefill instance (``transfer.router``). Absent, as in
    every least-loaded plan and every manifest written before the router was a setting: least-loaded,
    which each format starts as it always has."""
    return manifest["transfer"].get("router", Router.LEAST_LOADED)


def router_policy(manifest: dict, policies: dict[str, str]) -> str | None:
    """The router's own name for the plan's prefill router, from ``policies`` (a format's router's names
    per :class:`pdplan.vocabulary.Router`); None for least-loaded, or a router with no such policy."""
    return policies.get(prefill_router(manifest))


def prefill_policy_args(manifest: dict, policies: dict[str, str]) -> list[str]:
    """A P/D router's ``--prefill-policy`` for the plan's prefill router, named from ``policies`` (sglang-router's
    and vllm-router's take the flag alike, each its own names); none for least-loaded."""
    policy = router_policy(manifest, policies)
    return [] if policy is None else ["--prefill-policy", policy]


def running_cap(pool: dict) -> int | None:
    """Requests one rank of the pool runs at once as pdplan verified it (``scheduling.max_running_requests``), where
    its engine holds it below its KV (:func:`pdplan.engines.running_cap`); None for every other pool and every
    manifest written before the cap was recorded, which keep the engine's own limit."""
    return (pool.get("scheduling") or {}).get("max_running_requests")


def prefix_cache_off(pool: dict) -> bool:
    """The plan turns the pool's prefix cache off (``scheduling.prefix_cache_blocks`` 0). Absent or above 0
    it is on, the engines' default (vLLM V1's prefix caching, SGLang's radix cache), so no flag is written:
    an engine's cache is its KV pool, not a stated number of blocks."""
    return (pool.get("scheduling") or {}).get("prefix_cache_blocks") == 0


#: Where a second prefix-cache tier sits, as an export's notice says it.
_MEDIA = {"host": "host memory", "remote": "a remote store"}


def cache_tier_notes(pools: list[dict], options: dict[str, str]) -> list[str]:
    """One line per prefill pool of ``pools`` with a second prefix-cache tier (``scheduling.cache_tier``), which
    the plan was verified with and no export starts: its size and bandwidth, and the engine's option that would
    provide it (``options``, by medium)."""
    notes = []
    for pool in pools:
        tier = (pool.get("scheduling") or {}).get("cache_tier")
        if tier is not None:
            notes.append(f"Pool {pool['name']} was planned with a second prefix-cache tier of {tier['blocks']} blocks "
                         f"in {_MEDIA[tier['medium']]} at {tier['bandwidth_gb_s']:g} GB/s, which this export does not "
                         f"start; the engine's option for it: {options[tier['medium']]}.")
    return notes


def speculative(manifest: dict) -> dict | None:
    """The deployment's speculative decoding as the manifest records it (``provenance.profiles.speculative``),
    None when it runs none. Only MTP can be exported: the engines' MTP drafts with the checkpoint's own
    module, while a draft model is a checkpoint of its own that the manifest does not name."""
    found = manifest["provenance"]["profiles"].get("speculative")
    if found is not None and found["method"] != "mtp":
        raise PdplanError(f"the plan was timed with speculative decoding by a {found['method']} model, which the "
                          "manifest does not name, so no engine can be started with it: start the engines with "
                          "their draft-model flags by hand, or plan with --speculative mtp",
                          field="provenance.profiles.speculative.method")
    return found


def compact_json(value) -> str:
    """One-line JSON with sorted keys, for command-line arguments."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def plan_engine(manifest: dict) -> str | None:
    """The engine the plan was verified for: the one its pools are pinned to (the first pinned pool's), else the one
    its search kept the rules of (``provenance.profiles.serving_engine``, or the ``engine`` older manifests
    recorded: :func:`~pdplan.manifest.document.search_engine`); None when it names none."""
    pinned = [pool["engine"] for pool in manifest["pools"] if pool.get("engine")]
    return pinned[0] if pinned else search_engine(manifest)[0]


def format_engine(manifest: dict, fmt: str) -> str:
    """The engine ``fmt`` starts for this plan: the plan's own (:func:`plan_engine`) where the format can start it,
    else the format's first (:data:`pdplan.engines.FORMAT_ENGINES`)."""
    choices = FORMAT_ENGINES[fmt]
    engine = plan_engine(manifest)
    return engine if engine in choices else choices[0]


def require_pool_engines(manifest: dict, fmt: str) -> None:
    """Refuse a plan with a pool pinned to another engine than the one ``fmt`` starts for it (:func:`format_engine`):
    a pod format runs one engine's pods."""
    engine = format_engine(manifest, fmt)
    choices = FORMAT_ENGINES[fmt]
    one_of = f" (one of {', '.join(choices)} for every pool)" if len(choices) > 1 else ""
    for pool in manifest["pools"]:
        if pool.get("engine") not in (None, engine):
            raise PdplanError(f"{fmt} export runs {engine} pods{one_of}, but pool {pool['name']} has engine "
                              f"{pool['engine']!r}{_way_out(pool['engine'], fmt)}",
                              field=pool_field(manifest, pool, "engine"))


def _way_out(engine: str, fmt: str) -> str:
    """What a refusal of ``fmt``'s says to do with a pool pinned to ``engine``: the formats that start it (some format
    starts every engine a manifest may name)."""
    starting = [other for other, engines in FORMAT_ENGINES.items() if engine in engines and other != fmt]
    return f": export --format {' or '.join(starting)} starts {engine}"


def hash_hex(manifest: dict) -> str:
    return manifest["provenance"]["content_hash"].split(":", 1)[1]


def manifest_labels(manifest: dict) -> dict[str, str]:
    """Labels tying an object to the manifest: route epoch and a short hash (label values
    are limited to 63 characters, so the full hash goes into an annotation)."""
    return {"pdplan.dev/route-epoch": str(manifest["placement"]["route_epoch"]),
            "pdplan.dev/manifest-hash": hash_hex(manifest)[:16]}


def manifest_annotations(manifest: dict) -> dict[str, str]:
    return {"pdplan.dev/manifest-hash": manifest["provenance"]["content_hash"]}


class _PlainDumper(yaml.SafeDumper):
    """SafeDumper that writes repeated dicts out in full: no &anchors/*aliases in the output."""

    def ignore_aliases(self, data) -> bool:
        return True


def dump_yaml(*documents: dict, header: str = "") -> str:
    """YAML text of one or more documents, keys in insertion order, optional comment header."""
    body = yaml.dump_all(documents, Dumper=_PlainDumper, sort_keys=False, default_flow_style=False)
    lines = [f"# {line}" if line else "#" for line in header.splitlines()]
    return "".join(f"{line}\n" for line in lines) + body


def header(manifest: dict, fmt: str) -> str:
    """Comment lines naming the manifest an output came from, and a revision the engines are not given."""
    lines = (f"Generated by pdplan export --format {fmt} from manifest {manifest['metadata']['name']}\n"
             f"manifest {manifest['provenance']['content_hash']}, route epoch {manifest['placement']['route_epoch']}")
    revision = manifest["identity"]["checkpoint"]["revision"]
    if revision != UNKNOWN and names.revision(revision):
        lines += (f"\nidentity.checkpoint.revision {revision[:60]!r} is not a branch, tag or commit id, so the "
                  "engines are not given it and load the repository's default branch")
    if runs_remote_code(manifest):
        lines += ("\nThe engines run code from the checkpoint's repository (--trust-remote-code): its config or "
                  "tokenizer is kept there")
    engine = format_engine(manifest, fmt)
    other = sorted({pool["engine"] for pool in manifest["pools"] if pool.get("engine") not in (None, engine)})
    if other:  # the bare-metal formats start their engine whatever the plan was verified on
        lines += (f"\nThe plan was verified on {' and '.join(other)}'s step times, and this export starts {engine}, "
                  f"whose may differ: plan with --engine {engine} to verify what runs")
    for pool in gathering_pools(manifest, engine):
        timed, where, default = DEFAULT_ALL_TO_ALL[engine]
        lines += (f"\nPool {pool}'s MoE layers were timed with {timed}; {where} runs its default "
                  f"all-to-all ({default}), which gathers every rank's tokens instead, so its steps may differ from "
                  "the verified ones")
    for pool in uncapped_low_latency_pools(manifest, engine):
        lines += (f"\nPool {pool} decodes on DeepEP's low-latency kernels, which take at most "
                  f"{DEEPEP_LOW_LATENCY_TOKENS[engine]} tokens per rank and step; its verification held no rank to "
                  "that, so a rank's batch may pass it: optimize again to plan within it")
    return lines


#: The dispatching all-to-all a plan of each engine was timed with, where the engine runs an instance of attention DP
#: with expert parallelism on its default all-to-all instead, because its export does not start that dispatch there,
#: and that default: SGLang 0.5.23's ``--moe-a2a-backend`` "none" on one node (the MoE layer gathers every DP rank's
#: tokens, python/sglang/srt/layers/dp_attention.py), vLLM 0.33.0's ``--all2all-backend`` "allgather_reducescatter"
#: on one node and for a colocated pool (vllm/config/parallel.py), TensorRT-LLM's NCCL all-gather and reduce-scatter
#: off an NVLink domain spanning nodes (:func:`pdplan.engines.all_to_all`).
DEFAULT_ALL_TO_ALL = {"sglang": ("DeepEP's all-to-all", "SGLang on one node", "none"),
                      "vllm": ("DeepEP's all-to-all", "vLLM on one node or colocated", "allgather_reducescatter"),
                      "trtllm": ("a dispatching all-to-all", "TensorRT-LLM off an NVLink domain spanning nodes",
                                 "NCCL all-gather and reduce-scatter")}


def pool_spans_nodes(manifest: dict, pool: dict) -> bool:
    """Whether an instance of the pool spans nodes in the node map (:func:`pdplan.manifest.node_map.spanning_pools`)."""
    return pool["name"] in spanning_pools(manifest["placement"]["nodes"])


def starts_deepep(engine: str, pool: dict, spans_nodes: bool) -> bool:
    """Whether the export starts DeepEP's all-to-all for a pool whose instances span nodes (``spans_nodes``):
    :func:`pdplan.engines.starts_deepep`, the rule its plan was verified under (SGLang's every phase,
    :data:`pdplan.manifest.export.sglang.A2A_BACKEND`; vLLM's prefill and decode pools,
    :data:`pdplan.manifest.export.vllm.DEEPEP_BACKENDS`). A pool timed with a gather keeps the engine's default,
    which gathers (:func:`pdplan.engines.all_to_all`)."""
    return engines.starts_deepep(engine, pool["phase"], pool_shape(pool), all_to_all(pool), spans_nodes)


def starts_low_latency(engine: str, pool: dict, spans_nodes: bool) -> bool:
    """Whether the export starts DeepEP's low-latency kernels for a pool's decode steps (:func:`starts_deepep`, in a
    phase of :data:`pdplan.engines.DEEPEP_LOW_LATENCY_PHASES`), which take at most
    :data:`pdplan.engines.DEEPEP_LOW_LATENCY_TOKENS` tokens per rank and step: a cap the plan holds such a rank to
    (:func:`pdplan.engines.running_cap`) and the export states."""
    return engines.runs_deepep_low_latency(engine, pool["phase"], pool_shape(pool), all_to_all(pool), spans_nodes)


def uncapped_low_latency_pools(manifest: dict, engine: str) -> list[str]:
    """The pools some instance of which the export starts on DeepEP's low-latency kernels (:func:`starts_low_latency`)
    whose verification held no rank below them (no ``scheduling.max_running_requests``: manifests written before
    pdplan held it)."""
    spanning = spanning_pools(manifest["placement"]["nodes"])
    return [pool["name"] for pool in manifest["pools"]
            if starts_low_latency(engine, pool, pool["name"] in spanning) and running_cap(pool) is None]


def gathering_pools(manifest: dict, engine: str) -> list[str]:
    """The pools of attention DP with expert parallelism timed with a dispatch (DeepEP's, whose all-to-all the
    wide-EP profiles time: :mod:`pdplan.latency.compose.wide`, and the wide-EP roofline fitted to it; TensorRT-LLM's
    over NVLink) some instance of which the export starts without one (:func:`dispatches`)."""
    wide = {pool["name"] for pool in manifest["pools"]
            if _whole(pool.get("dp", 1), 2) and _whole(pool.get("ep", 1), 2) and all_to_all(pool) == AllToAll.DISPATCH}
    found = {inst.pool["name"] for inst in (instances(manifest) if wide else ())
             if inst.pool["name"] in wide and not dispatches(engine, inst.pool, inst.spans_nodes)}
    return [pool["name"] for pool in manifest["pools"] if pool["name"] in found]


def dispatches(engine: str, pool: dict, spans_nodes: bool) -> bool:
    """Whether the export runs a dispatching all-to-all for an instance of the pool: DeepEP where it starts it
    (:func:`starts_deepep`), or the engine's own where it dispatches unasked
    (:func:`pdplan.engines.dispatches_by_default`: TensorRT-LLM's over an NVLink domain spanning nodes)."""
    gpu = gpu_catalog().get(pool["gpu"])
    fabric = gpu is not None and gpu.nvlink_fabric
    return starts_deepep(engine, pool, spans_nodes) or engines.dispatches_by_default(engine, fabric)


def script_preamble(manifest: dict, fmt: str, what: str) -> list[str]:
    """First lines of a generated bash script: shebang, provenance comments, strict mode."""
    comments = [shell.comment(line) for line in header(manifest, fmt).splitlines()]
    return ["#!/usr/bin/env bash", *comments, shell.comment(what), "set -euo pipefail"]


def instance_preamble(manifest: dict, fmt: str, inst: Instance) -> list[str]:
    """An instance script's first lines: the preamble naming it, its GPUs on a single node, and
    for an instance spanning nodes the NODE_RANK argument each node's copy is run with."""
    pool = inst.pool
    lines = script_preamble(manifest, fmt, f"instance {inst.name} of pool {pool['name']} ({pool['phase']}, "
                                           f"{pool_label(pool)}) on {', '.join(inst.nodes)}")
    if inst.gpu_indices:
        lines.append(shell.export("CUDA_VISIBLE_DEVICES", ",".join(map(str, inst.gpu_indices))))
    if inst.spans_nodes:
        ranks = ", ".join(f"{rank} on {node}" for rank, node in enumerate(inst.nodes))
        lines += [shell.comment(f"Run once on each node of the instance with its NODE_RANK: {ranks}."),
                  'NODE_RANK="${1:?usage: $0 NODE_RANK}"']
    return lines
