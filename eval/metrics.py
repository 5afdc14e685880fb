"""The acceptance and speed figures, defined once (see ARCHITECTURE: Metrics)."""

from __future__ import annotations


def summarize(accept_counts: list[int], gamma: int, new_tokens: int) -> dict:
    """τ, α and per-position acceptance from accepted counts, one per step of each row.

    τ = tokens generated / target verification forwards per row (bonus included; plain decoding = 1).
    α = accepted draft tokens / proposed draft tokens (chains; for trees γ is the tree depth).
    per_position[i] = share of steps that accepted at least i+1 draft tokens.
    """
    steps = len(accept_counts)
    accepted = sum(accept_counts)
    return {
        "tau": new_tokens / steps if steps else 0.0,
        "alpha": accepted / (steps * gamma) if steps else 0.0,
        "per_position_acceptance": [sum(c > i for c in accept_counts) / steps if steps else 0.0 for i in range(gamma)],
        "steps": steps,
    }


def predicted_speedup(alpha: float, gamma: int, cost_ratio: float) -> float:
    """(1 − α^(γ+1)) / ((1 − α)(γc + 1)) — Leviathan et al. 2023, eq. for expected walltime gain."""
    if alpha >= 1.0:
        return (gamma + 1) / (gamma * cost_ratio + 1)
    return (1 - alpha ** (gamma + 1)) / ((1 - alpha) * (gamma * cost_ratio + 1))


def predicted_speedup_from_tau(tau: float, draft_cost_per_step: float) -> float:
    """τ / (draft time per step ÷ target time per forward + 1).

    The speed-up the measured τ buys if drafting and the verification forward were the only
    costs and a verification forward cost what one decoding forward costs. Unlike Leviathan's
    formula it needs no i.i.d. acceptance, so its gap to the measured speed-up is the engine's
    overhead plus the extra cost of verifying γ+1 tokens at once.
    """
    return tau / (draft_cost_per_step + 1)
