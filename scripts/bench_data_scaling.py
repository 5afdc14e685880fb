"""How much do data, the data's source and on-policy training buy? Held-out τ per drafter family per data size.

Distils the target's answers once at the largest size, then trains each family's toy recipe on
nested subsets (the first N samples) at equal optimizer steps and evaluates it alike (held-out
prompts, γ = 4; greedy unless `--temperature`, which sets the distilled answers' temperature too).
Also trains the draft LM on raw corpus text (`data.source=corpus`), the draft LM and EAGLE-3
on-policy (`trainer.policy=on_policy`, each rollout, drafting at the eval's temperature by
default) and with each of `--losses` (`al`) at `--compare-size` against their off-policy runs
there, and with `--long-steps` each family longer at the largest size (data or training length?).
Every run is a plain `python -m train` in its own run directory, so a rerun skips what is done.
Prints one JSON line (τ per family per size, the ratios and the issue's goals) and writes a PNG.

    python scripts/bench_data_scaling.py --out runs/bench_data_scaling
    python scripts/bench_data_scaling.py --families toy toy_eagle toy_pard --sizes 256 1024
    python scripts/bench_data_scaling.py --target chat --override data.max_prompt_tokens=960 \
        --override trainer.max_seq_len=1024 --families toy toy_eagle --out runs/bench_data_scaling_chat
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from eval import machine

FAMILIES = {  # recipe → label; the parallel drafters are listed too (--families picks)
    "toy": "draft LM",
    "toy_medusa": "Medusa",
    "toy_eagle": "EAGLE-3",
    "toy_pard": "PARD",
    "toy_peagle": "P-EAGLE",
    "toy_dflash": "DFlash",
    "toy_dspark": "DSpark",
    "toy_dflash2": "DFlash2",
}
ON_POLICY = {"toy": ("chains", "answers"), "toy_eagle": ("chains",)}  # on-policy families → their rollouts
SAME_EVAL = ["eval.gamma_sweep=[]", "eval.num_speculative_tokens=4", "eval.serve=null", "eval.tree=null"]
SETTINGS: list[str] = []  # the temperature the target answers, the eval decodes and (by default) the drafter drafts at


def _train(out: Path, name: str, recipe: str, overrides: list[str], data_dir: Path | None) -> dict:
    """`python -m train` for one run (skipped when its eval report exists); its report and train summary."""
    run_dir = out / name
    report = run_dir / "eval" / "eval_report.json"
    if not report.exists():
        run_dir.mkdir(parents=True, exist_ok=True)
        if data_dir is not None and not (run_dir / "data").exists():
            os.symlink(os.path.relpath(data_dir, run_dir), run_dir / "data", target_is_directory=True)
        cmd = [sys.executable, "-m", "train", f"recipe={recipe}", f"run_dir={run_dir}", "stages=[distill,train,eval]"]
        t0 = time.perf_counter()
        with open(out / f"{name}.log", "w") as log:
            subprocess.run(cmd + SAME_EVAL + SETTINGS + overrides, check=True, stdout=log, stderr=subprocess.STDOUT)
        print(f"[bench] {name}: {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    summary = json.loads((run_dir / "checkpoints" / "final" / "train_summary.json").read_text())
    r = json.loads(report.read_text())
    return {"tau": round(r["tau"], 3), "alpha": round(r["alpha"], 3), "train_seconds": summary["seconds"]}


def _run_config(overrides: list[str]):
    """The composed run config of the toy recipe under `overrides` (what `python -m train` would run)."""
    from hydra import compose, initialize_config_module
    from omegaconf import OmegaConf

    from train.config import register_configs

    register_configs()
    with initialize_config_module("conf", version_base=None):
        return OmegaConf.to_object(compose("config", overrides=["recipe=toy", *overrides]))


def _subset(out: Path, size: int, largest: int) -> Path:
    """The first `size` samples of the largest distilled set, as the data directory a size-N run expects."""
    from distill.stage.parts import first_samples

    source = out / f"data-{largest}"
    path = out / f"data-{size}"
    if size != largest:
        cfg = _run_config(SETTINGS + [f"data.max_prompts={size}"])  # the target and data a size-N run distils with
        first_samples(source, path, cfg.target, cfg.data)
    return path


def _toy_default_size() -> int:
    """data.max_prompts of the toy recipes (conf/data/toy.yaml): the size the goals are judged at."""
    from omegaconf import OmegaConf

    return int(OmegaConf.load(Path(__file__).resolve().parents[1] / "conf" / "data" / "toy.yaml").max_prompts)


def _at_least(ratio: float | None, goal: float) -> bool | None:
    """Whether a measured ratio meets its goal; None when this run did not measure it."""
    return None if ratio is None else ratio >= goal


def _plot(path: Path, target: str, sizes: list[int], curves: dict, goals: dict) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9.0, 4.6))
    colours = {}
    for label, taus in curves.items():
        xs = [s for s in sizes if str(s) in taus]
        (line,) = ax.plot(xs, [taus[str(s)] for s in xs], marker="o", label=label)
        colours[label] = line.get_color()
    markers = ["x", "^", "s", "D", "v", "P", "*", "<", ">"]
    for i, (label, (size, tau)) in enumerate(goals.items()):  # in its family's colour: "draft LM, raw corpus …"
        colour = colours.get(label.split(",")[0])
        ax.scatter([size], [tau], marker=markers[i % len(markers)], s=60, zorder=3, label=label, color=colour)
    ax.set_xscale("log", base=2)
    ax.set_xticks(sizes, [str(s) for s in sizes])
    ax.set_xlabel("distilled prompts (equal optimizer steps)")
    ax.set_ylabel("held-out τ (γ = 4)")
    ax.set_title(f"target={target}: acceptance vs training data")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.02, 0.5))
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("runs/bench_data_scaling"))
    parser.add_argument("--sizes", type=int, nargs="+", default=[256, 1024, 4096])
    parser.add_argument("--families", nargs="+", default=["toy", "toy_eagle", "toy_medusa"], choices=list(FAMILIES))
    parser.add_argument("--steps", type=int, default=300, help="optimizer steps of every run")
    parser.add_argument(
        "--jobs", type=int, default=1, help="curve runs at once (a GPU or many cores: runs are independent processes)"
    )
    parser.add_argument(
        "--seed",
        type=int,
        default=0,
        help="trainer.seed of every run (a second seed tells noise from a trend; give it its own --out)",
    )
    parser.add_argument("--compare-size", type=int, default=1024, help="size of the corpus and on-policy runs")
    parser.add_argument("--no-compare", action="store_true", help="only the data-scaling curves")
    parser.add_argument(
        "--on-policy-temperature",
        type=float,
        nargs="+",
        default=None,
        help="temperatures the drafter drafts at on-policy (default: --temperature, as the eval drafts)",
    )
    parser.add_argument(
        "--temperature",
        type=float,
        default=0.0,
        help="the target answers (distillation) and the eval decodes at this temperature (0 = greedy, as the toy's)",
    )
    parser.add_argument(
        "--losses", nargs="*", default=["al"], help="other trainer.loss values the on-policy families train with"
    )
    parser.add_argument("--loss-families", nargs="+", default=list(ON_POLICY), help="the recipes --losses trains")
    parser.add_argument(
        "--rollouts", nargs="+", default=["chains", "answers"], help="on-policy rollouts trained, where implemented"
    )
    parser.add_argument("--long-families", nargs="+", default=list(FAMILIES), help="the recipes --long-steps trains")
    parser.add_argument("--long-steps", type=int, default=0, help="also train each family this long at the largest")
    parser.add_argument("--target", default="toy", help="the target config (conf/target): toy, chat, micro, …")
    parser.add_argument(
        "--override",
        action="append",
        default=[],
        help="a Hydra override for every run, e.g. trainer.max_seq_len=1024 (repeat it for more)",
    )
    args = parser.parse_args()
    machine.announce()  # this machine's class and speed, beside every figure below
    sizes, out = sorted(args.sizes), args.out.resolve()
    temperature = args.temperature
    SETTINGS[:] = [
        f"target={args.target}",
        f"data.sampling.temperature={temperature}",
        f"eval.temperature={temperature}",
        *args.override,
    ]
    on_policy_temperatures = args.on_policy_temperature or [temperature]
    out.mkdir(parents=True, exist_ok=True)
    seed = f"trainer.seed={args.seed}"
    steps = [f"trainer.max_steps={args.steps}", seed]

    t0 = time.perf_counter()
    largest = sizes[-1]
    _train_distill = [sys.executable, "-m", "train", "recipe=toy", f"data.max_prompts={largest}", "stages=[distill]"]
    _train_distill += SETTINGS
    if not (out / f"data-{largest}" / "manifest.json").exists():
        with open(out / "distill.log", "w") as log:
            subprocess.run(
                _train_distill + [f"run_dir={out / 'distill'}"], check=True, stdout=log, stderr=subprocess.STDOUT
            )
        os.replace(out / "distill" / "data", out / f"data-{largest}")
    distill_seconds = json.loads((out / f"data-{largest}" / "manifest.json").read_text())["seconds"]
    data = {size: _subset(out, size, largest) for size in sizes}

    curves: dict[str, dict[str, float]] = {}
    grid = [(recipe, size) for recipe in args.families for size in sizes]

    def curve_run(recipe: str, size: int) -> dict:
        return _train(out, f"{recipe}-{size}", recipe, steps + [f"data.max_prompts={size}"], data[size])

    with ThreadPoolExecutor(args.jobs) as pool:  # each run is its own process: on a GPU several share the device
        done = list(pool.map(curve_run, *zip(*grid)))
    runs: dict[str, dict] = {f"{recipe}-{size}": run for (recipe, size), run in zip(grid, done)}
    for recipe, size in grid:
        curves.setdefault(FAMILIES[recipe], {})[str(size)] = runs[f"{recipe}-{size}"]["tau"]

    ratios, goals = {}, {}
    n = args.compare_size
    if not args.no_compare:
        on_policy = [r for r in ON_POLICY if r in args.families]
        base = {
            r: runs.get(f"{r}-{n}") or _train(out, f"{r}-{n}", r, steps + [f"data.max_prompts={n}"], data.get(n))
            for r in on_policy
        }
        if "toy" in args.families:  # the core claim: the draft LM on the target's answers vs on raw text
            corpus_overrides = steps + [f"data.max_prompts={n}", "data.source=corpus"]
            corpus = _train(out, f"toy-corpus-{n}", "toy", corpus_overrides, None)
            runs[f"toy-corpus-{n}"] = corpus
            ratios["distilled_vs_corpus_draft_lm"] = round(base["toy"]["tau"] / corpus["tau"], 3)
            goals[f"draft LM, raw corpus ({n})"] = (n, corpus["tau"])
        for recipe in on_policy:
            for rollout in [r for r in ON_POLICY[recipe] if r in args.rollouts]:
                for drafting in on_policy_temperatures:
                    what = f"{rollout}, T={drafting:g}"
                    name = f"{recipe}-on_policy-{rollout}-T{drafting:g}-{n}"
                    policy = [
                        "trainer.policy=on_policy",
                        f"trainer.on_policy_rollout={rollout}",
                        f"trainer.on_policy_temperature={drafting}",
                    ]
                    runs[name] = _train(out, name, recipe, steps + [f"data.max_prompts={n}", *policy], data.get(n))
                    ratio = round(runs[name]["tau"] / base[recipe]["tau"], 3)
                    ratios[f"on_vs_off_policy_{FAMILIES[recipe]} ({what})"] = ratio
                    goals[f"{FAMILIES[recipe]}, on-policy {what} ({n})"] = (n, runs[name]["tau"])
        for recipe in [r for r in on_policy if r in args.loss_families]:  # acceptance-aimed losses vs fkl
            for loss in args.losses:
                name = f"{recipe}-loss_{loss}-{n}"
                runs[name] = _train(
                    out, name, recipe, steps + [f"data.max_prompts={n}", f"trainer.loss={loss}"], data[n]
                )
                ratios[f"loss_{loss}_vs_fkl_{FAMILIES[recipe]}"] = round(runs[name]["tau"] / base[recipe]["tau"], 3)
                goals[f"{FAMILIES[recipe]}, loss {loss} ({n})"] = (n, runs[name]["tau"])
        if "toy_eagle" in args.families and "toy" in args.families:
            default = str(_toy_default_size())
            ratios["eagle3_vs_draft_lm"] = {
                str(s): round(curves["EAGLE-3"][str(s)] / curves["draft LM"][str(s)], 3) for s in sizes
            }
            ratios["eagle3_vs_draft_lm_at_default"] = ratios["eagle3_vs_draft_lm"].get(default)
    long = {}
    if args.long_steps:  # training length, not data: the largest set trained longer
        for recipe in [r for r in args.families if r in args.long_families]:
            name = f"{recipe}-{largest}-steps{args.long_steps}"
            overrides = [f"trainer.max_steps={args.long_steps}", seed, f"data.max_prompts={largest}"]
            runs[name] = _train(out, name, recipe, overrides, data[largest])
            long[FAMILIES[recipe]] = runs[name]["tau"]
            goals[f"{FAMILIES[recipe]}, {args.long_steps} steps"] = (largest, runs[name]["tau"])
        if {"EAGLE-3", "draft LM"} <= long.keys():  # is EAGLE-3 behind for want of training?
            ratios["eagle3_vs_draft_lm_long"] = round(long["EAGLE-3"] / long["draft LM"], 3)
    _plot(out / "data_scaling.png", args.target, sizes, curves, goals)
    result = {
        "bench": "data_scaling",
        "target": args.target,
        "overrides": args.override,
        "eval": f"32 held-out prompts × 64 tokens, temperature {temperature:g}, chain γ = 4",
        "distilled_at_temperature": temperature,
        "optimizer_steps": args.steps,
        "seed": args.seed,
        "sizes": sizes,
        "tau": curves,
        "tau_long": {"steps": args.long_steps, "size": largest, "tau": long} if long else None,
        "runs": runs,
        "ratios": ratios,
        "goals": {
            "on_policy_gain_ge_1.10": {k: v >= 1.10 for k, v in ratios.items() if k.startswith("on_vs_off")},
            "distilled_vs_corpus_ge_1.4": _at_least(ratios.get("distilled_vs_corpus_draft_lm"), 1.4),
            "eagle3_vs_draft_lm_ge_1.15": _at_least(ratios.get("eagle3_vs_draft_lm_at_default"), 1.15),
        },
        "default_size": _toy_default_size(),
        "distill_seconds_largest": distill_seconds,
        "plot": str(out / "data_scaling.png"),
        "seconds": round(time.perf_counter() - t0, 1),
    }
    result = machine.with_machine(result)
    (out / "data_scaling.json").write_text(json.dumps(result, indent=2))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
