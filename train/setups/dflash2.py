"""DFlash2: DFlash's objective for the block (its convolutions train through it) plus the candidate selector's
cross-entropy, as speculators trains it (docs/user_guide/algorithms/dflash2.md)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from heads.dflash2 import DFlash2Drafter
from train.losses import KD_LOSSES
from train.setups.base import BLOCK_DRAFTS_ONLY, TrainingSetup
from train.setups.block import BlockDenoising, block_activations, block_finish, meta_block, prepare_block


class DFlash2Denoising(BlockDenoising):
    """batch → (loss, metrics) for a DFlash2 drafter: DFlash's loss on the mask slots, plus selector_weight ×
    a k-way cross-entropy per mask slot over its unary top-k scored after the true previous token, towards
    the true next token (which replaces the weakest candidate where the top-k misses it), weighted as the
    slots are. Logged beside DFlash's metrics: `sel_acc`, how often the selector's best candidate is the
    true token."""

    def __init__(self, *args, selector_weight: float, **kwargs):
        super().__init__(*args, **kwargs)
        self.selector_weight = selector_weight
        self.progress_keys = ["loss", "sim_tau", "acc1", "sel_acc"]

    def model_inputs(self, blocks, input_ids) -> tuple:
        T = input_ids.shape[1]
        prev = input_ids.gather(1, (blocks.positions - 1).clamp(0, T - 1))  # the true token before each slot
        gold = input_ids.gather(1, blocks.positions.clamp(max=T - 1))  # the true token at each slot
        return prev, gold

    def extra_terms(self, outputs, pick, student, teacher, weight):
        _, scores, target = outputs
        scores, target = pick(scores).float(), pick(target)
        ce = F.cross_entropy(scores, target, reduction="none")
        with torch.no_grad():
            metrics = {"sel_acc": (scores.argmax(-1) == target).float().mean()}
        return self.selector_weight * (weight * ce).sum(), metrics


SETUP = TrainingSetup(
    prepare=prepare_block(DFlash2Drafter, DFlash2Denoising, selector_weight=True),
    meta_drafter=meta_block(DFlash2Drafter),
    activations=block_activations,
    finish=block_finish,
    losses=KD_LOSSES,
    off_policy_only=BLOCK_DRAFTS_ONLY,
)
