"""Drafter directories as the publish stage writes them (a real export, drafthub.json with a consistent, bound
eval report, the samples), for the publish, registry and site tests."""

import json

import torch

from eval.claims import DIGEST, figures_digest, samples_digest
from eval.report import samples_jsonl
from heads.config import DraftLMConfig
from heads.draft_lm import DraftLM
from heads.families import get_family, write_provenance
from heads.formats.fingerprint import served_files_hash
from tests.exporting import export

SERVED = {
    "engine": "vllm",
    "vllm_version": "0.32.0",
    "method": "draft_model",
    "num_speculative_tokens": 4,
    "tau": 2.45,
    "ours": {"tau": 2.5},
    "equal_prompts": 4,
    "num_prompts": 4,
    "verdict": "ok",
    "reason": "within tolerance",
}


def decode_figures(tau: float, gamma: int, steps: int = 100) -> dict:
    """One decode's figures and the counters they derive from, consistent with each other (every step drafts)."""
    accepted = round((tau - 1) * steps)
    mean = accepted / steps
    return {
        "tau": tau,
        "alpha": accepted / (gamma * steps),
        "per_position_acceptance": [min(1.0, max(0.0, mean - i)) for i in range(gamma)],
        "steps": steps,
        "drafting_steps": steps,
        "proposed_draft_tokens": gamma * steps,
        "accepted_draft_tokens": accepted,
    }


def sweep_row(gamma: int, tau: float, speedup: float) -> dict:
    """A γ-sweep row as eval writes it."""
    return decode_figures(tau, gamma) | {
        "num_speculative_tokens": gamma,
        "speedup": speedup,
        "speedup_spread": {"median": speedup, "low": speedup * 0.9, "high": speedup * 1.1, "level": 0.95},
        "predicted_speedup": speedup * 1.05,
    }


def consistent_report(
    export_sha256,
    tau=2.5,
    equal=4,
    served=None,
    num_prompts=4,
    gamma=4,
    steps=100,
    samples=None,
    speedup=1.3,
    kind="draft_lm",
    sweep=(),
    serving_load=None,
):
    """A consistent eval report (counters, figures, digest) and its samples text, as eval writes them.

    samples: a real eval_samples.jsonl text to claim the figures about (its prompts and equal outputs)."""
    if samples is None:
        samples = samples_jsonl(
            {
                "prompt_ids": [1, i],
                "speculative_ids": [5, i],
                "autoregressive_ids": [5, i if i < equal else -1],
                "equal": i < equal,
            }
            for i in range(num_prompts)
        )
    rows = [json.loads(line) for line in samples.splitlines()]
    num_prompts, equal = len(rows), sum(r["equal"] for r in rows)
    report = {
        "target": "toyworld:micro",
        "kind": kind,
        "export_sha256": export_sha256,
        **decode_figures(tau, gamma, steps),
        "speedup": speedup,
        "speedup_spread": {"median": speedup, "low": speedup * 0.9, "high": speedup * 1.1, "level": 0.95},
        "timing": {"noisy": False, "reasons": [], "device_name": "CPU test, 2 threads"},
        "tokens_per_second": {"speculative": 100.0 * speedup, "autoregressive": 100.0},
        "lossless": equal == num_prompts,
        "lossless_prompts": equal,
        "acceptance_rule": "greedy",
        "gamma_sweep": list(sweep),
        "settings": {"num_prompts": num_prompts, "num_speculative_tokens": gamma, "tree": None},
        "samples_sha256": samples_digest(samples),
        **({"served": served} if served else {}),
        **({"serving_load": serving_load} if serving_load else {}),
    }
    return {**report, DIGEST: figures_digest(report)}, samples


def tiny_export(path, target, tokenizer, drafter=None):
    """`drafter` (default: a small untrained, seeded draft LM) exported to `path`."""
    if drafter is not None:
        return export(drafter, path, tokenizer=tokenizer)
    torch.manual_seed(0)
    drafter = DraftLM.from_config(
        DraftLMConfig(hidden_size=32, intermediate_size=64, num_attention_heads=1, num_key_value_heads=1),
        target.config,
        tokenizer,
    )
    return export(drafter, path, tokenizer=tokenizer)


def published_drafter(
    path, target, tokenizer, model_name="toy-draft", min_tau=1.0, drafter=None, target_name="toyworld:micro", **report
):
    """A drafter directory as the publish stage writes it (drafthub.json with its bound eval report, samples)."""
    out = tiny_export(path, target, tokenizer, drafter)
    kind = drafter.kind if drafter is not None else "draft_lm"
    figures, samples = consistent_report(served_files_hash(out), kind=kind, **report)
    prov = {
        "kind": kind,
        "model_name": model_name,
        "target": {"name_or_path": target_name},
        "recipe": {"recipe_name": "t", "publish": {"min_tau": min_tau}},
        "eval": figures,
        "stage_hash": "0123456789abcdef",
        "created": "2026-11-22T10:00:00Z",
        "export_sha256": figures["export_sha256"],
        **get_family(kind).describe(out, {}),  # what the publish stage adds (an n-gram's settings)
    }
    # the plot eval draws for a load sweep (any bytes: the registry copies it, the card links it)
    write_provenance(out, prov, samples, load_plot=b"\x89PNG stand-in" if report.get("serving_load") else None)
    return out
