"""Knowledge-distillation losses between the target (teacher, p) and the drafter (student, q).

All take logits of shape (N, V) for N positions and return per-position losses (N,); callers
average over the assistant positions. Computed in float32. The acceptance-length loss (`al`) is
not per position: it needs the chain structure, so objectives build it from `acceptance_rate`
with `chain_accepted_length` (EAGLE-3's training-time test: one chain per position) or
`sequence_accepted_length` (a draft LM on whole sequences).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

KD_LOSSES = ("fkl", "rkl", "jsd", "tvd", "ce")  # per position
LOSSES = (*KD_LOSSES, "al")


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


def acceptance_rate(student_probs: torch.Tensor, teacher_probs: torch.Tensor) -> torch.Tensor:
    """α = Σ_x min(p(x), q(x)): the chance rejection sampling accepts a token drawn from q (= 1 − TVD).

    Takes probabilities (…, V), not logits, so a drafter over a reduced vocabulary can pass its q
    scattered into the target's vocabulary (mass p puts outside it can never be accepted).
    """
    return torch.minimum(student_probs.float(), teacher_probs.float()).sum(-1)


def chain_accepted_length(alphas: torch.Tensor) -> torch.Tensor:
    """Expected accepted draft tokens of a chain with per-step acceptance rates alphas (γ, …) → (…).

    Step j is accepted only if steps 1…j all were (rejection stops the chain): E = Σ_j Π_{i≤j} α_i.
    """
    return alphas.float().cumprod(0).sum(0)


def sequence_accepted_length(alpha: torch.Tensor, valid: torch.Tensor, gamma: int) -> torch.Tensor:
    """Per start t of (B, T) sequences, the expected accepted length of the γ-chain t, t+1, …, t+γ−1.

    alpha: (B, T) acceptance rate at each position; valid: (B, T) bool, positions a chain may use
    (a chain is cut at the first invalid one). Returns (B, T); 0 at invalid starts.
    """
    a = alpha.float() * valid
    steps = [torch.nn.functional.pad(a[:, i:], (0, i)) for i in range(gamma)]  # step i of the chain from t: t+i
    return chain_accepted_length(torch.stack(steps))


def acceptance_length_loss(expected: torch.Tensor, gamma: int) -> torch.Tensor:
    """Per chain: −E[accepted]/γ ∈ [−1, 0], minimised when every draft of the chain is accepted."""
    return -expected / gamma


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
    if name == "al":
        raise ValueError("loss 'al' needs chains, not single positions: the objective builds it (train/losses.py)")
    raise ValueError(f"unknown loss {name!r}; use one of {LOSSES}")
