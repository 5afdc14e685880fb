"""The eval stage: decode held-out prompts autoregressively and speculatively (at the configured
γ and across a γ sweep), interleaved, and report acceptance, speed and losslessness.

    python -m eval drafter_dir=runs/toy/<ts>/drafter prompts=<prompts.jsonl> out_dir=<dir>
"""

from __future__ import annotations

import time
from dataclasses import asdict
from typing import Callable, Optional

import torch
from tqdm.auto import tqdm

from eval.claims import DIGEST, figures_digest, samples_digest
from eval.config import EvalConfig
from eval.errors import EvalError
from eval.metrics import Tally, add_block_cost, decode_figures
from eval.prompts import OVERLONG
from eval.proposer import Proposer
from eval.report import samples_jsonl, write_report
from eval.sampling import SamplingParams
from eval.speculative import Acceptance, autoregressive_generate, speculative_generate
from eval.static_engine import ENGINES, choose_engine
from eval.timing import repeat_drift, speedup_spread, timing_verdict


def check_settings(cfg: EvalConfig) -> None:
    """Raise EvalError naming the first bad eval setting and its fix."""
    if cfg.acceptance not in ("exact", "typical"):
        raise EvalError(
            f"eval.acceptance={cfg.acceptance!r} is not a rule; use exact (lossless) or typical (Medusa's, lossy)"
        )
    if cfg.num_speculative_tokens < 1 or any(g < 1 for g in cfg.gamma_sweep):
        raise EvalError("eval.num_speculative_tokens and every eval.gamma_sweep value must be ≥ 1")
    if cfg.num_prompts < 1 or cfg.max_new_tokens < 1 or cfg.warmup_prompts < 0:
        raise EvalError(
            f"eval.num_prompts={cfg.num_prompts} and eval.max_new_tokens={cfg.max_new_tokens} must be ≥ 1, "
            f"eval.warmup_prompts={cfg.warmup_prompts} ≥ 0"
        )
    if cfg.timing_drift_tolerance <= 0 or cfg.timing_max_interval <= 0:
        raise EvalError(
            "eval.timing_drift_tolerance and eval.timing_max_interval must be > 0 (fractions, e.g. 0.10 and 0.5)"
        )
    if cfg.engine not in ENGINES:
        raise EvalError(f"eval.engine={cfg.engine!r}; use one of {list(ENGINES)}")
    if cfg.overlong_prompts not in OVERLONG:
        raise EvalError(f"eval.overlong_prompts={cfg.overlong_prompts!r}; use one of {list(OVERLONG)}")
    if (
        cfg.tree is not None
        and cfg.tree not in ("drafter", "dynamic")
        and (
            not isinstance(cfg.tree, (list, tuple))
            or not cfg.tree
            or any(not isinstance(k, int) or k < 1 for k in cfg.tree)
        )
    ):
        raise EvalError(
            f"eval.tree={cfg.tree} must be null (chains), children per depth such as [3, 2, 1], "
            "drafter (the tree saved with a Medusa drafter) or dynamic (EAGLE-2 trees)"
        )
    t = cfg.dynamic_tree
    if min(t.depth, t.top_k, t.total_tokens) < 1:
        raise EvalError(f"eval.dynamic_tree needs depth, top_k and total_tokens ≥ 1, got {t}")
    if cfg.batch_size < 1:
        raise EvalError("eval.batch_size must be ≥ 1")
    if cfg.serve not in (None, "vllm"):
        raise EvalError(f"eval.serve={cfg.serve!r} is not a serving engine; use vllm or null")
    if cfg.serve and (cfg.temperature > 0 or cfg.acceptance != "exact"):
        raise EvalError(
            "eval.serve=vllm compares greedy decoding token for token; "
            "set eval.temperature=0 and eval.acceptance=exact, or eval.serve=null"
        )
    if cfg.served_tolerance <= 0:
        raise EvalError("eval.served_tolerance must be > 0 (a fraction of our τ, e.g. 0.05)")
    if cfg.vllm.speed_repeats < 0:
        raise EvalError("eval.vllm.speed_repeats must be ≥ 0 (0 = no served speed-up, acceptance only)")


