"""The bake-off's driver: its run directory, the shared distillation, each contender's pipeline on each workload,
the comparison and the winner published. It stands above train/pipeline.py, which knows nothing of it.

Each contender keeps its recipe's drafter and trainer settings; the bake-off imposes its own target, data, eval
settings and device (train/bakeoff/contenders.py), so the only difference left is the drafter family. Every
contender's run directory is a normal run directory (resumable stage by stage); the comparison lands in
<run>/bakeoff/ (train/bakeoff/verdicts.py decides, train/bakeoff/render.py writes).
"""

from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from eval.serving import missing_reason
from train.bakeoff.contenders import bakeoff_engine, check_contenders, contender_config, link_shared, why_not_served
from train.bakeoff.render import OUT, write_comparison
from train.bakeoff.verdicts import category_verdicts, contender_row, free_vs_trained, published_line, recommend
from train.pipeline import (
    device_of,
    distill_stage,
    eval_together,
    resolve_run,
    run_directory,
    run_pipeline,
    stage_hashes,
)
from train.stages.run import Run


def run_bakeoff(config) -> dict:
    """`python -m train` with bakeoff.recipes: the bake-off's settings checked, every contender's too, then in its
    run directory the shared distillation and the comparison; returns {"bakeoff": comparison} (or a dry run's plan)."""
    dict_config, cfg, planned = resolve_run(config)
    if planned is not None:
        return planned
    with run_directory(dict_config, cfg) as (cfg_dict, paths):
        serve = bakeoff_engine(cfg.bakeoff.serve)
        if set(cfg.stages) - {"distill"}:  # the contenders run here (stages=[distill]: the shared data alone)
            check_contenders(dict_config, paths.root, serve)
        hashes = stage_hashes(cfg, cfg_dict)
        # the shared data is distilled by the distill stage itself: its reuse checks (a moved Hub commit) hold
        shared = Run(cfg, cfg_dict, paths, device_of(cfg), hashes["distill"], hashes)
        return {"bakeoff": _compare(dict_config, paths.root, lambda: distill_stage(shared), serve)}


def _compare(dict_config: DictConfig, root: Path, distil, serve) -> dict:
    """Train every contender under root/<recipe>, evaluate it on each workload, write the comparison, return it.

    distil: the run's distill stage (into root/data), called once before any contender.

    The first workload is the bake-off's own eval settings; every other one (bakeoff.workloads) evaluates
    the same drafters again under root/<workload>/<recipe>, whose data and checkpoints link to the first run's,
    so nothing is trained twice. With publish.hub_dir (or publish.repo_id) set, every contender's drafter, as
    evaluated on the first workload, is published there: a registry whose leaderboard is the bake-off.
    """
    cfg = OmegaConf.to_object(dict_config)
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
        link_shared(run_dir, root, name, first)
        publish = first and bool(cfg.publish.hub_dir or cfg.publish.repo_id) and cfg.bakeoff.publish == "all"
        contender = contender_config(name, dict_config, run_dir, serve, publish)
        contender.merge_with_dotlist(list(overrides))
        return run_dir, contender

    if cfg.bakeoff.shared_baseline:
        for workload in workloads:
            evaluate_workload([contender_at(name, workload)[1] for name in cfg.bakeoff.recipes])
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
        "served_check_reason": None if serve else why_not_served(cfg.bakeoff.serve),
        "settings": OmegaConf.to_container(dict_config.eval, resolve=True),
    }
    write_comparison(root / OUT, comparison)
    if cfg.bakeoff.publish == "best":
        comparison["published"] = publish_best(dict_config, root, comparison, serve)
        write_comparison(root / OUT, comparison, show=False)  # with what was published; the run ends on its line
        print(comparison["published"]["line"])
    return comparison


def evaluate_workload(contenders: list[DictConfig]) -> None:
    """bakeoff.shared_baseline: each contender's stages up to its eval (its training, or its checkpoint reused),
    then every one's eval stage at once, against one shared baseline; the bake-off's own pass then finds each
    contender's report valid and goes on to publish."""
    for contender in contenders:  # contender_config's stages: train, eval (publish)
        run_pipeline(OmegaConf.merge(contender, {"stages": ["train"]}))
    eval_together(contenders)


def publish_best(dict_config: DictConfig, root: Path, comparison: dict, serve) -> dict:
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
