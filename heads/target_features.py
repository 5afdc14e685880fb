"""The target-feature convention every feature-level drafter is trained, measured and served under.

Layer ids are HF `output_hidden_states` indices: id k < N (N = decoder layers) is the residual
stream entering decoder layer k (hidden_states[0] = embeddings); id N is the last layer's output
*before* the final norm, as vLLM and SGLang capture it (HF's own hidden_states[N] is after the
norm). Id −1 names the final normed state the lm_head reads (Medusa, EAGLE-1). distill (training
features, offline shards) and eval (the engine's verification forward) both read features here,
so a drafter sees the same vectors in training, in our engine and in vLLM.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator, Sequence

import torch

FINAL_NORMED = -1  # the lm_head's input


@contextmanager
def last_layer_output(target, layer_ids: Sequence[int]) -> Iterator[list[torch.Tensor]]:
    """Capture the last decoder layer's output (before the final norm) while id N is among layer_ids."""
    captured: list[torch.Tensor] = []
    if target.config.num_hidden_layers not in layer_ids:
        yield captured
        return
    last = target.get_decoder().layers[-1]
    hook = last.register_forward_hook(
        lambda module, args, out: captured.append(out[0] if isinstance(out, tuple) else out)
    )
    try:
        yield captured
    finally:
        hook.remove()


def select_layers(
    hidden_states: Sequence[torch.Tensor], final: list[torch.Tensor], layer_ids: Sequence[int]
) -> torch.Tensor:
    """Concatenate the states at `layer_ids` (B, T, len·H) from HF hidden_states and the captured output of id N."""
    n = len(hidden_states) - 1
    return torch.cat([final[0] if (i == n and final) else hidden_states[i] for i in layer_ids], dim=-1)


def default_eagle3_layers(num_hidden_layers: int) -> list[int]:
    """EAGLE-3's low/mid/high fusion: [2, N//2, N−3]."""
    return [2, num_hidden_layers // 2, num_hidden_layers - 3]
