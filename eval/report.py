"""Writing the eval outputs: eval_report.json, eval_samples.jsonl, report.md and a plot."""

from __future__ import annotations

import json
import os
from pathlib import Path


def _atomic_text(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def write_report(out_dir: str | Path, report: dict, samples: list[dict]) -> None:
    """Write all eval artifacts into out_dir; eval_report.json last, as the completion marker."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    _atomic_text(out / "eval_samples.jsonl", "".join(json.dumps(s) + "\n" for s in samples))
    _plot_acceptance(out / "acceptance.png", report["per_position_acceptance"])
    _atomic_text(out / "report.md", render_markdown(report))
    _atomic_text(out / "eval_report.json", json.dumps(report, indent=2))


def render_markdown(r: dict) -> str:
    s = r["settings"]
    rows = "\n".join(f"| {i + 1} | {a:.3f} |" for i, a in enumerate(r["per_position_acceptance"]))
    return f"""# Speculative decoding report

Drafter `{r['drafter']}` ({r['kind']}) on target `{r['target']}`; {s['num_prompts']} prompts,
{s['max_new_tokens']} new tokens each, γ = {s['num_speculative_tokens']}, {'greedy' if s['temperature'] <= 0 else f"temperature {s['temperature']}, top-p {s['top_p']}"}.

| metric | value |
|---|---|
| τ (mean accepted length, bonus included) | {r['tau']:.3f} |
| α (draft acceptance rate) | {r['alpha']:.3f} |
| speedup vs our KV-cached autoregressive decoding | {r['speedup']:.3f}× |
| predicted speedup (Leviathan et al. 2023) | {r['predicted_speedup']:.3f}× |
| cost ratio c (drafter s/token ÷ target s/forward) | {r['cost_ratio']:.3f} |
| speculative tokens/s | {r['tokens_per_second']['speculative']:.1f} |
| autoregressive tokens/s | {r['tokens_per_second']['autoregressive']:.1f} |
| lossless (greedy output == target greedy output) | {r['lossless']} ({r['lossless_prompts']}/{s['num_prompts']} prompts) |

## Per-position acceptance
Share of steps that accepted at least i draft tokens.

| i | acceptance |
|---|---|
{rows}

![per-position acceptance](acceptance.png)
"""


def _plot_acceptance(path: Path, per_position: list[float]) -> None:
    import matplotlib

    matplotlib.use("Agg")  # no display on servers
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(4, 3))
    ax.bar(range(1, len(per_position) + 1), per_position)
    ax.set_xlabel("draft position i")
    ax.set_ylabel("P(accepted ≥ i)")
    ax.set_ylim(0, 1)
    fig.tight_layout()
    tmp = path.with_name(f".{path.stem}.tmp.png")
    fig.savefig(tmp)
    plt.close(fig)
    os.replace(tmp, path)
