"""A manifest's node map as the engines run it: where each instance's stages sit, and each instance inside its
scale-out domain.

The rules every node map keeps (:func:`node_map_violations`): each DP rank's TP group on one node, or on whole nodes
one NVLink domain joins (two GB200 compute trays), GPU indices inside the node and held once, the pool's GPU type,
replicas × PP stages per pool, an instance spanning nodes with equal GPUs on each and its node ranks stated; and
against a cluster file (:func:`domain_violations`), no instance spanning more nodes than its node type has.
``pdplan validate`` checks a manifest's map with them, ``pdplan schedule`` a rollout's.
"""

from __future__ import annotations

from pdplan.hardware import Cluster, gpu_catalog
from pdplan.manifest.document import pool_shape
from pdplan.manifest.violation import Violation
from pdplan.shape import spans_nvlink


def node_map_violations(pools: dict[str, dict], nodes: list[dict], *, at: str, pool_field) -> list[Violation]:
    """The node map ``nodes`` (at field path ``at``) holds every instance stage of ``pools``
    (name → gpu, tp, pp, replicas, and dp when above 1): each DP rank's TP group on one node, or on whole
    nodes of its NVLink domain, indices inside the node, no GPU held twice, the pool's GPU type, exactly
    replicas × PP stages per pool, and each instance laid out as the engines count it
    (:func:`_instance_violations`). ``pool_field(name, key)`` names a pool's field in the document."""
    found = []
    stages: dict[str, set] = {}
    slots: dict[tuple[str, str], list[tuple[str, dict, dict]]] = {}
    for n, node in enumerate(nodes):
        used: set[int] = set()
        for k, inst in enumerate(node["instances"]):
            where = f"{at}[{n}].instances[{k}]"
            pool = pools.get(inst["pool"])
            if pool is None:
                found.append(Violation(f"{where}.pool", f"names no pool: {inst['pool']!r}"))
                continue
            indices = inst["gpu_indices"]
            if any(i >= node["gpus"] for i in indices):
                found.append(Violation(f"{where}.gpu_indices", f"outside node {node['node']}'s {node['gpus']} GPUs"))
            for g in sorted(used & set(indices)):
                found.append(Violation(f"{where}.gpu_indices", f"GPU {g} is held twice on {node['node']}"))
            used |= set(indices)
            if node["gpu"] != physical_gpu(pool["gpu"]):  # a power-capped setting runs on its own hardware's nodes
                found.append(Violation(f"{at}[{n}].gpu", f"{node['gpu']} node holds a {pool['gpu']} pool"))
            gpu = gpu_catalog().get(pool["gpu"])
            room = min(node["gpus"], pool["tp"] if gpu is None else gpu.nvlink_domain)
            if pool["tp"] > room and not spans_nvlink(pool["tp"], node["gpus"], _fabric_gpus(pool)):
                found.append(Violation(pool_field(inst["pool"], "tp"), f"TP{pool['tp']} spans more than one node or "
                                       f"NVLink domain ({room} GPUs), and not whole nodes of one NVLink fabric"))
            if inst["stage"] >= pool["pp"]:
                found.append(Violation(f"{where}.stage", f"stage {inst['stage']} of a PP{pool['pp']} instance"))
            stages.setdefault(inst["pool"], set()).add((inst["instance"], inst["stage"]))
            slots.setdefault((inst["pool"], inst["instance"]), []).append((where, node, inst))
    for (name, instance), placed in slots.items():
        found += _instance_violations(pools[name], instance, placed)
    for name, pool in pools.items():
        placed = stages.get(name, set())
        if len(placed) != pool["replicas"] * pool["pp"]:
            found.append(Violation(pool_field(name, "replicas"), f"{pool['replicas']} replicas × PP{pool['pp']} need "
                                   f"{pool['replicas'] * pool['pp']} placed stages; the node map has {len(placed)}"))
    return found


def _fabric_gpus(pool: dict) -> int:
    """GPUs of the pool's GPU type one NVLink fabric joins across nodes (0: none, or a type the catalog lacks)."""
    gpu = gpu_catalog().get(pool["gpu"])
    return 0 if gpu is None else gpu.fabric_gpus


