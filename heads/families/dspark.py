"""DSpark: DFlash's block backbone drafting anchor-first, with a Markov head and a confidence head. Its export
is the format vLLM 0.32 serves as `method: dspark` (architecture Qwen3DSparkModel) and llama.cpp converts
and serves as `--spec-type draft-dspark`.

config.json is a Qwen3 config (`model_type: qwen3`, the drafter's layer shape, the target's vocab_size)
with DSpark's fields at the top level, each written explicitly because every one of them is read
with a default that serves a wrong drafter silently (../shared/VLLM-DSPARK.md §1.10):
`sample_from_anchor: true` (this layout; speculators' parser defaults to false), `mask_token_id`,
`target_layer_ids` = our layer ids − 1 (DeepSpec's and llama.cpp's convention) beside
`eagle_aux_hidden_state_layer_ids` = our ids (vLLM reads it first), `markov_rank`,
`markov_head_type: vanilla`, `draft_vocab_size` = vocab_size, `enable_confidence_head`,
`confidence_head_with_markov`, `logit_scale: 1.0`, `use_aux_hidden_state: true`, `is_neox_style: true`,
`layer_types` all `full_attention` (a bidirectional block). No `dflash_config`: its ids and mask id
would outrank the top-level ones in vLLM, and llama.cpp would read only it.
Tensors (no `model.` prefix, vLLM adds it): DFlash's, plus markov_head.markov_w{1,2}.weight and, with the
head, confidence_head.proj.{weight,bias}. No embed_tokens or lm_head: both engines share the target's
(llama.cpp would use a shipped embed_tokens as the output head too).
"""

from __future__ import annotations

from pathlib import Path

from heads.config import DSparkConfig
from heads.dflash import check_dflash_target
from heads.dspark import DSparkArch, DSparkDrafter, check_dspark_settings
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

ARCHITECTURE = "Qwen3DSparkModel"


def dspark_config(arch: DSparkArch) -> dict:
    """The export's config.json."""
    return {
        "architectures": [ARCHITECTURE],
        **qwen3_fields(arch),
        "is_neox_style": True,
        "layer_types": ["full_attention"] * arch.num_hidden_layers,
        "use_aux_hidden_state": True,
        "target_layer_ids": [i - 1 for i in arch.layer_ids],
        "mask_token_id": arch.mask_token_id,
        "sample_from_anchor": True,
        "markov_rank": arch.markov_rank,
        "markov_head_type": "vanilla",
        "draft_vocab_size": arch.vocab_size,
        "enable_confidence_head": arch.confidence_head,
        "confidence_head_with_markov": arch.confidence_with_markov,
        "logit_scale": 1.0,
    }


def write_dspark(drafter: DSparkDrafter, out: Path) -> None:
    """Write the export of `drafter` into the (empty) directory `out`."""
    write_block(out, dspark_config(drafter.arch), drafter, anchor_first=DSparkArch.anchor_first)


def dspark_problems(config: dict) -> list[str]:
    """DSpark's own silent fields, beyond every block family's (heads/lint.py lint_block)."""
    problems = []
    if config.get("logit_scale", 1.0) != 1.0:
        problems.append(f"logit_scale={config['logit_scale']}: vLLM scales the logits and the Markov bias by it")
    if config.get("markov_head_type", "vanilla") != "vanilla":
        problems.append(f"markov_head_type={config['markov_head_type']!r}: vLLM's Qwen3 DSpark loads vanilla only")
    if config.get("draft_vocab_size", config.get("vocab_size")) != config.get("vocab_size"):
        problems.append("draft_vocab_size differs from vocab_size: drafthub's DSpark drafts the target's vocabulary")
    return problems


def _arch(config: dict, path: Path) -> DSparkArch:
    layer_ids = config.get("eagle_aux_hidden_state_layer_ids")
    if layer_ids is None and config.get("target_layer_ids") is not None:
        layer_ids = [i + 1 for i in config["target_layer_ids"]]
    if config.get("architectures") != [ARCHITECTURE] or not layer_ids or config.get("mask_token_id") is None:
        raise HeadsError(
            f"{path}/{CONFIG} is not a DSpark export (architectures [{ARCHITECTURE}], mask_token_id, layer ids)"
        )
    return DSparkArch(
        **arch_fields(config, path, "DSpark"),
        layer_ids=list(layer_ids),
        mask_token_id=config["mask_token_id"],
        markov_rank=config["markov_rank"],
        confidence_head=bool(config.get("enable_confidence_head", False)),
        confidence_with_markov=bool(config.get("confidence_head_with_markov", False)),
    )


def load_dspark(path, target=None) -> DSparkDrafter:
    """Read an export (linted; every tensor name and shape checked); with `target`, ready to draft."""
    config, tensors = read_block(path, "DSpark", anchor_first=DSparkArch.anchor_first, extra=dspark_problems)
    drafter = DSparkDrafter(_arch(config, Path(path)))
    load_tensors(Path(path), drafter, tensors)
    return drafter.share(target) if target is not None else drafter


def _write(job: ExportJob, out: Path) -> None:
    write_dspark(DSparkDrafter.from_pretrained(job.checkpoint), out)


def _describe(export_dir: Path, summary: dict) -> dict:
    config = read_config(export_dir)
    return {
        "drafter_config": {
            "layer_ids": config["eagle_aux_hidden_state_layer_ids"],
            "block_size": config["block_size"],
            "mask_token_id": config["mask_token_id"],
            "num_hidden_layers": config["num_hidden_layers"],
            "markov_rank": config["markov_rank"],
            "confidence_head": config["enable_confidence_head"],
        }
    }


def _about(provenance: dict) -> str:
    settings = provenance.get("drafter_config") or {}
    block = settings.get("block_size")
    confidence = (
        " Its confidence head estimates each draft's acceptance: llama.cpp's `--spec-draft-p-min P` (and drafthub's "
        "`eval.draft_confidence_min`) stops a block at the first draft estimated below P."
        if settings.get("confidence_head")
        else ""
    )
    return f"""A DSpark drafter proposes a whole block in one forward, anchor-first: after the target's newest token
every slot drafts the next position (mask token id {settings.get("mask_token_id")}), attending to the target's hidden
states at layers {settings.get("layer_ids")} (`target_layer_ids` in `config.json` are those minus one); a rank-
{settings.get("markov_rank")} Markov head then corrects each draft by the token before it, left to right. The
target's embeddings and lm_head are shared, so none ships here. Trained for blocks of {block} drafts:
`num_speculative_tokens` up to {most_drafts_text(block, DSparkArch.anchor_first)}.{confidence} vLLM 0.32 serves it only
with its GPU model runner (V2)."""


FAMILY = Family(
    kind="dspark",
    schema=DSparkConfig,
    signals="layer_ids",
    trainable=True,
    category="parallel",
    recognizes=lambda config: config.get("architectures") == [ARCHITECTURE],
    write=_write,
    load=load_dspark,
    lint=load_dspark,
    library="vllm",
    consumers=(
        vllm.consumer("dspark", missing=needs_vllm_gpu_runner("DSpark")),
        llamacpp.consumer("draft-dspark", feature_drafter=DSparkDrafter),
    ),
    about=_about,
    describe=_describe,
    check=check_dspark_settings,
    check_target=check_dflash_target,
    serving_gamma=serving_gamma(DSparkArch.anchor_first),
)
