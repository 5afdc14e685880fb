"""PARD: a draft LM trained to fill a block of mask tokens in one forward (parallel drafting)."""

from __future__ import annotations

from pathlib import Path

from heads.config import PardConfig
from heads.errors import HeadsError
from heads.families.base import Family, copy_with_tokenizer, is_causal_lm, read_config
from heads.formats import transformers, vllm
from heads.pard import MASK_KEY, PardDrafter, check_mask_token


def _check(settings) -> None:
    if settings.max_draft_tokens < 2 or settings.anchors_per_sequence < 1:
        raise HeadsError(
            f"drafter.max_draft_tokens={settings.max_draft_tokens} must be ≥ 2 (one forward drafts the bonus slot "
            f"and ≥ 1 mask) and drafter.anchors_per_sequence={settings.anchors_per_sequence} ≥ 1"
        )
    if settings.pard_token is not None and settings.pard_token < 0:
        raise HeadsError(f"drafter.pard_token={settings.pard_token} must be a token id ≥ 0 (or null: picked)")


def _check_target(settings, target_config) -> None:
    if settings.pard_token is not None:
        check_mask_token(settings.pard_token, target_config.vocab_size, "drafter.pard_token")


def _describe(export_dir: Path, summary: dict) -> dict:
    config = read_config(export_dir)
    return {"drafter_config": {"pard_token": config[MASK_KEY], "max_draft_tokens": config.get("max_draft_tokens")}}


def _about(provenance: dict) -> str:
    settings = provenance.get("drafter_config") or {}
    return f"""A PARD drafter proposes the whole block in one forward: after the target's bonus token it reads
copies of the mask token `pard_token` = {settings.get("pard_token")} (in `config.json`), one per further
draft. It was trained for blocks of up to {settings.get("max_draft_tokens")} tokens; keep
`num_speculative_tokens` at or below that. Without `parallel_drafting` vLLM runs it as an ordinary draft
model (one forward per token), and so does transformers' `assistant_model`."""


FAMILY = Family(
    kind="pard",
    schema=PardConfig,
    signals="tokens",
    trainable=True,
    category="parallel",
    recognizes=lambda config: is_causal_lm(config) and MASK_KEY in config,
    write=copy_with_tokenizer,  # the native checkpoint already is the HF directory vLLM loads
    load=lambda path, target: PardDrafter.from_pretrained(path),
    lint=PardDrafter.from_pretrained,
    library="transformers",
    consumers=(
        vllm.consumer("draft_model", extra=lambda settings: {"parallel_drafting": True}),
        transformers.ASSISTANT,
    ),
    about=_about,
    describe=_describe,
    check=_check,
    check_target=_check_target,
)
