"""Prompt lookup (n-gram) proposals: vLLM's matching rule, lossless decoding with 0..γ drafts, counting."""

import numpy as np
import pytest
import torch

from eval.metrics import Tally, decode_figures, summarize
from eval.proposer import Proposal, merge_chains
from eval.proposers.ngram import NgramProposer, find_ngram_continuation, find_ngram_continuations
from eval.sampling import SamplingParams
from eval.speculative import autoregressive_generate, speculative_generate
from tests.eval.fitting import assert_first_tokens_follow_the_target

GREEDY = SamplingParams()


def _lookup(tokens, lo, hi, k, max_model_len=None):
    return find_ngram_continuation(np.array(tokens, dtype=np.int64), lo, hi, k, max_model_len).tolist()


@pytest.mark.parametrize(
    "tokens, lo, hi, k, expected",
    [
        # The longest matching suffix n-gram wins: "1 2 3" (→ 9 …) beats the earlier "2 3" (→ 8 …).
        ([5, 2, 3, 8, 1, 2, 3, 9, 1, 2, 3], 1, 3, 3, [9, 1, 2]),
        # The same n-gram found twice: the earliest occurrence is used (vLLM V1), not the latest.
        ([1, 2, 7, 1, 2, 8, 1, 2], 2, 2, 3, [7, 1, 2]),
        # Fewer than k tokens follow the match: propose what there is.
        ([4, 5, 6, 4, 5], 2, 2, 5, [6, 4, 5]),
        # The occurrence may overlap the suffix, but must end before the last token.
        ([7, 7, 7], 1, 2, 3, [7]),
        # prompt_lookup_max caps n: with n ≤ 1 the earliest "4" (→ 5) is used; with n ≤ 3, "2 3 4" (→ 6).
        ([4, 5, 2, 3, 4, 6, 2, 3, 4], 1, 1, 2, [5, 2]),
        ([4, 5, 2, 3, 4, 6, 2, 3, 4], 1, 3, 2, [6, 2]),
        # No n ≥ prompt_lookup_min matches: no draft ("2" alone matches, but n = 1 < 2).
        ([1, 2, 9, 2], 2, 3, 3, []),
        ([1, 2, 3, 4], 1, 3, 3, []),
        # Context shorter than prompt_lookup_min, and a one-token context.
        ([3, 3], 3, 4, 3, []),
        ([3], 1, 1, 3, []),
        ([], 1, 1, 3, []),
    ],
)
def test_matching_rule_on_hand_computed_sequences(tokens, lo, hi, k, expected):
    assert _lookup(tokens, lo, hi, k) == expected


def test_drafts_stop_at_max_model_len():
    assert _lookup([1, 2, 3, 1], 1, 1, 3) == [2, 3, 1]
    assert _lookup([1, 2, 3, 1], 1, 1, 3, max_model_len=6) == [2, 3]
    assert _lookup([1, 2, 3, 1], 1, 1, 3, max_model_len=4) == []


@pytest.mark.needs_vllm
def test_matching_rule_equals_vllm_on_random_sequences():
    """Our numpy search against vLLM's own numba function, on sequences with many repeats."""
    vllm_ngram = pytest.importorskip("vllm.v1.spec_decode.ngram_proposer")
    rng = np.random.default_rng(0)
    drafted = 0
    for _ in range(3000):
        tokens = rng.integers(0, int(rng.integers(1, 6)), int(rng.integers(0, 50)))
        lo = int(rng.integers(1, 4))
        hi, k = int(rng.integers(lo, 6)), int(rng.integers(1, 6))
        cap = len(tokens) + int(rng.integers(0, 6))
        theirs = vllm_ngram._find_longest_matched_ngram_and_propose_tokens(tokens.astype(np.int32), lo, hi, cap, k)
        ours = find_ngram_continuation(tokens, lo, hi, k, cap)
        assert ours.tolist() == theirs.tolist(), (tokens.tolist(), lo, hi, k, cap)
        drafted += len(ours) > 0
    assert 1000 < drafted < 3000  # both outcomes were exercised


