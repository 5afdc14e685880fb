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

from pathlib import Path

from heads.config import DFlashConfig
from heads.dflash import DFlashArch, DFlashDrafter, check_dflash_settings, check_dflash_target
from heads.errors import HeadsError
from heads.families.base import ExportJob, Family, read_config
from heads.families.block import (
    CONFIG,
    arch_fields,
    load_tensors,
    most_drafts_text,
    qwen3_fields,
    read_block,
    serving_gamma,
    write_block,
)
from heads.formats import llamacpp, vllm
from heads.formats.dflash_vllm_cpu import served_patch

ARCHITECTURE = "DFlashDraftModel"


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


def write_dflash(drafter: DFlashDrafter, out: Path) -> None:
    """Write the export of `drafter` into the (empty) directory `out`."""
    write_block(out, dflash_config(drafter.arch), drafter, anchor_first=DFlashArch.anchor_first)


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


def load_dflash(path, target=None) -> DFlashDrafter:
    """Read an export (linted; every tensor name and shape checked); with `target`, ready to draft."""
    config, tensors = read_block(path, "DFlash", anchor_first=DFlashArch.anchor_first)
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


def _about(provenance: dict) -> str:
    settings = provenance.get("drafter_config") or {}
    block = settings.get("block_size")
    return f"""A DFlash drafter proposes a whole block in one forward: after the target's newest token it reads
mask slots (mask token id {settings.get("mask_token_id")}), attending to the target's hidden states at layers
{settings.get("layer_ids")} (vLLM's `target_layer_ids` in `config.json` are those minus one). The target's
embeddings and lm_head are shared, so none ships here. It was trained for blocks of {block} tokens:
`num_speculative_tokens` up to {most_drafts_text(block, DFlashArch.anchor_first)}."""


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
    serving_gamma=serving_gamma(DFlashArch.anchor_first),
)
