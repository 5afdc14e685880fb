"""Proposals from DFlash2 drafters: one block forward (DFlash's, with the block convolutions), then the candidate
selector's walk.

The context cache and the block [newest token, MASK × γ] are DFlash's (eval/proposers/dflash.py). Each
mask slot keeps its lm_head top-k; the walk goes left to right from the newest token, choosing at slot l
the candidate with the best score unary + transition(previous choice), as vLLM's DFlash2 speculator does
(greedy: the best; sampling: drawn from the softmax of the k scores at the request's temperature, every
other token impossible — q_l is exactly that distribution, so verification stays lossless).
"""

from __future__ import annotations

import torch

from eval.proposer import Proposal
from eval.proposers.base import ProposerEntry, check_paired
from eval.proposers.dflash import DFlashProposer, _check
from eval.sampling import SamplingParams, probs_from_logits, sample


class DFlash2Proposer(DFlashProposer):
    @torch.no_grad()
    def propose(
        self, sequences: list[list[int]], num_speculative_tokens: int, params: SamplingParams, generator=None
    ) -> Proposal:
        drafter = self.drafter
        hidden = self.block_hidden(sequences, 1 + num_speculative_tokens)[:, 1:]  # (B, γ, H) the mask slots
        logits = drafter.head(hidden)
        logits[..., self.vocab_size :] = float("-inf")  # rows past the tokenizer's vocabulary are never drafted
        values, ids = logits.topk(drafter.arch.selector_top_k, dim=-1)  # (B, γ, k)
        prev = torch.tensor([s[-1] for s in sequences], device=hidden.device)
        tokens, probs = [], []
        for i in range(num_speculative_tokens):
            transition = drafter.candidate_selector.transition(prev[:, None], hidden[:, i], ids[:, i])[:, 0]
            scores = (values[:, i] + transition.to(values.dtype)).float()  # (B, k)
            if params.greedy:
                choice = scores.argmax(-1)
            else:
                full = torch.full((len(sequences), self.vocab_size), float("-inf"), device=scores.device)
                q = probs_from_logits(full.scatter(1, ids[:, i], scores), params)  # (B, V): mass on the k only
                probs.append(q)
                choice = (ids[:, i] == sample(q[:, None], generator)[:, 0, None]).float().argmax(-1)
            prev = ids[:, i].gather(1, choice[:, None])[:, 0]
            tokens.append(prev)
        return Proposal(torch.stack(tokens, 1), torch.stack(probs, 1) if probs else None, draft_forwards=1)


def _build(drafter, *, target, vocab_size: int, cfg, path) -> DFlash2Proposer:
    check_paired(drafter, target, vocab_size, path, "a DFlash2")
    _check(drafter, cfg)
    return DFlash2Proposer(drafter, vocab_size)


ENTRY = ProposerEntry(build=_build, check=_check)
