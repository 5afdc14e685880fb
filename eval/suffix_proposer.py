"""Suffix decoding proposals, training-free, matching vLLM 0.32's `suffix` method (arctic-inference 0.1.1).

Why: suffix decoding (Oliaro et al., "SuffixDecoding", arXiv:2411.04975) drafts from what was already written:
the request's own prompt and output, and the outputs of earlier requests of the same workload.
vLLM serves it with no weights (`speculative_config={"method": "suffix", "num_speculative_tokens":
k, "suffix_decoding_max_tree_depth": ..., ...}`); to compare our acceptance with vLLM's, the
proposals follow arctic-inference's rules, token for token where the rules are deterministic.

What vLLM and arctic do (vllm/v1/spec_decode/suffix_decoding.py; arctic_inference/suffix_decoding/
cache.py and csrc/suffix_decoding/suffix_tree.cc):
- Trees. A per-request tree holds every suffix, up to max_tree_depth tokens long, of the prompt
  and the output so far; a global tree holds the outputs of the last max_cached_requests requests
  (oldest evicted first; 0 = none). A request's output enters the global tree as it is verified,
  so rows decoded together draft from each other. Each node counts the suffixes that pass through
  or end at it, i.e. the occurrences of the string from the root to it.
- Matching. The pattern is the last min(len, max_tree_depth) verified tokens. For every match
  length m = 1 .. len(pattern) − 1 whose last m tokens occur in a tree, a draft is grown from
  that node with a budget of min(γ, ⌊max_spec_factor · m⌋) tokens (and, with max_model_len, never
  past it). The draft with the highest score (the sum of its tokens' probabilities) wins, the
  longer match on ties; then the better of the request's tree and the global tree, the request's
  tree on ties.
- Drafts. A token's probability is the product of count(child) / count(parent) along the path
  from the matched node. vLLM drafts a chain (arctic's `use_tree_spec=False`): it follows the
  most frequent child while the probability stays ≥ min_token_prob. `use_tree_spec=True` is
  arctic's tree (the paper's): best-first by probability, every child whose probability is
  ≥ min_token_prob a candidate, at most the budget's node count.
Our engine's first step drafts from the prompt alone (vLLM's first draft comes after the prefill's
sampled token). The proposal is deterministic, so q is one-hot at each draft token.

Ties. Float probabilities and scores are kept in float32 as in arctic, and siblings of equal count
are ranked in arctic's order (a child whose count grows moves before its equal-count siblings if it
was the first of them, else after), so chains equal arctic's exactly (tested where arctic-inference is
installed). In a tree, nodes of equal probability are taken in the order they were found; arctic's
heap order there is unspecified, so trees may differ from arctic's at ties (their scores do not).

Workloads. eval/run.py decodes the same prompts at several γ; a global tree shared across those
passes would let later passes draft the earlier passes' outputs. `begin_workload(name)` selects
one global tree per name, so each pass (and the warm-up) has its own.

Cost per verified token: up to max_tree_depth node updates in each tree that holds the row (its
own tree and the global one). Per step and row: for each match length a walk from the root (the
row's own suffixes are looked up directly), stopped at the first length nothing ever followed,
plus the drafts, each at most γ tokens: work bounded by the tree depth and γ, not the sequence.
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass, field
from heapq import heappop, heappush
from typing import Optional, Sequence

import numpy as np
import torch

from eval.proposer import Proposal, TargetFeatures
from eval.sampling import SamplingParams
from heads.suffix import SuffixDrafter

_F32 = np.float32  # arctic keeps probabilities and scores in C++ float; the same rounding keeps its ties


class _Node:
    """A run of tokens in a suffix tree (path compressed: every token of the run has the same count)."""

    __slots__ = ("count", "tokens", "start", "length", "children", "order")

    def __init__(self, count: int, tokens, start: int, length: int):
        self.count = count  # suffixes that pass through or end at this node
        # The label is tokens[start : start + length]: a slice of a sequence in the tree, or a copy of
        # the label once that sequence has left the tree.
        self.tokens, self.start, self.length = tokens, start, length
        # Leaves (most nodes) have neither container: fewer objects for memory and the garbage collector.
        self.children: Optional[dict[int, _Node]] = None  # first token → child
        # The children by decreasing count, equal counts in arctic's order; order[0] is the chain's next
        # node. Never at the root, where no draft starts and a vocabulary-wide order would cost per token.
        self.order: Optional[list[_Node]] = None

    def adopt(self, child: "_Node") -> None:
        """Add a child that has not been counted among the siblings yet (it goes last, as its count is lowest)."""
        if self.children is None:
            self.children, self.order = {}, []
        self.children[child.tokens[child.start]] = child
        self.order.append(child)


def _minus_count(node: _Node) -> int:
    return -node.count


@dataclass
class Draft:
    """One tree's best draft: tokens in topological order, their parents (None for a chain), its score."""

    tokens: list[int] = field(default_factory=list)
    parents: Optional[list[int]] = None  # parent index per token, −1 = the last verified token
    score: np.float32 = _F32(0.0)  # the sum of the tokens' estimated probabilities
    match_len: int = 0  # the matched context length it was grown from


