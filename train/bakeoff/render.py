"""A bake-off's comparison written: comparison.json, comparison.md (the table, the verdicts, a table per category)
and a plot per workload."""

from __future__ import annotations

import json
from pathlib import Path

from eval.plots import pyplot, save_figure
from heads.card import served_tau_text, speedup_text
from heads.families import get_family
from heads.formats import ENGINE_NAMES
from heads.formats.staging import atomic_write_text
from heads.load_card import break_even_short

OUT = "bakeoff"


def _free_vs_trained_line(verdict: dict | None, rows: list[dict]) -> str:
    if verdict is None:
        return "No comparison of trained and training-free drafters (the bake-off lacks one of the two)."
    by = {r["recipe"]: r for r in rows}
    free, trained = by[verdict["best_free"]], by[verdict["best_trained"]]
    named = {
        key: f"`{r['recipe']}` ({r['speedup']:.2f}×, τ {r['tau']:.2f})"
        for key, r in (("free", free), ("trained", trained))
    }
    tau = f"{verdict['tau_gain']:+.2f} in τ for the trained one"
    if verdict["outcome"] == "trained":
        return (
            f"**Training paid off here:** the best trained drafter, {named['trained']}, beats the best free one, "
            f"{named['free']}, by {verdict['speedup_gain']:.2f}× in speed-up ({tau})."
        )
    if verdict["outcome"] == "free":
        return (
            f"**Training did not pay off here:** the best free contender, {named['free']}, is "
            f"{1 / verdict['speedup_gain']:.2f}× as fast as the best trained drafter, {named['trained']} ({tau})."
        )
    return (
        f"**A tie in speed-up:** the best trained drafter, {named['trained']}, and the best free one, "
        f"{named['free']}, are within {verdict['tie']:.0%} of each other ({tau})."
    )


def write_comparison(out: Path, comparison: dict, show: bool = True) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for workload, result in comparison["workloads"].items():
        _plot(out / f"comparison_{workload}.png", result["contenders"])
    atomic_write_text(out / "comparison.md", render_markdown(comparison))
    atomic_write_text(out / "comparison.json", json.dumps(comparison, indent=2))
    if show:
        print(render_markdown(comparison))


def _table(rows: list[dict], served) -> list[str]:
    load = any(r.get("break_even") for r in rows)
    head = (
        "| recipe | drafter | γ | τ | α | c | drafter forwards/step | speed-up (95% interval) | v "
        "| decoding speed-up (τ/(v+γc)) | lossless | parameters | training | training data |"
        + (" served τ | served check | served speed-up (95% interval) |" if served else "")
        + (" break-even load (vllm serve) |" if load else "")
    )
    rule = (
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
        + ("---|---|---|" if served else "")
        + ("---|" if load else "")
    )
    return [head, rule] + [
        f"| {r['recipe']} | {r['kind']} | {r.get('gamma', '–')} | {r['tau']:.2f} | {r['alpha']:.3f} "
        f"| {r['cost_ratio']:.3f} "
        f"| {r['draft_forwards_per_step']:.1f} | {speedup_text(r)} | {_decoding(r)} "
        f"| {'yes' if r['lossless'] else 'NO'} | {r['parameters'] / 1e6:.2f} M | {_training(r)} "
        f"| {_data(r.get('training_data'))} |"
        + (
            f" {served_tau_text({'tau': r['served_tau'], 'ours_tau': r.get('served_ours_tau')})} "
            f"| {r['served_verdict'] or _not_served(r, _engine(served))} "
            f"| {speedup_text(r, 'served_speedup', 'served_speedup_spread')} |"
            if served
            else ""
        )
        + (f" {break_even_short({'break_even': r['break_even']} if r.get('break_even') else None)} |" if load else "")
        for r in rows
    ]


def _decoding(row: dict) -> str:
    """v, and the measured decoding speed-up beside τ / (v + γ·c); – for a row from before prefills were timed
    apart (its v priced a plain step with a share of the prefill)."""
    if row.get("decode_speedup") is None:
        return "– | –"
    return f"{row['verify_cost']:.2f} | {row['decode_speedup']:.2f}× ({row['predicted_speedup_from_tau']:.2f}×)"


def _training(row: dict) -> str:
    minutes = f"{row['train_seconds'] / 60:.1f} min"
    return minutes if row["trained"] or row["train_seconds"] else "none (0)"


