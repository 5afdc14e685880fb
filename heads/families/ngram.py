"""Prompt lookup (n-gram): drafts the tokens that followed the longest recent match in the context.
Training-free: its export is settings only."""

from __future__ import annotations

from heads.config import NgramConfig
from heads.families.base import ExportJob, Family, settings_described
from heads.formats import transformers, vllm
from heads.ngram import NgramDrafter

VLLM_KEYS = ("prompt_lookup_min", "prompt_lookup_max")


def _write(job: ExportJob, out) -> None:
    NgramDrafter.from_config(job.settings).save_pretrained(out)


FAMILY = Family(
    kind="ngram",
    schema=NgramConfig,
    signals="tokens",
    trainable=False,
    category="training-free",
    recognizes=lambda config: config.get("drafthub_kind") == "ngram",
    write=_write,
    load=lambda path, target: NgramDrafter.from_pretrained(path),
    lint=NgramDrafter.from_pretrained,
    library="vllm",
    consumers=(
        vllm.consumer("ngram", model=False, extra=lambda settings: {k: settings.get(k) for k in VLLM_KEYS}),
        transformers.PROMPT_LOOKUP,
    ),
    about=lambda provenance: "Prompt lookup needs no weights: these are settings (`config.json`).",
    describe=settings_described,
    check=NgramDrafter.from_config,
)
