"""The toy world's sibling draft LM (`toyworld:<size>/draft`): a small LM pretrained on the target's own text.

Real draft models are pretrained siblings of their target (Llama-3.2-1B drafting for Llama-3.1-70B), not fresh
weights fitted to a few thousand distilled answers. Built on first use into the world's directory (a world that
is never drafted from this way never pays for it), atomically, under a lock, keyed by its settings."""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path

from filelock import FileLock
from transformers import AutoTokenizer

from distill.toyworld.build import load_world, sources, train_world_model, training_data
from distill.toyworld.config import SIBLINGS, SIZES
from distill.toyworld.target import build_target, sibling_config
from heads.formats.staging import staged_directory

INFO = "sibling.json"


def load_sibling(size: str) -> Path:
    """The directory of the world `size`'s sibling draft LM (HF format, the target's tokenizer), built if needed."""
    if size not in SIBLINGS:
        raise ValueError(f"the toy world {size} has no sibling draft LM; worlds with one: {sorted(SIBLINGS)}")
    world = load_world(size)
    path = world.root / sibling_name(size)
    if (path / INFO).exists():
        return path
    with FileLock(str(path) + ".lock"):
        if not (path / INFO).exists():  # another process may have built it meanwhile
            with staged_directory(path) as staged:  # whole or not at all: a killed build leaves no half sibling
                _build(size, world.target_dir, staged)
    return path


def sibling_name(size: str) -> str:
    """The sibling's directory name inside its world's (`draft-<key of its settings>`), without building it."""
    settings = json.dumps(SIBLINGS[size].as_dict(), sort_keys=True)
    return f"draft-{hashlib.sha256(settings.encode()).hexdigest()[:8]}"


def _build(size: str, target_dir: Path, out: Path) -> None:
    """Train the sibling on the target's token streams (the world's own tokenizer) and save it beside its figures."""
    t0 = time.perf_counter()
    cfg = SIZES[size]
    tokenizer = AutoTokenizer.from_pretrained(target_dir)
    data = training_data(cfg, *sources(size), tokenizer=tokenizer)
    small = sibling_config(cfg, SIBLINGS[size])
    model = build_target(small, tokenizer)
    stats, losses = train_world_model(model, small, data, {cfg.seq_len})
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    info = {
        "world": target_dir.parent.name,
        "settings": SIBLINGS[size].as_dict(),
        "parameters": sum(p.numel() for p in model.parameters()),
        **stats,
        "heldout_loss": losses[f"heldout_loss_{cfg.seq_len}"],
        "build_seconds": round(time.perf_counter() - t0, 1),
    }
    (out / INFO).write_text(json.dumps(info, indent=2))
