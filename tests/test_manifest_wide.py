"""Wide expert parallelism in the manifest: pools record attention data parallelism (DP), expert
parallelism (EP) and redundant experts; an instance may span nodes (``node_rank``); ``validate``
checks each against the rule an engine applies when it starts.

The manifests here are written by hand in YAML, a DeepSeek-V3 decode pool of one node (SGLang
``--tp 8 --dp 8 --enable-dp-attention --ep-size 8``: attention TP1, 8 GPUs) and one of two nodes
(``--tp 16 --dp 16 --ep-size 16 --nnodes 2``: 16 GPUs), and each rule is broken once.
"""

from __future__ import annotations

import copy

import pytest
import yaml
from jsonschema import Draft202012Validator

from pdplan.errors import PdplanError
from pdplan.manifest.build import GIB, MEMORY_UTILIZATION
from pdplan.manifest.check import pool_violations
from pdplan.manifest.document import pool_shape, schema
from pdplan.manifest.node_map import node_map_violations, spanning_pools
from pdplan.modelref import get_model
from pdplan.modelspec import weight_bytes_per_gpu

MODEL = "deepseek-v3@fp8"

#: The modelspec rule "EP is 1 or divides TP × DP" takes dp once the wide-memory branch has merged;
#: until then EP must equal TP, so a pool of attention TP1 with EP8 is refused before its time.

DP8_POOL = """
name: decode
phase: decode
model: deepseek-v3@fp8
gpu: h200-141gb
tp: 1
pp: 1
dp: 8
ep: 8
replicas: 1
gpus: 8
engine: sglang
scheduling: {}
capacity: {per_instance_rps: 4.0, pool_rps: 4.0}
memory: {gpu_memory_gib: 141.0, memory_utilization: 0.9, weights_gib_per_gpu: 0.0,
         kv_capacity_tokens_per_instance: 800000, kv_heads_per_gpu: 1}
profile: {source: roofline, method: hand-written, fallback: null}
"""

DP8_NODES = """
- node: h200-0
  node_type: h200
  gpu: h200-141gb
  gpus: 8
  instances:
    - {instance: decode-0, pool: decode, stage: 0, gpu_indices: [0, 1, 2, 3, 4, 5, 6, 7]}
"""

DP16_NODES = """
- node: h200-0
  node_type: h200
  gpu: h200-141gb
  gpus: 8
  instances:
    - {instance: decode-0, pool: decode, stage: 0, node_rank: 0, gpu_indices: [0, 1, 2, 3, 4, 5, 6, 7]}
- node: h200-1
  node_type: h200
  gpu: h200-141gb
  gpus: 8
  instances:
    - {instance: decode-0, pool: decode, stage: 0, node_rank: 1, gpu_indices: [0, 1, 2, 3, 4, 5, 6, 7]}
"""


def _pool(**fields) -> dict:
    """The DP8 EP8 pool with ``fields`` changed, its weights as modelspec sizes them (the field a
    consistent manifest carries; a rule under test is never the weights)."""
    pool = yaml.safe_load(DP8_POOL) | fields
    shape = pool_shape(pool)
    wide = {"dp": shape.dp} if shape.dp > 1 else {}
    try:
        weights = weight_bytes_per_gpu(get_model(MODEL), shape.tp, shape.pp, ep=shape.ep,
                                       redundant_experts=pool.get("redundant_experts", 0), **wide)
    except (PdplanError, TypeError):  # an EP the rules refuse (named by the placement check first), or a
        weights = 0                   # modelspec without the dp keyword (before the wide-memory branch)
    pool["memory"] = pool["memory"] | {"weights_gib_per_gpu": weights / GIB}
    return pool


def _dp16_pool(**fields) -> dict:
    return _pool(dp=16, ep=16, gpus=16, **fields)


def _pool_fields(pool: dict) -> list[str]:
    return [v.field for v in pool_violations("pools[0]", pool, get_model(MODEL))]


def _placement(pool: dict, nodes: str | list) -> list:
    nodes = yaml.safe_load(nodes) if isinstance(nodes, str) else nodes
    return node_map_violations({pool["name"]: pool}, nodes, at="placement.nodes",
                               pool_field=lambda name, key: f"pools[0].{key}")


