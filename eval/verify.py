"""Verification rules: which draft tokens the target accepts, and the token that follows.

Exact rejection sampling (Leviathan et al. 2023, "Fast Inference from Transformers via
Speculative Decoding"; Chen et al. 2023) keeps the output distribution exactly the target's.
"""

from __future__ import annotations

import torch


def greedy_verify(target_logits: torch.Tensor, draft_tokens: torch.Tensor) -> tuple[int, int]:
    """Accept the longest prefix of draft tokens equal to the target's argmax.

    Args:
        target_logits: (γ+1, V) target logits at the positions predicting each draft token and
            the one after the last.
        draft_tokens: (γ,) proposed tokens.
    Returns:
        (num_accepted, next_token): next_token is the target's argmax after the accepted prefix.
    """
    target_tokens = target_logits.argmax(-1)  # (γ+1,)
    matches = (target_tokens[:-1] == draft_tokens).int()
    num_accepted = int(matches.cumprod(0).sum())  # host sync: one per step
    return num_accepted, int(target_tokens[num_accepted])  # host sync


def rejection_sample(
    target_probs: torch.Tensor,
    draft_probs: torch.Tensor,
    draft_tokens: torch.Tensor,
    generator: torch.Generator | None = None,
) -> tuple[int, int]:
    """Exact speculative sampling over a chain.

    Accept draft token i with probability min(1, p_i(x_i) / q_i(x_i)); at the first rejection
    sample from norm(max(0, p_i − q_i)); when all γ are accepted sample the bonus from p_γ.

    Args:
        target_probs: (γ+1, V) p at each draft position and one past the last.
        draft_probs: (γ, V) q the draft tokens were sampled from.
        draft_tokens: (γ,)
        generator: optional RNG for reproducible draws (on the probs' device).
    Returns:
        (num_accepted, next_token)
    """
    gamma = draft_tokens.shape[0]
    idx = torch.arange(gamma, device=draft_tokens.device)
    p = target_probs[idx, draft_tokens]  # (γ,)
    q = draft_probs[idx, draft_tokens]  # (γ,)
    u = torch.rand(gamma, generator=generator, device=p.device)
    accepted = (u * q < p).int()  # u < p/q without dividing by a zero q
    num_accepted = int(accepted.cumprod(0).sum())  # host sync: one per step
    if num_accepted < gamma:
        residual = (target_probs[num_accepted] - draft_probs[num_accepted]).clamp_min(0)
        total = residual.sum()
        # p == q leaves no residual mass; then rejection had probability 0 and p is exact.
        dist = residual / total if total > 0 else target_probs[num_accepted]
    else:
        dist = target_probs[gamma]
    next_token = int(torch.multinomial(dist, 1, generator=generator))  # host sync
    return num_accepted, next_token


def _children(parents: list[int]) -> dict[int, list[int]]:
    """Node index → its children in index order; key −1 is the root (the last verified token)."""
    children: dict[int, list[int]] = {}
    for node, parent in enumerate(parents):
        children.setdefault(parent, []).append(node)
    return children


def _deepest_path(accepts: list[bool], parents: list[int]) -> list[int]:
    """The longest root-to-node path whose nodes are all accepted (first in index order on ties)."""
    depth = [0] * len(parents)
    best = -1
    for node, parent in enumerate(parents):  # parents precede children
        ok = accepts[node] and (parent < 0 or depth[parent] > 0)
        depth[node] = (depth[parent] + 1 if parent >= 0 else 1) if ok else 0
        if depth[node] > (depth[best] if best >= 0 else 0):
            best = node
    path = []
    while best >= 0:
        path.append(best)
        best = parents[best]
    return path[::-1]


