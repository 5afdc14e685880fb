"""DFlash: a block drafter over the target's fused features, one forward per block. Its export is the
format vLLM 0.32 serves (`method: dflash`, architecture DFlashDraftModel).

config.json is a Qwen3 config (`model_type: qwen3`, the drafter's layer shape, the target's
vocab_size) plus `dflash_config: {mask_token_id, target_layer_ids}` — vLLM's target_layer_ids are
our layer ids minus one (0-based decoder-layer outputs) — and the same ids in our convention as
top-level `eagle_aux_hidden_state_layer_ids`, which vLLM reads first. No `eagle_config` dict: in
vLLM's V1 runner one without layer ids would override the DFlash ones with None.
Tensors carry no `model.` prefix (vLLM adds it): layers.{i}.self_attn.{q,k,v,o}_proj,
layers.{i}.self_attn.{q,k}_norm, layers.{i}.mlp.{gate,up,down}_proj,
layers.{i}.{input,post_attention}_layernorm, fc, hidden_norm, norm. No embed_tokens or lm_head
(vLLM shares the target's) and no mask_hidden (vLLM refuses it). See VLLM-FORMATS.md §3.
"""

from __future__ import annotations

import json
from pathlib import Path

from safetensors.torch import load_file, save_file

from heads.config import DFlashConfig
from heads.dflash import DFlashArch, DFlashDrafter, check_dflash_settings, check_dflash_target
from heads.errors import HeadsError
from heads.families.base import ExportJob, Family, read_config
from heads.formats import llamacpp, vllm
from heads.formats.dflash_vllm_cpu import served_patch
from heads.lint import lint_block

CONFIG, WEIGHTS = "config.json", "model.safetensors"
ARCHITECTURE = "DFlashDraftModel"


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


def dflash_config(arch: DFlashArch) -> dict:
    """The export's config.json (block_size is not read by vLLM: serve with num_speculative_tokens = block_size − 1)."""
    return {
        "architectures": [ARCHITECTURE],
        **qwen3_fields(arch),
        "dflash_config": {
            "mask_token_id": arch.mask_token_id,
            "target_layer_ids": [i - 1 for i in arch.layer_ids],
        },
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


def write_dflash(drafter: DFlashDrafter, out: Path) -> None:
    """Write the export of `drafter` into the (empty) directory `out`."""
    write_block(out, dflash_config(drafter.arch), drafter, anchor_first=False)


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


def _arch(config: dict, path: Path) -> DFlashArch:
    dflash = config.get("dflash_config") or {}
    layer_ids = config.get("eagle_aux_hidden_state_layer_ids")
    if layer_ids is None and dflash.get("target_layer_ids") is not None:
        layer_ids = [i + 1 for i in dflash["target_layer_ids"]]
    if config.get("architectures") != [ARCHITECTURE] or not layer_ids or dflash.get("mask_token_id") is None:
        raise HeadsError(
            f"{path}/{CONFIG} is not a DFlash export (architectures [{ARCHITECTURE}], dflash_config with "
            "mask_token_id, layer ids)"
        )
    if dflash.get("target_layer_ids") is not None and [i + 1 for i in dflash["target_layer_ids"]] != list(layer_ids):
        raise HeadsError(
            f"{path}/{CONFIG}: dflash_config.target_layer_ids {dflash['target_layer_ids']} are not "
            f"eagle_aux_hidden_state_layer_ids {layer_ids} minus one"
        )
    return DFlashArch(
        **arch_fields(config, path, "DFlash"), layer_ids=list(layer_ids), mask_token_id=dflash["mask_token_id"]
    )


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


def load_dflash(path, target=None) -> DFlashDrafter:
    """Read an export (linted; every tensor name and shape checked); with `target`, ready to draft."""
    config, tensors = read_block(path, "DFlash", anchor_first=False)
    drafter = DFlashDrafter(_arch(config, Path(path)))
    load_tensors(Path(path), drafter, tensors)
    return drafter.share(target) if target is not None else drafter


def _write(job: ExportJob, out: Path) -> None:
    write_dflash(DFlashDrafter.from_pretrained(job.checkpoint), out)


def _describe(export_dir: Path, summary: dict) -> dict:
    config = read_config(export_dir)
    return {
        "drafter_config": {
            "layer_ids": config["eagle_aux_hidden_state_layer_ids"],
            "block_size": config["block_size"],
            "mask_token_id": config["dflash_config"]["mask_token_id"],
            "num_hidden_layers": config["num_hidden_layers"],
        }
    }


def block_gamma(gamma: int, provenance: dict) -> int:
    """At most block_size − 1: the drafts one trained block holds after the target's newest token."""
    block = (provenance.get("drafter_config") or {}).get("block_size")
    return min(gamma, block - 1) if isinstance(block, int) else gamma


def _about(provenance: dict) -> str:
    settings = provenance.get("drafter_config") or {}
    block = settings.get("block_size")
    return f"""A DFlash drafter proposes a whole block in one forward: after the target's newest token it reads
mask slots (mask token id {settings.get("mask_token_id")}), attending to the target's hidden states at layers
{settings.get("layer_ids")} (vLLM's `target_layer_ids` in `config.json` are those minus one). The target's
embeddings and lm_head are shared, so none ships here. It was trained for blocks of {block} tokens:
`num_speculative_tokens` up to {block - 1 if isinstance(block, int) else "block_size − 1"}."""


FAMILY = Family(
    kind="dflash",
    schema=DFlashConfig,
    signals="layer_ids",
    trainable=True,
    category="parallel",
    recognizes=lambda config: config.get("architectures") == [ARCHITECTURE],
    write=_write,
    load=load_dflash,  # (path, target): the target's embeddings and lm_head are shared
    lint=load_dflash,
    library="vllm",
    consumers=(
        vllm.consumer("dflash", patch=served_patch),
        llamacpp.consumer("draft-dflash", feature_drafter=DFlashDrafter),
    ),
    about=_about,
    describe=_describe,
    check=check_dflash_settings,
    check_target=check_dflash_target,
    serving_gamma=block_gamma,
)
