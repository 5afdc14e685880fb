"""EAGLE-1 drafters (Li et al. 2024): predict the target's next final feature, score it with the target's lm_head.

At position t the drafter reads f_t, the target's final normed hidden state (its lm_head
input), and the embedding of token t+1: x = fc([emb; f_t]) (2H → H, no bias), then one decoder
layer without its input norm (as EAGLE and vLLM build it); the prenorm sum f̂_t estimates
f_{t+1}, and the target's own lm_head turns it into logits for token t+2. Drafted entries feed
f̂ back as the feature. Checkpoint: a one-layer llama config.json plus `fc.weight`,
`layers.0.*` and `embed_tokens.weight` — what vLLM's `eagle` method loads (it shares the
target's lm_head, so none is saved).
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Optional

import torch
from safetensors.torch import load_file
from torch import nn

from heads.eagle import EagleArch, EagleAttention, EagleCache, EagleMLP
from heads.errors import HeadsError
from heads.native import save_module

CONFIG, WEIGHTS = "config.json", "model.safetensors"


class Eagle1Layer(nn.Module):
    def __init__(self, arch: EagleArch):
        super().__init__()
        self.self_attn = EagleAttention(arch, arch.hidden_size)
        self.post_attention_layernorm = nn.RMSNorm(arch.hidden_size, eps=arch.rms_norm_eps)
        self.mlp = EagleMLP(arch)

    def finish(self, attn_out: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        residual = attn_out + residual
        return self.mlp(self.post_attention_layernorm(residual)) + residual


class Eagle1Drafter(nn.Module):
    kind = "eagle1"
    target_layer_ids = (-1,)  # the final normed hidden state (the lm_head input)

    def __init__(self, arch: EagleArch, lm_head_weight: torch.Tensor):
        super().__init__()
        self.arch = arch
        self.embed_tokens = nn.Embedding(arch.vocab_size, arch.hidden_size)
        self.fc = nn.Linear(2 * arch.hidden_size, arch.hidden_size, bias=False)
        self.layers = nn.ModuleList([Eagle1Layer(arch)])
        self.register_buffer(
            "lm_head_weight", lm_head_weight.detach().float().clone(), persistent=False
        )  # the target's, frozen
        self.register_buffer(
            "d2t", torch.zeros(arch.vocab_size, dtype=torch.long), persistent=False
        )  # full vocabulary: identity map

    @classmethod
    def from_target(cls, cfg, target) -> "Eagle1Drafter":
        embed, lm_head = target.get_input_embeddings().weight, target.get_output_embeddings().weight
        arch = EagleArch.for_target(cfg, target, lm_head.shape[0], [])
        drafter = cls(arch, lm_head)
        with torch.no_grad():
            drafter.embed_tokens.weight.copy_(embed.float())
        drafter.embed_tokens.weight.requires_grad_(False)
        return drafter

    def draft_to_target(self, draft_ids: torch.Tensor) -> torch.Tensor:
        return draft_ids

    def fuse(self, features: torch.Tensor) -> torch.Tensor:
        return features.to(self.fc.weight.dtype)  # fc needs the token too; it is applied in the layer

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """(…, H) predicted features → (…, V) logits through the target's lm_head."""
        return hidden @ self.lm_head_weight.to(hidden.dtype).T

    def forward(self, features: torch.Tensor, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """Teacher-forced pass: (B, T, H) target features → (B, T, H) predicted next features."""
        B, T, _ = features.shape
        tokens = nn.functional.pad(input_ids[:, 1:], (0, 1))  # token t+1
        x = self.fc(torch.cat([self.embed_tokens(tokens), features.to(self.fc.weight.dtype)], -1))
        layer = self.layers[0]
        q, k, v = layer.self_attn.project(x, torch.arange(T, device=x.device).expand(B, T))
        causal = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
        mask = (causal[None] & attention_mask.bool()[:, None, :])[:, None]
        return layer.finish(layer.self_attn.attend(q, k, v, mask), x)

    def new_cache(self, batch_size: int, device) -> EagleCache:
        return EagleCache(batch_size, self.arch.num_key_value_heads, self.arch.head_dim, device, self.fc.weight.dtype)

    def decode(
        self,
        cache: EagleCache,
        hidden,
        tokens,
        positions,
        entry_valid,
        block_mask: Optional[torch.Tensor] = None,
        cache_mask: Optional[torch.Tensor] = None,
    ) -> torch.Tensor:
        """Same contract as Eagle3Drafter.decode; `hidden` are target features or earlier predictions."""
        layer = self.layers[0]
        x = self.fc(torch.cat([self.embed_tokens(tokens), hidden.to(self.fc.weight.dtype)], -1))
        q, k, v = layer.self_attn.project(x, positions)
        return layer.finish(cache.attend_block(layer.self_attn, q, k, v, entry_valid, block_mask, cache_mask), x)

    def config_dict(self) -> dict:
        return {
            **self.arch.llama_config(),
            "architectures": ["LlamaForCausalLM"],
            "drafthub_kind": "eagle1",  # vLLM ignores it; drafthub's loader reads it
            "bias": False,
        }

    def save_pretrained(self, path) -> None:
        path = Path(path)
        save_module(path, self.config_dict(), self)

    @classmethod
    def from_pretrained(cls, path, lm_head_weight: torch.Tensor) -> "Eagle1Drafter":
        """Load an EAGLE-1 directory; the lm_head is the target's (vLLM shares it the same way)."""
        path = Path(path)
        config = json.loads((path / CONFIG).read_text())
        try:
            arch = EagleArch(
                hidden_size=config["hidden_size"],
                num_attention_heads=config["num_attention_heads"],
                num_key_value_heads=config["num_key_value_heads"],
                intermediate_size=config["intermediate_size"],
                vocab_size=config["vocab_size"],
                draft_vocab_size=config["vocab_size"],
                target_hidden_size=config["hidden_size"],
                rms_norm_eps=config["rms_norm_eps"],
                rope_theta=config["rope_theta"],
                max_position_embeddings=config["max_position_embeddings"],
            )
        except KeyError as e:
            raise HeadsError(f"{path}/{CONFIG} lacks {e}; not an EAGLE-1 checkpoint") from None
        if tuple(lm_head_weight.shape) != (arch.vocab_size, arch.hidden_size):
            raise HeadsError(
                f"{path} is an EAGLE-1 drafter for hidden size {arch.hidden_size} and {arch.vocab_size} tokens; "
                f"the target's lm_head is {tuple(lm_head_weight.shape)}"
            )
        drafter = cls(arch, lm_head_weight)
        missing, unexpected = drafter.load_state_dict(load_file(str(path / WEIGHTS)), strict=False)
        if missing or unexpected:
            raise HeadsError(
                f"{path}/{WEIGHTS} does not match its config: missing {sorted(missing)[:4]}, "
                f"unexpected {sorted(unexpected)[:4]}"
            )
        return drafter

    @staticmethod
    def check_export(path) -> None:
        """Format checks without the target (whose lm_head the drafter shares): fc is [H, 2H]."""
        from safetensors import safe_open

        path = Path(path)
        if not (path / CONFIG).exists() or not (path / WEIGHTS).exists():
            raise HeadsError(f"{path} is not an EAGLE-1 export: it needs {CONFIG} and {WEIGHTS}")
        hidden = json.loads((path / CONFIG).read_text()).get("hidden_size")
        with safe_open(str(path / WEIGHTS), "pt") as f:
            shape = tuple(f.get_slice("fc.weight").get_shape()) if "fc.weight" in f.keys() else None
        if not isinstance(hidden, int) or shape != (hidden, 2 * hidden):
            raise HeadsError(
                f"{path}: fc.weight has shape {shape}, expected (hidden_size, 2·hidden_size) for hidden_size={hidden}"
            )

    def arch_dict(self) -> dict:
        return asdict(self.arch)