def _whole_groups(held: int, tp: int, node_gpus: int, fabric_gpus: int) -> bool:
    """Whether ``held`` GPUs of one node are whole TP groups, or the whole node as its share of one TP group over
    whole nodes of an NVLink fabric."""
    return held % tp == 0 or (held == node_gpus and spans_nvlink(tp, node_gpus, fabric_gpus))


def _instance_violations(pool: dict, instance: str, placed: list[tuple[str, dict, dict]]) -> list[Violation]:
    """One instance laid out as the engines run it, from its node-map entries ``placed`` (field path,
    node, entry):

    - each stage holds TP × DP GPUs, summed over the nodes it spans, so the instance holds TP × DP × PP
      (SGLang ``--tp`` counts TP × DP GPUs with ``--enable-dp-attention``, vLLM TP × DP ranks);
    - a node holds whole TP groups of a stage (each DP rank's attention TP inside one node), or the whole node
      is its share of a TP group over whole nodes of one NVLink fabric (:func:`pdplan.shape.spans_nvlink`), and every
      node an instance spans holds as many of its GPUs (SGLang starts ``tp_size // nnodes`` ranks on each
      node: ``_calculate_rank_ranges``, python/sglang/srt/entrypoints/engine.py at 001067f);
    - its nodes are of one node type, the scale-out domain the cluster file describes (the nodes of a type
      share its ``inter_node_gb_s`` network; pdplan knows no path that joins two types into one instance);
    - ``node_rank``, when any entry has it: on every entry, one rank per node, ranks 0..k-1 over its k
      nodes, rank 0 (the leader, where global rank 0 and the distributed init address live) holding
      stage 0. A stage spanning nodes must state it; without it, ranks follow stage order."""
    shape = pool_shape(pool)
    tp, dp = shape.tp, shape.dp
    label = f"TP{tp}" if dp == 1 else f"TP{tp} DP{dp} (TP × DP = {tp * dp} GPUs)"
    found = []
    by_stage: dict[int, list] = {}
    for where, node, entry in placed:
        by_stage.setdefault(entry["stage"], []).append((where, node, entry))
    for stage, entries in sorted(by_stage.items()):
        held = sum(len(entry["gpu_indices"]) for _, _, entry in entries)
        if len(entries) == 1 and held != tp * dp:
            found.append(Violation(f"{entries[0][0]}.gpu_indices", f"{held} GPUs for a {label} stage"))
            continue
        split = [(where, len(entry["gpu_indices"])) for where, node, entry in entries
                 if not _whole_groups(len(entry["gpu_indices"]), tp, node["gpus"], _fabric_gpus(pool))]
        for where, count in split:
            found.append(Violation(f"{where}.gpu_indices", f"{count} GPUs of a stage spanning nodes: each DP rank's "
                                                           f"TP{tp} group sits inside one node, or on whole nodes "
                                                           "of one NVLink fabric"))
        if not split and held != tp * dp:
            found.append(Violation(f"{entries[0][0]}.gpu_indices", f"stage {stage} of instance {instance} holds "
                                   f"{held} GPUs over {len(entries)} nodes; a {label} stage needs {tp * dp}"))
    per_node: dict[str, int] = {}
    for _, node, entry in placed:
        per_node[node["node"]] = per_node.get(node["node"], 0) + len(entry["gpu_indices"])
    first = placed[0][0]
    spans = any(len(entries) > 1 for entries in by_stage.values())
    if spans and len(set(per_node.values())) > 1:
        counts = ", ".join(f"{node} {count}" for node, count in sorted(per_node.items()))
        found.append(Violation(f"{first}.gpu_indices", f"instance {instance} spans nodes with unequal GPUs ({counts}); "
                                                       "the engines run as many ranks on every node of an instance"))
    types = sorted({str(node.get("node_type")) for _, node, _ in placed})
    if len(types) > 1:
        found.append(Violation(f"{first}.instance", f"instance {instance} spans node types {', '.join(types)}: an "
                                                    "instance is larger than its scale-out domain, the nodes of one "
                                                    "type"))
    return found + _node_rank_violations(instance, placed, spans)


