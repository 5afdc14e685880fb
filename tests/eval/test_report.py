"""The report's figures per category (rows with a `category`: Spec-Bench's six, MT-Bench's eight): each category's
τ, α and speed-up come from its own batches, and its counters sum over the categories to the totals."""

import json

import pytest

from eval.config import EvalConfig
from eval.measure import batch_bounds
from eval.metrics import Tally, decode_figures
from eval.proposers.draft_lm import DraftLMProposer
from eval.report import read_samples
from eval.report_markdown import render_markdown
from eval.run import evaluate
from eval.speculative import DecodeStats

COUNTERS = ("steps", "drafting_steps", "proposed_draft_tokens", "accepted_draft_tokens")


def test_a_batch_ends_where_the_category_changes():
    assert batch_bounds(["a", "a", "a", "b", None, None], 2) == [(0, 2), (2, 3), (3, 4), (4, 6)]
    assert batch_bounds([None] * 5, 2) == [(0, 2), (2, 4), (4, 5)]  # no categories: batches as before


def test_per_category_figures_sum_to_the_totals(tmp_path, target, weak_draft, tokenizer, prompt_ids):
    categories = ["writing", "writing", "qa", "qa", "qa", None]
    cfg = EvalConfig(num_prompts=6, max_new_tokens=8, num_speculative_tokens=3, gamma_sweep=[], batch_size=2)
    cfg.warmup_prompts = 0
    proposer = DraftLMProposer(weak_draft, len(tokenizer))
    names = {"target": "toyworld:micro", "drafter": "weak", "kind": "draft_lm"}
    eos = {tokenizer.eos_token_id}
    report = evaluate(
        target,
        proposer,
        prompt_ids,
        cfg,
        eos,
        len(tokenizer),
        names,
        out_dir=tmp_path,
        progress=False,
        categories=categories,
    )
    per = report["categories"]
    assert list(per) == ["writing", "qa", "(none)"] and [c["prompts"] for c in per.values()] == [2, 3, 1]
    for key in COUNTERS:
        assert sum(c[key] for c in per.values()) == report[key], key
    samples = read_samples(tmp_path / "eval_samples.jsonl")
    assert sum(c["new_tokens"] for c in per.values()) == sum(len(s["speculative_ids"]) for s in samples)
    for c in per.values():
        assert (
            c["tau"] == c["new_tokens"] / c["steps"]
            and c["alpha"] == c["accepted_draft_tokens"] / c["proposed_draft_tokens"]
        )
        assert c["speedup_spread"]["low"] <= c["speedup"] <= c["speedup_spread"]["high"]  # its point, inside
    assert report["seconds_per_step"]["prefill"] > 0  # timed apart from the loop
    assert 0 < report["prefill_share"] < 1 and report["decode_speedup"] > 0  # the baseline's prefill, timed apart too
    assert "| qa | 3 |" in render_markdown(report) and "plain decoding pays it too" in render_markdown(report)
    assert json.loads((tmp_path / "eval_report.json").read_text())["categories"] == per
    plain = evaluate(target, proposer, prompt_ids[:2], cfg, eos, len(tokenizer), names, progress=False)
    assert plain["categories"] == {} and "Per category" not in render_markdown(plain)


def test_the_step_time_parts_add_up_to_the_wall_time():
    """Drafting, the target's forward, accept/cache, the prompts' prefill and the loop's rest: each is its own
    share of a step, so a report can say how much of a short answer's time no drafter can save."""
    stats = DecodeStats(accept_counts=[1, 0, 2, 1], draft_seconds=1.0, target_seconds=2.0, verify_seconds=0.5)
    stats.target_forwards, stats.proposed_tokens, stats.prefill_seconds = 4, 8, 1.5
    per_step = decode_figures(Tally(stats, seconds=6.0, tokens=8), Tally(seconds=8.0, tokens=8), 2, True)[
        "seconds_per_step"
    ]
    assert per_step["prefill"] == pytest.approx(1.5 / 4) and per_step["other"] == pytest.approx(1.0 / 4)
    assert sum(per_step.values()) * 4 == pytest.approx(6.0)


