"""The publish stage: provenance and the model card are added to the drafter/ directory the eval
stage exported and measured (never re-exported), the gate runs once, and the directory is copied
into a local registry and/or uploaded to the Hub."""

from __future__ import annotations

import json
import time
from pathlib import Path

from distill.prompts.chat import tokenizer_hash
from distill.stage.shards import load_distilled
from distill.targets import resolve_target
from distill.targets.load import load_tokenizer
from eval.report import SAMPLES, read_samples
from heads.families import get_family, write_provenance
from heads.formats.fingerprint import LOAD_PLOT_FILE, served_files_hash
from heads.formats.staging import atomic_write_text
from train.eval_prompts import check_disjoint
from train.registry.claim_check import verify_claim
from train.registry.gate import PublishError, check_report, gate, push_to_hub
from train.registry.local_hub import publish_local
from train.stages.eval import REPORT
from train.stages.run import Run
from train.stages.run_dir import read_json
from train.stages.train import SUMMARY


def provenance(run: Run, report: dict) -> dict:
    """drafthub.json: where the drafter comes from and what it measured."""
    cfg, paths = run.cfg, run.paths
    family = get_family(cfg.drafter.kind)
    manifest = read_json(paths.data / "manifest.json") or {}
    summary = (read_json(paths.final / SUMMARY) or {}) if family.trainable else {}
    target = {"name_or_path": cfg.target.name_or_path, "revision": cfg.target.revision}
    return {
        "stage_hash": run.stage_hash,
        "kind": family.kind,
        "model_name": cfg.publish.model_name or f"{cfg.recipe_name}-{family.kind}",
        "target": target | {"resolved": resolve_target(cfg.target)},
        "tokenizer_hash": tokenizer_hash(load_tokenizer(cfg.target)),
        "data_manifest_hash": manifest.get("config_hash"),
        "training_data": summary.get("training_data"),  # size, source and policy behind the τ (None: untrained)
        "continues": summary.get("continued_from"),  # the run (and published version) whose training it extends
        "recipe": run.cfg_dict,
        "eval": report,  # whole: its figures_sha256 binds every field, the export hash the gate checks included
        "export_sha256": report["export_sha256"],
        **family.describe(paths.drafter, summary),
        **({"compared": compared_with(cfg.publish.comparison)} if cfg.publish.comparison else {}),
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def compared_with(comparison_file: str) -> dict:
    """Why a bake-off chose this drafter and every contender's figures on its first workload, for the card."""
    comparison = json.loads(Path(comparison_file).read_text())
    name, result = next(iter(comparison["workloads"].items()))
    keys = ("recipe", "kind", "tau", "speedup", "speedup_spread", "lossless", "trained", "training_data")
    return {
        "workload": name,
        "reason": (result["recommended"] or {}).get("reason"),
        "contenders": [{k: row.get(k) for k in keys} for row in result["contenders"]],
    }


def check_inputs(run: Run) -> dict:
    """This run's eval report, measured on the checkpoint now on disk with this run's settings, or the refusal
    (preflight asks before the first stage of a run that publishes without evaluating)."""
    cfg, paths = run.cfg, run.paths
    report = read_json(paths.eval / REPORT)
    if not report:
        check_report(report, cfg.publish.min_tau, str(paths.drafter))  # "no eval report: run the eval stage"
    if get_family(cfg.drafter.kind).trainable and report.get("checkpoint_sha256") != served_files_hash(paths.final):
        raise PublishError(
            f"refusing to publish: {paths.final} changed after it was evaluated (stale eval report); "
            "re-run stages=[eval,publish]"
        )
    if report.get("stage_hash") != run.hashes["eval"]:
        raise PublishError(
            f"refusing to publish: {paths.eval / REPORT} measured other settings than this run's (its stage hash "
            "differs); re-run stages=[eval,publish]"
        )
    return report


def publish_stage(run: Run) -> dict:
    cfg, paths = run.cfg, run.paths
    done, prov = read_json(paths.published), read_json(paths.drafter / "drafthub.json")
    if done and prov and done["stage_hash"] == prov.get("stage_hash") == run.stage_hash:
        return prov
    report = check_inputs(run)
    samples = paths.eval / SAMPLES
    check_report(report, cfg.publish.min_tau, str(paths.drafter), samples)  # the samples, where eval wrote them
    dataset = load_distilled(paths.data) if read_json(paths.data / "manifest.json") else None
    check_disjoint(report, read_samples(samples), dataset)  # measured prompts never trained on, proven from files
    prov = gate(provenance(run, report), paths.drafter, cfg.publish.min_tau)  # stale export, format checks
    plot = paths.eval / LOAD_PLOT_FILE  # the card's serving-under-load plot, where eval.serve_load ran
    load_plot = plot.read_bytes() if report.get("serving_load") and plot.exists() else None
    write_provenance(paths.drafter, prov, samples.read_text(), load_plot=load_plot)  # the evidence travels along
    record = {"stage_hash": run.stage_hash, "registry": None, "hub": None, "verified": None}
    if cfg.publish.verify_prompts and (cfg.publish.hub_dir or cfg.publish.repo_id):
        record["verified"] = verify_claim(paths.drafter, prov, cfg.publish.verify_prompts, str(run.device))
    if cfg.publish.hub_dir:
        entry = publish_local(
            paths.drafter, cfg.publish.hub_dir, gated=prov, verified=record["verified"], verify_prompts=0
        )
        record["registry"] = f"{cfg.publish.hub_dir}/{entry['path']}"
        print(f"[publish] {record['registry']}")
    if cfg.publish.repo_id:
        revision = push_to_hub(paths.drafter, cfg.publish.repo_id, private=cfg.publish.private, gated=prov)
        record["hub"] = f"https://huggingface.co/{cfg.publish.repo_id}/tree/{revision}"
        print(f"[publish] {record['hub']}")
    atomic_write_text(paths.published, json.dumps(record, indent=2))  # last: a failed upload reruns the stage
    return prov
