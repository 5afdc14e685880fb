"""DFlash2 drafters: DFlash plus a grouped causal convolution around each sublayer of the block and a low-rank
top-k path selector.

The backbone, context keys/values and the fill-in layout are DFlash's (heads/dflash.py): block
[x_t, MASK × γ] at t … t + γ, mask slot i drafting the token at its own position. What DFlash2 adds:
- per layer, `attention_conv` around self-attention and `mlp_conv` around the MLP: a depthwise causal
  convolution of T taps along the block (never across blocks), whose per-row coefficient is
  base_kernel[side][tap][channel] + kernel_projection(sublayer input)[side][tap][channel // group_size];
  side 0 filters the sublayer's input, side 1 its output. Initialised as the identity (tap 0 = 1,
  projection 0), so training starts from DFlash;
- `candidate_selector`: each mask slot l keeps its lm_head top-k candidates; candidate c after a
  previous token p scores unary_l[c] + Σ_r pred[p][r] · hidden_projection(h_l)[r] · succ[c][r], and
  drafting walks left to right from the newest token, choosing the best-scoring candidate after the
  one chosen before (successor codebook zero at first: the walk starts as DFlash's argmax).

This is vLLM 0.32's `DFlash2DraftModel` (model_executor/models/qwen3_dflash2.py: DFlashGroupedConv,
DFlash2Qwen3DecoderLayer, CandidateSelector; the walk of v1/worker/gpu/spec_decode/dflash2/speculator.py).
heads/families/dflash2.py writes and reads that format. Module names are the export's tensor names.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F
from torch import nn

from heads.dflash import DFlashArch, DFlashDrafter, DFlashLayer, check_dflash_settings, check_dflash_target
from heads.errors import HeadsError


def check_dflash2_settings(settings) -> None:
    """DFlash's checks, then the convolution's and the selector's: HeadsError naming the first bad one."""
    check_dflash_settings(settings)
    if not 1 <= settings.conv_kernel_size <= settings.block_size:
        raise HeadsError(
            f"drafter.conv_kernel_size={settings.conv_kernel_size} must be in 1..block_size={settings.block_size}: "
            "the convolution runs inside one block"
        )
    if settings.conv_group_size < 1 or settings.selector_rank < 1 or settings.selector_top_k < 2:
        raise HeadsError(
            f"drafter.conv_group_size={settings.conv_group_size} and drafter.selector_rank={settings.selector_rank} "
            f"must be ≥ 1, drafter.selector_top_k={settings.selector_top_k} ≥ 2 (the candidates the walk chooses among)"
        )
    if settings.selector_weight < 0:
        raise HeadsError(
            f"drafter.selector_weight={settings.selector_weight} must be ≥ 0 (0: the selector is not trained)"
        )


def check_dflash2_target(settings, target_config) -> None:
    """DFlash's target checks, and the convolution's groups against the target's width (the drafter's)."""
    check_dflash_target(settings, target_config)
    check_dflash2_settings(settings)
    if target_config.hidden_size % settings.conv_group_size:
        raise HeadsError(
            f"drafter.conv_group_size={settings.conv_group_size} must divide the hidden size "
            f"{target_config.hidden_size} (vLLM refuses the export otherwise); use a divisor such as 16"
        )


@dataclass
class DFlash2Arch(DFlashArch):
    conv_kernel_size: int = 2
    conv_group_size: int = 16
    selector_rank: int = 64
    selector_top_k: int = 8

    @classmethod
    def for_target(cls, cfg, target_config, mask_token_id: int) -> "DFlash2Arch":
        check_dflash2_target(cfg, target_config)
        base = DFlashArch.for_target(cfg, target_config, mask_token_id)
        return cls(
            **asdict(base),
            conv_kernel_size=cfg.conv_kernel_size,
            conv_group_size=cfg.conv_group_size,
            selector_rank=cfg.selector_rank,
            selector_top_k=cfg.selector_top_k,
        )


