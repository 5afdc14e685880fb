"""Speculative decoding (chain, batch 1) and the autoregressive baseline it is measured against.

Both decode with a KV cache; both stop at the first end-of-turn token or after max_new_tokens,
so under greedy decoding their outputs must be identical token for token.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch
from transformers import DynamicCache

from eval.kv_cache import truncate
from eval.proposer import Proposer
from eval.sampling import SamplingParams, probs_from_logits, sample
from eval.verify import greedy_verify, rejection_sample


@dataclass
class DecodeStats:
    accept_counts: list[int] = field(default_factory=list)  # accepted draft tokens per step
    draft_seconds: float = 0.0
    target_seconds: float = 0.0
    target_forwards: int = 0
    proposed_tokens: int = 0

    def add(self, other: "DecodeStats") -> None:
        """Accumulate another decode's counts and timings into this one."""
        self.accept_counts += other.accept_counts
        self.draft_seconds += other.draft_seconds
        self.target_seconds += other.target_seconds
        self.target_forwards += other.target_forwards
        self.proposed_tokens += other.proposed_tokens


def _now(device: torch.device) -> float:
    if device.type == "cuda":
        torch.cuda.synchronize(device)  # host sync: phase timings need finished kernels
    return time.perf_counter()


def _finish(generated: list[int], max_new_tokens: int, eos_ids: set[int]) -> tuple[list[int], bool]:
    """Cut at the first end token (kept) or the length cap; say whether decoding is done."""
    for i, tok in enumerate(generated[:max_new_tokens]):
        if tok in eos_ids:
            return generated[: i + 1], True
    return generated[:max_new_tokens], len(generated) >= max_new_tokens


@torch.no_grad()
def speculative_step(target, proposer: Proposer, tokens: torch.Tensor, cache: DynamicCache, gamma: int, params: SamplingParams, vocab_size: int, stats: DecodeStats, generator=None) -> list[int]:
    """One draft-then-verify step (Leviathan et al. 2023; Chen et al. 2023).

    Args:
        tokens: (1, n) accepted sequence; the target cache holds its first n−1 tokens.
    Returns:
        the new tokens: accepted draft tokens plus the corrected or bonus token.
    """
    device = tokens.device
    # 1. Draft γ tokens, keeping q for lossless verification.
    t0 = _now(device)
    proposal = proposer.propose(tokens, gamma, params, generator)
    t1 = _now(device)
    # 2. One target forward over [last token, draft tokens]: γ+1 next-token distributions.
    verify_ids = torch.cat([tokens[:, -1:], proposal.draft_tokens.view(1, -1)], dim=1)  # (1, γ+1)
    logits = target(input_ids=verify_ids, past_key_values=cache, use_cache=True).logits[0, :, :vocab_size]  # (γ+1, V)
    # 3. Accept/reject: the longest greedy-matching prefix, or exact rejection sampling.
    if params.greedy:
        num_accepted, next_token = greedy_verify(logits, proposal.draft_tokens)
    else:
        num_accepted, next_token = rejection_sample(probs_from_logits(logits, params), proposal.draft_probs, proposal.draft_tokens, generator)
    t2 = _now(device)
    # 4. Roll both caches back to the valid prefix: n tokens + the accepted drafts. Entries past
    #    it (rejected drafts) are cropped, so the next forward recomputes from the right state.
    n = tokens.shape[1]
    truncate(cache, n + num_accepted)
    proposer.rollback(n + num_accepted)
    stats.accept_counts.append(num_accepted)
    stats.draft_seconds += t1 - t0
    stats.target_seconds += t2 - t1
    stats.target_forwards += 1
    stats.proposed_tokens += gamma
    return proposal.draft_tokens[:num_accepted].tolist() + [next_token]  # host sync


@torch.no_grad()
def speculative_generate(target, proposer: Proposer, input_ids: torch.Tensor, max_new_tokens: int, gamma: int, params: SamplingParams, eos_ids: set[int], vocab_size: int, generator=None) -> tuple[list[int], DecodeStats]:
    """Decode up to max_new_tokens after input_ids (1, n). Returns new token ids and stats."""
    stats = DecodeStats()
    proposer.reset()
    cache = DynamicCache()
    # Prefill the target with all but the last prompt token; each step feeds that token first.
    if input_ids.shape[1] > 1:
        target(input_ids=input_ids[:, :-1], past_key_values=cache, use_cache=True)
    tokens, generated = input_ids, []
    while True:
        new = speculative_step(target, proposer, tokens, cache, gamma, params, vocab_size, stats, generator)
        generated.extend(new)
        generated, done = _finish(generated, max_new_tokens, eos_ids)
        if done:
            return generated, stats
        tokens = torch.cat([tokens, torch.tensor([new], device=tokens.device)], dim=1)


@torch.no_grad()
def autoregressive_generate(target, input_ids: torch.Tensor, max_new_tokens: int, params: SamplingParams, eos_ids: set[int], vocab_size: int, generator=None) -> list[int]:
    """Plain KV-cached decoding, one target forward per token: the speed-up baseline."""
    cache, feed, generated = DynamicCache(), input_ids, []
    for _ in range(max_new_tokens):
        logits = target(input_ids=feed, past_key_values=cache, use_cache=True).logits[0, -1, :vocab_size]
        token = logits.argmax(-1) if params.greedy else sample(probs_from_logits(logits, params), generator)
        tok = int(token)  # host sync: one per token, as in any decoding loop
        generated.append(tok)
        if tok in eos_ids:
            break
        feed = token.view(1, 1)
    return generated
