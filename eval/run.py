"""The eval stage: decode held-out prompts autoregressively and speculatively (at the configured
γ and across a γ sweep), interleaved, and report acceptance, speed and losslessness.

    python -m eval drafter_dir=runs/toy/<ts>/drafter prompts=<prompts.jsonl> out_dir=<dir>
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from eval.config import EvalConfig
from eval.errors import EvalError
from eval.measure import Contender, Measurements, measure_together
from eval.profile import speculation_profile
from eval.prompts import OVERLONG
from eval.proposer import Proposer
from eval.report import build_report, seal_report, write_report
from eval.serving import server
from eval.static_engine import ENGINES, Engine, choose_engine


def check_settings(cfg: EvalConfig) -> None:
    """Raise EvalError naming the first bad eval setting and its fix."""
    if cfg.acceptance not in ("exact", "typical"):
        raise EvalError(
            f"eval.acceptance={cfg.acceptance!r} is not a rule; use exact (lossless) or typical (Medusa's, lossy)"
        )
    if cfg.num_speculative_tokens < 1 or any(g < 1 for g in cfg.gamma_sweep):
        raise EvalError("eval.num_speculative_tokens and every eval.gamma_sweep value must be ≥ 1")
    if cfg.num_prompts < 1 or cfg.max_new_tokens < 1 or cfg.warmup_prompts < 0:
        raise EvalError(
            f"eval.num_prompts={cfg.num_prompts} and eval.max_new_tokens={cfg.max_new_tokens} must be ≥ 1, "
            f"eval.warmup_prompts={cfg.warmup_prompts} ≥ 0"
        )
    if cfg.timing_drift_tolerance <= 0 or cfg.timing_max_interval <= 0:
        raise EvalError(
            "eval.timing_drift_tolerance and eval.timing_max_interval must be > 0 (fractions, e.g. 0.10 and 0.5)"
        )
    if cfg.draft_confidence_min is not None and not 0 < cfg.draft_confidence_min < 1:
        raise EvalError(
            f"eval.draft_confidence_min={cfg.draft_confidence_min} is not a probability in (0, 1); use e.g. 0.3, "
            "or null for a fixed γ"
        )
    if not 0 <= cfg.llamacpp.draft_p_min < 1 or (cfg.llamacpp.draft_p_min and cfg.draft_confidence_min is not None):
        raise EvalError(
            f"eval.llamacpp.draft_p_min={cfg.llamacpp.draft_p_min}: give a probability in [0, 1) (0: always γ), and "
            "not beside eval.draft_confidence_min, which already sets llama-server's cut"
        )
    if cfg.engine not in ENGINES:
        raise EvalError(f"eval.engine={cfg.engine!r}; use one of {list(ENGINES)}")
    if cfg.overlong_prompts not in OVERLONG:
        raise EvalError(f"eval.overlong_prompts={cfg.overlong_prompts!r}; use one of {list(OVERLONG)}")
    if cfg.repeat_block < 0:
        raise EvalError(f"eval.repeat_block={cfg.repeat_block}; use 0 (each prompt once) or a block size, e.g. 8")
    if (
        cfg.tree is not None
        and cfg.tree not in ("drafter", "dynamic")
        and (
            not isinstance(cfg.tree, (list, tuple))
            or not cfg.tree
            or any(not isinstance(k, int) or k < 1 for k in cfg.tree)
        )
    ):
        raise EvalError(
            f"eval.tree={cfg.tree} must be null (chains), children per depth such as [3, 2, 1], "
            "drafter (the tree saved with a Medusa drafter) or dynamic (EAGLE-2 trees)"
        )
    t = cfg.dynamic_tree
    if min(t.depth, t.top_k, t.total_tokens) < 1:
        raise EvalError(f"eval.dynamic_tree needs depth, top_k and total_tokens ≥ 1, got {t}")
    if cfg.batch_size < 1:
        raise EvalError("eval.batch_size must be ≥ 1")
    if cfg.serve is not None:
        server(cfg.serve)  # an engine drafthub serves with, or one line naming those it does
    if cfg.serve and (cfg.temperature > 0 or cfg.acceptance != "exact"):
        raise EvalError(
            "eval.serve=vllm compares greedy decoding token for token; "
            "set eval.temperature=0 and eval.acceptance=exact, or eval.serve=null"
        )
    if cfg.served_tolerance <= 0:
        raise EvalError("eval.served_tolerance must be > 0 (a fraction of our τ, e.g. 0.05)")
    if cfg.vllm.speed_repeats < 0:
        raise EvalError("eval.vllm.speed_repeats must be ≥ 0 (0 = no served speed-up, acceptance only)")
    check_load_settings(cfg)


def check_load_settings(cfg: EvalConfig) -> None:
    """The serving-under-load settings (eval.serve_load, eval.serve_url, eval.baseline_url, eval.vllm.load_*)."""
    levels = cfg.serve_load
    if any(not isinstance(c, int) or c < 1 for c in levels) or list(levels) != sorted(set(levels)):
        raise EvalError(
            f"eval.serve_load={list(levels)} must list concurrency levels ≥ 1 in rising order, e.g. [1, 4, 16]"
        )
    urls = (cfg.serve_url, cfg.baseline_url)
    if (urls[0] is None) != (urls[1] is None):
        raise EvalError(
            "eval.serve_url and eval.baseline_url go together: the deployed server with the drafter and the same "
            "target served without it (a speed-up needs both)"
        )
    if urls[0] is not None and not all(u.startswith(("http://", "https://")) for u in urls):
        raise EvalError("eval.serve_url and eval.baseline_url must be base URLs such as http://host:8000")
    if urls[0] is not None and not levels:
        raise EvalError(
            "eval.serve_url measures a deployed server under load: also set eval.serve_load, e.g. [1, 4, 16]"
        )
    if levels and (cfg.vllm.load_repeats < 1 or cfg.vllm.load_requests < 0):
        raise EvalError("eval.vllm.load_repeats must be ≥ 1 and eval.vllm.load_requests ≥ 0 (0 = from the prompts)")


def plan_gammas(cfg: EvalConfig, proposer: Proposer, kind: str = "") -> list[int]:
    """The γ values to decode. Trees have no γ: their shape is the tree. Chains are measured at γ and across
    the sweep, up to the longest chain the drafter can propose (Medusa: one token per head)."""
    depth, longest = proposer.tree_depth, proposer.max_num_speculative_tokens
    if depth is None and longest is not None and cfg.num_speculative_tokens > longest:
        raise EvalError(
            f"eval.num_speculative_tokens={cfg.num_speculative_tokens} but this {kind} drafter "
            f"proposes at most {longest} tokens per step; lower it"
        )
    if depth:
        return [cfg.num_speculative_tokens]
    return sorted({cfg.num_speculative_tokens, *(g for g in cfg.gamma_sweep if longest is None or g <= longest)})


def build_engine(
    cfg: EvalConfig, target, proposers: list[Proposer], prompts: list[list[int]], gammas: list[list[int]]
) -> Engine:
    """The decoding path (eval.engine) every proposer decodes on, sized for the longest of `prompts` and every
    γ's block (gammas: each proposer's), with the target and each proposer's own model cache on it, compiled
    before any timing. One path for all: the dynamic one where any proposer needs it."""
    longest = max(g for planned in gammas for g in planned)
    widths = (1, *(g + 1 for planned in gammas for g in planned))  # decoding, and verifying each γ
    # the longest sequence, plus room for the last step's block to run past max_new_tokens
    max_len = max(map(len, prompts)) + cfg.max_new_tokens + 2 * (longest + 1)
    engines = [
        choose_engine(cfg.engine, target, p, tree=cfg.tree, batch_size=cfg.batch_size, max_len=max_len, widths=widths)
        for p in proposers
    ]
    engine = next((e for e in engines if not e.static), engines[0])
    features = tuple(sorted({i for p in proposers for i in p.target_layer_ids}))  # the target's layers read
    decode_tokens = len(prompts) * cfg.max_new_tokens * (2 + sum(map(len, gammas)))  # both baselines, every γ
    engine = engine.settle(target, features, decode_tokens)  # auto on a CPU: the path measured faster
    for p in proposers:
        p.use_engine(engine)  # a drafter with its own model cache decodes on the same path
    if engine.static:
        engine.static_model(target, features=features)
        engine.precompile()  # timed apart: compile time is not decoding time
    return engine


@dataclass
class Entry:
    """One drafter of an evaluation: what `evaluate` takes for it (see there)."""

    proposer: Proposer
    cfg: EvalConfig
    names: dict
    out_dir: Optional[str | Path] = None


def evaluate(
    target,
    proposer: Proposer,
    prompts: list[list[int]],
    cfg: EvalConfig,
    eos_ids: set[int],
    vocab_size: int,
    names: dict,
    *,
    out_dir=None,
    progress: bool = True,
    categories: Optional[list[Optional[str]]] = None,
) -> dict:
    """Measure a drafter on `prompts` (token ids); return the report and write it to out_dir when given.

    names: {"target", "drafter", "kind", ...} for the report. progress: a progress bar. categories: per prompt, its
    category (None: none given); the report then gives figures per category. An export served by an engine and under
    load is measured by eval/measure_export.py, which runs this, then the served checks."""
    entry = Entry(proposer, cfg, names, out_dir)
    return evaluate_together(target, [entry], prompts, eos_ids, vocab_size, progress=progress, categories=categories)[0]


def evaluate_together(
    target,
    entries: list[Entry],
    prompts: list[list[int]],
    eos_ids: set[int],
    vocab_size: int,
    *,
    progress: bool = True,
    categories: Optional[list[Optional[str]]] = None,
) -> list[dict]:
    """Several drafters measured in one interleaved run against one shared baseline (eval/measure.py): each gets
    its own report, as `evaluate` would write it, naming the others it shared the baseline with."""
    measured = measure_reports(target, entries, prompts, eos_ids, vocab_size, progress=progress, categories=categories)
    return [finish_report(entry, report, m) for entry, (report, m) in zip(entries, measured)]


def measure_reports(
    target,
    entries: list[Entry],
    prompts: list[list[int]],
    eos_ids: set[int],
    vocab_size: int,
    *,
    progress: bool = True,
    categories: Optional[list[Optional[str]]] = None,
) -> list[tuple[dict, Measurements]]:
    """Each drafter's report, built but not sealed, and its measurements: what a caller adds sections to (the served
    checks) before finish_report seals and writes it. Their settings may differ in what drafting alone reads (γ,
    the sweep, trees, serving), not in what the baseline decodes."""
    for e in entries:
        check_settings(e.cfg)
    cfg = entries[0].cfg
    check_shared_baseline([e.cfg for e in entries])
    if not prompts:
        raise EvalError("no eval prompts")
    if categories is not None and len(categories) != len(prompts):
        raise EvalError(f"{len(categories)} categories for {len(prompts)} eval prompts; give one per prompt")
    plans = [plan_gammas(e.cfg, e.proposer, e.names.get("kind", "")) for e in entries]
    warmup, prompts = prompts[: cfg.warmup_prompts], prompts[: cfg.num_prompts]
    # The engine is sized by the γ plans and compiled before the warm-up: its compile time is no decoding time
    engine = build_engine(cfg, target, [e.proposer for e in entries], warmup + prompts, plans)
    contenders = [Contender(e.proposer, e.cfg, gammas) for e, gammas in zip(entries, plans)]
    measured = measure_together(target, contenders, engine, warmup, prompts, eos_ids, vocab_size, categories, progress)
    kinds = [e.names.get("kind") for e in entries]
    built = []
    for i, (e, m) in enumerate(zip(entries, measured)):
        report = build_report(m, e.cfg, e.names, engine)
        others = [k for j, k in enumerate(kinds) if j != i]
        if others:
            report["shared_baseline_with"] = others  # measured in one interleaved run: one baseline for all
        built.append((report, m))
    return built


def finish_report(entry: Entry, report: dict, measured: Measurements) -> dict:
    """The report with its profile and seal (binding every section added since measure_reports: the served
    verdicts), written where asked."""
    report["speculation_profile"] = speculation_profile(report, measured.prompts)
    samples = seal_report(report, measured, entry.cfg.num_speculative_tokens)
    if entry.out_dir is not None:
        write_report(entry.out_dir, report, samples)
    return report


# what the plain decodes read: drafters measured together must agree on every one (their baseline is shared)
BASELINE_SETTINGS = (
    "num_prompts",
    "warmup_prompts",
    "max_new_tokens",
    "temperature",
    "top_p",
    "top_k",
    "seed",
    "batch_size",
    "engine",
    "timing_drift_tolerance",
    "timing_max_interval",
)


def check_shared_baseline(cfgs: list[EvalConfig]) -> None:
    """Raise EvalError naming the first baseline setting on which drafters measured together disagree."""
    for cfg in cfgs[1:]:
        for name in BASELINE_SETTINGS:
            if getattr(cfg, name) != getattr(cfgs[0], name):
                raise EvalError(
                    f"drafters measured together share one baseline, but eval.{name} is {getattr(cfgs[0], name)} for "
                    f"one and {getattr(cfg, name)} for another; give them the same, or measure them apart"
                )
