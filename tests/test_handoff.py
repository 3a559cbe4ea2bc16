"""The 0x01A handoff ledger: compute set and transfer set differ; bytes follow the transfer set."""

import pytest

from pdplan.handoff import ledger, payload_floor_s, transfer_bytes
from pdplan.modelspec import ModelSpec

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