def test_proposal_pads_ragged_rows_and_is_one_hot_when_sampling():
    proposer = NgramProposer(prompt_lookup_min=1, prompt_lookup_max=2, vocab_size=10)
    proposer.reset(2, torch.device("cpu"))
    rows = [[1, 2, 3, 1], [4, 5, 6]]
    greedy = proposer.propose(rows, 3, GREEDY)
    assert greedy.draft_tokens.tolist() == [[2, 3, 1], [0, 0, 0]] and greedy.num_draft.tolist() == [3, 0]
    assert greedy.draft_probs is None and greedy.parents is None
    rows[0] += [5, 2]  # the rows grow; only the new tokens are appended to the proposer's copy
    rows[1] += [4]
    sampled = proposer.propose(rows, 3, SamplingParams(temperature=1.0))
    assert sampled.draft_tokens.tolist() == [[3, 1, 5], [5, 6, 4]] and sampled.num_draft.tolist() == [3, 3]
    assert sampled.draft_probs.shape == (2, 3, 10)
    assert torch.equal(sampled.draft_probs.argmax(-1), sampled.draft_tokens)
    assert torch.all(sampled.draft_probs.sum(-1) == 1)  # one-hot
    with pytest.raises(ValueError, match="prompt_lookup_min"):
        NgramProposer(prompt_lookup_min=3, prompt_lookup_max=2, vocab_size=10)


@pytest.mark.parametrize("lookup", [(1, 3), (2, 5)], ids=["min1max3", "min2max5"])
def test_greedy_speculative_equals_target_greedy(target, tokenizer, prompt_ids, greedy_reference, lookup):
    proposer = NgramProposer(prompt_lookup_min=lookup[0], prompt_lookup_max=lookup[1], vocab_size=len(tokenizer))
    eos = {tokenizer.eos_token_id}
    counts = []
    for gamma in (1, 3, 5):
        for ids, ref in zip(prompt_ids, greedy_reference):
            (out,), stats = speculative_generate(
                target, proposer, [ids], 40, gamma, GREEDY, eos_ids=eos, vocab_size=len(tokenizer)
            )
            assert out == ref
            counts += zip(stats.draft_counts, stats.accept_counts)
    assert any(n == 0 for n, _ in counts) and any(a > 0 for _, a in counts) and any(a < n for n, a in counts)
    # A batch drafts ragged rows (padding never accepted) and still equals the target row by row.
    batched, stats = speculative_generate(
        target, proposer, prompt_ids, 40, 4, GREEDY, eos_ids=eos, vocab_size=len(tokenizer)
    )
    assert batched == greedy_reference
    assert len(set(stats.draft_counts)) > 1


def test_sampled_first_token_follows_the_target(target, tokenizer, prompt_ids):
    # A chat prompt ends in the assistant marker, found nowhere before it, so nothing would be drafted:
    # repeat the prompt's first two tokens, and the lookup drafts what followed them (p ≈ 0.74 here).
    ids = prompt_ids[2] + prompt_ids[2][:2]
    proposer = NgramProposer(prompt_lookup_min=1, prompt_lookup_max=3, vocab_size=len(tokenizer))
    proposer.reset(1, torch.device("cpu"))
    assert proposer.propose([ids], 2, GREEDY).num_draft.item() == 2  # the draft really competes
    assert_first_tokens_follow_the_target(target, proposer, ids, len(tokenizer))


def test_sampled_decoding_with_empty_and_full_drafts_runs_to_length(target, tokenizer, prompt_ids):
    proposer = NgramProposer(prompt_lookup_min=1, prompt_lookup_max=3, vocab_size=len(tokenizer))
    gen = torch.Generator().manual_seed(0)
    params = SamplingParams(temperature=0.8, top_k=50)
    out, stats = speculative_generate(
        target, proposer, prompt_ids[:3], 30, 3, params, eos_ids=set(), vocab_size=len(tokenizer), generator=gen
    )
    assert [len(o) for o in out] == [30, 30, 30]
    assert 0 in stats.draft_counts and max(stats.draft_counts) == 3
    assert all(a <= n for n, a in zip(stats.draft_counts, stats.accept_counts))


