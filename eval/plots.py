"""The figures drawn beside a report (acceptance per draft position, the γ sweep, serving under load) and the
shared way to draw and save one (also the bake-off's and the registry's)."""

from __future__ import annotations

import os
from pathlib import Path


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
