"""The KV handoff ledger of 0x01A: which prompt blocks prefill computes and which it must send.

Prefill computes what its own cache lacks; the handoff sends what the decode destination lacks.
The two sets differ in general, and bytes on the link follow the transfer set.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Sequence

from pdplan.modelspec import ModelSpec, kv_layer_bytes_per_rank
from pdplan.shape import InstanceShape


@dataclass(frozen=True, kw_only=True)
class HandoffLedger:
    """One request's three sets (0x01A), in prompt order."""

    universe: tuple[int, ...]       #: U_r, the prompt's blocks
    compute: tuple[int, ...]        #: C_P = U_r \ R_P, blocks prefill must compute
    transfer: tuple[int, ...]       #: X_{P→D} = U_r \ V_D, blocks that must become visible at D


def compute_set(universe: Sequence[int], reusable_at_prefill: Iterable[int]) -> tuple[int, ...]:
    """C_P(r) = U_r \\ R_P(r): prompt state absent from the chosen prefill worker (0x01A)."""
    reusable = set(reusable_at_prefill)
    return tuple(b for b in universe if b not in reusable)


def transfer_set(universe: Sequence[int], visible_at_decode: Iterable[int]) -> tuple[int, ...]:
    """X_{P→D}(r) = U_r \\ V_D(r): prompt state absent from the decode destination (0x01A)."""
    visible = set(visible_at_decode)
    return tuple(b for b in universe if b not in visible)


def ledger(universe: Sequence[int], reusable_at_prefill: Iterable[int],
           visible_at_decode: Iterable[int]) -> HandoffLedger:
    """All three sets for one request."""
    return HandoffLedger(universe=tuple(universe),
                         compute=compute_set(universe, reusable_at_prefill),
                         transfer=transfer_set(universe, visible_at_decode))


def transfer_bytes(blocks: int, block_tokens: int, model: ModelSpec) -> int:
    """Logical handoff bytes ``|X| · B_block · L · 2 · H_kv · d_h · b`` (0x01A).

    Padding, descriptors, checksums and framing belong to a physical-traffic ledger, not here.
    """
    return blocks * block_tokens * model.kv_bytes_per_token


def handoff_copies(model: ModelSpec, tp: int) -> float:
    """Copies of a request's KV a handoff lands on an instance of attention TP ``tp``, each TP rank the part it
    caches (:func:`pdplan.modelspec.kv_layer_bytes_per_rank`): ``tp`` under MLA, whose every rank caches the
    whole latent (vLLM's NixlConnector reads it whole into each decode worker, "For MLA: KV is replicated across
    TP", vllm/distributed/kv_transfer/kv_connector/v1/nixl_connector.py; SGLang pairs each decode rank with one
    prefill rank, disaggregation/common/conn.py ``_resolve_rank_mapping``); 1 when TP divides the K/V heads, and
    tp / H_kv past them, each rank holding one replicated head. What a prefill instance of attention TP ``tp``
    ships is counted the same way: each of its GPUs sends the part it holds over its own NIC."""
    return tp * kv_layer_bytes_per_rank(model, tp) / (model.kv_bytes_per_token / model.layers)


def sender_share(model: ModelSpec, prefill_tp: int, prefill_pp: int, decode_tp: int, decode_pp: int) -> float:
    """The share of a decode rank's ingress a prefill rank can fill: a request's KV lands on every GPU of the decode
    rank (``decode_tp × decode_pp``) but leaves only from the prefill GPUs holding a part it needs, each over its own
    NIC. Under MLA each decode TP rank reads the latent from one prefill TP rank, so ``min(prefill_tp, decode_tp)``
    of them send (SGLang's ``_resolve_rank_mapping``, disaggregation/common/conn.py; vLLM's NixlConnector, each
    decode worker from prefill rank ``tp_rank // tp_ratio``); with K/V heads each prefill rank sends its own, from
    at most as many GPUs as there are heads. Every pipeline stage sends its layers. 1 when the senders are as many as
    the receivers: a DEP prefill (attention TP 1) into a TP8 decode fills an eighth."""
    holders = min(prefill_tp, decode_tp) if model.attention == "mla" else min(prefill_tp, model.kv_heads)
    return min(1.0, holders * prefill_pp / (decode_tp * decode_pp))


def request_kv_bytes_per_s(model: ModelSpec, link_bytes_per_s: float, prefill: InstanceShape,
                           decode: InstanceShape) -> float:
    """The rate a request's KV moves at over a link of ``link_bytes_per_s`` (what a decode instance takes in) from a
    ``prefill`` shape into a ``decode`` one: it lands on one of the decode's attention-DP ranks, each with its GPUs'
    share (1/DP) of the link as its own ingress, and fills the share of that its sending GPUs fill
    (:func:`sender_share`) over the copies the rank's TP ranks take (:func:`handoff_copies`)."""
    share = sender_share(model, prefill.tp, prefill.pp, decode.tp, decode.pp)
    return link_bytes_per_s / decode.dp * share / handoff_copies(model, decode.tp)


def payload_floor_s(payload_bytes: float, link_bytes_per_s: float) -> float:
    """Payload-only lower bound ``T ≥ M / B_link`` (0x06; 2 GB at 25 GB/s → 80 ms).

    Setup, conversion, validation and queueing add to it; they do not overlap for free.
    """
    return payload_bytes / link_bytes_per_s


def link_demand_bytes_per_s(rate_rps: float, bytes_per_request: float) -> float:
    """Minimum KV payload demand ``B = g_system · M_KV`` (0x08D: 64 MiB at 12 rps → 768 MiB/s)."""
    return rate_rps * bytes_per_request


def link_fits(demand_bytes_per_s: float, capacity_bytes_per_s: float, headroom: float = 1.0) -> bool:
    """Whether logical demand fits the path at ``headroom`` of its capacity (0x08D).

    Headroom below 1 leaves room for framing, retries and contention that the logical ledger omits.
    """
    return demand_bytes_per_s <= headroom * capacity_bytes_per_s
