"""The measurement: autoregressive and speculative decodes of the same prompts, interleaved, and their spreads.

Each batch is decoded autoregressively, then speculatively at every γ (by every drafter measured together),
then autoregressively again: machine noise hits every side alike, and the gap between the two baseline runs says
how noisy the machine was (eval/timing.py). The report is computed from what this returns (eval/report.py:
build_report).
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


@dataclass(frozen=True)
class Contender:
    """One drafter of a measurement: its proposer, its eval settings (its own γ) and the γ values it decodes."""

    proposer: Proposer
    cfg: EvalConfig
    gammas: list[int]


def measure_together(
    target,
    contenders: list[Contender],
    engine: Engine,
    warmup: list[list[int]],
    prompts: list[list[int]],
    eos_ids: set[int],
    vocab_size: int,
    categories: Optional[list[Optional[str]]] = None,
    progress: bool = True,
) -> list[Measurements]:
    """Decode the warm-up prompts untimed, then every batch of `prompts` interleaved (see the module's doc): each
    batch plainly, then speculatively by every contender at each of its γ, then plainly again. The contenders
    share the baseline (the first contender's settings decode it; eval/run.py checks that they agree), so they are
    ranked against one set of plain decodes, and each added contender costs its own decodes alone.

    categories: per prompt (the first len(prompts) count), its category (None: none given); None = no categories.
    A batch ends where the category changes, so that each category's figures come from its own batches
    (build_report); the field's sets list theirs grouped."""
    cfg = contenders[0].cfg
    decoders = [_Decoding(target, c.proposer, engine, c.cfg, eos_ids, vocab_size) for c in contenders]
    # A proposer that learns across requests (suffix decoding) keeps one memory per workload: the warm-up
    # and each γ pass decode the same prompts, and must not draft from one another's outputs.
    for p in warmup:  # untimed
        decoders[0].plain([p])
    for c, decode in zip(contenders, decoders):
        c.proposer.begin_workload("warmup")
        for p in warmup:
            [decode.speculative([p], g) for g in c.gammas]
    ar = Tally()
    base_runs: tuple[list, list] = ([], [])
    runs = [_Runs(c.gammas) for c in contenders]
    categories = list(categories)[: len(prompts)] if categories is not None else [None] * len(prompts)
    batches = batch_bounds(categories, cfg.batch_size)
    decodes = 2 + sum(len(c.gammas) for c in contenders)
    bar = tqdm(total=len(prompts) * decodes, desc="eval", unit="decode", disable=not progress)
    for start, end in batches:  # interleaved, so machine noise hits every side alike
        batch = prompts[start:end]
        for repeat in (0, 1):  # the baseline before and after the speculative runs: their gap says how noisy
            for c, decode, run in zip(contenders, decoders, runs):
                for g in c.gammas if repeat else ():
                    c.proposer.begin_workload(f"gamma={g}")
                    run.add(g, *_timed(decode.speculative, batch, g), ar.outputs[start:])
                    bar.set_postfix_str(f"γ={g}" if c.proposer.tree_depth is None else "tree", refresh=False)
                    bar.update(len(batch))
            ar_out, seconds = _timed(decoders[0].plain, batch, ar.stats)  # its prefill timed apart too
            base_runs[repeat].append((sum(map(len, ar_out)), seconds))
            if not repeat:
                ar.outputs += ar_out
            bar.update(len(batch))
    bar.close()
    device = next(target.parameters()).device
    return [
        Measurements(
            prompts,
            c.gammas,
            c.proposer.tree_depth,
            ar,
            run.spec,
            base_runs,
            _totals(ar, run.spec, base_runs, run.spec_runs),
            device,
            categories,
            batches,
            run.spec_runs,
            run.batch_stats,
        )
        for c, run in zip(contenders, runs)
    ]


class _Runs:
    """One contender's speculative decodes so far: per γ, its tally, (tokens, seconds) and stats per batch."""

    def __init__(self, gammas: list[int]):
        self.spec = {g: Tally() for g in gammas}
        self.spec_runs: dict[int, list] = {g: [] for g in gammas}
        self.batch_stats: dict[int, list[DecodeStats]] = {g: [] for g in gammas}

    def add(self, g: int, decoded: tuple[list[list[int]], DecodeStats], seconds: float, plain: list) -> None:
        """A batch decoded at γ g in `seconds`; plain: the baseline's outputs from this batch's first row on."""
        out, stats = decoded
        self.spec_runs[g].append((sum(map(len, out)), seconds))
        self.spec[g].stats.add(stats)
        self.batch_stats[g].append(stats)
        self.spec[g].equal_rows += sum(o == a for o, a in zip(out, plain))
        self.spec[g].outputs += out


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
