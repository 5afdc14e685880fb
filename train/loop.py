"""The one training loop every drafter family shares (accelerate: 1 CPU to many GPUs).

forward → loss → backward → step → log → save, in one place; the objective supplies the loss.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from accelerate import Accelerator
from accelerate.utils import set_seed
from tqdm.auto import tqdm

from heads.formats.staging import atomic_write_text
from train.checkpoint import keep_best, load_latest, save_checkpoint
from train.config import TrainerConfig
from train.data import BatchOrder
from train.distributed import global_weight
from train.optimizers import build_optimizer
from train.schedule import build_scheduler, shared_until


def train_loop(
    accelerator: Accelerator,
    cfg: TrainerConfig,
    model: torch.nn.Module,
    objective,
    dataset,
    *,
    pad_token_id: int,
    ckpt_dir: Path,
    config_dict: dict,
    stop_after: int | None = None,
    select=None,
) -> tuple[dict, torch.nn.Module]:
    """Train `model` with `objective` for cfg.max_steps optimizer steps; return the final metrics and the
    model as accelerate prepared it (what full_state_dict gathers from under ZeRO-3).

    Resumes from the latest checkpoint in ckpt_dir when cfg.resume, replaying the same batches an
    uninterrupted run would see, so both end with the same weights.

    Args:
        stop_after: return after this optimizer step, as a killed run would (tests use it).
        select: optional model → score (higher is better), computed at every checkpoint; the
            best-scoring weights are kept in ckpt_dir/best.safetensors (see best_weights).
    """
    set_seed(cfg.seed)
    order = BatchOrder(
        dataset,
        cfg.batch_size,
        cfg.max_seq_len,
        pad_token_id,
        seed=cfg.seed,
        rank=accelerator.process_index,
        world_size=accelerator.num_processes,
    )
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = build_optimizer(model, cfg, accelerator.distributed_type)
    scheduler = build_scheduler(optimizer, cfg)
    kept = shared_until(cfg) if cfg.schedule == "wsd" else None  # where a longer run continues from
    # prepare() wraps the model (DDP/FSDP/DeepSpeed) and places it; the frozen target stays outside.
    model, optimizer, scheduler = accelerator.prepare(model, optimizer, scheduler)
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    start = load_latest(accelerator, ckpt_dir, config_dict) if cfg.resume else 0
    if accelerator.is_main_process:
        truncate_log(ckpt_dir, start)  # a resumed run rewrites the steps after its checkpoint
    if accelerator.log_with:
        accelerator.init_trackers("drafthub", config=config_dict)

    model.train()
    metrics: dict[str, float] = {}
    bar = tqdm(
        range(start, cfg.max_steps),
        initial=start,
        total=cfg.max_steps,
        desc="train",
        disable=not accelerator.is_main_process,
    )
    for step in bar:
        for micro in range(cfg.grad_accum):
            batch = {k: v.to(accelerator.device) for k, v in order.batch(step * cfg.grad_accum + micro).items()}
            with accelerator.accumulate(model):
                with accelerator.autocast():
                    loss, step_metrics = objective(model, batch)
                if accelerator.num_processes > 1 and "positions" in step_metrics:
                    loss = loss * global_weight(accelerator, step_metrics["positions"])
                    step_metrics["loss"] = loss.detach()  # mean over processes = the global batch's loss
                accelerator.backward(loss)
                if accelerator.sync_gradients:
                    accelerator.clip_grad_norm_(params, cfg.max_grad_norm)
                optimizer.step()
                scheduler.step()
                optimizer.zero_grad(set_to_none=True)
        done = step + 1
        if done % cfg.log_every == 0 or done == cfg.max_steps:
            # host sync (and one collective): only every log_every steps
            logged = {k: v for k, v in step_metrics.items() if k != "positions"}
            if accelerator.num_processes > 1:  # every process's figures count, not only the main one's
                logged = accelerator.reduce(
                    {k: torch.as_tensor(v, device=accelerator.device).float() for k, v in logged.items()},
                    reduction="mean",
                )
            metrics = {k: float(v) for k, v in logged.items()} | {"lr": scheduler.get_last_lr()[0]}
            # the objective may pick a few for the bar
            shown = getattr(objective, "progress_keys", None) or list(metrics)
            bar.set_postfix({k: f"{metrics[k]:.4g}" for k in shown if k in metrics})
            accelerator.log(metrics, step=done)
            if accelerator.is_main_process:
                append_log(ckpt_dir, done, metrics)
        if done % cfg.save_every == 0 or done in (cfg.max_steps, kept):
            save_checkpoint(accelerator, ckpt_dir, done, config_dict, cfg.keep_last, keep=done == kept)
            if select is not None:
                keep_best(accelerator, model, select, ckpt_dir, done)
        if stop_after is not None and done >= stop_after:
            return metrics, model
    if not metrics and start >= cfg.max_steps:  # killed after the last checkpoint: its logged figures stand
        metrics = last_logged(ckpt_dir, start)
    for tracker in accelerator.trackers:  # not end_training(): it would also end the process group
        tracker.finish()
    return metrics, model


TRAIN_LOG = "log.jsonl"


def append_log(ckpt_dir: Path, step: int, metrics: dict) -> None:
    """One JSON line per logged step: the loss curve without any tracker installed."""
    with open(Path(ckpt_dir) / TRAIN_LOG, "a") as f:
        f.write(json.dumps({"step": step} | metrics) + "\n")


def last_logged(ckpt_dir: Path, step: int) -> dict:
    """The metrics logged at `step` (log.jsonl), {} if that step was not logged."""
    path = Path(ckpt_dir) / TRAIN_LOG
    rows = [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
    return next(({k: v for k, v in r.items() if k != "step"} for r in rows if r["step"] == step), {})


def _logged_step(line: str) -> float:
    try:
        return json.loads(line)["step"]
    except json.JSONDecodeError:  # a line cut short by a full disk or a kill: dropped with the steps after it
        return float("inf")


def truncate_log(ckpt_dir: Path, start: int) -> None:
    path = Path(ckpt_dir) / TRAIN_LOG
    if path.exists():
        kept = [line for line in path.read_text().splitlines() if _logged_step(line) <= start]
        atomic_write_text(path, "".join(line + "\n" for line in kept))