class SuffixTree:
    """Every suffix (at most max_depth tokens) of a few growing token sequences, with occurrence counts."""

    def __init__(self, max_depth: int):
        self.max_depth = max_depth
        self.root = _Node(0, (), 0, 0)
        self.root.children = {}
        self._tokens: dict[int, list[int]] = {}  # sequence id → its tokens
        # sequence id → the nodes where its last ≤ max_depth suffixes end, longest first; a suffix always
        # ends at a node's end (nodes are split where it would not).
        self._suffix_ends: dict[int, list[_Node]] = {}

    def __contains__(self, seq_id: int) -> bool:
        return seq_id in self._tokens

    def suffix_ends(self, seq_id: int) -> list[_Node]:
        """Where the sequence's last suffixes end, longest first ([-m]: the suffix of m tokens)."""
        return self._suffix_ends.get(seq_id, [])

    def extend(self, seq_id: int, tokens: list[int]) -> None:
        """Append tokens to a sequence (a new id starts one)."""
        for token in tokens:
            self._append(seq_id, token)

    def _append(self, seq_id: int, token: int) -> None:
        tokens = self._tokens.setdefault(seq_id, [])
        ends = self._suffix_ends.setdefault(seq_id, [])
        tokens.append(token)
        end, root = len(tokens), self.root
        root.count += 1
        ends.append(root)  # the suffix that starts at the new token
        if len(ends) > self.max_depth:
            del ends[0]  # the oldest suffix is max_depth long: it stops growing
        for i, node in enumerate(ends):
            child = node.children.get(token) if node.children else None
            if child is None:
                if node.count == 1 and node is not root:
                    # Only this suffix reaches the node, so it is a leaf: grow its label in place.
                    node.length += 1
                    node.tokens, node.start = tokens, end - node.length
                    continue
                child = _Node(1, tokens, end - 1, 1)
                if node is root:
                    root.children[token] = child
                else:
                    node.adopt(child)
            elif child.length > 1:
                # The suffix would end inside the child: split off its first token, which gains a count.
                head = _Node(child.count, child.tokens, child.start, 1)
                child.start += 1
                child.length -= 1
                head.adopt(child)
                node.children[token] = head
                if node.order is not None:
                    node.order[node.order.index(child)] = head
                child = head
                self._count_up(node, child)
            else:
                self._count_up(node, child)
            ends[i] = child

    @staticmethod
    def _count_up(parent: _Node, child: _Node) -> None:
        """child.count += 1, moving it as arctic does: before the first sibling of its predecessor's count."""
        order = parent.order
        if order is not None and len(order) > 1:
            count = child.count
            i = order.index(child, bisect_left(order, -count, key=_minus_count))
            if i and order[i - 1].count <= count + 1:
                to = bisect_left(order, -order[i - 1].count, key=_minus_count)
                del order[i]
                order.insert(to, child)
        child.count += 1

    @staticmethod
    def _count_down(parent: _Node, child: _Node) -> None:
        """child.count −= 1 as arctic does: unless last of its equal-count siblings, it goes before the lower ones."""
        order, count = parent.order, child.count
        if count == 1:
            del parent.children[child.tokens[child.start]]
            if order is not None:
                order.remove(child)
            return
        if order is not None:
            i = order.index(child, bisect_left(order, -count, key=_minus_count))
            if i + 1 < len(order) and order[i + 1].count == count:
                del order[i]
                order.insert(bisect_left(order, 1 - count, key=_minus_count), child)
        child.count -= 1

    def remove(self, seq_id: int) -> None:
        """Take a sequence's suffixes out of the tree (global-cache eviction)."""
        tokens = self._tokens.pop(seq_id)
        del self._suffix_ends[seq_id]
        for start in range(len(tokens)):
            self.root.count -= 1
            node, at = self.root, start
            while at < len(tokens):
                child = node.children.get(tokens[at]) if node.children else None
                if child is None:  # the suffix was max_depth long
                    break
                last = child.count == 1  # only this suffix went on from here: drop the whole branch
                self._count_down(node, child)
                if last:
                    break
                if child.tokens is tokens:  # its label must not refer to the leaving sequence
                    child.tokens, child.start = tuple(tokens[child.start : child.start + child.length]), 0
                at += child.length
                node = child

    def match(self, pattern) -> Optional[tuple[_Node, int]]:
        """Where `pattern` ends in the tree: (node, tokens of that node's label matched), or None."""
        node, at = self.root, 0
        for token in pattern:
            if at == node.length:
                node = node.children.get(token) if node.children else None  # its label starts with the token
                if node is None:
                    return None
                at = 0
            elif node.tokens[node.start + at] != token:
                return None
            at += 1
        return node, at

    def speculate(
        self,
        pattern: list[int],
        max_spec_tokens: int,
        max_spec_factor: float,
        min_token_prob: float,
        use_tree_spec: bool = False,
        own: Sequence[_Node] = (),
    ) -> Draft:
        """Arctic's rule: the best-scoring draft over every matched length m < len(pattern), longer on ties.

        Args:
            pattern: the last ≤ max_depth verified tokens.
            max_spec_tokens: most tokens (tree nodes) to draft.
            own: `suffix_ends` of the sequence the pattern ends, if it is in this tree: matches for free.
        """
        best, factor, min_prob = Draft(), _F32(max_spec_factor), _F32(min_token_prob)
        grow = self._grow_tree if use_tree_spec else self._grow_chain
        for m in range(1, len(pattern)):
            if m <= len(own):
                node = own[-m]
                at = node.length
            else:
                found = self.match(pattern[-m:])
                if found is None:
                    break
                node, at = found
            # float32 product, then arctic's + 1e-6 in double before truncating
            budget = min(max_spec_tokens, int(float(_F32(m) * factor) + 1e-6))
            if budget > 0 and budget >= best.score:  # else its score (≤ budget) cannot reach the best
                draft = grow(node, at, budget, min_prob)
                if draft.score >= best.score:
                    best = draft
                    best.match_len = m
            if at == node.length and not node.children:
                break  # nothing ever followed this context, so nothing followed a longer one
        return best

    @staticmethod
    def _grow_chain(node: _Node, at: int, budget: int, min_prob: np.float32) -> Draft:
        """Follow the most frequent child while the path's probability stays ≥ min_prob."""
        draft, prob = Draft(), _F32(1.0)
        while len(draft.tokens) < budget and prob >= min_prob:
            if at < node.length:
                draft.tokens.append(node.tokens[node.start + at])
                draft.score += prob
                at += 1
            elif node.order:
                child = node.order[0]
                prob = prob * (_F32(child.count) / _F32(node.count))
                node, at = child, 0
            else:
                break
        return draft

    @staticmethod
    def _grow_tree(node: _Node, at: int, budget: int, min_prob: np.float32) -> Draft:
        """Best-first by probability: take the likeliest candidate; its children ≥ min_prob become candidates."""
        draft = Draft(parents=[])
        heap = [(_F32(-1.0), 0, node, at, -1)]  # (−probability, arrival, node, position in label, parent)
        arrivals = 1
        while len(draft.tokens) < budget and heap:
            minus_prob, _, node, at, parent = heappop(heap)
            if at < node.length:
                draft.tokens.append(node.tokens[node.start + at])
                draft.parents.append(parent)
                draft.score -= minus_prob
                heappush(heap, (minus_prob, arrivals, node, at + 1, len(draft.tokens) - 1))
                arrivals += 1
                continue
            for child in node.order or ():
                # An equal count keeps the probability exactly: our node boundaries need not be arctic's.
                prob = -minus_prob if child.count == node.count else -minus_prob * _F32(child.count) / _F32(node.count)
                if prob < min_prob:
                    break  # the rest are rarer
                heappush(heap, (-prob, arrivals, child, 0, parent))
                arrivals += 1
        return draft


