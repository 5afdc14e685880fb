"""Honest timing: spreads, the noisy-machine flag, and what the report and the card then say."""

import time

import numpy as np
import pytest

import eval.measure
from eval.config import EvalConfig
from eval.proposers.draft_lm import DraftLMProposer
from eval.report_markdown import render_markdown
from eval.run import evaluate
from eval.serving.load_figures import level_figures
from eval.timing import ratio_interval, repeat_drift, speedup_spread, timing_verdict
from heads.card import render_model_card, speed_warnings, speedup_text


def test_spread_keeps_per_prompt_ratios_their_median_and_an_interval_around_the_aggregate():
    spec_tokens, spec_seconds = [64, 64, 32, 64, 64, 48], [0.40, 0.50, 0.20, 0.45, 0.30, 0.35]
    base_tokens, base_seconds = [128, 128, 64, 128, 128, 96], [1.20, 1.10, 0.50, 1.30, 0.90, 0.80]
    spread = speedup_spread(spec_tokens, spec_seconds, base_tokens, base_seconds)
    ratios = [(st / ss) / (bt / bs) for st, ss, bt, bs in zip(spec_tokens, spec_seconds, base_tokens, base_seconds)]
    assert spread["per_prompt"] == [round(r, 4) for r in ratios]
    assert spread["median"] == pytest.approx(float(np.median(ratios)))
    aggregate = (sum(spec_tokens) / sum(spec_seconds)) / (sum(base_tokens) / sum(base_seconds))
    assert spread["low"] < aggregate < spread["high"] and spread["level"] == 0.95
    assert min(ratios) <= spread["low"] and spread["high"] <= max(ratios)
    assert speedup_spread(spec_tokens, spec_seconds, base_tokens, base_seconds) == spread  # seeded: reproducible
    same = speedup_spread([10] * 4, [1.0] * 4, [20] * 4, [4.0] * 4)  # every prompt 2.0×
    assert same["low"] == same["high"] == same["median"] == pytest.approx(2.0)


def test_drift_is_the_median_move_of_the_same_decode_between_repeats():
    assert repeat_drift([10, 10, 10], [1, 2, 3], [10, 10, 10], [1, 2, 3]) == 0.0
    # one prompt of three twice as slow the second time: the median ignores it; two of three do not
    assert repeat_drift([10, 10, 10], [1, 1, 1], [10, 10, 10], [1, 1, 2]) == 0.0
    assert repeat_drift([10, 10, 10], [1, 1, 1], [10, 10, 10], [1, 2, 2]) == pytest.approx(5 / 7.5)


def test_the_verdict_flags_drift_and_a_wide_interval_and_says_why():
    spread = {"low": 1.2, "high": 1.4, "level": 0.95}
    quiet = timing_verdict(0.02, spread, 1.3, drift_tolerance=0.1, max_interval=0.5, device=_CPU)
    assert not quiet["noisy"] and quiet["reasons"] == [] and quiet["device_name"].startswith("CPU ")
    busy = timing_verdict(0.4, spread, 1.3, drift_tolerance=0.1, max_interval=0.5, device=_CPU)
    assert busy["noisy"] and busy["reasons"] == [
        "the baseline's speed on the same prompt moved 40% between repeats (tolerance 10%): "
        "another job competed for the device"
    ]
    wide = timing_verdict(
        0.0, {"low": 0.6, "high": 1.4, "level": 0.95}, 1.0, drift_tolerance=0.1, max_interval=0.5, device=_CPU
    )
    assert wide["noisy"] and wide["reasons"] == ["the speed-up's 95% interval spans 80% of it (allowed 50%)"]


_CPU = __import__("torch").device("cpu")


def _measure(target, weak_draft, tokenizer, prompt_ids, **settings):
    cfg = EvalConfig(
        num_prompts=4,
        max_new_tokens=24,
        num_speculative_tokens=3,
        gamma_sweep=[1, 2, 3, 5],
        warmup_prompts=0,
        **settings,
    )
    names = {"target": "toyworld:micro", "drafter": "weak", "kind": "draft_lm"}
    proposer = DraftLMProposer(weak_draft, len(tokenizer))
    return evaluate(target, proposer, prompt_ids, cfg, {tokenizer.eos_token_id}, len(tokenizer), names, progress=False)


