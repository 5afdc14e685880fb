"""Speculative decoding (chains and trees, one or many rows) and the autoregressive baseline.

Both decode with a KV cache and stop a row at its first end-of-turn token or after
max_new_tokens, so under greedy decoding their outputs must be identical token for token.
"""

from __future__ import annotations

import time
from contextlib import nullcontext
from dataclasses import dataclass, field, replace
from typing import Optional

import torch

from eval.kv_cache import SlotCache, keep_first
from eval.proposer import Proposal, Proposer, TargetFeatures
from eval.sampling import SamplingParams, probs_from_logits, sample
from eval.static_engine import DYNAMIC, Engine
from eval.verify import greedy_verify, rejection_sample, tree_greedy_verify, tree_rejection_sample, typical_verify
from heads.target_features import last_layer_output, select_layers


@dataclass
class DecodeStats:
    accept_counts: list[int] = field(default_factory=list)  # accepted draft tokens per step of each unfinished row
    # Real draft nodes per step of each unfinished row, aligned with accept_counts (γ for a full chain;
    # 0..γ for n-gram lookup). A step with 0 is a plain decoding step: vLLM does not count it as a draft.
    draft_counts: list[int] = field(default_factory=list)
    draft_seconds: float = 0.0
    target_seconds: float = 0.0  # the verification forwards
    verify_seconds: float = 0.0  # accept/reject and cache compaction
    target_forwards: int = 0  # verification forwards (one per step, whatever the batch size)
    draft_forwards: int = 0  # drafter forward passes (γ per step for sequential chains, 1 for parallel drafters)
    proposed_tokens: int = 0  # draft nodes per row and step (γ for a chain); ragged rows: the longest real draft
    prefill_seconds: float = 0.0  # the prompts' forward and the drafter's catch-up on them: a cost both sides pay

    def add(self, other: "DecodeStats") -> None:
        """Accumulate another decode's counts and timings into this one."""
        for name, value in vars(other).items():
            setattr(self, name, getattr(self, name) + value)

    def record_step(self, times: tuple[float, float, float, float, float], proposal: Proposal) -> None:
        """One step's timings and counts. times: started, drafted, target forward done, target's tokens observed
        (lookahead decoding's window advanced: drafting work, timed as such), accepted and cached."""
        started, drafted, forwarded, observed, accepted = times
        self.draft_seconds += observed - forwarded
        self.draft_seconds += drafted - started
        self.target_seconds += observed - drafted  # the observing counted here too, as eval always has
        self.verify_seconds += accepted - observed
        self.target_forwards += 1
        self.draft_forwards += proposal.draft_forwards
        self.proposed_tokens += proposal.draft_tokens.shape[1]  # after the cut: only real drafts (the longest row's)


@dataclass(frozen=True)
class Acceptance:
    """How draft tokens are accepted under sampling (greedy decoding always matches argmax)."""

    rule: str = "exact"  # exact = lossless rejection sampling | typical = Medusa's, lossy
    typical_threshold: float = 0.09  # typical: ε, the acceptance floor's cap
    typical_alpha: float = 0.3  # typical: δ, scales exp(−entropy)


def _now(device: torch.device) -> float:
    if device.type == "cuda":
        torch.cuda.synchronize(device)  # host sync: phase timings need finished kernels
    return time.perf_counter()


