"""The run directory: where each stage writes, and which earlier run a rerun resumes.

runs/<recipe>/<timestamp>/  .hydra/config.yaml  data/  checkpoints/  drafter/  eval/
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from omegaconf import OmegaConf

from distill.config import output_settings
from train.config import RunConfig
from train.errors import PipelineError
from train.loop import launched_processes


@dataclass(frozen=True)
class RunPaths:
    """Where each stage writes inside a run directory (ARCHITECTURE: Run directory)."""

    root: Path

    @property
    def config(self) -> Path:
        return self.root / ".hydra" / "config.yaml"

    @property
    def data(self) -> Path:
        return self.root / "data"

    @property
    def checkpoints(self) -> Path:
        return self.root / "checkpoints"

    @property
    def final(self) -> Path:
        return self.checkpoints / "final"

    @property
    def eval(self) -> Path:
        return self.root / "eval"

    @property
    def drafter(self) -> Path:
        return self.root / "drafter"

    @property
    def published(self) -> Path:
        """The publish stage's record, written last: the stage is done only once copies and uploads are."""
        return self.root / "published.json"


_STAGING = re.compile(r"^\.(?P<name>.+)-(?:old|[a-z0-9_]{8})$")  # heads.formats.staging's and mkdtemp's names


def clean_debris(root: Path) -> None:
    """Remove what killed writes left in a run directory (call with the run's lock held: no writer is live).

    Temporary files and staging directories go; a `.X-old` directory whose `X` is missing (a kill between
    the two renames of a directory swap) is the last complete `X` and is put back."""
    if not root.is_dir() or not os.access(root, os.W_OK):
        return
    for path in sorted(root.rglob(".*"), key=lambda p: -len(p.parts)):
        name, staged = path.name, _STAGING.match(path.name)
        if name.startswith(".tmp-") or name.endswith((".tmp", ".tmp.png")):
            pass
        elif staged and path.is_dir() and name.endswith("-old") and not (path.parent / staged["name"]).exists():
            os.replace(path, path.parent / staged["name"])
            print(f"[run] restored {path.parent / staged['name']} from {name}, left by an interrupted swap")
            continue
        elif not (staged and path.is_dir()):
            continue
        print(f"[run] removing {path.relative_to(root)}, left by an interrupted write")
        shutil.rmtree(path) if path.is_dir() else path.unlink()


def read_json(path: Path) -> dict | None:
    return json.loads(path.read_text()) if path.exists() else None


def resolve_run_dir(cfg: RunConfig, cfg_dict: dict) -> Path:
    """run_dir if set; else the latest runs/<recipe>/* with the same output settings; else a new one."""
    if cfg.run_dir:
        return Path(cfg.run_dir)
    if launched_processes() > 1:  # timestamps could differ between processes
        raise PipelineError(
            f"{launched_processes()} processes were launched without run_dir; set run_dir=PATH so that every process "
            "uses the same run directory"
        )
    base = Path("runs") / cfg.recipe_name
    if not cfg.new_run and base.exists():
        wanted = output_settings(RunConfig, cfg_dict)
        for prev in sorted(base.iterdir(), reverse=True):
            saved = RunPaths(prev).config
            if saved.exists() and output_settings(RunConfig, OmegaConf.to_container(OmegaConf.load(saved))) == wanted:
                print(f"reusing run {prev} (same config; new_run=true starts afresh)")
                return prev
    return base / time.strftime("%Y%m%d-%H%M%S")
