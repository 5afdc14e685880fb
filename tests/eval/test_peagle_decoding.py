"""P-EAGLE decoding through the engine: one drafter forward per step, lossless chains."""

import pytest
import torch

from distill.features.capture import layer_features
from eval.proposer import TargetFeatures
from eval.proposers.peagle import PEagleProposer
from eval.sampling import SamplingParams, probs_from_logits
from eval.speculative import speculative_generate
from tests.eval.fitting import assert_first_tokens_follow_the_target
from tests.eval.peagle_fit import MAX_DRAFT_TOKENS

GREEDY = SamplingParams()
LAYER_IDS = [0, 1, 2]


@pytest.fixture(scope="module")
def drafter(target):
    from tests.eval.peagle_fit import fit_peagle

    return fit_peagle(target)


def _features(target, ids: list[int]) -> torch.Tensor:
    """(len(ids), F) target features at LAYER_IDS."""
    return layer_features(target, torch.tensor([ids]), None, LAYER_IDS)[0][0]


def _reference_q(drafter, proposer, target, seq: list[int], gamma: int, params) -> torch.Tensor:
    """From scratch, one entry or mask per decode: entries (h_t, x_{t+1}) at t for t ≤ n−2, then
    mask i alone at n−2+i. (γ, V) draft distributions."""
    n, one = len(seq), torch.ones(1, 1, dtype=torch.bool)
    cache = drafter.new_cache(1, "cpu")
    feats = drafter.fuse(_features(target, seq[:-1]))
    hidden = None
    for t in range(n - 1):
        hidden = drafter.decode(cache, feats[None, t : t + 1], torch.tensor([[seq[t + 1]]]), torch.tensor([[t]]), one)
    outs = [hidden[0, 0]]
    for i in range(1, gamma):
        mask = torch.tensor([[drafter.mask_token_id]])
        outs.append(
            drafter.decode(cache, drafter.mask_entry()[None, None], mask, torch.tensor([[n - 2 + i]]), one)[0, 0]
        )
    return probs_from_logits(proposer._to_target(drafter.logits(torch.stack(outs))), params)


def _deliver(proposer, target, sequences, start: list[int]) -> None:
    """accept(): target features of positions start[b] … len−2 of each row (ragged), as the engine hands them."""
    rows = [_features(target, s[:-1])[a:] for s, a in zip(sequences, start)]
    width = max(len(r) for r in rows)
    states = torch.zeros(len(rows), width, rows[0].shape[-1])
    valid = torch.zeros(len(rows), width, dtype=torch.bool)
    for b, r in enumerate(rows):
        states[b, : len(r)], valid[b, : len(r)] = r, True
    proposer.accept([len(s) for s in sequences], TargetFeatures(states, valid))


@torch.no_grad()
def test_one_forward_block_equals_decoding_every_entry_and_mask_alone(target, drafter, tokenizer, prompt_ids):
    params, gamma = SamplingParams(temperature=1.0), 4
    proposer = PEagleProposer(drafter, len(tokenizer))
    sequences = [list(prompt_ids[0][-20:]), list(prompt_ids[1][-13:])]  # ragged rows
    proposer.reset(2, torch.device("cpu"))
    calls = []
    decode = drafter.decode
    drafter.decode = lambda *a, **k: calls.append(1) or decode(*a, **k)
    try:
        for new in ([0, 0], [5, 2]):  # the prompt, then ragged verified tokens
            if new != [0, 0]:
                start = [len(s) - 1 for s in sequences]
                sequences = [s + p[:k] for s, p, k in zip(sequences, prompt_ids[2:4], new)]
                _deliver(proposer, target, sequences, start)
            else:
                _deliver(proposer, target, sequences, [0, 0])
            calls.clear()
            proposal = proposer.propose(sequences, gamma, params, torch.Generator().manual_seed(0))
            assert len(calls) == 1 and proposal.draft_forwards == 1  # ONE drafter forward per propose
            assert proposal.draft_tokens.shape == (2, gamma)
            for b, s in enumerate(sequences):
                ref = _reference_q(drafter, proposer, target, s, gamma, params)
                assert torch.allclose(proposal.draft_probs[b], ref, atol=1e-5), b
            # the cache keeps verified entries only: one per position 0 … len−2
            assert proposer.cache.valid.sum(1).tolist() == [len(s) - 1 for s in sequences]
    finally:
        drafter.decode = decode


def test_greedy_peagle_equals_target_greedy(target, drafter, tokenizer, prompt_ids, greedy_reference):
    proposer = PEagleProposer(drafter, len(tokenizer))
    accepted = []
    eos = {tokenizer.eos_token_id}
    for gamma in (1, 4):
        out, stats = speculative_generate(
            target, proposer, prompt_ids, 40, gamma, GREEDY, eos_ids=eos, vocab_size=len(tokenizer)
        )
        assert out == greedy_reference
        accepted += stats.accept_counts
        assert stats.draft_forwards == stats.target_forwards  # one drafter forward per step, whatever γ
    assert any(c > 0 for c in accepted) and any(c < 4 for c in accepted)  # both paths ran
    batched, _ = speculative_generate(
        target, proposer, prompt_ids[:3], 40, MAX_DRAFT_TOKENS, GREEDY, eos_ids=eos, vocab_size=len(tokenizer)
    )
    assert batched == greedy_reference[:3]


def test_sampled_peagle_draws_from_the_target_distribution(target, drafter, tokenizer, prompt_ids):
    assert_first_tokens_follow_the_target(
        target, PEagleProposer(drafter, len(tokenizer)), prompt_ids[1], len(tokenizer)
    )


def test_export_round_trip_gives_identical_proposals(tmp_path, target, drafter, tokenizer, prompt_ids):
    from heads.families.peagle import load_peagle
    from tests.exporting import export

    loaded = load_peagle(export(drafter, tmp_path / "d", num_speculative_tokens=3)).eval()

    def accepted(model):
        _, stats = speculative_generate(
            target,
            PEagleProposer(model, len(tokenizer)),
            prompt_ids[:2],
            20,
            3,
            GREEDY,
            eos_ids=set(),
            vocab_size=len(tokenizer),
        )
        return stats.accept_counts

    before = accepted(drafter)
    assert accepted(loaded) == before and any(before)