def test_a_slowed_baseline_repeat_is_flagged_and_gamma_falls_back_to_the_prediction(
    target, weak_draft, tokenizer, prompt_ids, monkeypatch
):
    """Another job competing for the CPU, injected: every second baseline decode takes four times as long.

    Four, not two: the machine's own noise moves the unslowed decodes too; a doubling (drift 0.67) measured 0.44
    once on a busy CI runner, a quadrupling gives drift 1.2."""
    real, calls = eval.measure.autoregressive_generate, []

    def contended(*args, **kwargs):
        t0 = time.perf_counter()
        out = real(*args, **kwargs)
        calls.append(None)
        if len(calls) % 2 == 0:  # the repeat after the speculative runs
            time.sleep(3 * (time.perf_counter() - t0))
        return out

    monkeypatch.setattr(eval.measure, "autoregressive_generate", contended)
    report = _measure(target, weak_draft, tokenizer, prompt_ids)
    timing = report["timing"]
    assert len(calls) == 2 * 4  # each prompt's baseline, before and after the speculative runs
    assert timing["noisy"] and timing["baseline_drift"] > 0.5
    assert "moved" in timing["reasons"][0] and "another job competed" in timing["reasons"][0]
    predicted = max(report["gamma_sweep"], key=lambda row: row["predicted_speedup_from_tau"])
    assert report["recommended_num_speculative_tokens"] == predicted["num_speculative_tokens"]
    assert report["recommendation_basis"] == "predicted from τ and cost (timing was noisy)"
    assert report["engine"]["path"] == "dynamic" and "CPU" in report["engine"]["reason"]
    assert len(report["speedup_spread"]["per_prompt"]) == 4
    assert all("speedup_spread" in row and "per_prompt" not in row["speedup_spread"] for row in report["gamma_sweep"])
    assert "⚠️ The timing was noisy (the baseline's speed on the same prompt moved" in render_markdown(report)
    card = render_model_card(
        {"eval": report, "target": {"name_or_path": "toyworld:micro"}, "kind": "draft_lm", "model_name": "weak"},
        library="transformers",
        usage="",
        details="",
        gamma=3,
    )
    assert "> ⚠️ The timing was noisy" in card and f"| {speedup_text(report)} |" in card
    assert f"Timed on {timing['device_name']}." in card
    assert "(predicted from τ and cost (timing was noisy))" in card


def test_speed_warnings_name_slow_drafters_and_slow_serving_only():
    quiet = {"noisy": False, "device_name": "GPU X"}
    assert speed_warnings({"speedup": 1.4, "timing": quiet}) == []
    assert speed_warnings({"speedup": 0.8, "timing": quiet}) == [
        "Measured speed-up 0.80× on GPU X: speculative decoding with this drafter was slower than plain decoding there."
    ]
    served = {"speedup": 1.4, "timing": quiet, "served": {"speedup": 0.9}}
    assert speed_warnings(served) == ["Served by vLLM the speed-up was 0.90×: slower than vLLM without speculation."]
    assert speedup_text({"speedup": 1.5}) == "1.50× (no interval recorded; re-run `python -m eval` to measure one)"


def test_every_interval_holds_its_own_point_estimate_even_on_a_skewed_handful_of_prompts():
    """The percentile bootstrap can miss the point it is drawn around when a few prompts are skewed; the report's
    interval is widened to it, for the decoding speed-up, the served one and both of a load level's."""
    rng = np.random.default_rng(7)
    for _ in range(300):
        n = int(rng.integers(1, 6))
        st, bt = rng.integers(1, 200, n).tolist(), rng.integers(1, 200, n).tolist()
        ss, bs = rng.lognormal(0, 1.5, n).tolist(), rng.lognormal(0, 1.5, n).tolist()
        spread = speedup_spread(st, ss, bt, bs)
        point = (sum(st) / sum(ss)) / (sum(bt) / sum(bs))
        assert spread["low"] <= point <= spread["high"]
        runs = [_load_result(rng, n), _load_result(rng, n)]
        level = level_figures(1, runs[:1], runs[1:])
        for key in ("throughput_speedup", "tpot_speedup"):
            interval = level[f"{key}_interval"]
            assert interval["low"] <= level[key] <= interval["high"], key


def _load_result(rng, n: int) -> dict:
    tokens = rng.integers(2, 64, n).tolist()
    ttfts = rng.lognormal(-3, 1, n).tolist()
    latencies = [t + rng.lognormal(0, 1.5) for t in ttfts]
    return {"output_lens": tokens, "ttfts": ttfts, "latencies": latencies, "total_output_tokens": sum(tokens),
            "duration": float(rng.uniform(0.5, 1.5) * max(latencies)), "completed": n, "failed": 0}  # fmt: skip


def test_taus_interval_is_the_bootstrap_of_tokens_over_steps_across_prompts():
    same = ratio_interval([12, 24, 36], [6, 12, 18])  # every prompt at τ 2: no spread
    assert (same["low"], same["high"]) == (2.0, 2.0)
    spread = ratio_interval([10, 40], [10, 10])  # τ 1 and τ 4: resampling reaches both ends, the point inside
    assert spread["low"] == 1.0 and spread["high"] == 4.0 and spread["level"] == 0.95
