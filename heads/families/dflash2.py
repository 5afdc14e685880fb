"""DFlash2: DFlash with block convolutions and a candidate selector. Its export is the format vLLM 0.32 serves as
`method: dflash` with architecture DFlash2DraftModel (V2 GPU runner only), and llama.cpp converts and serves
under `--spec-type draft-dflash` (its DFlash graph runs the convolutions and the selector's walk).

config.json is DFlash's (heads/families/dflash.py: Qwen3 shape, `dflash_config.mask_token_id`,
`dflash_config.target_layer_ids` = our ids − 1, `eagle_aux_hidden_state_layer_ids`) with DFlash2's keys in
`dflash_config`: `conv_kernel_size`, `conv_group_size`, `selector_rank`, `selector_top_k` (vLLM reads each
with int(...), no default), `input_embedding_scale: 1.0`, `output_multiplier: 1.0` and
`sample_from_anchor: false` (the fill-in layout; vLLM's DFlash speculator refuses true), written explicitly.
Tensors: DFlash's, plus layers.{i}.{attention,mlp}_conv.{base_kernel, kernel_projection.weight} and
candidate_selector.{predecessor_codebook, successor_codebook, hidden_projection.weight}. The draft vocabulary
is the target's (vLLM applies no d2t to the selector's candidates).
"""

from __future__ import annotations

from pathlib import Path

from heads.config import DFlash2Config
from heads.dflash2 import DFlash2Arch, DFlash2Drafter, check_dflash2_settings, check_dflash2_target
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
from heads.formats.gpu_runner import needs_vllm_gpu_runner

ARCHITECTURE = "DFlash2DraftModel"
SHAPE_KEYS = ("conv_kernel_size", "conv_group_size", "selector_rank", "selector_top_k")


def dflash2_config(arch: DFlash2Arch) -> dict:
    """The export's config.json."""
    return {
        "architectures": [ARCHITECTURE],
        **qwen3_fields(arch),
        "dflash_config": {
            "mask_token_id": arch.mask_token_id,
            "target_layer_ids": [i - 1 for i in arch.layer_ids],
            **{key: getattr(arch, key) for key in SHAPE_KEYS},
            "input_embedding_scale": 1.0,
            "output_multiplier": 1.0,
            "sample_from_anchor": False,
        },
    }


def write_dflash2(drafter: DFlash2Drafter, out: Path) -> None:
    write_block(out, dflash2_config(drafter.arch), drafter, anchor_first=DFlash2Arch.anchor_first)


def dflash2_problems(config: dict) -> list[str]:
    """DFlash2's own silent fields, beyond every block family's (heads/lint.py lint_block)."""
    dflash = config.get("dflash_config") or {}
    scales = {k: dflash.get(k, 1.0) for k in ("input_embedding_scale", "output_multiplier")}
    problems = [f"dflash_config.{k}={v}: drafthub's DFlash2 is trained with 1.0" for k, v in scales.items() if v != 1.0]
    if (dflash.get("final_logit_softcapping") or 0) > 0:
        problems.append("dflash_config.final_logit_softcapping is set: drafthub's DFlash2 is trained without it")
    return problems


def _arch(config: dict, path: Path) -> DFlash2Arch:
    dflash = config.get("dflash_config") or {}
    layer_ids = config.get("eagle_aux_hidden_state_layer_ids")
    if layer_ids is None and dflash.get("target_layer_ids") is not None:
        layer_ids = [i + 1 for i in dflash["target_layer_ids"]]
    missing = [key for key in ("mask_token_id", *SHAPE_KEYS) if dflash.get(key) is None]
    if config.get("architectures") != [ARCHITECTURE] or not layer_ids or missing:
        raise HeadsError(
            f"{path}/{CONFIG} is not a DFlash2 export (architectures [{ARCHITECTURE}], layer ids, dflash_config "
            f"with mask_token_id and {', '.join(SHAPE_KEYS)}; missing: {missing})"
        )
    return DFlash2Arch(
        **arch_fields(config, path, "DFlash2"),
        layer_ids=list(layer_ids),
        mask_token_id=dflash["mask_token_id"],
        **{key: int(dflash[key]) for key in SHAPE_KEYS},
    )


def load_dflash2(path, target=None) -> DFlash2Drafter:
    """Read an export (linted; every tensor name and shape checked); with `target`, ready to draft."""
    config, tensors = read_block(path, "DFlash2", anchor_first=DFlash2Arch.anchor_first, extra=dflash2_problems)
    drafter = DFlash2Drafter(_arch(config, Path(path)))
    load_tensors(Path(path), drafter, tensors)
    return drafter.share(target) if target is not None else drafter


def _write(job: ExportJob, out: Path) -> None:
    write_dflash2(DFlash2Drafter.from_pretrained(job.checkpoint), out)


def _describe(export_dir: Path, summary: dict) -> dict:
    config = read_config(export_dir)
    dflash = config["dflash_config"]
    return {
        "drafter_config": {
            "layer_ids": config["eagle_aux_hidden_state_layer_ids"],
            "block_size": config["block_size"],
            "mask_token_id": dflash["mask_token_id"],
            "num_hidden_layers": config["num_hidden_layers"],
            **{key: dflash[key] for key in SHAPE_KEYS},
        }
    }


def _about(provenance: dict) -> str:
    s = provenance.get("drafter_config") or {}
    block = s.get("block_size")
    return f"""A DFlash2 drafter proposes a whole block in one forward like DFlash (mask token id
{s.get("mask_token_id")}, the target's hidden states at layers {s.get("layer_ids")}; `dflash_config.target_layer_ids`
are those minus one), with a
{s.get("conv_kernel_size")}-tap convolution around each sublayer of the block, then walks each slot's top
{s.get("selector_top_k")} candidates left to right with a rank-{s.get("selector_rank")} transition score. Trained for
blocks of {block} tokens: `num_speculative_tokens` up to {most_drafts_text(block, DFlash2Arch.anchor_first)}.
vLLM 0.32 serves it (method `dflash`) only with its GPU model runner (V2)."""


FAMILY = Family(
    kind="dflash2",
    schema=DFlash2Config,
    signals="layer_ids",
    trainable=True,
    category="parallel",
    recognizes=lambda config: config.get("architectures") == [ARCHITECTURE],
    write=_write,
    load=load_dflash2,
    lint=load_dflash2,
    library="vllm",
    consumers=(
        vllm.consumer("dflash", missing=needs_vllm_gpu_runner("DFlash2")),
        llamacpp.consumer("draft-dflash", feature_drafter=DFlash2Drafter),
    ),
    about=_about,
    describe=_describe,
    check=check_dflash2_settings,
    check_target=check_dflash2_target,
    serving_gamma=serving_gamma(DFlash2Arch.anchor_first),
)
