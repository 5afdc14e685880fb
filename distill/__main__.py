"""`python -m distill out_dir=DIR [target=…] [data=…]`: build a distillation dataset on its own."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field

import hydra
from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, OmegaConf

from distill.config import DataConfig, TargetConfig
from distill.errors import DistillError


@dataclass
class DistillAppConfig:
    target: TargetConfig = field(default_factory=TargetConfig)
    data: DataConfig = field(default_factory=DataConfig)
    out_dir: str = MISSING  # where the sharded dataset and manifest.json go
    device: str = "auto"  # auto | cpu | cuda | cuda:N


ConfigStore.instance().store(name="distill_schema", node=DistillAppConfig)


@hydra.main(config_path="pkg://conf", config_name="distill", version_base=None)
def main(cfg) -> None:
    import datasets

    datasets.disable_progress_bars()  # one bar per stage is ours; shard saves need none
    from distill.run import distill
    from distill.target import default_device

    app: DistillAppConfig = OmegaConf.to_object(cfg)
    try:
        manifest = distill(app.target, app.data, app.out_dir, default_device() if app.device == "auto" else app.device)
    except DistillError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    print(
        f"{app.out_dir}: {manifest['counts']['samples']} samples, "
        f"{manifest['counts']['assistant_tokens']} assistant tokens"
    )


if __name__ == "__main__":
    main()
