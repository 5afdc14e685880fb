"""`python -m train recipe=… dry_run=true`: what a run will need, before any GPU hour is spent.

The target and the drafter are built on PyTorch's meta device from the target's config.json (a
local directory, the HF cache, or KNOWN_TARGETS), so parameter counts are exact while no weight
is loaded and nothing is downloaded. Memory per GPU is weights + gradients + optimizer states
under the chosen accelerate config (ZeRO's accounting) plus an activation estimate; time is a
roofline estimate (training: FLOPs at plan.mfu; distillation: weight reads at plan.gpu_bandwidth_tbps).
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import torch
import yaml
from transformers import AutoModelForCausalLM, PretrainedConfig

from distill.feature_store import bytes_needed
from distill.target import target_config
from train.config import PlanConfig
from train.setups import training_setup
from train.sharded_target import choose_sharding

GIB = 2**30
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
STRATEGIES = ("single", "ddp", "zero2", "zero3", "fsdp")
# what train.sharded_target.choose_sharding calls each strategy's launch (trainer.target_sharding=auto)
LAUNCHERS = {"single": "other", "ddp": "other", "zero2": "deepspeed", "zero3": "deepspeed_zero3", "fsdp": "fsdp"}


class PlanError(ValueError):
    """The plan cannot be made (unknown target, bad accelerate config): message names the fix."""


@dataclass
class Launch:
    strategy: str
    processes: int
    mixed_precision: str


def read_launch(plan: PlanConfig) -> Launch:
    """The strategy, process count and precision an accelerate config file describes."""
    if plan.accelerate == "single":
        return Launch("single", plan.num_processes or 1, "bf16")
    path = Path(plan.accelerate)
    if not path.suffix:
        path = Path(str(resources.files("conf") / "accelerate" / f"{plan.accelerate}.yaml"))
    if not path.is_file():
        raise PlanError(
            f"plan.accelerate={plan.accelerate!r} is neither one of {list(STRATEGIES)} nor an accelerate config file"
        )
    raw = yaml.safe_load(path.read_text())
    distributed = raw.get("distributed_type", "NO")
    if distributed == "DEEPSPEED":
        stage = int(raw.get("deepspeed_config", {}).get("zero_stage", 2))
        if stage not in (2, 3):
            raise PlanError(f"{path}: the planner accounts ZeRO stages 2 and 3, not {stage}")
        strategy = f"zero{stage}"
    else:
        strategy = {"MULTI_GPU": "ddp", "FSDP": "fsdp", "NO": "single"}.get(distributed)
        if strategy is None:
            raise PlanError(
                f"{path}: distributed_type {distributed} is not planned; use DDP (MULTI_GPU), DEEPSPEED or FSDP"
            )
    return Launch(strategy, plan.num_processes or int(raw.get("num_processes", 1)), raw.get("mixed_precision", "no"))


def _meta_models(cfg, config: PretrainedConfig):
    """(target, drafter) with exact shapes on the meta device: no memory, no weights."""
    setup = training_setup(cfg.drafter.kind)
    with torch.device("meta"):
        target = AutoModelForCausalLM.from_config(config, trust_remote_code=cfg.target.trust_remote_code)
        drafter = setup.meta_drafter(cfg, target, config)
    return target, drafter


def param_bytes(model: torch.nn.Module, bytes_per_param: int | None = None) -> int:
    """Bytes of the model's (deduplicated) parameters, at their own dtype unless bytes_per_param is given."""
    return sum(p.numel() * (bytes_per_param or p.element_size()) for p in model.parameters())


def _state_bytes(strategy: str, n: int, bf16: bool, all_params: int, trainable: int) -> dict[str, float]:
    """Per-GPU bytes of drafter weights, gradients and AdamW states (ZeRO paper's accounting).

    Without DeepSpeed the drafter trains in fp32 (autocast for bf16): 4 B weights, 4 B grads,
    8 B Adam moments per parameter. DeepSpeed in bf16 keeps bf16 weights and grads plus fp32
    master weights and moments (2 + 2 + 12 B); ZeRO-2 shards grads and optimizer states, ZeRO-3
    and FSDP everything.
    """
    if strategy.startswith("zero") and bf16:
        weights, grads, optim = 2 * all_params, 2 * trainable, 12 * trainable
    else:
        weights, grads, optim = 4 * all_params, 4 * trainable, 8 * trainable
    if strategy == "zero2":
        grads, optim = grads / n, optim / n
    elif strategy in ("zero3", "fsdp"):
        weights, grads, optim = weights / n, grads / n, optim / n
    return {"drafter_weights": weights, "gradients": grads, "optimizer": optim}


