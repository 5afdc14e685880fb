"""Honest timing: every speed-up with its spread, and a flag when the machine was too noisy to trust it.

A wall-clock speed-up is a ratio of two throughputs measured side by side. One number hides how
much it varies from prompt to prompt and whether the machine was busy while it was taken (the same
drafter measured 1.6× on a quiet CPU and 0.8× beside two other jobs). So:

- each prompt (or batch of rows) gives its own ratio; the report keeps their median and a
  bootstrap interval of the aggregate speed-up over prompts;
- the baseline is decoded twice per prompt, before and after the speculative runs, and
  `baseline_drift` is the median relative gap between the two rates of the same prompt. The same
  work at the same place in the run takes the same time on a quiet machine; when it does not,
  something else competed for the hardware and the measurement is flagged noisy;
- an interval wider than `max_interval` (relative) is flagged too: too few prompts or too
  uneven a machine to say which γ is fastest.
"""

from __future__ import annotations

import platform
from pathlib import Path

import numpy as np
import torch

LEVEL = 0.95  # the interval's coverage
RESAMPLES = 2000  # bootstrap resamples (seeded: the same timings give the same interval)


def _rates(tokens, seconds) -> np.ndarray:
    return np.asarray(tokens, dtype=float) / np.maximum(np.asarray(seconds, dtype=float), 1e-12)


def contain(point: float, low: float, high: float) -> tuple[float, float]:
    """The interval widened to its own point estimate: a percentile bootstrap over a few skewed prompts can miss the
    point it is drawn around, and a report whose 0.59× lies outside "0.59–0.60×" reads as wrong."""
    return min(low, point), max(high, point)


def speedup_spread(
    spec_tokens: list[int], spec_seconds: list[float], base_tokens: list[int], base_seconds: list[float]
) -> dict:
    """Per-prompt speed-ups (speculative ÷ baseline tokens/s), their median, and the aggregate's interval.

    The inputs hold one entry per prompt (or batch of rows), the baseline's summed over its repeats.
    The interval is the percentile bootstrap of Σ tokens ÷ Σ seconds ratios over prompts resampled
    with replacement: how far the headline speed-up could move on another draw of the same prompts.
    """
    ratios = _rates(spec_tokens, spec_seconds) / _rates(base_tokens, base_seconds)
    n = len(ratios)
    rng = np.random.default_rng(0)
    picks = rng.integers(0, n, size=(RESAMPLES, n))
    st, ss = np.asarray(spec_tokens, float)[picks].sum(1), np.asarray(spec_seconds, float)[picks].sum(1)
    bt, bs = np.asarray(base_tokens, float)[picks].sum(1), np.asarray(base_seconds, float)[picks].sum(1)
    boot = (st / ss) / (bt / bs)
    tail = (1 - LEVEL) / 2 * 100
    low, high = contain(
        (sum(spec_tokens) / sum(spec_seconds)) / (sum(base_tokens) / sum(base_seconds)),
        float(np.percentile(boot, tail)),
        float(np.percentile(boot, 100 - tail)),
    )
    return {
        "median": float(np.median(ratios)),
        "low": low,
        "high": high,
        "level": LEVEL,
        "per_prompt": [round(float(r), 4) for r in ratios],
    }


def ratio_interval(numerators: list[float], denominators: list[float]) -> dict:
    """Σ numerators ÷ Σ denominators and its percentile bootstrap interval over prompts (or batches) resampled with
    replacement: τ's spread is tokens ÷ verification steps per prompt, as the speed-up's is tokens ÷ seconds."""
    num, den = np.asarray(numerators, float), np.asarray(denominators, float)
    picks = np.random.default_rng(0).integers(0, len(num), size=(RESAMPLES, len(num)))
    boot = num[picks].sum(1) / np.maximum(den[picks].sum(1), 1e-12)
    tail = (1 - LEVEL) / 2 * 100
    point = float(num.sum() / max(den.sum(), 1e-12))
    low, high = contain(point, float(np.percentile(boot, tail)), float(np.percentile(boot, 100 - tail)))
    return {"low": low, "high": high, "level": LEVEL}


def repeat_drift(first_tokens, first_seconds, second_tokens, second_seconds) -> float:
    """Median over prompts of |rate₁ − rate₂| ÷ their mean: how much the same decode's speed moved."""
    a, b = _rates(first_tokens, first_seconds), _rates(second_tokens, second_seconds)
    return float(np.median(np.abs(a - b) / ((a + b) / 2)))


def timing_verdict(
    drift: float, spread: dict, speedup: float, *, drift_tolerance: float, max_interval: float, device: torch.device
) -> dict:
    """{"noisy", "reasons", "baseline_drift", ...}: whether the speed-up may be trusted as measured."""
    width = (spread["high"] - spread["low"]) / speedup if speedup > 0 else float("inf")
    reasons = []
    if drift > drift_tolerance:
        reasons.append(
            f"the baseline's speed on the same prompt moved {drift:.0%} between repeats "
            f"(tolerance {drift_tolerance:.0%}): another job competed for the device"
        )
    if width > max_interval:
        reasons.append(
            f"the speed-up's {spread['level']:.0%} interval spans {width:.0%} of it (allowed {max_interval:.0%})"
        )
    return {
        "noisy": bool(reasons),
        "reasons": reasons,
        "baseline_drift": drift,
        "drift_tolerance": drift_tolerance,
        "interval_width": width,
        "max_interval": max_interval,
        "device_name": device_name(device),
    }


def device_name(device: torch.device) -> str:
    """What the timings were taken on, for the card: the GPU's name, or the CPU's model and threads."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    model = platform.processor() or platform.machine()
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        names = [ln.split(":", 1)[1].strip() for ln in cpuinfo.read_text().splitlines() if ln.startswith("model name")]
        model = names[0] if names else model
    return f"CPU {model}, {torch.get_num_threads()} threads"
