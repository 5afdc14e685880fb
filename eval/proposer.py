"""The proposer interface the engine talks to, and the draft LM's implementation.

A proposer keeps its own KV cache over the accepted tokens. `propose` returns γ draft tokens
(a chain) with the draft probabilities q used by lossless verification; `rollback` tells it how
many tokens of the sequence survived verification.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Protocol

import torch
from transformers import DynamicCache

from eval.kv_cache import truncate
from eval.sampling import SamplingParams, probs_from_logits, sample


@dataclass
class Proposal:
    draft_tokens: torch.Tensor  # (γ,)
    draft_probs: Optional[torch.Tensor]  # (γ, V) q; None under greedy decoding
    parents: Optional[torch.Tensor] = None  # (γ,) parent index per node for trees; None = chain


class Proposer(Protocol):
    def reset(self) -> None: ...

    def propose(self, tokens: torch.Tensor, num_speculative_tokens: int, params: SamplingParams, generator=None) -> Proposal: ...

    def rollback(self, num_valid: int) -> None: ...


class DraftLMProposer:
    """Chain proposals from an independent draft LM with a KV cache.

    Cache rule: the cache holds the first `cache_len` tokens of the current sequence. After
    verification `rollback(n)` crops it to the n tokens still valid; the next `propose` feeds
    whatever the cache lacks (the corrected/bonus token, and the last draft token when all
    were accepted) before drafting.
    """

    def __init__(self, model: torch.nn.Module, vocab_size: int):
        self.model, self.vocab_size = model, vocab_size
        self.reset()

    def reset(self) -> None:
        self.cache, self.cache_len = DynamicCache(), 0

    @torch.no_grad()
    def propose(self, tokens: torch.Tensor, num_speculative_tokens: int, params: SamplingParams, generator=None) -> Proposal:
        """tokens: (1, n) the accepted sequence. Returns γ draft tokens continuing it."""
        feed = tokens[:, self.cache_len :]  # (1, n - cache_len)
        draft_tokens, draft_probs = [], []
        for i in range(num_speculative_tokens):
            logits = self.model(input_ids=feed, past_key_values=self.cache, use_cache=True).logits[0, -1, : self.vocab_size]
            self.cache_len += feed.shape[1]
            if params.greedy:
                token = logits.argmax(-1)
            else:
                q = probs_from_logits(logits, params)
                token = sample(q, generator)
                draft_probs.append(q)
            draft_tokens.append(token)
            feed = token.view(1, 1)
        # The last draft token is not fed: if it is accepted the next round feeds it.
        return Proposal(torch.stack(draft_tokens), torch.stack(draft_probs) if draft_probs else None)

    def rollback(self, num_valid: int) -> None:
        if self.cache_len > num_valid:
            truncate(self.cache, num_valid)
            self.cache_len = num_valid