def _target_memory(target: torch.nn.Module, t_bytes: int, sharding: str, n: int) -> dict[str, float]:
    """Per-GPU bytes of the frozen target: whole, 1/n of it plus what its forward gathers, or only its heads."""
    heads = [target.get_input_embeddings(), target.get_output_embeddings(), target.get_decoder().norm]
    heads_bytes = sum(param_bytes(m, t_bytes) for m in heads) - (
        param_bytes(heads[0], t_bytes) if heads[0].weight is heads[1].weight else 0
    )
    if sharding == "replicate":
        return {"target_weights": param_bytes(target, t_bytes)}
    if sharding == "heads only":  # features from vLLM: embeddings, final norm and lm_head
        return {"target_weights": heads_bytes}
    # sharded: each process keeps 1/n; a forward gathers a layer while prefetching the next, and the
    # embeddings and lm_head whole (FSDP's root unit; ZeRO-3 when they run)
    layer = max(param_bytes(m, t_bytes) for m in target.get_decoder().layers)
    return {"target_weights": param_bytes(target, t_bytes) / n, "target_gathered": 2 * layer + heads_bytes}


def _activation_bytes(
    cfg,
    config: PretrainedConfig,
    drafter_hidden: int,
    per_gpu_batch: int,
    target_bytes_per_value: int,
    act_bytes: int,
    forward: bool = True,
) -> dict[str, float]:
    """Estimated peak activations (±2×): the target's no-grad forward (or its lm_head alone on stored
    features), the drafter's saved tensors."""
    tokens = per_gpu_batch * cfg.trainer.max_seq_len
    H, F, V = config.hidden_size, config.intermediate_size, config.vocab_size
    # target: one layer's transient tensors (none without a forward) + its logits (and their float copy for the loss)
    layer = (4 * H + 3 * F) * target_bytes_per_value if forward else 0
    target = tokens * (layer + V * (target_bytes_per_value + 4))
    layer = 34 * tokens * drafter_hidden * act_bytes // 2  # saved tensors of one decoder layer (flash/SDPA attention)
    extra, drafter = training_setup(cfg.drafter.kind).activations(
        cfg, tokens=tokens, hidden=H, layer=layer, vocab=V, act_bytes=act_bytes, target_bytes=target_bytes_per_value
    )
    return {"target_activations": target + extra, "drafter_activations": drafter}


