"""Stage orchestration for `python -m train`: distill → train → eval → publish in one run dir.

Each stage records the hash of everything that determines its output; a rerun skips a stage
whose output carries the current hash, so a crashed run resumes instead of restarting.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path

import torch
from omegaconf import DictConfig, OmegaConf

from distill.chat import encode_prompt, prompt_messages, tokenizer_hash
from distill.feature_store import FeatureStore, store_dir, write_features
from distill.prompts import load_conversations
from distill.run import distill, config_hash as distill_hash
from distill.shards import load_distilled, atomic_write_text
from distill.target import eos_token_ids, load_target, load_tokenizer, resolve_target, toyworld_prompts
from eval.drafters import load_proposer
from eval.run import check_settings, evaluate
from eval.served import served_hook, vllm_missing_reason
from heads.draft_lm import DraftLM
from heads.eagle import Eagle3Drafter
from heads.eagle1 import Eagle1Drafter
from heads.formats.fingerprint import served_files_hash
from heads.formats.staging import replace_directory
from heads.medusa import MedusaHeads
from heads.vocab import build_draft_vocab, token_counts
from train.config import STAGES, RunConfig
from train.export import SUMMARY, exported_gamma, export_drafter
from train.local_hub import publish_local
from train.publish import PublishError, check_publishable, check_report, push_to_hub
from train.calibration import calibrate_medusa
from train.losses import LOSSES
from train.data import collate
from train.loop import assign_state, best_weights, build_accelerator, full_state_dict, launched_processes, train_loop
from train.objectives import DraftLMDistillation, Eagle1Distillation, Eagle3TrainingTimeTest, MedusaDistillation



class PipelineError(ValueError):
    """Bad run setup (stages, run directory, publish gate): message names problem and fix."""


def _hash(*parts) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:16]


@dataclass(frozen=True)
class RunPaths:
    """Where each stage writes inside a run directory (ARCHITECTURE: Run directory)."""

    root: Path

    @property
    def data(self) -> Path:
        return self.root / "data"

    @property
    def checkpoints(self) -> Path:
        return self.root / "checkpoints"

    @property
    def final(self) -> Path:
        return self.checkpoints / "final"

    @property
    def eval(self) -> Path:
        return self.root / "eval"

    @property
    def drafter(self) -> Path:
        return self.root / "drafter"


def _identity(cfg: dict) -> dict:
    """The config minus keys that don't change results (where and which stages run)."""
    return {k: v for k, v in cfg.items() if k not in ("run_dir", "new_run", "stages", "device", "dry_run", "plan")}


def _main_process() -> bool:
    return int(os.environ.get("RANK", "0")) == 0


def resolve_run_dir(cfg: RunConfig, cfg_dict: dict) -> Path:
    """run_dir if set; else the latest runs/<recipe>/* with the same config; else a new one."""
    if cfg.run_dir:
        return Path(cfg.run_dir)
    if launched_processes() > 1:  # timestamps could differ between processes
        raise PipelineError(f"{launched_processes()} processes were launched without run_dir; set run_dir=PATH so that every process uses the same run directory")
    base = Path("runs") / cfg.recipe_name
    if not cfg.new_run and base.exists():
        for prev in sorted(base.iterdir(), reverse=True):
            saved = prev / ".hydra" / "config.yaml"
            if saved.exists() and _identity(OmegaConf.to_container(OmegaConf.load(saved))) == _identity(cfg_dict):
                print(f"reusing run {prev} (same config; new_run=true starts afresh)")
                return prev
    return base / time.strftime("%Y%m%d-%H%M%S")


