"""Stage orchestration for `python -m train`: distill → train → eval → publish in one run dir.

Each stage records the hash of everything that determines its output, chained so that a stage's
output stays valid while everything upstream is unchanged; a rerun skips a stage whose output
carries the current hash, so a crashed run resumes instead of restarting. The stages themselves
live in train/{train,eval,publish}_stage.py (distill: distill/stage/run.py); the run directory in
train/stages/run_dir.py.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from contextlib import ExitStack, contextmanager, nullcontext
from typing import Iterator, Optional

import torch
from omegaconf import DictConfig, OmegaConf

from distill.inputs import hub_commit, source_identity
from distill.lock import exclusive
from distill.prompts.chat import template_text
from distill.stage.manifest import config_hash as distill_hash
from distill.stage.manifest import model_identity, read_manifest, why_redistil
from distill.stage.run import distill
from distill.stage.shards import load_distilled
from distill.targets.heads import load_target_heads
from eval.config import EvalConfig
from heads.families import get_family
from heads.formats.staging import atomic_write_text
from heads.settings import output_settings
from train.config import PublishConfig, RunConfig, TrainerConfig
from train.errors import PipelineError
from train.setups import training_setup
from train.setups.base import vllm_store
from train.stages.continuation import continued_dataset, plan_continuation
from train.stages.eval import eval_stage, eval_stages, headline
from train.stages.preflight import check_run, check_stage_inputs
from train.stages.publish import publish_stage
from train.stages.run import Run
from train.stages.run_dir import RunPaths, adopt_dataset, check_ownership, clean_debris, find_dataset, resolve_run_dir
from train.stages.train import train_stage

__all__ = ["PipelineError", "resolve_run_dir", "run_pipeline"]


def _hash(*parts) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:16]


def stage_hashes(cfg: RunConfig, cfg_dict: dict) -> dict[str, str]:
    """Each stage's hash, chained over its upstream stages and its own settings (NO_EFFECT fields left out).

    A training-free family's "train" hash is its settings alone: trainer settings don't touch it."""
    data = distill_hash(cfg.target, cfg.data)
    trainer = output_settings(TrainerConfig, cfg_dict["trainer"]) if get_family(cfg.drafter.kind).trainable else None
    init = getattr(cfg.drafter, "init", None)  # a draft LM's starting weights, by content: a changed init retrains
    drafter = (cfg_dict["drafter"], model_identity(init)) if init else (cfg_dict["drafter"],)
    train = _hash(data, *drafter, trainer) if trainer is not None else _hash(data, *drafter)
    eval_inputs = (
        cfg.eval_split,
        cfg.eval_prompts,
        cfg.eval_prompts_column,
        source_identity(cfg.eval_prompts) if cfg.eval_prompts else None,
    )
    # the eval stage writes the export, so the optional engine layouts it adds (publish.engines) are its inputs
    layouts = [sorted(cfg.publish.engines)] if cfg.publish.engines else []
    evaluation = _hash(train, output_settings(EvalConfig, cfg_dict["eval"]), *eval_inputs, *layouts)
    return {
        "distill": data,
        "train": train,
        "eval": evaluation,
        "publish": _hash(evaluation, output_settings(PublishConfig, cfg_dict["publish"])),
    }


def distill_stage(run: Run) -> dict:
    """The target's answers; with drafter.features=vllm also their features, while this process holds the GPUs."""
    _reuse_or_announce(run)
    summary = distill(run.cfg.target, run.cfg.data, run.paths.data, run.device)
    family = get_family(run.cfg.drafter.kind)
    setup = training_setup(family.kind) if family.trainable else None
    if setup and setup.feature_ids and run.cfg.drafter.features == "vllm":
        heads = load_target_heads(run.cfg.target)
        layer_ids = setup.feature_ids(run.cfg.drafter, heads.config)
        root = vllm_store(run.cfg, run.paths.data, heads, load_distilled(run.paths.data), layer_ids)
        summary = summary | {"features": str(root)}
    return summary


