"""The proposer table: how a loaded drafter of each family becomes the engine's `Proposer`.

`load_proposer` reads an export directory: the family table (heads/families/) says which
family wrote it and loads it; this table builds the proposer the eval settings ask for (chains or
trees) and checks those settings against the family, also up front (`check_eval_settings`),
before any stage runs. Each family's row lives beside its proposer, in eval/proposers/<kind>.py.
"""

from __future__ import annotations

from pathlib import Path

import torch

from eval.config import EvalConfig
from eval.errors import EvalError
from eval.proposer import Proposer
from eval.proposers import (
    dflash,
    dflash2,
    draft_lm,
    dspark,
    eagle1,
    eagle3,
    layer_skip,
    lookahead,
    medusa,
    ngram,
    pard,
    peagle,
    retrieval,
    suffix,
)
from eval.proposers.base import ProposerEntry
from eval.run import check_settings
from heads.families import Export
from heads.target_features import FINAL_NORMED

PROPOSERS: dict[str, ProposerEntry] = {
    "draft_lm": draft_lm.ENTRY,
    "pard": pard.ENTRY,
    "medusa": medusa.ENTRY,
    "eagle3": eagle3.ENTRY,
    "eagle1": eagle1.ENTRY,
    "peagle": peagle.ENTRY,
    "ngram": ngram.ENTRY,
    "layer_skip": layer_skip.ENTRY,
    "lookahead": lookahead.ENTRY,
    "suffix": suffix.ENTRY,
    "retrieval": retrieval.ENTRY,
    "dflash": dflash.ENTRY,
    "dspark": dspark.ENTRY,
    "dflash2": dflash2.ENTRY,
}


def proposer_entry(kind: str) -> ProposerEntry:
    try:
        return PROPOSERS[kind]
    except KeyError:
        raise EvalError(
            f"drafter.kind={kind!r} has no entry in the proposer table (eval/proposers/__init__.py PROPOSERS); "
            f"known kinds: {sorted(PROPOSERS)}"
        ) from None


def check_eval_settings(kind: str, settings, cfg: EvalConfig) -> None:
    """Eval settings against the drafter's, before any stage runs."""
    check_settings(cfg)
    entry = proposer_entry(kind)
    _check_adaptive(kind, entry, cfg)
    entry.check(settings, cfg)


def _check_adaptive(kind: str, entry: ProposerEntry, cfg: EvalConfig) -> None:
    if cfg.draft_confidence_min is None:
        return
    if not entry.adaptive_length:
        raise EvalError(
            f"eval.draft_confidence_min={cfg.draft_confidence_min} needs a drafter with a confidence head (dspark); "
            f"drafter.kind={kind} drafts a fixed γ: set eval.draft_confidence_min=null"
        )
    if cfg.serve == "vllm":  # llama.cpp's --spec-draft-p-min is the same cut; vLLM's adaptive verification is not
        raise EvalError(
            f"eval.draft_confidence_min={cfg.draft_confidence_min} with eval.serve=vllm: vLLM's adaptive verification "
            "is another rule; serve with eval.serve=llamacpp (the same cut) or measure a fixed γ"
        )


def load_proposer(
    export: Export, target, vocab_size: int, cfg: EvalConfig, device: torch.device
) -> tuple[Proposer, str]:
    """The proposer for `export` (checked against `target`), shaped by cfg.tree; returns it and the kind."""
    check_settings(cfg)
    family, path = export.family, export.path
    entry = proposer_entry(family.kind)
    _check_adaptive(family.kind, entry, cfg)
    drafter = family.load(Path(path), target)
    if isinstance(drafter, torch.nn.Module):
        drafter = drafter.eval().to(device)
    proposer = entry.build(drafter, target=target, vocab_size=vocab_size, cfg=cfg, path=path)
    if not _reads(family.signals, proposer.target_layer_ids):
        raise EvalError(
            f"the {family.kind} proposer reads target layers {proposer.target_layer_ids}, but the family table "
            f"declares signals={family.signals!r}; fix heads/families/ or eval/proposers/"
        )
    return proposer, family.kind


def _reads(signals: str, layer_ids: tuple[int, ...]) -> bool:
    """Whether a proposer's target_layer_ids are what its family declares (heads.families.SIGNALS)."""
    if signals == "tokens":
        return layer_ids == ()
    if signals == "final_normed":
        return tuple(layer_ids) == (FINAL_NORMED,)
    return len(layer_ids) > 0 and all(i >= 0 for i in layer_ids)
