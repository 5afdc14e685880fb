"""The eval stage: decode held-out prompts autoregressively and speculatively, interleaved, and
report acceptance, speed and losslessness.

    python -m eval drafter_dir=runs/toy/<ts>/drafter prompts=<prompts.jsonl> out_dir=<dir>
"""

from __future__ import annotations

import time
from dataclasses import asdict

import torch

from eval.config import EvalConfig
from eval.metrics import predicted_speedup, summarize
from eval.proposer import Proposer
from eval.report import write_report
from eval.sampling import SamplingParams
from eval.speculative import DecodeStats, autoregressive_generate, speculative_generate


def evaluate(target, proposer: Proposer, prompts: list[list[int]], cfg: EvalConfig, eos_ids: set[int], vocab_size: int, names: dict, out_dir=None) -> dict:
    """Measure a drafter on `prompts` (token ids); write the report to out_dir when given.

    Args:
        names: {"target": ..., "drafter": ..., "kind": ...} for the report.
    Returns:
        the report dict (also eval_report.json).
    """
    if not prompts:
        raise ValueError("no eval prompts")
    device = next(target.parameters()).device
    params = SamplingParams(cfg.temperature, cfg.top_p, cfg.top_k)
    gamma = cfg.num_speculative_tokens
    prompts = prompts[: cfg.num_prompts]
    generator = torch.Generator(device=device).manual_seed(cfg.seed)

    def run_ar(ids):
        return autoregressive_generate(target, ids, cfg.max_new_tokens, params, eos_ids, vocab_size, generator)

    def run_spec(ids):
        return speculative_generate(target, proposer, ids, cfg.max_new_tokens, gamma, params, eos_ids, vocab_size, generator)

    for p in prompts[: cfg.warmup_prompts]:  # warm-up, untimed
        ids = torch.tensor([p], device=device)
        run_ar(ids), run_spec(ids)

    total = DecodeStats()
    ar_seconds = spec_seconds = 0.0
    ar_tokens = spec_tokens = 0
    samples, lossless_prompts = [], 0
    for p in prompts:  # interleaved, so machine noise hits both sides alike
        ids = torch.tensor([p], device=device)
        t0 = time.perf_counter()
        ar_out = run_ar(ids)
        t1 = time.perf_counter()
        spec_out, stats = run_spec(ids)
        t2 = time.perf_counter()
        ar_seconds += t1 - t0
        spec_seconds += t2 - t1
        ar_tokens += len(ar_out)
        spec_tokens += len(spec_out)
        total.add(stats)
        same = spec_out == ar_out
        lossless_prompts += same
        samples.append({"prompt_ids": p, "speculative_ids": spec_out, "autoregressive_ids": ar_out, "equal": same})

    summary = summarize(total.accept_counts, gamma, spec_tokens, total.target_forwards)
    cost_ratio = (total.draft_seconds / total.proposed_tokens) / (total.target_seconds / total.target_forwards)
    ar_tps, spec_tps = ar_tokens / ar_seconds, spec_tokens / spec_seconds
    report = {
        **names,
        "tau": summary["tau"],
        "alpha": summary["alpha"],
        "per_position_acceptance": summary["per_position_acceptance"],
        "speedup": spec_tps / ar_tps,
        "predicted_speedup": predicted_speedup(summary["alpha"], gamma, cost_ratio),
        "cost_ratio": cost_ratio,
        "tokens_per_second": {"speculative": spec_tps, "autoregressive": ar_tps},
        "tokens": {"speculative": spec_tokens, "autoregressive": ar_tokens},
        "steps": summary["steps"],
        # Greedy: every prompt's speculative output must equal the target's own. Sampling: the
        # outputs differ by chance; exactness rests on rejection sampling (tested statistically).
        "lossless": lossless_prompts == len(prompts) if params.greedy else None,
        "lossless_prompts": lossless_prompts,
        "recommended_num_speculative_tokens": gamma,
        "settings": {**asdict(cfg), "num_prompts": len(prompts), "device": str(device)},
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    if out_dir is not None:
        write_report(out_dir, report, samples)
    return report
