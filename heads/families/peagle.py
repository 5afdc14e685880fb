"""P-EAGLE: an EAGLE-3 head drafting all its tokens in one forward (mask slots after the bonus slot).

Its export is the speculators format vLLM serves directly (`speculative_config={"model": DIR}`).

It is EAGLE-3's export (heads/formats/speculators.py) with `speculators_model_type: "peagle"`,
`speculators_config.algorithm: "peagle"`, `mask_token_id` and a `mask_hidden` tensor
[len(layer_ids)·target_hidden]. vLLM 0.32 maps "peagle" to method eagle3 with parallel drafting,
copies mask_token_id to pard_token (transformers_utils/configs/speculators/algos.py update_peagle;
base.py build_vllm_speculative_config), builds PeagleLlamaForCausalLM (registered as
llama_eagle3.Eagle3LlamaForCausalLM, which loads any tensor named mask_hidden into its buffer and
refuses to start without one). `max_draft_tokens` (K, the longest chain trained) is ours;
vLLM ignores it. No SGLang layout: SGLang has no P-EAGLE loader to target.
"""

from __future__ import annotations

from pathlib import Path

from heads.config import PEagleConfig
from heads.errors import HeadsError
from heads.families.base import ExportJob, Family, read_config
from heads.families.eagle3 import check_features
from heads.families.eagle3 import describe as describe_eagle3
from heads.families.eagle3 import details as eagle3_details
from heads.formats import vllm
from heads.formats.speculators import (
    CONFIG,
    arch_from_config,
    filled,
    read_checked,
    speculators_config,
    with_defaults,
    write_checked,
)
from heads.lint import lint_peagle
from heads.pard import check_mask_token
from heads.peagle import PEagleDrafter
from heads.target_features import default_eagle3_layers


def peagle_config(drafter: PEagleDrafter, verifier: dict, speculative_tokens: int) -> dict:
    config = speculators_config(drafter, verifier, speculative_tokens)
    config["architectures"] = ["PEagleSpeculator"]
    config["speculators_model_type"] = "peagle"
    config["speculators_config"]["algorithm"] = "peagle"
    return {**config, **drafter.native_settings()}  # mask_token_id (vLLM's pard_token), max_draft_tokens


def write_peagle(drafter: PEagleDrafter, out: Path, verifier: dict, speculative_tokens: int) -> None:
    """Write config.json + model.safetensors after the linter passes (HeadsError otherwise)."""
    write_checked(out, peagle_config(drafter, verifier, speculative_tokens), drafter, lint_peagle, "a P-EAGLE")


def load_peagle(path: str | Path) -> PEagleDrafter:
    """Read a P-EAGLE export back into our drafter (linted first)."""
    config, tensors = read_checked(path, lint_peagle, "a P-EAGLE")
    k = config.get("max_draft_tokens")
    if not isinstance(k, int) or k < 1:
        raise HeadsError(
            f"{path}/{CONFIG} has max_draft_tokens={k!r}; a P-EAGLE export states the K it was trained for"
        )
    arch = arch_from_config(config)
    return filled(PEagleDrafter(arch, config["mask_token_id"], k), with_defaults(arch, tensors, None, path), path)


def _write(job: ExportJob, out: Path) -> None:
    write_peagle(PEagleDrafter.from_pretrained(job.checkpoint), out, job.verifier, job.num_speculative_tokens)


def _describe(export_dir: Path, summary: dict) -> dict:
    described = describe_eagle3(export_dir, summary)
    config = read_config(export_dir)
    described["drafter_config"] |= {
        "mask_token_id": config["mask_token_id"],
        "max_draft_tokens": config["max_draft_tokens"],
    }
    return described


def _check(settings) -> None:
    check_features(settings)
    ids = settings.layer_ids
    if ids is not None and (len(ids) != 3 or list(ids) != sorted(set(ids))):
        raise HeadsError(
            f"drafter.layer_ids={list(ids)} must be 3 distinct ascending target layer ids "
            "(vLLM fuses the layers in layer order)"
        )
    if settings.max_draft_tokens < 2 or settings.anchors_per_sequence < 1 or settings.draft_vocab_size < 2:
        raise HeadsError(
            f"drafter.max_draft_tokens={settings.max_draft_tokens} must be ≥ 2 (the bonus slot and ≥ 1 mask), "
            f"drafter.anchors_per_sequence={settings.anchors_per_sequence} ≥ 1 and "
            f"drafter.draft_vocab_size={settings.draft_vocab_size} ≥ 2"
        )
    if settings.mask_token_id is not None and settings.mask_token_id < 0:
        raise HeadsError(f"drafter.mask_token_id={settings.mask_token_id} must be a token id ≥ 0 (or null: picked)")


def _check_target(settings, target_config) -> None:
    n = target_config.num_hidden_layers
    ids = list(settings.layer_ids) if settings.layer_ids is not None else default_eagle3_layers(n)
    if not all(0 <= i <= n for i in ids):
        raise HeadsError(
            f"drafter.layer_ids={ids} must lie in 0..{n} for this {n}-layer target"
            f"{'' if settings.layer_ids is not None else ' (the default [2, N//2, N−3]; set them explicitly)'}"
        )
    if settings.mask_token_id is not None:
        check_mask_token(settings.mask_token_id, target_config.vocab_size, "drafter.mask_token_id")


def _trained_gamma(gamma: int, provenance: dict) -> int:
    """At most K, the longest chain it was trained to draft in one forward."""
    k = (provenance.get("drafter_config") or {}).get("max_draft_tokens")
    return min(gamma, k) if isinstance(k, int) else gamma


def _about(provenance: dict) -> str:
    settings = provenance.get("drafter_config") or {}
    return f"""A P-EAGLE drafter is an EAGLE-3 head that proposes all its tokens in one forward: after the bonus
slot it reads mask slots (mask token id {settings.get("mask_token_id")}, hidden `mask_hidden`). vLLM serves
this directory as it is (speculators format; `speculators_model_type: peagle` turns on parallel drafting). It
was trained for up to {settings.get("max_draft_tokens")} drafts per forward; keep `num_speculative_tokens` at
or below that."""


FAMILY = Family(
    kind="peagle",
    schema=PEagleConfig,
    signals="layer_ids",
    trainable=True,
    category="parallel",
    recognizes=lambda config: config.get("speculators_model_type") == "peagle",
    write=_write,
    load=lambda path, target: load_peagle(path),
    lint=load_peagle,
    library="vllm",
    consumers=(vllm.consumer("eagle3", extra=lambda settings: {"parallel_drafting": True}),),
    about=_about,
    details=eagle3_details,
    describe=_describe,
    check=_check,
    check_target=_check_target,
    serving_gamma=_trained_gamma,
)
