"""Structured config of the eval stage."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class EvalConfig:
    num_prompts: int = 32  # held-out prompts decoded (each twice: autoregressive and speculative)
    max_new_tokens: int = 64  # tokens decoded per prompt
    num_speculative_tokens: int = 4  # γ: draft tokens proposed per target forward
    temperature: float = 0.0  # 0 = greedy (losslessness checked token for token)
    top_p: float = 1.0
    top_k: int = 0
    seed: int = 0  # sampling RNG seed
    warmup_prompts: int = 2  # untimed runs first, so allocator and kernel warm-up don't count
