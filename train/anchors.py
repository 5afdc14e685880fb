"""Random anchor positions for the parallel drafters' objectives (PARD, P-EAGLE, DFlash): each anchor
starts a masked block, and every anchor of a batch is trained in the same forward."""

from __future__ import annotations

import torch


def sample_anchors(candidates: torch.Tensor, count: int, generator=None) -> tuple[torch.Tensor, torch.Tensor]:
    """Up to `count` distinct random columns per row among its candidates (torch's RNG or `generator`).

    Args:
        candidates: (B, N) bool, which columns may be anchors.
    Returns:
        anchors (B, A) column indices, A = min(count, N), and (B, A) bool: a real anchor (a row with
        fewer candidates pads with non-candidates, marked False).
    """
    count = max(min(count, candidates.shape[1]), 0)
    score = torch.rand(candidates.shape, device=candidates.device, generator=generator)
    top = score.masked_fill(~candidates, -1.0).topk(count, dim=1)
    return top.indices, top.values >= 0
