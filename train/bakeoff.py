"""Drafter bake-off: several recipes' drafters, one target, one dataset, one evaluation, one verdict.

Each contender keeps its recipe's drafter and trainer settings; the bake-off imposes its own
target, data, eval settings and device, so the only difference left is the drafter family (and what
bakeoff.overrides gives one contender, such as its own γ: the table names each one's).
Data is distilled once and shared. Every contender's run directory is a normal run directory
(resumable stage by stage); the comparison lands in <run>/bakeoff/.
"""

from __future__ import annotations

import json
import os
from contextlib import nullcontext
from pathlib import Path
from typing import Optional

from omegaconf import DictConfig, OmegaConf

from eval.report import pyplot, save_figure
from eval.serving import missing_reason
from heads.card import served_tau_text, speedup_text
from heads.families import get_family
from heads.formats import ENGINE_NAMES
from heads.formats.staging import atomic_write_text
from heads.load_card import break_even_short

SHARED = ("target", "data", "eval", "eval_split", "eval_prompts", "eval_prompts_column", "device")
# where contenders are published when the bake-off is given a registry or Hub repo (min_tau, model_name: the recipe's)
SHARED_PUBLISH = ("hub_dir", "repo_id", "private", "verify_prompts", "engines")
OUT = "bakeoff"


def contender_config(name: str, shared: DictConfig, run_dir: Path, serve, publish: bool = False) -> DictConfig:
    """Recipe `name` composed as `python -m train recipe=name` with bakeoff.overrides (all, then its own)
    would be, with the bake-off's shared settings; publish=True adds the publish stage (to the bake-off's
    publish.hub_dir / publish.repo_id)."""
    from hydra import compose, initialize_config_module
    from hydra.core.global_hydra import GlobalHydra

    from train.config import register_configs

    register_configs()
    scope = (
        nullcontext()
        if GlobalHydra.instance().is_initialized()
        else initialize_config_module(config_module="conf", version_base=None)
    )
    with scope:
        extra = [*shared.bakeoff.overrides.get("all", []), *shared.bakeoff.overrides.get(name, [])]
        cfg = compose("config", overrides=[f"recipe={name}", *extra])
    own = ("drafter", "trainer") if name == shared.bakeoff.own else ()
    for key in SHARED + own:
        cfg[key] = shared[key]
    cfg.merge_with_dotlist([o for o in extra if o.split("=", 1)[0].split(".", 1)[0] in SHARED + own])  # its own win
    family = get_family(cfg.drafter.kind)
    cfg.eval.serve = serve if serve and not family.not_served(serve) else None  # e.g. lookahead: no vLLM method
    if cfg.eval.serve_url is None and family.not_served("vllm"):
        cfg.eval.serve_load = []  # no load sweep where vLLM cannot serve the family (its row says why)
    for key in SHARED_PUBLISH:
        cfg.publish[key] = shared.publish[key]
    cfg.run_dir, cfg.stages = str(run_dir), ["train", "eval", *(["publish"] if publish else [])]
    return cfg


