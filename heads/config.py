"""Structured configs of the drafter families (the Hydra `drafter` group's schemas).

Every default lives here, once, with its comment; conf/drafter/<kind>.yaml selects one of these
schemas (registered from the family table, heads/families/) and holds only what differs.
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
class PardConfig(DraftLMConfig):
    """A draft LM trained to propose K tokens in one forward (PARD); every DraftLMConfig field applies."""

    kind: str = "pard"
    pard_token: Optional[int] = None  # mask id fed after the bonus token; None = a special or unused id of the data
    max_draft_tokens: int = 8  # K: drafts per forward the objective trains (bonus + K − 1 masks); eval/serving γ ≤ K
    anchors_per_sequence: int = 16  # training: random positions per sequence, each followed by K − 1 masks
    mask_loss_weight: float = 1.0  # weight of the masked slots' loss next to the plain next-token loss


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
    # online: the target runs in each step | offline: bf16 shards written once next to the data by a transformers
    # forward | vllm: the same shards written by vLLM (tensor parallel); training then loads no decoder layer
    features: str = "online"


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
    # the lm_head starts as the target's rows of the draft vocabulary; False keeps them frozen (as speculators does):
    # the drafter then learns only to write hidden states the target's own head reads
    train_lm_head: bool = True


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
    # 1 = one chain, as vLLM serves it; k > 1 = a tree of the continuations of up to k distinct
    # matches of the longest matching n-gram, most recent first (our engine only: eval.tree=matches)
    num_matches: int = 1


@dataclass
class SuffixConfig:
    """Suffix decoding (Oliaro et al., arXiv:2411.04975), training-free: drafts from suffix trees over the
    request's prompt and output and over earlier requests' outputs. Field names are vLLM's `suffix`
    speculative_config keys (served through arctic-inference); eval.tree=drafter drafts arctic's best-first tree."""

    kind: str = "suffix"
    suffix_decoding_max_tree_depth: int = 24  # deepest tree node: bounds matched context + draft length
    suffix_decoding_max_cached_requests: int = 10000  # earlier outputs kept to draft from (oldest leave first)
    suffix_decoding_max_spec_factor: float = 1.0  # a match of m context tokens drafts at most factor · m tokens
    suffix_decoding_min_token_prob: float = 0.1  # a draft token needs at least this count-estimated probability


@dataclass
class RetrievalConfig:
    """Retrieval from the target's own answers (REST's datastore, llama.cpp's static n-gram cache): drafts the
    continuation of the longest match of the context in the prompt and the text generated so far, or in a store
    of the distilled answers, indexed once when the drafter is exported. Training-free: its "training" is the
    distillation it reads (heads/retrieval.py)."""

    kind: str = "retrieval"
    max_tree_depth: int = 24  # deepest suffix-tree node: bounds matched context + draft length (as suffix decoding)
    min_request_match: int = 1  # a draft from the prompt and the text so far needs a match of this many tokens
    min_store_match: int = 1  # a draft from the store needs a context match of at least this many tokens
    max_spec_factor: float = 4.0  # a match of m tokens drafts at most factor · m tokens (and at most γ)
    min_token_prob: float = 0.1  # a draft token needs at least this count-estimated probability
    max_answers: Optional[int] = None  # index at most this many distilled answers (the first); null = all


@dataclass
class LookaheadConfig:
    """Lookahead decoding (training-free, Fu et al. 2024): the target's own Jacobi iterations fill an n-gram
    pool verified in the same forward. vLLM does not serve it; drafthub's engine measures it.

    Small on purpose: on a small CPU target every fed node costs (the paper's W=15, N=5, G=15 for 7B models
    on GPUs feeds ~120 nodes a step); N=3 keeps one Jacobi level above the base row."""

    kind: str = "lookahead"
    window_size: int = 4  # W: future positions guessed in parallel; (W−1) + W·(N−2) window nodes per step
    ngram_size: int = 3  # N: tokens per pooled n-gram; the window keeps N−1 Jacobi levels
    max_verify_ngrams: int = 4  # G: n-grams kept per first token, all verified (≤ G·(N−1) nodes); 0 = none
    pool_from_prompt: bool = True  # also pool the prompt's and the verified output's n-grams (LADE)


@dataclass
class LayerSkipConfig:
    """Self-speculation: the target with some decoder layers skipped (shared embeddings, norm, lm_head).

    The train stage searches which layers to skip on held-out distilled samples (or takes
    skip_layers), then optionally fine-tunes the kept layers' copy; the export is a plain HF causal LM."""

    kind: str = "layer_skip"
    skip_layers: Optional[List[int]] = None  # decoder layers to skip, e.g. [3, 5]; None = search them
    num_speculative_tokens: int = 4  # γ whose predicted speed-up the search maximises
    search_samples: int = 32  # last distilled samples scoring candidates (held out of any fine-tune)
    max_evaluations: int = 200  # candidate skip sets scored at most (each one forward over the samples)
    fine_tune_steps: int = 0  # optimizer steps of KD on the kept layers' copy (trainer settings); 0 = none


