"""Medusa token trees: per-head top-k accuracy, the greedy tree construction, parent indices.

A tree is a list of paths; path (r_1, …, r_d) is the node reached by taking head 1's rank-r_1
candidate, then head 2's rank-r_2 candidate, and so on (ranks 0-based). Medusa's construction
(Cai et al. 2024, §3.3.1) treats the heads as independent: the chance that a node's whole
path is accepted is the product of its candidates' measured accuracies, so the tree of n
nodes that maximises the expected accepted length is built greedily, always adding the
best-scoring child of the nodes already chosen.
"""

from __future__ import annotations

import heapq
import math

import torch


def rank_accuracy(logits: torch.Tensor, labels: torch.Tensor, topk: int) -> torch.Tensor:
    """Share of positions whose label is each head's rank-i candidate.

    Args:
        logits: (N, V) one head's logits; labels: (N,) the tokens that followed.
    Returns:
        (topk,) float: entry i = P(label is the i-th most likely candidate); its cumulative sum
        is the top-(i+1) accuracy.
    """
    if labels.numel() == 0:
        return logits.new_zeros(topk, dtype=torch.float32)
    ranked = logits.topk(min(topk, logits.shape[-1]), dim=-1).indices  # (N, k)
    hits = (ranked == labels[:, None]).float().mean(0)  # (k,)
    return torch.nn.functional.pad(hits, (0, topk - hits.numel()))


def path_score(path: tuple[int, ...], accuracy: list[list[float]]) -> float:
    """P(every candidate on the path is accepted) under independent heads."""
    return math.prod(accuracy[depth][rank] for depth, rank in enumerate(path))


def build_tree(accuracy: list[list[float]], num_nodes: int) -> list[tuple[int, ...]]:
    """The num_nodes-node tree maximising the expected accepted length (greedy, Medusa §3.3.1).

    Args:
        accuracy: accuracy[k][i] = P(head k's rank-i candidate is the right token).
    Returns:
        paths in topological order (by depth, then ranks): a parent precedes its children.
    """
    depth_limit, ranks = len(accuracy), len(accuracy[0])
    frontier = [(-path_score((r,), accuracy), (r,)) for r in range(ranks)]
    heapq.heapify(frontier)
    chosen: list[tuple[int, ...]] = []
    while frontier and len(chosen) < num_nodes:
        _, path = heapq.heappop(frontier)  # best remaining child of the tree so far
        chosen.append(path)
        if len(path) < depth_limit:
            for r in range(ranks):
                child = path + (r,)
                heapq.heappush(frontier, (-path_score(child, accuracy), child))
    return sorted(chosen, key=lambda p: (len(p), p))


def expected_tau(paths: list[tuple[int, ...]], accuracy: list[list[float]]) -> float:
    """1 + Σ_nodes P(node accepted): the accepted length the tree should reach, bonus included."""
    return 1.0 + sum(path_score(p, accuracy) for p in paths)


def tree_parents(paths: list[tuple[int, ...]]) -> list[int]:
    """Each node's parent index in `paths` (−1: the node continues the last verified token)."""
    index = {p: i for i, p in enumerate(paths)}
    missing = [p for p in paths if len(p) > 1 and p[:-1] not in index]
    if missing or any(index[p[:-1]] > index[p] for p in paths if len(p) > 1):
        raise ValueError(
            f"tree paths are not closed under prefixes in topological order: {missing[:3] or 'parent after child'}"
        )
    return [index[p[:-1]] if len(p) > 1 else -1 for p in paths]


def full_tree(branching: list[int]) -> list[tuple[int, ...]]:
    """Every combination of the top-branching[d] candidates per depth, e.g. [3, 2, 1] → 3 + 6 + 6 nodes."""
    paths, level = [], [()]
    for k in branching:
        level = [p + (r,) for p in level for r in range(k)]
        paths += level
    return sorted(paths, key=lambda p: (len(p), p))
