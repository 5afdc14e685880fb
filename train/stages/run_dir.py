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

from heads.settings import output_settings
from train.config import RunConfig
from train.distributed import launched_processes
from train.errors import PipelineError


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
        from distill.stage.manifest import config_hash, read_manifest

        wanted = output_settings(RunConfig, cfg_dict)
        for prev in sorted(base.iterdir(), reverse=True):
            saved = RunPaths(prev).config
            if saved.exists() and output_settings(RunConfig, OmegaConf.to_container(OmegaConf.load(saved))) == wanted:
                manifest = read_manifest(RunPaths(prev).data)
                if manifest and manifest["config_hash"] != config_hash(cfg.target, cfg.data):
                    print(f"not resuming {prev}: its data was distilled from other inputs (prompt files or weights)")
                    break
                print(f"reusing run {prev} (same config; new_run=true starts afresh)")
                return prev
    return base / time.strftime("%Y%m%d-%H%M%S")


def check_ownership(paths: RunPaths, cfg_dict: dict) -> None:
    """Refuse a run directory that holds another run: another recipe or family, or checkpoints trained with
    other settings (resuming them would continue another run's weights and optimizer). Reads only the saved
    config and the checkpoint list, so it runs before any stage."""
    if not paths.config.exists():
        return
    saved = OmegaConf.to_container(OmegaConf.load(paths.config))
    mine = (cfg_dict.get("recipe_name"), (cfg_dict.get("drafter") or {}).get("kind"))
    theirs = (saved.get("recipe_name"), (saved.get("drafter") or {}).get("kind"))
    if mine != theirs:
        raise PipelineError(
            f"run directory {paths.root} holds a {theirs[1]} run of recipe {theirs[0]}, not {mine[1]} of {mine[0]}; "
            "give this run its own run_dir=PATH (or leave run_dir unset for a new timestamped one)"
        )
    changed = changed_training(saved, cfg_dict)
    if changed and any(paths.checkpoints.glob("step-*")):
        raise PipelineError(
            f"run directory {paths.root} holds checkpoints trained with other settings ({', '.join(changed)} "
            "changed), which a resume would continue; give this run its own run_dir=PATH, or restore those settings"
        )


def changed_training(saved: dict, current: dict) -> list[str]:
    """The output-affecting drafter, trainer, data and target settings that differ between two configs."""
    a, b = output_settings(RunConfig, saved), output_settings(RunConfig, current)
    out = []
    for group in ("target", "data", "drafter", "trainer"):
        x, y = a.get(group) or {}, b.get(group) or {}
        out += [f"{group}.{k}" for k in sorted(set(x) | set(y)) if x.get(k) != y.get(k)]
    return out


def find_dataset(config_hash: str, here: Path, data_cfg) -> Path | None:
    """A complete distilled dataset with this distill hash (and data_cfg's prompt sets' bytes) in another run
    directory (runs/*/*/data, or a sibling of this run), so that a trainer-only change does not distil again."""
    from distill.prompts.set_bytes import changed_prompt_sets
    from distill.stage.manifest import read_manifest

    candidates = [*Path("runs").glob("*/*/data"), *here.parent.parent.glob("*/data")]
    for data in sorted(set(candidates)):
        if data.resolve() == here.resolve():
            continue
        manifest = read_manifest(data)
        if manifest and manifest.get("config_hash") == config_hash and not changed_prompt_sets(manifest, data_cfg):
            return data
    return None


def link_or_copy(src, dst) -> None:
    """A hard link where the filesystem allows (for files never written in place), else a copy."""
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def adopt_dataset(source: Path, here: Path) -> None:
    """Copy a finished dataset into this run (hard links where the filesystem allows: no bytes duplicated)."""
    staging = here.parent / f".data-{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    shutil.copytree(source, staging, copy_function=link_or_copy, ignore=shutil.ignore_patterns(".*"))
    if here.exists():  # empty (callers adopt only where no shard was written): make room for the rename
        shutil.rmtree(here)
    os.replace(staging, here)
