"""The eval outputs: the report computed from the measurements, then eval_report.json, eval_samples.jsonl,
report.md and the plots written from it."""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict
from pathlib import Path
from typing import Iterable

from eval.claims import DIGEST, figures_digest, samples_digest
from eval.config import EvalConfig
from eval.measure import Measurements
from eval.metrics import Tally, add_block_cost, decode_figures
from eval.sampling import SamplingParams
from eval.speculative import DecodeStats
from eval.static_engine import Engine
from eval.timing import ratio_interval, repeat_drift, speedup_spread, timing_verdict
from heads.card import served_engine, speed_warnings, speedup_text, timing_device
from heads.formats.fingerprint import PROFILE_FILE, SAMPLES_FILE
from heads.formats.staging import atomic_write_text
from heads.load_card import LOAD_PLOT, load_section

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


def _fmt(x, spec=".3f"):
    return "–" if x is None else format(x, spec)


def _prefill_text(ms: dict) -> str:
    """The step's rest: the prompts' forward (apart where the report measured it) and the loop."""
    if "prefill" not in ms:  # a report from before prefill was timed apart
        return f"other (prefill, loop) {ms['other']:.2f} ms"
    share = ms["prefill"] / sum(ms.values())
    prefill = f"prefill {ms['prefill']:.2f} ms ({share:.0%} of the time; plain decoding pays it too)"
    return f"{prefill}, loop {ms['other']:.2f} ms"


def _sweep_markdown(sweep_rows: list[dict]) -> str:
    """The γ sweep's section of report.md ("" without a sweep)."""
    if not sweep_rows:
        return ""
    sweep = "\n".join(
        f"| {g['num_speculative_tokens']} | {g['tau']:.3f} | {g['alpha']:.3f} | {speedup_text(g)} "
        f"| {_fmt(g['predicted_speedup'])}× | {g['cost_ratio']:.3f} | {g['draft_forwards_per_step']:.2f} "
        f"| {_fmt(g.get('block_cost'))} |"
        for g in sweep_rows
    )
    return f"""
## γ sweep
Same prompts, decoded at each γ; the recommended `num_speculative_tokens` is the fastest (the highest
predicted from τ and cost when the timing was noisy). Speed-ups carry their 95% interval. Block cost:
drafting time per step ÷ that at γ = 1 (≈ γ when each token takes a drafter forward, ≈ 1 when the
block is drafted in one).

| γ | τ | α | speedup | predicted | c | drafter forwards/step | block cost |
|---|---|---|---|---|---|---|---|
{sweep}

![τ and speedup vs γ](gamma_sweep.png)
"""


