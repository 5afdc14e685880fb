"""The one wiring of both entry points (the pipeline's eval stage and `python -m eval`): export directories
measured with our engine against one baseline, then, in sequence, what their settings ask of the engines users
deploy: served with vLLM or llama.cpp (eval.serve; our chain figures measured first where the report is a tree's,
since the engines serve chains), and under load (eval.serve_load). Each report is sealed once every section is in.

It stands above eval/run.py and eval/serving/: it drives both, and neither calls back into the other.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Optional

from eval.config import EvalConfig
from eval.proposer import Proposer
from eval.proposers import load_proposer
from eval.run import Entry, evaluate, evaluate_together, finish_report, measure_reports
from eval.serving import preflight, served_section
from eval.serving.load import load_check
from heads.families import Export, read_export


@dataclass
class ExportEntry:
    """One export directory to measure: our engine's entry, and what its served checks need."""

    entry: Entry
    export: Export
    target_path: str  # the target the engines load (a toy world's alias resolved)
    trust_remote_code: bool = False


def export_entry(
    proposer: Proposer,
    export: Export,
    cfg: EvalConfig,
    names: dict,
    *,
    out_dir: Optional[str | Path] = None,
    serve_target: Optional[str] = None,
    trust_remote_code: bool = False,
) -> ExportEntry:
    """An export directory as one drafter of measure_together, its directory, settings and URLs checked for the
    served checks before anything decodes. names: the report's names (target, drafter, kind, hashes, ...).
    serve_target: the target the engines load, where names["target"] is not loadable as it stands (a toy world's
    alias); None = names["target"]."""
    preflight(cfg, export)
    target = serve_target or names["target"]
    return ExportEntry(Entry(proposer, cfg, names, out_dir), export, target, trust_remote_code)


def measure_export(
    target,
    proposer: Proposer,
    export: Export,
    prompt_ids: list[list[int]],
    cfg: EvalConfig,
    names: dict,
    *,
    vocab_size: int,
    eos_ids: set[int],
    categories: Optional[list[Optional[str]]] = None,
    **entry,
) -> dict:
    """Measure `proposer` (loaded from `export`) on prompt_ids, with its served checks; return the report, written
    to entry's out_dir where given. entry: export_entry's keywords (out_dir, serve_target, trust_remote_code)."""
    job = export_entry(proposer, export, cfg, names, **entry)
    return measure_together(target, [job], prompt_ids, eos_ids, vocab_size, categories=categories)[0]


def measure_together(
    target,
    jobs: list[ExportEntry],
    prompt_ids: list[list[int]],
    eos_ids: set[int],
    vocab_size: int,
    *,
    categories: Optional[list[Optional[str]]] = None,
) -> list[dict]:
    """Export directories measured in one interleaved run against one baseline (eval.run.measure_reports), then
    each one's served checks in turn, then each report sealed and written."""
    measured = measure_reports(target, [j.entry for j in jobs], prompt_ids, eos_ids, vocab_size, categories=categories)
    reports = []
    for job, (report, m) in zip(jobs, measured):
        cfg = job.entry.cfg
        if cfg.serve:
            ours = (
                report
                if report["settings"]["tree"] is None
                else _chain_report(target, job, m.prompts, eos_ids, vocab_size)
            )
            report["served"] = served_section(
                cfg,
                target_model=target,
                target_path=job.target_path,
                export=job.export,
                prompts=m.prompts,
                reference=m.ar.outputs,
                ours=ours,
                eos_ids=eos_ids,
                trust_remote_code=job.trust_remote_code,
            )
        if cfg.serve_load:
            dtype = str(next(target.parameters()).dtype).removeprefix("torch.")
            log_dir = Path(job.entry.out_dir) if job.entry.out_dir is not None else None
            report["serving_load"] = load_check(
                job.target_path, job.export, m.prompts, cfg, dtype=dtype,
                trust_remote_code=job.trust_remote_code, log_dir=log_dir,
            )  # fmt: skip
        reports.append(finish_report(job.entry, report, m))
    return reports


def _chain_report(target, job: ExportEntry, prompts: list[list[int]], eos_ids: set[int], vocab_size: int) -> dict:
    """Our engine's chain figures on the same prompts, for a tree's report: the engines serve chains."""
    cfg = replace(job.entry.cfg, tree=None)
    proposer = load_proposer(job.export, target, vocab_size, cfg, next(target.parameters()).device)[0]
    chain_cfg = replace(cfg, gamma_sweep=[], warmup_prompts=0, serve=None, serve_load=[])
    return evaluate(target, proposer, prompts, chain_cfg, eos_ids, vocab_size, {}, progress=False)


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
        proposer, kind = load_proposer(read_export(path), target, vocab_size, own, device)
        entries.append(Entry(proposer, own, {"kind": kind, "drafter": name}))
    reports = evaluate_together(target, entries, [prompt_ids[0], *prompt_ids], eos_ids, vocab_size)
    return dict(zip(exports, reports))
