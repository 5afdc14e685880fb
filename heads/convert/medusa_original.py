"""Medusa heads saved by FasterDecoding/Medusa, converted to drafthub's (= vLLM's) Medusa format.

The original code saves three layouts, all computing head h as lm_head_h(ResBlock^K(x)) with
ResBlock(x) = x + SiLU(W x + b) — the math of heads/medusa.py, so conversion is a rename:
- Medusa-1: config.json with `medusa_num_heads`/`medusa_num_layers` only, tensors in
  `medusa_lm_head.safetensors` (or the 2023 `medusa_lm_head.pt`, read with weights_only=True):
  `{h}.{l}.linear.weight|bias` [H, H]/[H] and `{h}.{K}.weight` [V, H], the head's own lm_head;
- "medusa2" head-only (`"version": "2"`): the same without `{h}.{K}.weight`: every head reads
  the target's lm_head, which the converter copies into each head (as drafthub's fresh heads do);
- Medusa-2 full models: a fine-tuned base model whose safetensors also hold `medusa_head.`-prefixed
  heads; those heads only fit that fine-tuned model, which must then be the target.
Sizes come from the tensors, not the config (released configs miscount the heads).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Optional

import torch
from safetensors import safe_open
from safetensors.torch import load_file

from heads.errors import HeadsError
from heads.medusa import MedusaHeads

ORIGINAL_FILES = ("medusa_lm_head.safetensors", "medusa_lm_head.pt")
PREFIX = "medusa_head."
BLOCK = re.compile(r"^(\d+)\.(\d+)\.linear\.(weight|bias)$")
LM_HEAD = re.compile(r"^(\d+)\.(\d+)\.weight$")


def is_original_medusa(config: dict) -> bool:
    """config.json of a FasterDecoding/Medusa checkpoint (any layout), not a vLLM-format one."""
    return "medusa_num_heads" in config and config.get("model_type") != "medusa"


def _original_tensors(src: Path) -> dict[str, torch.Tensor]:
    if (src / ORIGINAL_FILES[0]).exists():
        return load_file(str(src / ORIGINAL_FILES[0]))
    if (src / ORIGINAL_FILES[1]).exists():
        return torch.load(src / ORIGINAL_FILES[1], map_location="cpu", weights_only=True)  # tensors only, no code
    heads = {}
    for file in sorted(src.glob("*.safetensors")):  # a Medusa-2 full model: the heads beside the fine-tuned base
        with safe_open(str(file), "pt") as f:
            heads |= {k[len(PREFIX) :]: f.get_tensor(k) for k in f.keys() if k.startswith(PREFIX)}
    if not heads:
        raise HeadsError(f"{src} has no {' or '.join(ORIGINAL_FILES)} and no {PREFIX}* tensors: no Medusa heads found")
    return heads


def convert_original_medusa(src: str | Path, target_lm_head: Optional[torch.Tensor] = None) -> MedusaHeads:
    """The heads in `src` as MedusaHeads (fp32), ready for save_pretrained.

    Args:
        target_lm_head: (V, H) the target's lm_head weight; needed by the head-only layout, whose heads
            share it, and checked against the heads' own sizes otherwise.
    """
    src = Path(src)
    tensors = _original_tensors(src)
    blocks, lm_heads = {}, {}
    for name, tensor in tensors.items():
        if m := BLOCK.match(name):
            blocks[(int(m[1]), int(m[2]), m[3])] = tensor
        elif m := LM_HEAD.match(name):
            lm_heads[int(m[1])] = (int(m[2]), tensor)
        else:
            raise HeadsError(f"{src}: tensor {name!r} is not in FasterDecoding/Medusa's layout")
    num_heads = 1 + max([h for h, _, _ in blocks] + list(lm_heads), default=-1)
    num_layers = 1 + max((layer for _, layer, _ in blocks), default=-1)
    expected = {(h, layer, p) for h in range(num_heads) for layer in range(num_layers) for p in ("weight", "bias")}
    if num_heads == 0 or set(blocks) != expected:
        raise HeadsError(f"{src}: the heads' residual blocks are incomplete (expected {num_heads}×{num_layers})")
    hidden_size = blocks[(0, 0, "weight")].shape[0]
    if lm_heads:
        if sorted(lm_heads) != list(range(num_heads)) or {k for k, _ in lm_heads.values()} != {num_layers}:
            raise HeadsError(f"{src}: expected one vocabulary layer {{h}}.{num_layers}.weight per head")
        vocab_size = lm_heads[0][1].shape[0]
    elif target_lm_head is None:
        raise HeadsError(
            f"{src} holds head-only Medusa-2 heads that share the target's lm_head; pass the target to copy it from"
        )
    else:
        vocab_size = target_lm_head.shape[0]
    if target_lm_head is not None and tuple(target_lm_head.shape) != (vocab_size, hidden_size):
        raise HeadsError(
            f"{src}: heads of width {hidden_size} and vocabulary {vocab_size} do not fit a target whose lm_head is "
            f"{tuple(target_lm_head.shape)}; pass the target they were trained on"
        )
    config = json.loads((src / "config.json").read_text())
    if config.get("medusa_num_heads") not in (None, num_heads):
        print(f"note: {src}/config.json says {config['medusa_num_heads']} heads; the weights hold {num_heads}")
    heads = MedusaHeads(hidden_size, vocab_size, num_heads, num_layers)
    state = {f"blocks.{h}.layers.{layer}.{p}": t.float() for (h, layer, p), t in blocks.items()}
    for h in range(num_heads):
        state[f"lm_heads.{h}.weight"] = (lm_heads[h][1] if lm_heads else target_lm_head).float()
    heads.load_state_dict(state, strict=True)
    return heads
