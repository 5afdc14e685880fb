"""Batches of the distillation dataset in a deterministic, resumable order.

The order of micro-batch m depends only on (seed, m): resuming at step s replays exactly the
batches an uninterrupted run would have seen. Each process takes its rows of the global batch,
so the global batch is the same for any number of processes.
"""

from __future__ import annotations

import torch


class BatchOrder:
    def __init__(
        self,
        dataset,
        batch_size: int,
        max_seq_len: int,
        pad_token_id: int,
        *,
        seed: int,
        rank: int = 0,
        world_size: int = 1,
    ):
        if len(dataset) < batch_size:
            raise ValueError(
                f"the dataset has {len(dataset)} samples, fewer than trainer.batch_size={batch_size}; "
                "lower it or distil more prompts"
            )
        self.dataset, self.batch_size, self.max_seq_len = dataset, batch_size, max_seq_len
        self.pad, self.seed, self.rank, self.world_size = pad_token_id, seed, rank, world_size
        self.per_epoch = len(dataset) // batch_size  # incomplete last batch dropped

    def indices(self, micro_step: int) -> list[int]:
        epoch, pos = divmod(micro_step, self.per_epoch)
        perm = torch.randperm(len(self.dataset), generator=torch.Generator().manual_seed(self.seed + epoch))
        rows = perm[pos * self.batch_size : (pos + 1) * self.batch_size].tolist()
        return rows[self.rank :: self.world_size]

    def batch(self, micro_step: int) -> dict[str, torch.Tensor]:
        """Collated rows plus `rows`, their dataset indices (offline features are looked up by them), and
        `micro_step` (on-policy training draws its samples from it, so a resumed run draws the same)."""
        indices = self.indices(micro_step)
        rows = self.dataset[indices]
        return collate(rows["input_ids"], rows["loss_mask"], self.max_seq_len, self.pad) | {
            "rows": torch.tensor(indices),
            "micro_step": torch.tensor(micro_step),
        }


def collate(
    input_ids: list[list[int]], loss_mask: list[list[int]], max_seq_len: int, pad_token_id: int
) -> dict[str, torch.Tensor]:
    """Right-pad (and cut at max_seq_len) into input_ids, attention_mask, loss_mask: (B, T)."""
    width = min(max_seq_len, max(map(len, input_ids)))
    ids = torch.full((len(input_ids), width), pad_token_id, dtype=torch.long)
    attn = torch.zeros((len(input_ids), width), dtype=torch.long)
    lmask = torch.zeros((len(input_ids), width), dtype=torch.long)
    for i, (x, m) in enumerate(zip(input_ids, loss_mask)):
        n = min(width, len(x))
        ids[i, :n] = torch.tensor(x[:n])
        attn[i, :n] = 1
        lmask[i, :n] = torch.tensor(m[:n])
    return {"input_ids": ids, "attention_mask": attn, "loss_mask": lmask}
