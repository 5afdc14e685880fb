"""DFlash drafters (Chen et al. 2025, block diffusion): a whole block of draft tokens in one forward.

The drafter reads the target's hidden states at `layer_ids` (HF output_hidden_states ids, see
heads.target_features) for every verified position, fused as ctx = hidden_norm(fc(concat)). Its
query block is [x_t, MASK × (block_size − 1)] at positions t … t + block_size − 1 (x_t: the newest
token, whose target features do not exist yet), embedded with the target's embeddings and run
through `num_hidden_layers` Qwen3-style decoder layers; each layer attends bidirectionally over
[context keys/values of positions < t ; the block's own keys/values]. Context keys and values
skip the layer's input_layernorm: K = RoPE(k_norm(k_proj(ctx))), V = v_proj(ctx). After the final
norm the target's lm_head scores each slot; mask slot i predicts the token at its own position
t + i (no shift), so the block's γ = block_size − 1 mask slots are the γ drafts.

This is vLLM 0.32's `DFlashDraftModel` computation (model_executor/models/qwen3_dflash.py:
precompute_and_store_context_kv writes the context K/V, the layers run the block);
heads/families/dflash.py writes and reads that format. The embeddings and lm_head are the
target's, frozen and shared, never saved: vLLM shares them from the target when an export ships
none. Module names are the export's tensor names.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import ClassVar, Optional

import torch
import torch.nn.functional as F
from torch import nn

from heads.block import drafts_per_block
from heads.eagle import EagleMLP, _rope
from heads.errors import HeadsError
from heads.native import read_native, save_native
from heads.target_features import default_eagle3_layers


def check_dflash_settings(settings) -> None:
    """The settings that are wrong whatever the target: HeadsError naming the first bad one."""
    if settings.block_size < 2:
        raise HeadsError(
            f"drafter.block_size={settings.block_size} must be ≥ 2: the block is the anchor token plus "
            "block_size − 1 mask slots (the drafts); use e.g. 8"
        )
    ids = settings.layer_ids
    if ids is not None and (not ids or list(ids) != sorted(set(ids))):
        raise HeadsError(
            f"drafter.layer_ids={list(ids)} must be distinct and ascending: vLLM fuses the layers in layer order; "
            f"use {sorted(set(ids))}"
        )
    if settings.mask_token_id is not None and settings.mask_token_id < 0:
        raise HeadsError(
            f"drafter.mask_token_id={settings.mask_token_id} is negative; give a token id of the target's "
            "vocabulary, or null to pick one from the data"
        )
    if settings.num_hidden_layers < 1 or settings.anchors_per_sequence < 1 or not 0 < settings.loss_decay <= 1:
        raise HeadsError(
            f"drafter.num_hidden_layers={settings.num_hidden_layers} and drafter.anchors_per_sequence="
            f"{settings.anchors_per_sequence} must be ≥ 1, drafter.loss_decay={settings.loss_decay} in (0, 1]"
        )


def dflash_layer_ids(settings, num_target_layers: int) -> list[int]:
    """The explicit layer ids: the settings' or EAGLE-3's default [2, N//2, N−3]."""
    return list(settings.layer_ids) if settings.layer_ids is not None else default_eagle3_layers(num_target_layers)


def check_dflash_target(settings, target_config) -> None:
    """The settings the target rules out: layer ids past its depth, a mask id past its vocabulary."""
    check_dflash_settings(settings)
    n = target_config.num_hidden_layers
    ids = dflash_layer_ids(settings, n)
    if ids != sorted(set(ids)) or not all(1 <= i <= n for i in ids):
        raise HeadsError(
            f"drafter.layer_ids={ids} must be distinct, ascending ids in 1..{n} for this {n}-layer target "
            f"(id {n} = its last layer's output); set drafter.layer_ids explicitly"
        )
    vocab = target_config.vocab_size
    if settings.mask_token_id is not None and settings.mask_token_id >= vocab:
        raise HeadsError(
            f"drafter.mask_token_id={settings.mask_token_id} is outside the target's vocabulary of {vocab}; "
            "use a reserved or unused id below it, or null to pick one from the data"
        )


@dataclass
class DFlashArch:
    """Everything the checkpoint's shapes and behaviour depend on."""

    hidden_size: int  # the target's (its embeddings feed the block)
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    intermediate_size: int
    num_hidden_layers: int
    vocab_size: int  # the target's lm_head rows
    target_hidden_size: int
    layer_ids: list[int] = field(default_factory=list)  # our ids (HF output_hidden_states), ascending
    block_size: int = 8  # anchor + block_size − 1 mask slots
    mask_token_id: int = 0
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    max_position_embeddings: int = 2048
    anchor_first: ClassVar[bool] = False  # the block's layout (heads/block.py): the anchor's slot drafts nothing

    @property
    def drafts_per_block(self) -> int:
        return drafts_per_block(self.block_size, self.anchor_first)

    @classmethod
    def for_target(cls, cfg, target_config, mask_token_id: int) -> "DFlashArch":
        """The drafter shape for a target config: its layer shape unless cfg overrides it."""
        tc = target_config
        check_dflash_target(cfg, tc)
        heads = cfg.num_attention_heads or tc.num_attention_heads
        head_dim = (
            cfg.head_dim
            or (getattr(tc, "head_dim", None) if not cfg.num_attention_heads else None)
            or tc.hidden_size // heads
        )
        rope = getattr(tc, "rope_parameters", None) or {}
        return cls(
            hidden_size=tc.hidden_size,
            num_attention_heads=heads,
            num_key_value_heads=cfg.num_key_value_heads or getattr(tc, "num_key_value_heads", None) or heads,
            head_dim=head_dim,
            intermediate_size=cfg.intermediate_size or tc.intermediate_size,
            num_hidden_layers=cfg.num_hidden_layers,
            vocab_size=tc.vocab_size,
            target_hidden_size=tc.hidden_size,
            layer_ids=dflash_layer_ids(cfg, tc.num_hidden_layers),
            block_size=cfg.block_size,
            mask_token_id=mask_token_id,
            rms_norm_eps=getattr(tc, "rms_norm_eps", 1e-6),
            rope_theta=float(rope.get("rope_theta") or getattr(tc, "rope_theta", 10000.0) or 10000.0),
            max_position_embeddings=getattr(tc, "max_position_embeddings", 2048),
        )


class DFlashAttention(nn.Module):
    def __init__(self, arch: DFlashArch):
        super().__init__()
        h, kv, d = arch.num_attention_heads, arch.num_key_value_heads, arch.head_dim
        self.heads, self.kv_heads, self.head_dim, self.theta = h, kv, d, arch.rope_theta
        self.q_proj = nn.Linear(arch.hidden_size, h * d, bias=False)
        self.k_proj = nn.Linear(arch.hidden_size, kv * d, bias=False)
        self.v_proj = nn.Linear(arch.hidden_size, kv * d, bias=False)
        self.o_proj = nn.Linear(h * d, arch.hidden_size, bias=False)
        self.q_norm = nn.RMSNorm(d, eps=arch.rms_norm_eps)  # per head, before RoPE
        self.k_norm = nn.RMSNorm(d, eps=arch.rms_norm_eps)

    def _heads(self, x: torch.Tensor, n: int) -> torch.Tensor:
        B, T, _ = x.shape
        return x.view(B, T, n, self.head_dim).transpose(1, 2)  # (B, n, T, d)

    def key_value(self, x: torch.Tensor, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """k (B, kv, T, d) = RoPE(k_norm(k_proj(x))), v = v_proj(x): what a context entry or a block entry stores."""
        k = self.k_norm(self._heads(self.k_proj(x), self.kv_heads))
        return _rope(k, positions, self.theta), self._heads(self.v_proj(x), self.kv_heads)

    def forward(self, x, positions, context_k, context_v, mask) -> torch.Tensor:
        """The block's attention over [context ; block]. x (B, m, H); context_k/v (B, kv, S, d); mask (B, m, S+m)."""
        q = _rope(self.q_norm(self._heads(self.q_proj(x), self.heads)), positions, self.theta)
        k, v = self.key_value(x, positions)
        rep = self.heads // self.kv_heads
        k = torch.cat([context_k.to(k.dtype), k], 2).repeat_interleave(rep, 1)
        v = torch.cat([context_v.to(v.dtype), v], 2).repeat_interleave(rep, 1)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask[:, None])  # (B, h, m, d)
        B, _, m, _ = out.shape
        return self.o_proj(out.transpose(1, 2).reshape(B, m, -1))


class DFlashLayer(nn.Module):
    """A Qwen3 decoder layer (pre-norm, q/k norms); its context keys/values come from ctx directly."""

    def __init__(self, arch: DFlashArch):
        super().__init__()
        self.input_layernorm = nn.RMSNorm(arch.hidden_size, eps=arch.rms_norm_eps)
        self.self_attn = DFlashAttention(arch)
        self.post_attention_layernorm = nn.RMSNorm(arch.hidden_size, eps=arch.rms_norm_eps)
        self.mlp = EagleMLP(arch)  # the same SwiGLU block

    def forward(self, x, positions, context_k, context_v, mask) -> torch.Tensor:
        x = x + self.self_attn(self.input_layernorm(x), positions, context_k, context_v, mask)
        return x + self.mlp(self.post_attention_layernorm(x))


class DFlashDrafter(nn.Module):
    kind = "dflash"
    arch_class = DFlashArch  # what a native checkpoint's "arch" builds (a subclass family's own)
    layer_class = DFlashLayer  # the decoder layer (DFlash2 wraps its sublayers in convolutions)
    target_signals = ("hidden_states at layer_ids",)

    def __init__(self, arch: DFlashArch):
        super().__init__()
        self.arch = arch
        H = arch.hidden_size
        self.fc = nn.Linear(len(arch.layer_ids) * arch.target_hidden_size, H, bias=False)
        self.hidden_norm = nn.RMSNorm(H, eps=arch.rms_norm_eps)
        self.layers = nn.ModuleList([self.layer_class(arch) for _ in range(arch.num_hidden_layers)])
        self.norm = nn.RMSNorm(H, eps=arch.rms_norm_eps)
        # The target's embedding and lm_head weights: a plain attribute, so they are neither
        # parameters (not trained, not saved) nor buffers (DDP would broadcast them every step).
        self.shared: Optional[tuple[torch.Tensor, torch.Tensor]] = None

    @classmethod
    def from_target(cls, cfg, target, mask_token_id: int) -> "DFlashDrafter":
        """A fresh drafter for `target` (any HF causal LM) sharing its embeddings and lm_head."""
        drafter = cls(DFlashArch.for_target(cfg, target.config, mask_token_id))
        return drafter.share(target)

    def share(self, target) -> "DFlashDrafter":
        """Use `target`'s embeddings and lm_head (frozen; checked against the architecture)."""
        embed, lm_head = target.get_input_embeddings().weight, target.get_output_embeddings().weight
        if embed.shape[1] != self.arch.hidden_size or lm_head.shape[0] != self.arch.vocab_size:
            raise HeadsError(
                f"this DFlash drafter is for hidden size {self.arch.hidden_size} and {self.arch.vocab_size} "
                f"tokens; the target has {embed.shape[1]} and {lm_head.shape[0]}: pair it with its own target"
            )
        self.shared = (embed.detach(), lm_head.detach())
        return self

    @property
    def target_layer_ids(self) -> tuple[int, ...]:
        return tuple(self.arch.layer_ids)

    def save_pretrained(self, path) -> None:
        """The native checkpoint (heads/native.py): the architecture and the drafter's own weights."""
        save_native(path, self.kind, {"arch": asdict(self.arch)}, self)

    @classmethod
    def from_pretrained(cls, path, target=None) -> "DFlashDrafter":
        """Load a native checkpoint (exports load with heads.families.dflash.load_dflash)."""
        config, tensors = read_native(path, cls.kind, cls.__name__.removesuffix("Drafter"))
        drafter = cls(cls.arch_class(**config["arch"]))
        drafter.load_state_dict(tensors)
        return drafter.share(target) if target is not None else drafter

    def _shared(self) -> tuple[torch.Tensor, torch.Tensor]:
        if self.shared is None:
            raise HeadsError("this DFlash drafter has no target attached; load it with the target (share(target))")
        return self.shared

    def context(self, features: torch.Tensor) -> torch.Tensor:
        """(B, S, n·H_target) target features → (B, S, H) ctx = hidden_norm(fc(features))."""
        return self.hidden_norm(self.fc(features.to(self.fc.weight.dtype)))

    def context_kv(self, features: torch.Tensor, positions: torch.Tensor) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Per layer, the context keys and values (B, kv, S, d) of features at positions (B, S)."""
        ctx = self.context(features)
        return [layer.self_attn.key_value(ctx, positions) for layer in self.layers]

    def block_hidden(
        self,
        tokens: torch.Tensor,
        positions: torch.Tensor,
        context: list[tuple[torch.Tensor, torch.Tensor]],
        mask: torch.Tensor,
    ) -> torch.Tensor:
        """Block queries through the layers and the final norm.

        Args:
            tokens, positions: (B, m) block tokens (anchor or mask id) and their RoPE positions.
            context: context_kv's per-layer (B, kv, S, d) keys and values.
            mask: (B, m, S + m) bool, which context and block entries each query sees.
        Returns:
            (B, m, H) the normed hidden states the lm_head scores.
        """
        embed, _ = self._shared()
        x = F.embedding(tokens, embed).to(self.fc.weight.dtype)  # (B, m, H)
        extra = self.layer_inputs(tokens)
        for layer, (k, v) in zip(self.layers, context):
            x = layer(x, positions, k, v, mask, **extra)
        return self.norm(x)

    def layer_inputs(self, tokens: torch.Tensor) -> dict:
        """Further keyword inputs of every layer given the block tokens (DFlash2: the block width); none here."""
        return {}

    def head(self, hidden: torch.Tensor) -> torch.Tensor:
        """(…, H) normed hidden → (…, V) logits with the target's lm_head (float32 where the drafter is)."""
        _, lm_head = self._shared()
        return F.linear(hidden.to(lm_head.dtype), lm_head)

    def run_block(self, tokens, positions, context, mask) -> torch.Tensor:
        """(B, m, V) logits of the block queries (block_hidden's arguments)."""
        return self.head(self.block_hidden(tokens, positions, context, mask))

    def forward(self, features, context_positions, tokens, positions, mask) -> torch.Tensor:
        """Training entry point (what accelerate wraps): context K/V from features, then the block."""
        return self.run_block(tokens, positions, self.context_kv(features, context_positions), mask)

    def arch_dict(self) -> dict:
        return asdict(self.arch)
