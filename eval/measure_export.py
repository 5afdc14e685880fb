"""The one wiring of both entry points (the pipeline's eval stage and `python -m eval`): an export directory
measured with our engine, served with vLLM as well when asked (eval.serve=vllm), and under load (eval.serve_load);
several exports measured together against one baseline (export_entry, then eval.run.evaluate_together).

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
from eval.run import Entry, evaluate_together
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
    categories: Optional[list[Optional[str]]] = None,
    **entry,
) -> dict:
    """Measure `proposer` (loaded from export_dir) on prompt_ids and write the report into out_dir.

    entry: export_entry's keywords (vocab_size, eos_ids, out_dir; serve_target, trust_remote_code). categories: per
    prompt, its category (eval.prompts.MeasuredPrompts), for the report's figures per category.
    """
    job = export_entry(target, proposer, export_dir, cfg, names, **entry)
    return evaluate_together(target, [job], prompt_ids, entry["eos_ids"], entry["vocab_size"], categories=categories)[0]


def export_entry(
    target,
    proposer: Proposer,
    export_dir: str | Path,
    cfg: EvalConfig,
    names: dict,
    *,
    vocab_size: int,
    eos_ids: set[int],
    out_dir: str | Path,
    serve_target: Optional[str] = None,
    trust_remote_code: bool = False,
) -> Entry:
    """An export directory as one drafter of `evaluate_together`, with its served and load checks where its
    settings ask for them, its directory, settings and URLs checked before anything decodes.

    names: the report's names (target, drafter, kind, hashes, ...). serve_target: the target vLLM loads, where
    names["target"] is not loadable as it stands (a toy world's alias); None = names["target"]."""
    preflight(cfg, export_dir)
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
    return Entry(proposer, cfg, names, out_dir, served, under_load)


def measure_exports(
    target,
    exports: dict[str, Path],
    prompt_ids: list[list[int]],
    cfg: EvalConfig,
    *,
    vocab_size: int,
    eos_ids,
    gammas: Optional[dict[str, int]] = None,
) -> dict[str, dict]:
    """Several export directories measured together on prompt_ids (the first one decoded once, untimed, first;
    no γ sweep): each its report, against one interleaved plain baseline; gammas: γ per export where it differs from
    cfg's. The benchmarks' comparison of drafters trained differently (scripts/bench_peer_trainers.py,
    bench_learning_curve.py)."""
    cfg = replace(cfg, warmup_prompts=1, num_prompts=len(prompt_ids), gamma_sweep=[])
    device = next(target.parameters()).device
    entries = []
    for name, path in exports.items():
        own = replace(cfg, num_speculative_tokens=(gammas or {}).get(name, cfg.num_speculative_tokens))
        proposer, kind = load_proposer(path, target, vocab_size, own, device)
        entries.append(Entry(proposer, own, {"kind": kind, "drafter": name}))
    reports = evaluate_together(target, entries, [prompt_ids[0], *prompt_ids], eos_ids, vocab_size)
    return dict(zip(exports, reports))
