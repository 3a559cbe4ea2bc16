"""Where a mixture-of-experts model's weights live on an instance with tensor (TP), attention
data-parallel (DP) and expert (EP) parallelism, as the engines place them: the rules a (tp, dp, ep)
split must meet, expert TP, and which parts every GPU holds whole. :mod:`pdplan.modelspec` sizes the
bytes from these rules."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pdplan.vocabulary import AllToAll

if TYPE_CHECKING:
    from pdplan.modelspec import ModelSpec
    from pdplan.schema import Fields


def expert_tp(tp: int, ep: int = 1, dp: int = 1) -> int:
    """GPUs one routed expert is split over: the tp × dp GPUs of the instance's MoE group over EP (each
    EP group holds whole experts; expert TP splits each of them). SGLang ``moe_tp_size = tp_size //
    moe_ep_size // moe_dp_size`` with ``tp_size`` = attention TP × DP and ``moe_dp_size`` 1
    (python/sglang/srt/distributed/parallel_state.py, ``initialize_model_parallel``); TensorRT-LLM
    ``moe_tp_size * moe_ep_size * moe_cluster_size == moe_world_size`` (tensorrt_llm/mapping.py); vLLM: EP
    = TP × DP with ``--enable-expert-parallel``, else every expert split over TP × DP
    (``FusedMoEParallelConfig.make``, ``flatten_tp_across_dp``: "There are actually dp_size * tp_size
    devices. Update tp_size and tp_rank so we shard across all devices",
    vllm/model_executor/layers/fused_moe/config.py)."""
    return tp * dp // ep


def expert_placement_rejection(model: ModelSpec, tp: int, ep: int = 1, redundant_experts: int = 0, dp: int = 1
                               ) -> tuple[str, str] | None:
    """(field, sentence) when experts cannot be placed on a (tp, dp, ep) instance as the engines place
    them; None when they can.

    The routed experts live on the instance's tp × dp GPUs (attention TP times attention DP ranks: SGLang's
    ``--tp`` counts them all, vLLM flattens TP across DP for the MoE layers). Without expert parallelism
    (ep = 1, vLLM's and SGLang's default) every routed expert is split over all of them, which vLLM's
    FusedMoE requires to divide its width (``assert intermediate_size % self.tp_size == 0``). With it, EP
    divides tp × dp (SGLang: "tp_size {tp_size} must be divisible by ep_size {moe_ep_size}"; TensorRT-LLM
    ``moe_tp × moe_ep = tp``; vLLM's EP = tp × dp) and each EP group holds whole experts, ⌈(E + R)/EP⌉ on the fullest
    (``determine_expert_map``: the first (E + R) mod EP ranks take one more), each split over expert TP
    = tp × dp / EP (:func:`expert_tp`). R redundant experts (SGLang ``--ep-num-redundant-experts``, vLLM
    EPLB's ``num_redundant_experts``) need expert parallelism (vLLM: "Redundant experts are only supported
    with EPLB") and must spread evenly ("EPLB currently only supports even distribution of experts across
    ranks"); an EP group without a single expert is refused. vllm-project/vllm
    vllm/model_executor/layers/fused_moe/layer.py at 0014ec6, ``FusedMoE.__init__``; sgl-project/sglang
    python/sglang/srt/server_args.py.
    """
    if not model.is_moe:
        if ep != 1 or redundant_experts:
            return "ep", f"{model.base_name} has no routed experts: expert parallelism and redundant experts need them"
        return None
    if tp < 1 or dp < 1:
        return ("tp" if tp < 1 else "dp"), f"TP {tp} and DP {dp} must be >= 1"
    physical = model.experts + redundant_experts
    group = tp * dp
    if ep < 1 or group % ep:
        if dp == 1:
            return "ep", (f"EP {ep} must be 1 (experts split over TP) or divide TP {tp} (expert TP = TP / EP, "
                          "whole experts per EP rank)")
        return "ep", (f"EP {ep} must divide the {group} GPUs of TP {tp} × DP {dp} that hold the experts "
                      "(expert TP = TP × DP / EP)")
    slots = slots_rejection(ep, redundant_experts)
    if slots is not None:
        return "redundant_experts", slots
    if ep > physical:
        return "ep", (f"EP {ep} > {physical} experts ({model.experts} + {redundant_experts} redundant): "
                      "ranks without experts")
    if redundant_experts and physical % ep:
        return "redundant_experts", (f"{model.experts} + {redundant_experts} redundant experts do not spread "
                                     f"evenly over EP {ep}")
    split = expert_tp(tp, ep, dp)
    if split == tp and ep == 1:   # experts split over the TP group, as before attention DP
        who = f"TP {tp}"
    else:
        who = f"expert TP {split} (TP {tp} × DP {dp} / EP {ep})"
    if model.expert_ffn % split:
        return "tp", f"{who} does not divide the expert width {model.expert_ffn}"
    block = model.weight_block if model.weight_dtype == "fp8" else 0
    if split > 1 and block and (model.expert_ffn // split) % block:
        # vLLM's Fp8MoEMethod.create_weights (quantization/fp8.py): "The output_size of gate's and up's
        # weight = … is not divisible by weight quantization block_n = …".
        return "tp", (f"{who} splits each expert to {model.expert_ffn // split} columns, not a multiple of the "
                      f"fp8 scale block {block}: use expert parallelism or a smaller TP")
    return None


#: With attention data parallelism a GPU holds the dense MLPs and shared experts whole.
#: The engines differ, and pdplan (which sizes memory before choosing an engine's flags) takes the fullest
#: GPU among their wide-EP paths: SGLang builds the shared experts with ``tp_rank=0, tp_size=1`` whenever
#: the all-to-all backend is DeepEP (its wide-EP path; ``DeepseekV2MoE.__init__``,
#: python/sglang/srt/models/deepseek_v2.py), and the dense MLPs of the first layers with ``mlp_tp_size = 1``
#: under ``--moe-dense-tp-size 1`` (``enable_moe_dense_fully_dp``, python/sglang/srt/layers/communicator.py;
#: the flag of SGLang's published large-scale EP commands), else over all tp × dp GPUs. vLLM runs each DP
#: rank as its own engine, so its dense MLPs are split over the rank's attention TP only, and its shared
#: experts too unless it shards MoE inputs across TP, when each GPU holds them whole
#: (``ParallelConfig.use_sequence_parallel_moe``, vllm/config/parallel.py: EP, TP > 1, DP > 1 and a DeepEP
#: or all-gather backend; the shared experts' ``DeepseekV2MLP(..., is_sequence_parallel=...)`` in
#: vllm/model_executor/models/deepseek_v2.py). At attention TP 1, the usual wide-EP shape, every engine
#: holds them whole.
DP_REPLICATES_DENSE = True


def slots_rejection(ep: int, redundant_experts: int) -> str | None:
    """Why an instance of EP ``ep`` cannot hold ``redundant_experts`` expert slots: they spread over expert
    parallelism (:func:`expert_placement_rejection`); None when it can."""
    if redundant_experts < 0 or (redundant_experts and ep == 1):
        return f"{redundant_experts} redundant experts need expert parallelism (EP > 1) and must be >= 0"
    return None


def read_all_to_all(spec: Fields, tp: int, dp: int, ep: int, redundant_experts: int) -> AllToAll:
    """A file's ``all_to_all`` (a plan's pool, a wide rank's profile), held to :func:`all_to_all_rejection`."""
    found = spec.string("all_to_all", str(AllToAll.DISPATCH), choices=list(AllToAll))
    wrong = all_to_all_rejection(found, tp, dp, ep, redundant_experts)
    if wrong is not None:
        raise spec.fail("all_to_all", wrong, found)
    return AllToAll(found)


def all_to_all_rejection(all_to_all: str, tp: int, dp: int, ep: int, redundant_experts: int = 0) -> str | None:
    """Why ``all_to_all`` (:class:`pdplan.vocabulary.AllToAll`) cannot move the tokens of an instance of these
    coordinates; None when it can. A gather reaches whole experts spread over every GPU of attention DP (EP = TP ×
    DP, DP above 1) without redundant copies, which rebalance a dispatch's load (EPLB)."""
    if all_to_all not in tuple(AllToAll):
        return f"must be one of {', '.join(AllToAll)}"
    if all_to_all == AllToAll.GATHER and (dp < 2 or ep != tp * dp or redundant_experts):
        return ("gather applies to attention data parallelism with whole experts over every GPU (dp above 1, "
                "ep = tp × dp) and no redundant experts")
    return None


def edge_matrices_under_dp(model: ModelSpec, stage: int, pp: int) -> tuple[int, int]:
    """(vocabulary matrices split over attention TP, whole ones) on a stage with attention DP: SGLang builds
    the embedding whole on every GPU (``VocabParallelEmbedding(..., enable_tp=not is_dp_attention_enabled())``,
    python/sglang/srt/models/deepseek_v2.py) and the head over the attention TP group with
    ``--enable-dp-lm-head``; vLLM splits both over the DP rank's TP. The fullest: embedding whole, head split
    (a tied pair on one stage: one whole matrix)."""
    embedding, head = int(stage == 0), int(stage == pp - 1)
    if model.tied_embeddings and embedding and head:
        return 0, 1
    return head, embedding