@dataclass
class PEagleConfig(EagleLayerConfig):
    """P-EAGLE: EAGLE-3 drafting γ tokens in one forward (bonus slot + γ−1 mask slots, vLLM's parallel drafting).

    No `ttt_steps`: in parallel drafting every slot reads either a true target feature (the bonus
    slot) or the learned mask_hidden (mask slots), never the drafter's own output, so EAGLE-3's
    training-time test has nothing to simulate; the sequential head is trained in one step.
    """

    kind: str = "peagle"
    layer_ids: Optional[List[int]] = None  # target hidden_states ids fused by fc; None = [2, N//2, N−3]
    draft_vocab_size: int = 32000  # most frequent target tokens the drafter can propose (capped at the target's)
    norm_before_residual: bool = False  # True: the residual carries hidden_norm(g) instead of g (always written out)
    # the id written into mask slots; None = picked from the data (heads.vocab.pick_mask_token: an unused
    # special token, else the highest id the distilled data never contains)
    mask_token_id: Optional[int] = None
    max_draft_tokens: int = 8  # K: drafts per forward trained (bonus slot + K−1 masks); eval/serve γ ≤ K
    anchors_per_sequence: int = 8  # random positions per sequence whose K−1 mask slots are trained per step
    position_decay: float = 0.8  # weight of draft position k's loss: decay^k (k = 0 is the bonus slot)
    select_samples: int = 32  # samples held out to score every checkpoint by simulated τ (best kept); 0 = last


@dataclass
class DFlashConfig:
    """DFlash (block diffusion): one forward drafts block_size − 1 tokens from the target's fused features.

    Layer shape fields: None = the target's (the drafter's width is always the target's hidden size)."""

    kind: str = "dflash"
    layer_ids: Optional[List[int]] = None  # target hidden_states ids fused by fc (1..N); None = [2, N//2, N−3]
    block_size: int = 8  # anchor + block_size − 1 mask slots; vLLM serves num_speculative_tokens = block_size − 1
    # Decoder layers. One is what vLLM 0.32's CPU build serves exactly: its context pass applies
    # layer 0's k_norm weights to every layer (the served check patches that on CPU, see README).
    num_hidden_layers: int = 1
    mask_token_id: Optional[int] = None  # id fed to the mask slots; None = a special or unused id of the data
    loss_decay: float = 0.87  # weight of mask slot k: decay^(k−1); DFlash's exp(−(k−1)/γ) with γ = 7 is 0.87
    anchors_per_sequence: int = 16  # training: random anchor blocks per sequence, all in one forward
    num_attention_heads: Optional[int] = None  # None = the target's
    num_key_value_heads: Optional[int] = None  # None = the target's
    head_dim: Optional[int] = None  # None = the target's (hidden / heads when the heads are overridden)
    intermediate_size: Optional[int] = None  # None = the target's


@dataclass
class DSparkConfig(DFlashConfig):
    """DSpark (DeepSpec): DFlash's block backbone drafting anchor-first, plus a low-rank Markov head (the bias
    of the previously drafted token, applied left to right) and a confidence head (each draft's acceptance).

    The block is [x_t, MASK × (block_size − 1)] and every slot drafts the next position: block_size drafts
    per forward (vLLM `dspark`, `sample_from_anchor: true`). Loss as DeepSpec trains it: `trainer.loss`
    (DeepSpec: total variation) and `ce_weight` of cross-entropy on the Markov-corrected logits, plus
    `confidence_weight` of the confidence head's BCE towards each slot's acceptance Σ min(p, q).
    """

    kind: str = "dspark"
    block_size: int = 7  # drafts per forward (the anchor slot drafts too); vLLM num_speculative_tokens ≤ this
    loss_decay: float = 0.78  # weight of draft k (0-based): decay^k; DeepSpec's exp(−k/γ) with γ = 4
    markov_rank: int = 64  # r of the V×r, r×V transition bias; DeepSpec ships 256 for 8B targets
    ce_weight: float = 0.1  # share of cross-entropy against the data's next token (DeepSpec 0.1; the rest KD)
    confidence_head: bool = True  # train and ship the acceptance-estimate head (eval.draft_confidence_min uses it)
    confidence_with_markov: bool = True  # the head reads the previous token's Markov embedding beside the hidden
    confidence_weight: float = 1.0  # weight of the confidence head's BCE (DeepSpec 1.0)


@dataclass
class DFlash2Config(DFlashConfig):
    """DFlash2: DFlash plus a grouped causal depthwise convolution around each sublayer of the block and a
    low-rank top-k path selector that walks the block's candidates left to right (vLLM `dflash`,
    architecture DFlash2DraftModel). The selector is trained as speculators does: a K-way cross-entropy
    over each slot's unary top-k with the teacher-forced previous token (the true next token replaces
    the weakest candidate when it is missing), beside DFlash's loss.
    """

    kind: str = "dflash2"
    conv_kernel_size: int = 2  # causal taps T of the block convolution (≤ block_size)
    conv_group_size: int = 16  # channels sharing one dynamic tap coefficient; must divide the hidden size
    selector_rank: int = 64  # R of the predecessor × successor transition factorisation
    selector_top_k: int = 8  # unary candidates per slot the selector chooses among
    selector_weight: float = 1.0  # weight of the selector's cross-entropy (speculators' selector_loss_alpha)
