"""DFlash drafters fitted for a few steps on the target's own text (test helpers)."""

import torch

from heads.config import DFlashConfig
from heads.dflash import DFlashDrafter
from tests.eval.fitting import fit, sampled_text
from train.setups.block import BlockDenoising

LAYER_IDS = [1, 2]  # the micro target has 2 layers: entering layer 1, and its last output before the final norm
MASK = 3  # a token id of the micro vocabulary the mask slots read


def denoising_objective(target, block_size: int = 4, anchors: int = 16, layer_ids=LAYER_IDS) -> BlockDenoising:
    return BlockDenoising(
        target,
        list(layer_ids),
        block_size=block_size,
        mask_token_id=MASK,
        anchors_per_sequence=anchors,
        loss="fkl",
        vocab_size=target.config.vocab_size,
    )


def fit_dflash(
    target, layers: int = 1, block_size: int = 4, steps: int = 60, seed: int = 0, layer_ids: tuple = LAYER_IDS
) -> DFlashDrafter:
    batch = sampled_text(target, seed)
    cfg = DFlashConfig(layer_ids=list(layer_ids), block_size=block_size, num_hidden_layers=layers, mask_token_id=MASK)
    drafter = DFlashDrafter.from_target(cfg, target, MASK)
    return fit(drafter, denoising_objective(target, block_size, layer_ids=layer_ids), batch, steps)


def fit_dspark(target, steps: int = 60, seed: int = 0, layer_ids: tuple = LAYER_IDS, **settings):
    """A DSpark drafter (block 4: 4 drafts per forward) fitted as DeepSpec trains it (confidence head included)."""
    from heads.config import DSparkConfig
    from heads.dspark import DSparkDrafter
    from train.config import TrainerConfig
    from train.setups.dspark import DSparkDenoising

    torch.manual_seed(seed)
    cfg = DSparkConfig(
        layer_ids=list(layer_ids), block_size=4, mask_token_id=MASK, anchors_per_sequence=16, markov_rank=16, **settings
    )
    drafter = DSparkDrafter.from_target(cfg, target, MASK)
    objective = DSparkDenoising(
        target,
        list(layer_ids),
        settings=cfg,
        mask_token_id=MASK,
        loss="tvd",
        vocab_size=target.config.vocab_size,
        trainer=TrainerConfig(),
    )
    return fit(drafter, objective, sampled_text(target, seed), steps)


def fit_dflash2(target, steps: int = 60, seed: int = 0, layer_ids: tuple = LAYER_IDS, **settings):
    """A DFlash2 drafter (block 4) fitted with DFlash's loss plus the selector's cross-entropy."""
    from heads.config import DFlash2Config
    from heads.dflash2 import DFlash2Drafter
    from train.setups.dflash2 import DFlash2Denoising

    torch.manual_seed(seed)
    cfg = DFlash2Config(
        layer_ids=list(layer_ids),
        block_size=4,
        mask_token_id=MASK,
        selector_rank=16,
        selector_top_k=4,
        conv_group_size=8,
        **settings,
    )
    drafter = DFlash2Drafter.from_target(cfg, target, MASK)
    objective = DFlash2Denoising(
        target,
        list(layer_ids),
        block_size=4,
        mask_token_id=MASK,
        anchors_per_sequence=16,
        loss="fkl",
        vocab_size=target.config.vocab_size,
        selector_weight=cfg.selector_weight,
    )
    return fit(drafter, objective, sampled_text(target, seed), steps)
