"""The one training loop every drafter family shares (accelerate: 1 CPU to many GPUs).

forward → loss → backward → step → log → save, in one place; the objective supplies the loss.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import torch
from accelerate import Accelerator
from accelerate.utils import set_seed
from safetensors.torch import load_file, save_file
from tqdm.auto import tqdm
from transformers import get_cosine_schedule_with_warmup

from distill.shards import atomic_write_text
from train.checkpoint import load_latest, save_checkpoint
from train.config import TrainerConfig
from train.data import BatchOrder


def mixed_precision(setting: str) -> str:
    """`auto` → bf16 on a GPU that supports it, otherwise full precision."""
    if setting != "auto":
        return setting
    return "bf16" if torch.cuda.is_available() and torch.cuda.is_bf16_supported() else "no"


def build_accelerator(cfg: TrainerConfig, project_dir: Path) -> Accelerator:
    return Accelerator(
        mixed_precision=mixed_precision(cfg.mixed_precision),
        gradient_accumulation_steps=cfg.grad_accum,
        log_with=list(cfg.log_with) or None,
        project_dir=str(project_dir),
    )


def train_loop(accelerator: Accelerator, cfg: TrainerConfig, model: torch.nn.Module, objective, dataset, pad_token_id: int, ckpt_dir: Path, config_dict: dict, stop_after: int | None = None, select=None) -> dict:
    """Train `model` with `objective` for cfg.max_steps optimizer steps; return final metrics.

    Resumes from the latest checkpoint in ckpt_dir when cfg.resume, replaying the same batches an
    uninterrupted run would see, so both end with the same weights.

    Args:
        stop_after: return after this optimizer step, as a killed run would (tests use it).
        select: optional model → score (higher is better), computed at every checkpoint; the
            best-scoring weights are kept in ckpt_dir/best.safetensors (see best_weights).
    """
    set_seed(cfg.seed)
    order = BatchOrder(dataset, cfg.batch_size, cfg.max_seq_len, pad_token_id, cfg.seed, accelerator.process_index, accelerator.num_processes)
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay, betas=(0.9, 0.95))
    scheduler = get_cosine_schedule_with_warmup(optimizer, cfg.warmup_steps, cfg.max_steps)
    # prepare() wraps the model (DDP/FSDP/DeepSpeed) and places it; the frozen target stays outside.
    model, optimizer, scheduler = accelerator.prepare(model, optimizer, scheduler)
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    start = load_latest(accelerator, ckpt_dir, config_dict) if cfg.resume else 0
    if accelerator.log_with:
        accelerator.init_trackers("drafthub", config=config_dict)

    model.train()
    metrics: dict[str, float] = {}
    bar = tqdm(range(start, cfg.max_steps), initial=start, total=cfg.max_steps, desc="train", disable=not accelerator.is_main_process)
    for step in bar:
        for micro in range(cfg.grad_accum):
            batch = {k: v.to(accelerator.device) for k, v in order.batch(step * cfg.grad_accum + micro).items()}
            with accelerator.accumulate(model):
                with accelerator.autocast():
                    loss, step_metrics = objective(model, batch)
                accelerator.backward(loss)
                if accelerator.sync_gradients:
                    accelerator.clip_grad_norm_(params, cfg.max_grad_norm)
                optimizer.step()
                scheduler.step()
                optimizer.zero_grad(set_to_none=True)
        done = step + 1
        if done % cfg.log_every == 0 or done == cfg.max_steps:
            # host sync: only every log_every steps
            metrics = {k: float(v) for k, v in step_metrics.items()} | {"lr": scheduler.get_last_lr()[0]}
            shown = getattr(objective, "progress_keys", None) or list(metrics)  # the objective may pick a few for the bar
            bar.set_postfix({k: f"{metrics[k]:.4g}" for k in shown if k in metrics})
            accelerator.log(metrics, step=done)
        if done % cfg.save_every == 0 or done == cfg.max_steps:
            save_checkpoint(accelerator, ckpt_dir, done, config_dict, cfg.keep_last)
            if select is not None:
                keep_best(accelerator, model, select, ckpt_dir, done)
        if stop_after is not None and done >= stop_after:
            return metrics
    if not metrics and start >= cfg.max_steps:
        metrics = {"loss": math.nan}
    accelerator.end_training()
    return metrics


BEST_WEIGHTS, BEST_META = "best.safetensors", "best.json"


def keep_best(accelerator: Accelerator, model: torch.nn.Module, select, ckpt_dir: Path, step: int) -> None:
    """Score the current weights; if they beat the best so far, write them (atomically) as the best."""
    model.eval()
    with torch.no_grad():
        score = float(select(accelerator.unwrap_model(model)))  # host sync: once per checkpoint
    model.train()
    meta_file = Path(ckpt_dir) / BEST_META
    best = json.loads(meta_file.read_text()) if meta_file.exists() else None
    if accelerator.is_main_process and (best is None or score > best["score"]):
        state = {k: v.detach().contiguous().cpu() for k, v in accelerator.unwrap_model(model).state_dict().items()}
        tmp = Path(ckpt_dir) / f".tmp-{BEST_WEIGHTS}"
        save_file(state, str(tmp))
        os.replace(tmp, Path(ckpt_dir) / BEST_WEIGHTS)
        atomic_write_text(meta_file, json.dumps({"step": step, "score": score}))
    accelerator.wait_for_everyone()


def best_weights(ckpt_dir: Path) -> tuple[dict, dict] | None:
    """(state dict, {"step", "score"}) of the best checkpoint kept by keep_best, or None."""
    meta_file = Path(ckpt_dir) / BEST_META
    if not meta_file.exists():
        return None
    return load_file(str(Path(ckpt_dir) / BEST_WEIGHTS)), json.loads(meta_file.read_text())
