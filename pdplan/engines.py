"""What each serving engine can run, as data: the rules an engine's source enforces at start.

A rule names the engine, the versions it was read in, the KV connector it holds for (None: every
connector), what it refuses, and the upstream file and function that refuse it. Only rules read in
upstream source are here; a capability nobody has read stays out (an engine with no row runs every
shape pdplan plans). The KV rules look at a plan's P/D pools (phase, TP, PP); the expert rules at how every
pool spreads its routed experts over its expert-parallel ranks; the rank rules at the GPUs one attention
data-parallel rank takes; the chunk rules at the prompt tokens each rank takes per iteration.

:func:`shape_refusal` answers for one candidate shape (the optimizer's per-shape rejections),
:func:`pair_refusal` for a prefill and a decode shape together (the pairing of pools),
:func:`experts_refusal` for one shape's experts, :func:`rank_refusal` for its DP ranks' GPUs,
:func:`chunk_refusal` for one shape's prompt chunk, and
:func:`plan_refusal` for a whole plan (``validate`` and ``export``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Protocol

from pdplan.experts import all_to_all_rejection
from pdplan.hardware import GIB, GPU
from pdplan.shape import InstanceShape
from pdplan.vocabulary import AllToAll, FirstToken, Handoff, RankRouter

#: The engines each export format can start, the one it starts for a plan made for none of them first: the scripts
#: their own, llm-d's pods vLLM, Dynamo's graph vLLM, SGLang or TensorRT-LLM workers (its ``backendFramework``), the
#: Kubernetes bundle vLLM or SGLang pods with their router.
FORMAT_ENGINES = {"vllm": ("vllm",), "sglang": ("sglang",), "dynamo": ("vllm", "sglang", "trtllm"),
                  "llm-d": ("vllm",), "k8s": ("vllm", "sglang")}

#: The serving engines pdplan plans for (AIConfigurator measures each of them).
ENGINES = ("vllm", "sglang", "trtllm")
#: how each engine writes its own name
ENGINE_NAMES = {"vllm": "vLLM", "sglang": "SGLang", "trtllm": "TensorRT-LLM"}
#: The engine a plan is made for when ``optimize`` names none: vLLM, whose operator tables then
#: compose the profiles and whose pods the default exports start, so its rules hold for the
#: default search.
DEFAULT_ENGINE = "vllm"


def rank_router(engine: str, phase: str, dp: int) -> RankRouter:
    """How an instance of ``phase`` with ``dp`` attention-DP ranks under ``engine`` puts a prompt on a rank.
    SGLang's prefill server under P/D disaggregation by the request's bootstrap room modulo DP: its DP
    controller's ``follow_bootstrap_room`` (the prefill's default, which ``round_robin`` also meant there before
    it; ``data_parallel_controller.py``, ``server_args.py`` ``_handle_load_balance_method`` in sgl-project/sglang),
    the room a random 63-bit number the router draws per request. Every other by the ranks' load (vLLM's DP load
    balancer, TensorRT-LLM's attention-DP scheduler, SGLang's decode and colocated servers under the
    ``--load-balance-method total_requests`` the exports pass them, whose default there is round robin:
    :data:`pdplan.manifest.export.sglang.LOAD_BALANCE_METHOD`)."""
    if engine == "sglang" and phase == "prefill" and dp > 1:
        return RankRouter.BOOTSTRAP_ROOM
    return RankRouter.SHORTEST_QUEUE


def default_rank_router(engine: str, phase: str, dp: int) -> RankRouter:
    """How ``engine`` started with its own defaults puts a request on a rank of a ``phase`` instance with ``dp``
    attention-DP ranks: as :func:`rank_router`, but an SGLang P/D decode or colocated server in turn, its
    ``--load-balance-method auto`` being ``round_robin`` there (``handle_load_balance_method`` in
    python/sglang/srt/arg_groups/serving_hook.py of 0.5.21 and 0.5.23, ``_handle_load_balance_method`` in
    server_args.py of 0.5.8), where pdplan's exports pass ``total_requests``."""
    if engine == "sglang" and phase in ("decode", "colocated") and dp > 1:
        return RankRouter.ROUND_ROBIN
    return rank_router(engine, phase, dp)


def handoff(engine: str | None, phase: str) -> Handoff:
    """How an instance of ``phase`` under ``engine`` takes a prefilled request: a decode instance as its engine does
    (below), any other by push, as pdplan always has (only a decode instance takes a handoff the engines make).

    Push, SGLang's: the prefill sends the KV once its forward ends, to where the decode said when it took the request
    in (the bootstrap handshake).

    Pull, TensorRT-LLM's and vLLM's: the decode learns of the request only once its prefill is done (Dynamo's frontend
    keeps the prefill's handoff parameters, not its token: ``PrefillRouter`` in
    ``lib/llm/src/kv_router/prefill_router.rs``) and starts reading its KV in the iteration that takes it in:
    TensorRT-LLM's generation server asks for the KV in ``PyExecutor._prepare_disagg_gen_init``
    (``tensorrt_llm/_torch/pyexecutor/py_executor.py``); vLLM's scheduler gives the KV connector the request to load
    in the step that schedules it (``vllm/v1/core/sched/scheduler.py``).
    A plan made for no named engine keeps push, what pdplan simulated before."""
    return Handoff.PULL if phase == "decode" and engine in ("trtllm", "vllm") else Handoff.PUSH


