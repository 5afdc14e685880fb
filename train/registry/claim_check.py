"""Re-measuring a drafter's claim before it is published (`--verify`; the local registry does it by default).

The figures' digest and consistency checks (eval/claims.py) catch edits, not a forger who recomputes
a consistent report. Re-measuring does: the drafter is decoded again, on this machine, on the first
prompts of its own eval samples (held-out prompts, already templated) with the settings the report
claims, and its τ must agree with the claimed τ within a tolerance; a lossless claim must come out
lossless again. How many of the target's outputs came out as the samples record them is reported
(on another device or dtype a few greedy tokens may legitimately differ).
"""

from __future__ import annotations

import tempfile
import time
from dataclasses import fields
from pathlib import Path

import torch
from omegaconf import OmegaConf

from distill.config import TargetConfig
from distill.targets.load import eos_token_ids, load_target, load_tokenizer
from eval.config import EvalConfig
from eval.proposers import load_proposer
from eval.report import SAMPLES, read_samples
from eval.run import evaluate
from heads.families import read_export
from train.registry.gate import PublishError

VERIFY_PROMPTS = 8  # prompts re-decoded: a short eval, seconds for small targets
VERIFY_TOLERANCE = 0.2  # |re-measured τ − claimed τ| / claimed τ allowed (a subset of the prompts varies)


def _target_settings(prov: dict) -> TargetConfig:
    """The target as the run loaded it (its recipe's settings), at the directory or id that loads."""
    recipe = ((prov.get("recipe") or {}).get("target")) or {}
    known = {f.name for f in fields(TargetConfig)}
    settings = {k: v for k, v in recipe.items() if k in known}
    name = prov["target"].get("resolved") or prov["target"]["name_or_path"]
    return TargetConfig(**(settings | {"name_or_path": name, "revision": prov["target"].get("revision")}))


def _eval_settings(report: dict, num_prompts: int) -> EvalConfig:
    """The claimed decoding settings, without the sweep, the warm-up or the served check."""
    known = {f.name for f in fields(EvalConfig)}
    claimed = {k: v for k, v in report["settings"].items() if k in known}
    merged = OmegaConf.merge(OmegaConf.structured(EvalConfig), claimed)
    cfg: EvalConfig = OmegaConf.to_object(merged)
    cfg.num_prompts, cfg.gamma_sweep, cfg.warmup_prompts, cfg.serve = num_prompts, [], 0, None
    return cfg


def remeasure(drafter_dir: str | Path, prov: dict, num_prompts: int = VERIFY_PROMPTS, device: str = "cpu") -> dict:
    """Decode the first `num_prompts` of the drafter's eval samples again; return the re-measured figures."""
    drafter = Path(drafter_dir)
    samples_file = drafter / SAMPLES
    if not samples_file.exists():
        raise PublishError(
            f"cannot verify {drafter}: it has no {SAMPLES} (the prompts its figures were measured on); "
            "re-run eval and publish, or publish without --verify"
        )
    samples = read_samples(samples_file)[:num_prompts]
    report = prov["eval"]
    target_cfg = _target_settings(prov)
    tokenizer, target = load_tokenizer(target_cfg), load_target(target_cfg, device)
    cfg = _eval_settings(report, len(samples))
    proposer, kind = load_proposer(read_export(drafter), target, len(tokenizer), cfg, torch.device(device))
    names = {"target": target_cfg.name_or_path, "drafter": str(drafter), "kind": kind}
    t0 = time.perf_counter()
    prompts = [s["prompt_ids"] for s in samples]
    with tempfile.TemporaryDirectory() as out:
        measured = evaluate(
            target,
            proposer,
            prompts,
            cfg,
            eos_token_ids(target, tokenizer),
            len(tokenizer),
            names,
            out_dir=out,
            progress=False,
        )
        again = read_samples(Path(out) / SAMPLES)
    as_recorded = sum(a["autoregressive_ids"] == s["autoregressive_ids"] for a, s in zip(again, samples))
    return {
        "target_outputs_as_recorded": as_recorded,
        "tau": measured["tau"],
        "alpha": measured["alpha"],
        "lossless": measured["lossless"],
        "prompts": len(samples),
        "claimed_tau": report["tau"],
        "device": device,
        "seconds": round(time.perf_counter() - t0, 1),
    }


def verify_claim(drafter_dir: str | Path, prov: dict, num_prompts: int = VERIFY_PROMPTS, device: str = "cpu") -> dict:
    """Re-measure, refuse a claim the measurement does not bear out, and return the re-measured figures."""
    print(f"[verify] re-measuring {drafter_dir} on {num_prompts} of its eval prompts")
    verified = remeasure(drafter_dir, prov, num_prompts, device)
    check_remeasured(str(drafter_dir), prov["eval"], verified)
    return verified


def check_remeasured(name: str, claimed: dict, verified: dict, tolerance: float = VERIFY_TOLERANCE) -> None:
    """Refuse a claim the re-measurement does not bear out."""
    gap = (verified["tau"] - claimed["tau"]) / claimed["tau"]
    if abs(gap) > tolerance:
        raise PublishError(
            f"refusing to publish {name}: re-measured τ {verified['tau']:.3f} on {verified['prompts']} of its eval "
            f"prompts disagrees with the claimed τ {claimed['tau']:.3f} ({gap:+.0%}, tolerance ±{tolerance:.0%}); "
            "re-run eval on this drafter (same target, same settings), then publish"
        )
    if claimed.get("lossless") is True and verified["lossless"] is not True:
        raise PublishError(
            f"refusing to publish {name}: it claims lossless decoding but re-decoding {verified['prompts']} of its "
            "eval prompts changed the target's output; re-run eval to see which"
        )