def plan_run(cfg, plan: PlanConfig | None = None) -> dict:
    """The plan of `cfg` (a RunConfig) as a dict of figures; nothing is loaded or written."""
    plan = plan or cfg.plan
    launch = read_launch(plan)
    config = target_config(cfg.target.name_or_path, cfg.target.trust_remote_code)
    target, drafter = _meta_models(cfg, config)
    n = launch.processes
    if cfg.trainer.batch_size % n:
        raise PlanError(
            f"trainer.batch_size={cfg.trainer.batch_size} (global) does not split over {n} processes; "
            f"make it a multiple of {n}"
        )
    dtype = (
        cfg.target.dtype
        if cfg.target.dtype != "auto"
        else str(getattr(config, "torch_dtype", None) or "float32").replace("torch.", "")
    )
    t_bytes = DTYPE_BYTES.get(dtype, 4)
    bf16 = launch.mixed_precision == "bf16"
    target_bytes = param_bytes(target, t_bytes)
    all_params = sum(p.numel() for p in drafter.parameters())
    trainable = sum(p.numel() for p in drafter.parameters() if p.requires_grad)
    setup = training_setup(cfg.drafter.kind)
    from_vllm = bool(setup.feature_ids) and cfg.drafter.features == "vllm"
    sharding = (
        "heads only" if from_vllm else choose_sharding(cfg.trainer.target_sharding, n, LAUNCHERS[launch.strategy])
    )
    memory = _target_memory(target, t_bytes, sharding, n)
    memory |= _state_bytes(launch.strategy, n, bf16, all_params, trainable)
    hidden = getattr(getattr(drafter, "config", None), "hidden_size", None) or config.hidden_size
    memory |= _activation_bytes(
        cfg, config, hidden, cfg.trainer.batch_size // n, t_bytes, 2 if bf16 else 4, forward=not from_vllm
    )
    total = sum(memory.values())

    d = cfg.data
    samples = d.max_prompts + sum(m.max_prompts for m in d.mix)
    sample_tokens = min(cfg.trainer.max_seq_len, d.max_prompt_tokens + d.sampling.max_new_tokens)
    generated = samples * d.sampling.max_new_tokens
    train_tokens = cfg.trainer.max_steps * cfg.trainer.batch_size * cfg.trainer.grad_accum * sample_tokens
    embed = config.vocab_size * config.hidden_size
    target_params = sum(p.numel() for p in target.parameters())
    unroll = setup.unroll(cfg.drafter)
    # target forward (its input embedding is a lookup, not FLOPs) + drafter forward/backward per unrolled step
    flops_per_token = (0 if from_vllm else 2 * (target_params - embed)) + 6 * unroll * trainable
    train_seconds = train_tokens * flops_per_token / (n * plan.gpu_tflops * 1e12 * plan.mfu)
    tp = d.tensor_parallel_size if d.backend == "vllm" else 1
    replicas = max(n // tp, 1) if d.backend == "vllm" else 1
    decode_step = target_bytes / tp / (plan.gpu_bandwidth_tbps * 1e12)  # each step reads the weights once
    distill_seconds = generated / (d.batch_size * replicas) * decode_step if d.regenerate else 0.0
    if from_vllm:  # vLLM's prefill over every distilled token (compute-bound), on the same GPUs
        distill_seconds += samples * sample_tokens * 2 * target_params / (n * plan.gpu_tflops * 1e12 * plan.mfu)
    # None: the family reads no stored features
    layers = len(setup.feature_ids(cfg.drafter, config)) if setup.feature_ids else None
    return {
        "recipe": cfg.recipe_name,
        "target": cfg.target.name_or_path,
        "target_params": target_params,
        "target_dtype": dtype,
        "drafter_kind": cfg.drafter.kind,
        "drafter_params": all_params,
        "drafter_trainable_params": trainable,
        "accelerate": plan.accelerate,
        "strategy": launch.strategy,
        "target_sharding": sharding,
        "processes": n,
        "mixed_precision": launch.mixed_precision,
        "memory_per_gpu": {k: int(v) for k, v in memory.items()},
        "memory_per_gpu_total": int(total),
        "gpu_memory": int(plan.gpu_memory_gb * 1e9),  # GB as GPU vendors count
        "fits": total <= plan.gpu_memory_gb * 1e9,
        "samples": samples,
        "tokens_per_sample_max": sample_tokens,
        "distill_generated_tokens_max": generated,
        "train_tokens_max": train_tokens,
        "steps": cfg.trainer.max_steps,
        "epochs": cfg.trainer.max_steps * cfg.trainer.batch_size * cfg.trainer.grad_accum / max(samples, 1),
        "offline_feature_bytes": bytes_needed(samples * sample_tokens, layers, config.hidden_size)
        if layers is not None
        else 0,
        "features": cfg.drafter.features if layers is not None else None,
        "distill_hours": distill_seconds / 3600,
        "train_hours": train_seconds / 3600,
    }


SHARDING_WORDS = {
    "replicate": "replicated (whole in every process)",
    "zero3": "sharded over {n} processes (ZeRO-3)",
    "fsdp": "sharded over {n} processes (FSDP2)",
    "heads only": "embeddings, final norm and lm_head only (features from vLLM)",
}


def render_plan(p: dict) -> str:
    """The plan as the lines `dry_run=true` prints."""

    def gib(b: float) -> str:
        return f"{b / GIB:8.1f} GiB" if b >= GIB / 10 else f"{b / 2**20:8.1f} MiB"

    lines = [
        f"plan for recipe {p['recipe']}: {p['drafter_kind']} drafter ({p['drafter_params'] / 1e6:.1f} M params, "
        f"{p['drafter_trainable_params'] / 1e6:.1f} M trained) "
        f"on {p['target']} ({p['target_params'] / 1e9:.2f} B params, {p['target_dtype']})",
        f"launch: {p['strategy']}"
        + (f" ({p['accelerate']})" if p["accelerate"] != p["strategy"] else "")
        + f", {p['processes']} process(es), mixed precision {p['mixed_precision']}; frozen target: "
        + SHARDING_WORDS[p["target_sharding"]].format(n=p["processes"]),
        "memory per GPU:",
        *(f"  {k:<20}{gib(v)}" for k, v in p["memory_per_gpu"].items()),
        f"  {'total':<20}{gib(p['memory_per_gpu_total'])}  of {p['gpu_memory'] / GIB:.1f} GiB: "
        + ("fits" if p["fits"] else "DOES NOT FIT"),
        f"data: {p['samples']} samples, ≤ {p['tokens_per_sample_max']} tokens each; "
        f"distillation generates ≤ {p['distill_generated_tokens_max'] / 1e6:.1f} M tokens",
        f"training: {p['steps']} steps, ≤ {p['train_tokens_max'] / 1e9:.2f} B tokens, {p['epochs']:.2f} epochs",
    ]
    if p["features"] is not None:
        where = {
            "offline": "written once (drafter.features=offline)",
            "vllm": "written once by vLLM before training (drafter.features=vllm, data.tensor_parallel_size GPUs)",
        }.get(p["features"], "not written (drafter.features=online; offline or vllm would need this much disk)")
        lines.append(f"offline features: ≤ {p['offline_feature_bytes'] / 1e12:.2f} TB, {where}")
    lines.append(
        f"time (roofline estimate): distillation {p['distill_hours']:.1f} h, training {p['train_hours']:.1f} h"
    )
    if not p["fits"] and p["memory_per_gpu"]["target_weights"] >= p["gpu_memory"]:
        lines.append(
            "does not fit: the frozen target alone exceeds one GPU, and every process holds a replica "
            f"(trainer.target_sharding resolves to {p['target_sharding']}); shard it with plan.accelerate=zero3 "
            "or fsdp (trainer.target_sharding=auto), or take its features from vLLM (drafter.features=vllm)"
        )
    elif not p["fits"]:
        lines.append(
            "does not fit: raise plan.num_processes under zero3/fsdp (the drafter's states and the frozen "
            "target shard), lower trainer.batch_size or trainer.max_seq_len, "
            "or use GPUs with more memory (plan.gpu_memory_gb)"
        )
    return "\n".join(lines)
