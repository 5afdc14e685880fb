"""The eval outputs: the report computed from the measurements, then eval_report.json, eval_samples.jsonl,
report.md and the plots written from it."""

from __future__ import annotations

import json
import time
from dataclasses import asdict
from pathlib import Path
from typing import Iterable

from eval.claims import DIGEST, figures_digest, samples_digest
from eval.config import EvalConfig
from eval.measure import Measurements
from eval.metrics import Tally, add_block_cost, decode_figures
from eval.plots import plot_acceptance, plot_load, plot_sweep
from eval.report_markdown import render_markdown
from eval.sampling import SamplingParams
from eval.speculative import DecodeStats
from eval.static_engine import Engine
from eval.timing import ratio_interval, repeat_drift, speedup_spread, timing_verdict
from heads.formats.fingerprint import PROFILE_FILE, SAMPLES_FILE
from heads.formats.staging import atomic_write_text
from heads.load_card import LOAD_PLOT

SAMPLES = SAMPLES_FILE  # also a provenance file of exports (bound by the report)


def samples_jsonl(samples: Iterable[dict]) -> str:
    """eval_samples.jsonl's text: one prompt per line (the report's samples_sha256 is over exactly this)."""
    return "".join(json.dumps(s) + "\n" for s in samples)


def read_samples(path: str | Path) -> list[dict]:
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]


