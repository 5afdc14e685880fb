"""Retrieval from the target's own answers: drafts from the longest match in the request or in a store of the
distilled answers. Training-free, built from the distillation: its export is settings plus that store."""

from __future__ import annotations

from pathlib import Path

from heads.config import RetrievalConfig
from heads.families.base import ExportJob, Family, read_config
from heads.formats import llamacpp
from heads.retrieval import RetrievalDrafter, write_lookup_cache


def _write(job: ExportJob, out: Path) -> None:
    RetrievalDrafter.from_config(job.settings, job.answers).save_pretrained(out)


def _lookup_cache(job: ExportJob, file: Path) -> None:
    write_lookup_cache(RetrievalDrafter.from_config(job.settings, job.answers).answers, file)


LLAMACPP_RULE = (
    "llama.cpp's ngram-cache drafts up to 8 tokens from 1–4-gram matches in the request and from the store's bigram "
    "counts, each with a count threshold, not the longest match in either: its τ is its own rule's"
)


def _describe(export_dir: Path, summary: dict) -> dict:
    config = read_config(export_dir)
    return {"drafter_config": {k: v for k, v in config.items() if k != "store"}, "store": config.get("store")}


def _about(provenance: dict) -> str:
    store = provenance.get("store") or {}
    return f"""This drafter has no weights: it drafts the continuation of the longest match of the context in the
request itself (prompt and output so far) or in `store.safetensors`, {store.get("answers", "the")} answers
({store.get("tokens", "?")} tokens) the target wrote during distillation (sha256 in `config.json`).
drafthub's engine serves it; llama.cpp's `llama-server --spec-type ngram-cache` serves the same store as its
static n-gram cache (`gguf/lookup-static.bin`) under its own drafting rule."""


def _details(provenance: dict) -> str:
    store = provenance.get("store") or {}
    return f"""

## The store

{store.get("answers")} distilled answers, {store.get("tokens")} tokens, `store.safetensors` sha256
`{store.get("sha256")}`: the target's own answers to the distillation requests, none of them an eval prompt's.
More answers draft more often: re-distil with a larger `data.max_prompts` and export again."""


FAMILY = Family(
    kind="retrieval",
    schema=RetrievalConfig,
    signals="tokens",
    trainable=False,
    category="training-free",
    recognizes=lambda config: config.get("drafthub_kind") == "retrieval",
    write=_write,
    load=lambda path, target: RetrievalDrafter.from_pretrained(path),
    lint=RetrievalDrafter.from_pretrained,
    library="drafthub",
    consumers=(
        llamacpp.consumer("ngram-cache", model=False, rule_difference=LLAMACPP_RULE, static_cache=_lookup_cache),
    ),
    about=_about,
    details=_details,
    describe=_describe,
    check=RetrievalDrafter.from_config,
    from_answers=True,
)