def run_bakeoff(dict_config: DictConfig, run_pipeline, root: Path, distil, eval_together) -> dict:
    """Train every contender under root/<recipe>, evaluate it on each workload, write the comparison, return it.

    distil: the run's distill stage (into root/data), called once before any contender. eval_together(configs):
    the eval stage of several contenders' runs at once (bakeoff.shared_baseline; train/pipeline.py).

    The first workload is the bake-off's own eval settings; every other one (bakeoff.workloads) evaluates
    the same drafters again under root/<workload>/<recipe>, whose data and checkpoints link to the first run's,
    so nothing is trained twice. With publish.hub_dir (or publish.repo_id) set, every contender's drafter, as
    evaluated on the first workload, is published there: a registry whose leaderboard is the bake-off.
    """
    cfg = OmegaConf.to_object(dict_config)
    serve = bakeoff_engine(cfg.bakeoff.serve)
    if cfg.bakeoff.serve == "auto" and serve is None:
        print(f"bake-off: no served check ({missing_reason('vllm')})")
    distil()  # the distill stage, once, into root/data, for every contender
    if not set(cfg.stages) - {"distill"}:  # stages=[distill]: the shared data alone (a later run resumes from it)
        return {"distilled": str(root / "data")}
    workloads = {cfg.bakeoff.workload: [], **cfg.bakeoff.workloads}
    rows: dict[str, list] = {name: [] for name in workloads}

    def contender_at(name: str, workload: str) -> tuple[Path, DictConfig]:
        overrides = workloads[workload]
        first = not overrides and workload == cfg.bakeoff.workload
        run_dir = root / name if first else root / workload / name
        _link_shared(run_dir, root, name, first)
        publish = first and bool(cfg.publish.hub_dir or cfg.publish.repo_id) and cfg.bakeoff.publish == "all"
        contender = contender_config(name, dict_config, run_dir, serve, publish)
        contender.merge_with_dotlist(list(overrides))
        return run_dir, contender

    if cfg.bakeoff.shared_baseline:
        for workload in workloads:
            evaluate_workload(
                [contender_at(name, workload)[1] for name in cfg.bakeoff.recipes], run_pipeline, eval_together
            )
    for name in cfg.bakeoff.recipes:
        for workload in workloads:
            run_dir, contender = contender_at(name, workload)
            print(f"bake-off: {name} on {workload}")
            results = run_pipeline(contender)
            rows[workload].append(contender_row(name, run_dir, results["train"], results["eval"]))
    comparison = {
        "workloads": {
            workload: {
                "contenders": rows[workload],
                "recommended": recommend(rows[workload], cfg.bakeoff.speedup_tie),
                "free_vs_trained": free_vs_trained(rows[workload], cfg.bakeoff.speedup_tie),
                "by_category": category_verdicts(rows[workload], cfg.bakeoff.speedup_tie),
                "overrides": list(overrides),
            }
            for workload, overrides in workloads.items()
        },
        "served_check": serve,  # the engine (falsy: none)
        "served_check_reason": None if serve else _why_not_served(cfg.bakeoff.serve),
        "settings": OmegaConf.to_container(dict_config.eval, resolve=True),
    }
    write_comparison(root / OUT, comparison)
    if cfg.bakeoff.publish == "best":
        comparison["published"] = publish_best(dict_config, run_pipeline, root, comparison, serve)
        write_comparison(root / OUT, comparison, show=False)  # with what was published; the run ends on its line
        print(comparison["published"]["line"])
    return comparison


def evaluate_workload(contenders: list[DictConfig], run_pipeline, eval_together) -> None:
    """bakeoff.shared_baseline: each contender's stages up to its eval (its training, or its checkpoint reused),
    then every one's eval stage at once, against one shared baseline; the bake-off's own pass then finds each
    contender's report valid and goes on to publish."""
    for contender in contenders:  # contender_config's stages: train, eval (publish)
        run_pipeline(OmegaConf.merge(contender, {"stages": ["train"]}))
    eval_together(contenders)


def publish_best(dict_config: DictConfig, run_pipeline, root: Path, comparison: dict, serve) -> dict:
    """bakeoff.publish=best: the first workload's recommended contender published (to publish.hub_dir /
    publish.repo_id where set), its card holding the comparison. Returns the recipe, its drafter and the line the
    run ends on (recipe None: nothing was lossless, nothing published)."""
    workload = next(iter(comparison["workloads"].values()))
    best = workload["recommended"]
    if best is None:
        return {"recipe": None, "line": "[eval] published: nothing — no contender decoded losslessly (bakeoff/)"}
    contender = contender_config(best["recipe"], dict_config, root / best["recipe"], serve, publish=True)
    contender.stages = ["publish"]
    contender.publish = dict_config.publish  # the run's own publish settings (its gate's min_tau, engines) govern
    contender.publish.comparison = str(root / OUT / "comparison.json")
    (root / best["recipe"] / "published.json").unlink(missing_ok=True)  # the comparison may be new: card it again
    run_pipeline(contender)
    rows, drafter = {row["recipe"]: row for row in workload["contenders"]}, root / best["recipe"] / "drafter"
    line = published_line(rows[best["recipe"]], workload["contenders"], drafter)
    return {"recipe": best["recipe"], "drafter": str(drafter), "line": line}


