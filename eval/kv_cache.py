"""The engine's KV cache: transformers' DynamicCache plus a per-slot validity mask.

Why a mask: rows of a batch accept different numbers of draft tokens, and a token tree keeps
one root-to-leaf path out of many nodes. Rather than copying caches per row, a slot that no
longer belongs to its row's sequence is marked invalid and masked out of attention; each row's
position ids count only its valid slots. Slot order does not matter to attention (keys are
stored already rotated), so the same 4D mask serves prompts, chains and trees.

Rules that keep the cache equal to a fresh forward over the accepted tokens (tested against a
recompute): `rollback(n)` keeps each row's first n valid slots; `keep_last(kept)` moves the kept
nodes of the last fed block to its front, in order, and drops the rest; columns invalid in every
row are cropped off the end. With one row and a chain every rollback is a crop, the cache stays
dense and the model runs its own causal-mask path (no mask tensors at all).

Sliding-window layers (Gemma 2/3, Mistral) keep every token here too; past the window a block's mask hides from
each node the keys `window` or more positions before its own, per layer kind (`layer_masks`).
"""

from __future__ import annotations

from typing import Optional

import torch
from transformers import DynamicCache

from eval.errors import EvalError


def truncate(cache: DynamicCache, length: int) -> None:
    """Keep the first `length` positions of every layer (transformers 5 crops by a negative count)."""
    excess = cache.get_seq_length() - length
    if excess > 0:
        cache.crop(-excess)


def ancestor_mask(parents: torch.Tensor) -> torch.Tensor:
    """(B, m) parent index per node (−1 = none, parents[j] < j) → (B, m, m) bool: node i sees node j.

    A node sees itself and its ancestors; for a chain (parents[j] = j − 1) this is the causal mask.
    """
    batch, m = parents.shape
    seen = torch.eye(m, dtype=torch.bool, device=parents.device).repeat(batch, 1, 1)  # (B, m, m)
    rows = torch.arange(batch, device=parents.device)
    for j in range(1, m):  # parents precede children, so each parent's row is final when read
        par = parents[:, j]
        has = par >= 0
        seen[rows[has], j] |= seen[rows[has], par[has]]
    return seen


def block_attention(
    cached_valid: torch.Tensor, parents: torch.Tensor, input_valid: torch.Tensor, dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor]:
    """The additive attention mask (B, 1, m, S + m) and position ids (B, m) of a token-tree block.

    Each node sees the valid cached slots (B, S), itself and its valid ancestors, and sits at the
    position after them, so its output equals a plain forward over its own path. Padding hides
    from every other node but still sees itself, so no row is all-masked.
    """
    batch, m = parents.shape
    ancestors = ancestor_mask(parents)  # (B, m, m)
    see_block = ancestors & (input_valid[:, None, :] | torch.eye(m, dtype=torch.bool, device=parents.device))
    see = torch.cat([cached_valid[:, None, :].expand(batch, m, -1), see_block], dim=2)  # (B, m, S+m)
    depth = (ancestors & input_valid[:, None, :]).sum(-1) - 1  # (B, m) valid ancestors
    position_ids = cached_valid.sum(1, keepdim=True) + depth.clamp_min(0)
    mask = torch.zeros(see.shape, dtype=dtype, device=see.device).masked_fill(~see, torch.finfo(dtype).min)
    return mask[:, None], position_ids


def within_window(mask: torch.Tensor, cached_valid: torch.Tensor, position_ids: torch.Tensor, window: int):
    """block_attention's mask (B, 1, m, S + m) for a sliding-window layer: each node also loses every key `window`
    or more positions before its own (Gemma's, Mistral's rule: a query sees the last `window` tokens, itself
    included). Cached slots sit at their valid rank; block nodes at their position ids."""
    cached_positions = cached_valid.cumsum(1) - 1  # (B, S): an invalid slot is masked already
    keys = torch.cat([cached_positions, position_ids], dim=1)  # (B, S + m)
    far = position_ids[:, :, None] - keys[:, None, :] >= window  # (B, m, S + m)
    return mask.masked_fill(far[:, None], torch.finfo(mask.dtype).min)


