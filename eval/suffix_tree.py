"""A depth-capped suffix tree with occurrence counts, and the drafts grown from it (arctic-inference 0.1.1's rules).

Suffix decoding (eval/proposers/suffix.py) keeps one per request and one per workload. Every suffix of
the text, up to max_depth tokens, is a path from the root; each node counts the suffixes passing
through or ending at it, i.e. the occurrences of the string from the root to it. A token's
probability after a matched node is the product of count(child) / count(parent) along the path.
Probabilities and scores are float32, as arctic's C++ keeps them, so ties fall as in arctic.
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass, field
from heapq import heappop, heappush
from typing import Optional, Sequence

import numpy as np

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
        min_match: int = 1,
    ) -> Draft:
        """Arctic's rule: the best-scoring draft over every matched length m < len(pattern), longer on ties.

        Args:
            pattern: the last ≤ max_depth verified tokens.
            max_spec_tokens: most tokens (tree nodes) to draft.
            own: `suffix_ends` of the sequence the pattern ends, if it is in this tree: matches for free.
            min_match: shorter matches draft nothing (a store of other texts: one shared token says little).
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
            # a budget under the best score cannot beat it (a draft's score is at most its length)
            if m >= min_match and budget > 0 and budget >= best.score:
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