def run_pipeline(config) -> dict:
    """Run the stages of `config` (a Hydra DictConfig or a RunConfig) in order; return {stage: summary}."""
    dict_config = config if isinstance(config, DictConfig) else OmegaConf.structured(config)
    cfg: RunConfig = OmegaConf.to_object(dict_config)
    unknown = [s for s in cfg.stages if s not in STAGES]
    if unknown:
        raise PipelineError(f"unknown stage(s) {unknown}; stages are {list(STAGES)}")
    if cfg.trainer.loss not in LOSSES:  # checked before any stage runs, so no work is wasted on a typo
        raise PipelineError(f"trainer.loss={cfg.trainer.loss!r} is not a loss; use one of {list(LOSSES)}")
    check_settings(cfg.eval)
    if cfg.dry_run:  # before anything touches the disk, the network or an engine
        from train.planner import plan_run, render_plan

        plan = plan_run(cfg)
        print(render_plan(plan))
        return {"plan": plan}
    if cfg.bakeoff.serve not in ("auto", "off"):
        raise PipelineError(f"bakeoff.serve={cfg.bakeoff.serve!r}; use auto (served check where vLLM is installed) or off")
    unknown = sorted(set(cfg.bakeoff.overrides) - {"all", *cfg.bakeoff.recipes})
    if unknown:
        raise PipelineError(f"bakeoff.overrides has {unknown}, which are not contenders; use 'all' or one of bakeoff.recipes={cfg.bakeoff.recipes}")
    if cfg.eval.serve and vllm_missing_reason():
        raise PipelineError(f"eval.serve=vllm: {vllm_missing_reason()}, or set eval.serve=null")
    if cfg.drafter.kind == "medusa":
        _check_medusa(cfg)
    if cfg.drafter.kind in ("eagle3", "eagle1"):
        _check_eagle(cfg)
    cfg_dict = OmegaConf.to_container(dict_config, resolve=True)
    paths = RunPaths(resolve_run_dir(cfg, cfg_dict))
    (paths.root / ".hydra").mkdir(parents=True, exist_ok=True)
    atomic_write_text(paths.root / ".hydra" / "config.yaml", OmegaConf.to_yaml(dict_config))
    print(f"run directory: {paths.root}")
    device = torch.device(cfg.device if cfg.device != "auto" else ("cuda" if torch.cuda.is_available() else "cpu"))
    if cfg.bakeoff.recipes:
        from train.bakeoff import run_bakeoff

        return {"bakeoff": run_bakeoff(dict_config, run_pipeline, paths.root, device)}

    # Hashes chain: a stage's output is valid while everything upstream is unchanged.
    h_data = distill_hash(cfg.target, cfg.data)
    h_train = _hash(h_data, cfg_dict["drafter"], {k: v for k, v in cfg_dict["trainer"].items() if k not in ("resume", "log_every", "log_with", "save_every", "keep_last")})
    h_eval = _hash(h_train, cfg_dict["eval"], cfg.eval_split, cfg.eval_prompts)
    h_publish = _hash(h_eval, cfg_dict["publish"])
    results = {}
    for stage in cfg.stages:
        if stage != "train" and not _main_process():
            continue  # only training is data parallel; the main process distils, evaluates and publishes
        t0 = time.perf_counter()
        if stage == "distill":
            results[stage] = distill(cfg.target, cfg.data, paths.data, device)
        elif stage == "train":
            results[stage] = _train_stage(cfg, cfg_dict, paths, device, h_train)
        elif stage == "eval":
            results[stage] = _eval_stage(cfg, cfg_dict, paths, device, h_eval)
        elif stage == "publish":
            results[stage] = _publish_stage(cfg, cfg_dict, paths, h_publish)
        print(f"[{stage}] done in {time.perf_counter() - t0:.1f}s")
    return results


def _hold_out(dataset, count: int, batch_size: int, key: str):
    """(training part, last `count` samples), refusing a split that leaves less than one batch to train on."""
    if count > len(dataset) - batch_size:
        raise PipelineError(f"{key}={count} must leave ≥ trainer.batch_size={batch_size} of the {len(dataset)} distilled samples for training; lower it")
    return dataset.select(range(len(dataset) - count)), dataset.select(range(len(dataset) - count, len(dataset)))


def _offline_features(cfg: RunConfig, target, dataset, paths: RunPaths, layer_ids: list[int]):
    """drafter.features=offline: write the features once (resumable) and return their store; else None."""
    if cfg.drafter.features != "offline":
        return None
    root = store_dir(paths.data, layer_ids, cfg.target.name_or_path)
    write_features(target, dataset, root, layer_ids, batch_size=cfg.trainer.batch_size)
    return FeatureStore(root)


def _sim_tau_selector(objective, dataset, start: int, pad_token_id: int, trainer, device):
    """model → mean simulated τ of the objective over dataset rows start… (fixed batches)."""
    rows = list(range(start, len(dataset)))
    batches = []
    for i in range(0, len(rows), trainer.batch_size):
        chunk = rows[i : i + trainer.batch_size]
        part = dataset[chunk]
        batches.append(collate(part["input_ids"], part["loss_mask"], trainer.max_seq_len, pad_token_id) | {"rows": torch.tensor(chunk)})

    def select(model) -> float:
        scores = [objective(model, {k: v.to(device) for k, v in b.items()})[1]["sim_tau"] for b in batches]
        return float(torch.stack(scores).mean())

    return select


