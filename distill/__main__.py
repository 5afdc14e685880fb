"""`python -m distill out_dir=DIR [target=…] [data=…]`: build a distillation dataset on its own."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import List

import hydra
from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, OmegaConf

from conf.cli import explained, run_cli
from distill.config import DataConfig, TargetConfig
from distill.errors import DistillError


@dataclass
class DistillAppConfig:
    target: TargetConfig = field(default_factory=TargetConfig)
    data: DataConfig = field(default_factory=DataConfig)
    out_dir: str = MISSING  # where the sharded dataset and manifest.json go
    device: str = "auto"  # auto | cpu | cuda | cuda:N
    # part directories of a split distillation (data.num_shards > 1) to merge into out_dir (same settings)
    merge: List[str] = field(default_factory=list)


ConfigStore.instance().store(name="distill_schema", node=DistillAppConfig)


@hydra.main(config_path="pkg://conf", config_name="distill", version_base=None)
@explained
def main(cfg) -> None:
    import datasets

    datasets.disable_progress_bars()  # one bar per stage is ours; shard saves need none
    from distill.device import default_device
    from distill.lock import LockHeld, exclusive
    from distill.prompts.chat import template_text
    from distill.stage.parts import merge_parts
    from distill.stage.run import distill

    app: DistillAppConfig = OmegaConf.to_object(cfg)
    try:
        app.target.chat_template = template_text(app.target.chat_template)
        with exclusive(app.out_dir, "distillation directory"):  # one job per directory
            if app.merge:
                manifest = merge_parts(app.merge, app.out_dir, app.target, app.data)
            else:
                device = default_device() if app.device == "auto" else app.device
                manifest = distill(app.target, app.data, app.out_dir, device)
    except (DistillError, LockHeld) as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    if "of" in manifest:  # one job of a split distillation
        print(f"{app.out_dir}: part {manifest['index']} of {manifest['of']} done ({len(manifest['shards'])} shards)")
        return
    print(
        f"{app.out_dir}: {manifest['counts']['samples']} samples, "
        f"{manifest['counts']['assistant_tokens']} assistant tokens"
    )


if __name__ == "__main__":
    run_cli(main)
