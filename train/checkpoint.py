"""Resumable training checkpoints: accelerate state (weights, optimizer, scheduler, RNG) plus a
small meta.json (step, resolved config). Written to a temporary directory, then renamed: a step-*
directory with its meta.json is complete, and a failed write (a full disk, a Ctrl-C) leaves the
previous checkpoints as they were and removes its own partial files."""

from __future__ import annotations

import errno
import json
import os
import shutil
import warnings
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from heads.formats.staging import atomic_write_text, replace_directory
from train.distributed import full_state_dict

META = "meta.json"
BEST_WEIGHTS, BEST_META = "best.safetensors", "best.json"  # keep_best's pick, beside the checkpoints
FULL_DISK_BYTES = 1 << 20  # less free than this after a failed write: the disk filled up (torch.save won't say so)


def checkpoint_dirs(root: Path) -> list[Path]:
    return sorted(p for p in Path(root).glob("step-*") if (p / META).exists())


def _disk_full(root: Path, error: Exception) -> bool:
    """Whether a failed write filled the disk: torch.save's RuntimeError and safetensors' own error carry no errno."""
    if isinstance(error, OSError):
        return error.errno in (errno.ENOSPC, errno.EDQUOT)
    if "No space left on device" in str(error):
        return True
    try:
        return shutil.disk_usage(root).free < FULL_DISK_BYTES
    except OSError:  # root itself is gone: not a question of space
        return False


def save_checkpoint(accelerator, root: Path, step: int, config: dict, keep_last: int, keep: bool = False) -> Path:
    """Write step-NNNNNNN under root whole or not at all; keep the last `keep_last` checkpoints, and those saved
    with `keep` (a wsd run's checkpoint at its decay's start, which a longer run continues from).

    A full disk mid-write raises OSError(ENOSPC) naming root (whatever library noticed it), after
    removing this checkpoint's partial files: the earlier checkpoints are untouched, so a rerun resumes."""
    root = Path(root)
    final = root / f"step-{step:07d}"
    tmp = root / f".tmp-step-{step:07d}"
    if accelerator.is_main_process and tmp.exists():
        shutil.rmtree(tmp)  # a killed earlier attempt's files would mix with this one's
    accelerator.wait_for_everyone()
    try:
        accelerator.save_state(str(tmp), safe_serialization=True)
        accelerator.wait_for_everyone()  # every process has written its part (RNG state, ZeRO shards) before the rename
        if accelerator.is_main_process:
            meta = {"step": step, "config": config} | ({"kept": True} if keep else {})
            (tmp / META).write_text(json.dumps(meta, indent=2))
            replace_directory(tmp, final)  # renames only: never a moment without a complete step-N of this step
    except BaseException as e:
        full = isinstance(e, Exception) and _disk_full(root, e)  # before the cleanup frees the space again
        shutil.rmtree(tmp, ignore_errors=True)
        if full and not isinstance(e, OSError):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(root)) from e
        if full and not e.filename:
            e.filename = str(root)  # "no space left on <checkpoints dir>", not on an unnamed device
        raise
    if accelerator.is_main_process:
        for old in checkpoint_dirs(root)[:-keep_last]:
            if not json.loads((old / META).read_text()).get("kept"):
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


def keep_best(accelerator, model: torch.nn.Module, select, ckpt_dir: Path, step: int) -> None:
    """Score the current weights; if they beat the best so far, write them (atomically) as the best."""
    model.eval()
    with torch.no_grad():
        score = float(select(accelerator.unwrap_model(model)))  # host sync: once per checkpoint
    model.train()
    meta_file = Path(ckpt_dir) / BEST_META
    best = json.loads(meta_file.read_text()) if meta_file.exists() else None
    state = full_state_dict(accelerator, model)  # every process takes part (ZeRO-3 gathers)
    if accelerator.is_main_process and (best is None or score > best["score"]):
        tmp = Path(ckpt_dir) / f".tmp-{BEST_WEIGHTS}"
        save_file(state, str(tmp))
        os.replace(tmp, Path(ckpt_dir) / BEST_WEIGHTS)
        atomic_write_text(meta_file, json.dumps({"step": step, "score": score}))
    accelerator.wait_for_everyone()


def best_weights(ckpt_dir: Path) -> tuple[dict, dict] | None:
    """(state dict, {"step", "score"}) of the best checkpoint kept by keep_best, or None."""
    meta_file = Path(ckpt_dir) / BEST_META
    if not meta_file.exists():
        return None
    return load_file(str(Path(ckpt_dir) / BEST_WEIGHTS)), json.loads(meta_file.read_text())