def _verifier(cfg: RunConfig, target) -> dict:
    """The speculators `verifier` entry: the target as users name it, and its architectures."""
    return {"name_or_path": cfg.target.name_or_path, "architectures": list(getattr(target.config, "architectures", None) or [])}


def _check_medusa(cfg: RunConfig) -> None:
    """Settings that would otherwise fail only after training."""
    d = cfg.drafter
    for key in ("num_heads", "num_layers", "tree_nodes", "tree_topk"):
        if getattr(d, key) < 1:
            raise PipelineError(f"drafter.{key}={getattr(d, key)} must be ≥ 1")
    if not cfg.eval.tree and cfg.eval.num_speculative_tokens > d.num_heads:
        raise PipelineError(f"eval.num_speculative_tokens={cfg.eval.num_speculative_tokens} exceeds drafter.num_heads={d.num_heads}: Medusa proposes one token per head")
    if isinstance(cfg.eval.tree, list) and len(cfg.eval.tree) > d.num_heads:
        raise PipelineError(f"eval.tree={cfg.eval.tree} is {len(cfg.eval.tree)} deep but drafter.num_heads={d.num_heads}")


def _check_eagle(cfg: RunConfig) -> None:
    d = cfg.drafter
    if d.features not in ("online", "offline"):
        raise PipelineError(f"drafter.features={d.features!r}; use online (the target runs in each step) or offline (features written to disk once)")
    if d.ttt_steps < 1 or d.draft_vocab_size < 2:
        raise PipelineError(f"drafter.ttt_steps={d.ttt_steps} must be ≥ 1 and drafter.draft_vocab_size={d.draft_vocab_size} ≥ 2")
    if cfg.eval.tree not in (None, "dynamic"):
        raise PipelineError(f"eval.tree={cfg.eval.tree} is not an EAGLE tree; use null (chains) or dynamic (EAGLE-2)")


def _read_json(path: Path) -> dict | None:
    return json.loads(path.read_text()) if path.exists() else None


