"""The 0x01A handoff ledger: compute set and transfer set differ; bytes follow the transfer set."""

import pytest

from pdplan.handoff import handoff_copies, ledger, payload_floor_s, request_kv_bytes_per_s, sender_share, transfer_bytes
from pdplan.modelref import get_model
from pdplan.modelspec import ModelSpec
from pdplan.shape import InstanceShape

PROMPT = list(range(8))  # b0..b7


def test_compute_set_excludes_blocks_prefill_reuses():
    assert ledger(PROMPT, reusable_at_prefill=[0, 1, 2], visible_at_decode=[0]).compute == (3, 4, 5, 6, 7)


def test_transfer_set_excludes_only_blocks_decode_already_sees():
    assert ledger(PROMPT, reusable_at_prefill=[0, 1, 2], visible_at_decode=[0]).transfer == (1, 2, 3, 4, 5, 6, 7)


def test_transfer_bytes_of_the_toy_manifest_are_7168():
    """0x01A's oracle: 7 transfer blocks → 7,168 logical bytes. The article does not state the
    block geometry; 4-token blocks of the 0x02A toy model (L=4, H_kv=2, d_h=8, b=2 → 256 B/token)
    give 1,024 bytes per block, which reproduces it."""
    toy = ModelSpec(name="toy", layers=4, hidden=64, q_heads=8, kv_heads=2, head_dim=8, ffn=160,
                    vocab=1, parameters=163_904)
    assert transfer_bytes(7, 4, toy) == 7168


def test_payload_floor_of_2_gb_at_25_gb_per_s_is_80_ms():
    assert payload_floor_s(2e9, 25e9) == pytest.approx(0.080)


MIB = 2**20


def test_article_link_demand_is_768_mib_per_s():
    """0x08D: 256 tokens × 64 layers × 2 × 8 heads × 128 × 2 B = 64 MiB per request, at 12 rps."""
    from pdplan.handoff import link_demand_bytes_per_s
    from pdplan.modelspec import kv_bytes_per_token

    per_request = 256 * kv_bytes_per_token(64, 8, 128, 2)
    assert per_request == 64 * MIB
    assert link_demand_bytes_per_s(12, per_request) == 768 * MIB


def test_768_mib_per_s_fits_a_4_gib_path_but_not_a_256_mib_path():
    from pdplan.handoff import link_fits

    assert link_fits(768 * MIB, 4 * 1024 * MIB)
    assert not link_fits(768 * MIB, 256 * MIB)


@pytest.mark.parametrize(("model", "tp", "copies"), [
    ("deepseek-v3@fp8", 1, 1), ("deepseek-v3@fp8", 8, 8),    # MLA: every TP rank caches the whole latent
    ("llama-3.1-70b", 8, 1), ("llama-3.1-70b", 16, 2),      # 8 K/V heads: split to 8 ranks, then replicated
])
def test_a_handoff_lands_one_copy_of_what_each_tp_rank_caches(model, tp, copies):
    assert handoff_copies(get_model(model), tp) == pytest.approx(copies)


@pytest.mark.parametrize(("model", "prefill", "decode", "share"), [
    ("deepseek-v3@fp8", (8, 1), (8, 1), 1.0),        # each decode rank from its own prefill rank
    ("deepseek-v3@fp8", (1, 1), (8, 1), 1 / 8),      # one GPU holds the latent all eight read
    ("deepseek-v3@fp8", (2, 4), (1, 1), 1.0),        # four stages into one GPU: the receiver bounds it
    ("llama-3.1-70b", (1, 2), (4, 1), 1 / 2),        # one GPU a stage holds the 8 heads four ranks split
    ("llama-3.1-70b", (16, 1), (16, 1), 1 / 2),      # 8 distinct heads, sixteen ranks each taking one
])
def test_a_prefill_rank_fills_as_much_of_a_decode_ranks_ingress_as_it_has_sending_gpus(model, prefill, decode, share):
    assert sender_share(get_model(model), *prefill, *decode) == pytest.approx(share)


def test_a_requests_kv_lands_on_one_decode_rank_at_that_ranks_share_of_the_instances_link():
    """A decode instance of DP 4 TP 1 (DeepSeek, MLA) takes 100 GB/s over its four GPUs; a request's KV lands on one
    rank, whose GPU takes a quarter, from a TP 1 prefill rank that fills it: 25 GB/s."""
    model = get_model("deepseek-v3", dtype="fp8")
    prefill = InstanceShape(gpu="h200-141gb", tp=1, dp=8, ep=8)
    decode = InstanceShape(gpu="h200-141gb", tp=1, dp=4, ep=4)
    assert request_kv_bytes_per_s(model, 100e9, prefill, decode) == pytest.approx(25e9)
