"""Suffix decoding proposals, training-free, matching vLLM 0.32's `suffix` method (arctic-inference 0.1.1).

Why: suffix decoding (Oliaro et al., "SuffixDecoding", arXiv:2411.04975) drafts from what was already written:
the request's own prompt and output, and the outputs of earlier requests of the same workload.
vLLM serves it with no weights (`speculative_config={"method": "suffix", "num_speculative_tokens":
k, "suffix_decoding_max_tree_depth": ..., ...}`); to compare our acceptance with vLLM's, the
proposals follow arctic-inference's rules, token for token where the rules are deterministic.

What vLLM and arctic do (vllm/v1/spec_decode/suffix_decoding.py; arctic_inference/suffix_decoding/
cache.py and csrc/suffix_decoding/suffix_tree.cc):
- Trees. A per-request tree holds every suffix, up to max_tree_depth tokens long, of the prompt
  and the output so far; a global tree holds the outputs of the last max_cached_requests requests
  (oldest evicted first; 0 = none). A request's output enters the global tree as it is verified,
  so rows decoded together draft from each other. Each node counts the suffixes that pass through
  or end at it, i.e. the occurrences of the string from the root to it.
- Matching. The pattern is the last min(len, max_tree_depth) verified tokens. For every match
  length m = 1 .. len(pattern) − 1 whose last m tokens occur in a tree, a draft is grown from
  that node with a budget of min(γ, ⌊max_spec_factor · m⌋) tokens (and, with max_model_len, never
  past it). The draft with the highest score (the sum of its tokens' probabilities) wins, the
  longer match on ties; then the better of the request's tree and the global tree, the request's
  tree on ties.
- Drafts. A token's probability is the product of count(child) / count(parent) along the path
  from the matched node. vLLM drafts a chain (arctic's `use_tree_spec=False`): it follows the
  most frequent child while the probability stays ≥ min_token_prob. `use_tree_spec=True` is
  arctic's tree (the paper's): best-first by probability, every child whose probability is
  ≥ min_token_prob a candidate, at most the budget's node count.
Our engine's first step drafts from the prompt alone (vLLM's first draft comes after the prefill's
sampled token). The proposal is deterministic, so q is one-hot at each draft token.

Ties. Float probabilities and scores are kept in float32 as in arctic, and siblings of equal count
are ranked in arctic's order (a child whose count grows moves before its equal-count siblings if it
was the first of them, else after), so chains equal arctic's exactly (tested where arctic-inference is
installed). In a tree, nodes of equal probability are taken in the order they were found; arctic's
heap order there is unspecified, so trees may differ from arctic's at ties (their scores do not).

Workloads. eval/measure.py decodes the same prompts at several γ; a global tree shared across those
passes would let later passes draft the earlier passes' outputs. `begin_workload(name)` selects
one global tree per name, so each pass (and the warm-up) has its own.

Cost per verified token: up to max_tree_depth node updates in each tree that holds the row (its
own tree and the global one). Per step and row: for each match length a walk from the root (the
row's own suffixes are looked up directly), stopped at the first length nothing ever followed,
plus the drafts, each at most γ tokens: work bounded by the tree depth and γ, not the sequence.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch

from eval.config import EvalConfig
from eval.errors import EvalError
from eval.proposer import Proposal, Proposer, TargetFeatures, point_mass_proposal
from eval.proposers.base import ProposerEntry
from eval.sampling import SamplingParams
from eval.suffix_tree import Draft, SuffixTree
from heads.suffix import SuffixDrafter


class _Workload:
    """One workload's global tree: the outputs of its last max_cached_requests requests."""

    def __init__(self, max_depth: int):
        self.tree = SuffixTree(max_depth)
        self.cached: dict[int, None] = {}  # request ids whose outputs are in the tree, oldest first
        self.next_id = 0


@dataclass
class _Row:
    """An active request: its own tree (prompt + output) and its output's id in the global tree."""

    tree: SuffixTree
    global_id: int
    length: int  # tokens of the row's sequence already in its trees (at the start: its prompt)


