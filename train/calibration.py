"""Measure Medusa heads on held-out distilled samples and build the token tree they decode with.

Runs once after training: per head, the share of positions whose true next-but-k token is the
head's rank-i candidate (i < tree_topk); Medusa's greedy construction turns those accuracies
into the node-budgeted tree that is saved with the checkpoint and the export.
"""

from __future__ import annotations

import torch

from distill.features import final_hidden_states
from heads.medusa import MedusaHeads
from heads.medusa_tree import build_tree, expected_tau, rank_accuracy
from train.data import collate
from train.objectives import medusa_positions


@torch.no_grad()
def calibrate_medusa(
    heads: MedusaHeads,
    target,
    holdout,
    *,
    tree_topk: int,
    tree_nodes: int,
    vocab_size: int,
    pad_token_id: int,
    batch_size: int,
    max_seq_len: int,
) -> dict:
    """Set heads.tree / heads.calibration from `holdout` (rows with input_ids, loss_mask); return the calibration."""
    device = next(target.parameters()).device
    hits = torch.zeros(heads.num_heads, tree_topk)
    positions = torch.zeros(heads.num_heads)
    for start in range(0, len(holdout), batch_size):
        rows = holdout[start : start + batch_size]
        batch = {
            k: v.to(device) for k, v in collate(rows["input_ids"], rows["loss_mask"], max_seq_len, pad_token_id).items()
        }
        hidden, _ = final_hidden_states(target, batch["input_ids"], batch["attention_mask"])
        inputs, labels = medusa_positions(hidden, batch, heads.num_heads)
        for k, logits in enumerate(heads(inputs)):
            n = labels[k].numel()
            # host sync: once per batch
            hits[k] += rank_accuracy(logits[:, :vocab_size], labels[k], tree_topk).cpu() * n
            positions[k] += n
    accuracy = (hits / positions.clamp(min=1)[:, None]).tolist()
    tree = build_tree(accuracy, tree_nodes)
    calibration = {
        "head_accuracy": [[round(a, 5) for a in row] for row in accuracy],  # [head][rank]
        "holdout_samples": len(holdout),
        "positions_per_head": positions.int().tolist(),
        "tree_nodes": len(tree),
        "tree_depth": max(map(len, tree)),
        "expected_tau": round(expected_tau(tree, accuracy), 4),
    }
    heads.tree, heads.calibration = tree, calibration
    return calibration
