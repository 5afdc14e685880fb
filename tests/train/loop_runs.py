"""Training in tests runs the real accelerate loop with a checkpoint directory, as the train stage
does, so resume tests kill and restart exactly what users run."""

from pathlib import Path

from train.config import TrainerConfig
from train.distributed import build_accelerator
from train.loop import train_loop


def run_loop(tmp: Path, cfg: TrainerConfig, drafter, objective, dataset, pad_token_id: int, *, stop_after=None):
    """Train in `tmp` (resuming from `tmp/ckpt` when `cfg.resume`); the drafter's weights, the log text and the
    metrics the loop returned."""
    acc = build_accelerator(cfg, tmp)
    metrics, _ = train_loop(
        acc,
        cfg,
        drafter,
        objective,
        dataset,
        pad_token_id=pad_token_id,
        ckpt_dir=tmp / "ckpt",
        config_dict={"max_steps": cfg.max_steps},
        stop_after=stop_after,
    )
    return acc.unwrap_model(drafter).state_dict(), (tmp / "ckpt" / "log.jsonl").read_text(), metrics