def test_verification_is_priced_against_a_plain_step_with_its_prefill_apart():
    """v compares a verification forward with a plain decoding step, not with a step plus a share of the prompts'
    prefill; τ / (v + γ·c) then predicts the decoding speed-up, and the prefill's share turns it into the end to
    end one (a short answer's prefill hid a quarter of the gap on SmolLM2)."""
    stats = DecodeStats(accept_counts=[1, 1, 1, 1], draft_seconds=1.0, target_seconds=2.0, prefill_seconds=1.5)
    stats.target_forwards, stats.proposed_tokens = 4, 8
    plain = Tally(DecodeStats(prefill_seconds=2.0), seconds=8.0, tokens=8)  # 0.75 s per plain step after prefill
    figures = decode_figures(Tally(stats, seconds=6.0, tokens=8), plain, 2, True)
    assert figures["verify_cost"] == pytest.approx(0.5 / 0.75)
    assert figures["draft_cost_per_step"] == pytest.approx(1 / 3)
    assert figures["predicted_speedup_from_tau"] == pytest.approx(2.0)  # τ 2 / (v + γc = 1)
    assert figures["decode_speedup"] == pytest.approx((8 / 4.5) / (8 / 6))
    assert figures["speedup"] == pytest.approx(4 / 3)
    assert figures["prefill_share"] == pytest.approx(0.25)
    assert figures["predicted_speedup_end_to_end"] == pytest.approx(1 / (0.25 + 0.75 / 2.0))


def test_benchmarks_named_by_their_categories_get_figures_of_their_own(target, weak_draft, tokenizer, prompt_ids):
    """`mt_bench+humaneval` rows carry `mt_bench/<category>` and `humaneval`: the report adds one row per benchmark,
    by the categories' definitions over all its prompts, so its counters are its categories' sums."""
    categories = ["mt_bench/writing", "mt_bench/writing", "mt_bench/coding", "humaneval", "humaneval", "humaneval"]
    cfg = EvalConfig(num_prompts=6, max_new_tokens=8, num_speculative_tokens=3, gamma_sweep=[], batch_size=2)
    cfg.warmup_prompts = 0
    names = {"target": "toyworld:micro", "drafter": "weak", "kind": "draft_lm"}
    proposer = DraftLMProposer(weak_draft, len(tokenizer))
    report = evaluate(
        target,
        proposer,
        prompt_ids,
        cfg,
        {tokenizer.eos_token_id},
        len(tokenizer),
        names,
        progress=False,
        categories=categories,
    )
    workloads, per = report["workloads"], report["categories"]
    assert list(workloads) == ["mt_bench", "humaneval"] and [w["prompts"] for w in workloads.values()] == [3, 3]
    for key in (*COUNTERS, "new_tokens"):
        assert workloads["mt_bench"][key] == per["mt_bench/writing"][key] + per["mt_bench/coding"][key], key
        assert workloads["humaneval"][key] == per["humaneval"][key]
    assert workloads["mt_bench"]["tau"] == workloads["mt_bench"]["new_tokens"] / workloads["mt_bench"]["steps"]
    text = render_markdown(report)
    assert "## Per workload" in text and "| mt_bench | 3 |" in text and "| mt_bench/coding | 1 |" in text
    plain = evaluate(
        target,
        proposer,
        prompt_ids[:2],
        cfg,
        {tokenizer.eos_token_id},
        len(tokenizer),
        names,
        progress=False,
        categories=["writing", "qa"],
    )
    assert plain["workloads"] == {} and "Per workload" not in render_markdown(plain)


@pytest.mark.parametrize(
    ("given", "gamma", "sweep"),
    [
        ([], 2, []),  # the card's γ, one γ: the figure a user compares with the card's
        (["eval.num_speculative_tokens=5"], 5, []),  # asked for: another γ
        (["eval.gamma_sweep=[1,2,3]"], 2, [1, 2, 3]),  # the sweep on request
    ],
)
def test_python_m_eval_measures_a_published_drafter_at_its_cards_gamma(tmp_path, given, gamma, sweep):
    from eval.__main__ import _at_the_cards_gamma

    (tmp_path / "drafthub.json").write_text(
        json.dumps({"kind": "ngram", "eval": {"settings": {"num_speculative_tokens": 2}}})
    )
    settings = EvalConfig(num_speculative_tokens=5 if given and "num_spec" in given[0] else 4)
    settings.gamma_sweep = [1, 2, 3] if given and "sweep" in given[0] else EvalConfig().gamma_sweep
    _at_the_cards_gamma(settings, tmp_path, given)
    assert (settings.num_speculative_tokens, settings.gamma_sweep) == (gamma, sweep)
    unpublished = EvalConfig()
    _at_the_cards_gamma(unpublished, tmp_path / "nowhere", [])  # no card: the settings as given
    assert unpublished.num_speculative_tokens == 4 and unpublished.gamma_sweep == EvalConfig().gamma_sweep
