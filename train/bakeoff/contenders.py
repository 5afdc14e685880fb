"""A bake-off's contenders: each recipe composed as `python -m train recipe=NAME` would be, with the bake-off's
shared settings imposed, checked before the shared distillation, and its run directory linked to the shared data."""

from __future__ import annotations

import os
from contextlib import nullcontext
from pathlib import Path
from typing import Optional

from omegaconf import DictConfig, OmegaConf

from distill.errors import DistillError
from eval.errors import EvalError
from eval.serving import missing_reason
from heads.errors import HeadsError
from heads.families import get_family
from train.errors import PipelineError
from train.stages.preflight import check_run

SHARED = ("target", "data", "eval", "eval_split", "eval_prompts", "eval_prompts_column", "device")


# where contenders are published when the bake-off is given a registry or Hub repo (min_tau, model_name: the recipe's)
SHARED_PUBLISH = ("hub_dir", "repo_id", "private", "verify_prompts", "engines")


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


def bakeoff_engine(setting: str) -> Optional[str]:
    """bakeoff.serve → the engine serving every contender: auto = vLLM where it is installed, off = none."""
    if setting == "auto":
        return "vllm" if missing_reason("vllm") is None else None
    return None if setting == "off" else setting


def why_not_served(setting: str) -> str:
    """Why the bake-off ran no served check, for its table's readers."""
    return "bakeoff.serve=off" if setting == "off" else missing_reason("vllm") or f"bakeoff.serve={setting}"


def link_shared(run_dir: Path, root: Path, name: str, first: bool) -> None:
    """A contender's run directory: the shared distilled data; for a later workload, the first run's checkpoints."""
    run_dir.mkdir(parents=True, exist_ok=True)
    links = {"data": root / "data"} if first else {"data": root / "data", "checkpoints": root / name / "checkpoints"}
    for link, source in links.items():
        if not (run_dir / link).exists():
            (root / name / "checkpoints").mkdir(parents=True, exist_ok=True)
            os.symlink(os.path.relpath(source, run_dir), run_dir / link, target_is_directory=True)


def check_contenders(dict_config: DictConfig, root: Path, serve) -> None:
    """Every contender's settings as its run will hold them, with the shared distill its data comes from (the
    samples it holds out, the memory it needs): refused before distilling, not when its turn comes."""
    for name in dict_config.bakeoff.recipes:
        contender = contender_config(name, dict_config, root / name, serve)
        contender.stages = ["distill", *contender.stages]
        try:
            check_run(OmegaConf.to_object(contender))
        except (DistillError, EvalError, HeadsError, PipelineError) as e:
            raise type(e)(f"bake-off contender {name}: {e}") from None
