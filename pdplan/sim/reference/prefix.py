"""The oracle's prefix cache: an LRU of KV blocks in an ``OrderedDict``, a hit the leading run of a
prompt's blocks it holds."""

from __future__ import annotations

from collections import OrderedDict


class PrefixCache:
    """An instance's prefix blocks in LRU order: ``hbm`` blocks in HBM and ``tier`` more in a
    second tier, exclusive (HBM's least recent move to the tier's front; the tier's are dropped)."""

    def __init__(self, hbm: int, tier: int = 0):
        self.hbm, self.tier, self.capacity = OrderedDict(), OrderedDict(), (hbm, tier)

    def where(self, h: int) -> str | None:
        return "hbm" if h in self.hbm else "tier" if h in self.tier else None

    def touch(self, h: int) -> str | None:
        """Block h becomes the most recent in HBM; returns where it was."""
        where = self.where(h)
        if where == "tier":
            del self.tier[h]
        self.hbm[h] = True
        self.hbm.move_to_end(h)
        while len(self.hbm) > self.capacity[0]:
            old, _ = self.hbm.popitem(last=False)
            if self.capacity[1] > 0:
                self.tier[old] = True
        while len(self.tier) > self.capacity[1]:
            self.tier.popitem(last=False)
        return where

    def leading(self, blocks: list[int]) -> int:
        """How many leading blocks it holds in a row (a hit ends at the first miss)."""
        k = 0
        while k < len(blocks) and self.where(blocks[k]) is not None:
            k += 1
        return k


def block_tokens(prompt: int, block: int, j: int, limit: int) -> int:
    """Tokens of a prompt's block j before ``limit``."""
    return max(0, min(block, min(prompt, limit) - j * block))


def peek(cache: PrefixCache, blocks: list[int], prompt: int, block: int) -> tuple[int, int]:
    """What ``cache`` would give a prompt: (cached, loaded), the tokens of the leading blocks it
    holds (at least one token is computed) and of those the ones in the second tier."""
    k = cache.leading(blocks)
    cached = min(k * block, prompt - 1)
    return cached, sum(block_tokens(prompt, block, j, cached) for j in range(k) if cache.where(blocks[j]) == "tier")


def reuse(cache: PrefixCache, blocks: list[int], prompt: int, block: int) -> tuple[int, int]:
    """A prompt reaches an instance with ``cache``: :func:`peek`'s answer; then its blocks
    become the most recent in HBM, in prompt order."""
    cached, loaded = peek(cache, blocks, prompt, block)
    for h in blocks:
        cache.touch(h)
    return cached, loaded