def _schema_errors(fragment, part: str) -> list[str]:
    """Schema errors of a pool (``part`` "pool") or a node map (``part`` "nodes")."""
    props = schema()["properties"]
    sub = props["pools"]["items"] if part == "pool" else props["placement"]["properties"]["nodes"]
    return [e.message for e in Draft202012Validator(sub).iter_errors(fragment)]


# --- the schema -----------------------------------------------------------------------------------

def test_the_schema_takes_dp_ep_redundant_experts_and_node_rank():
    assert _schema_errors(_pool(redundant_experts=32), "pool") == []
    assert _schema_errors(yaml.safe_load(DP16_NODES), "nodes") == []


@pytest.mark.parametrize("field, value", [("dp", 0), ("ep", 0), ("redundant_experts", -1), ("ep", "8")])
def test_the_schema_refuses_a_coordinate_that_is_no_count(field, value):
    assert _schema_errors(_pool(**{field: value}), "pool")


def test_the_schema_refuses_a_negative_node_rank():
    nodes = yaml.safe_load(DP16_NODES)
    nodes[1]["instances"][0]["node_rank"] = -1
    assert _schema_errors(nodes, "nodes")


# --- an old manifest's pool -----------------------------------------------------------------------

def test_a_pool_without_dp_and_ep_is_attention_tp_only():
    pool = yaml.safe_load(DP8_POOL)
    del pool["dp"], pool["ep"]
    assert (pool_shape(pool).dp, pool_shape(pool).ep, pool_shape(pool).gpus) == (1, 1, 1)


def test_the_moe_issues_expert_parallel_field_is_read_as_ep_when_the_pool_has_none():
    pool = yaml.safe_load(DP8_POOL)
    del pool["dp"], pool["ep"]
    pool["memory"]["expert_parallel"] = 1
    assert pool_shape(pool).ep == 1
    pool["tp"], pool["memory"]["expert_parallel"] = 8, 8
    assert pool_shape(pool).ep == 8


def test_an_old_moe_pool_with_whole_experts_over_tp_still_validates():
    pool = _pool(tp=8, dp=1, ep=8, gpus=8)
    del pool["ep"], pool["dp"]
    pool["memory"]["expert_parallel"] = 8
    assert _pool_fields(pool) == []


# --- GPUs per instance ----------------------------------------------------------------------------

def test_a_dp8_ep8_decode_pool_of_one_node_is_accepted():
    pool = _pool()
    assert _pool_fields(pool) == []
    assert _placement(pool, DP8_NODES) == []


def test_a_dp16_ep16_instance_over_two_nodes_is_accepted():
    pool = _dp16_pool()
    assert _pool_fields(pool) == []
    assert _placement(pool, DP16_NODES) == []


def test_the_placement_of_dp8_on_one_node_and_dp16_on_two_is_accepted():
    assert _placement(_pool(), DP8_NODES) == []
    assert _placement(_dp16_pool(), DP16_NODES) == []


def test_pool_gpus_must_be_replicas_times_tp_dp_pp():
    # 8 GPUs per instance as the engines count them (SGLang --tp 8 --dp 8), not TP × PP = 1 and not 8 × 8
    for wrong in (_pool(gpus=1), _pool(gpus=64), _pool(replicas=2, gpus=8)):
        assert _pool_fields(wrong) == ["pools[0].gpus"]
    assert "replicas × TP × DP × PP = 8" in pool_violations("pools[0]", _pool(gpus=1), get_model(MODEL))[0].message


def test_pool_gpus_of_a_tp_only_instance_are_replicas_times_tp_pp():
    assert _pool_fields(_pool(tp=8, dp=1, ep=8, gpus=16)) == ["pools[0].gpus"]


def test_a_stage_on_one_node_holds_tp_times_dp_gpus():
    nodes = yaml.safe_load(DP8_NODES)
    nodes[0]["instances"][0]["gpu_indices"] = [0, 1, 2, 3]
    found = _placement(_pool(), nodes)
    assert [v.field for v in found] == ["placement.nodes[0].instances[0].gpu_indices"]
    assert "4 GPUs for a TP1 DP8 (TP × DP = 8 GPUs) stage" in found[0].message


