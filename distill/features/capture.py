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

from heads.target_features import last_layer_output, select_layers


@torch.no_grad()
def final_hidden_states(
    target, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """The target's lm_head inputs and logits.

    Returns:
        hidden (B, T, H), logits (B, T, V).
    """
    with lm_head_input(target) as captured:
        logits = target(input_ids=input_ids, attention_mask=attention_mask, use_cache=False).logits
    return captured[0], logits


@contextmanager
def lm_head_input(target, logits: bool = True) -> Iterator[list[torch.Tensor]]:
    """A list that receives what the target's lm_head reads, in each forward inside the block.

    logits=False: the lm_head then runs on the last position alone (its logits are not wanted: over SmolLM2's 49k
    vocabulary at every position it is a fifth of the forward)."""
    captured: list[torch.Tensor] = []

    def capture(module, args):
        captured.append(args[0])
        return None if logits else (args[0][..., -1:, :], *args[1:])

    hook = target.get_output_embeddings().register_forward_pre_hook(capture)
    try:
        yield captured
    finally:
        hook.remove()


@torch.no_grad()
def layer_and_final_features(
    target, input_ids: torch.Tensor, attention_mask: torch.Tensor | None, layer_ids: tuple[int, ...] | list[int]
) -> tuple[torch.Tensor, torch.Tensor]:
    """layer_features and the lm_head inputs of final_hidden_states from one forward (offline features store both;
    two forwards made writing them take twice as long); no logits, so the lm_head does not run over every position."""
    with lm_head_input(target, logits=False) as captured:
        features, _ = layer_features(target, input_ids, attention_mask, layer_ids)
    return features, captured[0]


@torch.no_grad()
def layer_features(
    target, input_ids: torch.Tensor, attention_mask: torch.Tensor | None, layer_ids: tuple[int, ...] | list[int]
) -> tuple[torch.Tensor, torch.Tensor]:
    """The target's hidden states at `layer_ids`, concatenated, and its logits.

    Ids follow heads.target_features (id N = the last layer's output before the final norm).

    Returns:
        features (B, T, len(layer_ids)·H), logits (B, T, V).
    """
    with last_layer_output(target, layer_ids) as final:
        out = target(input_ids=input_ids, attention_mask=attention_mask, output_hidden_states=True, use_cache=False)
    return select_layers(out.hidden_states, final, layer_ids), out.logits
