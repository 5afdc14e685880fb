"""Drafters measured together (a bake-off's contenders): one interleaved run, the plain decodes once for all, and
each drafter's figures the same as when it is measured alone."""

from dataclasses import replace

import pytest

import eval.measure
from eval.config import EvalConfig
from eval.errors import EvalError
from eval.proposers.draft_lm import DraftLMProposer
from eval.proposers.ngram import NgramProposer
from eval.run import Entry, evaluate, evaluate_together

CFG = EvalConfig(num_prompts=4, max_new_tokens=10, num_speculative_tokens=3, gamma_sweep=[], warmup_prompts=1)
SAME = ("tau", "alpha", "steps", "accepted_draft_tokens", "proposed_draft_tokens", "per_position_acceptance")


def _contenders(target, weak_draft, tokenizer):
    lookup = NgramProposer(prompt_lookup_min=1, prompt_lookup_max=3, vocab_size=len(tokenizer))
    return [
        (DraftLMProposer(weak_draft, len(tokenizer)), CFG, {"kind": "draft_lm"}),
        (lookup, replace(CFG, num_speculative_tokens=2, gamma_sweep=[4]), {"kind": "ngram"}),  # its own γ plan
    ]


def test_drafters_measured_together_share_one_baseline_and_keep_their_own_figures(
    monkeypatch, target, weak_draft, tokenizer, prompt_ids
):
    eos, vocab = {tokenizer.eos_token_id}, len(tokenizer)
    contenders = _contenders(target, weak_draft, tokenizer)
    alone = [evaluate(target, p, prompt_ids, cfg, eos, vocab, names, progress=False) for p, cfg, names in contenders]
    plain_decodes = []
    real = eval.measure.autoregressive_generate
    monkeypatch.setattr(
        eval.measure, "autoregressive_generate", lambda *a, **k: plain_decodes.append(1) or real(*a, **k)
    )
    entries = [Entry(p, cfg, names) for p, cfg, names in contenders]
    together = evaluate_together(target, entries, prompt_ids, eos, vocab, progress=False)
    # warm-up once, then each of the 4 batches before and after both drafters: as many as one drafter alone costs
    assert len(plain_decodes) == 1 + 2 * CFG.num_prompts
    for one, joint, other in zip(alone, together, ("ngram", "draft_lm")):
        assert joint["lossless"] and joint["lossless_prompts"] == CFG.num_prompts
        assert {k: joint[k] for k in SAME} == {k: one[k] for k in SAME}  # greedy: the same steps, alone or not
        assert joint["shared_baseline_with"] == [other] and "shared_baseline_with" not in one
        spread = joint["tau_spread"]  # τ's interval over the prompts: the same steps, the same interval
        assert (
            spread == one["tau_spread"] and spread["low"] <= joint["tau"] <= spread["high"] and spread["level"] == 0.95
        )
    assert [r["settings"]["num_speculative_tokens"] for r in together] == [3, 2]
    assert [len(r["gamma_sweep"]) for r in together] == [0, 2]  # the lookup's sweep: γ 2 and 4
    ar = [r["tokens_per_second"]["autoregressive"] for r in together]
    assert ar[0] == ar[1]  # one baseline: both speed-ups over the same plain decodes


@pytest.mark.parametrize("setting", ["max_new_tokens", "num_prompts", "temperature"])
def test_drafters_that_disagree_on_the_baseline_are_refused(setting, target, weak_draft, tokenizer, prompt_ids):
    (one, cfg, names), (other, other_cfg, other_names) = _contenders(target, weak_draft, tokenizer)
    changed = replace(other_cfg, **{setting: getattr(other_cfg, setting) + 1})
    entries = [Entry(one, cfg, names), Entry(other, changed, other_names)]
    with pytest.raises(EvalError, match=f"share one baseline, but eval.{setting} is .* measure them apart"):
        evaluate_together(target, entries, prompt_ids, {tokenizer.eos_token_id}, len(tokenizer), progress=False)