def test_an_instance_over_nodes_holds_tp_times_dp_gpus_summed_over_them():
    pool = _pool(dp=12, ep=12, gpus=12)  # DP12: 12 GPUs, but the node map gives it 16
    found = _placement(pool, DP16_NODES)
    assert [v.field for v in found] == ["placement.nodes[0].instances[0].gpu_indices"]
    assert "holds 16 GPUs over 2 nodes; a TP1 DP12 (TP × DP = 12 GPUs) stage needs 12" in found[0].message


# --- ranks per node -------------------------------------------------------------------------------

def test_every_node_of_a_spanning_instance_holds_as_many_of_its_gpus():
    nodes = yaml.safe_load(DP16_NODES)
    nodes[0]["instances"][0]["gpu_indices"] = [0, 1, 2, 3, 4, 5]
    nodes[1]["instances"][0]["gpu_indices"] = list(range(8)) + [8, 9]
    nodes[1]["gpus"] = 10
    found = _placement(_dp16_pool(), nodes)
    assert [v.field for v in found] == ["placement.nodes[0].instances[0].gpu_indices"]
    assert "unequal GPUs (h200-0 6, h200-1 10)" in found[0].message


def test_each_dp_ranks_tp_group_sits_inside_one_node():
    # TP4 × DP4 = 16 GPUs over 3 nodes as 6 + 6 + 4: a TP group of 4 would straddle two nodes
    nodes = yaml.safe_load(DP16_NODES)
    nodes.append(copy.deepcopy(nodes[1]) | {"node": "h200-2"})
    for node, (count, rank) in zip(nodes, ((6, 0), (6, 1), (4, 2))):
        node["instances"][0] |= {"gpu_indices": list(range(count)), "node_rank": rank}
    found = _placement(_pool(tp=4, dp=4, ep=16, gpus=16), nodes)
    assert {v.field for v in found} >= {"placement.nodes[0].instances[0].gpu_indices",
                                        "placement.nodes[1].instances[0].gpu_indices"}
    assert any("each DP rank's TP4 group sits inside one node" in v.message for v in found)


def _tp8_over_two_nodes(gpu: str, gpus: int = 4) -> list:
    """A TP8 instance (no DP) on two nodes of ``gpus`` GPUs each, ranks 0 and 1."""
    return [{"node": f"n-{rank}", "node_type": "n", "gpu": gpu, "gpus": gpus,
             "instances": [{"instance": "decode-0", "pool": "decode", "stage": 0, "node_rank": rank,
                            "gpu_indices": list(range(gpus))}]} for rank in range(2)]


def test_a_tp8_group_over_two_whole_gb200_trays_is_a_valid_node_map():
    assert _placement(_pool(gpu="gb200-185gb", tp=8, dp=1, ep=1, gpus=8), _tp8_over_two_nodes("gb200-185gb")) == []


def test_a_tp8_group_over_two_hgx_nodes_of_four_is_refused_naming_tp():
    # NVLink ends at an HGX board: two 4-GPU shares of boards never join one TP group
    found = _placement(_pool(tp=8, dp=1, ep=1, gpus=8), _tp8_over_two_nodes("h200-141gb"))
    assert "pools[0].tp" in {v.field for v in found}
    assert any("TP8 spans more than one node or NVLink domain (4 GPUs)" in v.message for v in found)


def test_a_tp_group_over_trays_takes_whole_trays():
    # TP8 as 2 + 2 + 2 + 2 GPUs of four trays: the group spans trays, but not as whole ones
    nodes = [{"node": f"n-{rank}", "node_type": "n", "gpu": "gb200-185gb", "gpus": 4,
              "instances": [{"instance": "decode-0", "pool": "decode", "stage": 0, "node_rank": rank,
                             "gpu_indices": [0, 1]}]} for rank in range(4)]
    found = _placement(_pool(gpu="gb200-185gb", tp=8, dp=1, ep=1, gpus=8), nodes)
    assert any("TP8 group sits inside one node, or on whole nodes of one NVLink fabric" in v.message for v in found)


# --- node ranks -----------------------------------------------------------------------------------

def test_a_stage_spanning_nodes_must_state_its_node_ranks():
    nodes = yaml.safe_load(DP16_NODES)
    for node in nodes:
        del node["instances"][0]["node_rank"]
    found = _placement(_dp16_pool(), nodes)
    assert [v.field for v in found] == ["placement.nodes[0].instances[0].node_rank"]


