"""What every family module of eval/proposers/ builds on: the table's row type and the checks several share.

It sits apart from the package's `__init__` so that the family modules import it without importing the table
that imports them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from eval.config import EvalConfig
from eval.errors import EvalError
from eval.proposer import Proposer


@dataclass(frozen=True)
class ProposerEntry:
    build: Callable[..., Proposer]  # (drafter, *, target, vocab_size, cfg, path) → Proposer
    check: Callable[[Any, EvalConfig], None]  # (drafter settings, eval settings) → EvalError before any work
    adaptive_length: bool = False  # it honours eval.draft_confidence_min (a confidence head estimates acceptance)


def check_block_drafter(settings, cfg: EvalConfig) -> None:
    if cfg.tree is not None:
        raise EvalError(
            f"eval.tree={cfg.tree}: this drafter proposes one block (a chain) per forward, as vLLM serves it; "
            "set eval.tree=null"
        )


def check_trained_block(settings, cfg: EvalConfig) -> None:
    """PARD and P-EAGLE: chains within the block trained. settings: the drafter config (preflight) or
    the loaded drafter; both carry max_draft_tokens (None: an export that does not say)."""
    check_block_drafter(settings, cfg)
    if settings.max_draft_tokens is not None and cfg.num_speculative_tokens > settings.max_draft_tokens:
        raise EvalError(
            f"eval.num_speculative_tokens={cfg.num_speculative_tokens} exceeds drafter.max_draft_tokens="
            f"{settings.max_draft_tokens}: the drafter drafts at most the block it was trained for"
        )


def check_paired(drafter, target, vocab_size: int, path, name: str) -> None:
    """A drafter reading target features must match the target's width and vocabulary."""
    if drafter.arch.target_hidden_size != target.config.hidden_size or drafter.arch.vocab_size < vocab_size:
        raise EvalError(
            f"{path} is {name} drafter for hidden size {drafter.arch.target_hidden_size} and "
            f"{drafter.arch.vocab_size} tokens; this target has {target.config.hidden_size} and {vocab_size}"
        )
