"""Proposals from DSpark drafters: one block forward, then the Markov head left to right.

The context cache is DFlash's (eval/proposers/dflash.py). `propose` runs the block
[newest token, MASK × (γ − 1)] at positions n−1 … n−2+γ, anchor-first: slot i drafts the token after
its own position. Draft i's logits are the slot's lm_head logits plus the Markov bias of the token
before it — the newest token for i = 0, then draft i − 1 as drafted (argmax, or the sample) — as
vLLM's DSpark speculator does. Under sampling, q_i is the distribution draft i was drawn from given
the drafts before it, which is what lossless verification of a chain needs.

Adaptive length (`eval.draft_confidence_min`): the confidence head estimates each draft's acceptance
probability; a row keeps its drafts up to (not including) the first one estimated below the
threshold — none if the first is — which is the cut llama.cpp's `--spec-draft-p-min` makes. The block
forward is the same; only the chain the target verifies is shorter.
"""

from __future__ import annotations

import torch

from eval.config import EvalConfig
from eval.errors import EvalError
from eval.proposer import Proposal
from eval.proposers.base import ProposerEntry, check_block_drafter, check_paired
from eval.proposers.dflash import DFlashProposer
from eval.sampling import SamplingParams, probs_from_logits, sample
from heads.block import drafts_per_block
from heads.dspark import DSparkArch, DSparkDrafter


def kept_drafts(confidence: torch.Tensor, threshold: float) -> torch.Tensor:
    """(B, γ) estimated acceptance probabilities → (B,) drafts kept: those before the first one under the
    threshold (none when the first is: that step decodes one token, as llama.cpp's --spec-draft-p-min does)."""
    below = confidence < threshold
    none_below = torch.full((below.shape[0],), below.shape[1], device=below.device)
    return torch.where(below.any(1), below.float().argmax(1), none_below)


class DSparkProposer(DFlashProposer):
    def __init__(self, drafter: DSparkDrafter, vocab_size: int, confidence_min=None):
        super().__init__(drafter, vocab_size)
        self.max_num_speculative_tokens = drafter.arch.block_size  # every slot drafts
        self.confidence_min = confidence_min

    @torch.no_grad()
    def propose(
        self, sequences: list[list[int]], num_speculative_tokens: int, params: SamplingParams, generator=None
    ) -> Proposal:
        gamma, drafter = num_speculative_tokens, self.drafter
        hidden = self.block_hidden(sequences, gamma)  # (B, γ, H)
        base = drafter.head(hidden)[..., : self.vocab_size].float()  # (B, γ, V): every slot in one matmul
        markov = drafter.markov_head
        prev = torch.tensor([s[-1] for s in sequences], device=hidden.device)
        tokens, probs, embedded = [], [], []
        for i in range(gamma):  # left to right: draft i's bias comes from draft i − 1
            e = markov.embed(prev)
            logits = base[:, i] + markov.bias(e)[:, : self.vocab_size].float()
            if params.greedy:
                prev = logits.argmax(-1)
            else:
                q = probs_from_logits(logits, params)
                prev = sample(q[:, None], generator)[:, 0]
                probs.append(q)
            tokens.append(prev)
            embedded.append(e)
        draft = torch.stack(tokens, 1)
        num_draft = None
        if self.confidence_min is not None:
            confidence = drafter.confidence(hidden, torch.stack(embedded, 1)).sigmoid()  # (B, γ)
            num_draft = kept_drafts(confidence, self.confidence_min)
        return Proposal(draft, torch.stack(probs, 1) if probs else None, num_draft=num_draft, draft_forwards=1)


def _check(settings, cfg: EvalConfig) -> None:
    """settings: the drafter config (preflight) or the loaded drafter (its arch)."""
    check_block_drafter(settings, cfg)
    arch = getattr(settings, "arch", settings)
    if cfg.num_speculative_tokens > drafts_per_block(arch.block_size, DSparkArch.anchor_first):
        raise EvalError(
            f"eval.num_speculative_tokens={cfg.num_speculative_tokens} exceeds drafter.block_size={arch.block_size}: "
            "DSpark drafts at most the block it was trained for"
        )
    if cfg.draft_confidence_min is not None and not getattr(arch, "confidence_head", False):
        raise EvalError(
            f"eval.draft_confidence_min={cfg.draft_confidence_min}: this DSpark drafter has no confidence head; "
            "train it with drafter.confidence_head=true, or set eval.draft_confidence_min=null"
        )


def _build(drafter, *, target, vocab_size: int, cfg: EvalConfig, path) -> DSparkProposer:
    check_paired(drafter, target, vocab_size, path, "a DSpark")
    _check(drafter, cfg)
    return DSparkProposer(drafter, vocab_size, cfg.draft_confidence_min)


ENTRY = ProposerEntry(build=_build, check=_check, adaptive_length=True)
