"""The measurement: autoregressive and speculative decodes of the same prompts, interleaved, and their spreads.

Each batch is decoded autoregressively, then speculatively at every γ, then autoregressively again: machine
noise hits every side alike, and the gap between the two baseline runs says how noisy the machine was
(eval/timing.py). The report is computed from what this returns (eval/report.py: build_report).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Optional

import torch
from tqdm.auto import tqdm

from eval.config import EvalConfig
from eval.metrics import Tally
from eval.proposer import Proposer
from eval.sampling import SamplingParams
from eval.speculative import Acceptance, DecodeStats, autoregressive_generate, speculative_generate
from eval.static_engine import Engine
from eval.timing import speedup_spread


@dataclass
class Measurements:
    prompts: list[list[int]]  # the measured prompts (not the warm-up's)
    gammas: list[int]  # the γ values decoded (one for a tree: its shape is the tree)
    tree_depth: Optional[int]  # the proposer's; None = chains
    ar: Tally  # both baseline repeats (the speed-up's denominator); outputs: the first repeat's; stats: prefill
    spec: dict[int, Tally]  # per γ
    base_runs: tuple[list, list]  # per batch, (tokens, seconds) of the baseline before / after the speculative runs
    spreads: dict[int, dict]  # per γ, the speed-up's spread over batches (eval/timing.py)
    device: torch.device
    # per prompt, its category (None: none given); a batch holds prompts of one category only
    categories: list[Optional[str]] = field(default_factory=list)
    batches: list[tuple[int, int]] = field(default_factory=list)  # [start, end) of each batch in `prompts`
    spec_runs: dict[int, list] = field(default_factory=dict)  # per γ, per batch (tokens, seconds)
    batch_stats: dict[int, list[DecodeStats]] = field(default_factory=dict)  # per γ, per batch


@dataclass
class _Decoding:
    """One eval's two decoders, sharing the target, engine path, sampling settings and random generator."""

    target: torch.nn.Module
    proposer: Proposer
    engine: Engine
    cfg: EvalConfig
    eos_ids: set[int]
    vocab_size: int

    def __post_init__(self):
        cfg = self.cfg
        self.params = SamplingParams(cfg.temperature, cfg.top_p, cfg.top_k)
        self.acceptance = Acceptance(cfg.acceptance, cfg.typical_threshold, cfg.typical_alpha)
        self.generator = torch.Generator(device=next(self.target.parameters()).device).manual_seed(cfg.seed)

    def plain(self, batch: list[list[int]], stats: Optional[DecodeStats] = None) -> list[list[int]]:
        return autoregressive_generate(
            self.target,
            batch,
            self.cfg.max_new_tokens,
            self.params,
            eos_ids=self.eos_ids,
            vocab_size=self.vocab_size,
            generator=self.generator,
            engine=self.engine,
            stats=stats,
        )

    def speculative(self, batch: list[list[int]], gamma: int) -> tuple[list[list[int]], DecodeStats]:
        return speculative_generate(
            self.target,
            self.proposer,
            batch,
            self.cfg.max_new_tokens,
            gamma,
            self.params,
            eos_ids=self.eos_ids,
            vocab_size=self.vocab_size,
            generator=self.generator,
            acceptance=self.acceptance,
            engine=self.engine,
        )