class _ScriptedProposer:
    """Drafts a fixed schedule against the target's known greedy continuation.

    schedule[b][step] = (real draft tokens, how many of them are correct); padding past a row's
    real draft is the CORRECT continuation, so an engine that verified padding would accept it.
    """

    target_layer_ids = ()
    tree_depth = None
    max_num_speculative_tokens = None

    def __init__(self, reference, schedule, vocab_size):
        self.reference, self.schedule, self.vocab_size = reference, schedule, vocab_size

    def reset(self, batch_size, device):
        self.step, self.prompt_lengths = 0, None

    def propose(self, sequences, num_speculative_tokens, params, generator=None):
        if self.prompt_lengths is None:
            self.prompt_lengths = [len(s) for s in sequences]
        tokens, counts = [], []
        for b, s in enumerate(sequences):
            done = len(s) - self.prompt_lengths[b]
            truth = self.reference[b][done : done + num_speculative_tokens]
            n, good = self.schedule[b][self.step] if self.step < len(self.schedule[b]) else (0, 0)
            wrong = [(t + 1) % self.vocab_size for t in truth]
            tokens.append(truth[:good] + wrong[good:n] + truth[n:])
            counts.append(n)
        self.step += 1
        return Proposal(torch.tensor(tokens), num_draft=torch.tensor(counts))

    def accept(self, num_valid, features=None):
        pass


def test_counting_with_empty_proposals(target, tokenizer, prompt_ids):
    vocab = len(tokenizer)
    prompts = [prompt_ids[0], prompt_ids[2]]
    reference = autoregressive_generate(target, prompts, 60, GREEDY, eos_ids=set(), vocab_size=vocab)
    # Row 0 never drafts (its padding is the right answer); row 1 drafts 0, 2 (both right),
    # 3 (one right), 0, then 3 (all right): 1 + 3 + 2 + 1 + 4 = 11 tokens in 5 steps.
    schedule = [[(0, 0)] * 11, [(0, 0), (2, 2), (3, 1), (0, 0), (3, 3)]]
    proposer = _ScriptedProposer(reference, schedule, vocab)
    out, stats = speculative_generate(target, proposer, prompts, 11, 3, GREEDY, eos_ids=set(), vocab_size=vocab)
    assert out == [r[:11] for r in reference]  # lossless, padding included
    row1 = [(n, a) for k, (n, a) in enumerate(zip(stats.draft_counts, stats.accept_counts)) if k % 2 and k < 10]
    assert row1 == [(0, 0), (2, 2), (3, 1), (0, 0), (3, 3)]
    assert len(stats.accept_counts) == 11 + 5 and sum(stats.draft_counts) == 8 and sum(stats.accept_counts) == 6
    assert stats.target_forwards == 11 and stats.proposed_tokens == 8  # the block is cut to the longest real draft

    summary = summarize(stats.accept_counts, 3, sum(map(len, out)), stats.draft_counts)
    assert summary["alpha"] == 6 / 8  # accepted / real proposals, not / (steps · γ)
    assert summary["drafting_steps"] == 3  # vLLM's num_drafts: steps with ≥ 1 draft token
    assert summary["per_position_acceptance"] == pytest.approx([3 / 3, 2 / 3, 1 / 3])
    assert (summary["proposed_draft_tokens"], summary["accepted_draft_tokens"]) == (8, 6)

    tally = Tally(stats=stats, seconds=1.0, tokens=sum(map(len, out)))
    figures = decode_figures(tally, Tally(seconds=1.0, tokens=22), 3, is_chain=True)
    assert figures["alpha"] == 6 / 8 and figures["drafting_steps"] == 3
    # What eval/serving/ compares with vLLM's 1 + accepted / num_drafts:
    assert 1 + sum(figures["per_position_acceptance"]) == pytest.approx(1 + 6 / 3)


