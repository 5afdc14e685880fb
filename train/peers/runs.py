"""Which run directory a benchmark reads: the one that trained and evaluated the drafter it compares."""

from __future__ import annotations

from pathlib import Path

from omegaconf import OmegaConf


def evaluated_run(run: Path, kind: str) -> Path:
    """The run directory under `run` (itself, or a bake-off's contender) that trained and evaluated a `kind` drafter;
    one error line where none did. The benchmarks name the kind they compare (the EAGLE-3 of the main job)."""
    for candidate in (run, *sorted(p for p in run.iterdir() if p.is_dir())):
        config = candidate / ".hydra" / "config.yaml"
        if config.exists() and OmegaConf.load(config).drafter.kind == kind and (candidate / "drafter").is_dir():
            return candidate
    raise SystemExit(f"error: {run} holds no evaluated {kind} run (drafter/ and .hydra/config.yaml); pass --run RUN")
