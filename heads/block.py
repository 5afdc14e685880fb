"""The block drafters' one rule (DFlash, DFlash2, DSpark: a block of mask slots after the target's newest token,
drafted in one forward): how many drafts a trained block holds, by its layout. An anchor-first layout (DSpark,
DeepSpec's) has every slot, the anchor's too, draft the next position: block_size drafts; the others draft in the
block_size − 1 mask slots after the anchor."""

from __future__ import annotations


def drafts_per_block(block_size: int, anchor_first: bool) -> int:
    """The drafts one trained block holds: the most γ (num_speculative_tokens) it serves."""
    return block_size if anchor_first else block_size - 1
