"""Which training levers pay on this machine? The main job's EAGLE-3 retrained with one setting changed at a time.

    python scripts/bench_levers.py --run runs/smollm2_main/<ts> --steps 100 --out runs/levers [--measure baseline muon]

Every lever trains the run's EAGLE-3 recipe for --steps optimizer steps on the run's own distilled data and stored
features (linked, not recomputed), one setting changed (LEVERS below), one after another on the same cores. Each is
scored by its held-out simulated τ (the 32 distilled samples every run holds out alike, at the best checkpoint) and
its training minutes: what it buys in τ, and in τ above plain decoding per CPU-minute. `--measure` decodes the named
levers' exports with the real speculative loop on the run's held-out MT-Bench + HumanEval prompts (τ with its
interval, speed-up), where a lever also changes what drafting costs (the draft vocabulary) or the proxy may mislead.
A rerun reuses finished levers. Prints the machine line, a table and one JSON line.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
from omegaconf import OmegaConf

from distill.device import native_bf16
from eval import machine
from train.peers.runs import evaluated_run, measure_on_held_out, train_on_run_data

KIND = "eagle3"  # the family whose levers are measured
BASELINE = "baseline"
READ_TEXT = "read text"
# the recipe trains in bf16 where the CPU computes it natively (AVX-512-BF16, AMX), else in fp32: the lever is the other
PRECISION = (
    (["trainer.mixed_precision=no"], "fp32, where the recipe trains in bf16 (this CPU computes bf16 natively)")
    if native_bf16(torch.device("cpu"))
    else (["trainer.mixed_precision=bf16"], "bf16 autocast, which this CPU emulates (the recipe trains in fp32)")
)
# lever → (overrides of the run's recipe, what it changes). The recipe: fkl over the whole 8k draft vocabulary,
# AdamW at 3e-3, the target's features read from the offline store, the lm_head frozen at the target's rows.
LEVERS = {
    BASELINE: ([], "the run's recipe"),
    "seed 1": (["trainer.seed=1"], "the same recipe, another seed: the noise between two equal runs"),
    "online features": (["drafter.features=online"], "the target's forward in every step instead of stored features"),
    "hard labels": (["trainer.loss=ce"], "the sampled token as the label, no teacher distribution"),
    "top-8 targets": (["trainer.kd_top_k=8"], "the target's top 8 draft tokens renormalised, not its whole 8k"),
    "other precision": PRECISION,
    "lr 1e-3": (["trainer.lr=1e-3"], "a third of the learning rate"),
    "lr 1e-2": (["trainer.lr=1e-2"], "3.3× the learning rate"),
    "muon": (["trainer.optimizer=muon"], "Muon on the hidden matrices (speculators' default), AdamW on the rest"),
    "trained lm_head": (["drafter.train_lm_head=true"], "the lm_head trained from the target's rows (not frozen)"),
    "vocab 4k": (["drafter.draft_vocab_size=4096"], "half the draft vocabulary"),
    "vocab 16k": (["drafter.draft_vocab_size=16384"], "twice the draft vocabulary"),
    # data the target only reads: its forward over text (features and soft targets), no generation. Its own data
    # (distilled in its run, timed there): scored by the real loop only, its held-out samples being other text
    READ_TEXT: (
        ["data.source=corpus", "data.prompts=stdlib_code_answers", "data.mix=[]", "data.max_prompts=800"],
        "800 windows of the stdlib's code the target reads (154k tokens, 8× the run's answer tokens), not its answers",
    ),
}


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--run", type=Path, required=True, help="a finished main job's (or recipe=smollm2's) run directory")
    p.add_argument("--steps", type=int, default=100, help="optimizer steps of every lever's run")
    p.add_argument("--out", type=Path, default=Path("runs/bench_levers"))
    p.add_argument("--levers", nargs="+", default=list(LEVERS), choices=list(LEVERS), help="levers trained")
    p.add_argument("--measure", nargs="*", default=[], choices=list(LEVERS), help="levers decoded by the real loop")
    p.add_argument("--num-prompts", type=int, default=None, help="held-out prompts measured (default: the run's)")
    args = p.parse_args(argv)
    if BASELINE not in args.levers:
        args.levers.insert(0, BASELINE)  # every lever is read against it
    if missing := [name for name in args.measure if name not in args.levers]:
        p.error(f"--measure {' '.join(missing)}: not among --levers; add them there")
    return args


def data_minutes(data: Path) -> float:
    """What distilling a dataset took (its manifest's seconds), in minutes."""
    return round(json.loads((data / "manifest.json").read_text())["seconds"] / 60, 2)


def scored(name: str, summary: dict, baseline: dict | None) -> dict:
    """One lever's row: held-out simulated τ, training minutes, τ above plain decoding per CPU-minute."""
    tau, minutes = summary["selected_checkpoint"]["score"], summary["seconds"] / 60
    row = {
        "lever": name,
        "overrides": LEVERS[name][0],
        "sim_tau": round(tau, 4),
        "train_minutes": round(minutes, 2),
        "tau_gain_per_cpu_minute": round((tau - 1) / minutes, 4),
    }
    if baseline is not None:
        row["sim_tau_delta"] = round(tau - baseline["sim_tau"], 4)
        row["time_ratio"] = round(minutes / baseline["train_minutes"], 3)
    return row


def measured(run: Path, rows: list[dict], names: list[str], num_prompts: int | None) -> None:
    """Adds τ (95 % interval) and speed-up from the real speculative loop to the named levers' rows."""
    by_name = {row["lever"]: row for row in rows}
    exports = {name: Path(by_name[name]["run_dir"]) / "drafter" for name in names}
    reports = measure_on_held_out(run, exports, num_prompts)
    for name, report in reports.items():
        spread = report["tau_spread"]
        by_name[name]["measured"] = {
            "tau": round(report["tau"], 4),
            "tau_interval": [round(spread["low"], 4), round(spread["high"], 4)],
            "speedup": round(report["speedup"], 4),
            "lossless": report["lossless"],
            "prompts": report["settings"]["num_prompts"],
        }


def table(rows: list[dict]) -> str:
    lines = [
        "| lever | held-out sim-τ | Δ | training | time × | (τ−1)/CPU-min | measured τ (95 %) | speed-up |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        seen = row.get("measured")
        real = f"{seen['tau']:.3f} ({seen['tau_interval'][0]:.3f}–{seen['tau_interval'][1]:.3f})" if seen else ""
        speedup = f"{seen['speedup']:.2f}×" if seen else ""
        lines.append(
            f"| {row['lever']} | {row['sim_tau']:.3f} | {row.get('sim_tau_delta', 0):+.3f} | "
            f"{row['train_minutes']:.1f} min | {row.get('time_ratio', 1):.2f} | {row['tau_gain_per_cpu_minute']:.3f} | "
            f"{real} | {speedup} |"
        )
    return "\n".join(lines)


def main(argv=None) -> dict:
    args = parse_args(argv)
    machine.announce()
    eagle = evaluated_run(args.run.resolve(), KIND)
    cfg = OmegaConf.load(eagle / ".hydra" / "config.yaml")
    data, out = (eagle / "data").resolve(), args.out.resolve()
    rows, baseline = [], None
    for name in args.levers:
        run_dir, own = out / name.replace(" ", "-"), name == READ_TEXT  # its own data, distilled in its run
        overrides = [f"trainer.max_steps={args.steps}", *LEVERS[name][0]]
        summary = train_on_run_data(None if own else data, cfg.recipe_name, run_dir, overrides)
        rows.append(scored(name, summary, baseline) | {"run_dir": str(run_dir)})
        if own:  # its distillation's minutes (no generation: the text tokenized into windows); features: training's
            rows[-1]["data_minutes"] = round(
                json.loads((run_dir / "data" / "manifest.json").read_text())["seconds"] / 60, 2
            )
            rows[-1]["sim_tau_on"] = "its own held-out text windows (not comparable: see measured τ)"
        baseline = baseline or rows[0]
        print(f"[levers] {name}: held-out sim-τ {rows[-1]['sim_tau']:.3f} in {rows[-1]['train_minutes']:.1f} min")
    if args.measure:
        measured(eagle, rows, args.measure, args.num_prompts)
    print(table(rows))
    # the run's own data: what its distillation cost once (every lever but read text reuses it, features included)
    result = {"run": str(args.run), "steps": args.steps, "run_data_minutes": data_minutes(data), "levers": rows}
    print(json.dumps(machine.with_machine(result)))
    return result


if __name__ == "__main__":
    main()
