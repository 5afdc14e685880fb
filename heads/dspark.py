"""DSpark drafters (DeepSeek's DeepSpec, 2026): DFlash's block backbone drafting anchor-first, with a
low-rank Markov head and a confidence head.

The backbone is heads/dflash.py's, unchanged: context keys/values from the target's fused features at
`layer_ids`, a block [x_t, MASK × (block_size − 1)] at positions t … t + block_size − 1 run
bidirectionally over [context of positions < t ; the block]. What differs is the layout and the heads:
- anchor-first: *every* slot drafts the next position (slot k → token t + k + 1), so one forward drafts
  block_size tokens (vLLM's `sample_from_anchor: true`, DeepSpec's layout);
- Markov head: logits_k = lm_head(h_k) + markov_w2(markov_w1[prev_k]), prev_k the token before draft k
  (the anchor for k = 0, then draft k − 1): a rank-r transition bias, applied left to right on the
  drafted tokens when drafting and on the true ones in training (teacher forcing, as DeepSpec does);
- confidence head: sigmoid(proj([h_k ; markov_w1[prev_k]])), trained towards each draft's acceptance
  probability Σ min(p, q); an engine may stop the block where it falls below a threshold.

This is vLLM 0.32's `Qwen3DSparkModel` (model_executor/models/qwen3_dspark.py: DSparkMarkovHead,
DSparkConfidenceHead; the sequential sampling of v1/worker/gpu/spec_decode/dspark/speculator.py).
heads/families/dspark.py writes and reads that format. Module names are the export's tensor names.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import ClassVar, Optional

import torch
import torch.nn.functional as F
from torch import nn

from heads.dflash import DFlashArch, DFlashDrafter, check_dflash_settings
from heads.errors import HeadsError


def check_dspark_settings(settings) -> None:
    """DFlash's checks, then the heads': HeadsError naming the first bad setting."""
    check_dflash_settings(settings)
    if settings.markov_rank < 1:
        raise HeadsError(
            f"drafter.markov_rank={settings.markov_rank} must be ≥ 1: vLLM's Qwen3 DSpark always builds the "
            "Markov head (rank 0 is DFlash; use drafter=dflash for a drafter without it)"
        )
    weights = {"ce_weight": settings.ce_weight, "confidence_weight": settings.confidence_weight}
    bad = [f"drafter.{k}={v}" for k, v in weights.items() if v < 0] + (
        [f"drafter.ce_weight={settings.ce_weight}"] if settings.ce_weight > 1 else []
    )
    if bad:
        raise HeadsError(f"{bad[0]} is out of range: ce_weight in [0, 1] (the rest is KD), confidence_weight ≥ 0")


@dataclass
class DSparkArch(DFlashArch):
    anchor_first: ClassVar[bool] = True  # every slot, the anchor's too, drafts the next position (DeepSpec's layout)
    markov_rank: int = 64
    confidence_head: bool = True
    confidence_with_markov: bool = True

    @classmethod
    def for_target(cls, cfg, target_config, mask_token_id: int) -> "DSparkArch":
        check_dspark_settings(cfg)
        base = DFlashArch.for_target(cfg, target_config, mask_token_id)
        return cls(
            **asdict(base),
            markov_rank=cfg.markov_rank,
            confidence_head=cfg.confidence_head,
            confidence_with_markov=cfg.confidence_with_markov,
        )


class MarkovHead(nn.Module):
    """The transition bias of the previous token: markov_w2(markov_w1[prev]), V×r then r×V."""

    def __init__(self, vocab_size: int, rank: int):
        super().__init__()
        self.markov_w1 = nn.Embedding(vocab_size, rank)
        self.markov_w2 = nn.Linear(rank, vocab_size, bias=False)
        nn.init.zeros_(self.markov_w2.weight)  # no bias at first: training starts from the block drafter

    def embed(self, prev: torch.Tensor) -> torch.Tensor:
        return self.markov_w1(prev)

    def bias(self, embedded: torch.Tensor) -> torch.Tensor:
        return self.markov_w2(embedded)


class ConfidenceHead(nn.Module):
    """A draft's acceptance logit from its hidden state (and the previous token's Markov embedding); float32
    as vLLM computes it."""

    def __init__(self, hidden_size: int, rank: int, with_markov: bool):
        super().__init__()
        self.with_markov = with_markov
        self.proj = nn.Linear(hidden_size + (rank if with_markov else 0), 1)

    def forward(self, hidden: torch.Tensor, embedded: torch.Tensor) -> torch.Tensor:
        x = torch.cat([hidden, embedded.to(hidden.dtype)], -1) if self.with_markov else hidden
        return F.linear(x.float(), self.proj.weight.float(), self.proj.bias.float()).squeeze(-1)


class DSparkDrafter(DFlashDrafter):
    kind = "dspark"
    arch_class = DSparkArch

    def __init__(self, arch: DSparkArch):
        super().__init__(arch)
        self.markov_head = MarkovHead(arch.vocab_size, arch.markov_rank)
        self.confidence_head: Optional[ConfidenceHead] = (
            ConfidenceHead(arch.hidden_size, arch.markov_rank, arch.confidence_with_markov)
            if arch.confidence_head
            else None
        )

    @classmethod
    def from_target(cls, cfg, target, mask_token_id: int) -> "DSparkDrafter":
        return cls(DSparkArch.for_target(cfg, target.config, mask_token_id)).share(target)

    def step_logits(self, hidden: torch.Tensor, prev: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(…, H) slot hiddens and (…) previous tokens → ((…, V) Markov-corrected logits, (…, r) Markov embedding)."""
        embedded = self.markov_head.embed(prev)
        logits = self.head(hidden)
        return logits + self.markov_head.bias(embedded).to(logits.dtype), embedded

    def confidence(self, hidden: torch.Tensor, embedded: torch.Tensor) -> torch.Tensor:
        """(…) acceptance logits (sigmoid: the estimated probability the target accepts each draft)."""
        if self.confidence_head is None:
            raise HeadsError("this DSpark drafter has no confidence head: train it with drafter.confidence_head=true")
        return self.confidence_head(hidden, embedded)

    def forward(self, features, context_positions, tokens, positions, mask, prev):
        """Training: the block's Markov-corrected logits (B, m, V) given teacher-forced previous tokens prev
        (B, m), and the confidence logits (B, m) (None without the head)."""
        hidden = self.block_hidden(tokens, positions, self.context_kv(features, context_positions), mask)
        logits, embedded = self.step_logits(hidden, prev)
        confidence = self.confidence_head(hidden, embedded) if self.confidence_head is not None else None
        return logits, confidence
