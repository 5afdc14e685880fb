"""Medusa heads fitted for a few steps on the target's own text (test helper)."""

from heads.medusa import MedusaHeads
from tests.eval.fitting import fit, sampled_text
from train.setups.medusa import MedusaDistillation


def fit_heads(target, cfg, steps: int = 60, seed: int = 0) -> MedusaHeads:
    batch = sampled_text(target, seed)
    heads = MedusaHeads.from_target(cfg, target)
    return fit(heads, MedusaDistillation(target, cfg.num_heads, "ce", target.config.vocab_size), batch, steps)