def _train_stage(cfg: RunConfig, cfg_dict: dict, paths: RunPaths, device, stage_hash: str) -> dict:
    done = _read_json(paths.final / SUMMARY)
    if done and done["stage_hash"] == stage_hash:
        return done
    if cfg.trainer.batch_size % launched_processes():
        raise PipelineError(f"trainer.batch_size={cfg.trainer.batch_size} is the global batch and must split evenly over {launched_processes()} processes; make it a multiple of {launched_processes()}")
    # First, so that under `accelerate launch` every process waits here until the main one has distilled.
    accelerator = build_accelerator(cfg.trainer, paths.root)
    if accelerator.num_processes > 1:
        device = accelerator.device  # each process's own GPU (or the CPU)
    tokenizer = load_tokenizer(cfg.target)
    target = load_target(cfg.target, device)
    dataset = load_distilled(paths.data)
    trainer, kind, select = cfg.trainer, cfg.drafter.kind, None
    torch.manual_seed(trainer.seed)  # the fresh drafter's initial weights
    if kind == "draft_lm":
        drafter = DraftLM.from_config(cfg.drafter, target.config, tokenizer, cfg.target.trust_remote_code)
        objective = DraftLMDistillation(target, trainer.loss, len(tokenizer), trainer.jsd_beta, trainer.kd_temperature)
    elif kind == "medusa":
        if cfg.drafter.holdout_samples < 1:
            raise PipelineError(f"drafter.holdout_samples={cfg.drafter.holdout_samples} must be ≥ 1: the token tree is built from held-out accuracy")
        dataset, holdout_set = _hold_out(dataset, cfg.drafter.holdout_samples, trainer.batch_size, "drafter.holdout_samples")
        drafter = MedusaHeads.from_target(cfg.drafter, target)
        objective = MedusaDistillation(target, cfg.drafter.num_heads, trainer.loss, len(tokenizer), cfg.drafter.loss_decay, trainer.jsd_beta, trainer.kd_temperature)
    elif kind == "eagle3":
        counts = token_counts(dataset["input_ids"], dataset["loss_mask"], target.get_output_embeddings().weight.shape[0])
        vocab, vocab_report = build_draft_vocab(counts, cfg.drafter.draft_vocab_size, always=eos_token_ids(target, tokenizer))
        print(f"draft vocabulary: {vocab.size} tokens cover {vocab_report['coverage']:.1%} of the distilled answers' tokens")
        drafter = Eagle3Drafter.from_target(cfg.drafter, target, vocab)
        store = _offline_features(cfg, target, dataset, paths, drafter.arch.layer_ids)
        objective = Eagle3TrainingTimeTest(target, drafter.arch.layer_ids, vocab.draft_to_target, cfg.drafter.ttt_steps, cfg.drafter.step_decay, store)
        if cfg.drafter.select_samples:  # the last samples score each checkpoint; training never sees them
            train_part, _ = _hold_out(dataset, cfg.drafter.select_samples, trainer.batch_size, "drafter.select_samples")
            select = _sim_tau_selector(objective, dataset, len(train_part), tokenizer.pad_token_id, trainer, device)  # rows keep their dataset index (offline lookups)
            dataset = train_part
    elif kind == "eagle1":
        drafter = Eagle1Drafter.from_target(cfg.drafter, target)
        store = _offline_features(cfg, target, dataset, paths, [])  # only the lm_head inputs
        objective = Eagle1Distillation(target, len(tokenizer), cfg.drafter.feature_noise, cfg.drafter.cls_weight, store)
    else:
        raise PipelineError(f"drafter.kind={kind!r} is not trainable; use drafter=draft_lm, medusa, eagle3 or eagle1")
    parameters = sum(p.numel() for p in drafter.parameters())  # before ZeRO-3 partitions them
    t0 = time.perf_counter()
    metrics = train_loop(accelerator, trainer, drafter, objective, dataset, tokenizer.pad_token_id, paths.checkpoints, {"drafter": cfg_dict["drafter"], "trainer": cfg_dict["trainer"]}, select=select)
    summary = {"stage_hash": stage_hash, "metrics": metrics, "seconds": round(time.perf_counter() - t0, 1), "parameters": parameters, "processes": accelerator.num_processes}
    state = full_state_dict(accelerator, drafter)  # all processes: ZeRO-3 gathers the shards
    if accelerator.is_main_process:
        drafter = accelerator.unwrap_model(drafter)
        assign_state(drafter, state)
        if kind == "medusa":  # the token tree comes from accuracy on samples training never saw
            summary["medusa"] = calibrate_medusa(drafter.eval(), target, holdout_set, cfg.drafter.tree_topk, cfg.drafter.tree_nodes, len(tokenizer), tokenizer.pad_token_id, trainer.batch_size, trainer.max_seq_len)
        if kind == "eagle3":
            summary["draft_vocab"] = vocab_report
            best = best_weights(paths.checkpoints) if select else None
            if best:  # the checkpoint with the best simulated τ on held-out samples, not merely the last
                drafter.load_state_dict(best[0])
                summary["selected_checkpoint"] = best[1]
            drafter.save_pretrained(paths.final, _verifier(cfg, target), cfg.eval.num_speculative_tokens)
        else:
            drafter.save_pretrained(paths.final)
        atomic_write_text(paths.final / SUMMARY, json.dumps(summary, indent=2))
    accelerator.wait_for_everyone()
    accelerator.end_training()  # trackers and, when launched, the process group: later stages run on the main process
    return summary


def eval_prompt_ids(cfg: RunConfig, tokenizer, limit: int, max_len: int) -> list[list[int]]:
    """Held-out prompts as token ids through the target's chat template."""
    source = cfg.eval_prompts or cfg.data.prompts
    convs = load_conversations(source, cfg.eval_split, toyworld_prompts(cfg.target.name_or_path, cfg.eval_split))
    out = []
    for messages in convs:
        ids = encode_prompt(tokenizer, prompt_messages(messages))
        if len(ids) <= max_len:
            out.append(ids)
        if len(out) >= limit + cfg.eval.warmup_prompts:
            break
    return out


