"""EAGLE-3 decoding through the engine: lossless chains and EAGLE-2 dynamic trees."""

import pytest
import torch

from eval.eagle_proposer import EagleProposer
from eval.sampling import SamplingParams, probs_from_logits
from eval.speculative import autoregressive_generate, speculative_generate

GREEDY = SamplingParams()


@pytest.fixture(scope="module")
def drafter(target):
    from tests.eval.eagle_fit import fit_eagle

    return fit_eagle(target)


@pytest.fixture(scope="module")
def reference(target, tokenizer, prompt_ids):
    return autoregressive_generate(target, prompt_ids, 40, GREEDY, {tokenizer.eos_token_id}, len(tokenizer))


@pytest.mark.parametrize("tree", [None, {"depth": 4, "top_k": 3, "total_tokens": 8}, {"depth": 3, "top_k": 2, "total_tokens": 20}], ids=["chain", "dynamic_tree", "whole_tree"])
def test_greedy_eagle_equals_target_greedy(target, drafter, tokenizer, prompt_ids, reference, tree):
    proposer = EagleProposer(drafter, len(tokenizer), tree)
    accepted = []
    for gamma in (1, 4) if tree is None else (0,):
        out, stats = speculative_generate(target, proposer, prompt_ids, 40, gamma, GREEDY, {tokenizer.eos_token_id}, len(tokenizer))
        assert out == reference
        accepted += stats.accept_counts
    depth = 4 if tree is None else tree["depth"]
    assert any(c > 0 for c in accepted) and any(c < depth for c in accepted)  # both paths ran
    batched, _ = speculative_generate(target, proposer, prompt_ids[:3], 40, 3, GREEDY, {tokenizer.eos_token_id}, len(tokenizer))
    assert batched == reference[:3]


def test_sampled_eagle_chain_draws_from_the_target_distribution(target, drafter, tokenizer, prompt_ids):
    params = SamplingParams(temperature=1.0, top_k=40)
    ids = prompt_ids[1]
    p = probs_from_logits(target(input_ids=torch.tensor([ids])).logits[0, -1, : len(tokenizer)], params)
    proposer = EagleProposer(drafter, len(tokenizer))
    gen = torch.Generator().manual_seed(0)
    draws, counts = 1500, torch.zeros_like(p)
    for _ in range(draws):
        (out,), _ = speculative_generate(target, proposer, [ids], 1, 2, params, set(), len(tokenizer), gen)
        counts[out[0]] += 1
    top = p.topk(5).indices
    assert torch.all((counts[top] / draws - p[top]).abs() <= 5 * torch.sqrt(p[top] * (1 - p[top]) / draws))
    assert counts[p == 0].sum() == 0
