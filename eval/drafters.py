"""Load a saved drafter (any family) and wrap it in the proposer the eval settings ask for.

The directory's own config says what it is: `model_type: medusa` is a Medusa checkpoint (vLLM
format); anything else is an HF causal LM used as an independent draft model.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import torch

from eval.config import EvalConfig
from eval.errors import EvalError
from eval.eagle_proposer import EagleProposer
from eval.medusa_proposer import MedusaProposer
from eval.proposer import DraftLMProposer, Proposer
from eval.run import check_settings
from heads.draft_lm import DraftLM
from heads.eagle import Eagle3Drafter
from heads.eagle1 import Eagle1Drafter
from heads.medusa import MedusaHeads
from heads.medusa_tree import full_tree


def drafter_kind(path: str | Path) -> str:
    """`eagle3`, `eagle1`, `medusa` or `draft_lm`, from the checkpoint's config.json (a file any trainer
    may have written, so absent keys are read as absent, not defaulted)."""
    config = Path(path) / "config.json"
    if not config.exists():
        raise EvalError(f"{path} is not a saved drafter (no config.json)")
    config = json.loads(config.read_text())
    if config.get("speculators_model_type") == "eagle3":
        return "eagle3"
    if config.get("drafthub_kind") == "eagle1":
        return "eagle1"
    return "medusa" if config.get("model_type") == "medusa" else "draft_lm"


def load_proposer(path: str | Path, target, vocab_size: int, cfg: EvalConfig, device: torch.device) -> tuple[Proposer, str]:
    """The proposer for the drafter saved at `path` (checked against `target`), shaped by cfg.tree; returns it and the kind."""
    check_settings(cfg)
    kind = drafter_kind(path)
    if kind == "medusa":
        heads = MedusaHeads.from_pretrained(path).eval().to(device)
        target_hidden = target.get_output_embeddings().weight.shape[1]
        if heads.hidden_size != target_hidden or heads.vocab_size < vocab_size:
            raise EvalError(f"{path} holds Medusa heads for hidden size {heads.hidden_size} and {heads.vocab_size} tokens; this target has {target_hidden} and {vocab_size}: pair the heads with the target they were trained on")
        if cfg.tree == "dynamic":
            raise EvalError("eval.tree=dynamic is EAGLE-2's tree; Medusa decodes chains, its saved tree (drafter) or children per depth")
        if cfg.tree == "drafter":
            if heads.tree is None:
                raise EvalError(f"{path} carries no medusa_tree.json; use eval.tree=null (chains) or children per depth such as [3, 2, 1]")
            tree = heads.tree
        else:
            tree = full_tree(list(cfg.tree)) if cfg.tree else None
        if tree and max(map(len, tree)) > heads.num_heads:
            raise EvalError(f"eval.tree={cfg.tree} is {max(map(len, tree))} deep but the drafter has {heads.num_heads} Medusa heads")
        return MedusaProposer(heads, vocab_size, tree, topk_candidates=cfg.acceptance == "typical"), kind
    if kind in ("eagle3", "eagle1"):
        if kind == "eagle3":
            drafter = Eagle3Drafter.from_pretrained(path).eval().to(device)
        else:
            drafter = Eagle1Drafter.from_pretrained(path, target.get_output_embeddings().weight).eval().to(device)
        if drafter.arch.target_hidden_size != target.config.hidden_size or drafter.arch.vocab_size < vocab_size:
            raise EvalError(f"{path} is an EAGLE drafter for hidden size {drafter.arch.target_hidden_size} and {drafter.arch.vocab_size} tokens; this target has {target.config.hidden_size} and {vocab_size}")
        if cfg.tree not in (None, "dynamic"):
            raise EvalError(f"eval.tree={cfg.tree} is not an EAGLE tree; use null (chains) or dynamic (EAGLE-2, shaped by eval.dynamic_tree)")
        tree = asdict(cfg.dynamic_tree) if cfg.tree == "dynamic" else None
        return EagleProposer(drafter, vocab_size, tree), kind
    if cfg.tree == "dynamic":
        raise EvalError("eval.tree=dynamic is EAGLE-2's tree and needs an EAGLE drafter")
    if cfg.tree == "drafter":
        raise EvalError("eval.tree=drafter needs a drafter that saves its tree (Medusa); for a draft LM give children per depth, e.g. [3, 2, 1]")
    draft = DraftLM.from_pretrained(path).model.eval().to(device)
    if draft.config.vocab_size < vocab_size:
        raise EvalError(f"{path} scores {draft.config.vocab_size} tokens but the target's tokenizer has {vocab_size}; a draft LM must share the target's vocabulary")
    return DraftLMProposer(draft, vocab_size, tree=cfg.tree), kind
