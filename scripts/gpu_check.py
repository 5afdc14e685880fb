"""GPU readiness: each family's toy recipe trained and evaluated on one device, one JSON line of results.

For every trainable family it runs the recipe's stages (distill, train, eval; no publish) on `--device`
(bf16 training on CUDA), then measures the same export again with `python -m eval` on the CPU in fp32:
the two τ must agree up to bf16 noise (`--tolerance`, relative), or the engine or an export behaves
differently on the GPU. Printed: τ per family on the device and on the CPU, the speed-up with its
interval and the engine path, peak GPU memory per family, and `ok` (every family within tolerance).
With `--serve vllm` each export is also served by vLLM where vLLM serves that family on this machine; DSpark and
DFlash2 need its GPU model runner, so on a CPU their entry says exactly that instead of a verdict.

    scripts/gpu_check.sh                 # installs offline from a wheel directory, then runs this
    python scripts/gpu_check.py --device cpu --quick --recipes toy_draft   # the CPU check of the check
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parent.parent
RECIPES = (
    "toy_draft",
    "toy_medusa",
    "toy_eagle1",
    "toy_eagle",
    "toy_pard",
    "toy_peagle",
    "toy_dflash",
    "toy_dspark",
    "toy_dflash2",
)
# --quick: the micro target and a few steps, to check the machinery rather than the drafters (minutes on a CPU)
QUICK = [
    "target=micro",
    "data.max_prompts=24",
    "data.sampling.max_new_tokens=24",
    "trainer.max_steps=6",
    "trainer.batch_size=8",
    "eval.num_prompts=4",
    "eval.max_new_tokens=24",
    "eval.gamma_sweep=[]",
]
# the micro target has 3 layers and --quick distils only 24 samples: the families' hold-outs shrink to fit
QUICK_FAMILY = {
    "toy_medusa": ["drafter.holdout_samples=4"],
    "toy_eagle": ["drafter.select_samples=4", "drafter.layer_ids=[0,1,2]", "drafter.draft_vocab_size=256"],
    "toy_peagle": ["drafter.select_samples=4", "drafter.layer_ids=[0,1,2]", "drafter.draft_vocab_size=256"],
    "toy_dflash": ["drafter.layer_ids=[1,2]"],
    "toy_dspark": ["drafter.layer_ids=[1,2]"],
    "toy_dflash2": ["drafter.layer_ids=[1,2]"],
}


def _train(recipe: str, run_dir: Path, device: str, quick: bool, serve: str | None = None) -> dict:
    """Run distill, train and eval of `recipe` in-process (served by `serve` too, where that engine serves the
    family here); the eval report, this run's peak GPU memory, and why it was not served (None: it was, or not
    asked)."""
    from hydra import compose, initialize_config_module

    from heads.families import get_family
    from train.config import register_configs
    from train.pipeline import run_pipeline

    register_configs()
    overrides = [
        f"recipe={recipe}",
        f"device={device}",
        f"run_dir={run_dir}",
        "stages=[distill,train,eval]",
        f"trainer.mixed_precision={'bf16' if device.startswith('cuda') else 'no'}",
        *((QUICK + QUICK_FAMILY.get(recipe, [])) if quick else []),
    ]
    if device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()
    not_served = None
    with initialize_config_module("conf", version_base=None):
        if serve:  # e.g. DSpark and DFlash2 on vLLM: its GPU runner only, reported as such, never as a pass
            not_served = get_family(compose("config", overrides=overrides).drafter.kind).not_served(serve)
            overrides += [] if not_served else [f"eval.serve={serve}"]
        run_pipeline(compose("config", overrides=overrides))
    peak = torch.cuda.max_memory_allocated() / 2**20 if device.startswith("cuda") else None
    report = json.loads((run_dir / "eval" / "eval_report.json").read_text())
    return {"report": report, "peak_gpu_memory_mib": peak, "not_served": not_served}


def _cpu_tau(run_dir: Path, report: dict) -> float:
    """τ of the same export measured by `python -m eval` on the CPU in fp32, on the same prompts."""
    from distill.targets import resolve_target

    s = report["settings"]
    out = run_dir / "eval_cpu"
    cmd = [
        sys.executable,
        "-m",
        "eval",
        f"drafter_dir={run_dir / 'drafter'}",
        f"target_path={resolve_target(report['target'])}",  # no publish stage ran: no drafthub.json names it
        *_prompt_args(report),
        f"out_dir={out}",
        "device=cpu",
        "record=false",
        f"eval.num_prompts={s['num_prompts']}",
        f"eval.max_new_tokens={s['max_new_tokens']}",
        f"eval.num_speculative_tokens={s['num_speculative_tokens']}",
        f"eval.tree={json.dumps(s['tree']) if s['tree'] is not None else 'null'}",
        "eval.gamma_sweep=[]",
    ]
    # the repo first, and whatever PYTHONPATH already held (packages installed with --target) after it
    path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": path})
    if done.returncode:
        raise SystemExit(f"error: the CPU eval of {run_dir / 'drafter'} failed: {done.stderr.strip()[-2000:]}")
    return json.loads((out / "eval_report.json").read_text())["tau"]


def _prompt_args(report: dict) -> list[str]:
    """`python -m eval`'s arguments for the prompts the pipeline's eval measured: the toy world's heldout file, or
    the named set, file or dataset of `eval_prompts` (the main job's MT-Bench + HumanEval)."""
    from distill.prompts.heldout import TOYWORLD
    from distill.targets.toyworld import toyworld_prompts

    src = report["prompts"]
    if src["source"] == TOYWORLD:
        return [f"prompts={toyworld_prompts(report['target'], 'heldout')}"]
    if src["held_out_slice"]:
        raise SystemExit(f"error: {src['what']} cannot be measured again apart from its run; set eval_prompts")
    split = [f"split={src['split']}"] if src["split"] else []
    column = [f"prompts_column={src['column']}"] if src["column"] else []
    return [f"prompts={src['source']}", *split, *column]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda", help="cuda (default), cuda:N or cpu")
    ap.add_argument(
        "--recipes",
        default=",".join(RECIPES),
        help="comma-separated recipes (default: every family's toy recipe; smollm2: the main job)",
    )
    ap.add_argument("--quick", action="store_true", help="micro target, a few steps: checks the machinery only")
    ap.add_argument("--tolerance", type=float, default=0.10, help="allowed relative gap between device and CPU τ")
    ap.add_argument("--work-dir", type=Path, default=None, help="where the runs go (default: a temporary directory)")
    ap.add_argument("--serve", default=None, help="also serve each export with this engine (vllm, llamacpp)")
    args = ap.parse_args(argv)
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print(
            f"error: --device {args.device} but torch {torch.__version__} sees no CUDA device; "
            "install a CUDA build of torch or pass --device cpu",
            file=sys.stderr,
        )
        return 2
    work = args.work_dir or Path(tempfile.mkdtemp(prefix="gpu_check-"))
    families, t0 = {}, time.perf_counter()
    for recipe in args.recipes.split(","):
        run_dir = work / recipe
        result = _train(recipe, run_dir, args.device, args.quick, args.serve)
        report = result["report"]
        cpu_tau = report["tau"] if args.device == "cpu" else _cpu_tau(run_dir, report)
        families[report["kind"]] = {
            "recipe": recipe,
            "tau": round(report["tau"], 4),
            "tau_cpu_fp32": round(cpu_tau, 4),
            "tau_gap": round(abs(report["tau"] - cpu_tau) / cpu_tau, 4),
            "lossless": report["lossless"],
            "speedup": round(report["speedup"], 3),
            "speedup_interval": [round(report["speedup_spread"][k], 3) for k in ("low", "high")],
            "timing_noisy": report["timing"]["noisy"],
            "engine": report["engine"]["path"],
            "compile_seconds": report["engine"]["compile_seconds"],
            "peak_gpu_memory_mib": None
            if result["peak_gpu_memory_mib"] is None
            else round(result["peak_gpu_memory_mib"]),
        }
        if args.serve:
            served = report.get("served") or {}
            families[report["kind"]]["served"] = result["not_served"] or {
                k: served.get(k) for k in ("engine", "verdict", "tau", "equal_prompts", "reason")
            }
    ok = all(f["tau_gap"] <= args.tolerance and f["lossless"] for f in families.values())
    print(
        json.dumps(
            {
                "ok": ok,
                "device": args.device,
                "device_name": torch.cuda.get_device_name() if args.device.startswith("cuda") else "cpu",
                "torch": torch.__version__,
                "quick": args.quick,
                "tolerance": args.tolerance,
                "families": families,
                "seconds": round(time.perf_counter() - t0, 1),
            }
        )
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