def sliding_window(model) -> Optional[int]:
    """The window of the model's sliding-window layers (Gemma 2/3, Mistral, Qwen2 with use_sliding_window), None
    where every layer attends to every earlier token; EvalError for a layer kind the engine does not model."""
    config = model.config.get_text_config()
    kinds = set(getattr(config, "layer_types", None) or [])
    if not kinds and getattr(config, "sliding_window", None) and getattr(config, "use_sliding_window", True):
        kinds = {"sliding_attention"}  # Mistral: every layer slides, no layer_types
    other = kinds - {"full_attention", "sliding_attention"}
    if other:
        raise EvalError(
            f"{config.model_type} layers of type {sorted(other)} are not supported; "
            "the engine needs full (or sliding-window) attention in every layer"
        )
    return config.sliding_window if "sliding_attention" in kinds else None


def layer_masks(model, mask, cached_valid, position_ids, window: Optional[int]):
    """The attention_mask argument for a block: the 4D mask, or where sliding-window layers are past their window,
    the mask per layer kind ({"full_attention": …, "sliding_attention": …}, as Gemma and Qwen take it; a model
    whose every layer slides takes the sliding mask alone)."""
    if window is None or cached_valid.shape[1] + position_ids.shape[1] <= window:
        return mask
    sliding = within_window(mask, cached_valid, position_ids, window)
    kinds = set(getattr(model.config.get_text_config(), "layer_types", None) or ["sliding_attention"])
    return sliding if kinds == {"sliding_attention"} else {"full_attention": mask, "sliding_attention": sliding}


def keep_first(kept: list[list[int]], width: int, device) -> torch.Tensor:
    """(B, width) permutation per row putting the kept indices first, in order, then the rest."""
    order = [k + [j for j in range(width) if j not in set(k)] for k in kept]
    return torch.tensor(order, device=device)


