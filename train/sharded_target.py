"""The frozen target sharded over the training processes (DeepSpeed ZeRO-3 or FSDP2), as the drafter is.

A replicated target costs every process its full size (131 GiB for Llama-3.3-70B in bf16), more
than an 80 GB GPU holds. Sharded, each of N processes keeps ≈ 1/N of its parameters and gathers
one layer at a time during the forward, which gives the replica's features and logits exactly
(tested). Each process may read a different micro-batch: the gathers only need every process to
run the same forwards, which the shared training loop guarantees.

- zero3: transformers loads the checkpoint straight into ZeRO-3 partitions (deepspeed.zero.Init),
  so no process ever holds the whole target; DeepSpeed's hooks then gather per module.
- fsdp: each process loads the target on the CPU and torch's FSDP2 (`fully_shard`) shards every
  decoder layer and the rest over the processes; the accelerator then holds 1/N of it.
"""

from __future__ import annotations

import importlib.util
from contextlib import contextmanager
from typing import Iterator

import torch
from transformers import AutoConfig

from distill.config import TargetConfig
from distill.targets import resolve_target
from distill.targets.load import load_target
from train.errors import PipelineError

SHARDINGS = ("auto", "replicate", "zero3", "fsdp")
_ENGINES: list = []  # the ZeRO-3 engines whose hooks gather the target's parameters: kept for the process's life


def choose_sharding(setting: str, processes: int, launcher: str) -> str:
    """replicate | zero3 | fsdp for trainer.target_sharding under `launcher` (deepspeed_zero3 | fsdp | other)."""
    if setting not in SHARDINGS:
        raise PipelineError(f"trainer.target_sharding={setting!r} is not one of {list(SHARDINGS)}")
    if setting == "auto":
        return {"deepspeed_zero3": "zero3", "fsdp": "fsdp"}.get(launcher, "replicate") if processes > 1 else "replicate"
    if setting != "replicate" and processes < 2:
        raise PipelineError(
            f"trainer.target_sharding={setting} shards the target over processes, but 1 was launched; "
            "start several with `accelerate launch --num_processes N`, or set trainer.target_sharding=replicate"
        )
    return setting


def checked_sharding(setting: str, processes: int, launcher: str, kind: str, whole_target_only) -> str:
    """choose_sharding, refusing a sharded target that the family cannot train beside (its setup's
    whole_target_only says why) or that needs DeepSpeed where it is not installed."""
    sharding = choose_sharding(setting, processes, launcher)
    if sharding != "replicate" and whole_target_only:
        raise PipelineError(
            f"trainer.target_sharding={sharding}: {kind} cannot train beside a sharded target ({whole_target_only}); "
            "set trainer.target_sharding=replicate"
        )
    if sharding == "zero3" and importlib.util.find_spec("deepspeed") is None:
        raise PipelineError(NO_DEEPSPEED)
    return sharding


NO_DEEPSPEED = (
    "trainer.target_sharding=zero3 needs DeepSpeed; pip install 'drafthub[deepspeed]' "
    "or set trainer.target_sharding=fsdp"
)


def load_training_target(cfg: TargetConfig, device: torch.device, sharding: str, processes: int) -> torch.nn.Module:
    """The frozen target, replicated on `device` or sharded over the launched processes."""
    if sharding == "replicate":
        return load_target(cfg, device)
    if sharding == "zero3":
        return _zero3_target(cfg, device)
    return _fsdp_target(cfg, device, processes)


def _zero3_config(cfg: TargetConfig) -> dict:
    """An inference-only ZeRO-3 config: no optimizer, every parameter partitioned (none kept whole)."""
    dtype = cfg.dtype
    if dtype == "auto":
        config = AutoConfig.from_pretrained(resolve_target(cfg), revision=cfg.revision)
        dtype = str(getattr(config, "dtype", None) or getattr(config, "torch_dtype", None) or "float32")
    return {
        "train_micro_batch_size_per_gpu": 1,  # DeepSpeed asks for it; the target is never trained
        # threshold 0: even the norms are partitioned, so a process holds exactly its share
        "zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 0},
        "bf16": {"enabled": "bfloat16" in dtype},
        "fp16": {"enabled": "float16" in dtype and "bfloat16" not in dtype},
    }


def _zero3_target(cfg: TargetConfig, device: torch.device) -> torch.nn.Module:
    try:
        import deepspeed
    except ImportError:
        raise PipelineError(NO_DEEPSPEED) from None
    from transformers.integrations import HfDeepSpeedConfig

    config = _zero3_config(cfg)
    # while `live` exists, from_pretrained builds the model under deepspeed.zero.Init: each tensor is read into
    # its partitions; dropping it afterwards keeps the drafter (built later) out of zero.Init
    live = HfDeepSpeedConfig(config)
    try:
        model = load_target(cfg, device=None)
    finally:
        del live
    engine, *_ = deepspeed.initialize(model=model, config=config)
    engine.eval()
    _ENGINES.append(engine)
    return model


def _fsdp_target(cfg: TargetConfig, device: torch.device, processes: int) -> torch.nn.Module:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    model = load_target(cfg, device=None)  # on the CPU: each layer moves to `device` only as its shard
    layers = getattr(model.get_decoder(), "layers", None)
    if not isinstance(layers, torch.nn.ModuleList):
        raise PipelineError(
            f"trainer.target_sharding=fsdp shards decoder layers, but {cfg.name_or_path!r} has no `layers` list; "
            "use trainer.target_sharding=zero3"
        )
    mesh = init_device_mesh(device.type, (processes,))
    for layer in layers:
        fully_shard(layer, mesh=mesh, reshard_after_forward=True)
    # embeddings, final norm and lm_head: one more unit, resharded too (FSDP keeps a root whole for a backward
    # that a frozen target never runs)
    fully_shard(model, mesh=mesh, reshard_after_forward=True)
    return model


@contextmanager
def whole_embeddings(target: torch.nn.Module) -> Iterator[None]:
    """The target's input embeddings, lm_head and final norm whole, for reading their weights or calling them directly.

    Drafters copy them and the offline objectives apply the lm_head outside the target's forward; a
    sharded target must gather them first. Do not run the target's forward inside: it reshards.
    """
    params = [target.get_input_embeddings().weight, target.get_output_embeddings().weight]
    norm = getattr(getattr(target.get_decoder(), "norm", None), "weight", None)  # EAGLE drafters copy it
    params += [norm] if norm is not None else []
    if hasattr(params[0], "ds_id"):  # partitioned by ZeRO-3
        import deepspeed

        with deepspeed.zero.GatheredParameters(params):
            yield
    elif hasattr(target, "unshard") and hasattr(target, "reshard"):  # an FSDP2 module: the root unit holds them
        target.unshard()
        try:
            yield
        finally:
            target.reshard()
    else:
        yield


def held_bytes(model: torch.nn.Module) -> int:
    """Bytes of the model's parameters this process holds: its shards where they are sharded."""
    total = 0
    for p in model.parameters():
        if p.is_meta:  # never loaded (the decoder layers of distill.targets.heads)
            continue
        if hasattr(p, "ds_tensor"):  # ZeRO-3: the local partition
            local = p.ds_tensor
        elif hasattr(p, "to_local"):  # FSDP2: a DTensor
            local = p.to_local()
        else:
            local = p
        total += local.numel() * local.element_size()
    return total


def full_bytes(model: torch.nn.Module) -> int:
    """Bytes of the model's parameters, whole (what a replica holds)."""
    return sum((getattr(p, "ds_numel", None) or p.numel()) * p.element_size() for p in model.parameters())
