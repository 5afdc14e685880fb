"""The proposer table: how a loaded drafter of each family becomes the engine's `Proposer`.

`load_proposer` reads an export directory: the family table (heads/families.py) says which
family wrote it and loads it; this table builds the proposer the eval settings ask for (chains or
trees) and checks those settings against the family, also up front (`check_eval_settings`),
before any stage runs.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable

import torch

from eval.config import EvalConfig
from eval.dflash_proposer import DFlashProposer
from eval.eagle_proposer import EagleProposer
from eval.errors import EvalError
from eval.lookahead_proposer import LookaheadProposer
from eval.medusa_proposer import MedusaProposer
from eval.ngram_proposer import NgramProposer
from eval.pard_proposer import PardProposer
from eval.peagle_proposer import PEagleProposer
from eval.proposer import DraftLMProposer, Proposer
from eval.run import check_settings
from eval.suffix_proposer import SuffixProposer
from heads.families import family_of_export
from heads.medusa_tree import full_tree
from heads.target_features import FINAL_NORMED


@dataclass(frozen=True)
class ProposerEntry:
    build: Callable[..., Proposer]  # (drafter, *, target, vocab_size, cfg, path) → Proposer
    check: Callable[[Any, EvalConfig], None]  # (drafter settings, eval settings) → EvalError before any work


def _check_draft_lm(settings, cfg: EvalConfig) -> None:
    if cfg.tree == "dynamic":
        raise EvalError("eval.tree=dynamic is EAGLE-2's tree and needs an EAGLE drafter")
    if cfg.tree == "drafter":
        raise EvalError(
            "eval.tree=drafter needs a drafter that saves its tree (Medusa); for a draft LM give children per depth, "
            "e.g. [3, 2, 1]"
        )


def _build_draft_lm(drafter, *, target, vocab_size: int, cfg: EvalConfig, path) -> Proposer:
    _check_draft_lm(None, cfg)
    draft = drafter.model
    if draft.config.vocab_size < vocab_size:
        raise EvalError(
            f"{path} scores {draft.config.vocab_size} tokens but the target's tokenizer has {vocab_size}; "
            "a draft LM must share the target's vocabulary"
        )
    return DraftLMProposer(draft, vocab_size, tree=cfg.tree)


def _check_block_drafter(settings, cfg: EvalConfig) -> None:
    if cfg.tree is not None:
        raise EvalError(
            f"eval.tree={cfg.tree}: this drafter proposes one block (a chain) per forward, as vLLM serves it; "
            "set eval.tree=null"
        )


def _build_pard(drafter, *, target, vocab_size: int, cfg: EvalConfig, path) -> Proposer:
    _check_trained_block(drafter, cfg)
    if drafter.config.vocab_size < vocab_size:
        raise EvalError(
            f"{path} scores {drafter.config.vocab_size} tokens but the target's tokenizer has {vocab_size}; "
            "a PARD drafter must share the target's vocabulary"
        )
    return PardProposer(drafter.model, vocab_size, drafter.pard_token, drafter.max_draft_tokens)


def _refuse_dynamic_tree(cfg: EvalConfig) -> None:
    if cfg.tree == "dynamic":
        raise EvalError(
            "eval.tree=dynamic is EAGLE-2's tree; Medusa decodes chains, its saved tree (drafter) or children per depth"
        )


def _check_medusa(settings, cfg: EvalConfig) -> None:
    _refuse_dynamic_tree(cfg)
    heads = settings.num_heads
    if not cfg.tree and cfg.num_speculative_tokens > heads:
        raise EvalError(
            f"eval.num_speculative_tokens={cfg.num_speculative_tokens} exceeds drafter.num_heads={heads}: "
            "Medusa proposes one token per head"
        )
    if isinstance(cfg.tree, list) and len(cfg.tree) > heads:
        raise EvalError(f"eval.tree={cfg.tree} is {len(cfg.tree)} deep but drafter.num_heads={heads}")


def _build_medusa(heads, *, target, vocab_size: int, cfg: EvalConfig, path) -> Proposer:
    target_hidden = target.get_output_embeddings().weight.shape[1]
    if heads.hidden_size != target_hidden or heads.vocab_size < vocab_size:
        raise EvalError(
            f"{path} holds Medusa heads for hidden size {heads.hidden_size} and {heads.vocab_size} tokens; this target "
            f"has {target_hidden} and {vocab_size}: pair the heads with the target they were trained on"
        )
    _refuse_dynamic_tree(cfg)  # a chain longer than the heads is refused by the engine, naming its limit
    if cfg.tree == "drafter":
        if heads.tree is None:
            raise EvalError(
                f"{path} carries no medusa_tree.json; "
                "use eval.tree=null (chains) or children per depth such as [3, 2, 1]"
            )
        tree = heads.tree
    else:
        tree = full_tree(list(cfg.tree)) if cfg.tree else None
    if tree and max(map(len, tree)) > heads.num_heads:
        raise EvalError(
            f"eval.tree={cfg.tree} is {max(map(len, tree))} deep but the drafter has {heads.num_heads} Medusa heads"
        )
    return MedusaProposer(heads, vocab_size, tree, topk_candidates=cfg.acceptance == "typical")


def _check_eagle(settings, cfg: EvalConfig) -> None:
    if cfg.tree not in (None, "dynamic"):
        raise EvalError(
            f"eval.tree={cfg.tree} is not an EAGLE tree; "
            "use null (chains) or dynamic (EAGLE-2, shaped by eval.dynamic_tree)"
        )


def _build_eagle(drafter, *, target, vocab_size: int, cfg: EvalConfig, path) -> Proposer:
    _check_paired(drafter, target, vocab_size, path, "an EAGLE")
    _check_eagle(drafter, cfg)
    return EagleProposer(drafter, vocab_size, asdict(cfg.dynamic_tree) if cfg.tree == "dynamic" else None)


def _check_trained_block(settings, cfg: EvalConfig) -> None:
    """PARD and P-EAGLE: chains within the block trained. settings: the drafter config (preflight) or
    the loaded drafter; both carry max_draft_tokens (None: an export that does not say)."""
    _check_block_drafter(settings, cfg)
    if settings.max_draft_tokens is not None and cfg.num_speculative_tokens > settings.max_draft_tokens:
        raise EvalError(
            f"eval.num_speculative_tokens={cfg.num_speculative_tokens} exceeds drafter.max_draft_tokens="
            f"{settings.max_draft_tokens}: the drafter drafts at most the block it was trained for"
        )


def _check_paired(drafter, target, vocab_size: int, path, name: str) -> None:
    """A drafter reading target features must match the target's width and vocabulary."""
    if drafter.arch.target_hidden_size != target.config.hidden_size or drafter.arch.vocab_size < vocab_size:
        raise EvalError(
            f"{path} is {name} drafter for hidden size {drafter.arch.target_hidden_size} and "
            f"{drafter.arch.vocab_size} tokens; this target has {target.config.hidden_size} and {vocab_size}"
        )