class SlotCache:
    """A batch KV cache whose slots may be invalid (see the module docstring).

    While no slot is invalid (always, for one row decoding a chain) the bookkeeping stays in
    Python: no mask is built and rollback is a crop, so the engine adds no host syncs.
    """

    def __init__(self, batch_size: int, device: torch.device, verify_widths: Optional[dict[int, int]] = None):
        """verify_widths: a verification block of m tokens runs padded to verify_widths[m] tokens where given (a
        CPU runs some small widths slower than wider ones; eval/static_engine.py measures it)."""
        self.cache = DynamicCache()
        self.valid = torch.zeros(batch_size, 0, dtype=torch.bool, device=device)  # (B, S)
        self.dense = True  # every slot valid
        self.verify_widths = dict(verify_widths or {})

    def run_width(self, m: int) -> int:
        """The block width a verification of m tokens runs at: m, or a wider one measured faster."""
        return self.verify_widths.get(m, m)

    @property
    def device(self) -> torch.device:
        return self.valid.device

    def lengths(self) -> list[int]:
        """Number of sequence tokens cached per row."""
        if self.dense:
            return [self.valid.shape[1]] * self.valid.shape[0]
        return self.valid.sum(1).tolist()  # host sync

    def forward(
        self,
        model,
        input_ids: torch.Tensor,
        parents: Optional[torch.Tensor] = None,
        input_valid: Optional[torch.Tensor] = None,
        **kwargs,
    ):
        """Run `model` on a block of new tokens appended to the cache.

        Args:
            input_ids: (B, m) tokens; each row's block continues that row's valid slots.
            parents: (B, m) parent index within the block per node (−1 = attaches to the cached
                sequence; parents[j] < j). None = a chain (parents[j] = j − 1).
            input_valid: (B, m) False for padding in the block (never attended, never counted).
        Returns:
            the model output; logits (B, m, V) follow each node's own path.
        """
        batch, m = input_ids.shape
        window = sliding_window(model)
        if self.dense and parents is None and input_valid is None:
            # Every slot valid and a plain chain: the model's own causal path is exact (its sliding-window masks
            # too: every layer of this cache keeps every token, and the window is applied by position).
            out = model(input_ids=input_ids, past_key_values=self.cache, use_cache=True, **kwargs)
            self.valid = torch.cat([self.valid, torch.ones_like(input_ids, dtype=torch.bool)], dim=1)
            return out
        if input_valid is None:
            input_valid = torch.ones_like(input_ids, dtype=torch.bool)
        if parents is None:
            parents = torch.arange(-1, m - 1, device=input_ids.device).expand(batch, m)
        mask, position_ids = block_attention(self.valid, parents, input_valid, next(model.parameters()).dtype)
        out = model(
            input_ids=input_ids,
            attention_mask=layer_masks(model, mask, self.valid, position_ids, window),
            position_ids=position_ids,
            past_key_values=self.cache,
            use_cache=True,
            **kwargs,
        )
        self.valid = torch.cat([self.valid, input_valid], dim=1)
        self.dense = self.dense and bool(input_valid.all())  # host sync, only off the fast path
        return out

    def feed(self, model, rows: list[list[int]], **kwargs):
        """Forward ragged per-row token lists, left-padded so column −1 is each row's last token."""
        width = max(len(r) for r in rows)
        device = self.valid.device
        if all(len(r) == width for r in rows):
            return self.forward(model, torch.tensor(rows, device=device), **kwargs)
        ids = torch.zeros(len(rows), width, dtype=torch.long)
        valid = torch.zeros(len(rows), width, dtype=torch.bool)
        for i, r in enumerate(rows):
            if r:
                ids[i, width - len(r) :] = torch.tensor(r)
                valid[i, width - len(r) :] = True
        return self.forward(model, ids.to(device), input_valid=valid.to(device), **kwargs)

    def rollback(self, num_valid: list[int]) -> None:
        """Keep each row's first num_valid[b] valid slots; the rest become invalid."""
        if self.dense and len(set(num_valid)) == 1:  # one row, or rows in step: a crop
            self._truncate(num_valid[0])
            return
        self.valid &= self.valid.cumsum(1) <= torch.tensor(num_valid, device=self.valid.device)[:, None]
        self._crop()

    def keep_last(self, kept: list[list[int]], width: int) -> None:
        """Keep, per row, these indices (ascending) of the last `width` slots, moved to the block's front."""
        start = self.valid.shape[1] - width
        if self.dense and all(k == list(range(len(kept[0]))) for k in kept):  # chains: kept is a prefix
            self._truncate(start + len(kept[0]))
            return
        order = keep_first(kept, width, self.valid.device)  # (B, width)
        for layer in self.cache.layers:
            # (B, heads, width, d)
            idx = order[:, None, :, None].expand(-1, layer.keys.shape[1], -1, layer.keys.shape[3])
            layer.keys = torch.cat([layer.keys[:, :, :start], layer.keys[:, :, start:].gather(2, idx)], dim=2)
            layer.values = torch.cat([layer.values[:, :, :start], layer.values[:, :, start:].gather(2, idx)], dim=2)
        counts = torch.tensor([len(k) for k in kept], device=self.valid.device)
        block = self.valid[:, start:].gather(1, order) & (torch.arange(width, device=order.device) < counts[:, None])
        self.valid = torch.cat([self.valid[:, :start], block], dim=1)
        self._crop()

    def _truncate(self, length: int) -> None:
        truncate(self.cache, length)
        self.valid = self.valid[:, :length]

    def _crop(self) -> None:
        """Drop trailing columns that are invalid in every row."""
        used = self.valid.any(0).nonzero()  # host sync
        self._truncate(int(used[-1]) + 1 if len(used) else 0)
        self.dense = bool(self.valid.all())  # host sync
