"""Batches of the distillation dataset in a deterministic, resumable order.

The order of micro-batch m depends only on (seed, m): resuming at step s replays exactly the
batches an uninterrupted run would have seen. Each process takes its rows of the global batch,
so the global batch is the same for any number of processes.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow.compute as pc
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


@dataclass(frozen=True)
class LengthCut:
    """What trainer.max_seq_len cuts off a dataset: samples, and the answer (loss-masked) tokens they lose."""

    max_seq_len: int
    samples: int  # in the dataset
    samples_cut: int  # longer than max_seq_len, losing answer tokens
    answer_tokens: int
    answer_tokens_cut: int
    longest: int  # the longest sample's length

    @property
    def share(self) -> float:
        return self.answer_tokens_cut / max(1, self.answer_tokens)

    def message(self) -> str:
        return (
            f"trainer.max_seq_len={self.max_seq_len} cuts {self.samples_cut} of {self.samples} samples, and "
            f"{self.share:.1%} of the answer tokens with them (the longest sample has {self.longest} tokens); "
            f"set trainer.max_seq_len={self.longest}, distil with a lower data.max_prompt_tokens or "
            "data.sampling.max_new_tokens, or accept the loss with a higher trainer.max_cut_share"
        )


def length_cut(dataset, max_seq_len: int) -> LengthCut:
    """Measure the cut from the dataset's Arrow columns (the mask is read only for the samples that are too long)."""
    lengths = pc.list_value_length(dataset.data.column("input_ids")).to_pylist()
    masks = dataset.data.column("loss_mask")
    answer = int(pc.sum(pc.list_flatten(masks)).as_py() or 0)
    long_rows = [i for i, n in enumerate(lengths) if n > max_seq_len]
    lost = [sum(m[max_seq_len:]) for m in dataset.select(long_rows)["loss_mask"]] if long_rows else []
    return LengthCut(
        max_seq_len=max_seq_len,
        samples=len(lengths),
        samples_cut=sum(1 for n in lost if n),
        answer_tokens=answer,
        answer_tokens_cut=sum(lost),
        longest=max(lengths, default=0),
    )
