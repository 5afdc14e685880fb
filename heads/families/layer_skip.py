"""Layer skipping (self-speculation): the target without some decoder layers drafts for the whole target."""

from __future__ import annotations

from pathlib import Path

from heads.config import LayerSkipConfig
from heads.errors import HeadsError
from heads.families.base import Family, copy_with_tokenizer, is_causal_lm, read_config
from heads.formats import llamacpp, transformers, vllm
from heads.layer_skip import LAYER_SKIP_KEY, LayerSkipDrafter, check_skip_layers


def _describe(export_dir: Path, summary: dict) -> dict:
    record = read_config(export_dir)[LAYER_SKIP_KEY]
    return {"drafter_config": record, "layer_skip_search": summary.get("layer_skip_search")}


def _check(settings) -> None:
    if settings.num_speculative_tokens < 1 or settings.search_samples < 1 or settings.max_evaluations < 1:
        raise HeadsError(
            f"drafter.num_speculative_tokens={settings.num_speculative_tokens}, drafter.search_samples="
            f"{settings.search_samples} and drafter.max_evaluations={settings.max_evaluations} must all be ≥ 1"
        )
    if settings.fine_tune_steps < 0:
        raise HeadsError(f"drafter.fine_tune_steps={settings.fine_tune_steps} must be ≥ 0 (0 = no fine-tune)")


def _check_target(settings, target_config) -> None:
    if settings.skip_layers is not None:
        check_skip_layers(settings.skip_layers, target_config.num_hidden_layers)


def _details(provenance: dict) -> str:
    """Which target layers the drafter skips, and how they were chosen."""
    record = provenance.get("drafter_config") or {}
    search = provenance.get("layer_skip_search") or {}
    how = (
        f"chosen by a greedy search on held-out distilled samples in {search['search_seconds']:.0f} s "
        f"(predicted speed-up {search['predicted_speedup']:.2f}× at agreement {search['agreement']:.3f}, "
        f"cost ratio {search['cost_ratio']:.2f})"
        if search.get("search_seconds") is not None
        else "set by hand"
    )
    return f"""

## Layer skipping

This drafter is the target itself without decoder layers {record.get("skipped_layers")} of
{record.get("target_num_hidden_layers")} ({how}); embeddings, final norm and lm_head are the
target's. It is a plain causal LM: any draft-model speculative decoding loads it."""


FAMILY = Family(
    kind="layer_skip",
    schema=LayerSkipConfig,
    signals="tokens",
    trainable=True,  # its train stage is the skip search (+ an optional fine-tune)
    category="training-free",
    recognizes=lambda config: is_causal_lm(config) and LAYER_SKIP_KEY in config,
    write=copy_with_tokenizer,  # the native checkpoint already is the HF causal LM consumers load
    load=lambda path, target: LayerSkipDrafter.from_pretrained(path),
    lint=LayerSkipDrafter.from_pretrained,
    library="transformers",
    consumers=(vllm.consumer("draft_model"), llamacpp.consumer("draft-simple"), transformers.ASSISTANT),
    details=_details,
    describe=_describe,
    check=_check,
    check_target=_check_target,
)
