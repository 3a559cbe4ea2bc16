"""Small hand-written phase profiles for tests and benchmarks of the simulator.

Not for planning: shipped and fitted profiles live in :mod:`pdplan.latency.profile`. These exist so the
simulator can be exercised without them, with numbers a reader can check by hand.
"""

from __future__ import annotations

from typing import Sequence

from pdplan.latency.profile import LatencyModel, PhaseProfile, Provenance, Segment


def latency_model_ms(segments: Sequence[tuple[int, Sequence[Sequence[float]]]]) -> LatencyModel:
    """A LatencyModel from ``[(min_batch, [[c0, c1, c2], ...]), ...]`` in milliseconds."""
    return LatencyModel(segments=tuple(
        Segment(min_batch=start, pieces_s=tuple(tuple(c / 1e3 for c in piece) for piece in pieces))
        for start, pieces in segments))


def handbuilt_profile(*, prefill_ms, decode_ms, kv_capacity_tokens: int, max_prefill_batch_tokens: int,
                      model: str = "toy", gpu: str = "toy-gpu", tp: int = 1, pp: int = 1,
                      notes: str = "hand-built for tests") -> PhaseProfile:
    """A profile from segment lists in ms (see :func:`latency_model_ms`)."""
    return PhaseProfile(model=model, gpu=gpu, tp=tp, pp=pp,
                        prefill=latency_model_ms(prefill_ms), decode=latency_model_ms(decode_ms),
                        kv_capacity_tokens=kv_capacity_tokens,
                        max_prefill_batch_tokens=max_prefill_batch_tokens,
                        provenance=Provenance(source="measured", method="hand-built", notes=notes))


def llama2_70b_a100_tp4() -> PhaseProfile:
    """llama2-70b on 4×A100-80GB, fitted by eye to Splitwise's measured medians.

    Prefill ``max(60, 30 + 0.18·Σl + 1.15e-5·Σl²)`` ms reproduces 127/227/403/965/2278 ms at
    512–8192 tokens within ~10%; decode ``41 + 0.45·B + 4e-5·Σctx`` ms gives 41.5 / 48.6 / 71 ms
    at B = 1 / 16 / 64 with 512-token prompts (measured 42 / 48.5 / 73); 4e-5 ms per context token
    is reading 320 KiB of KV per token at 4 × 2 TB/s. KV capacity: (0.9·80 GB − 35 GB weights) per GPU /
    80 KiB per token per GPU ≈ 450k tokens. Batch cap 2048 prompt tokens (Splitwise).
    """
    return handbuilt_profile(
        model="llama2-70b", gpu="a100-80gb", tp=4, pp=1,
        prefill_ms=[(1, [[60.0, 0.0, 0.0], [30.0, 0.18, 1.15e-5]])],
        decode_ms=[(1, [[41.0, 0.45, 4e-5]])],
        kv_capacity_tokens=450_000, max_prefill_batch_tokens=2048,
        notes="hand fit to splitwise_perf_model.csv medians (a100-80gb, TP4); a stand-in")
