"""The one wiring of both entry points (the pipeline's eval stage and `python -m eval`): an export directory
measured with our engine, served with vLLM as well when asked (eval.serve=vllm), and under load (eval.serve_load).

It sits above eval/run.py and eval/serving/ rather than in eval/run.py: the served check calls `evaluate`
for its chain figures, so eval/run.py importing it back would close a circle.
"""

from __future__ import annotations

from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Optional

from eval.config import EvalConfig
from eval.proposer import Proposer
from eval.proposers import load_proposer
from eval.run import evaluate
from eval.serving import preflight, served_hook
from eval.serving.load import load_check


def measure_export(
    target,
    proposer: Proposer,
    export_dir: str | Path,
    prompt_ids: list[list[int]],
    cfg: EvalConfig,
    names: dict,
    *,
    vocab_size: int,
    eos_ids: set[int],
    out_dir: str | Path,
    serve_target: Optional[str] = None,
    trust_remote_code: bool = False,
    categories: Optional[list[Optional[str]]] = None,
) -> dict:
    """Measure `proposer` (loaded from export_dir) on prompt_ids and write the report into out_dir.

    names: the report's names (target, drafter, kind, hashes, ...). serve_target: the target vLLM loads, where
    names["target"] is not loadable as it stands (a toy world's alias); None = names["target"]. categories: per
    prompt, its category (eval.prompts.MeasuredPrompts), for the report's figures per category.
    """
    preflight(cfg, export_dir)  # what the directory, settings and URLs decide: before anything is decoded
    served = None
    if cfg.serve:
        chain_cfg, device = replace(cfg, tree=None), next(target.parameters()).device
        served = served_hook(
            cfg,
            target_model=target,
            target_path=serve_target or names["target"],
            export_dir=export_dir,
            # vLLM serves chains: a tree's report gets our chain figures from this proposer
            chain_proposer=lambda: load_proposer(export_dir, target, vocab_size, chain_cfg, device)[0],
            eos_ids=eos_ids,
            vocab_size=vocab_size,
            trust_remote_code=trust_remote_code,
        )
    under_load = None
    if cfg.serve_load:
        dtype = str(next(target.parameters()).dtype).removeprefix("torch.")
        under_load = partial(
            load_check,
            serve_target or names["target"],
            export_dir,
            cfg=cfg,
            dtype=dtype,
            trust_remote_code=trust_remote_code,
            log_dir=Path(out_dir),
        )
    return evaluate(
        target,
        proposer,
        prompt_ids,
        cfg,
        eos_ids,
        vocab_size,
        names,
        out_dir=out_dir,
        served=served,
        under_load=under_load,
        categories=categories,
    )
