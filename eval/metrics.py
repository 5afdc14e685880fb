"""The acceptance and speed figures, defined once (see ARCHITECTURE: Metrics)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from eval.speculative import DecodeStats


def summarize(accept_counts: list[int], gamma: int, new_tokens: int, draft_counts: Optional[list[int]] = None) -> dict:
    """τ, α and per-position acceptance from accepted counts, one per step of each row.

    draft_counts: real draft tokens of those same steps (a chain drafter that may propose fewer
        than γ, e.g. n-gram lookup); None = γ at every step (for trees γ is the tree depth).

    τ = tokens generated / target verification forwards per row (bonus included; plain decoding = 1).
    α = accepted draft tokens / proposed draft tokens.
    per_position[i] = share of drafting steps (≥ 1 draft token) that accepted at least i+1 draft
        tokens — vLLM's accepted_per_pos / num_drafts, since vLLM counts a draft only where a request
        was given draft tokens. When every step drafts (every drafter but n-gram) it is the share of
        all steps, and 1 + Σ per_position = 1 + accepted / drafting steps is vLLM's served τ.
    """
    steps = len(accept_counts)
    draft_counts = [gamma] * steps if draft_counts is None else draft_counts
    accepted, proposed = sum(accept_counts), sum(draft_counts)
    drafted = [c for c, n in zip(accept_counts, draft_counts) if n > 0]  # accept counts of drafting steps
    per_position = [sum(c > i for c in drafted) / len(drafted) if drafted else 0.0 for i in range(gamma)]
    return {
        "tau": new_tokens / steps if steps else 0.0,
        "alpha": accepted / proposed if proposed else 0.0,
        "per_position_acceptance": per_position,
        "steps": steps,
        "drafting_steps": len(drafted),  # vLLM's num_drafts
        "proposed_draft_tokens": proposed,  # vLLM's num_draft_tokens
        "accepted_draft_tokens": accepted,  # vLLM's num_accepted_tokens
    }


def predicted_speedup(alpha: float, gamma: int, cost_ratio: float, verify_cost: float = 1.0) -> float:
    """(1 − α^(γ+1)) / ((1 − α)(γc + v)) — Leviathan et al. 2023's expected walltime gain, with c (one draft) and
    v (verifying γ + 1 tokens) both relative to a plain step; the paper takes v = 1."""
    if alpha >= 1.0:
        return (gamma + 1) / (gamma * cost_ratio + verify_cost)
    return (1 - alpha ** (gamma + 1)) / ((1 - alpha) * (gamma * cost_ratio + verify_cost))


def predicted_speedup_from_tau(tau: float, draft_cost_per_step: float, verify_cost: float = 1.0) -> float:
    """τ / (v + drafting time per step ÷ a plain step), v = a verification forward ÷ a plain step.

    The speed-up the measured τ buys if drafting and verifying were the only costs. Unlike Leviathan's formula
    it needs no i.i.d. acceptance, so its gap to the measured decode speed-up (prefills apart) is the engine's own
    overhead (accepting, the cache, the loop). A verify of γ + 1 tokens costs 1.8× a plain step on a CPU's dynamic
    path and about one on the compiled static path: pricing it as free predicted 1.11× where 0.57× was measured.
    """
    return tau / (draft_cost_per_step + verify_cost)


@dataclass
class Tally:
    """Everything measured for one γ across all prompts."""

    stats: DecodeStats = field(default_factory=DecodeStats)
    seconds: float = 0.0
    tokens: int = 0
    equal_rows: int = 0
    outputs: list = field(default_factory=list)


def add_block_cost(sweep: list[dict]) -> None:
    """Each sweep row's drafting time per step relative to the γ = 1 row's (one drafted token), in place.

    ≈ γ for a drafter that runs one forward per token; ≈ 1 for one that drafts the whole block in one
    forward. Absent when the sweep has no γ = 1 row (trees, or a sweep without it)."""
    one = next((row for row in sweep if row.get("num_speculative_tokens") == 1), None)
    if one is None or not one["seconds_per_step"]["draft"]:
        return
    for row in sweep:
        row["block_cost"] = row["seconds_per_step"]["draft"] / one["seconds_per_step"]["draft"]


def decode_figures(tally: Tally, ar: Tally, depth: int, is_chain: bool) -> dict:
    """Acceptance, speed and the cost model for one γ (ARCHITECTURE: Metrics)."""
    s = tally.stats
    # Chains count their real drafts (fewer than γ for n-gram lookup); trees keep γ = their depth.
    summary = summarize(s.accept_counts, depth, tally.tokens, s.draft_counts if is_chain else None)
    target_per_forward = s.target_seconds / s.target_forwards
    # Per batch step on both sides. With no draft token at all (n-gram lookup that never matched) it is
    # 0, and the predicted speed-up is plain decoding's 1.
    cost_ratio = (s.draft_seconds / s.proposed_tokens) / target_per_forward if s.proposed_tokens else 0.0
    draft_per_step = s.draft_seconds / s.target_forwards
    # A plain decoding step on the same path, its prefill apart (a baseline timed before prefills were: included).
    # Both sides pay the prompts' prefill: it is priced apart, as the share of plain decoding's time it takes.
    ar_prefill = ar.stats.prefill_seconds
    plain_step = (ar.seconds - ar_prefill) / ar.tokens
    verify_cost, draft_cost = target_per_forward / plain_step, draft_per_step / plain_step
    from_tau = predicted_speedup_from_tau(summary["tau"], draft_cost, verify_cost)
    prefill_share = ar_prefill / ar.seconds
    return {
        "tau": summary["tau"],
        "alpha": summary["alpha"],
        "per_position_acceptance": summary["per_position_acceptance"],
        "speedup": (tally.tokens / tally.seconds) / (ar.tokens / ar.seconds),  # end to end: what a user waits
        # the decoding alone, each side's prefill apart: what τ / (v + γ·c) predicts
        "decode_speedup": tally.tokens / (tally.seconds - s.prefill_seconds) * plain_step,
        "prefill_share": prefill_share,  # of plain decoding's time: it bounds the end-to-end speed-up
        # Leviathan et al.'s formula assumes i.i.d. acceptance over a chain; it has no meaning for trees.
        "predicted_speedup": (
            predicted_speedup(summary["alpha"], depth, cost_ratio * verify_cost, verify_cost) if is_chain else None
        ),
        "predicted_speedup_from_tau": from_tau,
        # the same with the prefill both sides pay: 1 / (p + (1 − p) / (τ / (v + γ·c))), p its share
        "predicted_speedup_end_to_end": 1 / (prefill_share + (1 - prefill_share) / from_tau) if from_tau else 0.0,
        "cost_ratio": cost_ratio,
        "verify_cost": verify_cost,  # v: a verification forward (γ + 1 tokens) ÷ a plain step
        "draft_cost_per_step": draft_cost,  # γ·c: drafting time per step ÷ a plain step
        "draft_tokens_per_step": s.proposed_tokens / s.target_forwards,  # γ for chains, the node count for trees
        # γ for sequential chains, 1 for a block drafted in one forward (PARD, P-EAGLE, DFlash), 0 for lookups
        "draft_forwards_per_step": s.draft_forwards / s.target_forwards,
        "tokens_per_second": tally.tokens / tally.seconds,
        "seconds_per_step": {
            "draft": draft_per_step,
            "target_forward": target_per_forward,
            "verify_and_cache": s.verify_seconds / s.target_forwards,
            # the prompts' forward, which plain decoding pays too: it bounds the speed-up of short answers
            "prefill": s.prefill_seconds / s.target_forwards,
            "other": tally.seconds / s.target_forwards
            - (s.draft_seconds + s.target_seconds + s.verify_seconds + s.prefill_seconds) / s.target_forwards,
        },
        "steps": summary["steps"],
        # vLLM's spec-decode counters, counted the same way (a step with no draft token is no draft):
        "drafting_steps": summary["drafting_steps"],
        "proposed_draft_tokens": summary["proposed_draft_tokens"],
        "accepted_draft_tokens": summary["accepted_draft_tokens"],
    }
