"""A run that extends another run's training: more optimizer steps, more distilled answers, or both.

trainer.continue_from names a finished run directory of the same drafter. Before any stage, its saved
settings are compared with this run's: only trainer.max_steps and data.max_prompts may differ, and only
upwards. The train stage then starts from one of its checkpoints instead of step 0:
- wsd: the checkpoint kept where its decay began. Until there, both runs had the same learning rates and
  batches, so with the same data the continued run ends with the weights of one uninterrupted run.
- cosine: its last checkpoint, where the rate had decayed to 0; the rate rises again to the longer cosine's
  (a warm restart, said in one line: not the uninterrupted run's weights).
The distill stage keeps the earlier run's answers and distils only the new prompts (distill/stage/extend.py).
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path

from omegaconf import OmegaConf

from distill.stage.extend import extendable, seed_shards
from distill.stage.manifest import read_manifest
from train.checkpoint import BEST_META, BEST_WEIGHTS, META, checkpoint_dirs
from train.config import RunConfig, TrainerConfig
from train.errors import PipelineError
from train.loop import TRAIN_LOG
from train.schedule import shared_until
from train.stages.run_dir import RunPaths, adopt_dataset, changed_training, link_or_copy

# the settings a continuation may raise; every other output setting must be the earlier run's
EXTENDED = ("trainer.max_steps", "data.max_prompts", "trainer.continue_from")


@dataclass(frozen=True)
class Continuation:
    source: RunPaths  # the earlier run
    checkpoint: Path  # its checkpoint this run starts from
    step: int
    exact: bool  # the weights of one uninterrupted run (wsd, same data)
    more_data: bool

    def describe(self) -> str:
        how = "exactly as one uninterrupted run" if self.exact else "a warm restart of its learning rate"
        if self.more_data:
            how = "on the earlier answers and the new ones"
        return f"continuing {self.source.root} from its step {self.step} ({how})"


def plan_continuation(cfg: RunConfig, cfg_dict: dict) -> Continuation | None:
    """The checkpoint trainer.continue_from starts from, after checking its settings against this run's (one line
    naming what differs); reads only the saved config and the checkpoint list, so it runs before any stage."""
    if not cfg.trainer.continue_from:
        return None
    source = RunPaths(Path(cfg.trainer.continue_from))
    prefix = f"trainer.continue_from={source.root}"
    if not source.config.exists() or not checkpoint_dirs(source.checkpoints):
        raise PipelineError(
            f"{prefix} holds no training run with checkpoints; give the run directory of the training to continue "
            "(runs/<recipe>/<timestamp>, with .hydra/config.yaml and checkpoints/)"
        )
    saved = OmegaConf.to_container(OmegaConf.load(source.config))
    saved["trainer"] = asdict(TrainerConfig()) | saved["trainer"]  # settings added since it ran: their defaults
    changed = [k for k in changed_training(saved, cfg_dict) if k not in EXTENDED]
    if changed or (saved.get("drafter") or {}).get("kind") != cfg.drafter.kind:
        raise PipelineError(
            f"{prefix} was trained with other settings ({', '.join(changed) or 'drafter.kind'}); a continuation "
            "changes only trainer.max_steps and data.max_prompts: restore the others, or start a new run"
        )
    before, after = saved["trainer"]["max_steps"], cfg.trainer.max_steps
    prompts_before, prompts_after = _prompts(saved["data"]["max_prompts"]), _prompts(cfg.data.max_prompts)
    if after < before or prompts_after < prompts_before or (after, prompts_after) == (before, prompts_before):
        raise PipelineError(
            f"{prefix} trained {before} steps on data.max_prompts={saved['data']['max_prompts']}; a continuation "
            f"raises trainer.max_steps above {before}, data.max_prompts above it, or both"
        )
    more_data = prompts_after > prompts_before
    if more_data and (why := extendable(cfg.data)):
        raise PipelineError(f"{prefix} with more data.max_prompts: {why}; continue with more steps only")
    trainer = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(TrainerConfig), saved["trainer"]))
    return _start(source, trainer, more_data)


def _prompts(max_prompts: int) -> float:
    return max_prompts or float("inf")  # 0: every prompt


def _start(source: RunPaths, trainer: TrainerConfig, more_data: bool) -> Continuation:
    """wsd: the latest checkpoint up to the decay's start; cosine: the final one (its own max_steps)."""
    limit = shared_until(trainer) if trainer.schedule == "wsd" else trainer.max_steps
    steps = {int(json.loads((d / META).read_text())["step"]): d for d in checkpoint_dirs(source.checkpoints)}
    usable = [s for s in steps if s <= limit] if trainer.schedule == "wsd" else [s for s in steps if s == limit]
    if not usable:
        raise PipelineError(
            f"trainer.continue_from={source.root} has no checkpoint to continue from (step {limit} is gone: "
            f"it holds steps {sorted(steps)}); continue from a run that finished its training"
        )
    step = max(usable)
    return Continuation(source, steps[step], step, trainer.schedule == "wsd" and not more_data, more_data)


def seed_checkpoints(plan: Continuation, ckpt_dir: Path, config_dict: dict) -> None:
    """Put the starting checkpoint into this run's (empty) checkpoints as its latest: the loop resumes from it.

    Files are hard-linked where the filesystem allows (the earlier run stays as it was: checkpoints are never
    written in place). The earlier run's log up to that step, and its best checkpoint when scored by then, come
    along, so the loss curve and EAGLE-3's pick span both runs."""
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    if checkpoint_dirs(ckpt_dir):
        return  # a continuation that was interrupted: it resumes from its own checkpoints
    staging = ckpt_dir / f".tmp-step-{plan.step:07d}"
    shutil.rmtree(staging, ignore_errors=True)
    shutil.copytree(plan.checkpoint, staging, copy_function=link_or_copy)
    meta = {"step": plan.step, "config": config_dict, "continued_from": str(plan.checkpoint)}
    (staging / META).unlink()
    (staging / META).write_text(json.dumps(meta, indent=2))
    log = plan.source.checkpoints / TRAIN_LOG
    if log.exists():
        rows = [line for line in log.read_text().splitlines() if json.loads(line)["step"] <= plan.step]
        (ckpt_dir / TRAIN_LOG).write_text("".join(row + "\n" for row in rows))
    best = plan.source.checkpoints / BEST_META
    if best.exists() and json.loads(best.read_text())["step"] <= plan.step:
        link_or_copy(plan.source.checkpoints / BEST_WEIGHTS, ckpt_dir / BEST_WEIGHTS)
        link_or_copy(best, ckpt_dir / BEST_META)
    os.replace(staging, ckpt_dir / plan.checkpoint.name)


def continued_dataset(cfg: RunConfig, data: Path, digest: str) -> bool:
    """Start this run's (empty) data directory from the continued run's answers: all of them when the data settings
    are the same, else its full shards (distill/stage/extend.py), the rest left to distil. Says which in one line;
    False when this run continues none or none of its answers can be kept."""
    if not cfg.trainer.continue_from:
        return False
    source = RunPaths(Path(cfg.trainer.continue_from)).data
    manifest = read_manifest(source)
    if manifest and manifest["config_hash"] == digest:
        adopt_dataset(source, data)
        print(f"[distill] reusing the answers of {source}, the run this one continues (hash {digest})")
        return True
    kept = seed_shards(source, data, cfg.target, cfg.data)
    if kept:
        print(f"[distill] keeping the {kept} answers of {source}, the run this one continues; distilling the rest")
    return kept > 0
