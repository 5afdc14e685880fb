"""Serving under load, per drafter: `vllm serve` with and without each exported drafter, driven by `vllm bench serve`
at each concurrency, beside the offline served speed-up (vLLM's `LLM`, one request at a time) measured in the same
`python -m eval` run — exactly what `python -m eval … serve=vllm eval.serve_load=[…]` gives a user.

    python scripts/bench_serve_load.py --drafter runs/toy/<ts>/drafter --drafter runs/toy_eagle/<ts>/drafter \\
        --ngram --prompts ~/.cache/drafthub/toyworld/toy-<key>/prompts/heldout.jsonl --levels 1 4 16

--ngram adds prompt lookup (training-free: its export is written by `python -m train recipe=toy_ngram stages=[eval]`).
Prints one JSON line: per drafter, the load table (tokens/s and TPOT with and without, the speed-ups with their 95%
intervals, TTFT, served τ), the break-even concurrency, the offline served speed-up, and the goal's ratio — the
served speed-up at concurrency 1 over the offline one (goal: within 15 %) — and the sweep's wall time. Run it on a
quiet machine: every figure is a wall-clock ratio.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from eval import machine

GOAL_C1_GAP = 0.15  # served speed-up at concurrency 1 within this of the offline served speed-up


def ngram_export(out: Path) -> Path:
    """Prompt lookup's export, written by the pipeline's own eval stage (2 prompts: only the directory is kept)."""
    argv = [sys.executable, "-m", "train", "recipe=toy_ngram", "stages=[eval]", "eval.num_prompts=2"]
    argv += ["eval.gamma_sweep=[]", f"run_dir={out}"]
    done = subprocess.run(argv, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"could not write the n-gram export: {done.stderr.strip()[-500:]}")
    return out / "drafter"


def measure(source: Path, args, label: str) -> dict:
    """One `python -m eval` with the offline served check (speed) and the load sweep on a copy of the drafter, its
    report recorded there (record=true: publishable as measured); the figures the goal needs."""
    drafter, out = args.out / label / "drafter", args.out / label / "eval"
    shutil.copytree(source, drafter)
    argv = [sys.executable, "-m", "eval", f"drafter_dir={drafter}", f"prompts={args.prompts}", f"out_dir={out}"]
    argv += ["serve=vllm", f"eval.num_prompts={args.num_prompts}", f"eval.max_new_tokens={args.max_new_tokens}"]
    argv += ["eval.gamma_sweep=[]", f"eval.vllm.speed_repeats={args.repeats}"]
    argv += [f"eval.serve_load=[{','.join(map(str, args.levels))}]", f"eval.vllm.load_repeats={args.repeats}"]
    argv += [f"target_path={args.target}"] if args.target else []
    argv += ["record=true"]
    t0 = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True)
    report_file = Path(out) / "eval_report.json"
    if not report_file.is_file():
        raise SystemExit(f"python -m eval failed on {drafter}: {done.stderr.strip()[-800:]}")
    report = json.loads(report_file.read_text())
    sv, load = report["served"], report["serving_load"]
    c1 = next((lv for lv in load["levels"] if lv["concurrency"] == 1), None)
    gap = None if c1 is None else abs(c1["throughput_speedup"] - sv["speedup"]) / sv["speedup"]
    return {
        "drafter": str(source),
        "kind": report["kind"],
        "ours_tau": round(report["tau"], 4),
        "offline_served_speedup": round(sv["speedup"], 4),
        "offline_served_interval": [round(sv["speedup_spread"]["low"], 4), round(sv["speedup_spread"]["high"], 4)],
        "offline_served_tau": round(sv["tau"], 4),
        "load": [_level(lv) for lv in load["levels"]],
        "break_even": load["break_even"]["verdict"],
        "break_even_concurrency": load["break_even"]["concurrency"],
        "c1_vs_offline_gap": None if gap is None else round(gap, 4),
        "c1_goal_met": None if gap is None else gap <= GOAL_C1_GAP,
        "sweep_seconds": load["seconds"],
        "seconds": round(time.perf_counter() - t0, 1),
    }


def _kind(drafter: Path) -> str:
    prov = drafter / "drafthub.json"
    return json.loads(prov.read_text()).get("kind", "drafter") if prov.exists() else "drafter"


def _level(lv: dict) -> dict:
    s, b = lv["speculative"], lv["no_speculation"]
    return {
        "concurrency": lv["concurrency"],
        "tokens_per_second": [round(s["output_tokens_per_second"], 2), round(b["output_tokens_per_second"], 2)],
        "throughput_speedup": round(lv["throughput_speedup"], 4),
        "throughput_interval": [round(lv["throughput_speedup_interval"][k], 4) for k in ("low", "high")],
        "tpot_ms_median": [round(s["tpot_ms"]["median"], 2), round(b["tpot_ms"]["median"], 2)],
        "tpot_ms_p90": [round(s["tpot_ms"]["p90"], 2), round(b["tpot_ms"]["p90"], 2)],
        "tpot_speedup": round(lv["tpot_speedup"], 4),
        "tpot_interval": [round(lv["tpot_speedup_interval"][k], 4) for k in ("low", "high")],
        "ttft_ms_median": [round(s["ttft_ms"]["median"], 1), round(b["ttft_ms"]["median"], 1)],
        "served_tau": None if lv["served_tau"] is None else round(lv["served_tau"], 4),
        "pays": lv["pays"],
        "peak_running": lv["peak_running"],
        "capped_at": lv["capped_at"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--drafter", action="append", default=[], type=Path, help="an exported drafter directory")
    parser.add_argument("--ngram", action="store_true", help="also measure prompt lookup (n-gram)")
    parser.add_argument("--prompts", required=True, help="held-out prompts (as python -m eval reads them)")
    parser.add_argument("--target", default=None, help="target path; default: each drafter's drafthub.json")
    parser.add_argument("--levels", type=int, nargs="+", default=[1, 4, 16], help="concurrency levels")
    parser.add_argument("--repeats", type=int, default=2, help="interleaved repeats, offline and under load")
    parser.add_argument("--num-prompts", type=int, default=32)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--out", type=Path, required=True, help="a new directory: each drafter's copy and report")
    args = parser.parse_args()
    machine.announce()  # this machine's class and speed, beside every figure below
    t0 = time.perf_counter()
    if args.out.exists():
        raise SystemExit(f"--out {args.out} exists; give a new directory (nothing measured is overwritten)")
    with tempfile.TemporaryDirectory() as tmp:
        drafters = [*args.drafter, *([ngram_export(Path(tmp) / "ngram")] if args.ngram else [])]
        if not drafters:
            raise SystemExit("give at least one --drafter or --ngram")
        results = [measure(d, args, f"{i}-{_kind(d)}") for i, d in enumerate(drafters)]
    print(
        json.dumps(
            machine.with_machine(
                {"drafters": results, "levels": args.levels, "wall_seconds": round(time.perf_counter() - t0, 1)}
            )
        )
    )


if __name__ == "__main__":
    main()