def render_markdown(r: dict) -> str:
    s = r["settings"]
    if s["tree"] == "drafter":
        shape = f"the drafter's own tree ({r['draft_tokens_per_step']:.0f} nodes)"
    else:
        shape = f"tree {s['tree']} (children per depth)" if s["tree"] else f"chain, γ = {s['num_speculative_tokens']}"
    sampling = (
        "greedy"
        if s["temperature"] <= 0
        else f"temperature {s['temperature']}, top-p {s['top_p']}, top-k {s['top_k'] or 'off'}"
    )
    rows = "\n".join(f"| {i + 1} | {a:.3f} |" for i, a in enumerate(r["per_position_acceptance"]))
    best_gamma = _fmt(r["recommended_num_speculative_tokens"], "d")
    warnings = "".join(f"\n\n> ⚠️ {w}" for w in speed_warnings(r))
    ms = {k: v * 1e3 for k, v in r["seconds_per_step"].items()}
    share, end_to_end = _fmt(r.get("prefill_share"), ".0%"), _fmt(r.get("predicted_speedup_end_to_end"))
    text = f"""# Speculative decoding report

Drafter `{r["drafter"]}` ({r["kind"]}) on target `{r["target"]}`; {s["num_prompts"]} prompts,
{s["max_new_tokens"]} new tokens each, batch size {s["batch_size"]}, {shape}, {sampling};
acceptance: {r["acceptance_rule"]}.

| metric | value |
|---|---|
| τ (mean accepted length, bonus included) | {r["tau"]:.3f} |
| α (draft acceptance rate) | {r["alpha"]:.3f} |
| speedup vs our KV-cached autoregressive decoding (95% interval over prompts) | {speedup_text(r)} |
| median per-prompt speedup | {_fmt((r.get("speedup_spread") or {}).get("median"))}× |
| decoding speedup (each side's prompt prefill apart) | {_fmt(r.get("decode_speedup"))}× |
| predicted speedup (Leviathan et al. 2023, from α, c and v) | {_fmt(r["predicted_speedup"])}× |
| predicted decoding speedup τ / (v + γ·c) from the measured τ | {r["predicted_speedup_from_tau"]:.3f}× |
| predicted end to end, with the prefill's share p of plain decoding ({share}) | {end_to_end}× |
| verify cost v (a verification forward of γ + 1 tokens ÷ a plain step, prefill apart) | {_fmt(r.get("verify_cost"))} |
| cost ratio c (drafter s/token ÷ target s/forward) | {r["cost_ratio"]:.3f} |
| speculative tokens/s | {r["tokens_per_second"]["speculative"]:.1f} |
| autoregressive tokens/s | {r["tokens_per_second"]["autoregressive"]:.1f} |
| lossless | {r["lossless"]} ({r["lossless_prompts"]}/{s["num_prompts"]} outputs equal the target's greedy output) |
| recommended `num_speculative_tokens` ({r.get("recommendation_basis") or "fastest γ in the sweep"}) | {best_gamma} |

Timed on {timing_device(r)}; the baseline's speed moved {_fmt((r.get("timing") or {}).get("baseline_drift"), ".1%")}
between its two runs of each prompt (median).{warnings}

Time per step: draft {ms["draft"]:.2f} ms in {r["draft_forwards_per_step"]:.2f} drafter forwards,
target forward {ms["target_forward"]:.2f} ms, accept/reject and cache {ms["verify_and_cache"]:.2f} ms,
{_prefill_text(ms)}.

## Per-position acceptance
Share of steps that accepted at least i draft tokens.

| i | acceptance |
|---|---|
{rows}

![per-position acceptance](acceptance.png)
"""
    text += _sweep_markdown(r["gamma_sweep"])
    gamma = s["num_speculative_tokens"] if not s["tree"] else None
    if r.get("workloads"):
        text += _categories_markdown(r["workloads"], gamma, ("workload", "workloads"))
    if r.get("categories"):
        text += _categories_markdown(r["categories"], gamma)
    if "served" in r:
        text += _served_markdown(r["served"])
    return text + load_section(r.get("serving_load"))


def _categories_markdown(categories: dict, gamma, grouping: tuple = ("category", "categories")) -> str:
    """Per category (the rows' `category`: Spec-Bench's six, MT-Bench's eight), or per workload (the benchmark
    the categories name), the headline figures."""
    rows = "\n".join(
        f"| {name} | {c['prompts']} | {c['tau']:.3f} | {c['alpha']:.3f} | {speedup_text(c)} |"
        for name, c in categories.items()
    )
    at = f"γ = {gamma}" if gamma else "the tree"
    one, many = grouping
    return f"""
## Per {one}
The prompts' {many}, each measured at {at} on its own batches; the speed-up carries its 95% interval over them.

| {one} | prompts | τ | α | speedup |
|---|---|---|---|---|
{rows}
"""


def _served_markdown(sv: dict) -> str:
    """The served check: the engine's own counters next to ours, per position, and the verdict."""
    rows = "\n".join(
        f"| {i + 1} | {o:.3f} | {v:.3f} |"
        for i, (o, v) in enumerate(zip(sv["ours"]["per_position_acceptance"], sv["per_position_acceptance"]))
    )
    return f"""
## Served check: {served_engine(sv)}, method `{sv["method"]}`
The export `{sv["drafter_dir"]}` served as is, greedy chains of γ = {sv["num_speculative_tokens"]}.
**Verdict: {sv["verdict"]}** — {sv["reason"]}.

| | ours | served |
|---|---|---|
| τ (1 + accepted drafts per step) | {sv["ours"]["tau"]:.3f} | {sv["tau"]:.3f} |{_served_speed_rows(sv)}

| i | ours | served |
|---|---|---|
{rows}
"""


