"""Serving truth: an engine users deploy serves the exported directory, and what it does is compared with
drafthub's own engine (greedy outputs token for token, τ and per-position acceptance as the engine counts them).

One module per engine (vllm.py, llamacpp.py), listed in SERVERS; each has `missing_reason()` and `served_check(...)`.
The engine's name is the consumer's (heads/formats/), so `eval.serve=<engine>` checks exactly the speculative
config the model card prints for it.
"""

from __future__ import annotations

from typing import Optional

from eval.config import EvalConfig
from eval.errors import EvalError
from eval.serving import llamacpp, vllm
from heads.families import Export

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


def preflight(cfg: EvalConfig, export: Export) -> None:
    """What the export directory, the settings and the URLs alone decide, checked before the target decodes anything
    (the served check and the load sweep run after every prompt has been decoded): one line naming the fix."""
    from eval.serving.load import check_servers_answer

    family = export.family
    if cfg.serve:
        if reason := missing_reason(cfg.serve):
            raise EvalError(f"eval.serve={cfg.serve}: {reason}")
        server(cfg.serve).servable(export)
    if cfg.serve_load:
        if reason := missing_reason(vllm.ENGINE):
            raise EvalError(f"eval.serve_load: {reason}")
        if cfg.serve_url is None and family.not_served(vllm.ENGINE):
            raise EvalError(f"eval.serve_load: {family.not_served(vllm.ENGINE)}; set eval.serve_load=[]")
        check_servers_answer(cfg)


def served_section(
    cfg: EvalConfig,
    *,
    target_model,
    target_path: str,
    export: Export,
    prompts: list[list[int]],
    reference: list[list[int]],
    ours: dict,
    eos_ids: set[int],
    trust_remote_code: bool = False,
) -> dict:
    """The report's `served` section (eval.serve=ENGINE): the export served by the engine on `prompts`, compared
    with the target's greedy outputs (`reference`) and with `ours`, our engine's chain report of the same prompts."""
    dtype = str(next(target_model.parameters()).dtype).removeprefix("torch.")
    return server(cfg.serve).served_check(
        target_path,
        export,
        prompts,
        reference=reference,
        ours=ours,
        cfg=cfg,
        eos_ids=eos_ids,
        dtype=dtype,
        trust_remote_code=trust_remote_code,
        target_model=target_model,
    )
