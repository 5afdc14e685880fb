"""How much does training pay? drafthub's EAGLE-3 on SmolLM2: held-out τ and speed-up against training tokens seen.

    python scripts/bench_learning_curve.py --run runs/smollm2_main/<ts> --steps 25 50 100 200 400 --out runs/curve

--run is a finished main job (or `recipe=smollm2` run): its distilled data and features, its EAGLE-3's recipe and
the held-out prompts its eval decoded. Each point is `python -m train recipe=<the run's> trainer.schedule=wsd
trainer.max_steps=N` on that data, continued from the point before (trainer.continue_from: it starts where the
shorter run's decay began, so each point ends with the weights of one uninterrupted run of N steps, and the curve
costs its largest point plus the decays). Then every point and prompt lookup are measured together against one plain
baseline, on the engine path the run's eval settings choose. A rerun reuses the finished points.
Prints the machine line, a table and one JSON line (per point: steps, answer tokens seen, training seconds, τ with
its 95 % interval, speed-up), and draws <out>/learning_curve.png.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from omegaconf import OmegaConf

from eval import machine
from train.peers.runs import evaluated_run, measure_on_held_out, train_on_run_data

LOOKUP = "prompt lookup"

KIND = "eagle3"  # the family this benchmark compares


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--run", type=Path, required=True, help="a finished main job's (or recipe=smollm2's) run directory")
    p.add_argument("--steps", type=int, nargs="+", default=[25, 50, 100, 200, 400], help="optimizer steps per point")
    p.add_argument("--out", type=Path, default=Path("runs/bench_learning_curve"))
    p.add_argument("--num-prompts", type=int, default=None, help="held-out prompts measured (default: the run's)")
    p.add_argument("--lookup", type=Path, default=None, help="a prompt-lookup export of the target, measured beside")
    p.add_argument("--lookup-gamma", type=int, default=4, help="its γ (the bake-off's pick for prompt lookup)")
    return p.parse_args(argv)


def train_point(recipe: str, data: Path, out: Path, steps: int, before: Path | None) -> dict:
    """One point's run (skipped when its export exists): its training summary, with the seconds of this run alone
    (a continuation's own steps and decay)."""
    overrides = ["trainer.schedule=wsd", f"trainer.max_steps={steps}"]
    if before is not None:
        overrides.append(f"trainer.continue_from={before}")
    return train_on_run_data(data, recipe, out / f"steps-{steps:05d}", overrides)


def plot(path: Path, points: list[dict], lookup: dict | None) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    x = [p["answer_tokens_seen"] for p in points]
    below = [p["tau"] - p["tau_interval"][0] for p in points]
    above = [p["tau_interval"][1] - p["tau"] for p in points]
    left.errorbar(x, [p["tau"] for p in points], yerr=[below, above], marker="o", label="EAGLE-3 (drafthub)")
    right.plot(x, [p["speedup"] for p in points], marker="o", label="EAGLE-3 (drafthub)")
    right.axhline(1.0, color="grey", linestyle=":", label="plain decoding")
    if lookup:
        left.axhline(lookup["tau"], color="tab:green", linestyle="--", label=LOOKUP)
        right.axhline(lookup["speedup"], color="tab:green", linestyle="--", label=LOOKUP)
    for ax, label in ((left, "held-out τ (95 % interval)"), (right, "speed-up over plain decoding")):
        ax.set_xscale("log"), ax.set_xlabel("answer tokens seen in training"), ax.set_ylabel(label), ax.legend()
    fig.suptitle("SmolLM2-135M-Instruct: drafthub's EAGLE-3 against training compute")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv=None) -> dict:
    args = parse_args(argv)
    machine.announce()
    eagle = evaluated_run(args.run.resolve(), KIND)
    cfg = OmegaConf.load(eagle / ".hydra" / "config.yaml")
    data = (eagle / "data").resolve()
    args.out.mkdir(parents=True, exist_ok=True)
    summaries, before = [], None
    for steps in sorted(args.steps):
        summaries.append(train_point(cfg.recipe_name, data, args.out.resolve(), steps, before))
        before = Path(summaries[-1]["run_dir"])
    exports = {f"{s['optimizer_steps']} steps": Path(s["run_dir"]) / "drafter" for s in summaries}
    if args.lookup:
        exports[LOOKUP] = args.lookup
    reports = measure_on_held_out(eagle, exports, args.num_prompts, gammas={LOOKUP: args.lookup_gamma})
    points = [point(s, reports[name]) for s, name in zip(summaries, exports)]
    lookup = None if not args.lookup else {k: reports[LOOKUP][k] for k in ("tau", "speedup")}
    plot(args.out / "learning_curve.png", points, lookup)
    print(table(points, lookup))
    result = {"run": str(args.run), "points": points, "prompt_lookup": lookup}
    print(json.dumps(machine.with_machine(result)))
    return result


def point(summary: dict, report: dict) -> dict:
    spread = report["tau_spread"]
    return {
        "steps": summary["optimizer_steps"],
        "answer_tokens_seen": summary["training_data"]["answer_tokens_seen"],
        "train_seconds": summary["seconds"],
        "continued_from": (summary.get("continued_from") or {}).get("step"),
        "tau": round(report["tau"], 4),
        "tau_interval": [round(spread["low"], 4), round(spread["high"], 4)],
        "per_position_acceptance": [round(a, 4) for a in report["per_position_acceptance"]],
        "speedup": round(report["speedup"], 4),
        "lossless": report["lossless"],
    }


def table(points: list[dict], lookup: dict | None) -> str:
    lines = ["| steps | answer tokens seen | training (this run) | τ (95 %) | speed-up |", "|---|---|---|---|---|"]
    for p in points:
        low, high = p["tau_interval"]
        lines.append(
            f"| {p['steps']} | {p['answer_tokens_seen']:,} | {p['train_seconds']:.0f} s | {p['tau']:.3f} "
            f"({low:.3f}–{high:.3f}) | {p['speedup']:.2f}× |"
        )
    if lookup:
        lines.append(f"| {LOOKUP} | 0 | 0 s | {lookup['tau']:.3f} | {lookup['speedup']:.2f}× |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
