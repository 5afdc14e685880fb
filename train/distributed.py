"""Processes and weights across them: the Accelerator for whatever `accelerate launch` set up, and the
drafter's full weights gathered from (or put back into) ZeRO-3/FSDP shards."""

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
)

from distill.device import native_bf16
from train.config import TrainerConfig
from train.errors import PipelineError


def mixed_precision(setting: str) -> str:
    """`auto` → bf16 on a GPU that supports it, otherwise full precision; `native` → bf16 wherever the device
    computes it natively (that GPU, or a CPU with AVX-512-BF16 or AMX: 1.9× faster EAGLE-3 steps on SmolLM2),
    otherwise full precision (a CPU without it emulates bf16 about 10× slower than fp32)."""
    if setting == "native":  # the device accelerate picks: the GPU when there is one
        return "bf16" if native_bf16(torch.device("cuda" if torch.cuda.is_available() else "cpu")) else "no"
    if setting != "auto":
        return setting
    return "bf16" if torch.cuda.is_available() and torch.cuda.is_bf16_supported() else "no"


def launched_processes() -> int:
    """Processes `accelerate launch` / torchrun started (their WORLD_SIZE); 1 for `python -m train`."""
    return int(os.environ.get("WORLD_SIZE", "1"))


def launcher_from_env() -> str:
    """deepspeed_zero3 | deepspeed | fsdp | other: what `accelerate launch` set up, read from the environment it
    gives its processes, before any Accelerator exists (preflight); a DeepSpeed config file's own stage counts."""
    if os.environ.get("ACCELERATE_USE_FSDP", "false").lower() == "true":
        return "fsdp"
    if os.environ.get("ACCELERATE_USE_DEEPSPEED", "false").lower() != "true":
        return "other"
    stage = os.environ.get("ACCELERATE_DEEPSPEED_ZERO_STAGE")
    config_file = os.environ.get("ACCELERATE_DEEPSPEED_CONFIG_FILE", "none")
    if config_file != "none" and Path(config_file).is_file():
        stage = json.loads(Path(config_file).read_text()).get("zero_optimization", {}).get("stage", stage)
    return "deepspeed_zero3" if str(stage) == "3" else "deepspeed"


def check_batch_split(batch_size: int, processes: int) -> None:
    """The global batch splits evenly over the launched processes, or the run is refused."""
    if batch_size % processes:
        raise PipelineError(
            f"trainer.batch_size={batch_size} is the global batch and must split evenly over {processes} "
            f"processes; make it a multiple of {processes}"
        )


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
    precision = mixed_precision(cfg.mixed_precision)
    _forget_another_precision(precision)
    accelerator = Accelerator(
        mixed_precision=precision,
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


def _forget_another_precision(precision: str) -> None:
    """accelerate keeps one AcceleratorState per process and refuses a second Accelerator with another mixed
    precision. One process may train several drafters in turn (the bake-off, a notebook, the tests), and on a device
    with native bf16 `native` gives bf16 where another recipe says no: a single-process run starts from a fresh state.
    A launched job builds one Accelerator per process and is left alone."""
    from accelerate.state import AcceleratorState

    held = AcceleratorState._shared_state.get("_mixed_precision")
    if launched_processes() == 1 and held is not None and held != precision:
        AcceleratorState._reset_state()  # accelerate's own tests reset it so between runs in one process


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


def global_weight(accelerator: Accelerator, positions: torch.Tensor) -> torch.Tensor:
    """Factor turning this process's mean loss into its share of the global batch's mean.

    Data parallelism averages gradients over processes; a process with more loss positions must
    count for more, or 2 processes would not train as 1 process on the same global batch does.
    """
    local = positions.float()
    total = accelerator.reduce(local.clone(), reduction="sum")
    return local * accelerator.num_processes / total.clamp(min=1)
