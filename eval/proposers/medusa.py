"""Proposals from Medusa heads: a chain of each head's top-1, or a token tree of per-head candidates.

The engine's target cache holds every verified token but the last, so after each step the
newest target hidden state is the one at the position before the last verified token s[-1]:
the state whose lm_head output chose s[-1]. Head k reads it and predicts the token k+2 ahead,
i.e. draft position k after s[-1] — exactly where the engine places draft node k of a chain.
One matrix product per head per step; the heads keep no cache.
"""

from __future__ import annotations

from typing import Optional

import torch

from eval.config import EvalConfig
from eval.errors import EvalError
from eval.proposer import Proposal, Proposer, TargetFeatures
from eval.proposers.base import ProposerEntry
from eval.sampling import SamplingParams, probs_from_logits, sample
from heads.medusa import MedusaHeads
from heads.medusa_tree import full_tree, tree_parents


class MedusaProposer(Proposer):
    """Chains (head k's top-1 at depth k) or a fixed tree of per-head candidates.

    Tree nodes are paths of candidate ranks (heads.medusa_tree). Under greedy decoding node
    (r_1 … r_d) carries head d's rank-r_d token. Under sampling, lossless tree verification
    needs siblings drawn independently from their q, so each depth-d node instead carries an
    independent draw from head d's distribution (the tree keeps its shape); with
    `topk_candidates` (typical acceptance, lossy) the greedy candidates are used as Medusa does.
    """

    target_layer_ids = (-1,)  # the final normed hidden state (transformers ties hidden_states[-1] to it)

    def __init__(
        self,
        heads: MedusaHeads,
        vocab_size: int,
        tree: Optional[list[tuple[int, ...]]] = None,
        topk_candidates: bool = False,
    ):
        self.heads, self.vocab_size, self.topk_candidates = heads, vocab_size, topk_candidates
        self.max_num_speculative_tokens = heads.num_heads
        self.tree = [tuple(p) for p in tree] if tree else None
        self.tree_depth = max(map(len, self.tree)) if self.tree else None
        if self.tree_depth and self.tree_depth > heads.num_heads:
            raise ValueError(
                f"a depth-{self.tree_depth} tree needs {self.tree_depth} Medusa heads; these have {heads.num_heads}"
            )
        self.hidden: Optional[torch.Tensor] = None  # (B, H) newest target hidden state per row

    def reset(self, batch_size: int, device: torch.device) -> None:
        self.hidden = torch.zeros(
            batch_size, self.heads.hidden_size, device=device, dtype=next(self.heads.parameters()).dtype
        )
        if self.tree:
            self._parents = torch.tensor(tree_parents(self.tree), device=device)  # (N,)
            self._depth = torch.tensor([len(p) - 1 for p in self.tree], device=device)  # (N,) head index
            self._rank = torch.tensor([p[-1] for p in self.tree], device=device)  # (N,)

    def accept(self, num_valid: list[int], features: Optional[TargetFeatures] = None) -> None:
        """Keep each row's newest target hidden state (rows with no new tokens keep theirs)."""
        if features is None:
            return
        count = features.valid.sum(1)  # (B,)
        last = features.states.gather(
            1, (count - 1).clamp(min=0)[:, None, None].expand(-1, 1, features.states.shape[-1])
        )[:, 0]  # (B, H)
        self.hidden = torch.where((count > 0)[:, None], last.to(self.hidden.dtype), self.hidden)

    @torch.no_grad()
    def propose(
        self, sequences: list[list[int]], num_speculative_tokens: int, params: SamplingParams, generator=None
    ) -> Proposal:
        depth = self.tree_depth or num_speculative_tokens
        if depth > self.heads.num_heads:
            raise ValueError(f"Medusa proposes at most {self.heads.num_heads} tokens (one per head); asked for {depth}")
        logits = torch.stack(self.heads(self.hidden)[:depth], 1)[..., : self.vocab_size]  # (B, D, V)
        greedy = params.greedy or self.topk_candidates
        if self.tree is None:
            if greedy:
                return Proposal(logits.argmax(-1), draft_forwards=1)  # all heads at once
            q = probs_from_logits(logits, params)  # (B, D, V)
            return Proposal(sample(q, generator), q, draft_forwards=1)
        batch = logits.shape[0]
        parents = self._parents.expand(batch, -1)
        if greedy:
            ranked = logits.topk(int(self._rank.max()) + 1, dim=-1).indices  # (B, D, R)
            return Proposal(ranked[:, self._depth, self._rank], None, parents, draft_forwards=1)
        q = probs_from_logits(logits, params)[:, self._depth]  # (B, N, V): node j's q is its head's
        # an independent draw per node
        tokens = torch.multinomial(q.flatten(0, 1), 1, generator=generator).view(batch, -1)
        return Proposal(tokens, q, parents, draft_forwards=1)


def _refuse_dynamic_tree(cfg: EvalConfig) -> None:
    if cfg.tree == "dynamic":
        raise EvalError(
            "eval.tree=dynamic is EAGLE-2's tree; Medusa decodes chains, its saved tree (drafter) or children per depth"
        )


def _check(settings, cfg: EvalConfig) -> None:
    _refuse_dynamic_tree(cfg)
    heads = settings.num_heads
    if not cfg.tree and cfg.num_speculative_tokens > heads:
        raise EvalError(
            f"eval.num_speculative_tokens={cfg.num_speculative_tokens} exceeds drafter.num_heads={heads}: "
            "Medusa proposes one token per head"
        )
    if isinstance(cfg.tree, list) and len(cfg.tree) > heads:
        raise EvalError(f"eval.tree={cfg.tree} is {len(cfg.tree)} deep but drafter.num_heads={heads}")


def _build(heads, *, target, vocab_size: int, cfg: EvalConfig, path) -> MedusaProposer:
    target_hidden = target.get_output_embeddings().weight.shape[1]
    if heads.hidden_size != target_hidden or heads.vocab_size < vocab_size:
        raise EvalError(
            f"{path} holds Medusa heads for hidden size {heads.hidden_size} and {heads.vocab_size} tokens; this target "
            f"has {target_hidden} and {vocab_size}: pair the heads with the target they were trained on"
        )
    _refuse_dynamic_tree(cfg)  # a chain longer than the heads is refused by the engine, naming its limit
    if cfg.tree == "drafter":
        if heads.tree is None:
            raise EvalError(
                f"{path} carries no medusa_tree.json; "
                "use eval.tree=null (chains) or children per depth such as [3, 2, 1]"
            )
        tree = heads.tree
    else:
        tree = full_tree(list(cfg.tree)) if cfg.tree else None
    if tree and max(map(len, tree)) > heads.num_heads:
        raise EvalError(
            f"eval.tree={cfg.tree} is {max(map(len, tree))} deep but the drafter has {heads.num_heads} Medusa heads"
        )
    return MedusaProposer(heads, vocab_size, tree, topk_candidates=cfg.acceptance == "typical")


ENTRY = ProposerEntry(build=_build, check=_check)