class SuffixProposer(Proposer):
    """Chains (vLLM's) or trees (arctic's use_tree_spec) from suffix trees over prompts and earlier outputs.

    State: one tree per active row, rebuilt at `reset`, and one global tree per workload name
    (`begin_workload`), kept across batches. Only verified tokens enter the trees.
    """

    target_layer_ids: tuple[int, ...] = ()
    tree_depth = None  # a tree of at most γ nodes (or a chain of γ): measured across the γ sweep like chains
    max_num_speculative_tokens = None

    def __init__(
        self,
        *,
        vocab_size: int,
        suffix_decoding_max_tree_depth: int = 24,
        suffix_decoding_max_cached_requests: int = 10000,
        suffix_decoding_max_spec_factor: float = 1.0,
        suffix_decoding_min_token_prob: float = 0.1,
        max_model_len: Optional[int] = None,  # vLLM's cap: no draft reaches past it; None = no cap
        use_tree_spec: bool = False,  # False = a chain, as vLLM serves it; True = arctic's best-first tree
    ):
        SuffixDrafter(  # HeadsError, naming the setting, if one is bad
            suffix_decoding_max_tree_depth,
            suffix_decoding_max_cached_requests,
            suffix_decoding_max_spec_factor,
            suffix_decoding_min_token_prob,
        )
        self.max_depth, self.max_cached = suffix_decoding_max_tree_depth, suffix_decoding_max_cached_requests
        self.spec_factor, self.min_token_prob = suffix_decoding_max_spec_factor, suffix_decoding_min_token_prob
        self.vocab_size, self.max_model_len, self.use_tree_spec = vocab_size, max_model_len, use_tree_spec
        self.proposes_trees = use_tree_spec  # the static engine path runs chains only
        self.device = torch.device("cpu")
        self._workloads: dict[str, _Workload] = {}
        self.begin_workload("default")

    def begin_workload(self, name: str) -> None:
        """Draft from `name`'s global tree from now on (a new name starts empty); the active rows end."""
        self._workload = self._workloads.setdefault(name, _Workload(self.max_depth))
        self._rows: list[Optional[_Row]] = []

    def reset(self, batch_size: int = 1, device: Optional[torch.device] = None) -> None:
        """The active requests end (their outputs stay in the global tree); a new batch starts."""
        self.device = device or torch.device("cpu")
        self._rows = [None] * batch_size

    def propose(
        self, sequences: list[list[int]], num_speculative_tokens: int, params: SamplingParams, generator=None
    ) -> Proposal:
        """Up to γ draft tokens (chain) or nodes (tree) per row.

        Returns:
            draft_tokens (B, N), N the longest row's draft, padded with token 0; num_draft (B,); parents
            (B, N) with use_tree_spec (padding hangs from the root), else None; one-hot draft_probs
            (B, N, V) when sampling.
        """
        rows = [(d.tokens, d.parents) for d in self.drafts(sequences, num_speculative_tokens)]
        return point_mass_proposal(rows, params, self.vocab_size, self.device, tree=self.use_tree_spec)

    def drafts(self, sequences: list[list[int]], gamma: int) -> list[Draft]:
        """Each row's draft with the match it grew from (`propose` without the padding): a caller choosing between
        this draft and another drafter's reads the match length (eval/lookup_first.py)."""
        if len(self._rows) != len(sequences):
            self.reset(len(sequences), self.device)
        return [self._draft(b, s, gamma) for b, s in enumerate(sequences)]

    def accept(self, num_valid: list[int], features: Optional[TargetFeatures] = None) -> None:
        """Nothing to roll back: the trees hold only verified tokens, which `propose` is given."""

    def _draft(self, b: int, sequence: list[int], gamma: int) -> Draft:
        """Row b's best draft from its own tree and the workload's global tree (its own tree on ties)."""
        row = self._sync(b, sequence)
        budget = gamma if self.max_model_len is None else min(gamma, self.max_model_len - len(sequence) - 1)
        pattern = sequence[-self.max_depth :]
        spec = (budget, self.spec_factor, self.min_token_prob, self.use_tree_spec)
        mine = row.tree.speculate(pattern, *spec, own=row.tree.suffix_ends(0))
        shared = self._workload.tree.speculate(pattern, *spec, own=self._workload.tree.suffix_ends(row.global_id))
        return mine if mine.score >= shared.score else shared

    def _sync(self, b: int, sequence: list[int]) -> _Row:
        """Row b with its trees holding `sequence`: a new request at its first step, else only new tokens added."""
        row = self._rows[b]
        if row is None or len(sequence) < row.length:  # not the sequence this row grew from: a new request
            row = self._rows[b] = self._start(sequence)
        new = sequence[row.length :]
        if new:
            row.tree.extend(0, new)
            if row.global_id in self._workload.cached:  # else evicted while still decoding: arctic stops adding
                self._workload.tree.extend(row.global_id, new)
            row.length = len(sequence)
        return row

    def _start(self, prompt: list[int]) -> _Row:
        """A request's tree over its prompt, and a slot for its output in the global tree (FIFO eviction)."""
        tree = SuffixTree(self.max_depth)
        tree.extend(0, prompt)
        work = self._workload
        request, work.next_id = work.next_id, work.next_id + 1
        if self.max_cached:
            work.cached[request] = None
            while len(work.cached) > self.max_cached:
                oldest = next(iter(work.cached))
                del work.cached[oldest]
                if oldest in work.tree:  # an output with no tokens yet never entered the tree
                    work.tree.remove(oldest)
        return _Row(tree, request, len(prompt))


def _check(settings, cfg: EvalConfig) -> None:
    if cfg.tree not in (None, "drafter"):
        raise EvalError(
            f"eval.tree={cfg.tree}: suffix decoding drafts chains as vLLM serves them (null) or arctic-inference's "
            "best-first tree of at most γ nodes (drafter)"
        )


def _build(drafter, *, target, vocab_size: int, cfg: EvalConfig, path) -> SuffixProposer:
    _check(drafter, cfg)
    return SuffixProposer(vocab_size=vocab_size, **drafter.settings(), use_tree_spec=cfg.tree == "drafter")


ENTRY = ProposerEntry(build=_build, check=_check)
