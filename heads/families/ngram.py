"""Prompt lookup (n-gram): drafts the tokens that followed the longest recent match in the context.
Training-free: its export is settings only."""

from __future__ import annotations

from heads.config import NgramConfig
from heads.families.base import ExportJob, Family, settings_described
from heads.formats import llamacpp, transformers, vllm
from heads.ngram import NgramDrafter

VLLM_KEYS = ("prompt_lookup_min", "prompt_lookup_max")
# llama.cpp's nearest rule: one n-gram size (ours: the longest of min..max), its latest match (ours: the earliest)
LLAMACPP_RULE = (
    "llama.cpp's ngram-simple matches only the last prompt_lookup_min tokens and drafts from their latest "
    "occurrence; drafthub's (and vLLM's) n-gram tries prompt_lookup_max down to prompt_lookup_min tokens and drafts "
    "from the earliest occurrence"
)


def _llamacpp_flags(settings: dict, gamma: int) -> list[str]:
    n = str(settings.get("prompt_lookup_min", 1))
    return ["--spec-ngram-simple-size-n", n, "--spec-ngram-simple-size-m", str(gamma)]


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
        llamacpp.consumer("ngram-simple", model=False, extra=_llamacpp_flags, rule_difference=LLAMACPP_RULE),
        transformers.PROMPT_LOOKUP,
    ),
    about=lambda provenance: "Prompt lookup needs no weights: these are settings (`config.json`).",
    describe=settings_described,
    check=NgramDrafter.from_config,
)
