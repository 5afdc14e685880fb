"""Knowledge-distillation losses between the target (teacher, p) and the drafter (student, q).

All take logits of shape (N, V) for N positions and return per-position losses (N,); callers
average over the assistant positions. Computed in float32.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

LOSSES = ("fkl", "rkl", "jsd", "tvd", "ce")


def forward_kl(student_logits: torch.Tensor, teacher_logits: torch.Tensor) -> torch.Tensor:
    """KL(p ‖ q) = Σ p (log p − log q): mass-covering, the classic KD objective."""
    log_p, log_q = teacher_logits.float().log_softmax(-1), student_logits.float().log_softmax(-1)
    return (log_p.exp() * (log_p - log_q)).sum(-1)


def reverse_kl(student_logits: torch.Tensor, teacher_logits: torch.Tensor) -> torch.Tensor:
    """KL(q ‖ p) = Σ q (log q − log p): mode-seeking."""
    log_p, log_q = teacher_logits.float().log_softmax(-1), student_logits.float().log_softmax(-1)
    return (log_q.exp() * (log_q - log_p)).sum(-1)


def jensen_shannon(student_logits: torch.Tensor, teacher_logits: torch.Tensor, beta: float = 0.5) -> torch.Tensor:
    """Generalised JSD: β KL(p ‖ m) + (1 − β) KL(q ‖ m) with m = β p + (1 − β) q (β = 0.5: JSD)."""
    log_p, log_q = teacher_logits.float().log_softmax(-1), student_logits.float().log_softmax(-1)
    log_m = torch.logsumexp(
        torch.stack([log_p + torch.log(torch.tensor(beta)), log_q + torch.log(torch.tensor(1 - beta))]), dim=0
    )
    kl_pm = (log_p.exp() * (log_p - log_m)).sum(-1)
    kl_qm = (log_q.exp() * (log_q - log_m)).sum(-1)
    return beta * kl_pm + (1 - beta) * kl_qm


def total_variation(student_logits: torch.Tensor, teacher_logits: torch.Tensor) -> torch.Tensor:
    """TVD = ½ Σ |p − q|; 1 − TVD is the expected acceptance rate of one draft token."""
    p, q = teacher_logits.float().softmax(-1), student_logits.float().softmax(-1)
    return 0.5 * (p - q).abs().sum(-1)


def cross_entropy(student_logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """−log q(sampled token): plain training on the target's samples."""
    return F.cross_entropy(student_logits.float(), labels, reduction="none")


def kd_loss(name: str, student_logits, teacher_logits, labels, beta: float = 0.5) -> torch.Tensor:
    """Per-position loss `name` (one of LOSSES). teacher_logits may be None for `ce`."""
    if name == "fkl":
        return forward_kl(student_logits, teacher_logits)
    if name == "rkl":
        return reverse_kl(student_logits, teacher_logits)
    if name == "jsd":
        return jensen_shannon(student_logits, teacher_logits, beta)
    if name == "tvd":
        return total_variation(student_logits, teacher_logits)
    if name == "ce":
        return cross_entropy(student_logits, labels)
    raise ValueError(f"unknown loss {name!r}; use one of {LOSSES}")
