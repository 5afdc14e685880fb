"""DSpark and DFlash2 decoding through the engine: lossless chains (greedy, sampled, DSpark's adaptive length),
batched ragged rows, and fitted drafters accepted more than random ones."""

import pytest

from eval.proposers.dflash2 import DFlash2Proposer
from eval.proposers.dspark import DSparkProposer
from eval.sampling import SamplingParams
from eval.speculative import speculative_generate
from tests.eval.fitting import assert_first_tokens_follow_the_target

GREEDY = SamplingParams()
PROPOSERS = {"dspark": DSparkProposer, "dflash2": DFlash2Proposer}


@pytest.fixture(scope="module")
def fitted(target):
    from tests.eval.dflash_fit import fit_dflash2, fit_dspark

    return {"dspark": fit_dspark(target), "dflash2": fit_dflash2(target)}


def _generate(target, proposer, prompts, gamma, tokenizer, params=GREEDY):
    return speculative_generate(
        target, proposer, prompts, 40, gamma, params, eos_ids={tokenizer.eos_token_id}, vocab_size=len(tokenizer)
    )


@pytest.mark.parametrize("kind", sorted(PROPOSERS))
def test_greedy_decoding_equals_the_targets_and_a_fitted_drafter_is_accepted(
    kind, target, fitted, tokenizer, prompt_ids, greedy_reference
):
    proposer = PROPOSERS[kind](fitted[kind], len(tokenizer))
    assert proposer.max_num_speculative_tokens == (4 if kind == "dspark" else 3)  # block 4: DSpark drafts every slot
    out, stats = _generate(target, proposer, prompt_ids, 3, tokenizer)
    assert out == greedy_reference
    assert stats.draft_forwards == stats.target_forwards  # one block forward per step
    assert any(c > 0 for c in stats.accept_counts) and any(c < 3 for c in stats.accept_counts)
    batched, _ = _generate(target, proposer, prompt_ids[:3], 3, tokenizer)  # ragged rows
    assert batched == greedy_reference[:3]


def test_adaptive_length_is_lossless_and_drafts_fewer_tokens(target, fitted, tokenizer, prompt_ids, greedy_reference):
    fixed = _generate(target, DSparkProposer(fitted["dspark"], len(tokenizer)), prompt_ids, 4, tokenizer)[1]
    out, adaptive = _generate(target, DSparkProposer(fitted["dspark"], len(tokenizer), 0.3), prompt_ids, 4, tokenizer)
    assert out == greedy_reference
    assert sum(adaptive.draft_counts) < sum(fixed.draft_counts)  # the confidence head cut some blocks short


@pytest.mark.parametrize("kind", sorted(PROPOSERS))
def test_sampled_decoding_draws_from_the_target_distribution(kind, target, fitted, tokenizer, prompt_ids):
    assert_first_tokens_follow_the_target(
        target, PROPOSERS[kind](fitted[kind], len(tokenizer)), prompt_ids[1], len(tokenizer)
    )
