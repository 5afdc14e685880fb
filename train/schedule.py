"""The learning-rate schedule, and the steps a longer run shares with a shorter one.

cosine: linear warm-up, then a cosine to 0 at trainer.max_steps; every step's rate depends on max_steps.
wsd (warm-up, stable, decay): linear warm-up, a constant rate, then a cosine to 0 over the last
trainer.decay_share of the steps. Until the decay starts, the rate is the same for every max_steps,
so the checkpoint kept there continues into any longer run exactly (train/stages/continuation.py).
"""

from __future__ import annotations

from transformers import get_cosine_schedule_with_warmup, get_wsd_schedule

SCHEDULES = ("cosine", "wsd")


def decay_steps(cfg) -> int:
    """wsd: the optimizer steps of its final decay (at least one); cosine decays over all after warm-up."""
    if cfg.schedule == "wsd":
        return max(1, min(round(cfg.decay_share * cfg.max_steps), cfg.max_steps - cfg.warmup_steps))
    return max(cfg.max_steps - cfg.warmup_steps, 0)


def shared_until(cfg) -> int:
    """The last step up to which every run with these settings and any max_steps ≥ cfg.max_steps has had the same
    learning rates: a checkpoint there continues into a longer run exactly (wsd: the start of the decay)."""
    return cfg.max_steps - decay_steps(cfg) if cfg.schedule == "wsd" else cfg.warmup_steps


def build_scheduler(optimizer, cfg):
    """The torch LambdaLR of trainer.schedule (transformers' own schedules)."""
    if cfg.schedule == "wsd":
        return get_wsd_schedule(optimizer, cfg.warmup_steps, decay_steps(cfg), num_training_steps=cfg.max_steps)
    return get_cosine_schedule_with_warmup(optimizer, cfg.warmup_steps, cfg.max_steps)


def schedule_problem(cfg) -> str | None:
    """One line naming a schedule setting that cannot run, or None."""
    if cfg.schedule not in SCHEDULES:
        return f"trainer.schedule={cfg.schedule!r}; use one of {list(SCHEDULES)}"
    if not 0 < cfg.decay_share <= 1:
        return f"trainer.decay_share={cfg.decay_share} must be in (0, 1]: the share of trainer.max_steps wsd decays"
    if cfg.schedule == "wsd" and cfg.max_steps <= cfg.warmup_steps:
        return (
            f"trainer.schedule=wsd needs steps after its warm-up: trainer.max_steps={cfg.max_steps} ≤ "
            f"trainer.warmup_steps={cfg.warmup_steps}; raise max_steps or lower warmup_steps"
        )
    return None