def verify_row(
    logits: torch.Tensor,
    proposal: Proposal,
    row: int,
    params: SamplingParams,
    acceptance: Acceptance,
    *,
    generator=None,
    num_draft: Optional[int] = None,
) -> tuple[list[int], int]:
    """Apply the verification rule to one row: (accepted node indices, next token).

    num_draft: the row's real draft nodes (the first ones). The rest is padding, cut off here so
        that no rule can accept it. None = every node is real.
    """
    n = proposal.draft_tokens.shape[1] if num_draft is None else num_draft
    tokens, logits = proposal.draft_tokens[row, :n], logits[: n + 1]  # (n,), (n+1, V)
    q = None if proposal.draft_probs is None else proposal.draft_probs[row, :n]  # (n, V)
    if proposal.parents is None and acceptance.rule == "exact":  # chains: one vectorised test
        if params.greedy:
            accepted, nxt = greedy_verify(logits, tokens)
        else:
            accepted, nxt = rejection_sample(probs_from_logits(logits, params), q, tokens, generator)
        return list(range(accepted)), nxt
    chain = torch.arange(-1, n - 1, device=tokens.device)
    parents = proposal.parents[row, :n] if proposal.parents is not None else chain
    if params.greedy:
        return tree_greedy_verify(logits, tokens, parents)
    if acceptance.rule == "typical":
        p = probs_from_logits(logits, params)
        return typical_verify(p, tokens, parents, acceptance.typical_threshold, acceptance.typical_alpha, generator)
    return tree_rejection_sample(probs_from_logits(logits, params), q, tokens, parents, generator)


@torch.no_grad()
def speculative_step(
    target,
    proposer: Proposer,
    cache: SlotCache,
    sequences: list[list[int]],
    gamma: int,
    params: SamplingParams,
    *,
    vocab_size: int,
    stats: DecodeStats,
    generator=None,
    acceptance: Acceptance = Acceptance(),
) -> tuple[list[list[int]], list[int]]:
    """One draft-then-verify step for every row (Leviathan et al. 2023; Chen et al. 2023).

    Args:
        cache: the target's cache; it holds every row's sequence but its last token.
        sequences: per row, the verified tokens (prompt + accepted so far).
    Returns:
        per row, the new tokens: the accepted draft path plus the corrected or bonus token;
        and per row, its number of real draft nodes (0: the step was a plain decoding step).
    """
    device, layer_ids = cache.device, proposer.target_layer_ids
    # 1. Draft a chain or tree per row, keeping the q each token was drawn from. Rows may draft
    #    fewer nodes (num_draft): the block is cut to the longest real draft, so a step where
    #    no row drafts is one target forward over the last tokens, a plain decoding step.
    t0 = _now(device)
    proposal = proposer.propose(sequences, gamma, params, generator)
    num_draft = None if proposal.num_draft is None else proposal.num_draft.tolist()  # host sync: one per step
    proposal = proposal if num_draft is None else proposal.cut_to(max(num_draft, default=0))
    drafted = proposal  # what the drafter proposed; the block may run padded (stats count the real nodes)
    proposal, num_draft = _padded(proposal, num_draft, cache.run_width(proposal.draft_tokens.shape[1] + 1) - 1)
    t1 = _now(device)
    # 2. One target forward over [last token, draft nodes]; the tree mask shows each node only
    #    its ancestors, so row j+1 of the logits is the target's distribution after node j.
    batch, num_nodes = proposal.draft_tokens.shape
    with _last_layer(target, cache, layer_ids) as final:
        out = cache.forward(target, *_block(sequences, proposal, device), output_hidden_states=bool(layer_ids))
    final = _kept_last(out, final)
    logits = out.logits[..., :vocab_size]  # (B, N+1, V)
    t2 = t3 = _now(device)
    if proposal.observe is not None:  # lookahead decoding: the target's greedy tokens advance its window
        proposal.observe(logits.argmax(-1))  # (B, N+1); the proposer reads them on the host: one sync per step
        t3 = _now(device)
    # 3. Accept/reject per row: the longest valid path, then the corrected or bonus token.
    rows = num_draft or [None] * batch  # None: every node of the row is real
    verdicts = [
        verify_row(logits[b], proposal, b, params, acceptance, generator=generator, num_draft=rows[b])
        for b in range(batch)
    ]
    # 4. Keep the root and the accepted path in the target cache (rejected nodes are dropped, so
    #    the cache equals a fresh forward over the verified tokens); the drafter rolls back too.
    kept = [[0] + [j + 1 for j in path] for path, _ in verdicts]  # block indices: root, then the path
    cache.keep_last(kept, num_nodes + 1)
    features = _kept_features(out.hidden_states, final, layer_ids, kept) if layer_ids else None
    proposer.accept([len(s) + len(path) for s, (path, _) in zip(sequences, verdicts)], features)
    stats.record_step((t0, t1, t2, t3, _now(device)), drafted)
    tokens = proposal.draft_tokens.tolist()  # host sync
    new = [[tokens[b][j] for j in path] + [nxt] for b, (path, nxt) in enumerate(verdicts)]
    return new, num_draft if num_draft is not None else [num_nodes] * batch


