"""Structured configs of the drafter families (the Hydra `drafter` group's schemas).

Every default lives here, once, with its comment; conf/drafter/<kind>.yaml selects one of these
schemas (registered from the family table, heads/families.py) and holds only what differs.
"""

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
    hidden_size: int = 128  # fresh draft only: width; head_dim = 128 / 4 = 32, the minimum vLLM's CPU attention takes
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
    num_layers: int = 1  # residual blocks x + SiLU(Wx + b) per head
    loss_decay: float = 0.8  # λ: the loss is Σ_k λ^k · loss_k, so nearer heads weigh more
    holdout_samples: int = 64  # distilled samples kept out of training; head accuracy on them shapes the tree
    tree_nodes: int = 32  # node budget of the token tree built from that accuracy (eval.tree=drafter decodes with it)
    tree_topk: int = 8  # candidates per head the tree may use (accuracy measured for ranks 1..tree_topk)


@dataclass
class EagleLayerConfig:
    """The decoder-layer shape both EAGLE generations share; None = the target's."""

    num_attention_heads: Optional[int] = None  # None = the target's (head_dim = target hidden / heads)
    num_key_value_heads: Optional[int] = None  # None = the target's
    intermediate_size: Optional[int] = None  # None = the target's
    features: str = "online"  # online: the target runs in each step; offline: bf16 shards written once next to the data


@dataclass
class Eagle3Config(EagleLayerConfig):
    kind: str = "eagle3"
    layer_ids: Optional[List[int]] = (
        None  # target hidden_states ids fused by fc; None = [2, N//2, N−3], written explicitly
    )
    draft_vocab_size: int = (
        32000  # most frequent target tokens the drafter can propose (capped at the target's vocabulary)
    )
    ttt_steps: int = 7  # training-time test: unrolled steps, each reading the drafter's own previous output
    step_decay: float = 0.8  # weight of step j's loss: decay^j
    norm_before_residual: bool = False  # True: the residual carries hidden_norm(g) instead of g (always written out)
    select_samples: int = (
        32  # samples held out to score every checkpoint by simulated τ (best kept); 0 = last checkpoint
    )


@dataclass
class Eagle1Config(EagleLayerConfig):
    kind: str = "eagle1"
    feature_noise: float = 0.1  # uniform ±noise added to the input features in training (robustness to its own errors)
    cls_weight: float = 0.1  # weight of the soft cross-entropy next to the SmoothL1 feature regression


@dataclass
class NgramConfig:
    """Prompt lookup (training-free): propose the tokens that followed the earliest occurrence
    of the context's last n tokens. Field names are vLLM's `ngram` speculative_config keys."""

    kind: str = "ngram"
    prompt_lookup_min: int = 2  # shortest suffix n-gram searched for
    prompt_lookup_max: int = 5  # longest suffix n-gram searched for (the longest match wins)
