"""The acceptance and speed figures, defined once (see ARCHITECTURE: Metrics)."""

from __future__ import annotations


def summarize(accept_counts: list[int], gamma: int, new_tokens: int, target_forwards: int) -> dict:
    """τ, α and per-position acceptance from per-step accepted counts.

    τ = tokens generated / target verification forwards (bonus included; plain decoding = 1).
    α = accepted draft tokens / proposed draft tokens.
    per_position[i] = share of steps that accepted at least i+1 draft tokens.
    """
    steps = len(accept_counts)
    accepted = sum(accept_counts)
    return {
        "tau": new_tokens / target_forwards if target_forwards else 0.0,
        "alpha": accepted / (steps * gamma) if steps else 0.0,
        "per_position_acceptance": [sum(c > i for c in accept_counts) / steps if steps else 0.0 for i in range(gamma)],
        "steps": steps,
    }


def predicted_speedup(alpha: float, gamma: int, cost_ratio: float) -> float:
    """(1 − α^(γ+1)) / ((1 − α)(γc + 1)) — Leviathan et al. 2023, eq. for expected walltime gain."""
    if alpha >= 1.0:
        return (gamma + 1) / (gamma * cost_ratio + 1)
    return (1 - alpha ** (gamma + 1)) / ((1 - alpha) * (gamma * cost_ratio + 1))
