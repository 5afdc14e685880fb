"""Target signals for feature-level drafters, captured from any transformers causal LM.

`final_hidden_states` hooks the target's output layer, so it returns exactly the vectors the
lm_head reads (after the final norm, whatever the architecture calls it) together with the
target's logits, from one forward and without keeping every layer's hidden states (Medusa).
`layer_features` returns the hidden states at given layer ids (EAGLE-3's low/mid/high fusion).
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

import torch


@torch.no_grad()
def final_hidden_states(target, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """The target's lm_head inputs and logits.

    Returns:
        hidden (B, T, H), logits (B, T, V).
    """
    captured: list[torch.Tensor] = []
    hook = target.get_output_embeddings().register_forward_pre_hook(lambda module, args: captured.append(args[0]))
    try:
        logits = target(input_ids=input_ids, attention_mask=attention_mask, use_cache=False).logits
    finally:
        hook.remove()
    return captured[0], logits


@contextmanager
def last_layer_output(target, wanted: bool) -> Iterator[list[torch.Tensor]]:
    """Capture the last decoder layer's output (the residual stream before the final norm) when wanted."""
    captured: list[torch.Tensor] = []
    if not wanted:
        yield captured
        return
    hook = target.get_decoder().layers[-1].register_forward_hook(lambda module, args, out: captured.append(out[0] if isinstance(out, tuple) else out))
    try:
        yield captured
    finally:
        hook.remove()


@torch.no_grad()
def layer_features(target, input_ids: torch.Tensor, attention_mask: torch.Tensor | None, layer_ids: tuple[int, ...] | list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """The target's hidden states at `layer_ids`, concatenated, and its logits.

    Id k < N (N = decoder layers) is the residual stream entering decoder layer k (HF
    output_hidden_states[k]); id N is the last layer's output *before* the final norm — what
    vLLM and SGLang feed an EAGLE-3 drafter for N (HF's hidden_states[N] is after the norm).

    Returns:
        features (B, T, len(layer_ids)·H), logits (B, T, V).
    """
    N = target.config.num_hidden_layers
    with last_layer_output(target, N in layer_ids) as final:
        out = target(input_ids=input_ids, attention_mask=attention_mask, output_hidden_states=True, use_cache=False)
    return torch.cat([final[0] if k == N else out.hidden_states[k] for k in layer_ids], dim=-1), out.logits
