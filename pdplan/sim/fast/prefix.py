"""Prefix caches: an instance's prefix blocks in LRU order, in HBM and optionally a second tier.

Blocks are the trace's prefix-hash ids, renumbered densely. Each instance holds its blocks in a
table of its own: one slot per distinct block of the trace (the block's own slot, no probing)
while every cached instance's such table fits in :data:`DIRECT_SLOTS` slots together; beyond
that, sized by what the instance can hold rather than by the trace: a hash table of twice its
capacity in blocks (a power of two; linear probing keyed by the block, deletion by backward
shift, no tombstones), unless that is no smaller than one slot per block. Both kinds give the
same LRU; the hashed one bounds memory on long traces with many instances, the direct one is
faster.

The ``lru`` array's first columns index the tables: instance k's slots are columns ``lru[0, k]``
up to ``lru[0, k + 1]``, and ``lru[1, k]`` is 1 for a table of one slot per block. A slot's four
int32 rows are the block it holds (−1: empty), the previous and next slot of a doubly linked list,
and where the block is (:data:`~.fields.ABSENT`, :data:`~.fields.IN_HBM`, :data:`~.fields.IN_TIER`);
rows, not slots, are contiguous, so a lookup in a table of one slot per block reads only where
its block is. Each list is four consecutive rows of the instance's state array (head slot, tail
slot, count, capacity), from row ``lst`` on.

Two tiers form an exclusive LRU: a touched block becomes the most recent in HBM (loaded from the
tier if it was there); HBM's overflow moves to the tier's front, the tier's overflow is dropped.
That is one LRU of both capacities whose most recent HBM-capacity blocks are in HBM.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from pdplan.errors import InternalError
from pdplan.sim.fast.fields import ABSENT, IN_HBM, IN_TIER

_HEAD, _TAIL, _COUNT, _CAP = range(4)
_KEY, _PREV, _NEXT, _WHERE = range(4)
#: Slots of one-slot-per-block tables the caches of one run may take (16 bytes each: 128 MiB).
DIRECT_SLOTS = 1 << 23


def cache_tables(capacities, n_hash: int, direct_slots: int = DIRECT_SLOTS) -> np.ndarray:
    """Empty tables for instances holding ``capacities`` blocks each (HBM and tier together): one slot
    per distinct block of the trace while they fit in ``direct_slots`` together, else a hash table
    holding its capacity plus the block a touch adds before it evicts at half load (so probes stay
    short), or one slot per block where that is no larger."""
    hashed = [1 << int(2 * int(c) + 1).bit_length() for c in capacities]
    few = sum(int(c) > 0 for c in capacities) * n_hash <= direct_slots
    direct = [int(c) > 0 and (few or size >= n_hash) for c, size in zip(capacities, hashed)]
    sizes = [0 if c <= 0 else n_hash if d else size for c, d, size in zip(capacities, direct, hashed)]
    offsets = len(sizes) + 1 + np.concatenate([[0], np.cumsum(sizes, dtype=np.int64)])
    if offsets[-1] >= np.iinfo(np.int32).max:
        raise InternalError(f"prefix caches of {offsets[-1]:,} slots do not fit int32 slot numbers")
    tables = np.full((4, max(1, int(offsets[-1]))), -1, np.int32)
    tables[0, :len(offsets)] = offsets
    tables[1, :len(direct)] = direct
    tables[_WHERE, len(offsets):] = ABSENT
    return tables


@njit(cache=True, inline="always")
def _home(h, mask):
    """Block h's first probe in a hashed table of mask + 1 slots: a splitmix64 finalizer, masked."""
    z = np.uint64(h) + np.uint64(0x9E3779B97F4A7C15)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    z = z ^ (z >> np.uint64(31))
    return np.int64(z & np.uint64(mask))


@njit(cache=True, inline="always")
def slot_of(lru, k, h):
    """The slot holding block h in instance k's table, or -1."""
    start = np.int64(lru[0, k])
    if lru[1, k] == 1:  # the block's own slot, which holds no other
        return start + h if lru[_WHERE, start + h] != ABSENT else -1
    mask = np.int64(lru[0, k + 1]) - start - 1
    if mask < 0:
        return -1
    i = _home(h, mask)
    while True:
        key = lru[_KEY, start + i]
        if key == h:
            return start + i
        if key < 0:
            return -1
        i = (i + 1) & mask


@njit(cache=True, inline="always")
def where_is(lru, k, h):
    x = slot_of(lru, k, h)
    return ABSENT if x < 0 else lru[_WHERE, x]


@njit(cache=True, inline="always")
def _insert(lru, k, h):
    """A slot for block h, absent from instance k's table (its list links and place are set next)."""
    start = np.int64(lru[0, k])
    if lru[1, k] == 1:  # its own slot; the block row is never read in such a table
        return start + h
    mask = np.int64(lru[0, k + 1]) - start - 1
    i = _home(h, mask)
    while lru[_KEY, start + i] >= 0:
        i = (i + 1) & mask
    lru[_KEY, start + i] = h
    return start + i


@njit(cache=True, inline="always")
def _list_of(lru, x, hbm, tier):
    return hbm if lru[_WHERE, x] == IN_HBM else tier


@njit(cache=True, inline="always")
def _move(lru, src, dst, st, hbm, tier, col):
    """Slot src's block moves to the empty slot dst; its neighbours (or its list's ends) follow.
    (It repoints them as :func:`_unlink` does; a helper shared by the two made ``touch`` 1.7× slower
    under numba, so each keeps its own four lines.)"""
    for row in range(4):
        lru[row, dst] = lru[row, src]
    lst = _list_of(lru, dst, hbm, tier)
    p = lru[_PREV, dst]
    q = lru[_NEXT, dst]
    if p >= 0:
        lru[_NEXT, p] = dst
    else:
        st[lst + _HEAD, col] = dst
    if q >= 0:
        lru[_PREV, q] = dst
    else:
        st[lst + _TAIL, col] = dst