def published_line(best: dict, rows: list[dict], drafter: Path) -> str:
    """`[eval] published: <family> τ …, speed-up … (lossless …); EAGLE-3 τ … after N tokens (break-even …)`: the
    winner, and what the best trained contender reached (its τ against the τ at which it would pay)."""
    lossless = "lossless" if best["lossless"] else "NOT lossless"
    line = f"[eval] published: {best['kind']} τ {best['tau']:.2f}, speed-up {speedup_text(best)} ({lossless})"
    trained = [r for r in rows if r["trained"] and r is not best]
    if trained:
        r = max(trained, key=lambda row: row["speedup"])
        seen = (r.get("training_data") or {}).get("answer_tokens_seen")
        count = f"{seen / 1000:.0f}k" if seen and seen >= 10_000 else str(seen)
        after = f" after {count} answer tokens" if seen is not None else ""
        even = f" (break-even τ ≈ {r['break_even_tau']:.2f}: train/README.md)" if r.get("break_even_tau") else ""
        line += f"; {r['kind']} τ {r['tau']:.2f}, {r['speedup']:.2f}×{after}{even}"
    return f"{line}; drafter: {drafter}"


def bakeoff_engine(setting: str) -> Optional[str]:
    """bakeoff.serve → the engine serving every contender: auto = vLLM where it is installed, off = none."""
    if setting == "auto":
        return "vllm" if missing_reason("vllm") is None else None
    return None if setting == "off" else setting


def _why_not_served(setting: str) -> str:
    """Why the bake-off ran no served check, for its table's readers."""
    return "bakeoff.serve=off" if setting == "off" else missing_reason("vllm") or f"bakeoff.serve={setting}"


def _link_shared(run_dir: Path, root: Path, name: str, first: bool) -> None:
    """A contender's run directory: the shared distilled data; for a later workload, the first run's checkpoints."""
    run_dir.mkdir(parents=True, exist_ok=True)
    links = {"data": root / "data"} if first else {"data": root / "data", "checkpoints": root / name / "checkpoints"}
    for link, source in links.items():
        if not (run_dir / link).exists():
            (root / name / "checkpoints").mkdir(parents=True, exist_ok=True)
            os.symlink(os.path.relpath(source, run_dir), run_dir / link, target_is_directory=True)


def contender_row(name: str, run_dir: Path, train: dict, report: dict) -> dict:
    served = report.get("served") or {}
    return {
        "recipe": name,
        "kind": report["kind"],
        "tau": report["tau"],
        "alpha": report["alpha"],
        "speedup": report["speedup"],
        "speedup_spread": report.get("speedup_spread"),
        "served_speedup": served.get("speedup"),
        "served_speedup_spread": served.get("speedup_spread"),
        "cost_ratio": report["cost_ratio"],
        "gamma": report["settings"]["num_speculative_tokens"],  # a contender's own override may differ
        # τ at which it would pay on this path: verifying γ + 1 tokens plus drafting, in plain steps (v + γ·c)
        "break_even_tau": _break_even_tau(report),
        # the decoding alone (prefills apart) and what τ / (v + γ·c) predicts for it: their gap is the engine's
        "verify_cost": report.get("verify_cost"),
        "decode_speedup": report.get("decode_speedup"),
        "predicted_speedup_from_tau": report.get("predicted_speedup_from_tau"),
        "draft_forwards_per_step": report["draft_forwards_per_step"],
        "lossless": report["lossless"],
        "parameters": train["parameters"],
        "train_seconds": train["seconds"],
        "trained": _trained(train),
        "training_data": train.get("training_data"),
        "served_tau": served.get("tau"),
        "served_ours_tau": (served.get("ours") or {}).get("tau"),
        "served_verdict": served.get("verdict"),
        "break_even": (report.get("serving_load") or {}).get("break_even"),  # eval.serve_load: None = not swept
        "categories": {
            name: {key: figures.get(key) for key in _PER_CATEGORY} for name, figures in report["categories"].items()
        },
        "run_dir": str(run_dir),
    }


