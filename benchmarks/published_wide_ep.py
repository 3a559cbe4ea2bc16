"""pdplan's composed wide-EP steps beside SGLang's published large-scale DeepSeek deployment.

    python benchmarks/published_wide_ep.py

The SGLang team published the throughput of DeepSeek-V3 served with prefill-decode disaggregation and
wide expert parallelism on 96 H100 GPUs (lmsys.org/blog/2025-05-05-large-scale-ep, reproduced by
sgl-project/sglang issue #6017): prefill instances of attention DP 32 and EP 32 over 4 nodes at 16,384
tokens per rank, with 32 redundant experts placed from recorded expert statistics (EPLB), and decode
at 256 requests of 2,000 tokens per rank. This composes the same instances from AIConfigurator's
operator tables (:func:`pdplan.latency.compose.profile.composed_profile`, SGLang's tables for
``h100_sxm``) and prints each throughput per node beside the published one. Nothing is fitted.

Two differences are stated, not corrected: the published runs overlap each MoE layer's dispatch and combine
with the other micro-batch's compute (SGLang's two-batch overlap, which the post's ablation credits with 27%
to 35% more prefill throughput at the same tokens and 25.5% more decode throughput at 256 per rank), which
pdplan's composition does not model and its exports do not start; and the published decode instance spans 9
nodes (EP 72), beyond the node counts AIConfigurator's all-to-all tables measured, so the decode is composed
at the nearest measured one, 8 nodes (EP 64) without redundant experts (288 slots do not spread over 64).

The same team's GB200 NVL72 post (lmsys.org/blog/2025-09-25-gb200-part-2) states 18,471 input tokens per second
per GPU for the prefill with BF16 attention and FP8 experts at 2,000-token prompts; its reproduction scripts
(``shifangx/Scripts-SGLang``) start its FP4 run's prefill as attention DP 8 and EP 8 over two 4-GPU trays of one
NVLink domain, its chunk of 65,536 tokens 8,192 a rank, with EPLB and single-batch overlap; the FP8 run is taken to
be laid out alike. This composes that instance at four 2,000-token prompts a rank with 32 redundant experts, without
the overlap.
"""

from __future__ import annotations

import sys

from pdplan.hardware import get_gpu
from pdplan.latency.compose.profile import composed_profile
from pdplan.modelref import get_model
from pdplan.vocabulary import AllToAll

GPU, MODEL, GPUS_PER_NODE = "h100-80gb", "deepseek-v3@fp8", 8
#: the post's prefill: tokens per rank, redundant experts, and input tokens per second per node by prompt length
PREFILL_TOKENS, PREFILL_REDUNDANT = 16384, 32
PREFILL_PUBLISHED = {1024: 57674, 2048: 54543, 4096: 50302}
#: the post's decode: its EP, requests per rank, KV tokens per request, output tokens per second per node
DECODE_EP, DECODE_BATCH, DECODE_CONTEXT, DECODE_PUBLISHED = 72, 256, 2000, 22282
#: the nearest EP whose nodes AIConfigurator's all-to-all tables measured
DECODE_COMPOSED_EP = 64
#: the post's two-batch-overlap ablation: throughput gained at the same tokens per rank
TBO_PREFILL_GAIN, TBO_DECODE_GAIN = (0.27, 0.35), 0.255
#: the GB200 post's prefill: GPU, attention DP (= EP), tokens per rank, prompt length, input tokens/s per GPU
GB200, GB200_DP, GB200_TOKENS, GB200_PROMPT, GB200_PUBLISHED = "gb200-185gb", 8, 8192, 2000, 18471


def profile(dp: int, redundant: int, gpu: str = GPU, tokens: int = PREFILL_TOKENS):
    """The composed profile of one SGLang instance of attention DP ``dp`` and EP ``dp`` on ``gpu`` (H100 nodes of 8,
    or one NVLink domain: a GB200 rack), batching ``tokens`` prompt tokens a rank."""
    physical = get_gpu(gpu)
    per_node = GPUS_PER_NODE if gpu == GPU else physical.nvlink_domain
    return composed_profile(get_model(MODEL), physical, 1, 1, dp=dp, ep=dp, engine="sglang",
                            gpus_per_node=per_node, max_prefill_batch_tokens=tokens,
                            all_to_all=AllToAll.DISPATCH, redundant_experts=redundant)


def main() -> int:
    prefill = profile(32, PREFILL_REDUNDANT)
    print(f"{MODEL} on {GPU}, SGLang's operator tables; published: lmsys.org/blog/2025-05-05-large-scale-ep\n")
    print(f"prefill: DP 32 EP 32 over 4 nodes, {PREFILL_TOKENS:,} tokens per rank, {PREFILL_REDUNDANT} redundant "
          "experts (input tokens/s per node)")
    print(f"  {'prompt':>7s} {'published':>10s} {'composed':>10s} {'ratio':>6s}")
    for length, published in PREFILL_PUBLISHED.items():
        step = prefill.prefill_time_s([length] * (PREFILL_TOKENS // length))
        composed = GPUS_PER_NODE * PREFILL_TOKENS / step
        print(f"  {length:7,d} {published:10,d} {composed:10,.0f} {composed / published:6.2f}")
    decode = profile(DECODE_COMPOSED_EP, 0)
    step = decode.decode_step_s(DECODE_BATCH, DECODE_CONTEXT)
    composed = GPUS_PER_NODE * DECODE_BATCH / step
    print(f"\ndecode: {DECODE_BATCH} requests of {DECODE_CONTEXT:,} tokens per rank (output tokens/s per node)")
    print(f"  published EP {DECODE_EP}: {DECODE_PUBLISHED:,}; composed EP {DECODE_COMPOSED_EP}: {composed:,.0f} "
          f"(ratio {composed / DECODE_PUBLISHED:.2f}; step {step * 1e3:.1f} ms)")
    prompts = GB200_TOKENS // GB200_PROMPT
    step = profile(GB200_DP, PREFILL_REDUNDANT, GB200, GB200_TOKENS).prefill_time_s([GB200_PROMPT] * prompts)
    composed = prompts * GB200_PROMPT / step
    print(f"\nGB200 prefill (lmsys.org/blog/2025-09-25-gb200-part-2): DP {GB200_DP} EP {GB200_DP}, {prompts} prompts "
          f"of {GB200_PROMPT:,} tokens per rank (input tokens/s per GPU)")
    print(f"  published {GB200_PUBLISHED:,}; composed {composed:,.0f} (ratio {composed / GB200_PUBLISHED:.2f}; "
          f"step {step * 1e3:.1f} ms)")
    low, high = TBO_PREFILL_GAIN
    print(f"\nThe published runs overlap the all-to-all with compute (two-batch overlap: +{low:.0%} to +{high:.0%} "
          f"prefill, +{TBO_DECODE_GAIN:.1%} decode in the post's ablation); pdplan composes and exports without it.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
