"""Learned and retrieved drafts together: the lookup's draft where it matched a long context, the learned
drafter's elsewhere.

Why: a lookup (prompt lookup, suffix decoding, the retrieval store) drafts nearly for free and is right where the
text repeats, which is where a long context matched; a learned drafter (EAGLE-3, a draft LM) drafts everywhere but
pays a forward per token. Taking the lookup's draft where its match is at least `min_match` tokens long, and the
learned one's elsewhere, skips the learned drafter's forwards on the steps the lookup covers. On a step every row
covers the learned drafter does not run at all; its state still follows every verified token, since it reads the
sequences (and buffers the target features `accept` hands it) at its next `propose`.

Exactness: each row's nodes come from one drafter, with the q they were drawn from (one-hot for the lookup's), so
verification stays lossless under sampling as it is for either part. Chains only.
"""

from __future__ import annotations

from typing import Optional

import torch

from eval.proposer import Proposal, Proposer, TargetFeatures, point_mass_proposal
from eval.proposers.suffix import SuffixProposer
from eval.sampling import SamplingParams
from eval.static_engine import Engine


class LookupFirstProposer(Proposer):
    """The lookup's chain where its match is ≥ min_match tokens, else the learned drafter's chain (per row)."""

    tree_depth = None
    proposes_trees = False

    def __init__(self, learned: Proposer, lookup: SuffixProposer, min_match: int, learned_max: Optional[int] = None):
        """learned_max: the learned drafter drafts at most this many tokens (its card's γ) while the lookup drafts
        up to the step's γ; None = the step's γ for both."""
        if learned.tree_depth is not None or learned.proposes_trees or lookup.use_tree_spec:
            raise ValueError("lookup-first drafting combines chains: build both proposers with eval.tree=null")
        if learned_max is not None and learned_max < 1:
            raise ValueError(f"learned_max={learned_max}: set an integer ≥ 1, or None for the step's γ")
        if min_match < 1:
            raise ValueError(f"min_match={min_match}: set an integer ≥ 1 (the context tokens a lookup must match)")
        self.learned, self.lookup, self.min_match, self.learned_max = learned, lookup, min_match, learned_max
        self.target_layer_ids = tuple(learned.target_layer_ids)
        self.max_num_speculative_tokens = learned.max_num_speculative_tokens
        self.engine_models = tuple(learned.engine_models)
        self.drafts_from = {"lookup": 0, "learned": 0}  # rows per step drafted by each part (counted)

    def reset(self, batch_size: int, device: torch.device) -> None:
        self.learned.reset(batch_size, device)
        self.lookup.reset(batch_size, device)

    def use_engine(self, engine: Engine) -> None:
        self.learned.use_engine(engine)

    def begin_workload(self, name: str) -> None:
        self.learned.begin_workload(name)
        self.lookup.begin_workload(name)

    def accept(self, num_valid: list[int], features: Optional[TargetFeatures] = None) -> None:
        self.learned.accept(num_valid, features)
        self.lookup.accept(num_valid, features)

    def propose(
        self, sequences: list[list[int]], num_speculative_tokens: int, params: SamplingParams, generator=None
    ) -> Proposal:
        drafts = self.lookup.drafts(sequences, num_speculative_tokens)
        covered = [bool(d.tokens) and d.match_len >= self.min_match for d in drafts]
        self.drafts_from["lookup"] += sum(covered)
        self.drafts_from["learned"] += len(covered) - sum(covered)
        vocab, device = self.lookup.vocab_size, self.lookup.device
        if all(covered):
            return point_mass_proposal([(d.tokens, None) for d in drafts], params, vocab, device, tree=False)
        gamma = num_speculative_tokens if self.learned_max is None else min(num_speculative_tokens, self.learned_max)
        learned = self.learned.propose(sequences, gamma, params, generator)
        if not any(covered):
            return learned
        return _per_row(learned, [d.tokens if c else None for d, c in zip(drafts, covered)], params)


def _per_row(learned: Proposal, lookups: list[Optional[list[int]]], params: SamplingParams) -> Proposal:
    """The learned proposal with the rows given a lookup chain replaced by it (one-hot q), padded with token 0."""
    tokens, probs = learned.draft_tokens, learned.draft_probs
    B, N = tokens.shape
    width = max(N, *(len(c) for c in lookups if c is not None))
    counts = learned.num_draft.tolist() if learned.num_draft is not None else [N] * B
    out = tokens.new_zeros(B, width)
    out[:, :N] = tokens
    q = None
    if not params.greedy:
        q = probs.new_zeros(B, width, probs.shape[-1])
        q[:, :N] = probs
        q[:, N:, 0] = 1.0  # padding: a valid one-hot, never accepted
    for b, chain in enumerate(lookups):
        if chain is None:
            continue
        out[b] = 0
        out[b, : len(chain)] = torch.tensor(chain, device=out.device)
        counts[b] = len(chain)
        if q is not None:
            q[b] = 0
            q[b].scatter_(-1, out[b, :, None], 1.0)
    num_draft = torch.tensor(counts, device=out.device)
    return Proposal(out, q, None, num_draft=num_draft, draft_forwards=learned.draft_forwards, observe=learned.observe)
