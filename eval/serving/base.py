"""What every served check shares, whichever engine serves: the figures from an engine's spec-decode counts,
and the verdict comparing them (and its outputs) with drafthub's own engine."""

from __future__ import annotations

from typing import Optional


def served_figures(
    num_drafts: int, accepted: int, accepted_per_pos: list[int], gamma: int, draft_tokens: Optional[int] = None
) -> dict:
    """τ, α and per-position acceptance from vLLM's spec-decode counters (same definitions as ours).

    vLLM counts a draft only for a step that proposed ≥ 1 token (a prompt-lookup step that found no
    match is not a draft), as our per-position acceptance does. α = accepted / proposed draft
    tokens (`draft_tokens`; None = every draft was γ long)."""
    if num_drafts == 0:
        return {"tau": 0.0, "alpha": 0.0, "per_position_acceptance": [0.0] * gamma, "drafts": 0}
    return {
        "tau": 1 + accepted / num_drafts,
        "alpha": accepted / (draft_tokens if draft_tokens is not None else num_drafts * gamma),
        "per_position_acceptance": [a / num_drafts for a in accepted_per_pos[:gamma]],
        "drafts": num_drafts,
    }


def verdict(
    our_tau: float, served_tau: float, equal_prompts: int, num_prompts: int, tolerance: float
) -> tuple[str, str]:
    """('ok' | 'broken', reason)."""
    gap = abs(served_tau - our_tau) / our_tau
    if equal_prompts < num_prompts:
        return (
            "broken",
            f"vLLM's output differed from the target's greedy output on {num_prompts - equal_prompts} "
            f"of {num_prompts} prompts",
        )
    if gap > tolerance:
        return (
            "broken",
            f"served τ {served_tau:.3f} vs ours {our_tau:.3f} ({gap:.1%} apart, tolerance {tolerance:.0%}): "
            "vLLM does not run this export as we do",
        )
    return (
        "ok",
        f"served τ {served_tau:.3f} vs ours {our_tau:.3f} ({gap:.1%} apart, tolerance {tolerance:.0%}); "
        f"outputs equal on {equal_prompts}/{num_prompts}",
    )
