"""DFlash decoding through the engine: lossless block chains, batched rows, a fitted drafter helps."""

import pytest
import torch

from eval.proposers.dflash import DFlashProposer
from eval.sampling import SamplingParams
from eval.speculative import speculative_generate
from tests.eval.fitting import assert_first_tokens_follow_the_target

GREEDY = SamplingParams()


@pytest.fixture(scope="module")
def drafter(target):
    from tests.eval.dflash_fit import fit_dflash

    return fit_dflash(target)


def _generate(target, proposer, prompts, gamma, tokenizer, params=GREEDY):
    return speculative_generate(
        target, proposer, prompts, 40, gamma, params, eos_ids={tokenizer.eos_token_id}, vocab_size=len(tokenizer)
    )


def test_greedy_dflash_equals_target_greedy(target, drafter, tokenizer, prompt_ids, greedy_reference):
    proposer = DFlashProposer(drafter, len(tokenizer))
    assert proposer.max_num_speculative_tokens == 3 and proposer.tree_depth is None
    accepted = []
    for gamma in (1, 3):
        out, stats = _generate(target, proposer, prompt_ids, gamma, tokenizer)
        assert out == greedy_reference
        assert stats.draft_forwards == stats.target_forwards  # one drafter forward per step, whatever γ
        accepted += stats.accept_counts
    assert any(c > 0 for c in accepted) and any(c < 3 for c in accepted)  # both paths ran
    batched, _ = _generate(target, proposer, prompt_ids[:3], 3, tokenizer)  # ragged rows
    assert batched == greedy_reference[:3]


def test_a_fitted_drafter_accepts_more_than_a_random_one(target, drafter, tokenizer, prompt_ids):
    from heads.config import DFlashConfig
    from heads.dflash import DFlashDrafter
    from tests.eval.dflash_fit import LAYER_IDS, MASK

    torch.manual_seed(1)
    random = DFlashDrafter.from_target(DFlashConfig(layer_ids=LAYER_IDS, block_size=4), target, MASK).eval()
    accepted = []  # mean accepted drafts per step
    for d in (drafter, random):
        _, stats = _generate(target, DFlashProposer(d, len(tokenizer)), prompt_ids, 3, tokenizer)
        accepted.append(sum(stats.accept_counts) / len(stats.accept_counts))
    assert accepted[0] > accepted[1] + 0.1, accepted


def test_sampled_dflash_draws_from_the_target_distribution(target, drafter, tokenizer, prompt_ids):
    assert_first_tokens_follow_the_target(
        target, DFlashProposer(drafter, len(tokenizer)), prompt_ids[1], len(tokenizer)
    )
