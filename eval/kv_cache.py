"""KV-cache rollback on transformers' DynamicCache.

Rollback drops the entries of rejected draft tokens, so the cache again equals the cache a fresh
forward over the accepted tokens would build (tested against a recompute).
"""

from __future__ import annotations

from transformers import DynamicCache


def truncate(cache: DynamicCache, length: int) -> None:
    """Keep the first `length` positions of every layer (transformers 5 crops by a negative count)."""
    excess = cache.get_seq_length() - length
    if excess > 0:
        cache.crop(-excess)
