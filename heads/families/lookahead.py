"""Lookahead decoding: Jacobi iterations grow an n-gram pool that drafts for the target. Training-free; no
serving engine has it, so drafthub's engine (and the reference implementation) run it."""

from __future__ import annotations

from heads.config import LookaheadConfig
from heads.families.base import ExportJob, Family, settings_described
from heads.lookahead import LookaheadDrafter


def _write(job: ExportJob, out) -> None:
    LookaheadDrafter.from_config(job.settings).save_pretrained(out)


def _about(provenance: dict) -> str:
    settings = provenance.get("drafter_config") or {}
    window, n, verified = (settings.get(k) for k in ("window_size", "ngram_size", "max_verify_ngrams"))
    return f"""Lookahead decoding needs no weights: these are settings (`config.json`: window {window}, n-gram
size {n}, {verified} verified n-grams per step).
vLLM and SGLang have no lookahead method, so serve it with drafthub's engine (below), or with the
LookaheadDecoding reference implementation (hao-ai-lab/LookaheadDecoding) and the same W, N, G."""


FAMILY = Family(
    kind="lookahead",
    schema=LookaheadConfig,
    signals="tokens",
    trainable=False,
    category="training-free",
    recognizes=lambda config: config.get("drafthub_kind") == "lookahead",
    write=_write,
    load=lambda path, target: LookaheadDrafter.from_pretrained(path),
    lint=LookaheadDrafter.from_pretrained,
    library="transformers",
    about=_about,
    describe=settings_described,
    check=LookaheadDrafter.from_config,
)
