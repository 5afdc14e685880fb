"""Does having the target write the answers pay? One drafter trained on the target's own answers against the same
drafter trained on the answers the dataset already holds for the same prompts, at equal optimizer steps.

Both runs are plain `python -m train` runs of one recipe on one prompt source whose rows carry their own answers
(prompt-completion rows, messages or ShareGPT turns): `data.regenerate=true` has the target answer every prompt,
`data.regenerate=false` keeps the dataset's answers. Both are measured alike on held-out prompts (--eval-prompts,
never trained on). Prints one JSON line: τ of each, the ratio and the goal (P4: ≥ 1.2×). The default is the SmolLM2
main job's EAGLE-3 on the stdlib's code stubs, answered by SmolLM2 or by the stdlib's own functions
(`stdlib_code_answers`), measured on HumanEval; about 25 minutes on 2 AVX2 cores.

    python scripts/bench_answer_source.py --out runs/bench_answer_source
    python scripts/bench_answer_source.py --recipe eagle_llama8b --prompts my_sft.jsonl --eval-prompts mt_bench
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

from eval import machine

ANSWERS = {"target": "data.regenerate=true", "dataset": "data.regenerate=false"}  # run name → who wrote the answers
GOAL = 1.2  # P4: the target's answers ≥ 1.2× τ over anyone else's


def run_overrides(args: argparse.Namespace) -> list[str]:
    """What both runs share: the prompts (and nothing mixed in), the eval source, the steps."""
    shared = [
        f"recipe={args.recipe}",
        "stages=[distill,train,eval]",
        f"data.prompts={args.prompts}",
        "data.mix=[]",
        f"data.max_prompts={args.max_prompts}",
        "data.holdout=0",  # measured on --eval-prompts instead: nothing of the training prompts is held out
        f"eval_prompts={args.eval_prompts}",
        f"eval.num_prompts={args.num_prompts}",
        "eval.serve=null",
        "trainer.max_cut_share=1.0",  # a dataset's long answers are cut at max_seq_len, as the target's are at
        # data.sampling.max_new_tokens: both runs train on what fits
    ]
    return shared + ([f"trainer.max_steps={args.steps}"] if args.steps else []) + args.override


def python_m_train(argv: list[str], log: Path) -> int:
    with open(log, "w") as f:
        return subprocess.run([sys.executable, "-m", "train", *argv], stdout=f, stderr=subprocess.STDOUT).returncode


def train_run(out: Path, name: str, overrides: list[str], launch: Callable = python_m_train) -> dict:
    """One `python -m train` run (skipped when its eval report exists): its τ, α, data and training time."""
    run_dir = out / name
    report = run_dir / "eval" / "eval_report.json"
    if not report.exists():
        run_dir.mkdir(parents=True, exist_ok=True)
        t0 = time.perf_counter()
        if launch([f"run_dir={run_dir}", *overrides], out / f"{name}.log"):
            sys.exit(f"[bench] the {name} run failed; its log is {out / f'{name}.log'}")
        print(f"[bench] {name}: {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    r = json.loads(report.read_text())
    counts = json.loads((run_dir / "data" / "manifest.json").read_text())["counts"]
    summary = json.loads((run_dir / "checkpoints" / "final" / "train_summary.json").read_text())
    return {
        "tau": round(r["tau"], 3),
        "alpha": round(r["alpha"], 3),
        "samples": counts["samples"],
        "assistant_tokens": counts["assistant_tokens"],
        "train_seconds": summary["seconds"],
    }


def verdict(runs: dict[str, dict]) -> dict:
    ratio = round(runs["target"]["tau"] / runs["dataset"]["tau"], 3)
    return {"target_vs_dataset_tau": ratio, "goal": GOAL, "met": ratio >= GOAL}


def main(argv: list[str] | None = None, launch: Callable = python_m_train) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("runs/bench_answer_source"))
    parser.add_argument("--recipe", default="smollm2", help="the recipe both runs train (its drafter and target)")
    parser.add_argument("--prompts", default="stdlib_code_answers", help="prompts with their own answers")
    parser.add_argument("--max-prompts", type=int, default=240, help="prompts both runs train on (the main job's 240)")
    parser.add_argument("--eval-prompts", default="humaneval", help="held-out prompts both runs are measured on")
    parser.add_argument("--num-prompts", type=int, default=16, help="decodes measured per run")
    parser.add_argument("--steps", type=int, default=0, help="optimizer steps of both runs (0: the recipe's)")
    parser.add_argument("--override", action="append", default=[], help="a Hydra override for both runs (repeat)")
    args = parser.parse_args(argv)
    machine.announce()  # this machine's class and speed, beside every figure below
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    shared = run_overrides(args)
    runs = {name: train_run(out, name, shared + [answers], launch) for name, answers in ANSWERS.items()}
    line = {"bench": "answer_source", "recipe": args.recipe, "prompts": args.prompts, "eval_prompts": args.eval_prompts}
    line |= {"runs": runs} | verdict(runs)
    line = machine.with_machine(line)  # the machine the times were taken on, beside the reference machine
    print(json.dumps(line))
    return line


if __name__ == "__main__":
    main()
