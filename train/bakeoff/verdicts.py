"""A bake-off's verdicts: each contender's row of figures, the recommendation (the fastest lossless, ties to the
cheaper), whether training paid against the best training-free contender, and a verdict per category."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from heads.card import speedup_text


def contender_row(name: str, run_dir: Path, train: dict, report: dict) -> dict:
    served = report.get("served") or {}
    return {
        "recipe": name,
        "kind": report["kind"],
        "tau": report["tau"],
        "alpha": report["alpha"],
        "speedup": report["speedup"],
        "speedup_spread": report.get("speedup_spread"),
        "served_speedup": served.get("speedup"),
        "served_speedup_spread": served.get("speedup_spread"),
        "cost_ratio": report["cost_ratio"],
        "gamma": report["settings"]["num_speculative_tokens"],  # a contender's own override may differ
        # τ at which it would pay on this path: verifying γ + 1 tokens plus drafting, in plain steps (v + γ·c)
        "break_even_tau": _break_even_tau(report),
        # the decoding alone (prefills apart) and what τ / (v + γ·c) predicts for it: their gap is the engine's
        "verify_cost": report.get("verify_cost"),
        "decode_speedup": report.get("decode_speedup"),
        "predicted_speedup_from_tau": report.get("predicted_speedup_from_tau"),
        "draft_forwards_per_step": report["draft_forwards_per_step"],
        "lossless": report["lossless"],
        "parameters": train["parameters"],
        "train_seconds": train["seconds"],
        "trained": _trained(train),
        "training_data": train.get("training_data"),
        "served_tau": served.get("tau"),
        "served_ours_tau": (served.get("ours") or {}).get("tau"),
        "served_verdict": served.get("verdict"),
        "break_even": (report.get("serving_load") or {}).get("break_even"),  # eval.serve_load: None = not swept
        "categories": {
            name: {key: figures.get(key) for key in _PER_CATEGORY} for name, figures in report["categories"].items()
        },
        "run_dir": str(run_dir),
    }


def _break_even_tau(report: dict) -> Optional[float]:
    v, drafting = report.get("verify_cost"), report.get("draft_cost_per_step")
    return None if v is None or drafting is None else v + drafting


_PER_CATEGORY = ("prompts", "tau", "alpha", "speedup", "speedup_spread")  # a contender's figures on one category


def category_verdicts(rows: list[dict], tie: float = 0.03) -> dict:
    """Per prompt category of the workload (MT-Bench's eight, HumanEval; {} with fewer than two), the drafter
    `recommend` picks from the contenders' figures on that category's prompts alone."""
    names = list(dict.fromkeys(name for r in rows for name in r.get("categories") or {}))
    if len(names) < 2:
        return {}
    return {
        name: recommend([{**r, **r["categories"][name]} for r in rows if name in (r.get("categories") or {})], tie)
        for name in names
    }


def _trained(train: dict) -> bool:
    """Whether the train stage fitted weights. Free: prompt lookup, suffix decoding, lookahead (no train stage)
    and a layer skip set found by search alone (0 optimizer steps). Summaries written before the step count
    was recorded all come from trainings that fitted weights."""
    return "skipped" not in train and train.get("optimizer_steps", 1) > 0


def free_vs_trained(rows: list[dict], tie: float = 0.03) -> dict | None:
    """Whether the best trained drafter beats the best free one (lossless rows, by measured speed-up; within
    `tie` of each other the speed-ups count as equal, as in `recommend`)."""
    lossless = [r for r in rows if r["lossless"]]
    free = max((r for r in lossless if not r["trained"]), key=lambda r: r["speedup"], default=None)
    trained = max((r for r in lossless if r["trained"]), key=lambda r: r["speedup"], default=None)
    if free is None or trained is None:
        return None
    gain = trained["speedup"] / free["speedup"]  # > 1: training paid off
    return {
        "best_free": free["recipe"],
        "best_trained": trained["recipe"],
        "outcome": "trained" if gain > 1 + tie else ("free" if gain < 1 / (1 + tie) else "tie"),
        "speedup_gain": gain,
        "tau_gain": trained["tau"] - free["tau"],
        "tie": tie,
    }


def recommend(rows: list[dict], tie: float = 0.03) -> dict | None:
    """The drafter to publish: lossless, served check (if any) agreed, fastest — where speed-ups
    within `tie` (relative) of the best count as equal, the higher τ wins, since τ carries over
    to other hardware and a wall-clock speed-up measured on a busy CPU does not exactly."""
    eligible = [r for r in rows if r["lossless"] and r["served_verdict"] in (None, "ok")]
    if not eligible:
        return None
    fastest = max(r["speedup"] for r in eligible)
    tied = [r for r in eligible if r["speedup"] >= fastest * (1 - tie)]
    best = max(tied, key=lambda r: (r["tau"], r["speedup"]))
    why = (
        f"highest measured speed-up ({best['speedup']:.2f}×)"
        if len(tied) == 1
        else f"speed-up {best['speedup']:.2f}×, within {tie:.0%} of the fastest ({fastest:.2f}×), "
        f"and the highest τ ({best['tau']:.2f}) of the {len(tied)} that close"
    )
    load = best.get("break_even")
    holds = (
        f"; served under load it {load['verdict']}"
        if load
        else "; measured one request at a time (eval.serve_load=[1, 4, 16] measures it under load)"
    )
    return {
        "recipe": best["recipe"],
        "kind": best["kind"],
        "reason": why
        + " among lossless contenders"
        + (" whose served check agreed" if best["served_verdict"] else "")
        + holds,
    }


def published_line(best: dict, rows: list[dict], drafter: Path) -> str:
    """`[eval] published: <family> τ …, speed-up … (lossless …); EAGLE-3 τ … after N tokens (break-even …)`: the
    winner, and what the best trained contender reached (its τ against the τ at which it would pay)."""
    lossless = "lossless" if best["lossless"] else "NOT lossless"
    line = f"[eval] published: {best['kind']} τ {best['tau']:.2f}, speed-up {speedup_text(best)} ({lossless})"
    trained = [r for r in rows if r["trained"] and r is not best]
    if trained:
        r = max(trained, key=lambda row: row["speedup"])
        seen = (r.get("training_data") or {}).get("answer_tokens_seen")
        count = f"{seen / 1000:.0f}k" if seen and seen >= 10_000 else str(seen)
        after = f" after {count} answer tokens" if seen is not None else ""
        even = f" (break-even τ ≈ {r['break_even_tau']:.2f}: train/README.md)" if r.get("break_even_tau") else ""
        line += f"; {r['kind']} τ {r['tau']:.2f}, {r['speedup']:.2f}×{after}{even}"
    return f"{line}; drafter: {drafter}"
