"""Proposals from an independent draft LM sharing the target's tokenizer (also a layer-skip export, which is one).

Chains take γ draft forwards; trees (eval.tree = children per depth) one forward per depth. The draft LM is
the one proposer with its own model cache, so it follows the engine's path (`use_engine`).
"""

from __future__ import annotations

from typing import Optional

import torch

from eval.config import EvalConfig
from eval.errors import EvalError
from eval.kv_cache import SlotCache
from eval.proposer import Proposal, Proposer, TargetFeatures
from eval.proposers.base import ProposerEntry
from eval.sampling import SamplingParams, probs_from_logits, sample
from eval.static_engine import DYNAMIC, Engine


class DraftLMProposer(Proposer):
    """Chain or tree proposals from an independent draft LM sharing the target's tokenizer.

    Cache rule: the draft's SlotCache holds a prefix of each row's sequence. `propose` feeds what
    it lacks (the prompt at first; later the corrected token, or the last draft and the bonus
    token when all were accepted), then drafts. A chain takes γ forwards and never feeds its last
    token (it may be rejected). A tree (`tree` = branching per depth, e.g. [3, 2, 1]) takes one
    forward per depth over the whole tree so far, which is dropped again, so the cache never
    holds unverified nodes. `accept` rolls the cache back to the verified tokens.

    Tree children are the top-k draft tokens under greedy decoding and k independent draws from
    q under sampling — what lossless tree verification requires.
    """

    target_layer_ids: tuple[int, ...] = ()
    max_num_speculative_tokens = None

    def __init__(self, model: torch.nn.Module, vocab_size: int, tree: Optional[list[int]] = None):
        self.model, self.vocab_size, self.tree = model, vocab_size, list(tree or [])
        self.tree_depth = len(self.tree) or None
        self.engine_models = (model,)  # the static path must cover the draft LM too
        self.cache: Optional[SlotCache] = None
        self.engine = DYNAMIC

    def use_engine(self, engine: Engine) -> None:
        """Draft chains on the static path too: widths 1 (a draft token) and 2 (catch-up after a full accept)."""
        self.engine = engine if engine.static and not self.tree else DYNAMIC
        if self.engine.static:
            engine.static_model(self.model, widths=(1, 2))

    def reset(self, batch_size: int = 1, device: Optional[torch.device] = None) -> None:
        device = device or next(self.model.parameters()).device
        self.cache = self.engine.cache(self.model, batch_size, device, widths=(1, 2))

    @torch.no_grad()
    def propose(
        self, sequences: list[list[int]], num_speculative_tokens: int, params: SamplingParams, generator=None
    ) -> Proposal:
        lengths = self.cache.lengths()
        unfed = [s[n:] for s, n in zip(sequences, lengths)]
        logits = self.cache.feed(self.model, unfed, logits_to_keep=1).logits[:, -1, : self.vocab_size]  # (B, V)
        if self.tree:
            return self._propose_tree(logits, params, generator)
        draft_tokens, draft_probs = [], []
        for i in range(num_speculative_tokens):
            if params.greedy:
                token = logits.argmax(-1)  # (B,)
            else:
                q = probs_from_logits(logits, params)  # (B, V)
                token = sample(q, generator)
                draft_probs.append(q)
            draft_tokens.append(token)
            if i + 1 < num_speculative_tokens:  # the last draft token is never fed: it may be rejected
                out = self.cache.forward(self.model, token[:, None], logits_to_keep=1)
                logits = out.logits[:, -1, : self.vocab_size]
        return Proposal(
            torch.stack(draft_tokens, 1),
            torch.stack(draft_probs, 1) if draft_probs else None,
            draft_forwards=num_speculative_tokens,  # the feed plus γ − 1 single-token forwards
        )

    def _propose_tree(self, root_logits: torch.Tensor, params: SamplingParams, generator=None) -> Proposal:
        """Expand every frontier node into `k` children per depth; root_logits: (B, V)."""
        batch, device = root_logits.shape[0], root_logits.device
        verified = self.cache.lengths()
        tokens = torch.zeros(batch, 0, dtype=torch.long, device=device)
        parents = torch.zeros(batch, 0, dtype=torch.long, device=device)
        probs, frontier, frontier_logits = [], torch.tensor([-1], device=device), root_logits[:, None]  # (B, F, V)
        for depth, k in enumerate(self.tree):
            fanout = len(frontier) * k
            if params.greedy:
                children = frontier_logits.topk(k, dim=-1).indices.reshape(batch, fanout)  # distinct top-k
            else:
                q = probs_from_logits(frontier_logits, params)  # (B, F, V)
                children = torch.multinomial(
                    q.reshape(-1, q.shape[-1]), k, replacement=True, generator=generator
                ).reshape(batch, fanout)
                probs.append(q.repeat_interleave(k, dim=1))  # (B, F·k, V): each child's q is its parent's
            tokens = torch.cat([tokens, children], dim=1)
            parents = torch.cat([parents, frontier.repeat_interleave(k).expand(batch, -1)], dim=1)
            frontier = torch.arange(tokens.shape[1] - fanout, tokens.shape[1], device=device)
            if depth + 1 < len(self.tree):  # the deepest nodes need no draft forward
                out = self.cache.forward(self.model, tokens, parents)
                frontier_logits = out.logits[:, frontier, : self.vocab_size]
                self.cache.rollback(verified)  # tree nodes never stay in the draft cache
        return Proposal(tokens, torch.cat(probs, dim=1) if probs else None, parents, draft_forwards=len(self.tree))

    def accept(self, num_valid: list[int], features: Optional[TargetFeatures] = None) -> None:
        self.cache.rollback(num_valid)


def _check(settings, cfg: EvalConfig) -> None:
    if cfg.tree == "dynamic":
        raise EvalError("eval.tree=dynamic is EAGLE-2's tree and needs an EAGLE drafter")
    if cfg.tree == "drafter":
        raise EvalError(
            "eval.tree=drafter needs a drafter that saves its tree (Medusa); for a draft LM give children per depth, "
            "e.g. [3, 2, 1]"
        )


def _build(drafter, *, target, vocab_size: int, cfg: EvalConfig, path) -> Proposer:
    _check(None, cfg)
    draft = drafter.model
    if draft.config.vocab_size < vocab_size:
        raise EvalError(
            f"{path} scores {draft.config.vocab_size} tokens but the target's tokenizer has {vocab_size}; "
            "a draft LM must share the target's vocabulary"
        )
    return DraftLMProposer(draft, vocab_size, tree=cfg.tree)


ENTRY = ProposerEntry(build=_build, check=_check)
