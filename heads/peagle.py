"""P-EAGLE drafters: an EAGLE-3 head that drafts γ tokens in one forward (vLLM's parallel drafting).

The drafter is EAGLE-3's (heads/eagle.py) plus two things: a mask token id and a learned vector
`mask_hidden` in the pre-fc feature space (len(layer_ids)·H_target wide). Each step vLLM feeds
one block per row (VLLM-FORMATS §2):
- the verified entries (target features at t, token t+1) at position t, the last one being the
  bonus slot (hidden of the last accepted token, the bonus token);
- γ−1 mask slots (mask id, fc(mask_hidden)) at the positions after it;
all with causal attention. The bonus slot's logits give draft 1, mask slot i's give draft i+1.
No slot reads the drafter's own output, so one forward drafts the whole chain.

`parallel_logits` is the training forward: every real entry plus K−1 mask slots after each of
a few anchors per sequence, in one attention over [real entries ; mask entries].
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from heads.eagle import Eagle3Drafter, EagleArch
from heads.errors import HeadsError
from heads.native import read_native


class PEagleDrafter(Eagle3Drafter):
    kind = "peagle"

    def __init__(self, arch: EagleArch, mask_token_id: int, max_draft_tokens: int):
        super().__init__(arch)
        if not 0 <= mask_token_id < arch.vocab_size:
            raise HeadsError(f"mask_token_id={mask_token_id} is outside the embedding's 0..{arch.vocab_size - 1}")
        self.mask_token_id, self.max_draft_tokens = mask_token_id, max_draft_tokens
        # Small: the residual of a mask slot starts near 0 and hidden_norm gives its direction.
        self.mask_hidden = nn.Parameter(0.02 * torch.randn(len(arch.layer_ids) * arch.target_hidden_size))

    @classmethod
    def from_target(cls, cfg, target, draft_vocab, mask_token_id: int) -> "PEagleDrafter":
        """A fresh drafter for `target`, initialised as EAGLE-3's (Eagle3Drafter.from_target)."""
        base = Eagle3Drafter.from_target(cfg, target, draft_vocab)
        drafter = cls(base.arch, mask_token_id, cfg.max_draft_tokens)
        drafter.load_state_dict(base.state_dict(), strict=False)  # everything but mask_hidden
        drafter.embed_tokens.weight.requires_grad_(False)  # the target's embeddings, shared as vLLM shares them
        return drafter

    def native_config(self) -> dict:
        """EAGLE-3's native config plus the mask token id and K."""
        return {**super().native_config(), **self.native_settings()}

    def native_settings(self) -> dict:
        return {"mask_token_id": self.mask_token_id, "max_draft_tokens": self.max_draft_tokens}

    @classmethod
    def from_pretrained(cls, path) -> "PEagleDrafter":
        config, tensors = read_native(path, cls.kind, "P-EAGLE")
        drafter = cls(EagleArch(**config["arch"]), config["mask_token_id"], config["max_draft_tokens"])
        drafter.load_state_dict(tensors)
        return drafter

    def mask_entry(self) -> torch.Tensor:
        """(H,) the hidden input of every mask slot: fc(mask_hidden), as vLLM computes it at load time."""
        return self.fuse(self.mask_hidden)

    def forward(self, features, input_ids, attention_mask, anchors, num_masks: int):
        """Training entry point (what accelerate wraps): see parallel_logits."""
        return self.parallel_logits(features, input_ids, attention_mask, anchors, num_masks)

    def parallel_logits(
        self,
        features: torch.Tensor,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        anchors: torch.Tensor,
        num_masks: int,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Every real entry and num_masks mask slots after each anchor, in one forward.

        Args:
            features: (B, T, F) target hidden states at layer_ids, concatenated.
            input_ids, attention_mask: (B, T).
            anchors: (B, A) positions t; anchor t's mask i (1…num_masks) sits at position t+i.
        Returns:
            real (B, T, D): entry t predicts token t+2; masks (B, A, num_masks, D): mask i of
            anchor t predicts token t+i+2.
        """
        B, T, _ = features.shape
        A, M = anchors.shape[1], num_masks
        tokens = torch.cat(
            [F.pad(input_ids[:, 1:], (0, 1)), input_ids.new_full((B, A * M), self.mask_token_id)], 1
        )  # (B, T + A·M): token t+1 for real entries (0 past the end), the mask id for masks
        hidden = torch.cat([self.fuse(features), self.mask_entry().expand(B, A * M, -1)], 1)
        steps = torch.arange(1, M + 1, device=anchors.device)
        positions = torch.cat(
            [torch.arange(T, device=anchors.device).expand(B, T), (anchors[:, :, None] + steps).reshape(B, A * M)], 1
        )
        mask = parallel_attention_mask(attention_mask.bool(), anchors, M)
        layer = self.layers[0]
        x, residual = layer.attention_input(self.embed_tokens(tokens), hidden)
        q, k, v = layer.self_attn.project(x, positions)
        logits = self.logits(layer.finish(layer.self_attn.attend(q, k, v, mask[:, None]), residual))
        return logits[:, :T], logits[:, T:].reshape(B, A, M, logits.shape[-1])


def parallel_attention_mask(key_valid: torch.Tensor, anchors: torch.Tensor, num_masks: int) -> torch.Tensor:
    """(B, N, N) bool over [T real entries ; A·M mask entries], N = T + A·M.

    Real entries see real entries ≤ themselves (causal); mask i of anchor t sees real entries ≤ t
    and masks 1…i of the same anchor, as the bonus slot and the masks see each other in vLLM's
    block. Padding entries (key_valid False) are seen by nobody.
    """
    B, T = key_valid.shape
    A, M = anchors.shape[1], num_masks
    t = torch.arange(T, device=key_valid.device)
    real = (t[:, None] >= t[None, :])[None] & key_valid[:, None, :]  # (B, T, T)
    mask_real = (t[None, None, :] <= anchors[:, :, None]) & key_valid[:, None, :]  # (B, A, T)
    mask_real = mask_real[:, :, None, :].expand(B, A, M, T).reshape(B, A * M, T)
    own = torch.eye(A, dtype=torch.bool, device=key_valid.device)[:, None, :, None]  # (A, 1, A, 1)
    earlier = torch.ones(M, M, dtype=torch.bool, device=key_valid.device).tril()[None, :, None, :]  # (1, M, 1, M)
    mask_mask = (own & earlier).reshape(A * M, A * M)[None].expand(B, -1, -1)
    top = torch.cat([real, real.new_zeros(B, T, A * M)], -1)
    return torch.cat([top, torch.cat([mask_real, mask_mask], -1)], 1)
