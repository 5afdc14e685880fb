"""The training-setup table: how each trainable family is built, trained and finished.

A row gives the objective the shared loop optimises (batch → loss and metrics, via `prepare`),
the steps after training (Medusa's tree calibration, EAGLE-3's best-checkpoint pick), and the
planner's hooks (the drafter on the meta device, its activation estimate). Training-free
families have no row: the pipeline skips their train stage (heads.families: trainable=False).
"""

from __future__ import annotations

from train import feature_setups, lm_setups
from train.errors import PipelineError
from train.setup_base import TrainingSetup

SETUPS: dict[str, TrainingSetup] = {
    "draft_lm": lm_setups.DRAFT_LM,
    "pard": lm_setups.PARD,
    "medusa": feature_setups.MEDUSA,
    "eagle3": feature_setups.EAGLE3,
    "peagle": feature_setups.PEAGLE,
    "eagle1": feature_setups.EAGLE1,
    "dflash": feature_setups.DFLASH,
    "layer_skip": lm_setups.LAYER_SKIP,
}


def training_setup(kind: str) -> TrainingSetup:
    try:
        return SETUPS[kind]
    except KeyError:
        raise PipelineError(
            f"drafter.kind={kind!r} is trainable but has no entry in the training-setup table "
            "(train/setups.py SETUPS); "
            f"known kinds: {sorted(SETUPS)}"
        ) from None
