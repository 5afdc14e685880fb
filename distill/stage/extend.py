"""A larger dataset started from a smaller one: raising data.max_prompts distils only the new prompts.

Prompts are taken in file order and shard i is answered with seed i, so a run with more prompts writes the
smaller run's full shards again byte for byte. Copying them instead keeps the earlier answers (a continued
training run sees the same samples first) and saves their generation time.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from distill.config import DataConfig, TargetConfig
from distill.prompts.chat import tokenizer_hash
from distill.stage.manifest import config_hash, read_manifest
from distill.stage.shards import ShardWriter
from distill.targets.load import load_tokenizer


def extendable(data: DataConfig) -> str | None:
    """Why a larger data.max_prompts would not keep a smaller run's shards, or None. The prompts it adds must come
    after the others: Magpie's requests qualify (written batch by batch, each batch with its own seed, so more of
    them begin with the same ones); raw-text windows do not."""
    if data.source != "target":
        return f"data.source={data.source} cuts its rows by count, not prompt by prompt"
    return None


def seed_shards(source_dir: str | Path, out_dir: str | Path, target: TargetConfig, data: DataConfig) -> int:
    """Copy into out_dir the shards of `source_dir` that `data` would write identically; return the samples copied.

    source_dir must have been distilled with the same settings and a smaller data.max_prompts (else 0: nothing
    is copied). Only full shards of data.prompts' samples count: a partial shard would hold more rows in the
    larger run, and data.mix's samples come after data.prompts' (more of those moves them)."""
    source = read_manifest(source_dir)
    asked = source["prompts"].get("max_prompts") if source else None
    if not asked or (data.max_prompts and data.max_prompts <= asked) or extendable(data):
        return 0
    if source["config_hash"] != config_hash(target, replace(data, max_prompts=asked)):
        return 0
    fingerprint = {"config_hash": config_hash(target, data), "tokenizer": tokenizer_hash(load_tokenizer(target))}
    writer = ShardWriter(Path(out_dir), fingerprint)
    first = source["prompts"].get("first_source_samples")
    if first is None and data.mix:
        return 0  # a dataset distilled before the count was recorded: where data.mix's samples begin is unknown
    full = (source["counts"]["samples"] if first is None else first) // data.shard_size
    for i in range(full):
        if not writer.done(i):
            writer.copy(i, ShardWriter.path_in(Path(source_dir), i))
    return full * data.shard_size
