"""Proposals from EAGLE drafters (EAGLE-3 and EAGLE-1): chains, and EAGLE-2's dynamic trees.

The drafter's cache holds one entry per verified position t < n−1 (n = sequence length): the
target's fused features at t and token t+1. The engine delivers features when tokens are
verified (`accept`), but token t+1 of the newest position is only known at the next `propose`,
so features wait in a per-row buffer until then. Each `propose` first appends the waiting
entries (verified, permanent), then drafts: the j-th drafted token's entry reuses the drafter's
own output as its hidden input at position n−2+j. Drafted entries are dropped again before
returning, so the cache only ever holds verified entries and `accept` needs no rollback.

Dynamic trees (Li et al. 2024, EAGLE-2): at each depth the `top_k` frontier nodes with the
highest cumulative draft log-probability are expanded into their `top_k` best children; after
`depth` levels the `total_tokens` best nodes overall (a node's score never exceeds its parent's,
so the kept set is closed under parents) form the tree. Under sampling the same construction
scores nodes with the drafter's warped distribution, and each node is handed to verification
as a point mass on its token: recursive rejection then accepts a child x with the residual
target probability p(x) and removes x from the residual before trying the next sibling, which
is exact for candidates chosen by any deterministic rule (top-k ones included).
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Optional

import torch

from eval.config import EvalConfig
from eval.errors import EvalError
from eval.proposer import Proposal, Proposer, TargetFeatures
from eval.proposers.base import ProposerEntry, check_paired
from eval.sampling import SamplingParams, probs_from_logits, sample
from heads.eagle import Eagle3Drafter
from heads.eagle1 import Eagle1Drafter


class EagleProposer(Proposer):
    """Chains and dynamic trees for EAGLE-3 and EAGLE-1 drafters (same decode contract)."""

    def __init__(self, drafter: Eagle3Drafter | Eagle1Drafter, vocab_size: int, tree: Optional[dict] = None):
        """tree: None for chains, or {"depth", "top_k", "total_tokens"} for EAGLE-2 dynamic trees."""
        self.drafter, self.vocab_size, self.tree = drafter, vocab_size, tree
        self.target_layer_ids = drafter.target_layer_ids
        self.tree_depth = tree["depth"] if tree else None
        self.max_num_speculative_tokens = None
        self._draft_ids = None  # target id of each proposable draft id, set on first use

    def reset(self, batch_size: int, device: torch.device) -> None:
        self.cache = self.drafter.new_cache(batch_size, device)
        self.buffer: list[list[torch.Tensor]] = [[] for _ in range(batch_size)]  # waiting features per row, (F,) each
        self.fed = [0] * batch_size  # positions with an entry in the cache
        self.last_hidden = torch.zeros(
            batch_size, self.drafter.arch.hidden_size, device=device, dtype=self.drafter.fc.weight.dtype
        )

    def accept(self, num_valid: list[int], features: Optional[TargetFeatures] = None) -> None:
        if features is None:
            return
        counts = features.valid.sum(1).tolist()  # host sync: how many new features each row has
        for b, n in enumerate(counts):
            self.buffer[b].extend(features.states[b, :n].unbind(0))

    def _append_verified(self, sequences: list[list[int]]) -> None:
        """Entries (features at t, token t+1) for the buffered positions; updates last_hidden."""
        block = self._verified_block(sequences)
        if block is not None:
            out = self.drafter.decode(self.cache, *block)  # (B, width, H)
            self._advance(out)

    def _verified_block(self, sequences: list[list[int]]):
        """The buffered positions' entries as decode takes them: fused features (B, W, H), tokens,
        positions, valid (B, W) (rows with fewer waiting entries pad, invalid); None when none wait."""
        B, device = len(sequences), self.last_hidden.device
        width = max(map(len, self.buffer))
        if width == 0:
            return None
        dim = next(row for row in self.buffer if row)[0].shape[-1]
        feats = torch.zeros(B, width, dim, device=device)
        for b, row in enumerate(self.buffer):
            if row:
                feats[b, : len(row)] = torch.stack(row)
        counts = [len(r) for r in self.buffer]
        positions = torch.tensor([[self.fed[b] + i for i in range(width)] for b in range(B)], device=device)
        tokens = torch.tensor(
            [[s[min(self.fed[b] + i + 1, len(s) - 1)] for i in range(width)] for b, s in enumerate(sequences)],
            device=device,
        )
        valid = torch.arange(width, device=device)[None] < torch.tensor(counts, device=device)[:, None]
        return self.drafter.fuse(feats), tokens, positions, valid

    def _advance(self, out: torch.Tensor) -> None:
        """After the waiting entries ran (out: (B, ≥W, H), their outputs first): keep each row's last
        output as last_hidden, count the entries as fed, empty the buffer."""
        B, device = len(self.buffer), out.device
        counts = [len(r) for r in self.buffer]
        last = torch.tensor([max(c - 1, 0) for c in counts], device=device)
        has = torch.tensor([c > 0 for c in counts], device=device)
        self.last_hidden = torch.where(has[:, None], out[torch.arange(B, device=device), last], self.last_hidden)
        for b, c in enumerate(counts):
            self.fed[b] += c
        self.buffer = [[] for _ in range(B)]

    def _to_target(self, draft_logits: torch.Tensor) -> torch.Tensor:
        """(…, D) draft-vocabulary logits → (…, V) target-vocabulary logits (−inf off the draft vocab)."""
        if self._draft_ids is None:
            ids = self.drafter.draft_to_target(
                torch.arange(self.drafter.arch.draft_vocab_size, device=draft_logits.device)
            )
            self._keep = ids < self.vocab_size  # embedding rows past the tokenizer are never proposed
            self._draft_ids = ids[self._keep]
        full = draft_logits.new_full((*draft_logits.shape[:-1], self.vocab_size), float("-inf"))
        return full.index_copy(-1, self._draft_ids, draft_logits[..., self._keep])

    @torch.no_grad()
    def propose(
        self, sequences: list[list[int]], num_speculative_tokens: int, params: SamplingParams, generator=None
    ) -> Proposal:
        self._append_verified(sequences)
        width = self.cache.width
        if self.tree:
            proposal = self._propose_tree(sequences, params)
        else:
            proposal = self._propose_chain(sequences, num_speculative_tokens, params, generator)
        self.cache.truncate(width)  # drafted entries never stay
        return proposal

    def _propose_chain(self, sequences, gamma, params, generator) -> Proposal:
        B, device = len(sequences), self.last_hidden.device
        hidden = self.last_hidden[:, None]  # (B, 1, H)
        positions = torch.tensor([[len(s) - 1] for s in sequences], device=device)
        valid = torch.ones(B, 1, dtype=torch.bool, device=device)
        tokens, probs = [], []
        for i in range(gamma):
            logits = self._to_target(self.drafter.logits(hidden[:, -1]))  # (B, V)
            if params.greedy:
                token = logits.argmax(-1)
            else:
                q = probs_from_logits(logits, params)
                token = sample(q, generator)
                probs.append(q)
            tokens.append(token)
            if i + 1 < gamma:
                hidden = self.drafter.decode(self.cache, hidden, token[:, None], positions + i, valid)
        # The verified entries' forward plus γ − 1 single-entry forwards.
        return Proposal(torch.stack(tokens, 1), torch.stack(probs, 1) if probs else None, draft_forwards=gamma)

    def _log_probs(self, draft_logits: torch.Tensor, params: SamplingParams) -> torch.Tensor:
        """Node scores: log q over the target vocabulary, warped like the target under sampling."""
        logits = self._to_target(draft_logits)
        return logits.log_softmax(-1) if params.greedy else probs_from_logits(logits, params).log()

    def _propose_tree(self, sequences, params: SamplingParams) -> Proposal:
        """EAGLE-2: expand the top_k best nodes per depth, keep the total_tokens best nodes overall.

        Node i of depth d is also drafted-cache entry i (entries are appended depth by depth), so
        one ancestor-or-self matrix over nodes gives every entry's attention mask.
        """
        depth, k, total = self.tree["depth"], self.tree["top_k"], self.tree["total_tokens"]
        B, device, H = len(sequences), self.last_hidden.device, self.drafter.arch.hidden_size
        rows = torch.arange(B, device=device)[:, None]
        base = torch.tensor([len(s) - 1 for s in sequences], device=device)  # position of a depth-1 node's entry
        score, token = self._log_probs(self.drafter.logits(self.last_hidden), params).topk(k, dim=-1)  # (B, k)
        tokens, scores, parents = [token], [score], [torch.full((B, k), -1, device=device)]
        anc = torch.eye(k, dtype=torch.bool, device=device).expand(B, k, k)  # (B, N, N) ancestor-or-self
        hidden_in = self.last_hidden[:, None].expand(B, k, H)  # each node's entry reads its parent's output
        verified = self.cache.width
        for d in range(1, depth):
            n_prev = (d - 1) * k  # nodes of shallower depths (= drafted entries already cached)
            see = anc[:, n_prev:]  # (B, k, n_prev + k) which drafted entries each new entry sees
            cache_mask = torch.cat(
                [self.cache.valid[:, None, :verified].expand(B, k, verified), see[:, :, :n_prev]], -1
            )
            positions = (base + d - 1)[:, None].expand(B, k)
            out = self.drafter.decode(
                self.cache,
                hidden_in,
                tokens[-1],
                positions,
                torch.ones(B, k, dtype=torch.bool, device=device),
                see[:, :, n_prev:],
                cache_mask,
            )
            child = self._log_probs(self.drafter.logits(out), params) + scores[-1][..., None]  # (B, k, V) cumulative
            score, flat = child.reshape(B, -1).topk(k, dim=-1)
            parent_local = flat // self.vocab_size
            tokens.append(flat % self.vocab_size)
            scores.append(score)
            parents.append(n_prev + parent_local)
            n = anc.shape[1]
            grown = torch.zeros(B, n + k, n + k, dtype=torch.bool, device=device)
            grown[:, :n, :n] = anc
            grown[:, n:, :n] = anc[rows, n_prev + parent_local]  # a child sees what its parent sees …
            grown[:, n:, n:] = torch.eye(k, dtype=torch.bool, device=device)  # … and itself
            anc = grown
            hidden_in = out.gather(1, parent_local[..., None].expand(-1, -1, H))
        all_tok, all_score, all_par = torch.cat(tokens, 1), torch.cat(scores, 1), torch.cat(parents, 1)
        best = all_score.topk(min(total, all_tok.shape[1]), dim=-1).indices  # (B, total)
        # Scores never grow along a path, so the best nodes' ancestors are (up to ties) among them;
        # the union with their ancestors makes the kept set closed under parents in every case.
        kept = anc[rows, best].any(1)  # (B, N)
        width = int(kept.sum(1).max())  # host sync: the proposal's width
        order = torch.sort((~kept).float(), dim=1, stable=True).indices[:, :width]  # kept nodes first, in node order
        valid = kept.gather(1, order)
        remap = torch.full_like(all_tok, -1).scatter(1, order, torch.arange(width, device=device).expand(B, -1))
        par = all_par.gather(1, order)
        new_par = torch.where(par >= 0, remap.gather(1, par.clamp(min=0)), par)
        # Rows keeping fewer nodes pad with copies of their first node's token: padding nodes hang
        # off the root with the same token as node 0, so they can never beat it.
        new_par = torch.where(valid, new_par, torch.full_like(new_par, -1))
        toks = torch.where(valid, all_tok.gather(1, order), all_tok.gather(1, order[:, :1]).expand(-1, width))
        point_masses = None if params.greedy else torch.nn.functional.one_hot(toks, self.vocab_size).float()
        return Proposal(toks, point_masses, new_par, draft_forwards=depth)


def _check(settings, cfg: EvalConfig) -> None:
    if cfg.tree not in (None, "dynamic"):
        raise EvalError(
            f"eval.tree={cfg.tree} is not an EAGLE tree; "
            "use null (chains) or dynamic (EAGLE-2, shaped by eval.dynamic_tree)"
        )


def _build(drafter, *, target, vocab_size: int, cfg: EvalConfig, path) -> EagleProposer:
    check_paired(drafter, target, vocab_size, path, "an EAGLE")
    _check(drafter, cfg)
    return EagleProposer(drafter, vocab_size, asdict(cfg.dynamic_tree) if cfg.tree == "dynamic" else None)


ENTRY = ProposerEntry(build=_build, check=_check)  # EAGLE-1's row too (eval/proposers/__init__.py)