def _reuse_or_announce(run: Run) -> None:
    """Say in one line why the dataset is reused or distilled; adopt another run's identical dataset."""
    data, digest = run.paths.data, run.stage_hash
    manifest = read_manifest(data)
    if manifest and manifest["config_hash"] == digest:
        then, now = manifest.get("target_commit"), hub_commit(run.cfg.target.name_or_path, run.cfg.target.revision)
        if then and now and then != now:
            raise PipelineError(
                f"{data} was distilled from {run.cfg.target.name_or_path} at commit {then}, which now resolves to "
                f"{now}; set target.revision={then} to reuse it, or give this run its own run_dir=PATH"
            )
        print(f"[distill] reusing {data}: distilled from these prompts, target and settings (hash {digest})")
    elif manifest:
        why = why_redistil(manifest, run.cfg.target, run.cfg.data)
        raise PipelineError(
            f"{data} was distilled from other inputs or settings ({why}); give this run its own run_dir=PATH "
            "(the old dataset is kept), or move that data/ away to distil here"
        )
    elif (data / "fingerprint.json").exists():
        print(f"[distill] resuming the unfinished dataset in {data} (hash {digest})")
    elif continued_dataset(run.cfg, data, digest):
        pass
    elif (other := find_dataset(digest, data, run.cfg.data)) is not None:
        adopt_dataset(other, data)
        print(f"[distill] reusing the dataset of {other}: same prompts, target and settings (hash {digest})")
    else:
        print(f"[distill] distilling: no finished dataset with these prompts, target and settings (hash {digest})")


STAGE_RUNNERS = {"distill": distill_stage, "train": train_stage, "eval": eval_stage, "publish": publish_stage}


def _main_process() -> bool:
    return int(os.environ.get("RANK", "0")) == 0


def device_of(cfg: RunConfig) -> torch.device:
    return torch.device(cfg.device if cfg.device != "auto" else ("cuda" if torch.cuda.is_available() else "cpu"))


def eval_together(configs: list[DictConfig]) -> list[dict]:
    """The eval stage of several runs at once (a bake-off's contenders, trained by their own runs): one target,
    one set of prompts, one baseline for all (train/stages/eval.py: eval_stages). Each report lands in its own run
    directory, where that run's eval stage then finds it valid."""
    with ExitStack() as locks:
        runs = []
        for config in configs:
            cfg: RunConfig = OmegaConf.to_object(config)
            check_run(cfg)
            cfg_dict = OmegaConf.to_container(config, resolve=True)
            paths = RunPaths(resolve_run_dir(cfg, cfg_dict))
            locks.enter_context(exclusive(paths.root, "run directory"))
            check_ownership(paths, cfg_dict)
            hashes = stage_hashes(cfg, cfg_dict)
            runs.append(Run(cfg, cfg_dict, paths, device_of(cfg), hashes["eval"], hashes))
        t0 = time.perf_counter()
        reports = eval_stages(runs)
        print(f"[eval] together: done in {time.perf_counter() - t0:.1f}s")
        return reports


def resolve_run(config) -> tuple[DictConfig, RunConfig, Optional[dict]]:
    """The run's settings (a Hydra DictConfig or a RunConfig), a template file read into them and every setting
    checked (preflight); with dry_run=true also the plan, printed (the run then stops: its result, else None)."""
    dict_config = config if isinstance(config, DictConfig) else OmegaConf.structured(config)
    if dict_config.target.chat_template:  # a template file: its text, in the settings the run hashes and records
        dict_config.target.chat_template = template_text(dict_config.target.chat_template)
    cfg: RunConfig = OmegaConf.to_object(dict_config)
    check_run(cfg)  # one error line before any work
    if cfg.dry_run and not get_family(cfg.drafter.kind).trainable:
        print(
            f"plan for recipe {cfg.recipe_name}: {cfg.drafter.kind} is training-free; there is nothing to train or plan"
        )
        return dict_config, cfg, {"plan": {"fits": True}}
    if cfg.dry_run:  # before anything touches the disk, the network or an engine
        from train.planner import plan_run, render_plan

        plan = plan_run(cfg)
        print(render_plan(plan))
        return dict_config, cfg, {"plan": plan}
    return dict_config, cfg, None


