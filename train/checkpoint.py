"""Resumable training checkpoints: accelerate state (weights, optimizer, scheduler, RNG) plus a
small meta.json (step, resolved config). Written to a temporary directory, then renamed."""

from __future__ import annotations

import json
import shutil
import warnings
from pathlib import Path

META = "meta.json"


def checkpoint_dirs(root: Path) -> list[Path]:
    return sorted(p for p in Path(root).glob("step-*") if (p / META).exists())


def save_checkpoint(accelerator, root: Path, step: int, config: dict, keep_last: int) -> Path:
    root = Path(root)
    final = root / f"step-{step:07d}"
    tmp = root / f".tmp-step-{step:07d}"
    accelerator.save_state(str(tmp), safe_serialization=True)
    accelerator.wait_for_everyone()  # every process has written its part (RNG state, ZeRO shards) before the rename
    if accelerator.is_main_process:
        (tmp / META).write_text(json.dumps({"step": step, "config": config}, indent=2))
        if final.exists():
            shutil.rmtree(final)
        tmp.rename(final)
        for old in checkpoint_dirs(root)[:-keep_last]:
            shutil.rmtree(old, ignore_errors=True)
    accelerator.wait_for_everyone()
    return final


def load_latest(accelerator, root: Path, current: dict) -> int:
    """Restore the latest checkpoint under root; return its step (0 when there is none)."""
    dirs = checkpoint_dirs(root)
    if not dirs:
        return 0
    latest = dirs[-1]
    meta = json.loads((latest / META).read_text())
    saved = meta["config"]
    if saved != current:
        changed = sorted(k for k in set(saved) | set(current) if saved.get(k) != current.get(k))
        warnings.warn(
            f"resuming from {latest} whose training config differs in {changed}; "
            "the run continues with the current config",
            stacklevel=2,
        )
    accelerator.load_state(str(latest))
    return int(meta["step"])