class _Workload:
    """One workload's global tree: the outputs of its last max_cached_requests requests."""

    def __init__(self, max_depth: int):
        self.tree = SuffixTree(max_depth)
        self.cached: dict[int, None] = {}  # request ids whose outputs are in the tree, oldest first
        self.next_id = 0


@dataclass
class _Row:
    """An active request: its own tree (prompt + output) and its output's id in the global tree."""

    tree: SuffixTree
    global_id: int
    length: int  # tokens of the row's sequence already in its trees (at the start: its prompt)


class SuffixProposer:
    """Chains (vLLM's) or trees (arctic's use_tree_spec) from suffix trees over prompts and earlier outputs.

    State: one tree per active row, rebuilt at `reset`, and one global tree per workload name
    (`begin_workload`), kept across batches. Only verified tokens enter the trees.
    """

    target_layer_ids: tuple[int, ...] = ()
    tree_depth = None  # a tree of at most γ nodes (or a chain of γ): measured across the γ sweep like chains
    max_num_speculative_tokens = None

    def __init__(
        self,
        *,
        vocab_size: int,
        suffix_decoding_max_tree_depth: int = 24,
        suffix_decoding_max_cached_requests: int = 10000,
        suffix_decoding_max_spec_factor: float = 1.0,
        suffix_decoding_min_token_prob: float = 0.1,
        max_model_len: Optional[int] = None,  # vLLM's cap: no draft reaches past it; None = no cap
        use_tree_spec: bool = False,  # False = a chain, as vLLM serves it; True = arctic's best-first tree
    ):
        SuffixDrafter(  # HeadsError, naming the setting, if one is bad
            suffix_decoding_max_tree_depth,
            suffix_decoding_max_cached_requests,
            suffix_decoding_max_spec_factor,
            suffix_decoding_min_token_prob,
        )
        self.max_depth, self.max_cached = suffix_decoding_max_tree_depth, suffix_decoding_max_cached_requests
        self.spec_factor, self.min_token_prob = suffix_decoding_max_spec_factor, suffix_decoding_min_token_prob
        self.vocab_size, self.max_model_len, self.use_tree_spec = vocab_size, max_model_len, use_tree_spec
        self.device = torch.device("cpu")
        self._workloads: dict[str, _Workload] = {}
        self.begin_workload("default")

    def begin_workload(self, name: str) -> None:
        """Draft from `name`'s global tree from now on (a new name starts empty); the active rows end."""
        self._workload = self._workloads.setdefault(name, _Workload(self.max_depth))
        self._rows: list[Optional[_Row]] = []

    def reset(self, batch_size: int = 1, device: Optional[torch.device] = None) -> None:
        """The active requests end (their outputs stay in the global tree); a new batch starts."""
        self.device = device or torch.device("cpu")
        self._rows = [None] * batch_size

    def propose(
        self, sequences: list[list[int]], num_speculative_tokens: int, params: SamplingParams, generator=None
    ) -> Proposal:
        """Up to γ draft tokens (chain) or nodes (tree) per row.

        Returns:
            draft_tokens (B, N), N the longest row's draft, padded with token 0; num_draft (B,); parents
            (B, N) with use_tree_spec (padding hangs from the root), else None; one-hot draft_probs
            (B, N, V) when sampling.
        """
        if len(self._rows) != len(sequences):
            self.reset(len(sequences), self.device)
        drafts = [self._draft(b, s, num_speculative_tokens) for b, s in enumerate(sequences)]
        counts = [len(d.tokens) for d in drafts]
        width = max(counts, default=0)
        tokens = np.zeros((len(drafts), width), dtype=np.int64)  # (B, N), padding 0
        parents = np.full((len(drafts), width), -1, dtype=np.int64)  # (B, N), padding hangs from the root
        for b, d in enumerate(drafts):
            tokens[b, : len(d.tokens)] = d.tokens
            if d.parents is not None:
                parents[b, : len(d.parents)] = d.parents
        draft_tokens = torch.from_numpy(tokens).to(self.device)
        probs = None
        if not params.greedy:  # a deterministic proposal: q is one-hot at each draft token
            probs = torch.zeros(*draft_tokens.shape, self.vocab_size, device=self.device)  # (B, N, V)
            probs.scatter_(-1, draft_tokens[..., None], 1.0)
        return Proposal(
            draft_tokens,
            probs,
            torch.from_numpy(parents).to(self.device) if self.use_tree_spec else None,
            num_draft=torch.tensor(counts, device=self.device),
        )

    def accept(self, num_valid: list[int], features: Optional[TargetFeatures] = None) -> None:
        """Nothing to roll back: the trees hold only verified tokens, which `propose` is given."""

    def _draft(self, b: int, sequence: list[int], gamma: int) -> Draft:
        """Row b's best draft from its own tree and the workload's global tree (its own tree on ties)."""
        row = self._sync(b, sequence)
        budget = gamma if self.max_model_len is None else min(gamma, self.max_model_len - len(sequence) - 1)
        pattern = sequence[-self.max_depth :]
        spec = (budget, self.spec_factor, self.min_token_prob, self.use_tree_spec)
        mine = row.tree.speculate(pattern, *spec, own=row.tree.suffix_ends(0))
        shared = self._workload.tree.speculate(pattern, *spec, own=self._workload.tree.suffix_ends(row.global_id))
        return mine if mine.score >= shared.score else shared

    def _sync(self, b: int, sequence: list[int]) -> _Row:
        """Row b with its trees holding `sequence`: a new request at its first step, else only new tokens added."""
        row = self._rows[b]
        if row is None or len(sequence) < row.length:  # not the sequence this row grew from: a new request
            row = self._rows[b] = self._start(sequence)
        new = sequence[row.length :]
        if new:
            row.tree.extend(0, new)
            if row.global_id in self._workload.cached:  # else evicted while still decoding: arctic stops adding
                self._workload.tree.extend(row.global_id, new)
            row.length = len(sequence)
        return row

    def _start(self, prompt: list[int]) -> _Row:
        """A request's tree over its prompt, and a slot for its output in the global tree (FIFO eviction)."""
        tree = SuffixTree(self.max_depth)
        tree.extend(0, prompt)
        work = self._workload
        request, work.next_id = work.next_id, work.next_id + 1
        if self.max_cached:
            work.cached[request] = None
            while len(work.cached) > self.max_cached:
                oldest = next(iter(work.cached))
                del work.cached[oldest]
                if oldest in work.tree:  # an output with no tokens yet never entered the tree
                    work.tree.remove(oldest)
        return _Row(tree, request, len(prompt))