def first_token(engine: str | None, phase: str) -> FirstToken:
    """Where the first token of a request a ``phase`` instance under ``engine`` decodes comes from: the prefill's,
    streamed when the request joins the decode's batch, except under vLLM's decode (below), and on any instance but
    a decode one (which takes no handoff the engines make).

    SGLang's decode streams the token the prefill sampled, which comes with the KV, in the prebuilt batch the request
    joins once its KV has landed (``process_prebuilt`` in ``python/sglang/srt/disaggregation/decode.py``), no decode
    step first. TensorRT-LLM's generation server, in the iteration that finds the KV complete, adds the context's
    token (``_prepare_disagg_gen_transmission_complete``) and answers it (``_handle_first_token_response``) before
    that iteration's forward; its ``_handle_responses`` then skips the request's first overlapped iteration, "since
    first token has already been emitted" (``tensorrt_llm/_torch/pyexecutor/py_executor.py``). vLLM's scheduler,
    once the whole prompt has loaded, sets its computed tokens back to the prompt less one
    (``Scheduler._update_waiting_for_remote_kv``): the decode recomputes the last prompt token to sample the first,
    which comes with the first step the request runs in."""
    return FirstToken.DECODE if phase == "decode" and engine == "vllm" else FirstToken.PREFILL


def all_to_all(engine: str, phase: str, shape: InstanceShape, gpus_per_host: int, *, fabric: bool = False) -> AllToAll:
    """How an instance of ``phase`` with attention DP and whole experts (EP = TP × DP) under ``engine`` moves its
    tokens to the experts, as the engine runs it on hosts of ``gpus_per_host`` GPUs (:attr:`pdplan.hardware.NodeType.
    host_gpus`: a node's, or a GB200 compute tray's 4 on a rack described as one node; ``fabric``: its GPUs' NVLink
    domain spans compute trays, :attr:`pdplan.hardware.GPU.nvlink_fabric`).

    SGLang and vLLM run it as pdplan's exports start them: across hosts by DeepEP where the export starts it
    (:data:`DEEPEP_PHASES`: SGLang's every phase, vLLM's P/D pools; on GB200 NVL72 across its trays, as SGLang's
    srt-slurm GB200 recipes set ``moe-a2a-backend: deepep`` with ``gpus_per_node: 4``); gathered by their defaults
    otherwise, SGLang's ``--moe-a2a-backend`` "none" (``python/sglang/srt/layers/dp_attention.py``) and vLLM's
    ``--all2all-backend`` "allgather_reducescatter" (``vllm/config/parallel.py``), which a colocated vLLM instance
    keeps across hosts.

    TensorRT-LLM as it runs by default (Dynamo's TensorRT-LLM workers, the export that starts it, set nothing else):
    its CUTLASS and TRT-LLM-Gen MoE layers dispatch by their NVLink all-to-all only where
    ``MnnvlMemory.supports_mnnvl()`` (an NVLink domain across nodes) and otherwise run none
    (``select_alltoall_method_type``: NotEnabled, DeepEP only when asked by ``TRTLLM_FORCE_ALLTOALL_METHOD`` or
    ``TRTLLM_CAN_USE_DEEP_EP``; ``tensorrt_llm/_torch/modules/fused_moe``),
    gathering every rank's tokens with NCCL's all-gather and scattering with its reduce-scatter, as
    AIConfigurator's own ``MoEDispatch`` times it off NVL72.

    A profile times a gather from the engine's tables over the instance's GPUs
    (:mod:`pdplan.latency.compose.gathered`), so one the tables did not measure is refused there, with its reason."""
    gathers = all_to_all_rejection(AllToAll.GATHER, shape.tp, shape.dp, shape.ep) is None and shape.pp == 1
    if engine == "trtllm":
        return AllToAll.GATHER if gathers and not dispatches_by_default(engine, fabric) else AllToAll.DISPATCH
    started = DEEPEP_PHASES.get(engine, ())
    if not gathers or (shape.stage_gpus > gpus_per_host and phase in started):
        return AllToAll.DISPATCH
    return AllToAll.GATHER


