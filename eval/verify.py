"""Verification rules: which draft tokens the target accepts, and the token that follows.

Exact rejection sampling (Leviathan et al. 2023, "Fast Inference from Transformers via
Speculative Decoding"; Chen et al. 2023) keeps the output distribution exactly the target's.
"""

from __future__ import annotations

import torch


def greedy_verify(target_logits: torch.Tensor, draft_tokens: torch.Tensor) -> tuple[int, int]:
    """Accept the longest prefix of draft tokens equal to the target's argmax.

    Args:
        target_logits: (γ+1, V) target logits at the positions predicting each draft token and
            the one after the last.
        draft_tokens: (γ,) proposed tokens.
    Returns:
        (num_accepted, next_token): next_token is the target's argmax after the accepted prefix.
    """
    target_tokens = target_logits.argmax(-1)  # (γ+1,)
    matches = (target_tokens[:-1] == draft_tokens).int()
    num_accepted = int(matches.cumprod(0).sum())  # host sync: one per step
    return num_accepted, int(target_tokens[num_accepted])  # host sync


def rejection_sample(
    target_probs: torch.Tensor,
    draft_probs: torch.Tensor,
    draft_tokens: torch.Tensor,
    generator: torch.Generator | None = None,
) -> tuple[int, int]:
    """Exact speculative sampling over a chain.

    Accept draft token i with probability min(1, p_i(x_i) / q_i(x_i)); at the first rejection
    sample from norm(max(0, p_i − q_i)); when all γ are accepted sample the bonus from p_γ.

    Args:
        target_probs: (γ+1, V) p at each draft position and one past the last.
        draft_probs: (γ, V) q the draft tokens were sampled from.
        draft_tokens: (γ,)
        generator: optional RNG for reproducible draws (on the probs' device).
    Returns:
        (num_accepted, next_token)
    """
    gamma = draft_tokens.shape[0]
    idx = torch.arange(gamma, device=draft_tokens.device)
    p = target_probs[idx, draft_tokens]  # (γ,)
    q = draft_probs[idx, draft_tokens]  # (γ,)
    u = torch.rand(gamma, generator=generator, device=p.device)
    accepted = (u * q < p).int()  # u < p/q without dividing by a zero q
    num_accepted = int(accepted.cumprod(0).sum())  # host sync: one per step
    if num_accepted < gamma:
        residual = (target_probs[num_accepted] - draft_probs[num_accepted]).clamp_min(0)
        total = residual.sum()
        # p == q leaves no residual mass; then rejection had probability 0 and p is exact.
        dist = residual / total if total > 0 else target_probs[num_accepted]
    else:
        dist = target_probs[gamma]
    next_token = int(torch.multinomial(dist, 1, generator=generator))  # host sync
    return num_accepted, next_token