def _break_even_tau(report: dict) -> Optional[float]:
    v, drafting = report.get("verify_cost"), report.get("draft_cost_per_step")
    return None if v is None or drafting is None else v + drafting


_PER_CATEGORY = ("prompts", "tau", "alpha", "speedup", "speedup_spread")  # a contender's figures on one category


def category_verdicts(rows: list[dict], tie: float = 0.03) -> dict:
    """Per prompt category of the workload (MT-Bench's eight, HumanEval; {} with fewer than two), the drafter
    `recommend` picks from the contenders' figures on that category's prompts alone."""
    names = list(dict.fromkeys(name for r in rows for name in r.get("categories") or {}))
    if len(names) < 2:
        return {}
    return {
        name: recommend([{**r, **r["categories"][name]} for r in rows if name in (r.get("categories") or {})], tie)
        for name in names
    }


def _trained(train: dict) -> bool:
    """Whether the train stage fitted weights. Free: prompt lookup, suffix decoding, lookahead (no train stage)
    and a layer skip set found by search alone (0 optimizer steps). Summaries written before the step count
    was recorded all come from trainings that fitted weights."""
    return "skipped" not in train and train.get("optimizer_steps", 1) > 0


def free_vs_trained(rows: list[dict], tie: float = 0.03) -> dict | None:
    """Whether the best trained drafter beats the best free one (lossless rows, by measured speed-up; within
    `tie` of each other the speed-ups count as equal, as in `recommend`)."""
    lossless = [r for r in rows if r["lossless"]]
    free = max((r for r in lossless if not r["trained"]), key=lambda r: r["speedup"], default=None)
    trained = max((r for r in lossless if r["trained"]), key=lambda r: r["speedup"], default=None)
    if free is None or trained is None:
        return None
    gain = trained["speedup"] / free["speedup"]  # > 1: training paid off
    return {
        "best_free": free["recipe"],
        "best_trained": trained["recipe"],
        "outcome": "trained" if gain > 1 + tie else ("free" if gain < 1 / (1 + tie) else "tie"),
        "speedup_gain": gain,
        "tau_gain": trained["tau"] - free["tau"],
        "tie": tie,
    }


def _free_vs_trained_line(verdict: dict | None, rows: list[dict]) -> str:
    if verdict is None:
        return "No comparison of trained and training-free drafters (the bake-off lacks one of the two)."
    by = {r["recipe"]: r for r in rows}
    free, trained = by[verdict["best_free"]], by[verdict["best_trained"]]
    named = {
        key: f"`{r['recipe']}` ({r['speedup']:.2f}×, τ {r['tau']:.2f})"
        for key, r in (("free", free), ("trained", trained))
    }
    tau = f"{verdict['tau_gain']:+.2f} in τ for the trained one"
    if verdict["outcome"] == "trained":
        return (
            f"**Training paid off here:** the best trained drafter, {named['trained']}, beats the best free one, "
            f"{named['free']}, by {verdict['speedup_gain']:.2f}× in speed-up ({tau})."
        )
    if verdict["outcome"] == "free":
        return (
            f"**Training did not pay off here:** the best free contender, {named['free']}, is "
            f"{1 / verdict['speedup_gain']:.2f}× as fast as the best trained drafter, {named['trained']} ({tau})."
        )
    return (
        f"**A tie in speed-up:** the best trained drafter, {named['trained']}, and the best free one, "
        f"{named['free']}, are within {verdict['tie']:.0%} of each other ({tau})."
    )