@njit(cache=True)
def _delete(lru, k, x, st, hbm, tier, col):
    """Empty slot x of a hashed table (its block unlinked already), shifting later blocks of its
    probe run back. (In a table of one slot per block, absent is empty: nothing to do.)"""
    start = np.int64(lru[0, k])
    mask = np.int64(lru[0, k + 1]) - start - 1
    i = x - start
    j = i
    while True:
        j = (j + 1) & mask
        key = lru[_KEY, start + j]
        if key < 0:
            break
        home = _home(key, mask)
        if (i <= j and i < home <= j) or (i > j and (home > i or home <= j)):
            continue  # its probe run does not pass the hole
        _move(lru, start + j, start + i, st, hbm, tier, col)
        i = j
    lru[_KEY, start + i] = -1
    lru[_WHERE, start + i] = ABSENT


@njit(cache=True, inline="always")
def _unlink(lru, st, lst, col, x):
    p = lru[_PREV, x]
    q = lru[_NEXT, x]
    if p >= 0:
        lru[_NEXT, p] = q
    else:
        st[lst + _HEAD, col] = q
    if q >= 0:
        lru[_PREV, q] = p
    else:
        st[lst + _TAIL, col] = p
    st[lst + _COUNT, col] -= 1


@njit(cache=True, inline="always")
def _push_front(lru, st, lst, col, x, where):
    head = st[lst + _HEAD, col]
    lru[_PREV, x] = -1
    lru[_NEXT, x] = head
    if head >= 0:
        lru[_PREV, head] = x
    else:
        st[lst + _TAIL, col] = x
    st[lst + _HEAD, col] = x
    st[lst + _COUNT, col] += 1
    lru[_WHERE, x] = where


@njit(cache=True)
def touch(lru, k, st, hbm, tier, col, h):
    """Make block h the most recent in instance k's HBM (its list rows from ``hbm`` on); HBM's
    overflow moves to the tier (rows from ``tier`` on; -1: none, dropped), the tier's is dropped.
    Returns where h was."""
    x = slot_of(lru, k, h)
    where = ABSENT if x < 0 else lru[_WHERE, x]
    if where == IN_HBM:
        if st[hbm + _HEAD, col] == x:
            return where
        _unlink(lru, st, hbm, col, x)
    elif where == IN_TIER:
        _unlink(lru, st, tier, col, x)
    else:
        x = _insert(lru, k, h)
    _push_front(lru, st, hbm, col, x, IN_HBM)
    while st[hbm + _COUNT, col] > st[hbm + _CAP, col]:
        old = st[hbm + _TAIL, col]
        _unlink(lru, st, hbm, col, old)
        if tier >= 0 and st[tier + _CAP, col] > 0:
            _push_front(lru, st, tier, col, old, IN_TIER)
        else:
            lru[_WHERE, old] = ABSENT
            if lru[1, k] == 0:
                _delete(lru, k, old, st, hbm, tier, col)
    while tier >= 0 and st[tier + _COUNT, col] > st[tier + _CAP, col]:
        old = st[tier + _TAIL, col]
        _unlink(lru, st, tier, col, old)
        lru[_WHERE, old] = ABSENT
        if lru[1, k] == 0:
            _delete(lru, k, old, st, hbm, tier, col)
    return where


@njit(cache=True)
def leading_blocks(lru, k, hash_vals, hash_ptr, r):
    """How many of request r's leading prefix blocks instance k's cache holds (in either tier), in
    a row: a block's keys and values depend on every token before it, so a hit ends at the first miss."""
    n = 0
    for b in range(hash_ptr[r], hash_ptr[r + 1]):
        if slot_of(lru, k, hash_vals[b]) < 0:
            break
        n += 1
    return n


@njit(cache=True, inline="always")
def block_tokens_in(prompt, block_tokens, j, limit):
    """Tokens of a prompt's block j that lie before ``limit`` (the last block may be partial)."""
    lo = j * block_tokens
    return max(0, min(block_tokens, min(prompt, limit) - lo))


@njit(cache=True)
def peek(lru, k, hash_vals, hash_ptr, block_tokens, prompt, r):
    """What the cache would give request r, without touching it: (cached, loaded), the prompt
    tokens its leading hits cover and those of them in the tier.

    At least one token is computed, for the logits (vLLM's ``KVCacheManager.get_computed_blocks``
    caps a hit at the prompt length − 1)."""
    n = leading_blocks(lru, k, hash_vals, hash_ptr, r)
    cached = min(n * block_tokens, prompt - 1)
    loaded = 0
    for j in range(n):
        if where_is(lru, k, hash_vals[hash_ptr[r] + j]) == IN_TIER:
            loaded += block_tokens_in(prompt, block_tokens, j, cached)
    return cached, loaded


@njit(cache=True)
def reuse(lru, k, st, hbm, tier, col, hash_vals, hash_ptr, block_tokens, prompt, r):
    """Request r reaches an instance with a prefix cache: :func:`peek`'s (cached, loaded), judged
    on the cache as the request finds it; then every block of the prompt becomes the most recent
    in HBM, in prompt order (the prefill writes them)."""
    cached, loaded = peek(lru, k, hash_vals, hash_ptr, block_tokens, prompt, r)
    for b in range(hash_ptr[r], hash_ptr[r + 1]):
        touch(lru, k, st, hbm, tier, col, hash_vals[b])
    return cached, loaded
