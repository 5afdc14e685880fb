"""DFlash drafters fitted for a few steps on the target's own text (test helpers)."""

from heads.config import DFlashConfig
from heads.dflash import DFlashDrafter
from tests.eval.fitting import fit, sampled_text
from train.setups.dflash import DFlashDenoising

LAYER_IDS = [1, 2]  # the micro target has 2 layers: entering layer 1, and its last output before the final norm
MASK = 3  # a token id of the micro vocabulary the mask slots read


def denoising_objective(target, block_size: int = 4, anchors: int = 16, layer_ids=LAYER_IDS) -> DFlashDenoising:
    return DFlashDenoising(
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
