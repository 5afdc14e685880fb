"""`python -m train recipe=… dry_run=true`: what a run will need, before any GPU hour is spent.

The target and the drafter are built on PyTorch's meta device from the target's config.json (a
local directory, the HF cache, or KNOWN_TARGETS), so parameter counts are exact while no weight
is loaded and nothing is downloaded. Memory per GPU is weights + gradients + optimizer states
under the chosen accelerate config (ZeRO's accounting) plus an activation estimate; time is a
roofline estimate (training: FLOPs at plan.mfu; distillation: weight reads at plan.gpu_bandwidth_tbps).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import torch
import yaml
from transformers import AutoModelForCausalLM, PretrainedConfig

from distill.features.store import bytes_needed
from distill.targets.load import target_config
from train.config import PlanConfig
from train.setups import training_setup
from train.sharded_target import choose_sharding

GIB = 2**30
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
STRATEGIES = ("single", "ddp", "zero2", "zero3", "fsdp")
# what train.sharded_target.choose_sharding calls each strategy's launch (trainer.target_sharding=auto)
LAUNCHERS = {"single": "other", "ddp": "other", "zero2": "deepspeed", "zero3": "deepspeed_zero3", "fsdp": "fsdp"}


PLAN_DEVICES = ("auto", "cpu", "gpu")


def plan_device(plan: PlanConfig) -> str:
    """cpu or gpu: what the plan's memory and time are figured for (plan.device; auto = this machine for a single
    process, GPUs for a distributed launch)."""
    if plan.device not in PLAN_DEVICES:
        raise PlanError(f"plan.device={plan.device!r}; use one of {list(PLAN_DEVICES)}")
    if plan.device != "auto":
        return plan.device
    return "gpu" if torch.cuda.is_available() or plan.accelerate != "single" else "cpu"


def cpu_precision(setting: str) -> str:
    """The precision a CPU trains `trainer.mixed_precision` in (train.distributed.mixed_precision on a CPU)."""
    from distill.device import native_bf16

    if setting == "native":
        return "bf16" if native_bf16(torch.device("cpu")) else "no"
    return "no" if setting == "auto" else setting


def ram_bytes() -> int:
    """This machine's memory: its physical RAM, or the container's limit where that is lower (cgroup v2)."""
    ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    try:
        limit = Path("/sys/fs/cgroup/memory.max").read_text().strip()
    except OSError:
        return ram
    return min(ram, int(limit)) if limit.isdigit() else ram


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
    decoder = target.get_decoder()
    final_norm = next(m for name in ("norm", "ln_f", "final_layernorm") if (m := getattr(decoder, name, None)))
    heads = [target.get_input_embeddings(), target.get_output_embeddings(), final_norm]
    heads_bytes = sum(param_bytes(m, t_bytes) for m in heads) - (
        param_bytes(heads[0], t_bytes) if heads[0].weight is heads[1].weight else 0
    )
    if sharding == "replicate":
        return {"target_weights": param_bytes(target, t_bytes)}
    if sharding == "heads only":  # features from vLLM: embeddings, final norm and lm_head
        return {"target_weights": heads_bytes}
    # sharded: each process keeps 1/n; a forward gathers a layer while prefetching the next, and the
    # embeddings and lm_head whole (FSDP's root unit; ZeRO-3 when they run)
    layer = max(param_bytes(m, t_bytes) for m in getattr(decoder, "layers", None) or decoder.h)
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
    H, V = config.hidden_size, config.vocab_size
    F = getattr(config, "intermediate_size", None) or getattr(config, "n_inner", None) or 4 * H  # GPT-2: n_inner
    # target: one layer's transient tensors (none without a forward) + its logits (and their float copy for the loss)
    layer = (4 * H + 3 * F) * target_bytes_per_value if forward else 0
    whole = training_setup(cfg.drafter.kind).whole_logits(cfg, tokens)  # positions with whole-vocabulary logits
    target = tokens * layer + whole * V * (target_bytes_per_value + 4)
    layer = 34 * tokens * drafter_hidden * act_bytes // 2  # saved tensors of one decoder layer (flash/SDPA attention)
    extra, drafter = training_setup(cfg.drafter.kind).activations(
        cfg, tokens=tokens, hidden=H, layer=layer, vocab=V, act_bytes=act_bytes, target_bytes=target_bytes_per_value
    )
    return {"target_activations": target + extra, "drafter_activations": drafter}


def plan_run(cfg, plan: PlanConfig | None = None, *, timed: bool = True) -> dict:
    """The plan of `cfg` (a RunConfig) as a dict of figures; nothing is loaded or written. timed=False: memory
    only (a CPU's matmul rate is not measured, the times are not figured)."""
    plan = plan or cfg.plan
    launch = read_launch(plan)
    device = plan_device(plan)
    if device == "cpu":  # what this machine will run: its precision, its RAM, its measured matmul rate
        from eval.machine import current

        launch.mixed_precision = cpu_precision(cfg.trainer.mixed_precision)
        capacity, flops = ram_bytes(), (current().matmul_gflops * 1e9 if timed else float("nan"))
    else:
        capacity, flops = plan.gpu_memory_gb * 1e9, plan.gpu_tflops * 1e12
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
    # target forward (its input embedding is a lookup, not FLOPs) + drafter forward/backward per unrolled step; with
    # stored features the target's body runs once per sample to write the store (vLLM's: in distillation), and
    # a step runs only its lm_head over the features
    body = 2 * (target_params - embed)
    stored = bool(setup.feature_ids) and cfg.drafter.features in ("offline", "vllm")
    flops_per_token = (2 * embed if stored else body) + 6 * unroll * trainable
    train_seconds = train_tokens * flops_per_token / (n * flops * plan.mfu)
    if stored and not from_vllm:
        train_seconds += samples * sample_tokens * body / (n * flops * plan.mfu)
    tp = d.tensor_parallel_size if d.backend == "vllm" else 1
    replicas = max(n // tp, 1) if d.backend == "vllm" else 1
    if device == "cpu":  # a CPU's decoding is bound by its matmuls at these batch sizes, not by memory reads
        decode_step = d.batch_size * 2 * target_params / (flops * plan.mfu)
    else:  # each step reads the weights once
        decode_step = target_bytes / tp / (plan.gpu_bandwidth_tbps * 1e12)
    distill_seconds = generated / (d.batch_size * replicas) * decode_step if d.regenerate else 0.0
    if from_vllm:  # vLLM's prefill over every distilled token (compute-bound), on the same GPUs
        distill_seconds += samples * sample_tokens * 2 * target_params / (n * flops * plan.mfu)
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
        "device": device,
        "accelerate": plan.accelerate,
        "strategy": launch.strategy,
        "target_sharding": sharding,
        "processes": n,
        "mixed_precision": launch.mixed_precision,
        "memory_per_gpu": {k: int(v) for k, v in memory.items()},
        "memory_per_gpu_total": int(total),
        "gpu_memory": int(capacity),  # a GPU's (GB as GPU vendors count), or this machine's RAM on a CPU
        "fits": total * (n if device == "cpu" else 1) <= capacity,  # a CPU's processes share its RAM
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


def count(n: float, unit: str = "") -> str:
    """A count in the unit that says something: 840 tokens, 23.0 k tokens, 1.2 M tokens, 3.40 B tokens."""
    for scale, prefix in ((1e9, "B"), (1e6, "M"), (1e3, "k")):
        if n >= scale:
            return f"{n / scale:.{2 if scale == 1e9 else 1}f} {prefix} {unit}".rstrip()
    return f"{n:.0f} {unit}".rstrip()


def size(b: float) -> str:
    """Bytes in the unit that says something: 512 B, 12.0 MB, 3.1 GB, 1.20 TB."""
    for scale, unit in ((1e12, "TB"), (1e9, "GB"), (1e6, "MB"), (1e3, "kB")):
        if b >= scale:
            return f"{b / scale:.{2 if scale == 1e12 else 1}f} {unit}"
    return f"{b:.0f} B"


def duration(hours: float) -> str:
    """A time in the unit that says something: 40 s, 12 min, 3.5 h."""
    seconds = hours * 3600
    return f"{seconds:.0f} s" if seconds < 60 else f"{seconds / 60:.0f} min" if seconds < 3600 else f"{hours:.1f} h"


MEASURED_RATE = ", at this CPU's measured matmul rate"


def render_plan(p: dict) -> str:
    """The plan as the lines `dry_run=true` prints."""

    def gib(b: float) -> str:
        return f"{b / GIB:8.1f} GiB" if b >= GIB / 10 else f"{b / 2**20:8.1f} MiB"

    cpu = p["device"] == "cpu"
    precision = {"bf16": "bf16", "fp16": "fp16", "no": "fp32"}.get(p["mixed_precision"], p["mixed_precision"])

    lines = [
        f"plan for recipe {p['recipe']}: {p['drafter_kind']} drafter ({count(p['drafter_params'], 'params')}, "
        f"{count(p['drafter_trainable_params'])} trained) "
        f"on {p['target']} ({count(p['target_params'], 'params')}, {p['target_dtype']})",
        f"launch: {p['strategy']}"
        + (f" ({p['accelerate']})" if p["accelerate"] != p["strategy"] else "")
        + f", {p['processes']} process(es) on {'this CPU' if cpu else 'GPUs'}, training in {precision}; frozen target: "
        + SHARDING_WORDS[p["target_sharding"]].format(n=p["processes"]),
        "memory (this machine's RAM, all processes):" if cpu else "memory per GPU:",
        *(f"  {k:<20}{gib(v * (p['processes'] if cpu else 1))}" for k, v in p["memory_per_gpu"].items()),
        f"  {'total':<20}{gib(p['memory_per_gpu_total'] * (p['processes'] if cpu else 1))}  of "
        f"{p['gpu_memory'] / GIB:.1f} GiB: " + ("fits" if p["fits"] else "DOES NOT FIT"),
        f"data: {p['samples']} samples, ≤ {p['tokens_per_sample_max']} tokens each; "
        f"distillation generates ≤ {count(p['distill_generated_tokens_max'], 'tokens')}",
        f"training: {p['steps']} steps, ≤ {count(p['train_tokens_max'], 'tokens')}, {p['epochs']:.2f} epochs",
    ]
    if p["features"] is not None:
        where = {
            "offline": "written once (drafter.features=offline)",
            "vllm": "written once by vLLM before training (drafter.features=vllm, data.tensor_parallel_size GPUs)",
        }.get(p["features"], "not written (drafter.features=online; offline or vllm would need this much disk)")
        lines.append(f"offline features: ≤ {size(p['offline_feature_bytes'])}, {where}")
    lines.append(
        f"time (roofline estimate{MEASURED_RATE if cpu else ''}): "
        f"distillation {duration(p['distill_hours'])}, training {duration(p['train_hours'])}"
    )
    if not p["fits"] and cpu:
        lines.append(
            "does not fit in this machine's RAM: lower trainer.batch_size or trainer.max_seq_len, or plan for GPUs "
            "(plan.device=gpu) and train there"
        )
    elif not p["fits"] and p["memory_per_gpu"]["target_weights"] >= p["gpu_memory"]:
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