def tree_greedy_verify(
    target_logits: torch.Tensor, draft_tokens: torch.Tensor, parents: torch.Tensor
) -> tuple[list[int], int]:
    """Accept the longest root-to-node path on which every token is the target's argmax.

    Args:
        target_logits: (N+1, V) logits at the root (row 0) and at every node (row j+1).
        draft_tokens: (N,) node tokens; parents: (N,) parent node index, −1 = root.
    Returns:
        (path, next_token): accepted node indices root-down, and the target's argmax after them.
    """
    argmax = target_logits.argmax(-1).tolist()  # host sync: one per step
    parent_list, tokens = parents.tolist(), draft_tokens.tolist()
    accepts = [tokens[j] == argmax[p + 1] for j, p in enumerate(parent_list)]
    path = _deepest_path(accepts, parent_list)
    return path, argmax[path[-1] + 1 if path else 0]


def tree_rejection_sample(
    target_probs: torch.Tensor,
    draft_probs: torch.Tensor,
    draft_tokens: torch.Tensor,
    parents: torch.Tensor,
    generator: torch.Generator | None = None,
) -> tuple[list[int], int]:
    """Exact speculative sampling over a token tree: recursive rejection over siblings.

    At a node with target distribution p, try its children in order: accept child x with
    probability min(1, p(x)/q(x)); on rejection replace p by norm(max(0, p − q)) and try the
    next sibling. The first accepted child becomes the node and the walk descends; when every
    child is rejected the next token is drawn from the current residual (SpecInfer, Miao et al.
    2024). Each accepted or emitted token is distributed exactly as the target's, provided each
    sibling was drawn independently from its q.

    Args:
        target_probs: (N+1, V) p at the root (row 0) and at every node (row j+1).
        draft_probs: (N, V) q each node was drawn from; draft_tokens, parents: (N,).
    Returns:
        (path, next_token)
    """
    children = _children(parents.tolist())  # host sync
    tokens = draft_tokens.tolist()
    path, node = [], -1
    residual = target_probs[0]
    while True:
        for child in children.get(node, []):
            x = tokens[child]
            q = draft_probs[child]
            u = float(torch.rand((), generator=generator, device=q.device))  # host sync
            if u * float(q[x]) < float(residual[x]):  # u < p/q without dividing by a zero q
                path.append(child)
                node, residual = child, target_probs[child + 1]
                break
            left = (residual - q).clamp_min(0)
            total = left.sum()
            # p ≤ q everywhere means rejection had probability 0; keep p (numerical safety).
            residual = left / total if total > 0 else residual
        else:  # no child accepted (or a leaf): draw the next token from what is left of p
            return path, int(torch.multinomial(residual, 1, generator=generator))  # host sync


def typical_verify(
    target_probs: torch.Tensor,
    draft_tokens: torch.Tensor,
    parents: torch.Tensor,
    threshold: float = 0.09,
    alpha: float = 0.3,
    generator: torch.Generator | None = None,
) -> tuple[list[int], int]:
    """Medusa's typical acceptance (Cai et al. 2024) — LOSSY: output is not the target's distribution.

    A node is accepted when p(x) > min(threshold, alpha · exp(−H(p))) at its parent, with H the
    entropy of the target's distribution there; the longest accepted path wins and the next
    token is drawn from p after it. Faster at high temperature, at the cost of exactness.

    Args:
        target_probs: (N+1, V); draft_tokens, parents: (N,) (a chain is parents j − 1).
    Returns:
        (path, next_token)
    """
    entropy = -(target_probs * target_probs.clamp_min(1e-30).log()).sum(-1)  # (N+1,)
    bar = torch.minimum(torch.full_like(entropy, threshold), alpha * torch.exp(-entropy))  # (N+1,)
    par = parents + 1  # row of each node's parent in target_probs
    accepts = (target_probs[par, draft_tokens] > bar[par]).tolist()  # host sync
    path = _deepest_path(accepts, parents.tolist())
    last = path[-1] + 1 if path else 0
    return path, int(torch.multinomial(target_probs[last], 1, generator=generator))  # host sync
