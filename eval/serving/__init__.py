"""Serving truth: an engine users deploy serves the exported directory, and what it does is compared with
drafthub's own engine (greedy outputs token for token, τ and per-position acceptance as the engine counts them).

One module per engine (vllm.py, llamacpp.py), listed in SERVERS; each has `missing_reason()` and `served_check(...)`.
The engine's name is the consumer's (heads/formats/), so `eval.serve=<engine>` checks exactly the speculative
config the model card prints for it.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Callable, Optional

from eval.config import EvalConfig
from eval.errors import EvalError
from eval.run import evaluate
from eval.serving import llamacpp, vllm

SERVERS = {vllm.ENGINE: vllm, llamacpp.ENGINE: llamacpp}


def server(engine: str):
    """The module that serves `engine`; one clear error naming those drafthub can start otherwise."""
    try:
        return SERVERS[engine]
    except KeyError:
        raise EvalError(
            f"eval.serve={engine!r} is not an engine drafthub serves with (eval/serving/__init__.py SERVERS); "
            f"use one of {sorted(SERVERS)} or null"
        ) from None


def missing_reason(engine: str) -> Optional[str]:
    """None when `engine` can be started here, else why not and how to fix it (one line)."""
    return server(engine).missing_reason()


def preflight(cfg: EvalConfig, export_dir: str | Path) -> None:
    """What the export directory, the settings and the URLs alone decide, checked before the target decodes anything
    (the served check and the load sweep run after every prompt has been decoded): one line naming the fix."""
    from eval.serving.load import check_servers_answer
    from heads.families import family_of_export

    family = family_of_export(export_dir)
    if cfg.serve:
        if reason := missing_reason(cfg.serve):
            raise EvalError(f"eval.serve={cfg.serve}: {reason}")
        server(cfg.serve).servable(export_dir)
    if cfg.serve_load:
        if reason := missing_reason(vllm.ENGINE):
            raise EvalError(f"eval.serve_load: {reason}")
        if cfg.serve_url is None and family.not_served(vllm.ENGINE):
            raise EvalError(f"eval.serve_load: {family.not_served(vllm.ENGINE)}; set eval.serve_load=[]")
        check_servers_answer(cfg)


def served_hook(
    cfg: EvalConfig,
    *,
    target_model,
    target_path: str,
    export_dir: str | Path,
    chain_proposer: Callable[[], object],
    eos_ids: set[int],
    vocab_size: int,
    trust_remote_code: bool = False,
) -> Callable[[list, list, dict], dict]:
    """The `served` callable `evaluate` runs before writing its report (eval.serve=ENGINE).

    Args:
        export_dir: the export directory the engine serves (the one our engine measured, as published).
        chain_proposer: builds a chain proposer, for our chain figures when the report is a tree's
            (vLLM serves chains).
    """

    def served(prompts: list[list[int]], reference: list[list[int]], report: dict) -> dict:
        ours = report
        if report["settings"]["tree"] is not None:
            chain_cfg = replace(cfg, tree=None, gamma_sweep=[], warmup_prompts=0, serve=None)
            ours = evaluate(target_model, chain_proposer(), prompts, chain_cfg, eos_ids, vocab_size, {})
        dtype = str(next(target_model.parameters()).dtype).removeprefix("torch.")
        return server(cfg.serve).served_check(
            target_path,
            export_dir,
            prompts,
            reference=reference,
            ours=ours,
            cfg=cfg,
            eos_ids=eos_ids,
            dtype=dtype,
            trust_remote_code=trust_remote_code,
            target_model=target_model,
        )

    return served
