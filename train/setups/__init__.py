"""The training-setup table: how each trainable family is built, trained and finished.

A row gives the objective the shared loop optimises (batch → loss and metrics, via `prepare`),
the steps after training (Medusa's tree calibration, EAGLE-3's best-checkpoint pick), and the
planner's hooks (the drafter on the meta device, its activation estimate). Each family's row and
objective live in its own module here (train/setups/<kind>.py); what they share is in base.py.
Training-free families have no row: the pipeline skips their train stage (heads.families: trainable=False).
"""

from __future__ import annotations

from train.errors import PipelineError
from train.setups import dflash, dflash2, draft_lm, dspark, eagle1, eagle3, layer_skip, medusa, pard, peagle
from train.setups.base import TrainingSetup

SETUPS: dict[str, TrainingSetup] = {
    "draft_lm": draft_lm.SETUP,
    "pard": pard.SETUP,
    "medusa": medusa.SETUP,
    "eagle3": eagle3.SETUP,
    "peagle": peagle.SETUP,
    "eagle1": eagle1.SETUP,
    "dflash": dflash.SETUP,
    "dspark": dspark.SETUP,
    "dflash2": dflash2.SETUP,
    "layer_skip": layer_skip.SETUP,
}


def training_setup(kind: str) -> TrainingSetup:
    """The row of a trainable kind; a missing row is a wiring bug, named with the file to fix."""
    try:
        return SETUPS[kind]
    except KeyError:
        raise PipelineError(
            f"drafter.kind={kind!r} is trainable but has no entry in the training-setup table "
            "(train/setups/__init__.py SETUPS); "
            f"known kinds: {sorted(SETUPS)}"
        ) from None
