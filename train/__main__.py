"""`python -m train [recipe=NAME] [key=value ...]`: run a recipe's stages in one run directory."""

from __future__ import annotations

import sys

import hydra

from conf.cli import explained, run_cli
from train.config import register_configs

register_configs()


@hydra.main(config_path="pkg://conf", config_name="config", version_base=None)
@explained
def main(cfg) -> None:
    import datasets

    datasets.disable_progress_bars()  # one bar per stage is ours; shard saves need none
    from distill.errors import DistillError
    from distill.lock import LockHeld
    from eval.errors import EvalError
    from heads.errors import HeadsError
    from train.bakeoff.run import run_bakeoff
    from train.pipeline import PipelineError, run_pipeline
    from train.planner import PlanError
    from train.registry.gate import PublishError, require_hub_token

    try:
        if cfg.publish.repo_id and "publish" in cfg.stages and not cfg.dry_run:
            require_hub_token()  # now, not after hours of training: the upload is the run's last step
        results = run_bakeoff(cfg) if cfg.bakeoff.recipes else run_pipeline(cfg)  # a bake-off drives pipelines
    except (DistillError, EvalError, HeadsError, LockHeld, PipelineError, PlanError, PublishError) as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    if results.get("plan", {}).get("fits") is False:
        sys.exit(3)  # a dry run whose plan does not fit the GPUs: scripts can stop before launching


if __name__ == "__main__":
    run_cli(main)
