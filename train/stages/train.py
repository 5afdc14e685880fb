"""The train stage: the family's training setup (train/setups/__init__.py) on the shared accelerate loop,
ending in the family's native checkpoint at checkpoints/final (no serving settings in it)."""

from __future__ import annotations

import json
import time
from dataclasses import replace

import torch
from accelerate.utils import DistributedType

from distill.stage.shards import load_distilled
from distill.targets import resolve_target
from distill.targets.heads import load_target_heads
from distill.targets.load import load_tokenizer, padding_id
from heads.formats.staging import atomic_write_text, staged_directory
from train.data import LengthCut, length_cut
from train.distributed import assign_state, build_accelerator, check_batch_split, full_state_dict, launched_processes
from train.errors import PipelineError
from train.loop import train_loop
from train.setups import training_setup
from train.setups.base import TrainContext
from train.sharded_target import checked_sharding, full_bytes, held_bytes, load_training_target
from train.stages.continuation import plan_continuation, seed_checkpoints
from train.stages.run import Run
from train.stages.run_dir import read_json

SUMMARY = "train_summary.json"


def training_data(cfg, samples: int, answer_tokens: int = 0) -> dict:
    """What produced a τ: the data's size and source and the training policy (for reports and cards).

    answer_tokens: the trained-on (loss-masked) tokens of those samples; tokens seen = steps × sequences per step ×
    their mean per sample, the x axis of a learning curve."""
    trainer = cfg.trainer
    policy = trainer.policy if trainer.policy == "off_policy" else f"on_policy (λ = {trainer.on_policy_fraction:g})"
    per_sample = answer_tokens / samples if samples else 0.0
    return {
        "samples": samples,
        "answer_tokens": answer_tokens,
        "answer_tokens_seen": round(trainer.max_steps * trainer.batch_size * trainer.grad_accum * per_sample),
        "source": _source(cfg.data),
        "policy": policy,
        "optimizer_steps": trainer.max_steps,
        "sequences_per_step": trainer.batch_size * trainer.grad_accum,
    }


def _source(data) -> str:
    if data.source == "corpus":
        return "raw corpus text"
    return "the target's answers" if data.regenerate else "the dataset's own answers"


def _answer_tokens(dataset) -> int:
    """The loss-masked tokens of what training iterates over (0 where it is no table with a loss mask)."""
    try:
        return int(sum(map(sum, dataset["loss_mask"])))
    except (KeyError, TypeError):
        return 0


def check_length_cut(cut: LengthCut, max_share: float) -> None:
    """Answer tokens past trainer.max_seq_len are never trained on: refused when they are more than
    trainer.max_cut_share of the data (a setting kept from shorter data), said in one line otherwise."""
    if cut.share > max_share:
        raise PipelineError(cut.message())
    if cut.answer_tokens_cut:
        print(f"[train] warning: {cut.message()}", flush=True)


def launcher(accelerator) -> str:
    """deepspeed_zero3 | fsdp | other: what `accelerate launch` set up, for trainer.target_sharding=auto."""
    if accelerator.distributed_type == DistributedType.DEEPSPEED:
        stage = accelerator.state.deepspeed_plugin.deepspeed_config.get("zero_optimization", {}).get("stage")
        return "deepspeed_zero3" if stage == 3 else "deepspeed"
    return "fsdp" if accelerator.distributed_type == DistributedType.FSDP else "other"


def _loadable_init(cfg):
    """The run's settings with a drafter.init alias (`toyworld:chat/draft`) as the directory it names."""
    init = getattr(cfg.drafter, "init", None)
    return replace(cfg, drafter=replace(cfg.drafter, init=resolve_target(init))) if init else cfg


