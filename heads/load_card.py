"""The "Serving under load" section as users read it: the eval report, the model card and the registry's drafter
page print the same table and break-even line from a report's `serving_load` section (eval/serving/load.py)."""

from __future__ import annotations

from heads.formats.fingerprint import LOAD_PLOT_FILE as LOAD_PLOT  # throughput vs per-request speed


def _interval(value: float, spread: dict) -> str:
    return f"{value:.2f}× ({spread['low']:.2f}–{spread['high']:.2f}×)"


def break_even_text(load: dict | None) -> str:
    """'pays up to 4 concurrent requests, not at 16' (vLLM …), or '–' where no load sweep ran."""
    if not load:
        return "–"
    return load["break_even"]["verdict"]


def break_even_short(load: dict | None) -> str:
    """The leaderboard's cell: '≤ 4', 'all (≤ 16)', 'never', '–'."""
    if not load:
        return "–"
    be = load["break_even"]
    if not be.get("judged", True):
        return "not judged"
    if be["concurrency"] is None:
        return "never"
    return f"all (≤ {be['concurrency']})" if be["between"][1] is None else f"≤ {be['concurrency']}"


def load_table(load: dict) -> str:
    """One row per concurrency: tokens/s and TPOT with / without the drafter, the speed-ups, TTFT, served τ."""
    rows = []
    for lv in load["levels"]:
        s, b = lv["speculative"], lv["no_speculation"]
        tau = "–" if lv["served_tau"] is None else f"{lv['served_tau']:.2f}"
        cap = lv.get("capped_at")
        level = f"{lv['concurrency']} (the server ran ≤ {cap} at once)" if cap else str(lv["concurrency"])
        pays = "not judged (timed the queue)" if cap else ("yes" if lv["pays"] else "no")
        rows.append(
            f"| {level} | {s['output_tokens_per_second']:.1f} / {b['output_tokens_per_second']:.1f} "
            f"| {_interval(lv['throughput_speedup'], lv['throughput_speedup_interval'])} "
            f"| {s['tpot_ms']['median']:.1f} ({s['tpot_ms']['p90']:.1f}) / {b['tpot_ms']['median']:.1f} "
            f"({b['tpot_ms']['p90']:.1f}) | {_interval(lv['tpot_speedup'], lv['tpot_speedup_interval'])} "
            f"| {s['ttft_ms']['median']:.0f} / {b['ttft_ms']['median']:.0f} | {tau} | {pays} |"
        )
    return (
        "| concurrency | tokens/s with / without | throughput speed-up (95%) | TPOT ms, median (p90), with / without "
        "| TPOT speed-up (95%) | TTFT ms with / without | served τ | pays |\n|---|---|---|---|---|---|---|---|\n"
        + "\n".join(rows)
    )


def load_section(load: dict | None, *, plot: bool = True, heading: bool = True) -> str:
    """The whole section: what was measured, the table, the break-even concurrency, the plot (heading: its own
    "## Serving under load" title; a page that titles it itself leaves it out)."""
    if not load:
        return ""
    where = "a server already deployed" if load["server"] == "external" else "`vllm serve` started by drafthub"
    text = ("\n## Serving under load\n\n" if heading else "\n") + (
        f"vLLM {load['engine_version']} ({where}), γ = {load['num_speculative_tokens']}, "
        f"driven by `{load['load_generator']}` at each concurrency (closed loop, {load['prompts']} held-out prompts, "
        f"{load['max_new_tokens']} new tokens each, temperature {load['temperature']}), with and without the "
        f"drafter, interleaved, {load['repeats']} repeat(s).\n\n"
        f"**Break-even: {load['break_even']['verdict']}.**\n\n{load_table(load)}\n"
    )
    return text + (f"\n![throughput vs per-request speed, with and without the drafter]({LOAD_PLOT})\n" if plot else "")
