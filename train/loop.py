"""The one training loop every drafter family shares (accelerate: 1 CPU to many GPUs).

forward → loss → backward → step → log → save, in one place; the objective supplies the loss.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch
from accelerate import Accelerator
from accelerate.utils import (
    DataLoaderConfiguration,
    DistributedType,
    GradientAccumulationPlugin,
    InitProcessGroupKwargs,
    set_seed,
)
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


def launched_processes() -> int:
    """Processes `accelerate launch` / torchrun started (their WORLD_SIZE); 1 for `python -m train`."""
    return int(os.environ.get("WORLD_SIZE", "1"))


def build_accelerator(cfg: TrainerConfig, project_dir: Path) -> Accelerator:
    """The Accelerator for whatever `accelerate launch` set up (1 process, DDP, DeepSpeed, FSDP).

    Without CUDA the process group uses gloo: accelerate picks it for DDP on CPU, but DeepSpeed
    would ask for a GPU backend. Under DeepSpeed the trainer's batch, accumulation and clipping
    settings are written into its config, so one recipe means the same run under every launcher.
    """
    handlers = (
        [InitProcessGroupKwargs(backend="gloo")] if launched_processes() > 1 and not torch.cuda.is_available() else []
    )
    plugin = _deepspeed_plugin_from_env()
    if plugin is not None:
        plugin.deepspeed_config["gradient_accumulation_steps"] = cfg.grad_accum
        plugin.deepspeed_config["gradient_clipping"] = cfg.max_grad_norm
        plugin.gradient_accumulation_steps = cfg.grad_accum
        # the drafter is gathered whole for its export and best checkpoint, whatever the user's DeepSpeed config says
        plugin.deepspeed_config.setdefault("zero_optimization", {})["stage3_gather_16bit_weights_on_model_save"] = True
    accelerator = Accelerator(
        mixed_precision=mixed_precision(cfg.mixed_precision),
        # a plugin, not the int, so a launcher's ACCELERATE_GRADIENT_ACCUMULATION_STEPS cannot override the recipe
        gradient_accumulation_plugin=GradientAccumulationPlugin(num_steps=cfg.grad_accum),
        log_with=list(cfg.log_with) or None,
        project_dir=str(project_dir),
        kwargs_handlers=handlers,
        # BatchOrder already splits the global batch over processes; with split_batches the
        # prepared scheduler steps once per optimizer step instead of once per process
        dataloader_config=DataLoaderConfiguration(split_batches=True),
        deepspeed_plugin=plugin,
    )
    if accelerator.distributed_type == DistributedType.DEEPSPEED:
        # we feed batches ourselves (no prepared DataLoader), so DeepSpeed is told the per-process size
        accelerator.state.deepspeed_plugin.deepspeed_config["train_micro_batch_size_per_gpu"] = (
            cfg.batch_size // accelerator.num_processes
        )
    return accelerator


def _deepspeed_plugin_from_env():
    """The DeepSpeedPlugin `accelerate launch --use_deepspeed` describes in the environment, or None."""
    if os.environ.get("ACCELERATE_USE_DEEPSPEED", "false").lower() != "true":
        return None
    from accelerate.utils import DeepSpeedPlugin

    return DeepSpeedPlugin()


def full_state_dict(accelerator: Accelerator, model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The whole drafter's weights on CPU, gathered from shards under ZeRO-3/FSDP.

    Collective: every process must call it; only the main process's result is complete.
    """
    state = accelerator.get_state_dict(model)
    return {k: v.detach().contiguous().cpu() for k, v in (state or {}).items()}


def assign_state(model: torch.nn.Module, state: dict[str, torch.Tensor]) -> None:
    """Put full weights back into `model`, even where ZeRO-3 left empty partitioned parameters
    (load_state_dict would refuse their shapes). Missing or extra names are an error."""
    own = dict(model.named_parameters(remove_duplicate=False)) | dict(model.named_buffers(remove_duplicate=False))
    if set(state) - set(own) or {k for k in model.state_dict()} - set(state):
        raise ValueError(
            f"gathered weights do not match the drafter: {sorted(set(state) ^ set(model.state_dict()))[:5]}"
        )
    for name, tensor in state.items():
        own[name].data = tensor.to(own[name].device)


def _global_weight(accelerator: Accelerator, positions: torch.Tensor) -> torch.Tensor:
    """Factor turning this process's mean loss into its share of the global batch's mean.

    Data parallelism averages gradients over processes; a process with more loss positions must
    count for more, or 2 processes would not train as 1 process on the same global batch does.
    """
    local = positions.float()
    total = accelerator.reduce(local.clone(), reduction="sum")
    return local * accelerator.num_processes / total.clamp(min=1)


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
    optimizer = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay, betas=(0.9, 0.95))
    scheduler = get_cosine_schedule_with_warmup(optimizer, cfg.warmup_steps, cfg.max_steps)
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
                    loss = loss * _global_weight(accelerator, step_metrics["positions"])
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
        if done % cfg.save_every == 0 or done == cfg.max_steps:
            save_checkpoint(accelerator, ckpt_dir, done, config_dict, cfg.keep_last)
            if select is not None:
                keep_best(accelerator, model, select, ckpt_dir, done)
        if stop_after is not None and done >= stop_after:
            return metrics, model
    if not metrics and start >= cfg.max_steps:  # killed after the last checkpoint: its logged figures stand
        metrics = last_logged(ckpt_dir, start)
    for tracker in accelerator.trackers:  # not end_training(): it would also end the process group
        tracker.finish()
    return metrics, model


BEST_WEIGHTS, BEST_META = "best.safetensors", "best.json"
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


def keep_best(accelerator: Accelerator, model: torch.nn.Module, select, ckpt_dir: Path, step: int) -> None:
    """Score the current weights; if they beat the best so far, write them (atomically) as the best."""
    model.eval()
    with torch.no_grad():
        score = float(select(accelerator.unwrap_model(model)))  # host sync: once per checkpoint
    model.train()
    meta_file = Path(ckpt_dir) / BEST_META
    best = json.loads(meta_file.read_text()) if meta_file.exists() else None
    state = full_state_dict(accelerator, model)  # every process takes part (ZeRO-3 gathers)
    if accelerator.is_main_process and (best is None or score > best["score"]):
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
