"""Load a saved drafter (any family) and wrap it in the proposer the eval settings ask for.

The directory's own config says what it is: `model_type: medusa` is a Medusa checkpoint (vLLM
format); anything else is an HF causal LM used as an independent draft model.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from eval.config import EvalConfig
from eval.errors import EvalError
from eval.medusa_proposer import MedusaProposer
from eval.proposer import DraftLMProposer, Proposer
from eval.run import check_settings
from heads.draft_lm import DraftLM
from heads.medusa import MedusaHeads
from heads.medusa_tree import full_tree


def drafter_kind(path: str | Path) -> str:
    """`medusa` or `draft_lm`, from the checkpoint's config.json."""
    config = Path(path) / "config.json"
    if not config.exists():
        raise EvalError(f"{path} is not a saved drafter (no config.json)")
    return "medusa" if json.loads(config.read_text()).get("model_type") == "medusa" else "draft_lm"


def load_proposer(path: str | Path, target, vocab_size: int, cfg: EvalConfig, device: torch.device) -> tuple[Proposer, str]:
    """The proposer for the drafter saved at `path` (checked against `target`), shaped by cfg.tree; returns it and the kind."""
    check_settings(cfg)
    kind = drafter_kind(path)
    if kind == "medusa":
        heads = MedusaHeads.from_pretrained(path).eval().to(device)
        target_hidden = target.get_output_embeddings().weight.shape[1]
        if heads.hidden_size != target_hidden or heads.vocab_size < vocab_size:
            raise EvalError(f"{path} holds Medusa heads for hidden size {heads.hidden_size} and {heads.vocab_size} tokens; this target has {target_hidden} and {vocab_size}: pair the heads with the target they were trained on")
        if cfg.tree == "drafter":
            if heads.tree is None:
                raise EvalError(f"{path} carries no medusa_tree.json; use eval.tree=null (chains) or children per depth such as [3, 2, 1]")
            tree = heads.tree
        else:
            tree = full_tree(list(cfg.tree)) if cfg.tree else None
        if tree and max(map(len, tree)) > heads.num_heads:
            raise EvalError(f"eval.tree={cfg.tree} is {max(map(len, tree))} deep but the drafter has {heads.num_heads} Medusa heads")
        return MedusaProposer(heads, vocab_size, tree, topk_candidates=cfg.acceptance == "typical"), kind
    if cfg.tree == "drafter":
        raise EvalError("eval.tree=drafter needs a drafter that saves its tree (Medusa); for a draft LM give children per depth, e.g. [3, 2, 1]")
    draft = DraftLM.from_pretrained(path).model.eval().to(device)
    if draft.config.vocab_size < vocab_size:
        raise EvalError(f"{path} scores {draft.config.vocab_size} tokens but the target's tokenizer has {vocab_size}; a draft LM must share the target's vocabulary")
    return DraftLMProposer(draft, vocab_size, tree=cfg.tree), kind