def recommend(rows: list[dict], tie: float = 0.03) -> dict | None:
    """The drafter to publish: lossless, served check (if any) agreed, fastest — where speed-ups
    within `tie` (relative) of the best count as equal, the higher τ wins, since τ carries over
    to other hardware and a wall-clock speed-up measured on a busy CPU does not exactly."""
    eligible = [r for r in rows if r["lossless"] and r["served_verdict"] in (None, "ok")]
    if not eligible:
        return None
    fastest = max(r["speedup"] for r in eligible)
    tied = [r for r in eligible if r["speedup"] >= fastest * (1 - tie)]
    best = max(tied, key=lambda r: (r["tau"], r["speedup"]))
    why = (
        f"highest measured speed-up ({best['speedup']:.2f}×)"
        if len(tied) == 1
        else f"speed-up {best['speedup']:.2f}×, within {tie:.0%} of the fastest ({fastest:.2f}×), "
        f"and the highest τ ({best['tau']:.2f}) of the {len(tied)} that close"
    )
    load = best.get("break_even")
    holds = (
        f"; served under load it {load['verdict']}"
        if load
        else "; measured one request at a time (eval.serve_load=[1, 4, 16] measures it under load)"
    )
    return {
        "recipe": best["recipe"],
        "kind": best["kind"],
        "reason": why
        + " among lossless contenders"
        + (" whose served check agreed" if best["served_verdict"] else "")
        + holds,
    }


def write_comparison(out: Path, comparison: dict, show: bool = True) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for workload, result in comparison["workloads"].items():
        _plot(out / f"comparison_{workload}.png", result["contenders"])
    atomic_write_text(out / "comparison.md", render_markdown(comparison))
    atomic_write_text(out / "comparison.json", json.dumps(comparison, indent=2))
    if show:
        print(render_markdown(comparison))


def _table(rows: list[dict], served) -> list[str]:
    load = any(r.get("break_even") for r in rows)
    head = (
        "| recipe | drafter | γ | τ | α | c | drafter forwards/step | speed-up (95% interval) | v "
        "| decoding speed-up (τ/(v+γc)) | lossless | parameters | training | training data |"
        + (" served τ | served check | served speed-up (95% interval) |" if served else "")
        + (" break-even load (vllm serve) |" if load else "")
    )
    rule = (
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
        + ("---|---|---|" if served else "")
        + ("---|" if load else "")
    )
    return [head, rule] + [
        f"| {r['recipe']} | {r['kind']} | {r.get('gamma', '–')} | {r['tau']:.2f} | {r['alpha']:.3f} "
        f"| {r['cost_ratio']:.3f} "
        f"| {r['draft_forwards_per_step']:.1f} | {speedup_text(r)} | {_decoding(r)} "
        f"| {'yes' if r['lossless'] else 'NO'} | {r['parameters'] / 1e6:.2f} M | {_training(r)} "
        f"| {_data(r.get('training_data'))} |"
        + (
            f" {served_tau_text({'tau': r['served_tau'], 'ours_tau': r.get('served_ours_tau')})} "
            f"| {r['served_verdict'] or _not_served(r, _engine(served))} "
            f"| {speedup_text(r, 'served_speedup', 'served_speedup_spread')} |"
            if served
            else ""
        )
        + (f" {break_even_short({'break_even': r['break_even']} if r.get('break_even') else None)} |" if load else "")
        for r in rows
    ]


def _decoding(row: dict) -> str:
    """v, and the measured decoding speed-up beside τ / (v + γ·c); – for a row from before prefills were timed
    apart (its v priced a plain step with a share of the prefill)."""
    if row.get("decode_speedup") is None:
        return "– | –"
    return f"{row['verify_cost']:.2f} | {row['decode_speedup']:.2f}× ({row['predicted_speedup_from_tau']:.2f}×)"


def _training(row: dict) -> str:
    minutes = f"{row['train_seconds'] / 60:.1f} min"
    return minutes if row["trained"] or row["train_seconds"] else "none (0)"


def _data(data: dict | None) -> str:
    """Samples, source and policy, so a reader knows what budget produced a τ."""
    if not data:
        return "—"
    source = "" if data["source"] == "the target's answers" else f", {data['source']}"
    return f"{data['samples']} samples{source}, {data['policy'].replace('_', '-')}"


def _engine(served) -> str:
    """The comparison's served engine (comparisons older than the engine name held True, for vLLM)."""
    return "vllm" if served is True else served