def evaluate(
    target,
    proposer: Proposer,
    prompts: list[list[int]],
    cfg: EvalConfig,
    eos_ids: set[int],
    vocab_size: int,
    names: dict,
    *,
    out_dir=None,
    served: Optional[Callable[[list, list, dict], dict]] = None,
    progress: bool = True,
) -> dict:
    """Measure a drafter on `prompts` (token ids); write the report to out_dir when given.

    Args:
        names: {"target": ..., "drafter": ..., "kind": ...} for the report.
        served: called as served(prompts, target's greedy outputs, report) before the report is
            written; its result becomes the report's `served` section (eval.serve=vllm).
        progress: show a progress bar over prompts × (autoregressive + each γ).
    Returns:
        the report dict (also eval_report.json).
    """
    check_settings(cfg)
    if not prompts:
        raise EvalError("no eval prompts")
    device = next(target.parameters()).device
    params = SamplingParams(cfg.temperature, cfg.top_p, cfg.top_k)
    acceptance = Acceptance(cfg.acceptance, cfg.typical_threshold, cfg.typical_alpha)
    # Trees have no γ: their shape is the tree. Chains are measured at γ and across the sweep,
    # up to the longest chain the drafter can propose (Medusa: one token per head).
    depth, longest = proposer.tree_depth, proposer.max_num_speculative_tokens
    if depth is None and longest is not None and cfg.num_speculative_tokens > longest:
        raise EvalError(
            f"eval.num_speculative_tokens={cfg.num_speculative_tokens} but this {names.get('kind', '')} drafter "
            f"proposes at most {longest} tokens per step; lower it"
        )
    gammas = (
        [cfg.num_speculative_tokens]
        if depth
        else sorted({cfg.num_speculative_tokens, *(g for g in cfg.gamma_sweep if longest is None or g <= longest)})
    )
    generator = torch.Generator(device=device).manual_seed(cfg.seed)
    warmup, prompts = prompts[: cfg.warmup_prompts], prompts[: cfg.num_prompts]
    engine = choose_engine(
        cfg.engine,
        target,
        proposer,
        tree=cfg.tree,
        batch_size=cfg.batch_size,
        # the longest sequence, plus room for the last step's block to run past max_new_tokens
        max_len=max(map(len, warmup + prompts)) + cfg.max_new_tokens + 2 * (max(gammas) + 1),
        widths=(1, *(g + 1 for g in gammas)),  # decoding, and verifying each γ
    )
    proposer.use_engine(engine)  # a drafter with its own model cache decodes on the same path
    if engine.static:
        engine.static_model(target)
        engine.precompile()  # timed apart: compile time is not decoding time

    def run_ar(batch):
        return autoregressive_generate(
            target,
            batch,
            cfg.max_new_tokens,
            params,
            eos_ids=eos_ids,
            vocab_size=vocab_size,
            generator=generator,
            engine=engine,
        )

    def run_spec(batch, gamma):
        return speculative_generate(
            target,
            proposer,
            batch,
            cfg.max_new_tokens,
            gamma,
            params,
            eos_ids=eos_ids,
            vocab_size=vocab_size,
            generator=generator,
            acceptance=acceptance,
            engine=engine,
        )

    # A proposer that learns across requests (suffix decoding) keeps one memory per workload: the warm-up
    # and each γ pass decode the same prompts, and must not draft from one another's outputs.
    proposer.begin_workload("warmup")
    for p in warmup:  # untimed
        run_ar([p]), [run_spec([p], g) for g in gammas]

    ar = Tally()  # both baseline repeats: the speed-up's denominator
    spec = {g: Tally() for g in gammas}
    base_runs: tuple[list, list] = ([], [])  # per batch, (tokens, seconds) of the baseline before / after
    spec_runs: dict[int, list] = {g: [] for g in gammas}  # per batch, (tokens, seconds) at γ
    bar = tqdm(total=len(prompts) * (2 + len(gammas)), desc="eval", unit="decode", disable=not progress)
    for start in range(0, len(prompts), cfg.batch_size):  # interleaved, so machine noise hits every side alike
        batch = prompts[start : start + cfg.batch_size]
        for repeat in (0, 1):  # the baseline before and after the speculative runs: their gap says how noisy
            if repeat:
                for g in gammas:
                    proposer.begin_workload(f"gamma={g}")
                    t0 = time.perf_counter()
                    out, stats = run_spec(batch, g)
                    spec_runs[g].append((sum(map(len, out)), time.perf_counter() - t0))
                    spec[g].stats.add(stats)
                    spec[g].equal_rows += sum(o == a for o, a in zip(out, ar.outputs[start:]))
                    spec[g].outputs += out
                    bar.set_postfix_str(f"γ={g}" if depth is None else "tree", refresh=False)
                    bar.update(len(batch))
            t0 = time.perf_counter()
            ar_out = run_ar(batch)
            base_runs[repeat].append((sum(map(len, ar_out)), time.perf_counter() - t0))
            if not repeat:
                ar.outputs += ar_out
            bar.update(len(batch))
    bar.close()
    base_tokens = [a + b for (a, _), (b, _) in zip(*base_runs)]
    base_seconds = [a + b for (_, a), (_, b) in zip(*base_runs)]
    ar.tokens, ar.seconds = sum(base_tokens), sum(base_seconds)
    spreads = {}
    for g in gammas:
        spec[g].tokens, spec[g].seconds = (sum(col) for col in zip(*spec_runs[g]))
        tokens, seconds = zip(*spec_runs[g])
        spreads[g] = speedup_spread(list(tokens), list(seconds), base_tokens, base_seconds)

    sweep = [
        decode_figures(spec[g], ar, depth or g, is_chain=depth is None)
        | {"num_speculative_tokens": g, "speedup_spread": {k: v for k, v in spreads[g].items() if k != "per_prompt"}}
        for g in gammas
    ]
    add_block_cost(sweep)  # one forward per block or one per token: the sweep's drafting time says which
    main = sweep[gammas.index(cfg.num_speculative_tokens)]
    timing = timing_verdict(
        repeat_drift(*zip(*base_runs[0]), *zip(*base_runs[1])),
        spreads[cfg.num_speculative_tokens],
        main["speedup"],
        drift_tolerance=cfg.timing_drift_tolerance,
        max_interval=cfg.timing_max_interval,
        device=device,
    )
    # A noisy machine's wall clock cannot rank γ values: the τ-and-cost prediction (its phase timings are
    # taken within each step, both sides alike) recommends instead, and the report says so.
    basis = "predicted_speedup_from_tau" if timing["noisy"] else "speedup"
    best = max(sweep, key=lambda row: row[basis])
    lossless = params.greedy or acceptance.rule == "exact"
    report = {
        **names,
        **{k: v for k, v in main.items() if k not in ("num_speculative_tokens", "speedup_spread")},
        "speedup_spread": spreads[cfg.num_speculative_tokens],
        "timing": timing,
        "engine": engine.describe(),
        "tokens_per_second": {"speculative": main["tokens_per_second"], "autoregressive": ar.tokens / ar.seconds},
        # Greedy: every output must equal the target's own. Exact sampling: the outputs differ
        # by chance, exactness rests on rejection sampling (tested statistically). Typical: lossy.
        "lossless": (spec[cfg.num_speculative_tokens].equal_rows == len(prompts))
        if params.greedy
        else (None if lossless else False),
        "lossless_prompts": spec[cfg.num_speculative_tokens].equal_rows,
        "acceptance_rule": "greedy"
        if params.greedy
        else ("exact rejection sampling" if lossless else "typical acceptance (lossy)"),
        "recommended_num_speculative_tokens": None if depth else best["num_speculative_tokens"],
        "recommendation_basis": None
        if depth
        else ("measured speed-up" if basis == "speedup" else "predicted from τ and cost (timing was noisy)"),
        "gamma_sweep": sweep if len(sweep) > 1 else [],
        "settings": {**asdict(cfg), "num_prompts": len(prompts), "device": str(device)},
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    if served is not None:
        report["served"] = served(prompts, ar.outputs, report)
    outputs = spec[cfg.num_speculative_tokens].outputs
    samples = samples_jsonl(
        {"prompt_ids": p, "speculative_ids": s, "autoregressive_ids": a, "equal": s == a}
        for p, s, a in zip(prompts, outputs, ar.outputs)
    )
    report["samples_sha256"] = samples_digest(samples)
    report[DIGEST] = figures_digest(report)  # last: binds every figure above, the served verdict included
    if out_dir is not None:
        write_report(out_dir, report, samples)
    return report
