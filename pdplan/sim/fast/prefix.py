"""Prefix caches: an instance's prefix blocks in LRU order, in HBM and optionally a second tier.

Blocks are the trace's prefix-hash ids, renumbered densely; instance k's blocks sit at
``k · n_hash + block`` of the ``lru`` array, whose rows are the previous and next block of a
doubly linked list and where the block is (:data:`~.fields.ABSENT`, :data:`~.fields.IN_HBM`,
:data:`~.fields.IN_TIER`). Each list is four consecutive rows of the instance's state array
(head, tail, count, capacity), from row ``lst`` on.

Two tiers form an exclusive LRU: a touched block becomes the most recent in HBM (loaded from the
tier if it was there); HBM's overflow moves to the tier's front, the tier's overflow is dropped.
That is one LRU of both capacities whose most recent HBM-capacity blocks are in HBM.
"""

from __future__ import annotations

from numba import njit

from pdplan.sim.fast.fields import ABSENT, IN_HBM, IN_TIER

_HEAD, _TAIL, _COUNT, _CAP = range(4)


@njit(cache=True, inline="always")
def _unlink(lru, base, st, lst, col, h):
    x = base + h
    p = lru[0, x]
    q = lru[1, x]
    if p >= 0:
        lru[1, base + p] = q
    else:
        st[lst + _HEAD, col] = q
    if q >= 0:
        lru[0, base + q] = p
    else:
        st[lst + _TAIL, col] = p
    st[lst + _COUNT, col] -= 1
    lru[2, x] = ABSENT


@njit(cache=True, inline="always")
def _push_front(lru, base, st, lst, col, h, where):
    x = base + h
    head = st[lst + _HEAD, col]
    lru[0, x] = -1
    lru[1, x] = head
    if head >= 0:
        lru[0, base + head] = h
    else:
        st[lst + _TAIL, col] = h
    st[lst + _HEAD, col] = h
    st[lst + _COUNT, col] += 1
    lru[2, x] = where


@njit(cache=True)
def touch(lru, base, st, hbm, tier, col, h):
    """Make block h the most recent in HBM (rows from ``hbm`` on); HBM's overflow moves to the
    tier (rows from ``tier`` on; -1: none, dropped), the tier's is dropped. Returns where h was."""
    where = lru[2, base + h]
    if where == IN_HBM:
        if st[hbm + _HEAD, col] == h:
            return where
        _unlink(lru, base, st, hbm, col, h)
    elif where == IN_TIER:
        _unlink(lru, base, st, tier, col, h)
    _push_front(lru, base, st, hbm, col, h, IN_HBM)
    while st[hbm + _COUNT, col] > st[hbm + _CAP, col]:
        old = st[hbm + _TAIL, col]
        _unlink(lru, base, st, hbm, col, old)
        if tier >= 0 and st[tier + _CAP, col] > 0:
            _push_front(lru, base, st, tier, col, old, IN_TIER)
    while tier >= 0 and st[tier + _COUNT, col] > st[tier + _CAP, col]:
        _unlink(lru, base, st, tier, col, st[tier + _TAIL, col])
    return where


@njit(cache=True)
def leading_blocks(lru, base, hash_vals, hash_ptr, r):
    """How many of request r's leading prefix blocks the cache holds (in either tier), in a row:
    a block's keys and values depend on every token before it, so a hit ends at the first miss."""
    k = 0
    for b in range(hash_ptr[r], hash_ptr[r + 1]):
        if lru[2, base + hash_vals[b]] == ABSENT:
            break
        k += 1
    return k


@njit(cache=True, inline="always")
def block_tokens_in(prompt, block_tokens, j, limit):
    """Tokens of a prompt's block j that lie before ``limit`` (the last block may be partial)."""
    lo = j * block_tokens
    return max(0, min(block_tokens, min(prompt, limit) - lo))


@njit(cache=True)
def peek(lru, base, hash_vals, hash_ptr, block_tokens, prompt, r):
    """What the cache would give request r, without touching it: (cached, loaded), the prompt
    tokens its leading hits cover and those of them in the tier.

    At least one token is computed, for the logits (vLLM's ``KVCacheManager.get_computed_blocks``
    caps a hit at the prompt length − 1)."""
    k = leading_blocks(lru, base, hash_vals, hash_ptr, r)
    cached = min(k * block_tokens, prompt - 1)
    loaded = 0
    for j in range(k):
        if lru[2, base + hash_vals[hash_ptr[r] + j]] == IN_TIER:
            loaded += block_tokens_in(prompt, block_tokens, j, cached)
    return cached, loaded


@njit(cache=True)
def reuse(lru, base, st, hbm, tier, col, hash_vals, hash_ptr, block_tokens, prompt, r):
    """Request r reaches an instance with a prefix cache: :func:`peek`'s (cached, loaded), judged
    on the cache as the request finds it; then every block of the prompt becomes the most recent
    in HBM, in prompt order (the prefill writes them)."""
    cached, loaded = peek(lru, base, hash_vals, hash_ptr, block_tokens, prompt, r)
    for b in range(hash_ptr[r], hash_ptr[r + 1]):
        touch(lru, base, st, hbm, tier, col, hash_vals[b])
    return cached, loaded
