"""Served τ and served speed-up per engine for exported drafters: each drafter served by every engine asked for
(vLLM, llama.cpp), each beside drafthub's own figures measured in the same process, as `python -m eval … serve=…`
measures them (the served speed-up: each prompt alone with and without the drafter, interleaved, repeated).

    python scripts/bench_served.py --drafter runs/toy/<ts>/drafter --drafter runs/toy_eagle/<ts>/drafter \\
        --prompts ~/.cache/drafthub/toyworld/toy-<key>/prompts/heldout.jsonl --engines llamacpp vllm

A drafter served by llama.cpp needs its GGUF (an export with publish.engines=[llamacpp]). Prints one JSON line:
per drafter and engine, served τ beside ours (and their gap), outputs equal / prompts, the served speed-up with its
95% interval beside ours, tokens/s with and without the drafter. Run it on a quiet machine.

`--gammas 2 4 6` serves each γ; `--p-mins 0 0.5 0.8` also sweeps llama-server's own draft cut
(`eval.llamacpp.draft_p_min`, llama.cpp only): one served check per (γ, p), and the fastest per drafter and engine
is named (`best`).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from eval import machine


def serve_once(drafter: Path, engine: str, args, gamma: int | None = None, p_min: float = 0.0) -> dict:
    """One `python -m eval` with the served check on `engine` (at γ and llama-server's draft cut p_min, where
    given); its report's figures."""
    with tempfile.TemporaryDirectory() as out:
        argv = [sys.executable, "-m", "eval", f"drafter_dir={drafter}", f"prompts={args.prompts}", f"out_dir={out}"]
        argv += [f"serve={engine}", f"eval.num_prompts={args.num_prompts}"]
        argv += [f"eval.num_speculative_tokens={gamma}"] if gamma else []
        argv += [f"eval.llamacpp.draft_p_min={p_min}"] if p_min else []
        argv += [f"eval.max_new_tokens={args.max_new_tokens}", "eval.gamma_sweep=[]"]  # the served γ only
        argv += [f"target_path={args.target}"] if args.target else []
        argv += [f"eval.vllm.speed_repeats={args.repeats}", f"eval.llamacpp.speed_repeats={args.repeats}"]
        t0 = time.perf_counter()
        done = subprocess.run(argv, capture_output=True, text=True)
        report_file = Path(out) / "eval_report.json"
        if not report_file.is_file():
            raise SystemExit(f"python -m eval failed on {drafter} with {engine}: {done.stderr.strip()[-500:]}")
        report = json.loads(report_file.read_text())
    sv = report["served"]
    spread = sv.get("speedup_spread") or {}
    return {
        "drafter": str(drafter),
        "kind": report["kind"],
        "engine": sv["engine"],
        "engine_version": sv.get("engine_version"),
        "method": sv["method"],
        "gamma": sv["num_speculative_tokens"],
        "p_min": sv.get("draft_p_min", 0.0),
        "served_tau": round(sv["tau"], 4),
        "ours_tau": round(sv["ours"]["tau"], 4),
        "tau_gap": round(abs(sv["tau"] - sv["ours"]["tau"]) / sv["ours"]["tau"], 4),
        "served_per_position": [round(a, 3) for a in sv["per_position_acceptance"]],
        "ours_per_position": [round(a, 3) for a in sv["ours"]["per_position_acceptance"]],
        "equal_prompts": f"{sv['equal_prompts']}/{sv['num_prompts']}",
        "near_ties": sv.get("near_ties", {}),
        "verdict": sv["verdict"],
        "served_speedup": sv.get("speedup"),
        "served_interval": [spread.get("low"), spread.get("high")],
        "served_tokens_per_second": sv.get("tokens_per_second"),
        "served_noisy": (sv.get("timing") or {}).get("noisy"),
        "ours_speedup": report["speedup"],
        "ours_interval": [report["speedup_spread"]["low"], report["speedup_spread"]["high"]],
        "seconds": round(time.perf_counter() - t0, 1),
    }


def fastest(rows: list[dict]) -> list[dict]:
    """Per drafter and engine, the (γ, p-min) served fastest with its outputs equal to the target's."""
    best: dict[tuple, dict] = {}
    for r in rows:
        key = (r["drafter"], r["engine"])
        if r["verdict"] == "ok" and (r["served_speedup"] or 0) > (best.get(key, {}).get("served_speedup") or 0):
            best[key] = r
    keys = ("drafter", "engine", "gamma", "p_min", "served_speedup", "served_interval")
    return [{k: r[k] for k in keys} for r in best.values()]


def _line(r: dict) -> str:
    return (
        f"{r['kind']:>9} {r['engine']:>8} γ {r['gamma']} p-min {r['p_min']:g}: served τ {r['served_tau']:.3f} "
        f"(ours {r['ours_tau']:.3f}, {r['tau_gap']:.1%} apart), outputs {r['equal_prompts']}, served speed-up "
        f"{_ratio(r['served_speedup'], r['served_interval'])}, ours {_ratio(r['ours_speedup'], r['ours_interval'])}"
    )


def _ratio(speedup: float | None, interval: list) -> str:
    """1.30× (1.17–1.46×), or why there is none (the engine's speed not timed for this method)."""
    if speedup is None:
        return "not timed"
    low, high = interval
    return f"{speedup:.2f}×" + (f" ({low:.2f}–{high:.2f}×)" if low is not None and high is not None else "")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--drafter", action="append", required=True, type=Path, help="an export directory (repeat)")
    parser.add_argument("--prompts", required=True, help="held-out prompts (what python -m eval reads)")
    parser.add_argument("--engines", nargs="+", default=["llamacpp", "vllm"])
    parser.add_argument("--target", help="the target's directory; default: the one in each drafter's drafthub.json")
    parser.add_argument("--num-prompts", type=int, default=32)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=2, help="timed passes over the prompts, each side")
    parser.add_argument("--gammas", type=int, nargs="+", default=[None], help="γ values served (default: eval's)")
    parser.add_argument("--p-mins", type=float, nargs="+", default=[0.0], help="llama-server draft cuts (llama.cpp)")
    args = parser.parse_args()
    machine.announce()  # this machine's class and speed, beside every figure below
    rows = []
    for d in args.drafter:
        for engine in args.engines:
            for gamma in args.gammas:
                for p_min in args.p_mins if engine == "llamacpp" else [0.0]:
                    rows.append(serve_once(d, engine, args, gamma, p_min))
                    print(_line(rows[-1]), file=sys.stderr, flush=True)  # as measured: a long sweep shows progress
    print(json.dumps(machine.with_machine({"bench": "served", "rows": rows, "best": fastest(rows)})))
    return 0


if __name__ == "__main__":
    sys.exit(main())