def _not_served(row: dict, engine: str) -> str:
    family = get_family(row["kind"])
    return family.not_served(engine) or "—"


def render_markdown(comparison: dict) -> str:
    served = comparison["served_check"]
    s = comparison["settings"]
    # comparisons written before the reason was recorded: either
    why_not = comparison.get("served_check_reason") or "vLLM not installed, or bakeoff.serve=off"
    lines = [
        "# Drafter bake-off",
        "",
        f"Same target, same distilled data, same evaluation: {s['num_prompts']} prompts × "
        f"{s['max_new_tokens']} tokens, γ = {s['num_speculative_tokens']} (unless a row's γ says otherwise), "
        f"temperature {s['temperature']}, "
        f"tree {s['tree']}. Training-free contenders count their search (layer skipping) or nothing as training."
        + (
            f" Served τ: {ENGINE_NAMES.get(_engine(served))} serving each export (1 + accepted drafts per step)."
            if served
            else f" No served check ({why_not})."
        )
        + _training_spread(next(iter(comparison["workloads"].values()))["contenders"]),
    ]
    for workload, result in comparison["workloads"].items():
        best = result["recommended"]
        verdict = (
            f"**Recommended: `{best['recipe']}` ({best['kind']})** — {best['reason']}."
            if best
            else "**No contender qualifies** (none is lossless with an agreeing served check)."
        )
        how = f" (eval overrides: {', '.join(result['overrides'])})" if result["overrides"] else ""
        lines += [
            "",
            f"## Workload `{workload}`{how}",
            "",
            *_table(result["contenders"], served),
            "",
            verdict,
            "",
            _free_vs_trained_line(result["free_vs_trained"], result["contenders"]),
            "",
            *_category_table(result["contenders"], result.get("by_category") or {}),
            f"![{workload}](comparison_{workload}.png)",
        ]
    return "\n".join(lines + [""])


def _category_table(rows: list[dict], verdicts: dict) -> list[str]:
    """Speed-up and τ of every contender per category, and the one recommended there."""
    if not verdicts:
        return []
    names = list(verdicts)

    def cell(row: dict, name: str) -> str:
        figures = (row.get("categories") or {}).get(name)
        return f"{figures['speedup']:.2f}× (τ {figures['tau']:.2f})" if figures else "—"

    best = [f"`{v['recipe']}`" if v else "none" for v in verdicts.values()]
    return [
        "By category (speed-up, τ; each category's prompts alone):",
        "",
        "| recipe | " + " | ".join(names) + " |",
        "|---|" + "---|" * len(names),
        *(f"| {r['recipe']} | " + " | ".join(cell(r, n) for n in names) + " |" for r in rows),
        "| **recommended** | " + " | ".join(best) + " |",
        "",
    ]


def _training_spread(rows: list[dict]) -> str:
    """How equal the trained contenders' training times were (each recipe sizes its own steps)."""
    minutes = [r["train_seconds"] / 60 for r in rows if r["trained"]]
    if len(minutes) < 2:
        return ""
    return f" The trained contenders trained {min(minutes):.1f}–{max(minutes):.1f} min each (the `training` column)."


def _num(x) -> str:
    return "—" if x is None else f"{x:.2f}"


def _plot(path: Path, rows: list[dict]) -> None:
    panels = [
        ("tau", "τ (tokens / target forward)", 1),
        ("alpha", "α (acceptance rate)", 1),
        ("speedup", "speed-up ×", 1),
        ("parameters", "parameters (M)", 1e-6),
        ("train_seconds", "training (min)", 1 / 60),
    ]
    fig, axes = pyplot().subplots(1, len(panels), figsize=(3 * len(panels), 3))
    names = [r["recipe"] for r in rows]
    for ax, (key, label, scale) in zip(axes, panels):
        ax.bar(names, [r[key] * scale for r in rows], color=[f"C{i % 10}" for i in range(len(rows))])
        ax.set_title(label, fontsize=9)
        ax.tick_params(axis="x", labelrotation=30, labelsize=8)
    save_figure(fig, path)
