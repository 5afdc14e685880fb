"""The runs a benchmark reads and starts: the run that trained and evaluated the drafter it compares, and more
trainings of that drafter on the same run's data."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from omegaconf import OmegaConf


def evaluated_run(run: Path, kind: str) -> Path:
    """The run directory under `run` (itself, or a bake-off's contender) that trained and evaluated a `kind` drafter;
    one error line where none did. The benchmarks name the kind they compare (the EAGLE-3 of the main job)."""
    for candidate in (run, *sorted(p for p in run.iterdir() if p.is_dir())):
        config = candidate / ".hydra" / "config.yaml"
        if config.exists() and OmegaConf.load(config).drafter.kind == kind and (candidate / "drafter").is_dir():
            return candidate
    raise SystemExit(f"error: {run} holds no evaluated {kind} run (drafter/ and .hydra/config.yaml); pass --run RUN")


# a one-prompt eval after training: it writes the export (drafter/); the benchmarks measure the exports themselves
EXPORT_ONLY = ["eval.num_prompts=1", "eval.max_new_tokens=8", "eval.warmup_prompts=0", "eval.engine=dynamic"]


def train_on_run_data(data: Path | None, recipe: str, run_dir: Path, overrides: list[str]) -> dict:
    """`python -m train recipe=<recipe> <overrides>` in run_dir on an earlier run's distilled data and features
    (linked, not copied: nothing is distilled or computed again; data None: the run distils its own), logged to
    run_dir/train.log; skipped where run_dir holds its export already (a rerun reuses finished runs). Its training
    summary, with run_dir."""
    if not (run_dir / "drafter" / "config.json").exists():
        run_dir.mkdir(parents=True, exist_ok=True)
        if data is not None and not (run_dir / "data").exists():
            os.symlink(os.path.relpath(data, run_dir), run_dir / "data", target_is_directory=True)
        stages = "stages=[train,eval]" if data is not None else "stages=[distill,train,eval]"
        cmd = [sys.executable, "-m", "train", f"recipe={recipe}", f"run_dir={run_dir}", stages, *EXPORT_ONLY,
               *overrides]  # fmt: skip
        with open(run_dir / "train.log", "w") as log:
            subprocess.run(cmd, check=True, stdout=log, stderr=subprocess.STDOUT)
    summary = json.loads((run_dir / "checkpoints" / "final" / "train_summary.json").read_text())
    return summary | {"run_dir": str(run_dir)}


def measure_on_held_out(run: Path, exports: dict, num_prompts: int | None = None, gammas: dict | None = None) -> dict:
    """The exports (name → directory) decoded together against one plain baseline on the held-out prompts `run`'s
    eval decoded (the first num_prompts), with its target and eval settings: name → eval report."""
    import torch

    from distill.config import TargetConfig
    from distill.targets.load import eos_token_ids, load_target, load_tokenizer
    from eval.config import EvalConfig
    from eval.measure_export import measure_exports
    from eval.report import read_samples

    cfg = OmegaConf.load(run / ".hydra" / "config.yaml")
    target_cfg = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(TargetConfig), cfg.target))
    tokenizer, target = load_tokenizer(target_cfg), load_target(target_cfg, torch.device("cpu"))
    prompts = [s["prompt_ids"] for s in read_samples(run / "eval" / "eval_samples.jsonl")][:num_prompts]
    eval_cfg = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(EvalConfig), cfg.eval))
    eos = eos_token_ids(target, tokenizer)
    return measure_exports(target, exports, prompts, eval_cfg, vocab_size=len(tokenizer), eos_ids=eos, gammas=gammas)
