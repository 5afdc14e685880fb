"""What every stage of `python -m train` receives: the run's settings, paths, device and hashes."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from train.config import RunConfig
from train.stages.run_dir import RunPaths


@dataclass(frozen=True)
class Run:
    cfg: RunConfig
    cfg_dict: dict  # the resolved config as saved in .hydra/config.yaml
    paths: RunPaths
    device: torch.device
    stage_hash: str  # of everything that determines this stage's output (train/pipeline.py chains them)
    hashes: dict  # every stage's hash, for checks against upstream outputs
