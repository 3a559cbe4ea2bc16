"""The compiled engine's prefix-cache tables: sized by what an instance holds, and the same LRU as a
plain ordered dictionary whatever the table kind (hashed with probe runs, or one slot per block)."""

from collections import OrderedDict

import numpy as np
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from pdplan.sim.fast.fields import ABSENT, IN_HBM, IN_TIER
from pdplan.sim.fast.prefix import cache_tables, slot_of, touch

HBM, TIER = 0, 4  # each list's rows: head, tail, count, capacity


def lists(hbm_blocks: int, tier_blocks: int) -> np.ndarray:
    rows = np.zeros((8, 1), np.int64)
    rows[[HBM, HBM + 1, TIER, TIER + 1], 0] = -1
    rows[HBM + 3, 0], rows[TIER + 3, 0] = hbm_blocks, tier_blocks
    return rows


def ordered_lru(touches, hbm_blocks: int, tier_blocks: int):
    """Where each touched block was, and where every block ends, by one ordered dict per tier."""
    hbm, tier, found = OrderedDict(), OrderedDict(), []
    for h in touches:
        found.append(IN_HBM if h in hbm else IN_TIER if h in tier else ABSENT)
        tier.pop(h, None)
        hbm[h] = True
        hbm.move_to_end(h)
        while len(hbm) > hbm_blocks:
            old, _ = hbm.popitem(last=False)
            if tier_blocks:
                tier[old] = True
                tier.move_to_end(old, last=False)
        while len(tier) > tier_blocks:
            tier.popitem()
    return found, {h: IN_HBM for h in hbm} | {h: IN_TIER for h in tier}


def table_lru(touches, hbm_blocks: int, tier_blocks: int, n_hash: int, direct_slots: int = 0):
    tables = cache_tables([hbm_blocks + tier_blocks], n_hash, direct_slots)
    rows = lists(hbm_blocks, tier_blocks)
    found = [touch(tables, 0, rows, HBM, TIER if tier_blocks else -1, 0, h) for h in touches]
    held = {h: int(tables[3, slot_of(tables, 0, h)]) for h in range(n_hash) if slot_of(tables, 0, h) >= 0}
    return found, held, tables, rows


def test_a_long_trace_sizes_each_table_by_the_blocks_its_instance_holds():
    tables = cache_tables([100, 0, 3], n_hash=10_000_000)
    starts = tables[0, :4]
    assert np.diff(starts).tolist() == [256, 0, 8]   # twice the blocks plus one, a power of two
    assert tables.shape == (4, 4 + 264)


def test_a_hashed_table_as_large_as_the_trace_is_one_slot_per_block_instead():
    tables = cache_tables([700], n_hash=1000, direct_slots=0)
    assert tables[0, 1] - tables[0, 0] == 1000 and tables[1, 0] == 1


@settings(max_examples=200, deadline=None)
@given(touches=st.lists(st.integers(0, 63), max_size=300), hbm_blocks=st.integers(0, 12),
       tier_blocks=st.integers(0, 12), n_hash=st.sampled_from([64, 40_000]), direct_slots=st.sampled_from([0, 10**6]))
def test_touches_follow_an_ordered_dict_lru_in_either_table(touches, hbm_blocks, tier_blocks, n_hash, direct_slots):
    """Hashed tables over 64 blocks collide, wrap around and shift back on every eviction; with
    room for one slot per block (or n_hash = 64 and enough capacity) there is no probing at all.
    (An instance without a cache has no table and is never touched.)"""
    assume(hbm_blocks + tier_blocks > 0)
    found, held, _, _ = table_lru(touches, hbm_blocks, tier_blocks, n_hash, direct_slots)
    expected_found, expected_held = ordered_lru(touches, hbm_blocks, tier_blocks)
    assert found == expected_found
    assert held == expected_held


def walk(tables, rows, lst) -> list[int]:
    """The blocks of one list, most recent first, following the slots' next links."""
    blocks, x = [], rows[lst, 0]
    while x >= 0:
        blocks.append(int(tables[0, x]))
        x = tables[2, x]
    return blocks


def test_each_list_runs_most_recent_first_through_its_tier_and_its_count_is_its_length():
    touches = np.random.default_rng(3).integers(0, 200, 2000).tolist()
    _, _, tables, rows = table_lru(touches, 9, 7, 200)
    recent = list(dict.fromkeys(reversed(touches)))   # distinct blocks, most recent first
    assert walk(tables, rows, HBM) == recent[:9]
    assert walk(tables, rows, TIER) == recent[9:16]
    assert rows[HBM + 2, 0] == 9 and rows[TIER + 2, 0] == 7


def test_small_runs_take_one_slot_per_block_and_large_ones_hash():
    """Within ``direct_slots`` every cached instance gets the trace's blocks as slots (the fast
    kind); beyond it, tables sized by capacity."""
    assert cache_tables([10, 0, 10], n_hash=5000, direct_slots=10_000)[1, :3].tolist() == [1, 0, 1]
    tables = cache_tables([10, 0, 10], n_hash=5000, direct_slots=9_999)
    assert tables[1, :3].tolist() == [0, 0, 0] and np.diff(tables[0, :4]).tolist() == [32, 0, 32]
