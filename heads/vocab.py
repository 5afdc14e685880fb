"""Reduced draft vocabularies for EAGLE-3: the most frequent target tokens and the maps between ids.

A drafter that scores 32 k tokens instead of 128 k spends a quarter of the lm_head time; the
tokens it cannot propose are ones the target rarely emits. Maps follow the speculators/vLLM
convention: `d2t[d]` is the offset with target_id = d + d2t[d]; `t2d[t]` is True when target
token t has a draft id. Draft ids keep the target's id order, so both maps are monotone.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

import torch


@dataclass
class DraftVocab:
    draft_to_target: torch.Tensor  # (D,) int64 target id of each draft id, ascending

    @property
    def size(self) -> int:
        return self.draft_to_target.numel()

    def d2t(self) -> torch.Tensor:
        """(D,) int64 offsets: target = draft + d2t[draft]."""
        return self.draft_to_target - torch.arange(self.size, device=self.draft_to_target.device)

    def t2d(self, target_vocab_size: int) -> torch.Tensor:
        """(V,) bool: which target tokens the drafter can propose."""
        mask = torch.zeros(target_vocab_size, dtype=torch.bool)
        mask[self.draft_to_target] = True
        return mask

    @classmethod
    def from_d2t(cls, d2t: torch.Tensor) -> "DraftVocab":
        return cls(d2t.long() + torch.arange(d2t.numel()))


def token_counts(sequences: Iterable[list[int]], masks: Iterable[list[int]], vocab_size: int) -> torch.Tensor:
    """(V,) how often each target token is assistant-written in the distilled data."""
    counts = torch.zeros(vocab_size, dtype=torch.long)
    for ids, mask in zip(sequences, masks):
        tokens = torch.tensor([t for t, m in zip(ids, mask) if m], dtype=torch.long)
        counts += torch.bincount(tokens, minlength=vocab_size)[:vocab_size]
    return counts


def build_draft_vocab(
    counts: torch.Tensor, draft_vocab_size: int, always: Iterable[int] = ()
) -> tuple[DraftVocab, dict]:
    """The draft_vocab_size most frequent tokens (plus `always`, e.g. end-of-turn ids), and a coverage report.

    Returns:
        the vocab and {"draft_vocab_size", "coverage"}: the share of assistant tokens in the data
        the draft vocabulary can propose.
    """
    vocab_size = counts.numel()
    size = min(draft_vocab_size, vocab_size)
    forced = sorted({int(t) for t in always if 0 <= int(t) < vocab_size})
    score = counts.double().clone()
    score[forced] = float("inf")  # kept whatever their count
    chosen = torch.sort(score.topk(size, sorted=True).indices).values  # ties → lower id (topk is stable on CPU)
    covered = counts[chosen].sum().item()
    total = counts.sum().item()
    return DraftVocab(chosen), {"draft_vocab_size": size, "coverage": covered / total if total else 1.0}


def pick_mask_token(
    sequences: Iterable[list[int]],
    vocab_size: int,
    special_ids: Iterable[int],
    exclude=(),
    setting: str = "drafter.mask_token_id",
) -> int:
    """The id parallel drafters (PARD, P-EAGLE, DFlash) write into their masked slots, when not set.

    vLLM feeds it straight into the draft's embedding, so it must be a row the drafter can learn
    as "unknown token here" without colliding with real text: a special token the data never
    contains (Llama-3's reserved tokens, an unused chat role), else the highest id the data never
    contains (the rarest BPE merges). `exclude`: ids that must keep their meaning (pad, end of turn).

    Args:
        sequences: every token id of the distilled data (prompts and answers).
    Raises:
        HeadsError when every id occurs in the data.
    """
    from heads.errors import HeadsError

    seen = torch.zeros(vocab_size, dtype=torch.bool)
    for ids in sequences:
        seen[torch.tensor([t for t in ids if 0 <= t < vocab_size], dtype=torch.long)] = True
    unusable = seen.clone()
    unusable[[t for t in exclude if t is not None and 0 <= t < vocab_size]] = True
    for t in sorted(int(t) for t in special_ids):
        if 0 <= t < vocab_size and not unusable[t]:
            return t
    free = (~unusable).nonzero().flatten()
    if not len(free):
        raise HeadsError(
            f"every one of the {vocab_size} token ids occurs in the distilled data, so none can serve as the mask "
            f"token; set {setting} to a reserved token of the target's tokenizer"
        )
    return int(free[-1])