def _served_speed_rows(sv: dict) -> str:
    """Speed-ups side by side: ours over our autoregressive decoding, the engine's over itself without the drafter."""
    if "speedup" not in sv:
        return ""
    tps = sv["tokens_per_second"]
    noisy = " (noisy: " + "; ".join(sv["timing"]["reasons"]) + ")" if sv["timing"]["noisy"] else ""
    return (
        f"\n| speed-up vs no speculation (95% interval) | {speedup_text(sv['ours'])} | {speedup_text(sv)}{noisy} |"
        f"\n| tokens/s with / without the drafter | | {tps['speculative']:.1f} / {tps['no_speculation']:.1f} |"
    )


def save_figure(fig, path: Path) -> None:
    import matplotlib.pyplot as plt

    fig.tight_layout()
    tmp = path.with_name(f".{path.stem}.tmp.png")
    fig.savefig(tmp)
    plt.close(fig)
    os.replace(tmp, path)


def pyplot():
    import matplotlib

    matplotlib.use("Agg")  # no display on servers
    import matplotlib.pyplot as plt

    return plt


def plot_acceptance(path: Path, per_position: list[float]) -> None:
    fig, ax = pyplot().subplots(figsize=(4, 3))
    ax.bar(range(1, len(per_position) + 1), per_position)
    ax.set_xlabel("draft position i")
    ax.set_ylabel("P(accepted ≥ i)")
    ax.set_ylim(0, 1)
    save_figure(fig, path)


def plot_sweep(path: Path, sweep: list[dict]) -> None:
    gammas = [g["num_speculative_tokens"] for g in sweep]
    fig, (left, right) = pyplot().subplots(1, 2, figsize=(8, 3))
    left.plot(gammas, [g["tau"] for g in sweep], marker="o")
    left.set_xlabel("γ (num_speculative_tokens)")
    left.set_ylabel("τ (tokens per target forward)")
    measured = [g["speedup"] for g in sweep]
    spreads = [g.get("speedup_spread") or {"low": m, "high": m} for g, m in zip(sweep, measured)]
    errors = [[m - s["low"] for m, s in zip(measured, spreads)], [s["high"] - m for m, s in zip(measured, spreads)]]
    right.errorbar(gammas, measured, yerr=errors, marker="o", capsize=3, label="measured (95% interval)")
    right.plot(gammas, [g["predicted_speedup"] for g in sweep], marker="x", linestyle="--", label="predicted (α, c)")
    right.axhline(1.0, color="grey", linewidth=0.8)
    right.set_xlabel("γ (num_speculative_tokens)")
    right.set_ylabel("speedup ×")
    right.legend()
    save_figure(fig, path)


def plot_load(path: Path, load: dict) -> None:
    """Throughput (output tokens/s) against per-request speed (1 ÷ median TPOT), one point per concurrency, with and
    without the drafter: the curve serving guides draw to choose a load."""
    fig, ax = pyplot().subplots(figsize=(5, 3.5))
    for side, label in (("speculative", "with the drafter"), ("no_speculation", "without")):
        x = [1e3 / lv[side]["tpot_ms"]["median"] for lv in load["levels"]]
        y = [lv[side]["output_tokens_per_second"] for lv in load["levels"]]
        ax.plot(x, y, marker="o", label=label)
        for lv, xi, yi in zip(load["levels"], x, y):
            ax.annotate(str(lv["concurrency"]), (xi, yi), textcoords="offset points", xytext=(4, 4), fontsize=8)
    ax.set_xlabel("per-request speed (tokens/s per request, 1 / median TPOT)")
    ax.set_ylabel("throughput (output tokens/s)")
    ax.set_title("concurrent requests beside each point", fontsize=8)
    ax.legend()
    save_figure(fig, path)
