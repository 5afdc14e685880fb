"""Lookahead decoding: the window tree against the reference's mask, the pool, lossless decoding, bad settings."""

import re
from dataclasses import replace

import numpy as np
import pytest
import torch

from eval.kv_cache import ancestor_mask
from eval.proposer import merge_chains
from eval.proposers.lookahead import LookaheadProposer, RowState, remember, window_tree
from eval.sampling import SamplingParams
from eval.speculative import speculative_generate
from heads.config import LookaheadConfig
from heads.errors import HeadsError
from heads.lookahead import LookaheadDrafter
from tests.eval.fitting import assert_first_tokens_follow_the_target

DEFAULTS = {k: v for k, v in vars(LookaheadConfig()).items() if k != "kind"}

GREEDY = SamplingParams()


def _reference_visibility(window_size: int, ngram_size: int) -> tuple[np.ndarray, np.ndarray]:
    """llama.cpp's lookahead batch (examples/lookahead): which window token attends to which, and positions.

    Sequence ids: the input token (level-0 column 0) is in every sequence 0..W; level-0 column c ≥ 1 in
    sequences c+1..W; level j ≥ 1 of column i only in sequence i+1. A token attends to a token that
    shares a sequence with it at a position ≤ its own; level j column i is at position j + i.
    Returns (M+1, M+1) visibility and (M+1,) positions, rows in our node order with the root first.
    """
    cells = [(j, i) for j in range(ngram_size - 1) for i in range(window_size)]  # (0, 0) is the root
    seqs = [
        set(range(window_size + 1)) if j == i == 0 else set(range(i + 1, window_size + 1)) if j == 0 else {i + 1}
        for j, i in cells
    ]
    pos = np.array([j + i for j, i in cells])
    sees = np.array(
        [[bool(seqs[a] & seqs[b]) and pos[b] <= pos[a] for b in range(len(cells))] for a in range(len(cells))]
    )
    return sees, pos


@pytest.mark.parametrize("window_size, ngram_size", [(3, 3), (4, 3), (2, 5), (4, 2), (1, 4)])
def test_window_tree_is_the_reference_mask(window_size, ngram_size):
    parents, top = window_tree(window_size, ngram_size)
    with_root = torch.tensor([[-1] + [p + 1 for p in parents.tolist()]])  # the root as node 0
    ours = ancestor_mask(with_root)[0].numpy()  # (M+1, M+1): node a sees node b
    sees, pos = _reference_visibility(window_size, ngram_size)
    assert np.array_equal(ours, sees)
    assert np.array_equal(ours.sum(1) - 1, pos)  # the engine's position offset = ancestors = j + i
    assert top.tolist() == [(ngram_size - 2) * window_size + i - 1 for i in range(window_size)]


def test_window_tree_by_hand():
    # W = 3, N = 3: nodes L0c1, L0c2, L1c0, L1c1, L1c2 (level-0 column 0 is the root).
    parents, top = window_tree(3, 3)
    assert parents.tolist() == [-1, 0, -1, 0, 1] and top.tolist() == [2, 3, 4]
    # N = 2: the window is level 0 only; column 0's newest level is the root itself.
    parents, top = window_tree(3, 2)
    assert parents.tolist() == [-1, 0] and top.tolist() == [-1, 0, 1]


def test_pool_keeps_the_most_recent_ngrams_and_the_branch_is_a_trie():
    pool = {}
    for gram in [(2, 3), (4, 5), (2, 6), (4, 5)]:  # the repeat moves to the front
        remember(pool, 1, gram, capacity=3)
    assert pool[1] == [(4, 5), (2, 6), (2, 3)]
    remember(pool, 1, (7, 7), capacity=3)
    assert pool[1] == [(7, 7), (4, 5), (2, 6)]  # the oldest fell out
    tokens, parents = merge_chains(pool[1] + [(2, 8)])
    assert tokens == [7, 7, 4, 5, 2, 6, 8] and parents == [-1, 0, -1, 2, -1, 4, 4]  # (2, 6), (2, 8) share 2


def test_prompt_ngrams_fill_the_pool():
    proposer = LookaheadProposer(window_size=2, ngram_size=3, max_verify_ngrams=2, vocab_size=10)
    proposer.reset(1)
    proposal = proposer.propose([[1, 2, 3, 1, 2, 4, 9, 2]], 3, GREEDY)
    pool = proposer.rows[0].pool
    assert pool == {1: [(2, 4), (2, 3)], 2: [(4, 9), (3, 1)], 3: [(1, 2)], 4: [(9, 2)]}  # most recent first, G = 2
    # The root 2 is verified with its two pooled 3-grams, then the window (L0c1, L1c0, L1c1).
    assert proposal.draft_tokens[0, :4].tolist() == [4, 9, 3, 1]
    assert proposal.parents[0].tolist() == [-1, 0, -1, 2, -1, -1, 4]
    assert proposal.num_draft.tolist() == [7]


