"""The block drafters compared: DFlash, DSpark and DFlash2 trained on the same data and steps, served, timed.

Each recipe (toy_dflash, toy_dspark, toy_dflash2) runs `python -m train` with the same distilled data, the same
fused layers (--layer-ids, which llama.cpp can serve) and the same optimizer steps, evaluated at γ = 7 with a
sweep, and served by llama.cpp (`eval.serve=llamacpp`) when it is built. Then, on the DSpark export:
- drafting cost: one proposal (block forward + the Markov head left to right) against the block forward alone
  (the same γ slots through lm_head), interleaved repeats on the held-out prompts' contexts;
- adaptive draft length: `python -m eval` with `eval.draft_confidence_min` at each --thresholds value, each
  speed-up measured interleaved against the target alone as every eval is, beside the best fixed γ of the sweep.
Prints one JSON line: per family τ, α, cost ratio c, speed-up with its interval, served τ and verdict, training
seconds; the goals' ratios; the drafting cost ratio; the adaptive rows.

    python scripts/bench_block_drafters.py --out runs/bench_block   # ~50 min on 2 CPU cores, toy world cached
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from eval import machine

RECIPES = {"toy_dflash": "DFlash", "toy_dspark": "DSpark", "toy_dflash2": "DFlash2"}
REPO = Path(__file__).resolve().parents[1]


def _run(cmd: list[str], log: Path) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)}
    with open(log, "w") as out:
        subprocess.run(cmd, check=True, stdout=out, stderr=subprocess.STDOUT, cwd=REPO, env=env)


def _train(out: Path, recipe: str, args) -> dict:
    run_dir, data = out / recipe, out / "toy_dflash" / "data"
    report = run_dir / "eval" / "eval_report.json"
    if not report.exists():
        run_dir.mkdir(parents=True, exist_ok=True)
        if recipe != "toy_dflash" and not (run_dir / "data").exists():  # the first run's distilled data, shared
            os.symlink(os.path.relpath(data, run_dir), run_dir / "data", target_is_directory=True)
        serve = [f"eval.serve={args.serve}"] if args.serve else []
        cmd = [sys.executable, "-m", "train", f"recipe={recipe}", f"run_dir={run_dir}", "stages=[distill,train,eval]"]
        cmd += [f"drafter.layer_ids={args.layer_ids}", f"trainer.max_steps={args.steps}", *serve]
        t0 = time.perf_counter()
        _run(cmd, out / f"{recipe}.log")
        print(f"[bench] {recipe}: {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    r = json.loads(report.read_text())
    summary = json.loads((run_dir / "checkpoints" / "final" / "train_summary.json").read_text())
    served = r.get("served") or {}
    return {
        "tau": round(r["tau"], 3),
        "alpha": round(r["alpha"], 3),
        "cost_ratio": round(r["cost_ratio"], 4),
        "speedup": round(r["speedup"], 3),
        "speedup_interval": [round(r["speedup_spread"][k], 3) for k in ("low", "high")],
        "timing_noisy": r["timing"]["noisy"],
        "lossless": r["lossless"],
        "per_position_acceptance": [round(a, 3) for a in r["per_position_acceptance"]],
        "sweep": {g["num_speculative_tokens"]: [round(g["tau"], 3), round(g["speedup"], 3)] for g in r["gamma_sweep"]},
        "served_tau": served.get("tau"),
        "served_verdict": served.get("verdict"),
        "train_seconds": round(summary["seconds"], 1),
    }


def _adaptive(out: Path, threshold: float, gamma: int) -> dict:
    """The DSpark export measured by `python -m eval` with the confidence head cutting blocks at `threshold`."""
    run_dir = out / "toy_dspark"
    meta = json.loads((run_dir / "eval" / "eval_report.json").read_text())
    from distill.targets import resolve_target
    from distill.targets.toyworld import toyworld_prompts

    dest = out / f"adaptive_{threshold}"
    if not (dest / "eval_report.json").exists():
        cmd = [sys.executable, "-m", "eval", f"drafter_dir={run_dir / 'drafter'}", f"out_dir={dest}", "record=false"]
        cmd += [
            f"target_path={resolve_target(meta['target'])}",
            f"prompts={toyworld_prompts(meta['target'], 'heldout')}",
        ]
        cmd += [f"eval.num_speculative_tokens={gamma}", f"eval.draft_confidence_min={threshold}", "eval.gamma_sweep=[]"]
        _run(cmd, out / f"adaptive_{threshold}.log")
    r = json.loads((dest / "eval_report.json").read_text())
    return {
        "threshold": threshold,
        "tau": round(r["tau"], 3),
        "draft_tokens_per_step": round(r["draft_tokens_per_step"], 2),
        "speedup": round(r["speedup"], 3),
        "speedup_interval": [round(r["speedup_spread"][k], 3) for k in ("low", "high")],
        "timing_noisy": r["timing"]["noisy"],
        "lossless": r["lossless"],
    }


def _drafting_cost(out: Path, gamma: int, repeats: int = 30) -> dict:
    """Seconds of one DSpark proposal vs the block forward alone (same γ slots through lm_head), interleaved."""
    import torch
    from transformers import AutoModelForCausalLM

    from distill.features.capture import layer_features
    from distill.targets import resolve_target
    from eval.proposer import TargetFeatures
    from eval.proposers.dspark import DSparkProposer
    from eval.sampling import SamplingParams
    from heads.families import FAMILIES

    run_dir = out / "toy_dspark"
    meta = json.loads((run_dir / "eval" / "eval_report.json").read_text())
    target = AutoModelForCausalLM.from_pretrained(resolve_target(meta["target"])).eval()
    drafter = FAMILIES["dspark"].load(run_dir / "drafter", target).eval()
    samples = [json.loads(line) for line in (run_dir / "eval" / "eval_samples.jsonl").open()][:8]
    ids = [s["prompt_ids"] + s["speculative_ids"][:16] for s in samples]  # held-out contexts mid-answer
    full, block = [], []
    for seq in ids:
        features, _ = layer_features(target, torch.tensor([seq[:-1]]), None, list(drafter.arch.layer_ids))
        proposer = DSparkProposer(drafter, target.config.vocab_size)
        proposer.reset(1, torch.device("cpu"))
        proposer.accept([len(seq) - 1], TargetFeatures(features, torch.ones(1, len(seq) - 1, dtype=torch.bool)))
        with torch.no_grad():
            for _ in range(repeats):
                t0 = time.perf_counter()
                proposer.propose([seq], gamma, SamplingParams())
                t1 = time.perf_counter()
                drafter.head(proposer.block_hidden([seq], gamma)).argmax(-1)
                t2 = time.perf_counter()
                full.append(t1 - t0)
                block.append(t2 - t1)
    ratio = statistics.median(full) / statistics.median(block)
    return {
        "gamma": gamma,
        "proposal_ms": round(1e3 * statistics.median(full), 3),
        "block_forward_ms": round(1e3 * statistics.median(block), 3),
        "ratio": round(ratio, 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("runs/bench_block"))
    parser.add_argument("--steps", type=int, default=300, help="optimizer steps of every family")
    parser.add_argument("--layer-ids", default="[2,5,7]", help="fused target layers, the same for every family")
    parser.add_argument("--serve", default="llamacpp", help="engine serving each export ('' = none)")
    parser.add_argument("--thresholds", type=float, nargs="+", default=[0.2, 0.35, 0.5])
    args = parser.parse_args()
    machine.announce()  # this machine's class and speed, beside every figure below
    args.out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    rows = {label: _train(args.out, recipe, args) for recipe, label in RECIPES.items()}
    gamma = 7
    cost = _drafting_cost(args.out, gamma)
    adaptive = [_adaptive(args.out, t, gamma) for t in args.thresholds]
    best_fixed = max(rows["DSpark"]["sweep"].items(), key=lambda kv: kv[1][1])
    dflash = rows["DFlash"]["tau"]
    result = {
        "families": rows,
        "goals": {
            "dspark_tau_over_dflash": round(rows["DSpark"]["tau"] / dflash, 3),
            "dflash2_tau_over_dflash": round(rows["DFlash2"]["tau"] / dflash, 3),
            "dspark_drafting_cost_over_block_forward": cost["ratio"],
            "adaptive_best_speedup_over_best_fixed": round(max(a["speedup"] for a in adaptive) / best_fixed[1][1], 3),
        },
        "drafting_cost": cost,
        "adaptive": adaptive,
        "best_fixed_gamma": {"gamma": best_fixed[0], "tau": best_fixed[1][0], "speedup": best_fixed[1][1]},
        "seconds": round(time.perf_counter() - t0, 1),
    }
    result = machine.with_machine(result)
    (args.out / "result.json").write_text(json.dumps(result, indent=2))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
