"""Blocks from a PARD drafter: K draft tokens from ONE forward of a draft LM.

Each step feeds, in one forward, what the drafter's cache lacks of the verified sequence (the
prompt at first; later the corrected or bonus token and any accepted drafts) followed by γ − 1
mask tokens; the logits at the last verified token and at each mask are the γ drafts. This is the
input vLLM builds for `draft_model` with `parallel_drafting: true` (VLLM-FORMATS §1): true
positions, causal attention. The masks never stay in the cache: it is rolled back to the verified
tokens right after the forward, so `accept` only rolls back what verification rejected.

Under sampling each draft token is drawn from its own slot's q; no slot sees another slot's
sampled token, so q is exactly the distribution the token was drawn from and rejection sampling
stays lossless.
"""

from __future__ import annotations

from typing import Optional

import torch

from eval.config import EvalConfig
from eval.errors import EvalError
from eval.kv_cache import SlotCache
from eval.proposer import Proposal, Proposer, TargetFeatures
from eval.proposers.base import ProposerEntry, check_trained_block
from eval.sampling import SamplingParams, probs_from_logits, sample


class PardProposer(Proposer):
    target_layer_ids: tuple[int, ...] = ()
    tree_depth = None

    def __init__(self, model: torch.nn.Module, vocab_size: int, pard_token: int, max_draft_tokens: Optional[int]):
        self.model, self.vocab_size, self.pard_token = model, vocab_size, pard_token
        self.max_num_speculative_tokens = max_draft_tokens  # the block length it was trained for
        self.cache: Optional[SlotCache] = None

    def reset(self, batch_size: int = 1, device: Optional[torch.device] = None) -> None:
        self.cache = SlotCache(batch_size, device or next(self.model.parameters()).device)

    @torch.no_grad()
    def propose(
        self, sequences: list[list[int]], num_speculative_tokens: int, params: SamplingParams, generator=None
    ) -> Proposal:
        gamma, lengths = num_speculative_tokens, self.cache.lengths()
        rows = [s[n:] + [self.pard_token] * (gamma - 1) for s, n in zip(sequences, lengths)]
        logits = self.cache.feed(self.model, rows, logits_to_keep=gamma).logits[:, -gamma:, : self.vocab_size]
        self.cache.rollback([len(s) for s in sequences])  # the masks leave the cache again
        if params.greedy:
            return Proposal(logits.argmax(-1), draft_forwards=1)  # (B, γ)
        q = probs_from_logits(logits, params)  # (B, γ, V)
        return Proposal(sample(q, generator), q, draft_forwards=1)

    def accept(self, num_valid: list[int], features: Optional[TargetFeatures] = None) -> None:
        self.cache.rollback(num_valid)


def _build(drafter, *, target, vocab_size: int, cfg: EvalConfig, path) -> PardProposer:
    check_trained_block(drafter, cfg)
    if drafter.config.vocab_size < vocab_size:
        raise EvalError(
            f"{path} scores {drafter.config.vocab_size} tokens but the target's tokenizer has {vocab_size}; "
            "a PARD drafter must share the target's vocabulary"
        )
    return PardProposer(drafter.model, vocab_size, drafter.pard_token, drafter.max_draft_tokens)


ENTRY = ProposerEntry(build=_build, check=check_trained_block)