def _build_peagle(drafter, *, target, vocab_size: int, cfg: EvalConfig, path) -> Proposer:
    _check_paired(drafter, target, vocab_size, path, "a P-EAGLE")
    _check_trained_block(drafter, cfg)
    return PEagleProposer(drafter, vocab_size)


def _check_dflash(settings, cfg: EvalConfig) -> None:
    """settings: the drafter config (preflight) or the loaded drafter (its arch carries block_size)."""
    _check_block_drafter(settings, cfg)
    block = getattr(settings, "arch", settings).block_size
    if cfg.num_speculative_tokens > block - 1:
        raise EvalError(
            f"eval.num_speculative_tokens={cfg.num_speculative_tokens} exceeds drafter.block_size − 1 = {block - 1}: "
            "DFlash drafts at most the mask slots of the block it was trained for"
        )


def _build_dflash(drafter, *, target, vocab_size: int, cfg: EvalConfig, path) -> Proposer:
    _check_paired(drafter, target, vocab_size, path, "a DFlash")
    _check_dflash(drafter, cfg)
    return DFlashProposer(drafter, vocab_size)


def _check_ngram(settings, cfg: EvalConfig) -> None:
    if cfg.tree not in (None, "drafter"):
        raise EvalError(
            f"eval.tree={cfg.tree}: prompt lookup drafts chains (null) or a tree of drafter.num_matches matches "
            "(drafter)"
        )


def _build_ngram(drafter, *, target, vocab_size: int, cfg: EvalConfig, path) -> Proposer:
    _check_ngram(drafter, cfg)
    return NgramProposer(
        prompt_lookup_min=drafter.prompt_lookup_min,
        prompt_lookup_max=drafter.prompt_lookup_max,
        vocab_size=vocab_size,
        num_matches=drafter.num_matches if cfg.tree == "drafter" else 1,
    )