def _node_rank_violations(instance: str, placed: list[tuple[str, dict, dict]], spans: bool) -> list[Violation]:
    """``node_rank`` of one instance's entries (see :func:`_instance_violations`)."""
    ranked = [(where, node["node"], entry) for where, node, entry in placed if "node_rank" in entry]
    first = placed[0][0]
    if not ranked:
        return [Violation(f"{first}.node_rank", f"instance {instance} has a stage spanning nodes: each of its "
                                                "entries needs its node_rank (0: the leader)")] if spans else []
    if len(ranked) < len(placed):
        missing = next(where for where, _, entry in placed if "node_rank" not in entry)
        return [Violation(f"{missing}.node_rank", f"instance {instance} states node_rank on some entries: every "
                                                  "entry needs it")]
    rank_of: dict[str, int] = {}
    found = []
    for where, node, entry in ranked:
        if rank_of.setdefault(node, entry["node_rank"]) != entry["node_rank"]:
            found.append(Violation(f"{where}.node_rank", f"node {node} has node_rank {rank_of[node]} and "
                                   f"{entry['node_rank']} in instance {instance}: one rank per node"))
    ranks = sorted(rank_of.values())
    if ranks != list(range(len(rank_of))):
        found.append(Violation(f"{ranked[0][0]}.node_rank", f"instance {instance} spans {len(rank_of)} nodes with node "
                                                            f"ranks {ranks}: each of 0..{len(rank_of) - 1} once"))
    leaders = {node for node, rank in rank_of.items() if rank == 0}
    stage_zero = {node for _, node, entry in ranked if entry["stage"] == 0}
    if not found and leaders and not leaders & stage_zero:
        found.append(Violation(f"{ranked[0][0]}.node_rank", f"node_rank 0 of instance {instance} must hold stage 0 "
                                                            "(global rank 0, the distributed init address)"))
    return found


def domain_violations(nodes: list[dict], cluster: Cluster) -> list[Violation]:
    """Each instance of the node map ``nodes`` fits its scale-out domain in ``cluster``: the nodes of its
    node type, which the cluster file joins by one inter-node network (``inter_node_gb_s``), ``count``
    of them (unbounded: any number). An instance spanning more nodes than its type has is larger than
    its domain; a node type the cluster lacks is named."""
    types = {n.name: n for n in cluster.nodes}
    found = [Violation(f"placement.nodes[{n}].node_type", f"{node['node_type']!r} is not a node type of the cluster "
                                                          f"file (its types: {', '.join(sorted(types))})")
             for n, node in enumerate(nodes) if node["node_type"] not in types]
    for (_, instance), slots in sorted(instance_slots(nodes).items()):
        n, k = slots[0]
        kind = nodes[n]["node_type"]
        spanned = {nodes[m]["node"] for m, _ in slots}
        count = types[kind].count if kind in types else None
        if count is not None and len(spanned) > count:
            found.append(Violation(f"placement.nodes[{n}].instances[{k}].instance",
                                   f"instance {instance} spans {len(spanned)} {kind} nodes: larger than its scale-out "
                                   f"domain, the cluster's {count} {kind} nodes of {types[kind].gpus_per_node} GPUs"))
    return found


def instance_slots(nodes: list[dict]) -> dict[tuple[str, str], list[tuple[int, int]]]:
    """(pool, instance) → where the node map ``nodes`` places it: (node index, entry index) of each entry, in
    map order."""
    slots: dict[tuple[str, str], list[tuple[int, int]]] = {}
    for n, node in enumerate(nodes):
        for k, entry in enumerate(node["instances"]):
            slots.setdefault((entry["pool"], entry["instance"]), []).append((n, k))
    return slots


def spanning_pools(nodes: list[dict]) -> set[str]:
    """The pools some instance of which the node map ``nodes`` places on more than one node."""
    return set(spanned_node_gpus(nodes))


def spanned_node_gpus(nodes: list[dict]) -> dict[str, int]:
    """Pool → the GPUs of the smallest node an instance of it spanning nodes sits on, for the pools some instance
    of which the node map ``nodes`` places on more than one node (what the engines' rank rules read,
    :func:`pdplan.engines.rank_span_refusal`)."""
    found: dict[str, int] = {}
    for (pool, _), slots in instance_slots(nodes).items():
        held = {nodes[n]["node"]: nodes[n]["gpus"] for n, _ in slots}
        if len(held) > 1:
            smallest = min(held.values())
            found[pool] = min(found.get(pool, smallest), smallest)
    return found


def physical_gpu(name: str) -> str:
    """The hardware a GPU type runs on: a power-capped setting's base GPU (Splitwise's HHcap), else itself."""
    gpu = gpu_catalog().get(name)
    return name if gpu is None else gpu.physical
