"""Lookahead decoding (Fu et al. 2024, "Break the Sequential Dependency of LLM Inference Using Lookahead
Decoding") as a proposer whose drafting rides in the engine's one verification forward.

Why: it needs no drafter. The target runs Jacobi iterations on guessed future tokens inside each
verification forward, the n-grams those iterations produce go to a pool, and pooled n-grams that
start with the last verified token are verified in the same forward. vLLM does not serve it, so
this engine is the only place it is measured; its settings are heads/lookahead.py's.

The step as one token tree (read off llama.cpp's examples/lookahead sequence ids and LADE's
j_make_causal_mask_multilevel, hao-ai-lab/LookaheadDecoding):
- The window has N−1 levels (oldest first) of W columns. Level-0 column 0 is the last verified
  token itself (the root, position n); level-0 column i sits at n+i after column i−1: a chain.
  Level j ≥ 1 of column i sits at n+j+i and sees the context, level-0 columns ≤ i and levels
  1..j−1 of column i: a branch hanging from level-0 column i. Node (j, i) has depth i+j.
- The verification branch: the up to G pooled n-grams keyed by the root token (N−1 tokens each),
  merged into a trie, so shared prefixes are fed once and siblings differ (the references' own
  verification walks candidates sharing a prefix together).
- Node order per row: trie, window, then padding up to the batch's widest row (`num_draft`).

Window and pool update. `observe` gets the target's argmax at every node; at each column's newest
level (N−2; for N=2 level 0, whose column 0 is the root) it is the next Jacobi iterate of position
n+N−1+i. Column i yields the n-gram (level-0 token, levels 1..N−2, that iterate), keyed by the root
for column 0 (LADE's update_token_map). It enters the pool once the column's levels 1..N−2 are
target outputs, i.e. N−2 iterations after the column was filled (LADE fills its levels before it
pools). The pool keeps at most G n-grams per key, most recent first; a repeat moves to the front
(LADE's LRU). The window then drops level 0 and takes the iterates as its newest level: one
position forward, the token every step gains. `accept` moves it k more for k accepted draft
tokens: columns shift left by k and k columns of random context tokens refill it (LADE with
ALWAYS_FWD_ONE=0; every window token keeps its position; llama.cpp shifts whole levels instead).
The window starts as random context tokens (LADE's copy_from). With pool_from_prompt the pool also
holds the n-grams of the prompt and of every verified token (LADE's POOL_FROM_PROMPT).

Sampling: every node is a deterministic proposal, so q is one-hot at it and exact tree rejection
sampling keeps decoding lossless; window nodes may be accepted too (each accepted node passed the
same test). The Jacobi iterates are the target's argmax even when sampling, as in both references.

Cost: no drafter forward (draft_forwards=0); the verification forward grows by up to G·(N−1) +
(W−1) + W·(N−2) nodes; `observe` adds one host sync per step; per row and step the Python work is
a trie of ≤ G·(N−1) tokens, ≤ W + accepted pool updates and a few small numpy operations.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import numpy as np
import torch

from eval.config import EvalConfig
from eval.errors import EvalError
from eval.proposer import Proposal, Proposer, TargetFeatures, merge_chains, point_mass_proposal
from eval.proposers.base import ProposerEntry
from eval.sampling import SamplingParams
from heads.lookahead import LookaheadDrafter


def window_tree(window_size: int, ngram_size: int) -> tuple[np.ndarray, np.ndarray]:
    """The window as tree nodes: (level j, column i) is node j·W + i − 1; level-0 column 0 is the root (−1).

    Returns:
        parents: ((W−1) + W·(N−2),) parent node per window node, −1 = the root.
        top: (W,) each column's node at the newest level N−2; −1 where that is the root (N = 2, column 0).
    """
    flat = np.arange(1, (ngram_size - 1) * window_size)  # every (j, i) but the root, as j·W + i
    parents = np.where(flat < window_size, flat - 2, flat - window_size - 1)  # level 0: column i−1; else level j−1
    top = (ngram_size - 2) * window_size + np.arange(window_size) - 1
    return parents, top


def remember(pool: dict, key: int, gram: tuple, capacity: int) -> None:
    """Put n-gram (key, *gram) first in key's list, keeping at most `capacity` (a repeat moves to the front)."""
    grams = pool.setdefault(key, [])
    if gram in grams:
        grams.remove(gram)
    grams.insert(0, gram)
    del grams[capacity:]