def measure(
    target,
    proposer: Proposer,
    engine: Engine,
    cfg: EvalConfig,
    gammas: list[int],
    warmup: list[list[int]],
    prompts: list[list[int]],
    eos_ids: set[int],
    vocab_size: int,
    categories: Optional[list[Optional[str]]] = None,
    *,
    progress: bool = True,
) -> Measurements:
    """Decode the warm-up prompts untimed, then every batch of `prompts` interleaved (see the module's doc).

    categories: per prompt (the first len(prompts) count), its category (None: none given); None = no categories.
    A batch ends where the category changes, so that each category's figures come from its own batches
    (build_report); the field's sets list theirs grouped."""
    decode = _Decoding(target, proposer, engine, cfg, eos_ids, vocab_size)
    # A proposer that learns across requests (suffix decoding) keeps one memory per workload: the warm-up
    # and each γ pass decode the same prompts, and must not draft from one another's outputs.
    proposer.begin_workload("warmup")
    for p in warmup:  # untimed
        decode.plain([p]), [decode.speculative([p], g) for g in gammas]

    ar, spec = Tally(), {g: Tally() for g in gammas}
    base_runs: tuple[list, list] = ([], [])
    spec_runs: dict[int, list] = {g: [] for g in gammas}  # per batch, (tokens, seconds) at γ
    batch_stats: dict[int, list[DecodeStats]] = {g: [] for g in gammas}
    categories = list(categories)[: len(prompts)] if categories is not None else [None] * len(prompts)
    batches = batch_bounds(categories, cfg.batch_size)
    bar = tqdm(total=len(prompts) * (2 + len(gammas)), desc="eval", unit="decode", disable=not progress)
    for start, end in batches:  # interleaved, so machine noise hits every side alike
        batch = prompts[start:end]
        for repeat in (0, 1):  # the baseline before and after the speculative runs: their gap says how noisy
            if repeat:
                for g in gammas:
                    proposer.begin_workload(f"gamma={g}")
                    (out, stats), seconds = _timed(decode.speculative, batch, g)
                    spec_runs[g].append((sum(map(len, out)), seconds))
                    spec[g].stats.add(stats)
                    batch_stats[g].append(stats)
                    spec[g].equal_rows += sum(o == a for o, a in zip(out, ar.outputs[start:]))
                    spec[g].outputs += out
                    bar.set_postfix_str(f"γ={g}" if proposer.tree_depth is None else "tree", refresh=False)
                    bar.update(len(batch))
            ar_out, seconds = _timed(decode.plain, batch, ar.stats)  # its prefill timed apart too
            base_runs[repeat].append((sum(map(len, ar_out)), seconds))
            if not repeat:
                ar.outputs += ar_out
            bar.update(len(batch))
    bar.close()
    spreads = _totals(ar, spec, base_runs, spec_runs)
    device = next(target.parameters()).device
    return Measurements(
        prompts,
        gammas,
        proposer.tree_depth,
        ar,
        spec,
        base_runs,
        spreads,
        device,
        categories,
        batches,
        spec_runs,
        batch_stats,
    )


def _timed(decode, *args):
    """What one decode returns, and the wall seconds it took."""
    started = time.perf_counter()
    out = decode(*args)
    return out, time.perf_counter() - started


def batch_bounds(categories: list[Optional[str]], batch_size: int) -> list[tuple[int, int]]:
    """[start, end) of each batch: up to batch_size prompts in order, a new batch wherever the category changes."""
    bounds, start = [], 0
    for i in range(1, len(categories) + 1):
        if i == len(categories) or i - start == batch_size or categories[i] != categories[start]:
            bounds.append((start, i))
            start = i
    return bounds


def _totals(ar: Tally, spec: dict[int, Tally], base_runs: tuple[list, list], spec_runs: dict[int, list]) -> dict:
    """Fill each tally's tokens and seconds from its per-batch runs (the baseline's: both repeats); return the
    speed-up's spread over batches per γ."""
    base_tokens = [a + b for (a, _), (b, _) in zip(*base_runs)]
    base_seconds = [a + b for (_, a), (_, b) in zip(*base_runs)]
    ar.tokens, ar.seconds = sum(base_tokens), sum(base_seconds)
    spreads = {}
    for g, runs in spec_runs.items():
        tokens, seconds = zip(*runs)
        spec[g].tokens, spec[g].seconds = sum(tokens), sum(seconds)
        spreads[g] = speedup_spread(list(tokens), list(seconds), base_tokens, base_seconds)
    return spreads