def _data(data: dict | None) -> str:
    """Samples, source and policy, so a reader knows what budget produced a τ."""
    if not data:
        return "—"
    source = "" if data["source"] == "the target's answers" else f", {data['source']}"
    return f"{data['samples']} samples{source}, {data['policy'].replace('_', '-')}"


def _engine(served) -> str:
    """The comparison's served engine (comparisons older than the engine name held True, for vLLM)."""
    return "vllm" if served is True else served


def _not_served(row: dict, engine: str) -> str:
    family = get_family(row["kind"])
    return family.not_served(engine) or "—"


def render_markdown(comparison: dict) -> str:
    served = comparison["served_check"]
    s = comparison["settings"]
    # comparisons written before the reason was recorded: either
    why_not = comparison.get("served_check_reason") or "vLLM not installed, or bakeoff.serve=off"
    lines = [
        "# Drafter bake-off",
        "",
        f"Same target, same distilled data, same evaluation: {s['num_prompts']} prompts × "
        f"{s['max_new_tokens']} tokens, γ = {s['num_speculative_tokens']} (unless a row's γ says otherwise), "
        f"temperature {s['temperature']}, "
        f"tree {s['tree']}. Training-free contenders count their search (layer skipping) or nothing as training."
        + (
            f" Served τ: {ENGINE_NAMES.get(_engine(served))} serving each export (1 + accepted drafts per step)."
            if served
            else f" No served check ({why_not})."
        )
        + _training_spread(next(iter(comparison["workloads"].values()))["contenders"]),
    ]
    for workload, result in comparison["workloads"].items():
        best = result["recommended"]
        verdict = (
            f"**Recommended: `{best['recipe']}` ({best['kind']})** — {best['reason']}."
            if best
            else "**No contender qualifies** (none is lossless with an agreeing served check)."
        )
        how = f" (eval overrides: {', '.join(result['overrides'])})" if result["overrides"] else ""
        lines += [
            "",
            f"## Workload `{workload}`{how}",
            "",
            *_table(result["contenders"], served),
            "",
            verdict,
            "",
            _free_vs_trained_line(result["free_vs_trained"], result["contenders"]),
            "",
            *_category_table(result["contenders"], result.get("by_category") or {}),
            f"![{workload}](comparison_{workload}.png)",
        ]
    return "\n".join(lines + [""])


def _category_table(rows: list[dict], verdicts: dict) -> list[str]:
    """Speed-up and τ of every contender per category, and the one recommended there."""
    if not verdicts:
        return []
    names = list(verdicts)

    def cell(row: dict, name: str) -> str:
        figures = (row.get("categories") or {}).get(name)
        return f"{figures['speedup']:.2f}× (τ {figures['tau']:.2f})" if figures else "—"

    best = [f"`{v['recipe']}`" if v else "none" for v in verdicts.values()]
    return [
        "By category (speed-up, τ; each category's prompts alone):",
        "",
        "| recipe | " + " | ".join(names) + " |",
        "|---|" + "---|" * len(names),
        *(f"| {r['recipe']} | " + " | ".join(cell(r, n) for n in names) + " |" for r in rows),
        "| **recommended** | " + " | ".join(best) + " |",
        "",
    ]


def _training_spread(rows: list[dict]) -> str:
    """How equal the trained contenders' training times were (each recipe sizes its own steps)."""
    minutes = [r["train_seconds"] / 60 for r in rows if r["trained"]]
    if len(minutes) < 2:
        return ""
    return f" The trained contenders trained {min(minutes):.1f}–{max(minutes):.1f} min each (the `training` column)."


def _num(x) -> str:
    return "—" if x is None else f"{x:.2f}"


def _plot(path: Path, rows: list[dict]) -> None:
    panels = [
        ("tau", "τ (tokens / target forward)", 1),
        ("alpha", "α (acceptance rate)", 1),
        ("speedup", "speed-up ×", 1),
        ("parameters", "parameters (M)", 1e-6),
        ("train_seconds", "training (min)", 1 / 60),
    ]
    fig, axes = pyplot().subplots(1, len(panels), figsize=(3 * len(panels), 3))
    names = [r["recipe"] for r in rows]
    for ax, (key, label, scale) in zip(axes, panels):
        ax.bar(names, [r[key] * scale for r in rows], color=[f"C{i % 10}" for i in range(len(rows))])
        ax.set_title(label, fontsize=9)
        ax.tick_params(axis="x", labelrotation=30, labelsize=8)
    save_figure(fig, path)
