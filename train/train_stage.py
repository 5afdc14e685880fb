"""The train stage: the family's training setup (train/setups.py) on the shared accelerate loop,
ending in the family's native checkpoint at checkpoints/final (no serving settings in it)."""

from __future__ import annotations

import json
import time
from dataclasses import replace

import torch

from distill.shards import atomic_write_text, load_distilled
from distill.target import load_target, load_tokenizer
from train.errors import PipelineError
from train.loop import assign_state, build_accelerator, full_state_dict, launched_processes, train_loop
from train.run_dir import read_json
from train.setup_base import TrainContext
from train.setups import training_setup
from train.stage import Run

SUMMARY = "train_summary.json"


def training_data(cfg, samples: int) -> dict:
    """What produced a τ: the data's size and source and the training policy (for reports and cards)."""
    trainer = cfg.trainer
    policy = trainer.policy if trainer.policy == "off_policy" else f"on_policy (λ = {trainer.on_policy_fraction:g})"
    return {
        "samples": samples,
        "source": "the target's answers" if cfg.data.source == "target" else "raw corpus text",
        "policy": policy,
        "optimizer_steps": trainer.max_steps,
        "sequences_per_step": trainer.batch_size * trainer.grad_accum,
    }


def train_stage(run: Run) -> dict:
    """Train (or resume) the drafter; return the summary saved next to the final checkpoint."""
    cfg, paths = run.cfg, run.paths
    done = read_json(paths.final / SUMMARY)
    if done and done["stage_hash"] == run.stage_hash:
        return done
    processes = launched_processes()
    if cfg.trainer.batch_size % processes:
        raise PipelineError(
            f"trainer.batch_size={cfg.trainer.batch_size} is the global batch and must split evenly over {processes} "
            f"processes; make it a multiple of {processes}"
        )
    setup = training_setup(cfg.drafter.kind)
    # First, so that under `accelerate launch` every process waits here until the main one has distilled.
    accelerator = build_accelerator(cfg.trainer, paths.root)
    device = accelerator.device if accelerator.num_processes > 1 else run.device  # each process's own GPU (or the CPU)
    tokenizer = load_tokenizer(cfg.target)
    target = load_target(cfg.target, device)
    ctx = TrainContext(cfg, target, tokenizer, load_distilled(paths.data), paths, device, accelerator.process_index)
    torch.manual_seed(cfg.trainer.seed)  # the fresh drafter's initial weights
    t0 = time.perf_counter()  # preparing counts: a vocabulary, offline features or a layer search is training cost
    prepared = setup.prepare(ctx)
    parameters = sum(p.numel() for p in prepared.drafter.parameters())  # before ZeRO-3 partitions them
    trainer = cfg.trainer if prepared.steps is None else replace(cfg.trainer, max_steps=prepared.steps)
    metrics = train_loop(
        accelerator,
        trainer,
        prepared.drafter,
        prepared.objective,
        prepared.dataset,
        pad_token_id=tokenizer.pad_token_id,
        ckpt_dir=paths.checkpoints,
        config_dict={"drafter": run.cfg_dict["drafter"], "trainer": run.cfg_dict["trainer"]},
        select=prepared.select,
    )
    summary = {
        "stage_hash": run.stage_hash,
        "metrics": metrics,
        "seconds": round(time.perf_counter() - t0, 1),
        "optimizer_steps": trainer.max_steps,  # 0: nothing was fitted (a layer skip set found by search alone)
        "parameters": parameters,
        "processes": accelerator.num_processes,
        "training_data": training_data(cfg, len(prepared.dataset)),
    }
    state = full_state_dict(accelerator, prepared.drafter)  # all processes: ZeRO-3 gathers the shards
    if accelerator.is_main_process:
        drafter = accelerator.unwrap_model(prepared.drafter)
        assign_state(drafter, state)
        summary |= setup.finish(drafter, prepared, ctx)
        drafter.save_pretrained(paths.final)
        atomic_write_text(paths.final / SUMMARY, json.dumps(summary, indent=2))
    accelerator.wait_for_everyone()
    accelerator.end_training()  # trackers and, when launched, the process group: later stages run on the main process
    return summary