def _padded(proposal: Proposal, num_draft: Optional[list[int]], width: int) -> tuple[Proposal, Optional[list[int]]]:
    """A chain of N nodes widened to `width` nodes of padding (token 0, a one-hot q), which verification never
    accepts, where the cache verifies the wider block faster (SlotCache.run_width); returns it and each row's real
    node count. Trees keep their shape."""
    batch, nodes = proposal.draft_tokens.shape
    if width <= nodes or proposal.parents is not None:
        return proposal, num_draft
    counts = num_draft if num_draft is not None else [nodes] * batch
    tokens = torch.nn.functional.pad(proposal.draft_tokens, (0, width - nodes))
    probs = proposal.draft_probs
    if probs is not None:
        pad = probs.new_zeros(batch, width - nodes, probs.shape[-1])
        pad[..., 0] = 1.0
        probs = torch.cat([probs, pad], dim=1)
    real = torch.tensor(counts, device=tokens.device)
    return replace(proposal, draft_tokens=tokens, draft_probs=probs, num_draft=real), counts


def _last_layer(target, cache, layer_ids):
    """Where layer id N's output comes from: the static engine's compiled graphs return it (a hook registered there
    before compiling), elsewhere a forward hook held for this forward."""
    return nullcontext([]) if getattr(cache, "keeps_last", False) else last_layer_output(target, layer_ids)


def _kept_last(out, final: list) -> list:
    last = getattr(out, "last_layer", None)
    return [last] if last is not None else final


def _block(sequences: list[list[int]], proposal: Proposal, device) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
    """The verification block [last verified token, draft nodes] (B, N+1) and its parents (−1 = the root),
    None for chains."""
    batch = proposal.draft_tokens.shape[0]
    block = torch.cat([torch.tensor([[s[-1]] for s in sequences], device=device), proposal.draft_tokens], dim=1)
    if proposal.parents is None:
        return block, None
    return block, torch.cat([torch.full((batch, 1), -1, device=device), proposal.parents + 1], dim=1)


def _kept_features(
    hidden_states, final: list[torch.Tensor], layer_ids: tuple[int, ...], kept: list[list[int]]
) -> TargetFeatures:
    """The target's features at the kept block positions (per row, ascending), moved to the front.

    final: the captured pre-norm output of the last layer (id N = len(hidden_states) − 1), if asked for.
    """
    states = select_layers(hidden_states, final, layer_ids)  # (B, m, F)
    width = states.shape[1]
    order = keep_first(kept, width, states.device)
    counts = torch.tensor([len(k) for k in kept], device=states.device)
    return TargetFeatures(
        states.gather(1, order[..., None].expand(-1, -1, states.shape[-1])),
        torch.arange(width, device=states.device) < counts[:, None],
    )


def _prefill(target, cache: SlotCache, proposer: Proposer, prompts: list[list[int]]) -> None:
    """Fill the target cache with every prompt but its last token (each step feeds that first)."""
    rows = [p[:-1] for p in prompts]
    layer_ids, features = proposer.target_layer_ids, None
    if any(rows):
        with _last_layer(target, cache, layer_ids) as final:
            out = cache.feed(target, rows, output_hidden_states=bool(layer_ids), logits_to_keep=1)
        final = _kept_last(out, final)
        if layer_ids:  # left padding: each row's real tokens are the end of the block
            width = max(map(len, rows))
            features = _kept_features(
                out.hidden_states, final, layer_ids, [list(range(width - len(r), width)) for r in rows]
            )
    proposer.accept(cache.lengths(), features)


