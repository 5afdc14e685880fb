"""Structured configs of the drafter families (the Hydra `drafter` group's schemas)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import List, Optional


@dataclass
class LoraConfig:
    enabled: bool = False  # train LoRA adapters instead of all weights (merged on export)
    r: int = 16  # adapter rank
    alpha: int = 32  # scaling numerator (scale = alpha / r)
    dropout: float = 0.0
    target_modules: List[str] = field(default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj"])


@dataclass
class DraftLMConfig:
    kind: str = "draft_lm"
    init: Optional[str] = None  # HF causal LM (name or path) sharing the target's tokenizer; None = fresh
    revision: Optional[str] = None  # hub revision of `init`
    hidden_size: int = 128  # fresh draft only: width; keep head_dim >= 32 for vLLM's CPU attention
    intermediate_size: int = 384
    num_hidden_layers: int = 1  # shallow: a drafter must cost a fraction of a target forward
    num_attention_heads: int = 4
    num_key_value_heads: int = 4
    max_position_embeddings: int = 2048
    tie_word_embeddings: bool = True
    lora: LoraConfig = field(default_factory=LoraConfig)


@dataclass
class MedusaConfig:
    kind: str = "medusa"
    num_heads: int = 4  # head k predicts the token k+2 ahead; chains propose at most num_heads tokens
    num_layers: int = 1  # residual blocks per head
    loss_decay: float = 0.8  # λ: the loss is Σ_k λ^k · loss_k, so nearer heads weigh more
    holdout_samples: int = 64  # distilled samples kept out of training to measure head accuracy for the tree
    tree_nodes: int = 32  # node budget of the token tree built from that accuracy (saved with the export)
    tree_topk: int = 8  # candidates per head the tree may use (accuracy measured for ranks 1..tree_topk)
