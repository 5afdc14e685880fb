"""EAGLE-3 drafters (Li et al. 2025): one decoder layer over the target's fused multi-layer features.

At position t the drafter reads g_t = fc([f_low; f_mid; f_high]) (3·H_target → H), the target's
hidden states entering layers `layer_ids` at t (HF output_hidden_states indices), and the
embedding of token t+1. Its decoder layer attends with q/k/v computed from
[input_layernorm(emb); hidden_norm(g)] (2H wide), the residual stream carries g, and the
prenorm output h_t both feeds norm → lm_head (logits over a reduced draft vocabulary, mapped
back to target ids with d2t) and becomes the hidden input of the next drafted position. RoPE
position of the entry built from target position t is t (and t+j for the j-th drafted token),
as vLLM places them.

Two ways to run it:
- `ttt_logits`: training-time test — n unrolled steps where step j reads the drafter's own
  step j−1 outputs; a query at (t, j) attends causally to the step-0 entries (real target
  features, positions ≤ t) and to its own entries of steps 1…j. Scores are a (T × T) product for
  step 0 plus one dot product per extra step, so memory grows linearly in n.
- `decode`: incremental, with an `EagleCache` of the drafter's keys and values.
Module and tensor names follow the speculators format vLLM serves (heads/formats/speculators.py
writes it from the native checkpoint).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Callable, Optional

import torch
import torch.nn.functional as F
from torch import nn

from heads.errors import HeadsError
from heads.native import read_native, save_native
from heads.target_features import default_eagle3_layers


@dataclass
class EagleArch:
    """Everything the checkpoint's shapes and behaviour depend on."""

    hidden_size: int
    num_attention_heads: int
    num_key_value_heads: int
    intermediate_size: int
    vocab_size: int  # the target's
    draft_vocab_size: int
    target_hidden_size: int
    layer_ids: list[int] = field(default_factory=list)  # target hidden_states indices fused by fc
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    max_position_embeddings: int = 2048
    norm_before_residual: bool = False  # True: the residual carries hidden_norm(g) instead of g
    # speculators' optional norms, run as vLLM runs them (drafthub trains none of them; checkpoints made elsewhere may)
    norm_before_fc: bool = False  # one RMSNorm over the concatenated features before fc (`input_norm`)
    fc_norm: bool = False  # one RMSNorm per target layer's features before fc (`fc_norm.{i}`)
    norm_output: bool = False  # the next drafted position reads norm(h), not the prenorm h ("EAGLE 3.1")

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads

    @classmethod
    def for_target(cls, cfg, target, draft_vocab_size: int, layer_ids: list[int]) -> "EagleArch":
        """The drafter shape for `target` (any HF causal LM): its width and vocabulary, cfg's overrides."""
        tc = target.config
        embed, lm_head = target.get_input_embeddings().weight, target.get_output_embeddings().weight
        heads = cfg.num_attention_heads or tc.num_attention_heads
        rope = getattr(tc, "rope_parameters", None) or {}
        return cls(
            hidden_size=embed.shape[1],
            num_attention_heads=heads,
            num_key_value_heads=cfg.num_key_value_heads or getattr(tc, "num_key_value_heads", None) or heads,
            intermediate_size=cfg.intermediate_size or tc.intermediate_size,
            vocab_size=lm_head.shape[0],
            draft_vocab_size=draft_vocab_size,
            target_hidden_size=tc.hidden_size,
            layer_ids=layer_ids,
            rms_norm_eps=getattr(tc, "rms_norm_eps", 1e-6),
            rope_theta=float(rope.get("rope_theta") or getattr(tc, "rope_theta", 10000.0) or 10000.0),
            max_position_embeddings=getattr(tc, "max_position_embeddings", 2048),
            norm_before_residual=getattr(cfg, "norm_before_residual", False),
        )

    def llama_config(self) -> dict:
        """The one-layer llama config consumers build the drafter's decoder layer from."""
        return {
            "model_type": "llama",
            "hidden_size": self.hidden_size,
            "intermediate_size": self.intermediate_size,
            "num_attention_heads": self.num_attention_heads,
            "num_key_value_heads": self.num_key_value_heads,
            "head_dim": self.head_dim,
            "num_hidden_layers": 1,
            "hidden_act": "silu",
            "rms_norm_eps": self.rms_norm_eps,
            "rope_theta": self.rope_theta,
            "max_position_embeddings": self.max_position_embeddings,
            "vocab_size": self.vocab_size,
            "tie_word_embeddings": False,
        }


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def _rope(x: torch.Tensor, positions: torch.Tensor, theta: float) -> torch.Tensor:
    """Rotary embedding of x (B, heads, T, d) at positions (B, T)."""
    d = x.shape[-1]
    inv_freq = 1.0 / (theta ** (torch.arange(0, d, 2, device=x.device, dtype=torch.float32) / d))
    angles = positions.float()[..., None] * inv_freq  # (B, T, d/2)
    emb = torch.cat((angles, angles), dim=-1)[:, None]  # (B, 1, T, d)
    return (x.float() * emb.cos() + _rotate_half(x.float()) * emb.sin()).to(x.dtype)