def test_node_rank_is_stated_on_every_entry_or_none():
    nodes = yaml.safe_load(DP16_NODES)
    del nodes[1]["instances"][0]["node_rank"]
    assert [v.field for v in _placement(_dp16_pool(), nodes)] == ["placement.nodes[1].instances[0].node_rank"]


@pytest.mark.parametrize("ranks", [(0, 0), (1, 2), (0, 2)])
def test_node_ranks_are_0_to_k_minus_1_each_once(ranks):
    nodes = yaml.safe_load(DP16_NODES)
    for node, rank in zip(nodes, ranks):
        node["instances"][0]["node_rank"] = rank
    found = _placement(_dp16_pool(), nodes)
    assert [v.field for v in found] == ["placement.nodes[0].instances[0].node_rank"]
    assert "each of 0..1 once" in found[0].message


def test_a_single_node_instance_has_node_rank_0_or_none():
    nodes = yaml.safe_load(DP8_NODES)
    nodes[0]["instances"][0]["node_rank"] = 0
    assert _placement(_pool(), nodes) == []
    nodes[0]["instances"][0]["node_rank"] = 1
    assert [v.field for v in _placement(_pool(), nodes)] == ["placement.nodes[0].instances[0].node_rank"]


def test_the_leader_node_holds_stage_0():
    # TP1 DP8 PP2: stage 0 on h200-0, stage 1 on h200-1; the leader (rank 0) must be stage 0's node
    nodes = yaml.safe_load(DP16_NODES)
    nodes[1]["instances"][0]["stage"] = 1
    pool = _pool(pp=2, gpus=16)
    assert _placement(pool, nodes) == []
    nodes[0]["instances"][0]["node_rank"], nodes[1]["instances"][0]["node_rank"] = 1, 0
    found = _placement(pool, nodes)
    assert [v.field for v in found] == ["placement.nodes[0].instances[0].node_rank"]
    assert "must hold stage 0" in found[0].message


def test_a_pipeline_over_nodes_without_node_ranks_reads_as_before():
    nodes = yaml.safe_load(DP16_NODES)
    nodes[1]["instances"][0]["stage"] = 1
    for node in nodes:
        del node["instances"][0]["node_rank"]
    assert _placement(_pool(pp=2, gpus=16), nodes) == []


# --- the scale-out domain -------------------------------------------------------------------------

def test_a_pool_spans_nodes_when_an_instance_of_it_sits_on_two():
    assert spanning_pools(yaml.safe_load(DP16_NODES)) == {"decode"}
    assert spanning_pools(yaml.safe_load(DP8_NODES)) == set()


def test_an_instance_over_two_node_types_is_larger_than_its_scale_out_domain():
    nodes = yaml.safe_load(DP16_NODES)
    nodes[1]["node_type"] = "h200-other-fabric"
    found = _placement(_dp16_pool(), nodes)
    assert [v.field for v in found] == ["placement.nodes[0].instances[0].instance"]
    assert "larger than its scale-out domain" in found[0].message


# --- expert parallelism ---------------------------------------------------------------------------

def test_ep_must_be_1_or_divide_tp_times_dp():
    # EP3 over TP8 × DP1 = 8 GPUs: whole experts cannot be spread over 3 of 8 ranks
    assert _pool_fields(_pool(tp=8, dp=1, ep=3)) == ["pools[0].ep"]


def test_ep_must_divide_tp_times_dp_with_attention_data_parallelism():
    assert _pool_fields(_pool(ep=3)) == ["pools[0].ep"]
    assert _pool_fields(_pool(dp=16, ep=8, gpus=16)) == []  # EP8 over TP1 × DP16: expert TP2 (TP × DP / EP)


def test_redundant_experts_must_spread_evenly_over_ep():
    # 256 routed experts + 4 redundant = 260 over EP8 (TP8): 32.5 per rank
    assert _pool_fields(_pool(tp=8, dp=1, ep=8, redundant_experts=4)) == ["pools[0].redundant_experts"]
    assert _pool_fields(_pool(tp=8, dp=1, ep=8, redundant_experts=8)) == []


def test_redundant_experts_need_expert_parallelism():
    assert _pool_fields(_pool(tp=8, dp=1, ep=1, redundant_experts=8)) == ["pools[0].redundant_experts"]