@dataclass
class RowState:
    """One sequence's lookahead state."""

    levels: np.ndarray  # (N−1, W) the window, oldest level first; [0, 0] stands for the root
    ready: np.ndarray  # (W,) Jacobi iterations each column has had since it was (re)filled
    pool: dict = field(default_factory=dict)  # key token → up to G tuples of N−1 tokens, most recent first
    pooled: int = 0  # leading verified tokens whose n-grams are pooled (pool_from_prompt)
    context: list = field(default_factory=list)  # the engine's verified tokens (refills draw from them)
    root: int = 0  # the last verified token at the last proposal
    proposed: Optional[int] = None  # verified length at the last proposal; None = nothing awaits accept
    trie_size: int = 0  # verification-branch nodes of the last proposal (the window follows them)


class LookaheadProposer(Proposer):
    """Pooled n-grams plus the Jacobi window, one tree per row and step (see the module docstring)."""

    target_layer_ids: tuple[int, ...] = ()
    max_num_speculative_tokens = None  # γ is ignored: the tree's shape is W, N and G's

    def __init__(
        self,
        *,
        window_size: int,
        ngram_size: int,
        max_verify_ngrams: int,
        vocab_size: int,
        pool_from_prompt: bool = True,
        seed: int = 0,  # the window's random guesses; re-seeded at each reset, so decodes repeat exactly
    ):
        LookaheadDrafter(window_size, ngram_size, max_verify_ngrams, pool_from_prompt)  # HeadsError if bad
        self.window_size, self.ngram_size, self.max_verify_ngrams = window_size, ngram_size, max_verify_ngrams
        self.pool_from_prompt, self.vocab_size, self.seed = pool_from_prompt, vocab_size, seed
        self.window_parents, self.window_top = window_tree(window_size, ngram_size)
        # The deepest acceptable node: the last column's newest level, or a pooled n-gram's end.
        self.tree_depth = max(ngram_size - 1, window_size + ngram_size - 3)
        self.device = torch.device("cpu")
        self.rows: list[Optional[RowState]] = []
        self._rng = np.random.default_rng(seed)

    def reset(self, batch_size: int = 1, device: Optional[torch.device] = None) -> None:
        self.device = device or torch.device("cpu")
        self.rows = [None] * batch_size
        self._rng = np.random.default_rng(self.seed)

    def propose(
        self, sequences: list[list[int]], num_speculative_tokens: int, params: SamplingParams, generator=None
    ) -> Proposal:
        """Per row the trie of pooled n-grams after its last token, then the window tree; padding is token 0.

        Returns:
            a Proposal with draft_tokens and parents (B, M), num_draft (B,), one-hot draft_probs (B, M, V)
            when sampling, and `observe` to receive the target's greedy tokens (B, M+1).
        """
        if len(self.rows) != len(sequences):
            self.reset(len(sequences), self.device)
        branches = []
        for b, sequence in enumerate(sequences):
            row = self.rows[b]
            if row is None:
                row = self.rows[b] = self.start(sequence)
            row.context, row.root, row.proposed = sequence, sequence[-1], len(sequence)
            if self.pool_from_prompt and self.max_verify_ngrams:
                self._pool_verified(row)
            branches.append(merge_chains(row.pool.get(row.root, ())))  # the verification branch
        rows = []
        for (trie, trie_parents), row in zip(branches, self.rows):
            size = row.trie_size = len(trie)
            window_parents = np.where(self.window_parents < 0, -1, self.window_parents + size)
            # the trie, then the window level-major with the root left out
            rows.append((trie + row.levels.reshape(-1)[1:].tolist(), trie_parents + window_parents.tolist()))
        return point_mass_proposal(
            rows,
            params,
            self.vocab_size,
            self.device,
            tree=True,
            draft_forwards=0,  # the window rides in the verification forward
            observe=self.observe,
        )

    def observe(self, greedy_tokens: torch.Tensor) -> None:
        """One Jacobi iteration per row: pool each column's finished n-gram, then add the newest level.

        Args:
            greedy_tokens: (B, M+1) the target's argmax at the root and at every node of the last proposal.
        """
        greedy = greedy_tokens.cpu().numpy()  # host sync: one per step
        capacity, settled = self.max_verify_ngrams, self.ngram_size - 2  # levels 1..N−2 must be target outputs
        for b, row in enumerate(self.rows):
            newest = greedy[b, np.where(self.window_top < 0, 0, row.trie_size + 1 + self.window_top)]  # (W,)
            window = np.concatenate([row.levels[1:], newest[None]])  # (N−1, W): one level forward
            if capacity:
                keys = row.levels[0].tolist()
                keys[0] = row.root
                for key, gram, ready in zip(keys, window.T.tolist(), (row.ready >= settled).tolist()):
                    if ready:
                        remember(row.pool, key, tuple(gram), capacity)
            row.levels = window
            row.ready += 1

    def accept(self, num_valid: list[int], features: Optional[TargetFeatures] = None) -> None:
        """Move each row's window past the k accepted draft tokens: shift its columns k left and refill."""
        for row, verified in zip(self.rows, num_valid):
            if row is None or row.proposed is None:  # the prefill's call: nothing proposed yet
                continue
            k = min(verified - row.proposed, self.window_size)
            row.proposed = None
            if k > 0:
                fresh = self._guesses(row.context, (self.ngram_size - 1, k))
                row.levels = np.concatenate([row.levels[:, k:], fresh], axis=1)
                row.ready = np.concatenate([row.ready[k:], np.zeros(k, dtype=np.int64)])

    def start(self, sequence: list[int]) -> RowState:
        """A fresh row: the window guessed from random context tokens, an empty pool."""
        levels = self._guesses(sequence, (self.ngram_size - 1, self.window_size))
        return RowState(levels, np.zeros(self.window_size, dtype=np.int64), context=sequence)

    def _guesses(self, context: list[int], shape: tuple[int, int]) -> np.ndarray:
        """Random tokens of the context (LADE's copy_from), (N−1, k)."""
        picks = self._rng.integers(len(context), size=shape[0] * shape[1])
        return np.array([context[i] for i in picks], dtype=np.int64).reshape(shape)

    def _pool_verified(self, row: RowState) -> None:
        """Pool the n-grams that end at verified tokens not pooled yet (the whole prompt at first)."""
        n, context = self.ngram_size, row.context
        for end in range(max(row.pooled, n - 1), len(context)):
            remember(row.pool, context[end - n + 1], tuple(context[end - n + 2 : end + 1]), self.max_verify_ngrams)
        row.pooled = len(context)


def _check(settings, cfg: EvalConfig) -> None:
    if cfg.tree is not None:
        raise EvalError(
            f"eval.tree={cfg.tree}: lookahead decoding builds its own tree from drafter.window_size, ngram_size "
            "and max_verify_ngrams; set eval.tree=null"
        )


def _build(drafter, *, target, vocab_size: int, cfg: EvalConfig, path) -> LookaheadProposer:
    _check(drafter, cfg)
    return LookaheadProposer(
        window_size=drafter.window_size,
        ngram_size=drafter.ngram_size,
        max_verify_ngrams=drafter.max_verify_ngrams,
        pool_from_prompt=drafter.pool_from_prompt,
        vocab_size=vocab_size,
    )


ENTRY = ProposerEntry(build=_build, check=_check)
