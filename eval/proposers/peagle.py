"""Proposals from P-EAGLE drafters: a chain of γ tokens from ONE drafter forward, as vLLM drafts them.

The cache rule is EAGLE-3's (eval/proposers/eagle3.py): one entry per verified position, features
waiting in a per-row buffer until the next `propose`. Each `propose` runs a single `decode` over
[the waiting verified entries ; γ−1 mask entries] per row: the masks (mask id, fc(mask_hidden))
sit at the positions after the row's last verified entry (the bonus slot), attend causally to the
cache, the verified entries and the earlier masks, and never to a row's padding entries. The
bonus slot's output gives draft 1 and mask i's gives draft i+1. The mask entries are dropped from
the cache afterwards, so it again holds only verified entries and `accept` needs no rollback.
Under sampling each draft is drawn independently from its own slot's q (no slot reads another's
draw), which is what lossless chain verification needs.
"""

from __future__ import annotations

import torch

from eval.config import EvalConfig
from eval.proposer import Proposal
from eval.proposers.base import ProposerEntry, check_paired, check_trained_block
from eval.proposers.eagle3 import EagleProposer
from eval.sampling import SamplingParams, probs_from_logits, sample
from heads.peagle import PEagleDrafter


class PEagleProposer(EagleProposer):
    """Chains only: γ ≤ the drafter's max_draft_tokens (K, the longest block it was trained for)."""

    def __init__(self, drafter: PEagleDrafter, vocab_size: int):
        super().__init__(drafter, vocab_size, tree=None)
        self.max_num_speculative_tokens = drafter.max_draft_tokens

    @torch.no_grad()
    def propose(
        self, sequences: list[list[int]], num_speculative_tokens: int, params: SamplingParams, generator=None
    ) -> Proposal:
        B, device, gamma = len(sequences), self.last_hidden.device, num_speculative_tokens
        verified = self.cache.width
        masks = gamma - 1
        block = self._verified_block(sequences)  # None when no row has waiting entries
        W = 0 if block is None else block[0].shape[1]
        # Mask i (1…γ−1) sits at the bonus slot's position + i; the bonus slot (the last verified
        # entry, waiting or cached) is at len − 2: the newest token has no target features yet.
        last = torch.tensor([len(s) - 2 for s in sequences], device=device)
        mask_positions = last[:, None] + torch.arange(1, masks + 1, device=device)  # (B, γ−1)
        mask_hidden = self.drafter.mask_entry().expand(B, masks, -1)
        mask_tokens = torch.full((B, masks), self.drafter.mask_token_id, device=device)
        mask_valid = torch.ones(B, masks, dtype=torch.bool, device=device)
        if block is None:
            block = (mask_hidden, mask_tokens, mask_positions, mask_valid)
        else:
            block = tuple(
                torch.cat(pair, 1) for pair in zip(block, (mask_hidden, mask_tokens, mask_positions, mask_valid))
            )
        out = self.drafter.decode(self.cache, *block) if block[0].shape[1] else None  # the one forward: (B, W+γ−1, H)
        if W:
            self._advance(out)  # last_hidden ← each row's bonus-slot output (kept when it was cached already)
        self.cache.truncate(verified + W)  # mask entries never stay
        hidden = torch.cat([self.last_hidden[:, None], out[:, W:]], 1) if masks else self.last_hidden[:, None]
        logits = self._to_target(self.drafter.logits(hidden))  # (B, γ, V)
        if params.greedy:
            return Proposal(logits.argmax(-1), None, draft_forwards=1)
        q = probs_from_logits(logits, params)  # (B, γ, V)
        return Proposal(sample(q, generator), q, draft_forwards=1)


def _build(drafter, *, target, vocab_size: int, cfg: EvalConfig, path) -> PEagleProposer:
    check_paired(drafter, target, vocab_size, path, "a P-EAGLE")
    check_trained_block(drafter, cfg)
    return PEagleProposer(drafter, vocab_size)


ENTRY = ProposerEntry(build=_build, check=check_trained_block)