def dispatches_by_default(engine: str, fabric: bool) -> bool:
    """Whether ``engine`` dispatches an attention-DP instance's tokens to their experts with nothing asked of it: only
    TensorRT-LLM, by its NVLink all-to-all on GPUs whose NVLink domain spans nodes (``fabric``; :func:`all_to_all`).
    SGLang and vLLM gather unless their export starts DeepEP."""
    return engine == "trtllm" and fabric


#: Tokens one rank may hand DeepEP's low-latency kernels per step, by engine, at the engine's default, which sizes the
#: kernels' buffers (DeepEP refuses a larger step): SGLang 0.5.23's ``SGLANG_DEEPEP_NUM_MAX_DISPATCH_TOKENS_PER_RANK``
#: (python/sglang/srt/environ.py, read in layers/moe/token_dispatcher/deepep.py); vLLM 0.33.0's scheduler budget
#: under batched DP MoE, ``DEFAULT_MAX_NUM_BATCHED_TOKENS_FOR_BATCHED_DP`` (vllm/config/scheduler.py, taken in
#: engine/arg_utils.py when ``--all2all-backend deepep_low_latency`` runs DP ranks with EP), which is the MoE
#: layer's ``max_num_tokens`` and DeepEP's ``num_max_dispatch_tokens_per_rank``. pdplan plans at the defaults, so
#: the buffer the engine allocates is the one its memory reserve already holds; the exports state them.
DEEPEP_LOW_LATENCY_TOKENS = {"sglang": 128, "vllm": 256}
#: The phases whose decode steps an engine runs on DeepEP's low-latency kernels when its export starts DeepEP: SGLang's
#: decode pools (``--deepep-mode low_latency``) and colocated ones (its "auto" mode takes them for a batch of decodes
#: alone); vLLM's decode pools (``--all2all-backend deepep_low_latency``; a prefill pool runs
#: ``deepep_high_throughput``, and a colocated one keeps the gathering default, one backend serving both phases).
DEEPEP_LOW_LATENCY_PHASES = {"sglang": ("decode", "colocated"), "vllm": ("decode",)}
#: The phases an engine's export starts DeepEP for, on an instance of attention DP with expert parallelism across
#: nodes that was timed with a dispatch: SGLang's every phase (``--moe-a2a-backend deepep``, as its large-scale P/D
#: deployments run, issue #6017); vLLM's P/D pools, as its expert-parallel deployment guide pairs them
#: (docs/serving/expert_parallel_deployment.md: ``deepep_high_throughput`` for multi-node prefill,
#: ``deepep_low_latency`` for multi-node decode).
DEEPEP_PHASES = {"sglang": ("prefill", "decode", "colocated"), "vllm": ("prefill", "decode")}


def starts_deepep(engine: str, phase: str, shape: InstanceShape, all_to_all: AllToAll, spans_nodes: bool) -> bool:
    """Whether pdplan's exports start DeepEP for an instance of ``phase``: one of attention DP with expert
    parallelism (:attr:`~pdplan.shape.InstanceShape.exchanges_tokens`) that spans hosts and was timed with a dispatch,
    in a phase of :data:`DEEPEP_PHASES`. A plan asks of a shape (it spans hosts when a stage's GPUs pass a host's,
    :attr:`pdplan.hardware.NodeType.host_gpus`), an export of a pool on its node map, whose every node is one host
    (:func:`pdplan.manifest.export.common.starts_deepep`; a larger node is refused before)."""
    return (phase in DEEPEP_PHASES.get(engine, ()) and shape.exchanges_tokens and all_to_all == AllToAll.DISPATCH
            and spans_nodes)


def runs_deepep_low_latency(engine: str, phase: str, shape: InstanceShape, all_to_all: AllToAll,
                            spans_nodes: bool) -> bool:
    """Whether ``engine`` runs an instance's decode steps on DeepEP's low-latency kernels, as pdplan's exports start
    it (:func:`starts_deepep`), in a phase of :data:`DEEPEP_LOW_LATENCY_PHASES`."""
    return (phase in DEEPEP_LOW_LATENCY_PHASES.get(engine, ())
            and starts_deepep(engine, phase, shape, all_to_all, spans_nodes))


