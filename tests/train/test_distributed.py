"""train/distributed.py: the Accelerator of a run, built again in the same process for the next run."""

from __future__ import annotations

from train.config import TrainerConfig
from train.distributed import build_accelerator


def test_one_process_trains_runs_of_different_precisions_in_turn(tmp_path):
    """A bake-off trains its contenders in one process; on a CPU with native bf16 a `native` recipe gets bf16 where
    the next says no. accelerate refuses a second precision in one process unless its state starts afresh."""
    for precision in ("bf16", "no", "bf16"):
        accelerator = build_accelerator(TrainerConfig(mixed_precision=precision), tmp_path / precision)
        assert accelerator.mixed_precision == precision