def _eval_stage(cfg: RunConfig, cfg_dict: dict, paths: RunPaths, device, stage_hash: str) -> dict:
    done = _read_json(paths.eval / "eval_report.json")
    if done and done.get("stage_hash") == stage_hash:
        return done
    if not (paths.final / SUMMARY).exists():
        raise PipelineError(f"no trained drafter in {paths.final}; run the train stage first")
    tokenizer = load_tokenizer(cfg.target)
    target = load_target(cfg.target, device)
    proposer, kind = load_proposer(paths.final, target, len(tokenizer), cfg.eval, device)
    lookahead = proposer.tree_depth or max([cfg.eval.num_speculative_tokens, *cfg.eval.gamma_sweep])
    max_len = target.config.max_position_embeddings - cfg.eval.max_new_tokens - lookahead - 1
    prompts = eval_prompt_ids(cfg, tokenizer, cfg.eval.num_prompts, max_len)
    eos = eos_token_ids(target, tokenizer)
    names = {"target": cfg.target.name_or_path, "drafter": str(paths.final), "kind": kind, "stage_hash": stage_hash, "checkpoint_sha256": served_files_hash(paths.final)}
    served = None
    if cfg.eval.serve:

        @contextmanager
        def fresh_export(report: dict):  # what publish will write, minus the served figures in its card
            with tempfile.TemporaryDirectory(prefix=".served-", dir=paths.root) as tmp:
                out = Path(tmp) / "drafter"
                provenance = _provenance(cfg, cfg_dict, paths, stage_hash, report, tokenizer)
                export_drafter(kind, paths.final, out, provenance, cfg.target, tokenizer, exported_gamma(report, cfg.eval.num_speculative_tokens))
                yield out

        def chain_proposer():
            return load_proposer(paths.final, target, len(tokenizer), replace(cfg.eval, tree=None), device)[0]

        served = served_hook(cfg.eval, target, resolve_target(cfg.target.name_or_path), kind, fresh_export, chain_proposer, eos, len(tokenizer), cfg.target.trust_remote_code)
    return evaluate(target, proposer, prompts, cfg.eval, eos, len(tokenizer), names, out_dir=paths.eval, served=served)


def _provenance(cfg: RunConfig, cfg_dict: dict, paths: RunPaths, stage_hash: str, report: dict, tokenizer) -> dict:
    """drafthub.json: where the drafter comes from and what it measured."""
    manifest = _read_json(paths.data / "manifest.json") or {}
    return {
        "stage_hash": stage_hash,
        "kind": cfg.drafter.kind,
        "model_name": cfg.publish.model_name or f"{cfg.recipe_name}-{cfg.drafter.kind}",
        "target": {"name_or_path": cfg.target.name_or_path, "revision": cfg.target.revision, "resolved": resolve_target(cfg.target.name_or_path)},
        "tokenizer_hash": tokenizer_hash(tokenizer),
        "data_manifest_hash": manifest.get("config_hash"),
        "recipe": cfg_dict,
        "eval": {k: v for k, v in report.items() if k != "stage_hash"},
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def _publish_stage(cfg: RunConfig, cfg_dict: dict, paths: RunPaths, stage_hash: str) -> dict:
    done = _read_json(paths.drafter / "drafthub.json")
    if done and done.get("stage_hash") == stage_hash:
        return done
    report = _read_json(paths.eval / "eval_report.json")
    check_report(report, cfg.publish.min_tau, str(paths.final))
    if report.get("checkpoint_sha256") != served_files_hash(paths.final):
        raise PipelineError(f"refusing to publish: {paths.final} changed after it was evaluated (stale eval report); re-run stages=[eval,publish]")
    served = report.get("served")
    tokenizer = load_tokenizer(cfg.target)
    provenance = _provenance(cfg, cfg_dict, paths, stage_hash, report, tokenizer)
    candidate = paths.root / ".drafter-candidate"
    shutil.rmtree(candidate, ignore_errors=True)
    provenance = export_drafter(cfg.drafter.kind, paths.final, candidate, provenance, cfg.target, tokenizer, exported_gamma(report, cfg.eval.num_speculative_tokens))
    provenance["export_sha256"] = served_files_hash(candidate)  # what push_to_hub checks the files against
    if served and provenance["export_sha256"] != served["files_sha256"]:
        shutil.rmtree(candidate)
        raise PipelineError("refusing to publish: the export differs from the directory vLLM served in the eval stage; rerun it with new_run=false stages=[eval,publish]")
    atomic_write_text(candidate / "drafthub.json", json.dumps(provenance, indent=2))
    try:
        check_publishable(candidate, cfg.publish.min_tau)  # the same gate push_to_hub applies, format checks included
    except PublishError:
        shutil.rmtree(candidate)
        raise
    replace_directory(candidate, paths.drafter)
    if cfg.publish.hub_dir:
        entry = publish_local(paths.drafter, cfg.publish.hub_dir, cfg.publish.min_tau)
        print(f"[publish] {cfg.publish.hub_dir}/{entry['path']}")
    if cfg.publish.repo_id:
        revision = push_to_hub(paths.drafter, cfg.publish.repo_id, private=cfg.publish.private)
        print(f"[publish] https://huggingface.co/{cfg.publish.repo_id}/tree/{revision}")
    return provenance
