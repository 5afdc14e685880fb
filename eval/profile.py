"""The acceptance profile that travels beside the weights (`speculation_profile.json`), for schedulers and simulators.

Its shape follows the one proposed for NVIDIA ModelOpt's exported draft checkpoints (schema_version "1.0",
NVIDIA/Model-Optimizer PRs 2247/2313): per-position acceptance both ways — conditional (draft i+1 accepted given the
first i were) and marginal (the first i+1 all accepted) — the mean acceptance length (bonus token included, per
decode step), the acceptance length at every γ measured, and the conditions. drafthub adds what its figures are
bound to: the prompts' digest and the report's own, and the served acceptance per concurrency where a load sweep
ran. It is built from the eval report (so the report's figures digest binds it) and written beside the report
(eval/report.py) and into the export with drafthub.json (heads/families write_provenance).
"""

from __future__ import annotations

import hashlib
import json

SCHEMA_VERSION = "1.0"
CONSISTENCY_TOLERANCE = 0.02  # |mean acceptance length − (1 + Σ marginal)|, as the ModelOpt check allows


def prompts_digest(prompts: list[list[int]]) -> str:
    """sha256 of the measured prompts' token ids: which prompts the figures hold for."""
    return hashlib.sha256(json.dumps(prompts, separators=(",", ":")).encode()).hexdigest()


def conditional_rates(marginal: list[float]) -> list[float]:
    """P(draft i+1 accepted | the first i accepted) = marginal[i] ÷ marginal[i−1] (0 past a position never reached)."""
    out, previous = [], 1.0
    for m in marginal:
        out.append(m / previous if previous > 0 else 0.0)
        previous = m
    return out


def _validation(mean_length: float, marginal: list[float]) -> dict:
    implied = 1 + sum(marginal)
    violations = [
        {"position": i, "value": m, "previous": marginal[i - 1]}
        for i, m in enumerate(marginal)
        if i and m > marginal[i - 1] + 1e-9
    ]
    return {
        "mean_consistency": {
            "implied_mean_accept_length": implied,
            "reported_mean_accept_length": mean_length,
            "abs_delta": abs(implied - mean_length),
            "tolerance": CONSISTENCY_TOLERANCE,
            "passed": abs(implied - mean_length) <= CONSISTENCY_TOLERANCE,
        },
        "marginal_monotonicity": {"passed": not violations, "violations": violations},
    }


def speculation_profile(report: dict, prompts: list[list[int]]) -> dict:
    """The profile of a finished report (its figures at γ, its γ sweep, its load sweep if any)."""
    s = report["settings"]
    gamma = s["num_speculative_tokens"]
    marginal = [round(a, 6) for a in report["per_position_acceptance"]]
    tree = s["tree"] is not None
    mean_length = 1 + sum(report["per_position_acceptance"])  # per decode step, counted as engines count it
    by_k = {
        str(row["num_speculative_tokens"]): round(1 + sum(row["per_position_acceptance"]), 6)
        for row in report["gamma_sweep"]
    }
    load = report.get("serving_load")
    return {
        "schema_version": SCHEMA_VERSION,
        "measured": True,
        "producer": "drafthub eval",
        "method": report.get("kind"),  # evaluate() called directly may name no export (a drafter in memory)
        "draft_checkpoint": {"export_sha256": report.get("export_sha256")},
        "target_model": {"name_or_path": report.get("target")},
        "num_speculative_tokens": None if tree else gamma,
        "block_size": None,
        "max_supported_k": None if tree else gamma,
        "verification_method": "tree" if tree else "longest_prefix",
        "conditional_accept_rates": None if tree else [round(c, 6) for c in conditional_rates(marginal)],
        "marginal_accept_rates": None if tree else marginal,
        "vectors_unavailable_reason": "tree verification: acceptance is per depth of the accepted path"
        if tree
        else None,
        "mean_accept_length": round(mean_length, 6),
        "accept_length_model": "measured_per_k",
        "accept_length_by_k": by_k or ({} if tree else {str(gamma): round(mean_length, 6)}),
        "per_category": {k: v["tau"] for k, v in report["categories"].items()} or None,
        "measurement_conditions": {
            "engine": "drafthub (our speculative loop, one request at a time)",
            "concurrency": 1,
            "num_prompts": s["num_prompts"],
            "max_new_tokens": s["max_new_tokens"],
            "temperature": s["temperature"],
            "prompts_sha256": prompts_digest(prompts),
            "device": report["timing"]["device_name"],
        },
        "served_by_concurrency": None
        if not load
        else {
            str(level["concurrency"]): {
                "mean_accept_length": level["served_tau"],
                "marginal_accept_rates": level["served_per_position_acceptance"],
            }
            for level in load["levels"]
        },
        "validation": None if tree else _validation(mean_length, marginal),
    }
