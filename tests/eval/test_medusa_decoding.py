"""Medusa decoding through the engine: lossless chains and trees, greedy and sampled."""

import pytest
import torch

from distill.features.capture import final_hidden_states
from eval.proposers.medusa import MedusaProposer
from eval.sampling import SamplingParams
from eval.speculative import Acceptance, speculative_generate
from heads.config import MedusaConfig
from heads.families import read_export
from heads.medusa import MedusaHeads
from heads.medusa_tree import build_tree, full_tree
from tests.eval.fitting import assert_first_tokens_follow_the_target

GREEDY = SamplingParams()
TREE = build_tree([[0.5, 0.2, 0.1], [0.3, 0.15, 0.1], [0.2, 0.1, 0.05]], 14)


@pytest.fixture(scope="module")
def heads(target):
    """Heads fitted for a few steps so they agree with the target sometimes (both accept and reject paths run)."""
    from tests.eval.medusa_fit import fit_heads

    return fit_heads(target, MedusaConfig(num_heads=3))


def test_engine_features_are_what_the_lm_head_reads(target, prompt_ids):
    """The engine hands Medusa hidden_states[-1]; training reads the lm_head's input: one tensor."""
    ids = torch.tensor([prompt_ids[0]])
    hidden, _ = final_hidden_states(target, ids)
    torch.testing.assert_close(target(ids, output_hidden_states=True).hidden_states[-1], hidden)


@pytest.mark.parametrize("tree", [None, TREE, full_tree([2, 2, 1])], ids=["chain", "calibrated_tree", "full_tree"])
def test_greedy_medusa_equals_target_greedy(target, heads, tokenizer, prompt_ids, greedy_reference, tree):
    proposer = MedusaProposer(heads, len(tokenizer), tree)
    accepted = []
    for gamma in (1, 3) if tree is None else (0,):
        out, stats = speculative_generate(
            target, proposer, prompt_ids, 40, gamma, GREEDY, eos_ids={tokenizer.eos_token_id}, vocab_size=len(tokenizer)
        )
        assert out == greedy_reference
        accepted += stats.accept_counts
    depth = 3 if tree is None else max(map(len, tree))
    assert any(c > 0 for c in accepted) and any(c < depth for c in accepted)
    batched, _ = speculative_generate(
        target, proposer, prompt_ids[:3], 40, 2, GREEDY, eos_ids={tokenizer.eos_token_id}, vocab_size=len(tokenizer)
    )
    assert batched == greedy_reference[:3]


def test_chains_longer_than_the_heads_are_refused(target, heads, tokenizer, prompt_ids):
    with pytest.raises(ValueError, match="at most 3 tokens"):
        speculative_generate(
            target,
            MedusaProposer(heads, len(tokenizer)),
            prompt_ids[:1],
            8,
            4,
            GREEDY,
            eos_ids=set(),
            vocab_size=len(tokenizer),
        )


@pytest.mark.parametrize("tree", [None, full_tree([3, 1])], ids=["chain", "tree"])
def test_sampled_medusa_draws_from_the_target_distribution(target, heads, tokenizer, prompt_ids, tree):
    """The first sampled token follows the target's warped p (exact rejection sampling)."""
    assert_first_tokens_follow_the_target(
        target, MedusaProposer(heads, len(tokenizer), tree), prompt_ids[1], len(tokenizer)
    )


def test_typical_acceptance_uses_the_top_k_candidates(target, heads, tokenizer, prompt_ids):
    proposer = MedusaProposer(heads, len(tokenizer), TREE, topk_candidates=True)
    (out,), stats = speculative_generate(
        target,
        proposer,
        [prompt_ids[0]],
        30,
        0,
        SamplingParams(temperature=0.7),
        eos_ids=set(),
        vocab_size=len(tokenizer),
        generator=torch.Generator().manual_seed(0),
        acceptance=Acceptance(rule="typical"),
    )
    assert len(out) == 30 and stats.target_forwards < 30


def test_sampled_tree_nodes_come_from_their_own_head_in_any_node_order(target, tokenizer):
    """Each node is an independent draw from its depth's head, and draft_probs is that head's q."""
    heads = MedusaHeads.from_target(MedusaConfig(num_heads=2), target)
    with torch.no_grad():  # head k puts all its mass on token 10 + k
        for k, lm_head in enumerate(heads.lm_heads):
            lm_head.weight.zero_()
            lm_head.weight[10 + k] = 1000.0
    tree = [(0,), (0, 0), (1,), (1, 0)]  # parents first, depths interleaved
    proposer = MedusaProposer(heads, len(tokenizer), tree)
    proposer.reset(2, torch.device("cpu"))
    proposer.hidden = torch.ones(2, heads.hidden_size)
    proposal = proposer.propose([[1], [1]], 0, SamplingParams(temperature=1.0), torch.Generator().manual_seed(0))
    assert proposal.draft_tokens.tolist() == [[10, 11, 10, 11]] * 2
    assert proposal.draft_probs.argmax(-1).tolist() == [[10, 11, 10, 11]] * 2
    assert proposal.parents.tolist() == [[-1, 0, -1, 2]] * 2


def test_heads_for_another_target_are_refused(tmp_path, target, tokenizer):
    from eval.config import EvalConfig
    from eval.errors import EvalError
    from eval.proposers import load_proposer

    MedusaHeads(
        hidden_size=target.config.hidden_size * 2, vocab_size=target.config.vocab_size, num_heads=2
    ).save_pretrained(tmp_path / "m")
    with pytest.raises(EvalError, match="pair the heads with the target they were trained on"):
        load_proposer(read_export(tmp_path / "m"), target, len(tokenizer), EvalConfig(), torch.device("cpu"))