class EagleAttention(nn.Module):
    def __init__(self, arch: EagleArch, input_width: int):
        super().__init__()
        h, kv, d = arch.num_attention_heads, arch.num_key_value_heads, arch.head_dim
        self.heads, self.kv_heads, self.head_dim, self.theta = h, kv, d, arch.rope_theta
        self.q_proj = nn.Linear(input_width, h * d, bias=False)
        self.k_proj = nn.Linear(input_width, kv * d, bias=False)
        self.v_proj = nn.Linear(input_width, kv * d, bias=False)
        self.o_proj = nn.Linear(h * d, arch.hidden_size, bias=False)

    def project(self, x: torch.Tensor, positions: torch.Tensor):
        """q (B, h, T, d), k and v (B, kv, T, d), RoPE applied to q and k."""
        B, T, _ = x.shape
        q = self.q_proj(x).view(B, T, self.heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(B, T, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(B, T, self.kv_heads, self.head_dim).transpose(1, 2)
        return _rope(q, positions, self.theta), _rope(k, positions, self.theta), v

    def attend(self, q, k, v, mask, diag_k=(), diag_v=()) -> torch.Tensor:
        """softmax over [q·kᵀ where mask; q·diag_k elementwise per step] → (B, T, H).

        mask: (B, 1, Tq, Tk) bool. diag_k/diag_v: per extra TTT step, (B, kv, Tq, d) entries a
        query sees at its own position only.
        """
        rep = self.heads // self.kv_heads
        k, v = k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)
        scale = self.head_dim**-0.5
        scores = (q @ k.transpose(-1, -2)) * scale  # (B, h, Tq, Tk)
        scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
        extra = [
            (q * dk.repeat_interleave(rep, 1)).sum(-1, keepdim=True) * scale for dk in diag_k
        ]  # (B, h, Tq, 1) each
        weights = torch.cat([scores, *extra], dim=-1).softmax(-1, dtype=torch.float32).to(q.dtype)
        out = weights[..., : k.shape[2]] @ v  # (B, h, Tq, d)
        for i, dv in enumerate(diag_v):
            out = out + weights[..., k.shape[2] + i, None] * dv.repeat_interleave(rep, 1)
        B, _, T, _ = out.shape
        return self.o_proj(out.transpose(1, 2).reshape(B, T, -1))


class EagleMLP(nn.Module):
    def __init__(self, arch: EagleArch):
        super().__init__()
        self.gate_proj = nn.Linear(arch.hidden_size, arch.intermediate_size, bias=False)
        self.up_proj = nn.Linear(arch.hidden_size, arch.intermediate_size, bias=False)
        self.down_proj = nn.Linear(arch.intermediate_size, arch.hidden_size, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Eagle3Layer(nn.Module):
    """The decoder layer: attention input [input_layernorm(emb); hidden_norm(g)], residual g."""

    def __init__(self, arch: EagleArch):
        super().__init__()
        self.norm_before_residual = arch.norm_before_residual
        self.input_layernorm = nn.RMSNorm(arch.hidden_size, eps=arch.rms_norm_eps)
        self.hidden_norm = nn.RMSNorm(arch.hidden_size, eps=arch.rms_norm_eps)
        self.self_attn = EagleAttention(arch, 2 * arch.hidden_size)
        self.post_attention_layernorm = nn.RMSNorm(arch.hidden_size, eps=arch.rms_norm_eps)
        self.mlp = EagleMLP(arch)

    def attention_input(self, emb: torch.Tensor, hidden: torch.Tensor):
        normed = self.hidden_norm(hidden)
        residual = normed if self.norm_before_residual else hidden
        return torch.cat([self.input_layernorm(emb), normed], dim=-1), residual

    def finish(self, attn_out: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        """Post-attention half; returns the prenorm output h (the next step's hidden input)."""
        residual = attn_out + residual
        return self.mlp(self.post_attention_layernorm(residual)) + residual


class EagleCache:
    """The drafter's keys and values per row; slots never move, invalid ones are masked out."""

    def __init__(self, batch_size: int, kv_heads: int, head_dim: int, device, dtype):
        self.k = torch.zeros(batch_size, kv_heads, 0, head_dim, device=device, dtype=dtype)
        self.v = torch.zeros_like(self.k)
        self.valid = torch.zeros(batch_size, 0, dtype=torch.bool, device=device)

    @property
    def width(self) -> int:
        return self.valid.shape[1]

    def truncate(self, width: int) -> None:
        self.k, self.v, self.valid = self.k[:, :, :width], self.v[:, :, :width], self.valid[:, :width]

    def attend_block(
        self,
        attn: "EagleAttention",
        q,
        k,
        v,
        entry_valid: torch.Tensor,
        block_mask: Optional[torch.Tensor] = None,
        cache_mask: Optional[torch.Tensor] = None,
    ) -> torch.Tensor:
        """Append a block's keys/values (B, kv, m, d) and attend its queries over cache + block.

        block_mask (B, m, m) defaults to causal, cache_mask (B, m, S) to every valid cached entry;
        padding entries (entry_valid False) are hidden as keys, and an entry always sees itself.
        """
        B, m = entry_valid.shape
        if block_mask is None:
            block_mask = torch.ones(m, m, dtype=torch.bool, device=q.device).tril().expand(B, m, m)
        block_mask = (block_mask & entry_valid[:, None, :]) | torch.eye(
            m, dtype=torch.bool, device=q.device
        )  # no empty rows
        if cache_mask is None:
            cache_mask = self.valid[:, None, :].expand(B, m, self.width)
        mask = torch.cat([cache_mask, block_mask], dim=-1)[:, None]  # (B, 1, m, S+m)
        self.k, self.v = torch.cat([self.k, k], 2), torch.cat([self.v, v], 2)
        self.valid = torch.cat([self.valid, entry_valid], 1)
        return attn.attend(q, self.k, self.v, mask)


def eagle3_layer_ids(cfg, num_hidden_layers: int) -> list[int]:
    """The target layer ids cfg.layer_ids names (default [2, N//2, N−3]), checked as vLLM will read them."""
    n = num_hidden_layers
    layer_ids = list(cfg.layer_ids) if cfg.layer_ids is not None else default_eagle3_layers(n)
    if len(layer_ids) != 3 or len(set(layer_ids)) != 3 or not all(0 <= i <= n for i in layer_ids):
        raise HeadsError(
            f"EAGLE-3 fuses 3 distinct target layers in 0..{n}; got layer_ids={layer_ids} "
            "(set drafter.layer_ids explicitly for a target this shallow)"
        )
    if layer_ids != sorted(layer_ids):
        raise HeadsError(
            f"drafter.layer_ids={layer_ids} must be ascending: vLLM and SGLang fuse the layers in layer order "
            f"whatever the config lists; use {sorted(layer_ids)}"
        )
    return layer_ids


class Eagle3Drafter(nn.Module):
    kind = "eagle3"
    target_signals = ("hidden_states at layer_ids",)

    def __init__(self, arch: EagleArch):
        super().__init__()
        self.arch = arch
        H = arch.hidden_size
        self.embed_tokens = nn.Embedding(arch.vocab_size, H)
        features = len(arch.layer_ids) * arch.target_hidden_size
        self.input_norm = nn.RMSNorm(features, eps=arch.rms_norm_eps) if arch.norm_before_fc else None
        self.fc_norm = (
            nn.ModuleList(nn.RMSNorm(arch.target_hidden_size, eps=arch.rms_norm_eps) for _ in arch.layer_ids)
            if arch.fc_norm
            else None
        )
        self.fc = nn.Linear(features, H, bias=False)
        self.layers = nn.ModuleList([Eagle3Layer(arch)])
        self.norm = nn.RMSNorm(H, eps=arch.rms_norm_eps)
        self.lm_head = nn.Linear(H, arch.draft_vocab_size, bias=False)
        self.register_buffer("d2t", torch.zeros(arch.draft_vocab_size, dtype=torch.long))
        self.register_buffer("t2d", torch.zeros(arch.vocab_size, dtype=torch.bool))

    @classmethod
    def from_target(cls, cfg, target, draft_vocab) -> "Eagle3Drafter":
        """A fresh drafter for `target` (any HF causal LM): its width, frozen copy of its embeddings,
        lm_head initialised from the target's rows of the draft vocabulary (heads.vocab.DraftVocab), and the
        final norm from the target's (what that lm_head was trained to read) where it has one. A norm of another
        shape is refused, not skipped: a partitioned (sharded, not gathered) norm once started a run elsewhere."""
        tc = target.config
        layer_ids = eagle3_layer_ids(cfg, tc.num_hidden_layers)
        embed, lm_head = target.get_input_embeddings().weight, target.get_output_embeddings().weight
        arch = EagleArch.for_target(cfg, target, draft_vocab.size, layer_ids)
        drafter = cls(arch)
        target_norm = getattr(getattr(target.get_decoder(), "norm", None), "weight", None)
        with torch.no_grad():
            drafter.embed_tokens.weight.copy_(embed.float())
            drafter.lm_head.weight.copy_(lm_head[draft_vocab.draft_to_target].float())
            if target_norm is not None:
                if target_norm.shape != drafter.norm.weight.shape:
                    raise HeadsError(
                        f"the target's final norm has shape {tuple(target_norm.shape)}, the drafter's "
                        f"{tuple(drafter.norm.weight.shape)}; gather a sharded target's weights before building it"
                    )
                drafter.norm.weight.copy_(target_norm.float())
            drafter.d2t.copy_(draft_vocab.d2t())
            drafter.t2d.copy_(draft_vocab.t2d(arch.vocab_size))
        drafter.embed_tokens.weight.requires_grad_(False)  # the target's embeddings, shared as vLLM shares them
        drafter.lm_head.weight.requires_grad_(getattr(cfg, "train_lm_head", True))
        return drafter

    def save_pretrained(self, path) -> None:
        """The native checkpoint (heads/native.py): no serving settings (γ, verifier); the export
        (heads/formats/speculators.py) writes those, once, from this checkpoint."""
        save_native(path, self.kind, self.native_config(), self)

    def native_config(self) -> dict:
        return {"arch": asdict(self.arch)}

    @classmethod
    def from_pretrained(cls, path) -> "Eagle3Drafter":
        """Load a native checkpoint written by save_pretrained (exports load with load_speculators)."""
        config, tensors = read_native(path, cls.kind, "EAGLE-3")
        drafter = cls(EagleArch(**config["arch"]))
        drafter.load_state_dict(tensors)
        return drafter

    @property
    def target_layer_ids(self) -> tuple[int, ...]:
        return tuple(self.arch.layer_ids)

    def draft_to_target(self, draft_ids: torch.Tensor) -> torch.Tensor:
        return draft_ids + self.d2t[draft_ids]

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """(…, H) outputs (as `output` gives them) → (…, D) draft-vocabulary logits: lm_head(norm(h))."""
        return self.lm_head(hidden if self.arch.norm_output else self.norm(hidden))

    def output(self, h: torch.Tensor) -> torch.Tensor:
        """The layer's prenorm output h → what the next drafted position reads: h, or norm(h) under norm_output
        (then already normed, so `logits` applies lm_head alone)."""
        return self.norm(h) if self.arch.norm_output else h

    def ttt_logits(
        self,
        features: torch.Tensor,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        steps: int,
        feed: Optional[Callable[[int, torch.Tensor], torch.Tensor]] = None,
        counted: Optional[torch.Tensor] = None,
    ) -> list[torch.Tensor]:
        """Training-time test over whole sequences.

        Args:
            features: (B, T, 3·H_target) target hidden states at layer_ids, concatenated.
            input_ids, attention_mask: (B, T).
            feed: optional (j, step j−1 logits (B, T, D)) → (B, T) target ids step j ≥ 1 reads at
                each position instead of token t+j+1 — the drafter's own drafts, for on-policy training.
            counted: optional (B, T) bool, the tokens a loss counts (without feed): step j's lm_head then runs
                only where it predicts one of them. The lm_head is half the layer's work, and prompt and
                padding positions are half the positions, so a training step costs a third less.
        Returns:
            steps × (B, T, D): entry [t] of step j predicts token t+j+2 (after reading tokens up to t+j+1);
            with `counted`, steps × (N_j, D): the entries t with counted[:, t+j+2], in row-major order.
        """
        B, T, _ = features.shape
        layer = self.layers[0]
        hidden = self.fuse(features)  # (B, T, H)
        positions = torch.arange(T, device=features.device).expand(B, T)
        causal = torch.ones(T, T, dtype=torch.bool, device=features.device).tril()
        mask0 = (causal[None] & attention_mask.bool()[:, None, :])[:, None]  # (B, 1, T, T)
        k0 = v0 = None
        diag_k, diag_v, out = [], [], []
        for j in range(steps):
            if j and feed is not None:
                tokens = feed(j, out[-1])
            else:
                tokens = F.pad(input_ids[:, j + 1 :], (0, j + 1))  # (B, T): token t+j+1 (0 past the end)
            x, residual = layer.attention_input(self.embed_tokens(tokens), hidden)
            q, k, v = layer.self_attn.project(x, positions + j)
            if j == 0:
                k0, v0 = k, v
            else:
                diag_k.append(k), diag_v.append(v)
            hidden = self.output(layer.finish(layer.self_attn.attend(q, k0, v0, mask0, diag_k, diag_v), residual))
            if counted is None or feed is not None:
                out.append(self.logits(hidden))
            else:  # entry t predicts token t+j+2: counted shifted left by j + 2
                out.append(self.logits(hidden[F.pad(counted[:, j + 2 :], (0, j + 2))]))
        return out

    forward = ttt_logits  # the training entry point accelerate wraps is the training-time test

    def new_cache(self, batch_size: int, device) -> EagleCache:
        return EagleCache(batch_size, self.arch.num_key_value_heads, self.arch.head_dim, device, self.fc.weight.dtype)

    def decode(
        self,
        cache: EagleCache,
        hidden: torch.Tensor,
        tokens: torch.Tensor,
        positions: torch.Tensor,
        entry_valid: torch.Tensor,
        block_mask: Optional[torch.Tensor] = None,
        cache_mask: Optional[torch.Tensor] = None,
    ) -> torch.Tensor:
        """Run a block of m entries after the cached ones and append them to the cache.

        Args:
            hidden: (B, m, H) fused target features (fc applied) or the drafter's own prenorm outputs.
            tokens, positions: (B, m) the token after each entry's position, and its RoPE position.
            entry_valid: (B, m) False for padding entries (they are masked out as keys).
            block_mask: (B, m, m) which block entries each entry sees; default causal.
            cache_mask: (B, m, S) which cached entries each entry sees; default every valid one.
        Returns:
            (B, m, H) outputs (see `output`), which `logits` reads and the next position takes as `hidden`.
        """
        layer = self.layers[0]
        x, residual = layer.attention_input(self.embed_tokens(tokens), hidden)
        q, k, v = layer.self_attn.project(x, positions)
        attended = cache.attend_block(layer.self_attn, q, k, v, entry_valid, block_mask, cache_mask)
        return self.output(layer.finish(attended, residual))

    def fuse(self, features: torch.Tensor) -> torch.Tensor:
        """(…, n·H_target) target features → (…, H): the optional norms, then fc."""
        x = features.to(self.fc.weight.dtype)
        if self.input_norm is not None:
            x = self.input_norm(x)
        if self.fc_norm is not None:
            x = torch.cat([norm(chunk) for norm, chunk in zip(self.fc_norm, x.chunk(len(self.fc_norm), -1))], -1)
        return self.fc(x)

    def arch_dict(self) -> dict:
        return asdict(self.arch)
