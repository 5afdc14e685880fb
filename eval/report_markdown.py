"""An eval report as report.md: the headline figures, the γ sweep, the figures per category and workload, the served
checks and the timing's verdict."""

from __future__ import annotations

from heads.card import served_engine, speed_warnings, speedup_text, timing_device
from heads.load_card import load_section


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