def test_deepseeks_32_redundant_experts_spread_over_dp16_ep16():
    # 256 + 32 = 288 physical experts, 18 per rank of EP16
    assert _pool_fields(_dp16_pool(redundant_experts=32)) == []


def test_ep_is_recorded_once():
    pool = _pool(tp=8, dp=1, ep=8)
    pool["memory"]["expert_parallel"] = 1
    assert "pools[0].memory.expert_parallel" in _pool_fields(pool)
    pool["memory"]["expert_parallel"] = 8
    assert _pool_fields(pool) == []


def test_a_dense_model_has_no_expert_parallelism():
    pool = _pool(tp=8, dp=1, ep=8) | {"model": "llama2-70b"}
    found = pool_violations("pools[0]", pool, get_model("llama2-70b"))
    assert [v.field for v in found] == ["pools[0].ep"]
    assert "no routed experts" in found[0].message


def test_the_memory_utilization_the_manifest_states_is_the_builders():
    assert yaml.safe_load(DP8_POOL)["memory"]["memory_utilization"] == MEMORY_UTILIZATION


def test_an_instance_spanning_more_nodes_than_its_type_has_is_larger_than_its_domain(tmp_path):
    from pdplan.hardware import load_cluster
    from pdplan.manifest.node_map import domain_violations

    cluster = tmp_path / "cluster.yaml"
    cluster.write_text("nodes:\n  - {name: h200, gpu: h200-141gb, gpus_per_node: 8, intra_node_gb_s: 450, "
                       "inter_node_gb_s: 50, count: 1}\n")
    found = domain_violations(yaml.safe_load(DP16_NODES), load_cluster(cluster))
    assert [v.field for v in found] == ["placement.nodes[0].instances[0].instance"]
    assert "spans 2 h200 nodes: larger than its scale-out domain, the cluster's 1 h200 nodes" in found[0].message
    cluster.write_text(cluster.read_text().replace("count: 1", "count: 2"))
    assert domain_violations(yaml.safe_load(DP16_NODES), load_cluster(cluster)) == []
    assert domain_violations(yaml.safe_load(DP8_NODES), load_cluster(cluster)) == []


# --- whole manifests through validate -------------------------------------------------------------

def _resealed(manifest: dict) -> dict:
    from pdplan.manifest.document import seal

    body = copy.deepcopy(manifest)
    del body["provenance"]["sections"], body["provenance"]["content_hash"]
    return seal(body)


def test_a_manifest_written_before_dp_and_ep_still_validates(run_cli, disaggregated, tmp_path):
    old = copy.deepcopy(disaggregated)
    for pool in old["pools"]:
        assert (pool.pop("dp"), pool.pop("ep")) == (1, 1)
    for node in old["placement"]["nodes"]:
        for slot in node["instances"]:
            slot.pop("node_rank", None)
    path = tmp_path / "old.yaml"
    path.write_text(yaml.safe_dump(_resealed(old), sort_keys=False))
    code, out, err = run_cli("validate", path)
    assert code == 0, out + err


def test_a_written_manifest_records_dp_and_ep_on_every_pool(disaggregated, colocated):
    for manifest in (disaggregated, colocated):
        assert all((p["dp"], p["ep"]) == (1, 1) and "redundant_experts" not in p for p in manifest["pools"])
        assert all("expert_parallel" not in p["memory"] for p in manifest["pools"])


def test_validate_names_gpus_that_are_not_tp_times_dp_times_pp(run_cli, disaggregated, tmp_path):
    edited = copy.deepcopy(disaggregated)
    edited["pools"][0]["gpus"] = edited["pools"][0]["gpus"] * 2
    path = tmp_path / "gpus.yaml"
    path.write_text(yaml.safe_dump(_resealed(edited), sort_keys=False))
    code, out, _ = run_cli("validate", path)
    assert code == 1
    assert "pools[0].gpus" in out and "replicas × TP × PP" in out