def train_stage(run: Run) -> dict:
    """Train (or resume) the drafter; return the summary saved next to the final checkpoint."""
    cfg, paths = run.cfg, run.paths
    done = read_json(paths.final / SUMMARY)
    if done and done["stage_hash"] == run.stage_hash:
        return done
    processes = launched_processes()
    check_batch_split(cfg.trainer.batch_size, processes)  # preflight said so too: a peer may see another WORLD_SIZE
    dataset = load_distilled(paths.data)
    check_length_cut(length_cut(dataset, cfg.trainer.max_seq_len), cfg.trainer.max_cut_share)
    setup = training_setup(cfg.drafter.kind)
    # First, so that under `accelerate launch` every process waits here until the main one has distilled.
    accelerator = build_accelerator(cfg.trainer, paths.root)
    device = accelerator.device if accelerator.num_processes > 1 else run.device  # each process's own GPU (or the CPU)
    tokenizer = load_tokenizer(cfg.target)
    config_dict = {"drafter": run.cfg_dict["drafter"], "trainer": run.cfg_dict["trainer"]}
    continuation = plan_continuation(cfg, run.cfg_dict)
    if continuation:
        print(f"[train] {continuation.describe()}", flush=True)
        if accelerator.is_main_process:
            seed_checkpoints(continuation, paths.checkpoints, config_dict)
        accelerator.wait_for_everyone()
    if setup.feature_ids and cfg.drafter.features == "vllm":  # vLLM computes the features: no decoder layer here
        sharding, target = "heads only", load_target_heads(cfg.target, device)
    else:
        sharding = checked_sharding(
            cfg.trainer.target_sharding,
            accelerator.num_processes,
            launcher(accelerator),
            cfg.drafter.kind,
            setup.whole_target_only,
        )
        target = load_training_target(cfg.target, device, sharding, accelerator.num_processes)
    ctx = TrainContext(
        _loadable_init(cfg),
        target,
        tokenizer,
        dataset,
        paths,
        device,
        accelerator.process_index,
        barrier=accelerator.wait_for_everyone,
        start_weights=continuation.checkpoint / "model.safetensors" if continuation else None,
        start_config=(read_json(continuation.source.final / "config.json") or {}) if continuation else {},
    )
    torch.manual_seed(cfg.trainer.seed)  # the fresh drafter's initial weights
    t0 = time.perf_counter()  # preparing counts: a vocabulary, offline features or a layer search is training cost
    prepared = setup.prepare(ctx)
    parameters = sum(p.numel() for p in prepared.drafter.parameters())  # before ZeRO-3 partitions them
    trainer = cfg.trainer if prepared.steps is None else replace(cfg.trainer, max_steps=prepared.steps)
    metrics, trained = train_loop(
        accelerator,
        trainer,
        prepared.drafter,
        prepared.objective,
        prepared.dataset,
        pad_token_id=padding_id(tokenizer),
        ckpt_dir=paths.checkpoints,
        config_dict=config_dict,
        select=prepared.select,
    )
    summary = {
        "stage_hash": run.stage_hash,
        "metrics": metrics,
        "seconds": round(time.perf_counter() - t0, 1),
        "optimizer_steps": trainer.max_steps,  # 0: nothing was fitted (a layer skip set found by search alone)
        "parameters": parameters,
        "processes": accelerator.num_processes,
        # what each process held of the frozen target: its share when sharded, all of it when replicated,
        # its embeddings, final norm and lm_head with features from vLLM
        "target": {"sharding": sharding, "bytes_per_process": held_bytes(target), "bytes": full_bytes(target)},
        "training_data": training_data(
            replace(cfg, trainer=trainer), len(prepared.dataset), _answer_tokens(prepared.dataset)
        ),
    }
    if continuation:
        published = read_json(continuation.source.published) or {}  # the version it extends, where published
        summary["continued_from"] = {
            "run": str(continuation.source.root),
            "step": continuation.step,
            "published": published.get("registry") or published.get("hub"),
        }
    state = full_state_dict(accelerator, trained)  # all processes: ZeRO-3 gathers the shards
    if accelerator.is_main_process:
        drafter = accelerator.unwrap_model(trained)
        assign_state(drafter, state)
        summary |= setup.finish(drafter, prepared, ctx)
        with staged_directory(paths.final) as staged:  # whole or not at all: a full disk leaves the old final as it was
            drafter.save_pretrained(staged)
            atomic_write_text(staged / SUMMARY, json.dumps(summary, indent=2))
    accelerator.wait_for_everyone()
    accelerator.end_training()  # trackers and, when launched, the process group: later stages run on the main process
    return summary