def grouped_conv(x: torch.Tensor, delta: torch.Tensor, base: torch.Tensor, width: int, group_size: int):
    """The block convolution. x (B, m, H) = m // width blocks of `width` rows; delta (B, m, T, H/G) per-row
    group coefficients; base (T, H). Row j of a block: Σ_{τ ≤ j} (base[τ] + delta_j[τ]) · x_{j−τ}."""
    B, m, H = x.shape
    taps, groups = base.shape[0], H // group_size
    blocks = x.view(B, m // width, width, groups, group_size)
    coefficients = base.view(taps, groups, group_size) + delta.view(B, m // width, width, taps, groups, 1)
    out = coefficients[..., 0, :, :] * blocks
    for tap in range(1, min(taps, width)):
        shifted = F.pad(blocks, (0, 0, 0, 0, tap, 0))[:, :, :width]  # x_{j−τ}, zero before the block's start
        out = out + coefficients[..., tap, :, :] * shifted
    return out.reshape(B, m, H)


class GroupedConv(nn.Module):
    """One sublayer's convolution pair: side 0 filters its input, side 1 its output, both with coefficients
    projected from its input."""

    def __init__(self, arch: DFlash2Arch):
        super().__init__()
        H, T = arch.hidden_size, arch.conv_kernel_size
        self.taps, self.group_size = T, arch.conv_group_size
        base = torch.zeros(2, T, H)
        base[:, 0] = 1.0  # the identity: a fresh DFlash2 computes what DFlash does
        self.base_kernel = nn.Parameter(base)
        self.kernel_projection = nn.Linear(H, 2 * T * (H // arch.conv_group_size), bias=False)
        nn.init.zeros_(self.kernel_projection.weight)

    def coefficients(self, x: torch.Tensor) -> torch.Tensor:
        B, m, H = x.shape
        return self.kernel_projection(x).view(B, m, 2, self.taps, H // self.group_size)

    def filter(self, x: torch.Tensor, coefficients: torch.Tensor, side: int, width: int) -> torch.Tensor:
        return grouped_conv(x, coefficients[:, :, side], self.base_kernel[side].to(x.dtype), width, self.group_size)


class DFlash2Layer(DFlashLayer):
    def __init__(self, arch: DFlash2Arch):
        super().__init__(arch)
        self.attention_conv = GroupedConv(arch)
        self.mlp_conv = GroupedConv(arch)

    def forward(self, x, positions, context_k, context_v, mask, width: int) -> torch.Tensor:
        h = self.input_layernorm(x)
        c = self.attention_conv.coefficients(h)
        a = self.self_attn(self.attention_conv.filter(h, c, 0, width), positions, context_k, context_v, mask)
        x = x + self.attention_conv.filter(a, c, 1, width)
        h = self.post_attention_layernorm(x)
        c = self.mlp_conv.coefficients(h)
        return x + self.mlp_conv.filter(self.mlp(self.mlp_conv.filter(h, c, 0, width)), c, 1, width)


class CandidateSelector(nn.Module):
    def __init__(self, arch: DFlash2Arch):
        super().__init__()
        V, R = arch.vocab_size, arch.selector_rank
        self.predecessor_codebook = nn.Parameter(torch.randn(V, R) / R**0.5)
        self.successor_codebook = nn.Parameter(torch.zeros(V, R))  # no transition at first: the walk is argmax
        self.hidden_projection = nn.Linear(arch.hidden_size, R, bias=False)

    def transition(self, prev: torch.Tensor, hidden: torch.Tensor, candidates: torch.Tensor) -> torch.Tensor:
        """prev (…, P) previous tokens, hidden (…, H) the slot's, candidates (…, k) → (…, P, k) transition scores."""
        query = self.predecessor_codebook[prev] * self.hidden_projection(hidden)[..., None, :]  # (…, P, R)
        return torch.einsum("...pr,...cr->...pc", query, self.successor_codebook[candidates].to(query.dtype))


class DFlash2Drafter(DFlashDrafter):
    kind = "dflash2"
    arch_class = DFlash2Arch
    layer_class = DFlash2Layer

    def __init__(self, arch: DFlash2Arch):
        super().__init__(arch)
        self.candidate_selector = CandidateSelector(arch)

    @classmethod
    def from_target(cls, cfg, target, mask_token_id: int) -> "DFlash2Drafter":
        return cls(DFlash2Arch.for_target(cfg, target.config, mask_token_id)).share(target)

    def layer_inputs(self, tokens: torch.Tensor) -> dict:
        """The convolution's block width: training lays out whole blocks, drafting one block of 1 + γ ≤ block_size."""
        return {"width": min(tokens.shape[1], self.arch.block_size)}

    def candidates(self, hidden: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(…, H) slot hiddens → the lm_head's top-k (values (…, k), ids (…, k)), best first."""
        return self.head(hidden).topk(self.arch.selector_top_k, dim=-1)

    def forward(self, features, context_positions, tokens, positions, mask, prev, gold):
        """Training: the block's logits (B, m, V), and the selector's scores (B, m, k) over each slot's unary top-k
        after the true previous token prev (B, m), with the index of gold (B, m) among them (the true next token
        replaces the weakest candidate where the top-k misses it, as speculators trains it)."""
        hidden = self.block_hidden(tokens, positions, self.context_kv(features, context_positions), mask)
        logits = self.head(hidden)
        ids = logits.detach().topk(self.arch.selector_top_k, dim=-1).indices  # (B, m, k)
        found = ids == gold[..., None]
        ids[..., -1] = torch.where(found.any(-1), ids[..., -1], gold)
        target = (ids == gold[..., None]).float().argmax(-1)
        unary = logits.gather(-1, ids)
        scores = unary + self.candidate_selector.transition(prev[..., None], hidden, ids)[..., 0, :].to(unary.dtype)
        return logits, scores, target