def test_simulate_reads_a_manifests_coordinates_into_its_plan(disaggregated):
    from pdplan.manifest.plan import plan_of_manifest

    assert all((p.dp, p.ep, p.redundant_experts) == (1, 1, 0) for p in plan_of_manifest(disaggregated, "m").pools)
    wide = copy.deepcopy(disaggregated)
    wide["pools"][1] |= {"dp": 2, "ep": 4, "redundant_experts": 8}
    assert [(p.dp, p.ep, p.redundant_experts) for p in plan_of_manifest(wide, "m").pools][1] == (2, 4, 8)
    older = copy.deepcopy(disaggregated)
    del older["pools"][1]["ep"]
    older["pools"][1]["memory"]["expert_parallel"] = 2
    assert plan_of_manifest(older, "m").pools[1].ep == 2


def test_a_manifest_records_how_its_prefill_ranks_take_prompts_and_simulate_reads_it_back(disaggregated):
    """SGLang's P/D prefill routes by bootstrap room: the pool's ``scheduling.rank_router``, which the schema
    takes (and no other word), and which the plan of the manifest keeps, so a resimulation routes as verified."""
    from pdplan.manifest.plan import plan_of_manifest

    prefill = next(i for i, p in enumerate(disaggregated["pools"]) if p["phase"] == "prefill")
    wide = copy.deepcopy(disaggregated)
    wide["pools"][prefill] |= {"dp": 2, "ep": 2}
    wide["pools"][prefill]["scheduling"] = {**wide["pools"][prefill]["scheduling"], "rank_router": "bootstrap-room"}
    assert _schema_errors(wide["pools"][prefill], "pool") == []
    assert plan_of_manifest(wide, "m").pools[prefill].rank_router == "bootstrap-room"
    wide["pools"][prefill]["scheduling"]["rank_router"] = "random"
    assert _schema_errors(wide["pools"][prefill], "pool")


def test_a_manifest_records_how_a_pools_tokens_reach_its_experts_and_simulate_reads_it_back(disaggregated):
    """``all_to_all`` is the schema's ``dispatch`` or ``gather`` (no other word), the plan of the manifest keeps it,
    so a resimulation times the exchange verified, and a manifest written before it reads as a dispatch."""
    from pdplan.manifest.plan import plan_of_manifest

    wide = copy.deepcopy(disaggregated)
    wide["pools"][1] |= {"tp": 1, "dp": 8, "ep": 8, "all_to_all": "gather"}
    assert _schema_errors(wide["pools"][1], "pool") == []
    assert plan_of_manifest(wide, "m").pools[1].all_to_all == "gather"
    del wide["pools"][1]["all_to_all"]
    assert plan_of_manifest(wide, "m").pools[1].all_to_all == "dispatch"
    assert _schema_errors(_pool(all_to_all="deepep"), "pool")


def test_a_gather_needs_attention_dp_with_whole_experts_over_every_gpu():
    assert _pool_fields(_pool(all_to_all="gather")) == []
    assert _pool_fields(_pool(tp=8, dp=1, all_to_all="gather")) == ["pools[0].all_to_all"]
    assert _pool_fields(_pool(dp=16, ep=8, gpus=16, all_to_all="gather")) == ["pools[0].all_to_all"]


def test_a_manifest_records_the_requests_a_rank_runs_at_once_and_simulate_reads_it_back(disaggregated):
    """A decode pool held below its KV (DeepEP's low-latency budget, vLLM's default requests per rank: 256 on an A100)
    states ``scheduling.max_running_requests``, a positive integer in the schema, which the plan of the manifest keeps
    so a resimulation holds the ranks to it; a manifest written before it leaves them to their KV."""
    from pdplan.manifest.plan import plan_of_manifest

    decode = next(i for i, p in enumerate(disaggregated["pools"]) if p["phase"] == "decode")
    assert disaggregated["pools"][decode]["gpu"] == "a100-80gb"
    assert plan_of_manifest(disaggregated, "m").pools[decode].max_running_requests == 256
    capped = copy.deepcopy(disaggregated)
    del capped["pools"][decode]["scheduling"]["max_running_requests"]
    assert plan_of_manifest(capped, "m").pools[decode].max_running_requests is None
    capped["pools"][decode]["scheduling"] = {**capped["pools"][decode]["scheduling"], "max_running_requests": 128}
    assert _schema_errors(capped["pools"][decode], "pool") == []
    assert plan_of_manifest(capped, "m").pools[decode].max_running_requests == 128
    capped["pools"][decode]["scheduling"]["max_running_requests"] = 0
    assert _schema_errors(capped["pools"][decode], "pool")