def test_a_step_without_drafts_is_a_plain_decoding_step(target, tokenizer, prompt_ids, greedy_reference):
    """B = 1, N = 0 every step: one target forward per token, the target's own greedy output."""
    reference = [greedy_reference[0] + [0] * 40]
    proposer = _ScriptedProposer(reference, [[]], len(tokenizer))
    eos, vocab = {tokenizer.eos_token_id}, len(tokenizer)
    (out,), stats = speculative_generate(
        target, proposer, [prompt_ids[0]], 40, 3, GREEDY, eos_ids=eos, vocab_size=vocab
    )
    assert out == greedy_reference[0]
    assert stats.target_forwards == len(out) and stats.proposed_tokens == 0 and set(stats.draft_counts) == {0}
    tally = Tally(stats=stats, seconds=stats.target_seconds, tokens=len(out))
    # plain decoding timed as these forwards were: verifying costs one plain step, and nothing is drafted
    figures = decode_figures(tally, Tally(seconds=stats.target_seconds, tokens=len(out)), 3, is_chain=True)
    assert figures["tau"] == 1.0 and figures["alpha"] == 0.0 and figures["drafting_steps"] == 0
    assert figures["verify_cost"] == pytest.approx(1.0)  # τ 1 at v 1: only the (empty) drafting's time is lost
    assert figures["predicted_speedup_from_tau"] == pytest.approx(1 / (1 + figures["draft_cost_per_step"]))
    assert figures["per_position_acceptance"] == [0.0, 0.0, 0.0] and figures["predicted_speedup"] == pytest.approx(1)


def _branches(tokens, lo, hi, k, matches):
    found = find_ngram_continuations(np.array(tokens, dtype=np.int64), lo, hi, k, matches)
    return [f.tolist() for f in found]


def test_tree_of_matches_takes_the_longest_ngram_most_recent_first_distinct_continuations():
    # "1 2" occurs three times before the suffix: most recent first, the repeated continuation once.
    seq = [1, 2, 7, 7, 1, 2, 8, 9, 1, 2, 7, 7, 5, 1, 2]
    assert _branches(seq, 1, 3, 2, 3) == [[7, 7], [8, 9]]
    assert _branches(seq, 1, 3, 2, 1) == [[7, 7]]
    # the longest matching n-gram decides which occurrences count: "3 1 2" only once
    assert _branches([3, 1, 2, 4, 1, 2, 6, 3, 1, 2], 1, 3, 3, 4) == [[4, 1, 2]]
    assert _branches([1, 2, 3, 4], 1, 3, 3, 2) == []  # nothing matches: no branch
    tokens, parents = merge_chains([np.array([7, 7, 1]), np.array([7, 8]), np.array([9])])
    assert tokens == [7, 7, 1, 8, 9] and parents == [-1, 0, 1, 0, -1]  # a shared prefix becomes one node


def test_tree_of_matches_is_lossless_greedy_and_sampled(target, tokenizer, prompt_ids, greedy_reference):
    proposer = NgramProposer(prompt_lookup_min=1, prompt_lookup_max=2, vocab_size=len(tokenizer), num_matches=3)
    eos = {tokenizer.eos_token_id}
    out, stats = speculative_generate(
        target, proposer, prompt_ids, 40, 3, GREEDY, eos_ids=eos, vocab_size=len(tokenizer)
    )
    assert out == greedy_reference
    assert max(stats.draft_counts) > 3  # some steps really drafted a tree of several branches
    # end on a token that recurs in the prompt with different successors: several competing branches
    prompt = prompt_ids[2]
    token = next(t for t in prompt if len({b for a, b in zip(prompt, prompt[1:]) if a == t}) >= 3)
    ids = prompt + [token]
    proposer.reset(1, torch.device("cpu"))
    proposal = proposer.propose([ids], 2, GREEDY)
    roots = (proposal.parents[0, : proposal.num_draft[0]] == -1).sum()
    assert roots >= 2  # competing first tokens: the sampled check below exercises sibling rejection
    assert_first_tokens_follow_the_target(target, proposer, ids, len(tokenizer))
