"""The one interface between the engine and every drafter, and the draft LM's implementation.

A proposer keeps whatever state it needs (its own KV cache, target features) over the tokens
verified so far. Each step the engine asks it for a proposal — a chain or a tree of draft
tokens per row, with the distributions q they were drawn from — verifies it with one target
forward, then tells the proposer how many tokens of each row survived (`accept`), passing the
target's hidden states of the newly verified tokens when the proposer asked for them.
Medusa and EAGLE proposers implement the same three methods.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional, Protocol

import numpy as np
import torch

from eval.kv_cache import SlotCache
from eval.sampling import SamplingParams, probs_from_logits, sample
from eval.static_engine import DYNAMIC, Engine


@dataclass
class Proposal:
    """Draft nodes per row, in topological order (a parent precedes its children).

    Chains have parents None: node j continues node j − 1. Trees give each node's parent index
    (−1 = the node continues the last verified token). Siblings drawn for lossless tree
    verification must be independent draws from their q.

    Rows may draft fewer than N nodes (n-gram lookup drafts 0..γ): `num_draft[b]` nodes are row
    b's draft and the rest are padding. Padding must still be valid token ids (and, in a tree,
    valid parents); it is fed to the target but verification never accepts it, and it is not
    counted as proposed.
    """

    draft_tokens: torch.Tensor  # (B, N)
    draft_probs: Optional[torch.Tensor] = None  # (B, N, V) q each node was drawn from; None when greedy
    parents: Optional[torch.Tensor] = None  # (B, N) parent node index, −1 = root; None = chain
    num_draft: Optional[torch.Tensor] = None  # (B,) real draft nodes per row, the first ones; None = all N
    # Drafter forward passes this proposal took: γ for a sequential chain, 1 for a block drafted in
    # one forward (PARD, P-EAGLE, DFlash), 0 for lookups. The report shows it per step.
    draft_forwards: int = 0
    # Called by the engine right after the verification forward with the target's greedy tokens (B, N+1)
    # at the root (column 0) and at every node j (column j+1). None = the proposer needs no look. Lookahead
    # decoding uses it: its Jacobi window rides in the verification forward and advances with these tokens.
    observe: Optional[Callable[[torch.Tensor], None]] = None


@dataclass
class TargetFeatures:
    """Target hidden states of newly verified tokens, in sequence order per row."""

    states: torch.Tensor  # (B, K, F): hidden_states at the proposer's layer ids, concatenated
    valid: torch.Tensor  # (B, K) bool: row b's tokens are the first valid[b].sum() entries


class Proposer(Protocol):
    # HF output_hidden_states ids the drafter reads (hidden_states[k] enters decoder layer k; id N =
    # decoder layers is the last output before the final norm, as vLLM reads it);
    # () = the drafter needs no target signal; −1 = the final normed hidden state (lm_head's input).
    target_layer_ids: tuple[int, ...]
    tree_depth: Optional[int]  # None: proposes chains of γ; else the depth of its (fixed-shape) tree
    max_num_speculative_tokens: Optional[int]  # longest chain it can propose (Medusa: its head count); None = any
    # Optional: True when it may propose trees although tree_depth is None (n-gram with several matches, suffix
    # trees); absent = trees exactly when tree_depth is set. The static engine path runs chains only.
    proposes_trees: bool

    def reset(self, batch_size: int, device: torch.device) -> None:
        """Forget all state; a new batch of sequences starts."""

    def propose(
        self, sequences: list[list[int]], num_speculative_tokens: int, params: SamplingParams, generator=None
    ) -> Proposal:
        """Draft continuations of each row's verified sequence (prompt + accepted tokens)."""

    def accept(self, num_valid: list[int], features: Optional[TargetFeatures] = None) -> None:
        """The first num_valid[b] tokens of row b are verified; features cover those new since the last call."""


def merge_chains(chains) -> tuple[list[int], list[int]]:
    """Token chains continuing the root, merged into a trie: (tokens, parents) in topological order, parent
    −1 = the root. Shared prefixes become one node, so siblings are distinct tokens (what lossless tree
    verification of point-mass proposals needs: a rejected sibling's token leaves p)."""
    tokens: list[int] = []
    parents: list[int] = []
    node_of: dict[tuple[int, int], int] = {}  # (parent node, token) → node
    for chain in chains:
        parent = -1
        for token in list(chain):
            node = node_of.get((parent, int(token)))
            if node is None:
                node = node_of[(parent, int(token))] = len(tokens)
                tokens.append(int(token))
                parents.append(parent)
            parent = node
    return tokens, parents


def point_mass_proposal(
    rows: list[tuple[list[int], Optional[list[int]]]],
    params: SamplingParams,
    vocab_size: int,
    device: torch.device,
    *,
    tree: bool,
    **fields,
) -> Proposal:
    """A deterministic proposal (n-gram, suffix, lookahead) from per-row (tokens, parents) as one padded block.

    Rows are padded with token 0 (hanging from the root in a tree) and `num_draft` says how many nodes are
    real; q is one-hot at every node when sampling. tree=False: a chain (parents None). fields: the
    Proposal's other fields (draft_forwards, observe).
    """
    counts = [len(t) for t, _ in rows]
    width = max(counts, default=0)
    tokens = np.zeros((len(rows), width), dtype=np.int64)  # (B, N), padding 0
    parents = np.full((len(rows), width), -1, dtype=np.int64)  # (B, N), padding hangs from the root
    for b, (row_tokens, row_parents) in enumerate(rows):
        tokens[b, : len(row_tokens)] = row_tokens
        if row_parents is not None:
            parents[b, : len(row_parents)] = row_parents
    draft_tokens = torch.from_numpy(tokens).to(device)
    probs = None
    if not params.greedy:  # a deterministic proposal: q is one-hot at each draft token
        probs = torch.zeros(*draft_tokens.shape, vocab_size, device=device)  # (B, N, V)
        probs.scatter_(-1, draft_tokens[..., None], 1.0)
    return Proposal(
        draft_tokens,
        probs,
        torch.from_numpy(parents).to(device) if tree else None,
        num_draft=torch.tensor(counts, device=device),
        **fields,
    )


def begin_workload(proposer: Proposer, name: str) -> None:
    """Tell a proposer that the next requests belong to workload `name`, if it keeps memory across requests.

    Only a proposer that learns from earlier requests (suffix decoding's global tree of past outputs)
    defines `begin_workload(name)`: it keeps one memory per name, so eval's passes over the same prompts
    (warm-up, then each γ) never draft from one another's outputs. Every other proposer forgets all at
    `reset`, so this is a helper that skips them rather than a method each of them would carry as a no-op.
    """
    begin = getattr(proposer, "begin_workload", None)
    if begin is not None:
        begin(name)


class DraftLMProposer:
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
