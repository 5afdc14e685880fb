"""The most samples a distillation can give, known before it runs, so that settings holding samples out of training
(drafter.select_samples, …) and trainer.batch_size are refused before the target answers anything.

A bound, never a count: rows can still be dropped (too long, no user turn) and a `turns` row gives one sample per
turn, so the bound sums the largest rows a cap can take. Sources only read on this machine are bounded (files,
prompt sets, Magpie's data.max_prompts); a Hub dataset or the toy world's prompts leave it unknown (None).
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from distill.config import DataConfig, PromptSource
from distill.prompts import magpie
from distill.prompts.chat import owes_answer
from distill.prompts.heldout import heldout_indices, holdout_active
from distill.prompts.read import load_conversations
from distill.prompts.sets import is_prompt_set


def most_samples(data: DataConfig) -> Optional[int]:
    """The most samples data.prompts and data.mix can give the target's answers; None where unknown before
    distilling (a source on the Hub, the toy world's prompts, a corpus)."""
    if data.source != "target":
        return None
    first = PromptSource(data.prompts, data.split, data.max_prompts, data.prompts_column)
    bounds = [_most(source, data, number == 0) for number, source in enumerate([first, *data.mix])]
    return None if None in bounds else sum(bounds)


def _most(source: PromptSource, data: DataConfig, first: bool) -> Optional[int]:
    if source.prompts == magpie.SOURCE:
        return source.max_prompts  # one request, one answer each
    if not (is_prompt_set(source.prompts) or Path(source.prompts).expanduser().is_file()):
        return None
    conversations = load_conversations(source.prompts, source.split, column=source.prompts_column)
    held = 0
    if first and holdout_active(data.prompts, data.holdout):
        held = len(heldout_indices(len(conversations), data.holdout, data.holdout_seed))
    taken = len(conversations) - held if not source.max_prompts else min(source.max_prompts, len(conversations) - held)
    per_row = sorted((_samples(c, data.regenerate) for c in conversations), reverse=True)
    return sum(per_row[:taken])


def _samples(messages: list[dict], regenerate: bool) -> int:
    """A row's samples: one, and one more per answer a `turns` row owes (answered turn by turn)."""
    return 1 + sum(map(owes_answer, messages)) if regenerate else 1
