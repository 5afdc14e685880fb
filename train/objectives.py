"""Per-drafter training objectives: batch → (loss, metrics). The loop is shared by all."""

from __future__ import annotations

from typing import Protocol

import torch

from train.losses import kd_loss


class Objective(Protocol):
    def __call__(self, model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, torch.Tensor]]: ...


class DraftLMDistillation:
    """Distil the target into a draft LM on the target's own samples, teacher computed online.

    Position t's logits predict token t+1; a position counts when token t+1 is assistant-written.
    Logits are compared over the first `vocab_size` entries (the tokenizer's vocabulary), so a
    draft and a target with differently padded embedding tables still line up.
    """

    def __init__(self, target: torch.nn.Module, loss: str, vocab_size: int, jsd_beta: float = 0.5, temperature: float = 1.0):
        self.target, self.loss, self.vocab_size = target, loss, vocab_size
        self.jsd_beta, self.temperature = jsd_beta, temperature

    def __call__(self, model, batch):
        input_ids, attention_mask = batch["input_ids"], batch["attention_mask"]
        mask = (batch["loss_mask"][:, 1:] * attention_mask[:, 1:]).bool()  # (B, T-1)
        student = model(input_ids=input_ids, attention_mask=attention_mask).logits[:, :-1, : self.vocab_size][mask]  # (N, V)
        teacher = None
        if self.loss != "ce":
            with torch.no_grad():
                teacher = self.target(input_ids=input_ids, attention_mask=attention_mask).logits[:, :-1, : self.vocab_size][mask]
        labels = input_ids[:, 1:][mask]  # (N,)
        t = self.temperature
        per_token = kd_loss(self.loss, student / t, None if teacher is None else teacher / t, labels, self.jsd_beta)
        loss = per_token.mean()
        with torch.no_grad():
            reference = labels if teacher is None else teacher.argmax(-1)
            metrics = {"loss": loss.detach(), "top1_agreement": (student.argmax(-1) == reference).float().mean()}
        return loss, metrics