def build_report(m: Measurements, cfg: EvalConfig, names: dict, engine: Engine) -> dict:
    """The report's figures: the configured γ's, the sweep, the timing verdict and the recommended γ."""
    depth, spec, ar, spreads = m.tree_depth, m.spec, m.ar, m.spreads
    sweep = [
        decode_figures(spec[g], ar, depth or g, is_chain=depth is None)
        | {"num_speculative_tokens": g, "speedup_spread": {k: v for k, v in spreads[g].items() if k != "per_prompt"}}
        for g in m.gammas
    ]
    add_block_cost(sweep)  # one forward per block or one per token: the sweep's drafting time says which
    main = sweep[m.gammas.index(cfg.num_speculative_tokens)]
    timing = timing_verdict(
        repeat_drift(*zip(*m.base_runs[0]), *zip(*m.base_runs[1])),
        spreads[cfg.num_speculative_tokens],
        main["speedup"],
        drift_tolerance=cfg.timing_drift_tolerance,
        max_interval=cfg.timing_max_interval,
        device=m.device,
    )
    # A noisy machine's wall clock cannot rank γ values: the τ-and-cost prediction (its phase timings are
    # taken within each step, both sides alike) recommends instead, and the report says so.
    basis = "predicted_speedup_from_tau" if timing["noisy"] else "speedup"
    best = max(sweep, key=lambda row: row[basis])
    greedy = SamplingParams(cfg.temperature).greedy
    lossless = greedy or cfg.acceptance == "exact"
    return {
        **names,
        **{k: v for k, v in main.items() if k not in ("num_speculative_tokens", "speedup_spread")},
        "speedup_spread": spreads[cfg.num_speculative_tokens],
        "tau_spread": tau_spread(m, cfg.num_speculative_tokens),
        "timing": timing,
        "engine": engine.describe(),
        "tokens_per_second": {"speculative": main["tokens_per_second"], "autoregressive": ar.tokens / ar.seconds},
        # Greedy: every output must equal the target's own. Exact sampling: the outputs differ
        # by chance, exactness rests on rejection sampling (tested statistically). Typical: lossy.
        "lossless": (spec[cfg.num_speculative_tokens].equal_rows == len(m.prompts))
        if greedy
        else (None if lossless else False),
        "lossless_prompts": spec[cfg.num_speculative_tokens].equal_rows,
        "acceptance_rule": "greedy"
        if greedy
        else ("exact rejection sampling" if lossless else "typical acceptance (lossy)"),
        "recommended_num_speculative_tokens": None if depth else best["num_speculative_tokens"],
        "recommendation_basis": None
        if depth
        else ("measured speed-up" if basis == "speedup" else "predicted from τ and cost (timing was noisy)"),
        "gamma_sweep": sweep if len(sweep) > 1 else [],
        "categories": category_figures(m, cfg.num_speculative_tokens),
        "workloads": workload_figures(m, cfg.num_speculative_tokens),
        "settings": {**asdict(cfg), "num_prompts": len(m.prompts), "device": str(m.device)},
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def tau_spread(m: Measurements, gamma: int) -> dict:
    """τ's 95 % interval over the measured batches (tokens ÷ verification steps, resampled): how far another draw of
    as many prompts could move it, the yardstick for "the same τ" between two drafters."""
    tokens = [t for t, _ in m.spec_runs[gamma]]
    return ratio_interval(tokens, [len(stats.accept_counts) for stats in m.batch_stats[gamma]])


UNCATEGORISED = "(none)"  # the key of prompts without a category, in a set where others have one
_PER_CATEGORY = ("tau", "alpha", "speedup", "per_position_acceptance", "tokens_per_second", "steps", "drafting_steps")


def category_figures(m: Measurements, gamma: int) -> dict:
    """Per category ({} when no prompt names one): τ, α, the speed-up and their counters at γ, from the batches of
    its prompts (a batch holds one category). The definitions are the totals' (decode_figures), so each counter
    (prompts, new_tokens, steps, accepted and proposed drafts) sums over the categories to the total's."""
    if all(c is None for c in m.categories):
        return {}
    return _grouped_figures(m, gamma, m.categories)


def workload_figures(m: Measurements, gamma: int) -> dict:
    """Per benchmark where the categories name theirs (`mt_bench/coding`, `humaneval`: benchmarks read by name),
    the category figures' definitions over all its prompts; {} when no category names a benchmark."""
    if not any(c and "/" in c for c in m.categories):
        return {}
    return _grouped_figures(m, gamma, [c.split("/")[0] if c else c for c in m.categories])


def _grouped_figures(m: Measurements, gamma: int, labels: list) -> dict:
    """category_figures over the prompts' `labels` (a batch holds one category, hence one label)."""
    out = {}
    for name in dict.fromkeys(labels):  # in order of first appearance
        picks = [b for b, (start, _) in enumerate(m.batches) if labels[start] == name]
        spec_tokens, spec_seconds = ([m.spec_runs[gamma][b][i] for b in picks] for i in (0, 1))
        # both baseline repeats, as the total's denominator
        base_tokens, base_seconds = ([m.base_runs[0][b][i] + m.base_runs[1][b][i] for b in picks] for i in (0, 1))
        stats = DecodeStats()
        for b in picks:
            stats.add(m.batch_stats[gamma][b])
        spec = Tally(stats=stats, seconds=sum(spec_seconds), tokens=sum(spec_tokens))
        base = Tally(seconds=sum(base_seconds), tokens=sum(base_tokens))
        figures = decode_figures(spec, base, m.tree_depth or gamma, is_chain=m.tree_depth is None)
        spread = speedup_spread(spec_tokens, spec_seconds, base_tokens, base_seconds)
        out[UNCATEGORISED if name is None else name] = {
            "prompts": sum(m.batches[b][1] - m.batches[b][0] for b in picks),
            "new_tokens": spec.tokens,
            **{k: figures[k] for k in _PER_CATEGORY},
            "proposed_draft_tokens": figures["proposed_draft_tokens"],
            "accepted_draft_tokens": figures["accepted_draft_tokens"],
            "speedup_spread": {k: v for k, v in spread.items() if k != "per_prompt"},
        }
    return out


def seal_report(report: dict, m: Measurements, num_speculative_tokens: int) -> str:
    """Bind the samples and every figure (the served verdict included: seal last) into the report; returns
    eval_samples.jsonl's text."""
    outputs = m.spec[num_speculative_tokens].outputs
    samples = samples_jsonl(
        {"prompt_ids": p, "speculative_ids": s, "autoregressive_ids": a, "equal": s == a}
        for p, s, a in zip(m.prompts, outputs, m.ar.outputs)
    )
    report["samples_sha256"] = samples_digest(samples)
    report[DIGEST] = figures_digest(report)
    return samples


def write_report(out_dir: str | Path, report: dict, samples_text: str) -> None:
    """Write all eval artifacts into out_dir; eval_report.json last, as the completion marker."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / SAMPLES, samples_text)
    plot_acceptance(out / "acceptance.png", report["per_position_acceptance"])
    if report["gamma_sweep"]:
        plot_sweep(out / "gamma_sweep.png", report["gamma_sweep"])
    if report.get("serving_load"):
        plot_load(out / LOAD_PLOT, report["serving_load"])
    atomic_write_text(out / PROFILE_FILE, json.dumps(report["speculation_profile"], indent=2))
    atomic_write_text(out / "report.md", render_markdown(report))
    atomic_write_text(out / "eval_report.json", json.dumps(report, indent=2))
