"""The block drafters' shared export (DFlash, DSpark, DFlash2): a Qwen3 config.json carrying the drafter's layer
shape and the target's vocabulary, one model.safetensors, both linted in the layout the family trained in
(`anchor_first`, heads/block.py), and the γ a card prints: at most the drafts one trained block holds."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable

from safetensors.torch import load_file, save_file

from heads.block import drafts_per_block
from heads.dflash import DFlashArch
from heads.errors import HeadsError
from heads.lint import lint_block

CONFIG, WEIGHTS = "config.json", "model.safetensors"


def qwen3_fields(arch: DFlashArch) -> dict:
    """The Qwen3 config every block family's export shares (the drafter's layer shape, the target's vocab)."""
    return {
        "model_type": "qwen3",
        "hidden_size": arch.hidden_size,
        "num_hidden_layers": arch.num_hidden_layers,
        "num_attention_heads": arch.num_attention_heads,
        "num_key_value_heads": arch.num_key_value_heads,
        "head_dim": arch.head_dim,
        "intermediate_size": arch.intermediate_size,
        "hidden_act": "silu",
        "rms_norm_eps": arch.rms_norm_eps,
        "rope_theta": arch.rope_theta,
        "rope_parameters": {"rope_type": "default", "rope_theta": arch.rope_theta},
        "max_position_embeddings": arch.max_position_embeddings,
        "vocab_size": arch.vocab_size,
        "attention_bias": False,
        "tie_word_embeddings": False,
        "use_sliding_window": False,
        "target_hidden_size": arch.target_hidden_size,
        "block_size": arch.block_size,
        "eagle_aux_hidden_state_layer_ids": list(arch.layer_ids),
    }


def write_block(out: Path, config: dict, drafter, *, anchor_first: bool) -> None:
    """config.json + model.safetensors of a block drafter, refused with the linter's first problem."""
    tensors = {k: v.detach().float().contiguous() for k, v in drafter.state_dict().items()}
    problems = lint_block(config, tensors, anchor_first=anchor_first)
    if problems:
        raise HeadsError(f"refusing to write a block drafter export that would not serve: {problems[0]}")
    out = Path(out)
    (out / CONFIG).write_text(json.dumps(config, indent=2))
    save_file(tensors, str(out / WEIGHTS), metadata={"format": "pt"})


def read_block(path, name: str, *, anchor_first: bool, extra=lambda config: []) -> tuple[dict, dict]:
    """(config, tensors) of a block drafter export the linter passes (extra: the family's own checks)."""
    path = Path(path)
    if not (path / CONFIG).is_file() or not (path / WEIGHTS).is_file():
        raise HeadsError(f"{path} is not a {name} export ({CONFIG} and {WEIGHTS})")
    config, tensors = json.loads((path / CONFIG).read_text()), load_file(str(path / WEIGHTS))
    problems = lint_block(config, tensors, anchor_first=anchor_first) + extra(config)
    if problems:
        raise HeadsError(f"{path} is not a usable {name} export: {problems[0]}")
    return config, tensors


def arch_fields(config: dict, path: Path, name: str) -> dict:
    """DFlashArch's fields from a block family's Qwen3 config.json (layer ids and mask id are the family's)."""
    rope = config.get("rope_parameters") or {}
    block = config.get("block_size", 8)
    if not isinstance(block, int) or block < 2:
        raise HeadsError(
            f"{path}/{CONFIG}: block_size={block!r}, but a {name} block is the anchor token and at least one draft "
            "slot (≥ 2, the block it was trained for); restore the exported value or re-export the drafter"
        )
    try:
        return dict(
            hidden_size=config["hidden_size"],
            num_attention_heads=config["num_attention_heads"],
            num_key_value_heads=config.get("num_key_value_heads") or config["num_attention_heads"],
            head_dim=config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"],
            intermediate_size=config["intermediate_size"],
            num_hidden_layers=config["num_hidden_layers"],
            vocab_size=config["vocab_size"],
            target_hidden_size=config.get("target_hidden_size") or config["hidden_size"],
            block_size=block,
            rms_norm_eps=config.get("rms_norm_eps", 1e-6),
            rope_theta=float(rope.get("rope_theta") or config.get("rope_theta") or 1e6),  # vLLM's default: 1e6
            max_position_embeddings=config.get("max_position_embeddings", 2048),
        )
    except KeyError as e:
        raise HeadsError(f"{path}/{CONFIG} lacks {e}, which a {name} export needs") from None


def load_tensors(path: Path, drafter, tensors: dict) -> None:
    """Fill `drafter` with the export's tensors, every name and shape checked against the config's."""
    expected = drafter.state_dict()
    missing, extra = sorted(set(expected) - set(tensors)), sorted(set(tensors) - set(expected))
    if missing or extra:
        raise HeadsError(f"{path}/{WEIGHTS}: missing tensors {missing[:4]}, unexpected {extra[:4]}")
    wrong = [k for k in expected if tensors[k].shape != expected[k].shape]
    if wrong:
        raise HeadsError(
            f"{path}/{WEIGHTS}: {wrong[0]} is {tuple(tensors[wrong[0]].shape)}, the config says "
            f"{tuple(expected[wrong[0]].shape)}"
        )
    drafter.load_state_dict(tensors)


def serving_gamma(anchor_first: bool) -> Callable[[int, dict], int]:
    """The card's γ for a block family: at most the drafts one trained block holds (its provenance's block_size)."""

    def gamma_of(gamma: int, provenance: dict) -> int:
        block = (provenance.get("drafter_config") or {}).get("block_size")
        return min(gamma, drafts_per_block(block, anchor_first)) if isinstance(block, int) else gamma

    return gamma_of


def most_drafts_text(block, anchor_first: bool) -> str:
    """`num_speculative_tokens` up to … in a card: the number where the block size is known."""
    return str(drafts_per_block(block, anchor_first)) if isinstance(block, int) else "the drafts one block holds"
