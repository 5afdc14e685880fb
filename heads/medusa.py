"""Medusa heads (Cai et al. 2024): extra decoding heads on a frozen target's last hidden state.

Head k (0-based) maps the target's final normed hidden state at position t — the vector the
target's own lm_head reads to predict token t+1 — to logits for token t+k+2. Each head is
`num_layers` residual blocks x + SiLU(Wx + b) followed by a linear layer to the vocabulary.
W and b start at zero, so a fresh block is the identity, and each head's vocabulary layer
starts as a copy of the target's lm_head: a fresh head k predicts token t+k+2 with the
target's distribution for token t+1.

The native checkpoint is vLLM's Medusa format, so the directory vLLM serves is the one we
load back: config.json (`model_type: medusa`, `num_heads`, `num_hidden_layers`,
`hidden_size`, `vocab_size`, `medusa_fc_bias: true`) and model.safetensors with
`blocks.{h}.layers.{l}.weight`/`.bias` [H, H]/[H] and `lm_heads.{h}.weight` [V, H]. The token
tree built from measured head accuracy travels in `medusa_tree.json` (vLLM ignores it).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional, Sequence

import torch
from safetensors.torch import load_file
from torch import nn

from heads.config import MedusaConfig
from heads.errors import HeadsError
from heads.medusa_tree import tree_parents
from heads.native import save_module

CONFIG = "config.json"
WEIGHTS = "model.safetensors"
TREE = "medusa_tree.json"


class ResidualBlock(nn.Module):
    """`num_layers` times x ← x + SiLU(W x + b); identity while W and b are zero."""

    def __init__(self, hidden_size: int, num_layers: int):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(hidden_size, hidden_size) for _ in range(num_layers))
        self.act = nn.SiLU()
        for layer in self.layers:
            nn.init.zeros_(layer.weight)
            nn.init.zeros_(layer.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = x + self.act(layer(x))
        return x


class MedusaHeads(nn.Module):
    kind = "medusa"
    target_signals = ("last_hidden_state",)  # the final normed hidden state the target's lm_head reads

    def __init__(self, hidden_size: int, vocab_size: int, num_heads: int = 4, num_layers: int = 1):
        super().__init__()
        self.hidden_size, self.vocab_size, self.num_heads, self.num_layers = (
            hidden_size,
            vocab_size,
            num_heads,
            num_layers,
        )
        self.blocks = nn.ModuleList(ResidualBlock(hidden_size, num_layers) for _ in range(num_heads))
        self.lm_heads = nn.ModuleList(nn.Linear(hidden_size, vocab_size, bias=False) for _ in range(num_heads))
        # Token tree (paths of per-head candidate ranks) and the held-out accuracy it was built
        # from; set by calibration, saved with the checkpoint.
        self.tree: Optional[list[tuple[int, ...]]] = None
        self.calibration: Optional[dict] = None

    @classmethod
    def from_target(cls, cfg: MedusaConfig, target) -> "MedusaHeads":
        """Fresh heads for `target` (any HF causal LM): identity blocks, lm_heads copied from the target's."""
        lm_head = target.get_output_embeddings()
        if lm_head is None or getattr(lm_head, "bias", None) is not None:
            raise HeadsError(
                "Medusa needs a target whose output layer is a bias-free linear lm_head (LLaMA-style); "
                "this target's isn't"
            )
        vocab_size, hidden_size = lm_head.weight.shape
        heads = cls(hidden_size, vocab_size, cfg.num_heads, cfg.num_layers)
        with torch.no_grad():
            for head in heads.lm_heads:
                head.weight.copy_(lm_head.weight.float())
        return heads

    def forward(self, hidden: torch.Tensor | Sequence[torch.Tensor]) -> list[torch.Tensor]:
        """Logits of every head.

        Args:
            hidden: (..., H) final hidden states, read by every head; or a sequence of num_heads
                tensors (N_k, H), head k reading its own (training picks per-head positions).
        Returns:
            num_heads logits tensors (..., V): head k's prediction for the token k+2 ahead.
        """
        inputs = [hidden] * self.num_heads if isinstance(hidden, torch.Tensor) else list(hidden)
        dtype = self.lm_heads[0].weight.dtype
        inputs = [x.to(dtype) for x in inputs]  # a bf16 target may feed fp32 heads
        return [lm_head(block(x)) for x, block, lm_head in zip(inputs, self.blocks, self.lm_heads)]

    def config_dict(self) -> dict:
        """vLLM's MedusaConfig fields. No other key may contain both "num" and "heads"/"layers":
        vLLM renames such keys to num_heads / num_hidden_layers when it reads the config."""
        return {
            "architectures": ["MedusaModel"],
            "model_type": "medusa",
            "num_heads": self.num_heads,
            "num_hidden_layers": self.num_layers,
            "hidden_size": self.hidden_size,
            "vocab_size": self.vocab_size,
            "medusa_fc_bias": True,  # without it vLLM builds bias-free blocks and skips our biases silently
            "truncated_vocab_size": self.vocab_size,
        }

    def save_pretrained(self, path: str | Path) -> None:
        path = Path(path)
        save_module(path, self.config_dict(), self)
        if self.tree is not None:
            saved = {"paths": [list(p) for p in self.tree], **(self.calibration or {})}
            (path / TREE).write_text(
                "{\n" + ",\n".join(f"  {json.dumps(k)}: {json.dumps(v)}" for k, v in saved.items()) + "\n}\n"
            )  # a line per field

    @classmethod
    def from_pretrained(cls, path: str | Path) -> "MedusaHeads":
        """Load a vLLM-format Medusa directory (ours, or anyone's with biased blocks and one lm_head per head)."""
        path = Path(path)
        if not (path / CONFIG).exists() or not (path / WEIGHTS).exists():
            raise HeadsError(f"{path} is not a Medusa checkpoint: it needs {CONFIG} and {WEIGHTS}")
        config = _vllm_field_names(json.loads((path / CONFIG).read_text()))
        if config.get("model_type") != "medusa":
            raise HeadsError(f"{path}/{CONFIG} has model_type={config.get('model_type')!r}, not 'medusa'")
        missing_keys = [k for k in ("hidden_size", "vocab_size", "num_heads", "num_hidden_layers") if k not in config]
        if missing_keys:
            raise HeadsError(
                f"{path}/{CONFIG} lacks {missing_keys}; "
                "a Medusa config names num_heads, num_hidden_layers, hidden_size and vocab_size"
            )
        if (
            config.get("original_lm_head")
            or config.get("truncated_vocab_size", config["vocab_size"]) != config["vocab_size"]
        ):
            raise HeadsError(
                f"{path}: shared (original_lm_head) or truncated-vocabulary Medusa heads are not supported; "
                "export one full lm_head per head"
            )
        heads = cls(config["hidden_size"], config["vocab_size"], config["num_heads"], config["num_hidden_layers"])
        state = {k.removeprefix("medusa_heads."): v for k, v in load_file(str(path / WEIGHTS)).items()}
        expected = heads.state_dict()
        missing = sorted(set(expected) - set(state))
        wrong = sorted(k for k in expected if k in state and state[k].shape != expected[k].shape)
        if missing or wrong:
            raise HeadsError(
                f"{path}/{WEIGHTS} does not match its config: missing {missing[:4]}, wrong shape {wrong[:4]}"
            )
        heads.load_state_dict({k: state[k] for k in expected})
        if (path / TREE).exists():
            saved = json.loads((path / TREE).read_text())
            try:
                heads.tree = [tuple(p) for p in saved.pop("paths")]
                tree_parents(heads.tree)
            except (KeyError, TypeError, ValueError) as e:
                raise HeadsError(
                    f"{path}/{TREE} is not a token tree ({e}); delete it or rebuild it by re-running the train stage"
                ) from None
            if max(map(len, heads.tree), default=0) > heads.num_heads:
                raise HeadsError(f"{path}/{TREE} is deeper than the {heads.num_heads} heads")
            heads.calibration = saved
        return heads


def _vllm_field_names(config: dict) -> dict:
    """Config keys as vLLM reads them: any key with "num" and "heads" is num_heads,
    "num" and "layers" num_hidden_layers."""
    out = {}
    for key, value in config.items():
        if "num" in key and "heads" in key:
            key = "num_heads"
        elif "num" in key and "layers" in key:
            key = "num_hidden_layers"
        out[key] = value
    return out


def check_medusa_settings(cfg: MedusaConfig) -> None:
    """Settings that would otherwise fail only after training (HeadsError naming the first bad one)."""
    for key in ("num_heads", "num_layers", "tree_nodes", "tree_topk", "holdout_samples"):
        if getattr(cfg, key) < 1:
            why = ": the token tree is built from held-out accuracy" if key == "holdout_samples" else ""
            raise HeadsError(f"drafter.{key}={getattr(cfg, key)} must be ≥ 1{why}")
