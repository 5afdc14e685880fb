"""Proposals from DFlash drafters: the whole chain of γ drafts from one block forward.

Cache rule: per drafter layer, the context keys and values of every verified position that has
target features (all but the newest token), computed once when `accept` delivers the features
and never recomputed; entries only ever append (a rejected draft never had features), so
`accept` needs no rollback. Rows are ragged: each `accept` appends one column block for all
rows, and `valid` masks the columns a row did not fill. `propose` runs the block
[newest token, MASK × γ] at positions n−1 … n−1+γ over that context, bidirectionally inside the
block, and reads the γ mask slots (slot i drafts the token at its own position) — as vLLM's
`dflash` method does. Under sampling each draft is drawn independently from its slot's q,
which is what lossless verification of a chain needs (q of each token is known exactly).
"""

from __future__ import annotations

from typing import Optional

import torch

from eval.config import EvalConfig
from eval.errors import EvalError
from eval.proposer import Proposal, Proposer, TargetFeatures
from eval.proposers.base import ProposerEntry, check_block_drafter, check_paired
from eval.sampling import SamplingParams, probs_from_logits, sample
from heads.block import drafts_per_block
from heads.dflash import DFlashArch, DFlashDrafter


class DFlashProposer(Proposer):
    tree_depth = None  # chains only: the block is one chain

    def __init__(self, drafter: DFlashDrafter, vocab_size: int):
        self.drafter, self.vocab_size = drafter, vocab_size
        self.target_layer_ids = drafter.target_layer_ids
        self.max_num_speculative_tokens = drafter.arch.drafts_per_block

    def reset(self, batch_size: int, device: torch.device) -> None:
        arch, dtype = self.drafter.arch, self.drafter.fc.weight.dtype
        empty = torch.zeros(batch_size, arch.num_key_value_heads, 0, arch.head_dim, device=device, dtype=dtype)
        self.keys = [empty] * arch.num_hidden_layers  # per layer (B, kv, S, d)
        self.values = [empty] * arch.num_hidden_layers
        self.valid = torch.zeros(batch_size, 0, dtype=torch.bool, device=device)  # (B, S)
        self.fed = [0] * batch_size  # verified positions with context entries, per row

    @torch.no_grad()
    def accept(self, num_valid: list[int], features: Optional[TargetFeatures] = None) -> None:
        if features is None:
            return
        counts = features.valid.sum(1).tolist()  # host sync: new features per row
        width = max(counts, default=0)
        if width == 0:
            return
        device = self.valid.device
        positions = torch.tensor(self.fed, device=device)[:, None] + torch.arange(width, device=device)  # (B, w)
        context = self.drafter.context_kv(features.states[:, :width].to(device), positions)
        for i, (k, v) in enumerate(context):
            self.keys[i] = torch.cat([self.keys[i], k], 2)
            self.values[i] = torch.cat([self.values[i], v], 2)
        self.valid = torch.cat([self.valid, features.valid[:, :width].to(device)], 1)
        self.fed = [f + c for f, c in zip(self.fed, counts)]

    def block_hidden(self, sequences: list[list[int]], width: int) -> torch.Tensor:
        """(B, width, H) normed hiddens of the block [newest token, MASK × (width − 1)] at n−1 … n−2+width."""
        device = self.valid.device
        if any(f != len(s) - 1 for f, s in zip(self.fed, sequences)):
            raise RuntimeError(
                f"DFlash context holds {self.fed} positions but the rows have {[len(s) for s in sequences]} tokens: "
                "the engine must deliver target features for every verified token but the newest"
            )
        B = len(sequences)
        tokens = torch.full((B, width), self.drafter.arch.mask_token_id, dtype=torch.long, device=device)
        tokens[:, 0] = torch.tensor([s[-1] for s in sequences], device=device)
        positions = torch.tensor(self.fed, device=device)[:, None] + torch.arange(width, device=device)  # (B, m)
        mask = torch.cat(
            [self.valid[:, None, :].expand(B, width, -1), torch.ones(B, width, width, dtype=torch.bool, device=device)],
            -1,
        )
        return self.drafter.block_hidden(tokens, positions, list(zip(self.keys, self.values)), mask)

    @torch.no_grad()
    def propose(
        self, sequences: list[list[int]], num_speculative_tokens: int, params: SamplingParams, generator=None
    ) -> Proposal:
        hidden = self.block_hidden(sequences, 1 + num_speculative_tokens)
        logits = self.drafter.head(hidden[:, 1:])[..., : self.vocab_size].float()  # (B, γ, V): the mask slots
        if params.greedy:
            return Proposal(logits.argmax(-1), draft_forwards=1)
        q = probs_from_logits(logits, params)  # (B, γ, V), each slot independent
        return Proposal(sample(q, generator), q, draft_forwards=1)


def _check(settings, cfg: EvalConfig) -> None:
    """settings: the drafter config (preflight) or the loaded drafter (its arch carries block_size)."""
    check_block_drafter(settings, cfg)
    block = getattr(settings, "arch", settings).block_size
    if cfg.num_speculative_tokens > (most := drafts_per_block(block, DFlashArch.anchor_first)):
        raise EvalError(
            f"eval.num_speculative_tokens={cfg.num_speculative_tokens} exceeds drafter.block_size − 1 = {most}: "
            "DFlash drafts at most the mask slots of the block it was trained for"
        )


def _build(drafter, *, target, vocab_size: int, cfg: EvalConfig, path) -> DFlashProposer:
    check_paired(drafter, target, vocab_size, path, "a DFlash")
    _check(drafter, cfg)
    return DFlashProposer(drafter, vocab_size)


ENTRY = ProposerEntry(build=_build, check=_check)
