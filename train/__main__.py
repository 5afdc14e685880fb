"""`python -m train [recipe=NAME] [key=value ...]`: run a recipe's stages in one run directory."""

from __future__ import annotations

import sys

import hydra

from train.config import register_configs

register_configs()


@hydra.main(config_path="pkg://conf", config_name="config", version_base=None)
def main(cfg) -> None:
    import datasets

    datasets.disable_progress_bars()  # one bar per stage is ours; shard saves need none
    from distill.errors import DistillError
    from eval.errors import EvalError
    from heads.errors import HeadsError
    from train.pipeline import PipelineError, run_pipeline
    from train.publish import PublishError

    try:
        run_pipeline(cfg)
    except (DistillError, EvalError, HeadsError, PipelineError, PublishError) as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
