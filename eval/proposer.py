"""The one interface between the engine and every drafter, and the helpers several proposers share.

A proposer keeps whatever state it needs (its own KV cache, target features) over the tokens
verified so far. Each step the engine asks it for a proposal — a chain or a tree of draft
tokens per row, with the distributions q they were drawn from — verifies it with one target
forward, then tells the proposer how many tokens of each row survived (`accept`), passing the
target's hidden states of the newly verified tokens when the proposer asked for them.
Every proposer implements those three methods (one module per family in eval/proposers/).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable, Optional, Protocol

import numpy as np
import torch

from eval.sampling import SamplingParams
from eval.static_engine import Engine


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

    def cut_to(self, width: int) -> Proposal:
        """The first `width` nodes of every row (the padding past the longest real draft goes); every other
        field (num_draft, draft_forwards, observe) is kept."""
        return replace(
            self,
            draft_tokens=self.draft_tokens[:, :width],
            draft_probs=None if self.draft_probs is None else self.draft_probs[:, :width],
            parents=None if self.parents is None else self.parents[:, :width],
        )


@dataclass
class TargetFeatures:
    """Target hidden states of newly verified tokens, in sequence order per row."""

    states: torch.Tensor  # (B, K, F): hidden_states at the proposer's layer ids, concatenated
    valid: torch.Tensor  # (B, K) bool: row b's tokens are the first valid[b].sum() entries


class Proposer(Protocol):
    """What the engine asks of a drafter. The proposers inherit it for the optional parts' defaults, so the
    engine calls `use_engine` and `begin_workload` on every proposer instead of probing for them."""

    # HF output_hidden_states ids the drafter reads (hidden_states[k] enters decoder layer k; id N =
    # decoder layers is the last output before the final norm, as vLLM reads it);
    # () = the drafter needs no target signal; −1 = the final normed hidden state (lm_head's input).
    target_layer_ids: tuple[int, ...]
    tree_depth: Optional[int]  # None: proposes chains of γ; else the depth of its (fixed-shape) tree
    max_num_speculative_tokens: Optional[int]  # longest chain it can propose (Medusa: its head count); None = any
    # Whether it may propose trees although tree_depth is None (n-gram with several matches, suffix trees);
    # None = trees exactly when tree_depth is set. The static engine path runs chains only.
    proposes_trees: Optional[bool] = None
    engine_models: tuple[torch.nn.Module, ...] = ()  # its own models on the engine's path (the static path too)

    def reset(self, batch_size: int, device: torch.device) -> None:
        """Forget all state; a new batch of sequences starts."""

    def propose(
        self, sequences: list[list[int]], num_speculative_tokens: int, params: SamplingParams, generator=None
    ) -> Proposal:
        """Draft continuations of each row's verified sequence (prompt + accepted tokens)."""

    def accept(self, num_valid: list[int], features: Optional[TargetFeatures] = None) -> None:
        """The first num_valid[b] tokens of row b are verified; features cover those new since the last call."""

    def use_engine(self, engine: Engine) -> None:
        """Decode on the engine's path (eval/static_engine.py). Only a drafter with its own model cache (the
        draft LM) has anything to do; the others keep no cache the path shapes."""

    def begin_workload(self, name: str) -> None:
        """The next requests belong to workload `name`. Only a proposer that learns from earlier requests
        (suffix decoding's global tree of past outputs) keeps one memory per name, so eval's passes over the
        same prompts (warm-up, then each γ) never draft from one another's outputs; the others forget all at
        `reset`."""


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