def _finish(generated: list[int], max_new_tokens: int, eos_ids: set[int]) -> tuple[list[int], bool]:
    """Cut at the first end token (kept) or the length cap; say whether decoding is done."""
    for i, tok in enumerate(generated[:max_new_tokens]):
        if tok in eos_ids:
            return generated[: i + 1], True
    return generated[:max_new_tokens], len(generated) >= max_new_tokens


@torch.no_grad()
def speculative_generate(
    target,
    proposer: Proposer,
    prompts: list[list[int]],
    max_new_tokens: int,
    gamma: int,
    params: SamplingParams,
    *,
    eos_ids: set[int],
    vocab_size: int,
    generator=None,
    acceptance: Acceptance = Acceptance(),
    engine: Engine = DYNAMIC,
) -> tuple[list[list[int]], DecodeStats]:
    """Decode up to max_new_tokens after each prompt (a batch of rows). Returns new ids per row and stats.

    engine: the path the target decodes on (eval/static_engine.py); the proposer was given it already.
    """
    device = next(target.parameters()).device
    stats, cache = DecodeStats(), engine.cache(target, len(prompts), device)
    proposer.reset(len(prompts), device)
    started = _now(device)
    _prefill(target, cache, proposer, prompts)
    stats.prefill_seconds += _now(device) - started
    sequences = [list(p) for p in prompts]
    generated = [[] for _ in prompts]
    done = [False] * len(prompts)
    while not all(done):
        new, num_draft = speculative_step(
            target,
            proposer,
            cache,
            sequences,
            gamma,
            params,
            vocab_size=vocab_size,
            stats=stats,
            generator=generator,
            acceptance=acceptance,
        )
        for b, tokens in enumerate(new):
            sequences[b] += tokens  # finished rows keep decoding; their output and counts are frozen
            if not done[b]:
                stats.accept_counts.append(len(tokens) - 1)
                stats.draft_counts.append(num_draft[b])
                generated[b], done[b] = _finish(generated[b] + tokens, max_new_tokens, eos_ids)
    return generated, stats


@torch.no_grad()
def autoregressive_generate(
    target,
    prompts: list[list[int]],
    max_new_tokens: int,
    params: SamplingParams,
    *,
    eos_ids: set[int],
    vocab_size: int,
    generator=None,
    engine: Engine = DYNAMIC,
    stats: Optional[DecodeStats] = None,
) -> list[list[int]]:
    """Plain KV-cached decoding, one target forward per token: the speed-up baseline (on the same engine path).

    stats: where its prefill's seconds are added, so that a plain decoding step is priced without them."""
    device = next(target.parameters()).device
    cache = engine.cache(target, len(prompts), device)
    started = _now(device)
    logits = cache.feed(target, prompts, logits_to_keep=1).logits[:, -1, :vocab_size]  # (B, V)
    if stats is not None:
        stats.prefill_seconds += _now(device) - started
    generated = [[] for _ in prompts]
    done = [False] * len(prompts)
    for _ in range(max_new_tokens):
        token = logits.argmax(-1) if params.greedy else sample(probs_from_logits(logits, params), generator)  # (B,)
        for b, tok in enumerate(token.tolist()):  # host sync: one per token, as in any decoding loop
            if not done[b]:
                generated[b].append(tok)
                done[b] = tok in eos_ids or len(generated[b]) >= max_new_tokens
        if all(done):
            break
        logits = cache.forward(target, token[:, None]).logits[:, -1, :vocab_size]
    return generated
