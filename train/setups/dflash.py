"""DFlash (block diffusion): a drafter on the target's fused features that denoises a block of masks
in one forward, trained on random anchor blocks of the target's own samples."""

from __future__ import annotations

from heads.dflash import DFlashDrafter
from train.losses import KD_LOSSES
from train.setups.base import BLOCK_DRAFTS_ONLY, TrainingSetup
from train.setups.block import BlockDenoising, block_activations, block_finish, meta_block, prepare_block

SETUP = TrainingSetup(
    prepare=prepare_block(DFlashDrafter, BlockDenoising),
    meta_drafter=meta_block(DFlashDrafter),
    activations=block_activations,
    finish=block_finish,
    losses=KD_LOSSES,
    off_policy_only=BLOCK_DRAFTS_ONLY,
)