def _check_suffix(settings, cfg: EvalConfig) -> None:
    if cfg.tree not in (None, "drafter"):
        raise EvalError(
            f"eval.tree={cfg.tree}: suffix decoding drafts chains as vLLM serves them (null) or arctic-inference's "
            "best-first tree of at most γ nodes (drafter)"
        )


def _build_suffix(drafter, *, target, vocab_size: int, cfg: EvalConfig, path) -> Proposer:
    _check_suffix(drafter, cfg)
    return SuffixProposer(vocab_size=vocab_size, **drafter.settings(), use_tree_spec=cfg.tree == "drafter")


def _check_lookahead(settings, cfg: EvalConfig) -> None:
    if cfg.tree is not None:
        raise EvalError(
            f"eval.tree={cfg.tree}: lookahead decoding builds its own tree from drafter.window_size, ngram_size "
            "and max_verify_ngrams; set eval.tree=null"
        )


def _build_lookahead(drafter, *, target, vocab_size: int, cfg: EvalConfig, path) -> Proposer:
    _check_lookahead(drafter, cfg)
    return LookaheadProposer(
        window_size=drafter.window_size,
        ngram_size=drafter.ngram_size,
        max_verify_ngrams=drafter.max_verify_ngrams,
        pool_from_prompt=drafter.pool_from_prompt,
        vocab_size=vocab_size,
    )


PROPOSERS: dict[str, ProposerEntry] = {
    "draft_lm": ProposerEntry(_build_draft_lm, _check_draft_lm),
    "pard": ProposerEntry(_build_pard, _check_trained_block),
    "medusa": ProposerEntry(_build_medusa, _check_medusa),
    "eagle3": ProposerEntry(_build_eagle, _check_eagle),
    "eagle1": ProposerEntry(_build_eagle, _check_eagle),
    "peagle": ProposerEntry(_build_peagle, _check_trained_block),
    "ngram": ProposerEntry(_build_ngram, _check_ngram),
    "layer_skip": ProposerEntry(_build_draft_lm, _check_draft_lm),  # the export is a draft LM
    "lookahead": ProposerEntry(_build_lookahead, _check_lookahead),
    "suffix": ProposerEntry(_build_suffix, _check_suffix),
    "dflash": ProposerEntry(_build_dflash, _check_dflash),
}


def proposer_entry(kind: str) -> ProposerEntry:
    try:
        return PROPOSERS[kind]
    except KeyError:
        raise EvalError(
            f"drafter.kind={kind!r} has no entry in the proposer table (eval/proposers.py PROPOSERS); "
            f"known kinds: {sorted(PROPOSERS)}"
        ) from None


def check_eval_settings(kind: str, settings, cfg: EvalConfig) -> None:
    """Eval settings against the drafter's, before any stage runs."""
    check_settings(cfg)
    proposer_entry(kind).check(settings, cfg)


def load_proposer(
    path: str | Path, target, vocab_size: int, cfg: EvalConfig, device: torch.device
) -> tuple[Proposer, str]:
    """The proposer for the export at `path` (checked against `target`), shaped by cfg.tree; returns it and the kind."""
    check_settings(cfg)
    family = family_of_export(path)
    entry = proposer_entry(family.kind)
    drafter = family.load(Path(path), target)
    if isinstance(drafter, torch.nn.Module):
        drafter = drafter.eval().to(device)
    proposer = entry.build(drafter, target=target, vocab_size=vocab_size, cfg=cfg, path=path)
    if not _reads(family.signals, proposer.target_layer_ids):
        raise EvalError(
            f"the {family.kind} proposer reads target layers {proposer.target_layer_ids}, but the family table "
            f"declares signals={family.signals!r}; fix heads/families.py or eval/proposers.py"
        )
    return proposer, family.kind


def _reads(signals: str, layer_ids: tuple[int, ...]) -> bool:
    """Whether a proposer's target_layer_ids are what its family declares (heads.families.SIGNALS)."""
    if signals == "tokens":
        return layer_ids == ()
    if signals == "final_normed":
        return tuple(layer_ids) == (FINAL_NORMED,)
    return len(layer_ids) > 0 and all(i >= 0 for i in layer_ids)
