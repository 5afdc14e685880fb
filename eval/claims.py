"""Figures a report may claim: bound to what was measured, and consistent with each other.

A report's figures travel (drafthub.json, the registry index, the model card) away from the run
that measured them. Two checks keep them honest wherever they arrive:

- `figures_digest`: one sha256 over every field of the report, the export's files hash and the
  samples' hash included. Editing a figure, the lossless flag or the served verdict by hand breaks
  it. It is an integrity check, not a signature: someone who recomputes it can forge it, which is
  what re-measuring (train/registry/claim_check.py, `--verify`) is for.
- `inconsistencies`: relations that hold for every honest measurement — α is accepted ÷ proposed,
  per-position acceptance sums to accepted ÷ drafting steps, τ is bounded by the accepted drafts
  and by γ + 1, the speed-ups (ours and served) are the ratios of their throughputs, lossless matches the equal
  samples. An impossible figure (τ > γ + 1, τ 9.9 beside α 0.17) fails here even with a valid digest.
"""

from __future__ import annotations

import hashlib
import json

DIGEST = "figures_sha256"
REL = 1e-6  # float round-off allowed between a figure and the counters it derives from


def figures_digest(report: dict) -> str:
    """sha256 of the report's canonical JSON, its own digest field left out."""
    body = {k: v for k, v in report.items() if k != DIGEST}
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def samples_digest(samples_jsonl: str) -> str:
    return hashlib.sha256(samples_jsonl.encode()).hexdigest()


def _close(a: float, b: float) -> bool:
    return abs(a - b) <= REL * max(1.0, abs(a), abs(b))


def _decode_problems(row: dict, depth: int, num_prompts: int, where: str) -> list[str]:
    """The relations between one decode's figures and its counters (the main one or a γ-sweep row)."""
    out = []
    steps, drafting = row["steps"], row["drafting_steps"]
    proposed, accepted = row["proposed_draft_tokens"], row["accepted_draft_tokens"]
    tau, alpha, per_position = row["tau"], row["alpha"], row["per_position_acceptance"]
    if not 0 <= accepted <= proposed or drafting > steps or accepted > depth * drafting:
        out.append(f"{where}: impossible counters (accepted {accepted}, proposed {proposed}, drafting {drafting})")
    if proposed and not _close(alpha, accepted / proposed):
        out.append(f"{where}: α {alpha:.4f} is not accepted ÷ proposed = {accepted / proposed:.4f}")
    if len(per_position) != depth or any(not 0 <= a <= 1 for a in per_position):
        out.append(f"{where}: per-position acceptance must hold {depth} shares in [0, 1]")
    elif any(b > a + REL for a, b in zip(per_position, per_position[1:])):
        out.append(f"{where}: per-position acceptance rises with the position (a step accepts a prefix)")
    elif drafting and not _close(sum(per_position), accepted / drafting):
        out.append(
            f"{where}: per-position acceptance sums to {sum(per_position):.4f}, not accepted ÷ drafting steps "
            f"= {accepted / drafting:.4f}"
        )
    if tau > depth + 1 + REL:
        out.append(f"{where}: τ {tau:.3f} exceeds γ + 1 = {depth + 1} (a step yields at most γ drafts and a bonus)")
    elif steps:
        # Every step yields its accepted drafts and one target token; only a prompt's last step may be cut short.
        high, low = (steps + accepted) / steps, (steps + accepted - num_prompts * (depth + 1)) / steps
        if not low - REL <= tau <= high + REL:
            out.append(f"{where}: τ {tau:.3f} is outside [{low:.3f}, {high:.3f}], what its accepted drafts allow")
    return out


def inconsistencies(report: dict, samples: list[dict] | None = None) -> list[str]:
    """Every relation the report's figures break, one line each (empty: consistent).

    Args:
        samples: the rows of eval_samples.jsonl, where at hand; lossless is checked against them.
    """
    s = report["settings"]
    depth = len(report["per_position_acceptance"])  # γ for chains, the depth for trees
    out = _decode_problems(report, depth, s["num_prompts"], "τ/α")
    if s["tree"] is None and depth != s["num_speculative_tokens"]:
        out.append(f"a chain of γ = {s['num_speculative_tokens']} reports {depth} acceptance positions")
    for row in report.get("gamma_sweep") or []:
        g = row["num_speculative_tokens"]
        out += _decode_problems(row, len(row["per_position_acceptance"]), s["num_prompts"], f"γ-sweep row γ={g}")
    tps = report["tokens_per_second"]
    if not _close(report["speedup"], tps["speculative"] / tps["autoregressive"]):
        out.append(
            f"speed-up {report['speedup']:.3f}× is not speculative ÷ autoregressive tokens/s "
            f"= {tps['speculative'] / tps['autoregressive']:.3f}×"
        )
    equal, n = report["lossless_prompts"], s["num_prompts"]
    if report["lossless"] is True and equal != n:
        out.append(f"lossless is claimed but only {equal} of {n} outputs equal the target's")
    if report["acceptance_rule"] == "greedy" and report["lossless"] is not (equal == n):
        out.append(f"greedy decoding with {equal} of {n} equal outputs must report lossless {equal == n}")
    if samples is not None:
        if len(samples) != n or sum(bool(r["equal"]) for r in samples) != equal:
            out.append(
                f"eval_samples.jsonl holds {len(samples)} prompts, {sum(r['equal'] for r in samples)} equal; "
                f"the report claims {n} and {equal}"
            )
        elif any(r["equal"] != (r["speculative_ids"] == r["autoregressive_ids"]) for r in samples):
            out.append("eval_samples.jsonl marks outputs equal that differ (or the reverse)")
    served = report.get("served")
    if served and served.get("verdict") == "ok" and served.get("tau", 0) > depth + 1 + REL:
        out.append(f"served τ {served['tau']:.3f} exceeds γ + 1 = {depth + 1}")
    if served and "speedup" in served:
        rates = served["tokens_per_second"]
        if not _close(served["speedup"], rates["speculative"] / rates["no_speculation"]):
            out.append(f"served speed-up {served['speedup']:.3f}× is not the ratio of its served tokens/s")
    return out