def running_cap(engine: str, phase: str, shape: InstanceShape, all_to_all: AllToAll, gpus_per_host: int,
                draft_tokens: int = 0, *, gpu: GPU | None = None, chunk_tokens: int | None = None) -> int | None:
    """Requests one rank of the instance may run at once, where the engine holds it below what its KV holds; None
    elsewhere. A rank on DeepEP's low-latency kernels (:func:`runs_deepep_low_latency`, on hosts of ``gpus_per_host``
    GPUs) hands them every running request's tokens each step, one per request and ``draft_tokens`` more under
    speculative decoding (the verify step), at most :data:`DEEPEP_LOW_LATENCY_TOKENS` of its engine. A vLLM rank that
    decodes on ``gpu`` runs at most its default (:func:`vllm_default_running`, of a chunk of ``chunk_tokens``)."""
    caps = []
    if runs_deepep_low_latency(engine, phase, shape, all_to_all, shape.stage_gpus > gpus_per_host):
        caps.append(DEEPEP_LOW_LATENCY_TOKENS[engine] // (1 + draft_tokens))
    if engine == "vllm" and phase in ("decode", "colocated") and gpu is not None:
        caps.append(vllm_default_running(gpu, chunk_tokens))
    return min(caps, default=None)


#: vLLM 0.33.0's defaults for its OpenAI API server, (max_num_seqs, max_num_batched_tokens), by GPU tier
#: (vllm/engine/arg_utils.py ``EngineArgs.get_batch_defaults``).
VLLM_BATCH_DEFAULTS = {"160 GiB and more": (1024, 16384), "70 GiB and more, not an A100": (1024, 8192),
                       "every other": (256, 2048)}


def vllm_default_running(gpu: GPU, chunk_tokens: int | None = None) -> int:
    """The requests one vLLM 0.33.0 engine core (one rank) runs at once unless told: its ``max_num_seqs`` default for
    the GPU's tier (:data:`VLLM_BATCH_DEFAULTS`), at most the iteration's token budget, ``chunk_tokens`` as the export
    states it (``--max-num-batched-tokens``) or the tier's: ``min(max_num_seqs, max_num_batched_tokens)``, in
    ``EngineArgs._set_default_max_num_seqs_and_batched_tokens_args``. The exports then state it (``--max-num-seqs``),
    so the engine runs what was verified."""
    a100 = "a100" in f"{gpu.name} {gpu.product_label or ''}".lower()  # vLLM matches the device name
    if gpu.memory_bytes >= 160 * GIB:
        tier = "160 GiB and more"
    elif gpu.memory_bytes >= 70 * GIB and not a100:
        tier = "70 GiB and more, not an A100"
    else:
        tier = "every other"
    seqs, tokens = VLLM_BATCH_DEFAULTS[tier]
    return min(seqs, chunk_tokens or tokens)


class RoleShape(Protocol):
    """A pool or candidate as the rules see it: its phase and its parallel sizes."""

    phase: str
    tp: int
    pp: int
    dp: int
    ep: int


@dataclass(frozen=True, kw_only=True)
class Role(InstanceShape):
    """A manifest pool's shape and phase, for the rules, the routed experts it places (the model's and the
    redundant ones; 0: a dense model, or one whose experts the manifest does not say), the prompt tokens each
    rank takes per iteration on its GPU, and what decides whether an export starts DeepEP for it
    (:func:`starts_deepep`): how its ranks were timed reaching their experts and whether its instances span nodes."""

    phase: str
    experts: int = 0
    chunk_tokens: int = 0        #: the prompt tokens one rank takes per iteration (0: none stated)
    blackwell: bool = False      #: its GPU is a Blackwell (:attr:`pdplan.hardware.GPU.blackwell`)
    all_to_all: AllToAll = AllToAll.DISPATCH  #: how its DP ranks reach whole experts, as verified
    spans_nodes: bool = False    #: an instance of it spans nodes in the node map
    node_gpus: int = 0           #: GPUs of the smallest node a spanning instance sits on (0: none spans)


@dataclass(frozen=True, kw_only=True)
class Rule:
    """One capability an engine lacks, with where its source says so."""

    name: str                    #: the rule's name in messages and tests
    engine: str                  #: "vllm", "sglang" or "trtllm"
    versions: str                #: the versions the rule was read in
    connector: str | None        #: the KV connector it holds for; None: every connector
    source: str                  #: upstream repository, path, commit and function
    says: str                    #: what the engine refuses, in one clause

    def holds_for(self, engine: str, connector: str | None) -> bool:
        return self.engine == engine and self.connector in (None, connector)


@dataclass(frozen=True, kw_only=True)
class ConsumerPipelineRule(Rule):
    """A KV consumer (a decode pool) must not be pipeline-parallel."""

    def shape_refusal(self, shape: RoleShape) -> str | None:
        return self._why(shape) if shape.phase == "decode" and shape.pp > 1 else None

    def pair_refusal(self, prefill: RoleShape, decode: RoleShape) -> str | None:
        return self.shape_refusal(decode)

    def _why(self, shape: RoleShape) -> str:
        return f"{self.says} (decode has PP {shape.pp})"


@dataclass(frozen=True, kw_only=True)
class EqualTensorRule(Rule):
    """Prefill and decode pools must share one TP size."""

    def shape_refusal(self, shape: RoleShape) -> str | None:
        return None

    def pair_refusal(self, prefill: RoleShape, decode: RoleShape) -> str | None:
        if prefill.tp == decode.tp or _wide(prefill) or _wide(decode):  # the rule is for TP-only P/D
            return None
        return f"{self.says} (prefill TP {prefill.tp}, decode TP {decode.tp})"


@dataclass(frozen=True, kw_only=True)
class ExpertSpreadRule(Rule):
    """Every expert-parallel rank holds as many routed experts as the others: EP divides the model's routed
    experts plus the redundant ones, on every pool of the engine or (``deepep``) on those its export starts
    DeepEP for (:func:`starts_deepep`)."""

    deepep: bool = False

    def experts_refusal(self, phase: str, ep: int, experts: int, deepep: bool) -> str | None:
        if ep > 1 and experts % ep and (deepep or not self.deepep):
            return f"{self.says} ({phase}: {experts} routed experts, redundant ones included, over EP {ep})"
        return None


@dataclass(frozen=True, kw_only=True)
class PageChunkRule(Rule):
    """Each rank's prompt chunk is whole KV pages on the GPUs where the engine's attention kernels page the KV
    ``page_tokens`` at a time; a disaggregated decode server, which takes no prompts, is exempt."""

    page_tokens: int

    def pages(self, blackwell: bool) -> int:
        """The tokens a chunk must be a multiple of on such a GPU (1: any chunk)."""
        return self.page_tokens if blackwell else 1

    def chunk_refusal(self, phase: str, chunk_tokens: int, blackwell: bool) -> str | None:
        if phase != "decode" and chunk_tokens and chunk_tokens % self.pages(blackwell):
            return (f"{self.says} ({phase}: a chunk of {chunk_tokens} tokens per rank, pages of "
                    f"{self.page_tokens})")
        return None


@dataclass(frozen=True, kw_only=True)
class OneGpuRankRule(Rule):
    """Each attention data-parallel rank is one GPU: the engine splits no attention heads inside a DP rank."""

    def rank_refusal(self, tp: int, dp: int) -> str | None:
        return f"{self.says} (TP {tp} × DP {dp})" if dp > 1 and tp > 1 else None


def _wide(shape: RoleShape) -> bool:
    """Whether a shape runs wide expert parallelism (attention DP or EP above 1)."""
    return shape.dp > 1 or shape.ep > 1


NIXL_DECODE_PP = ConsumerPipelineRule(
    name="nixl-decode-pp", engine="vllm", versions="0.33.0 (read in the wheel and at main 00bd5131)", connector="nixl",
    source="vllm-project/vllm vllm/distributed/kv_transfer/kv_connector/v1/nixl/base_worker.py "
           "@00bd51312724dc9984e7eaa16fa741863db25c97, NixlBaseConnectorWorker.__init__: raises "
           "NotImplementedError when kv_role == 'kv_consumer' and pipeline_parallel_size > 1",
    says="vLLM's NIXL connector refuses a kv_consumer (decode) instance with pipeline parallelism")

SGLANG_EQUAL_TP = EqualTensorRule(
    name="sglang-equal-tp", engine="sglang", versions="0.5 (AIConfigurator's rule)", connector=None,
    source="ai-dynamo/aiconfigurator src/aiconfigurator/sdk/task_v2.py @095f58a51c4ca8e61b66ec108d86f223f8d559ce, "
           "_require_same_tp_gate, applied in src/aiconfigurator/sdk/inference_session.py (SGLang "
           "disaggregated serving without wide expert parallelism; ai-dynamo/dynamo#5870)",
    says="SGLang P/D without wide expert parallelism needs equal TP on the prefill and decode sides")

SGLANG_EVEN_EXPERTS = ExpertSpreadRule(
    name="sglang-even-experts", engine="sglang", versions="0.5.6 to 0.5.23 (read in the PyPI wheels)",
    connector=None,
    source="sgl-project/sglang python/sglang/srt/layers/moe/fused_moe_triton/layer.py @v0.5.23, FusedMoE.__init__: "
           "assert self._num_global_routed % storage_ep_size == 0, the routed experts DeepseekV2MoE passes being "
           "the model's plus --ep-num-redundant-experts (models/deepseek_v2.py); 0.5.6 to 0.5.8 assert "
           "(num_experts - num_fused_shared_experts) % self.moe_ep_size == 0",
    says="SGLang's MoE layer needs EP to divide the routed experts plus the redundant ones")

DEEPEP_EVEN_EXPERTS = ExpertSpreadRule(
    name="deepep-even-experts", engine="vllm", versions="vLLM 0.33.0 (read in the wheel) on DeepEP at 011d766f",
    connector=None, deepep=True,
    source="deepseek-ai/DeepEP csrc/deep_ep.cpp @011d766f19b3d7a3074ec6df9c627eb10b632460, "
           "Buffer::low_latency_dispatch: EP_HOST_ASSERT(num_experts % num_ranks == 0), as the normal kernels' "
           "notify_dispatch asserts; vLLM 0.33.0 model_executor/layers/fused_moe/all2all_utils.py hands it "
           "num_local_experts = num_experts // world_size",
    says="DeepEP, which the vLLM export starts for a P/D pool across nodes, needs EP to divide the routed experts "
         "plus the redundant ones")


TRTLLM_EVEN_EXPERTS = ExpertSpreadRule(
    name="trtllm-even-experts", engine="trtllm", versions="main (read at 00043967)", connector=None,
    source="NVIDIA/TensorRT-LLM tensorrt_llm/llmapi/llm_args.py @0004396720054fd8e205cbf616f21f0b57c6b412, "
           "MoeLoadBalancerConfig.setup: raises ValueError unless num_slots % ep_size == 0, the slots being the "
           "routed experts plus the redundant ones; without a load balancer the MoE layer asserts "
           "num_experts % ep_size == 0 (tensorrt_llm/_torch/modules/fused_moe/interface.py, the fallback of "
           "its load-balancer setup)",
    says="TensorRT-LLM's MoE layer needs EP to divide the routed experts plus the redundant ones")


SGLANG_PAGE_CHUNK = PageChunkRule(
    name="sglang-page-chunk", engine="sglang", versions="0.5.8 to 0.5.23 (read in the PyPI wheels)", connector=None,
    page_tokens=64,
    source="sgl-project/sglang python/sglang/srt/arg_groups/overrides.py @v0.5.23, _mla_backend_page_constraints: "
           "trtllm_mla and trtllm_mha force page_size 64 unless asked for another they take; "
           "arg_groups/model_override_base.py get_default_attn_backend picks trtllm_mha on sm100, and "
           "model_overrides/deepseek_v2.py trtllm_mla for DeepseekV3ForCausalLM; arg_groups/validation_hook.py "
           "asserts chunked_prefill_size % page_size == 0 but on a disaggregated decode server, after "
           "parallel_hook divides it by the attention-DP size (0.5.8: server_args.py, the same in "
           "_handle_attention_backend_compatibility and check_server_args)",
    says="SGLang on Blackwell pages the KV 64 tokens at a time (trtllm_mha, trtllm_mla) and needs each rank's "
         "--chunked-prefill-size to be whole pages")


TRTLLM_ONE_GPU_RANKS = OneGpuRankRule(
    name="trtllm-attention-dp", engine="trtllm", versions="main (read at 00547a25)", connector=None,
    source="NVIDIA/TensorRT-LLM tensorrt_llm/_torch/modules/attention.py @00547a25ac61d28d1dabb2e47383a1af605ebb59, "
           "Attention.__init__ and MLA.__init__: with mapping.enable_attention_dp, dp_size = tp_size and tp_size = 1 "
           "(docs/source/features/parallel-strategy.md: attention runs TP or DP over tensor_parallel_size's GPUs)",
    says="TensorRT-LLM's attention data parallelism (enable_attention_dp) makes each of its tensor_parallel_size "
         "GPUs one DP rank, so attention DP needs TP 1")


@dataclass(frozen=True, kw_only=True)
class MixedRouterRule(Rule):
    """The router a format starts cannot run Splitwise's mixed machines as the plan was verified:
    a request run whole on a mixed machine when the shortest prefill queue is long, and a decode
    moved to one when its decode instance's KV fills. A router that picks a prefill worker and a
    decode worker each by its own policy runs neither rule."""

    router: str                  #: the router (or chart) the format deploys


#: The routers that cannot run a mixed pool as verified, and why.
MIXED_RULES = (
    MixedRouterRule(
        name="vllm-router-mixed", engine="vllm", versions="main (read at 0803ed39)", connector=None,
        router="vllm-router",
        source="vllm-project/router src/config/validation.rs @0803ed393001c160fe7fa5efc10d0e6778b97fdb, "
               "ConfigValidator::validate_mode: RoutingMode::VllmPrefillDecode holds a prefill and a decode "
               "URL list, each side picked by its own policy",
        says="vllm-router picks a prefill worker and a decode worker each by its own load policy; it has no "
             "rule that runs a request whole on a mixed machine or moves a decode when KV fills (and vLLM "
             "0.33 deprecates kv_both with NixlConnector: nixl/connector.py, NixlConnector.__init__)"),
    MixedRouterRule(
        name="sglang-mixed", engine="sglang", versions="0.5 (read at 469c63e5)", connector=None,
        router="sglang-router",
        source="sgl-project/sglang python/sglang/srt/server_args.py @469c63e54e7d94591617ef9590c6aa26d54dc1bb, "
               "ServerArgs.add_cli_args: --disaggregation-mode choices null, prefill, decode",
        says="an SGLang server's disaggregation mode is prefill or decode, never both"),
    MixedRouterRule(
        name="dynamo-mixed", engine="vllm", versions="1.x (read at 4806fa82)", connector=None,
        router="dynamo-frontend",
        source="ai-dynamo/dynamo components/src/dynamo/common/constants.py "
               "@4806fa829edb4dbd4d9adfa948552e67630e84ce, DisaggregationMode: agg, prefill, decode",
        says="a Dynamo worker is aggregated, prefill or decode, and its router sends a P/D request to one "
             "prefill and one decode worker"),
    MixedRouterRule(
        name="llm-d-mixed", engine="vllm", versions="llm-d-modelservice (read at b5d214f5)", connector=None,
        router="llm-d-modelservice",
        source="llm-d-incubation/llm-d-modelservice charts/llm-d-modelservice/values.yaml "
               "@b5d214f57c01aef72275ac3a0ed77b14eaab73e1: a prefill and a decode section, nothing else",
        says="llm-d-modelservice deploys a prefill and a decode role, nothing that takes both"),
)

#: The router each export format runs a P/D plan behind; the Kubernetes bundle deploys its engine's
#: (:data:`ENGINE_ROUTERS`).
FORMAT_ROUTERS = {"vllm": "vllm-router", "sglang": "sglang-router", "dynamo": "dynamo-frontend",
                  "llm-d": "llm-d-modelservice", "k8s": None}
#: The router in front of each engine's pods in the Kubernetes bundle.
ENGINE_ROUTERS = {"vllm": "vllm-router", "sglang": "sglang-router"}


def format_router(fmt: str, engine: str) -> str:
    """The router format ``fmt`` runs a plan behind when it starts ``engine``'s pods."""
    return FORMAT_ROUTERS[fmt] or ENGINE_ROUTERS[engine]


def mixed_refusal(fmt: str, engine: str) -> str | None:
    """Why the router format ``fmt`` runs ``engine``'s pods behind cannot run a mixed pool as verified
    ("<rule>: <reason>"); None when it can. No router read so far can: a plan with ``--mixed`` is a study of
    Splitwise's design, exported once planned without it."""
    for rule in MIXED_RULES:
        if rule.router == format_router(fmt, engine):
            return f"{rule.name}: {rule.says}"
    return None


#: Every KV rule pdplan knows, by engine. TensorRT-LLM has none read yet.
RULES: tuple[ConsumerPipelineRule | EqualTensorRule, ...] = (NIXL_DECODE_PP, SGLANG_EQUAL_TP)
#: Every expert rule pdplan knows. vLLM's own MoE layer spreads experts unevenly unless EPLB places redundant ones,
#: which :func:`pdplan.experts.expert_placement_rejection` holds every plan to; DeepEP does not.
EXPERT_RULES: tuple[ExpertSpreadRule, ...] = (SGLANG_EVEN_EXPERTS, TRTLLM_EVEN_EXPERTS, DEEPEP_EVEN_EXPERTS)


#: Every rule on the prompt tokens a rank takes per iteration.
CHUNK_RULES: tuple[PageChunkRule, ...] = (SGLANG_PAGE_CHUNK,)
#: Every rule on the GPUs an attention data-parallel rank may take.
RANK_RULES: tuple[OneGpuRankRule, ...] = (TRTLLM_ONE_GPU_RANKS,)


def _holding(rules: Iterable[Rule], engine: str | None, connector: str | None = None) -> list:
    """The ``rules`` engine E holds a plan to with this KV connector (a rule for every connector holds with any);
    none without an engine."""
    return [rule for rule in rules if engine is not None and rule.holds_for(engine, connector)]


def _first_refusal(rules: Iterable[Rule], ask) -> str | None:
    """The first of ``rules`` that ``ask(rule)`` gives a reason for, as "<rule>: <reason>"; None when none does."""
    for rule in rules:
        why = ask(rule)
        if why:
            return f"{rule.name}: {why}"
    return None


def shape_refusal(engine: str | None, connector: str | None, shape: RoleShape) -> str | None:
    """Why ``engine`` cannot run this one shape: "<rule>: <reason>", or None when it can."""
    return _first_refusal(_holding(RULES, engine, connector), lambda rule: rule.shape_refusal(shape))


def pair_refusal(engine: str | None, connector: str | None, prefill: RoleShape, decode: RoleShape) -> str | None:
    """Why ``engine`` cannot run this prefill shape feeding this decode shape, or None."""
    return _first_refusal(_holding(RULES, engine, connector), lambda rule: rule.pair_refusal(prefill, decode))


def experts_refusal(engine: str | None, phase: str, ep: int, experts: int, *, deepep: bool = False) -> str | None:
    """Why ``engine`` cannot spread ``experts`` routed experts (the model's plus the redundant ones; 0: none known)
    over a shape of ``phase`` with EP ``ep``, one its export starts DeepEP for when ``deepep``: "<rule>: <reason>",
    or None when it can."""
    return _first_refusal(_holding(EXPERT_RULES, engine),
                          lambda rule: rule.experts_refusal(phase, ep, experts, deepep))


def prompt_pages(engine: str | None, blackwell: bool) -> int:
    """The tokens each rank's prompt chunk must be a multiple of under ``engine`` on a Blackwell GPU or another
    (1: any chunk)."""
    return max((rule.pages(blackwell) for rule in _holding(CHUNK_RULES, engine)), default=1)


def chunk_refusal(engine: str | None, phase: str, chunk_tokens: int | None, blackwell: bool) -> str | None:
    """Why ``engine`` cannot start a ``phase`` rank that takes ``chunk_tokens`` prompt tokens per iteration on a
    Blackwell GPU or another: "<rule>: <reason>", or None when it can (or no chunk is stated)."""
    return _first_refusal(_holding(CHUNK_RULES, engine),
                          lambda rule: rule.chunk_refusal(phase, chunk_tokens or 0, blackwell))


def rank_refusal(engine: str | None, tp: int, dp: int) -> str | None:
    """Why ``engine`` cannot run attention DP ranks of TP ``tp`` each (``dp`` of them): "<rule>: <reason>", or None
    when it can."""
    return _first_refusal(_holding(RANK_RULES, engine), lambda rule: rule.rank_refusal(tp, dp))


def rank_span_refusal(engine: str | None, shape: InstanceShape, gpus_per_node: int) -> str | None:
    """Why ``engine``, as pdplan's exports start it, cannot run attention DP ranks whose TP group spans nodes (a
    TP8 rank over two GB200 trays); None when it can. vLLM's multi-node data parallelism starts each node's share
    of the ranks, whole, with ``--data-parallel-size-local`` (:func:`pdplan.manifest.export.vllm.data_parallel_launch`);
    SGLang splits ``--tp`` evenly over ``--nnodes`` whatever the attention TP, and TensorRT-LLM's MPI ranks span
    trays."""
    if engine == "vllm" and shape.dp > 1 and shape.tp > gpus_per_node:
        return (f"vllm-whole-ranks: the vLLM export starts whole DP ranks on each node (--data-parallel-size-local), "
                f"and a TP{shape.tp} rank does not fit a node of {gpus_per_node} GPUs")
    return None


#: Weight precisions an engine does not load, with why (the rule's name first). TensorRT-LLM has no loader for a
#: compressed-tensors int4 checkpoint (Kimi-K2.5's W4A16 experts): AIConfigurator's Kimi-K2.5 support leaves it out
#: for that reason ("TRTLLM does not support this", ai-dynamo/aiconfigurator #757, TensorRT-LLM 1.2.0rc5), and
#: NVIDIA serves it there only after ModelOpt converts it (to GPTQ int4, NVIDIA/Model-Optimizer #590; NVFP4, #669).
UNLOADED_WEIGHTS = {("trtllm", "int4"): "trtllm-int4: TensorRT-LLM does not load a compressed-tensors int4 checkpoint "
                                        "(AIConfigurator's Kimi-K2.5 support leaves it out, ai-dynamo/aiconfigurator "
                                        "#757); plan with --engine vllm or sglang, or from an NVFP4 checkpoint "
                                        "(--model nvidia/Kimi-K2.5-NVFP4)"}


def weights_refusal(engine: str | None, weight_dtype: str) -> str | None:
    """Why ``engine`` cannot load weights at ``weight_dtype`` (:data:`UNLOADED_WEIGHTS`); None when it can."""
    return UNLOADED_WEIGHTS.get((engine, weight_dtype))


def plan_refusal(engine: str | None, connector: str | None, pools: Iterable[Role]) -> str | None:
    """Why ``engine`` cannot run a plan of these pools, naming the first rule it breaks; None when it
    can. Every pool faces the expert rules (DeepEP's too where the engine's export starts it for the pool), the
    rank rules, the chunk rules and, where its instances span nodes, the rule on DP ranks over them
    (:func:`rank_span_refusal`); only a P/D plan's prefill and decode pools face the KV rules (a colocated plan moves
    no KV)."""
    pools = list(pools)
    for pool in pools:
        deepep = starts_deepep(engine, pool.phase, pool, pool.all_to_all, pool.spans_nodes)
        why = experts_refusal(engine, pool.phase, pool.ep, pool.experts, deepep=deepep) \
            or rank_refusal(engine, pool.tp, pool.dp) \
            or chunk_refusal(engine, pool.phase, pool.chunk_tokens, pool.blackwell) \
            or (rank_span_refusal(engine, pool, pool.node_gpus) if pool.node_gpus else None)
        if why:
            return why
    prefills = [p for p in pools if p.phase == "prefill"]
    decodes = [p for p in pools if p.phase == "decode"]
    for shape in prefills + decodes:
        why = shape_refusal(engine, connector, shape)
        if why:
            return why
    for prefill in prefills:
        for decode in decodes:
            why = pair_refusal(engine, connector, prefill, decode)
            if why:
                return why
    return None
