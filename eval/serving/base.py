"""What every served check shares, whichever engine serves: the figures from an engine's spec-decode counts,
the verdict comparing them (and its outputs) with drafthub's own engine, and the served speed-up."""

from __future__ import annotations

from typing import Callable, Optional

import torch

from eval.timing import repeat_drift, speedup_spread, timing_verdict

# A served τ past the tolerance is judged broken only when the gap is at least this many accepted drafts: a near-tie
# or two that the engine's numerics resolve the other way move a small sample past it (4 prompts, 46 drafts: 6.9 %
# apart, 3 drafts, for an export 32 prompts judged ok).
MIN_ACCEPTED_GAP = 5


def served_figures(
    num_drafts: int, accepted: int, accepted_per_pos: list[int], gamma: int, draft_tokens: Optional[int] = None
) -> dict:
    """τ, α and per-position acceptance from an engine's spec-decode counters (same definitions as ours).

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


def ours_section(ours: dict) -> dict:
    """Our figures for the served section, τ counted as engines count it (1 + Σ per-position acceptance): our report's
    τ (tokens kept per forward) also loses the drafts accepted past max_new_tokens, which engines' counters keep."""
    return {
        "tau": 1 + sum(ours["per_position_acceptance"]),
        "tau_tokens_per_forward": ours["tau"],
        "per_position_acceptance": ours["per_position_acceptance"],
        "speedup": ours["speedup"],
        "speedup_spread": {k: v for k, v in ours["speedup_spread"].items() if k != "per_prompt"},
    }


def verdict(
    our_tau: float,
    served_tau: float,
    equal_prompts: int,
    num_prompts: int,
    tolerance: float,
    *,
    engine: str = "vLLM",
    rule_difference: Optional[str] = None,
    drafts: Optional[int] = None,
) -> tuple[str, str]:
    """('ok' | 'broken', reason). rule_difference: the engine drafts by another rule than ours (stated), so its τ
    is reported beside ours and only its outputs are judged. drafts: the engine's drafting steps; below
    MIN_DRAFTS_TO_JUDGE its τ is too noisy to hold to the tolerance, so only the outputs are judged and the reason
    says so."""
    gap = abs(served_tau - our_tau) / our_tau
    if equal_prompts < num_prompts:
        return (
            "broken",
            f"{engine}'s output differed from the target's greedy output on {num_prompts - equal_prompts} "
            f"of {num_prompts} prompts",
        )
    if rule_difference:
        return (
            "ok",
            f"outputs equal on {equal_prompts}/{num_prompts}; served τ {served_tau:.3f} vs ours {our_tau:.3f} not "
            f"compared: {rule_difference}",
        )
    if gap > tolerance and drafts is not None and abs(served_tau - our_tau) * drafts < MIN_ACCEPTED_GAP:
        return (
            "ok",
            f"outputs equal on {equal_prompts}/{num_prompts}; served τ {served_tau:.3f} vs ours {our_tau:.3f} "
            f"({gap:.1%} apart) not judged: {abs(served_tau - our_tau) * drafts:.1f} accepted drafts of {drafts}, "
            f"too few to tell from near-ties (the rule: at least {MIN_ACCEPTED_GAP}); raise eval.num_prompts",
        )
    if gap > tolerance:
        return (
            "broken",
            f"served τ {served_tau:.3f} vs ours {our_tau:.3f} ({gap:.1%} apart, tolerance {tolerance:.0%}): "
            f"{engine} does not run this export as we do",
        )
    return (
        "ok",
        f"served τ {served_tau:.3f} vs ours {our_tau:.3f} ({gap:.1%} apart, tolerance {tolerance:.0%}); "
        f"outputs equal on {equal_prompts}/{num_prompts}",
    )


def served_speed(spec_engine, base_engine, requests: list, timed: Callable, *, repeats: int, cfg) -> dict:
    """An engine with the drafter vs the same engine without it: tokens/s both ways, the speed-up, its spread and
    noise flag. timed(engine, request) → (tokens generated, seconds), one request alone.

    Each prompt is sent alone (batch 1, as our engine's eval decodes), to one engine then the other,
    the order alternating per prompt and repeat, so that drift on the machine hits both sides alike.
    """
    spec_runs = [[0, 0.0] for _ in requests]
    base_runs = [[[0, 0.0] for _ in requests] for _ in range(repeats)]
    for r in range(repeats):
        for i, request in enumerate(requests):
            engines = [("spec", spec_engine), ("base", base_engine)]
            for side, engine in engines if (r + i) % 2 == 0 else engines[::-1]:
                tokens, seconds = timed(engine, request)
                run = spec_runs[i] if side == "spec" else base_runs[r][i]
                run[0] += tokens
                run[1] += seconds
    base_tokens = [sum(base_runs[r][i][0] for r in range(repeats)) for i in range(len(requests))]
    base_seconds = [sum(base_runs[r][i][1] for r in range(repeats)) for i in range(len(requests))]
    spec_tokens, spec_seconds = [t for t, _ in spec_runs], [s for _, s in spec_runs]
    tps = {
        "speculative": sum(spec_tokens) / sum(spec_seconds),
        "no_speculation": sum(base_tokens) / sum(base_seconds),
    }
    speedup = tps["speculative"] / tps["no_speculation"]
    spread = speedup_spread(spec_tokens, spec_seconds, base_tokens, base_seconds)
    first, last = base_runs[0], base_runs[-1]
    drift = repeat_drift(*zip(*first), *zip(*last)) if repeats > 1 else 0.0
    return {
        "speedup": speedup,
        "speedup_spread": spread,
        "tokens_per_second": tps,
        "speed_repeats": repeats,
        "timing": timing_verdict(
            drift,
            spread,
            speedup,
            drift_tolerance=cfg.timing_drift_tolerance,
            max_interval=cfg.timing_max_interval,
            device=torch.device("cuda" if torch.cuda.is_available() else "cpu"),
        ),
    }