@contextmanager
def run_directory(dict_config: DictConfig, cfg: RunConfig) -> Iterator[tuple[dict, RunPaths]]:
    """The run's directory, held for the run (one run per directory: the main process holds the lock, launched
    peers are the same run), refused where another run owns it, its debris cleared, its inputs no earlier stage
    writes present, and its resolved config written; yields the resolved settings and the paths."""
    cfg_dict = OmegaConf.to_container(dict_config, resolve=True)
    continuation = plan_continuation(cfg, cfg_dict)  # the earlier run's settings and checkpoints, before any stage
    paths = RunPaths(resolve_run_dir(cfg, cfg_dict))
    if continuation and continuation.source.root.resolve() == paths.root.resolve():
        raise PipelineError(
            f"trainer.continue_from is this run's own directory {paths.root}; a continuation writes a run of its "
            "own: leave run_dir unset, or give another"
        )
    with exclusive(paths.root, "run directory") if _main_process() else nullcontext():
        if _main_process():
            check_ownership(paths, cfg_dict)  # before anything is written: another run's directory is refused
            clean_debris(paths.root)
            if not cfg.bakeoff.recipes:  # each contender's run checks its own
                hashes = stage_hashes(cfg, cfg_dict)
                check_stage_inputs(Run(cfg, cfg_dict, paths, device_of(cfg), hashes["eval"], hashes))
            # The main process alone writes the resolved config (its launched peers hold the same one): a peer's
            # temporary file could otherwise be taken for a killed write's and removed by clean_debris above.
            config_text = OmegaConf.to_yaml(dict_config)
            if not paths.config.exists() or paths.config.read_text() != config_text:  # a finished run: nothing
                paths.config.parent.mkdir(parents=True, exist_ok=True)
                atomic_write_text(paths.config, config_text)
        print(f"run directory: {paths.root}")
        yield cfg_dict, paths


def run_pipeline(config) -> dict:
    """Run the stages of `config` (a Hydra DictConfig or a RunConfig) in order; return {stage: summary}. A bake-off
    (bakeoff.recipes) is run by train/bakeoff/run.py, which drives this for each contender."""
    dict_config, cfg, planned = resolve_run(config)
    if planned is not None:
        return planned
    if cfg.bakeoff.recipes:
        raise PipelineError(
            f"bakeoff.recipes={cfg.bakeoff.recipes} makes this run a bake-off: run it with `python -m train` "
            "(train.bakeoff.run.run_bakeoff), which runs each contender's pipeline"
        )
    with run_directory(dict_config, cfg) as (cfg_dict, paths):
        return _run_stages(cfg, cfg_dict, paths)


def _run_stages(cfg: RunConfig, cfg_dict: dict, paths: RunPaths) -> dict:
    device, hashes = device_of(cfg), stage_hashes(cfg, cfg_dict)
    trainable = get_family(cfg.drafter.kind).trainable
    results = {}
    for stage in cfg.stages:
        if stage != "train" and not _main_process():
            continue  # only training is data parallel; the main process distils, evaluates and publishes
        if stage == "train" and not trainable:
            print(f"[train] skipped: {cfg.drafter.kind} is training-free")
            results[stage] = {"skipped": "training-free", "seconds": 0.0, "parameters": 0, "optimizer_steps": 0}
            continue
        t0 = time.perf_counter()
        results[stage] = STAGE_RUNNERS[stage](Run(cfg, cfg_dict, paths, device, hashes[stage], hashes))
        print(f"[{stage}] done in {time.perf_counter() - t0:.1f}s")
    if "eval" in results:  # the run ends on what the drafter achieved, after publish has spoken too
        print(headline(results["eval"], paths))
    return results
