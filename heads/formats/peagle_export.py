"""P-EAGLE in the speculators format vLLM serves directly (`speculative_config={"model": DIR}`).

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

from heads.errors import HeadsError
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
from heads.peagle import PEagleDrafter


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