def _hand_made(proposer: LookaheadProposer) -> list[list[int]]:
    """Two rows: row 0 has two pooled 3-grams after its last token 7, row 1 none."""
    sequences = [[3, 3, 7], [3, 4]]
    proposer.reset(2)
    proposer.rows = [
        RowState(np.array([[0, 11, 12], [20, 21, 22]]), np.ones(3, dtype=np.int64), {7: [(5, 6), (5, 8)]}),
        RowState(np.array([[0, 13, 14], [23, 24, 25]]), np.array([0, 1, 0]), {}),
    ]
    return sequences


def test_proposal_on_a_hand_made_state():
    proposer = LookaheadProposer(
        window_size=3, ngram_size=3, max_verify_ngrams=2, vocab_size=30, pool_from_prompt=False
    )
    proposal = proposer.propose(_hand_made(proposer), 3, GREEDY)
    # Row 0: the trie 5 → {6, 8}, then the window L0c1 L0c2 L1c0 L1c1 L1c2 hung after it.
    assert proposal.draft_tokens[0].tolist() == [5, 6, 8, 11, 12, 20, 21, 22]
    assert proposal.parents[0].tolist() == [-1, 0, 0, -1, 3, -1, 3, 4]
    # Row 1: the window alone, then padding that hangs from the root.
    assert proposal.draft_tokens[1].tolist() == [13, 14, 23, 24, 25, 0, 0, 0]
    assert proposal.parents[1].tolist() == [-1, 0, -1, 0, 1, -1, -1, -1]
    assert proposal.num_draft.tolist() == [8, 5] and proposal.draft_probs is None
    assert proposal.draft_forwards == 0 and proposer.tree_depth == 3  # L1c2: depth 2 + 1


def test_observe_pools_ngrams_and_accept_shifts_the_window():
    proposer = LookaheadProposer(
        window_size=3, ngram_size=3, max_verify_ngrams=2, vocab_size=40, pool_from_prompt=False
    )
    sequences = _hand_made(proposer)
    proposal = proposer.propose(sequences, 3, GREEDY)
    greedy = torch.zeros(2, 9, dtype=torch.long)  # (B, M+1): the root, then every node
    greedy[0, 6:9] = torch.tensor([30, 31, 32])  # row 0: the argmax at L1c0..L1c2 (nodes 5..7)
    greedy[1, 3:6] = torch.tensor([33, 34, 35])  # row 1: L1c0..L1c2 are nodes 2..4
    proposal.observe(greedy)
    row0, row1 = proposer.rows
    # Column 0's n-gram is keyed by the root (7); the others by their level-0 token; G = 2 per key.
    assert row0.pool == {7: [(20, 30), (5, 6)], 11: [(21, 31)], 12: [(22, 32)]}
    assert row0.levels.tolist() == [[20, 21, 22], [30, 31, 32]]
    assert row1.pool == {13: [(24, 34)]}  # only column 1 had a target output at level 1
    assert row1.levels.tolist() == [[23, 24, 25], [33, 34, 35]] and row1.ready.tolist() == [1, 2, 1]
    # Row 0 accepted 2 draft tokens: its columns move 2 left, 2 fresh ones are context tokens.
    proposer.accept([len(sequences[0]) + 2, len(sequences[1])])
    assert row0.levels[:, 0].tolist() == [22, 32] and set(row0.levels[:, 1:].flat) <= {3, 7}
    assert row0.ready.tolist() == [2, 0, 0]
    assert row1.levels.tolist() == [[23, 24, 25], [33, 34, 35]]


class _PoolHits:
    """Wraps a LookaheadProposer; counts steps where a pooled n-gram's first token is the target's choice."""

    target_layer_ids = ()
    max_num_speculative_tokens = None

    def __init__(self, inner: LookaheadProposer):
        self.inner, self.tree_depth, self.hits = inner, inner.tree_depth, 0

    def reset(self, batch_size, device):
        self.inner.reset(batch_size, device)

    def accept(self, num_valid, features=None):
        self.inner.accept(num_valid, features)

    def propose(self, sequences, num_speculative_tokens, params, generator=None):
        proposal = self.inner.propose(sequences, num_speculative_tokens, params, generator)
        firsts = [
            {
                t
                for t, p in zip(proposal.draft_tokens[b, : row.trie_size].tolist(), proposal.parents[b].tolist())
                if p < 0
            }
            for b, row in enumerate(self.inner.rows)
        ]

        def observe(greedy):
            self.hits += sum(int(greedy[b, 0]) in first for b, first in enumerate(firsts))
            proposal.observe(greedy)

        return replace(proposal, observe=observe)


