"""Preflight: every setting that would otherwise fail only after earlier stages ran, checked against
every table the drafter's family needs (heads FAMILIES, train SETUPS, eval PROPOSERS) before any
stage touches the disk, the network or an engine."""

from __future__ import annotations

from eval.proposers import check_eval_settings
from eval.served import vllm_missing_reason
from heads.families import get_family
from train.config import STAGES, RunConfig
from train.errors import PipelineError
from train.losses import LOSSES
from train.setups import training_setup


def check_run(cfg: RunConfig) -> None:
    """Every setting that would otherwise fail only after earlier stages ran: one error, before any work."""
    unknown = [s for s in cfg.stages if s not in STAGES]
    if unknown:
        raise PipelineError(f"unknown stage(s) {unknown}; stages are {list(STAGES)}")
    family = get_family(cfg.drafter.kind)  # an unknown kind fails here, naming the known ones
    family.check(cfg.drafter)
    _check_against_target(family, cfg)
    if family.trainable:
        training_setup(family.kind)
        if cfg.trainer.loss not in LOSSES:
            raise PipelineError(f"trainer.loss={cfg.trainer.loss!r} is not a loss; use one of {list(LOSSES)}")
    check_eval_settings(family.kind, cfg.drafter, cfg.eval)
    if cfg.bakeoff.serve not in ("auto", "off"):
        raise PipelineError(
            f"bakeoff.serve={cfg.bakeoff.serve!r}; use auto (served check where vLLM is installed) or off"
        )
    unknown = sorted(set(cfg.bakeoff.overrides) - {"all", *cfg.bakeoff.recipes})
    if unknown:
        raise PipelineError(
            f"bakeoff.overrides has {unknown}, which are not contenders; "
            f"use 'all' or one of bakeoff.recipes={cfg.bakeoff.recipes}"
        )
    if cfg.eval.serve and not cfg.dry_run and vllm_missing_reason():  # a plan needs no engine
        raise PipelineError(f"eval.serve=vllm: {vllm_missing_reason()}, or set eval.serve=null")
    if cfg.eval.serve and family.vllm_method is None:
        raise PipelineError(f"eval.serve=vllm: vLLM does not serve {family.kind} drafters; set eval.serve=null")
    if cfg.eval.serve and family.serve_missing():
        raise PipelineError(f"eval.serve=vllm: {family.serve_missing()}, or set eval.serve=null")


def _check_against_target(family, cfg: RunConfig) -> None:
    """The family's target-dependent checks, from the target's config.json alone (no weights).

    A target whose config cannot be read offline (a hub id not yet downloaded) is checked when the
    train stage loads it instead."""
    from train.planner import PlanError, target_config

    try:
        config = target_config(cfg.target.name_or_path, cfg.target.trust_remote_code)
    except PlanError:
        return
    family.check_target(cfg.drafter, config)