@pytest.mark.parametrize(
    "settings",
    [(4, 3, 4, True), (3, 4, 2, False), (2, 2, 3, True), (1, 3, 0, True)],
    ids=lambda s: f"W{s[0]}N{s[1]}G{s[2]}",
)
def test_greedy_speculative_equals_target_greedy(target, tokenizer, prompt_ids, greedy_reference, settings):
    window_size, ngram_size, max_verify_ngrams, pool_from_prompt = settings
    proposer = LookaheadProposer(
        window_size=window_size,
        ngram_size=ngram_size,
        max_verify_ngrams=max_verify_ngrams,
        vocab_size=len(tokenizer),
        pool_from_prompt=pool_from_prompt,
    )
    eos, vocab = {tokenizer.eos_token_id}, len(tokenizer)
    accepted = []
    for ids, ref in zip(prompt_ids[:3], greedy_reference):
        (out,), stats = speculative_generate(target, proposer, [ids], 40, 3, GREEDY, eos_ids=eos, vocab_size=vocab)
        assert out == ref
        accepted += stats.accept_counts
        assert stats.draft_forwards == 0
    assert max(accepted) > 0
    batched, stats = speculative_generate(target, proposer, prompt_ids, 40, 3, GREEDY, eos_ids=eos, vocab_size=vocab)
    assert batched == greedy_reference
    assert max(stats.accept_counts) <= proposer.tree_depth


def test_the_window_alone_fills_a_pool_that_gets_accepted(target, tokenizer, prompt_ids, greedy_reference):
    """No prompt n-grams: every pooled n-gram came out of the Jacobi window, and some are the target's choice."""
    inner = LookaheadProposer(
        window_size=4, ngram_size=3, max_verify_ngrams=4, vocab_size=len(tokenizer), pool_from_prompt=False
    )
    proposer = _PoolHits(inner)
    eos, vocab = {tokenizer.eos_token_id}, len(tokenizer)
    out, stats = speculative_generate(target, proposer, prompt_ids, 40, 3, GREEDY, eos_ids=eos, vocab_size=vocab)
    assert out == greedy_reference
    assert proposer.hits >= 5 and sum(a > 0 for a in stats.accept_counts) >= 5


def test_sampled_first_token_follows_the_target(target, tokenizer, prompt_ids):
    # The prompt's first two tokens repeated: the prompt pool verifies what followed them, beside the window.
    ids = prompt_ids[2] + prompt_ids[2][:2]
    proposer = LookaheadProposer(window_size=3, ngram_size=3, max_verify_ngrams=3, vocab_size=len(tokenizer))
    proposer.reset(1, torch.device("cpu"))
    proposal = proposer.propose([ids], 2, SamplingParams(temperature=1.0))
    roots = proposal.parents[0] == -1
    assert proposer.rows[0].trie_size >= 1 and len(set(proposal.draft_tokens[0, roots].tolist())) >= 2  # competing
    assert torch.equal(proposal.draft_probs.argmax(-1), proposal.draft_tokens)  # one-hot q
    assert_first_tokens_follow_the_target(target, proposer, ids, len(tokenizer), draws=500)  # 5σ bands: ~15 s


def test_sampled_batch_decodes_to_length(target, tokenizer, prompt_ids):
    proposer = LookaheadProposer(window_size=4, ngram_size=3, max_verify_ngrams=4, vocab_size=len(tokenizer))
    gen = torch.Generator().manual_seed(0)
    params = SamplingParams(temperature=0.8, top_k=50)
    out, stats = speculative_generate(
        target, proposer, prompt_ids[:3], 30, 3, params, eos_ids=set(), vocab_size=len(tokenizer), generator=gen
    )
    assert [len(o) for o in out] == [30, 30, 30] and max(stats.accept_counts) > 0


@pytest.mark.parametrize(
    "settings, named",
    [
        ({"ngram_size": 1}, "drafter.ngram_size=1"),
        ({"window_size": 0}, "drafter.window_size=0"),
        ({"max_verify_ngrams": -1}, "drafter.max_verify_ngrams=-1"),
        ({"ngram_size": 2.5}, "drafter.ngram_size=2.5"),
        ({"pool_from_prompt": "yes"}, "drafter.pool_from_prompt='yes'"),
    ],
)
def test_bad_settings_name_the_setting_and_the_fix(settings, named):
    with pytest.raises(HeadsError) as info:
        LookaheadDrafter(**{**DEFAULTS, **settings})
    message = str(info.value)
    assert message.startswith(named) and "\n" not in message and ("set it to" in message)
    with pytest.raises(HeadsError, match=re.escape(named)):
        LookaheadProposer(**{**DEFAULTS, **settings}, vocab_size=10)


def test_settings_round_trip(tmp_path):
    drafter = LookaheadDrafter(window_size=5, ngram_size=4, max_verify_ngrams=2, pool_from_prompt=False)
    drafter.save_pretrained(tmp_path / "la")
    assert LookaheadDrafter.from_pretrained(tmp_path / "la") == drafter
    with pytest.raises(HeadsError, match="not a lookahead drafter"):
        LookaheadDrafter.from_pretrained(tmp_path)
