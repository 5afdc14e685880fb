"""Datasets derived from finished ones without regenerating: the parts of a split distillation merged into one,
and the first N samples of a larger dataset (nested subsets for the data-scaling benchmark)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from distill.config import DataConfig, TargetConfig
from distill.errors import DistillError
from distill.prompts.chat import tokenizer_hash
from distill.stage.manifest import PART, config_hash, read_manifest, write_manifest
from distill.stage.shards import ShardWriter, load_distilled
from distill.targets.load import load_tokenizer


def merge_parts(parts: list[str | Path], out_dir: str | Path, target: TargetConfig, data: DataConfig) -> dict:
    """One dataset and one manifest in `out_dir` from the parts of a split distillation — what one job writes.

    Every part must be complete and made with these settings (data.num_shards and data.shard_index aside);
    the shards are copied (a rerun skips those already there), the parts are left as they are.
    """
    digest = config_hash(target, data)
    infos = []
    for part in map(Path, parts):
        info = json.loads((part / PART).read_text()) if (part / PART).exists() else None
        if info is None:
            raise DistillError(f"{part} holds no finished part ({PART}); run or finish its job first")
        if info["config_hash"] != digest:
            raise DistillError(f"{part} was distilled with other settings; merge with the settings its jobs used")
        infos.append((part, info))
    indices = sorted(info["index"] for _, info in infos)
    count = infos[0][1]["of"]
    if indices != list(range(count)):
        raise DistillError(f"the parts are jobs {indices} of {count}; merge every job 0…{count - 1} exactly once")
    tokenizer = load_tokenizer(target)
    writer = ShardWriter(Path(out_dir), {"config_hash": digest, "tokenizer": tokenizer_hash(tokenizer)})
    for part, info in infos:
        for i in info["shards"]:
            if not writer.done(i):
                writer.copy(i, ShardWriter.path_in(part, i))
    first = infos[0][1]
    totals = {"num_shards": first["total_shards"], "dropped": first["dropped"], "heldout": first["heldout"]}
    totals["first_source"] = first.get("first_source_samples")
    seconds = sum(info["seconds"] for _, info in infos)
    return write_manifest(out_dir, target, data, tokenizer, digest=digest, seconds=seconds, **totals)


def first_samples(source_dir: str | Path, out_dir: str | Path, target: TargetConfig, data: DataConfig) -> dict:
    """The dataset of `data` made from the first data.max_prompts samples of a larger one, without regenerating.

    The source must have been distilled with the same settings but a larger max_prompts: prompts
    are taken in file order and shards answer them in order, so its first N samples are what a run
    with max_prompts=N would have produced — nested subsets for the data-scaling benchmark.
    """
    source = read_manifest(source_dir)
    count = source["counts"]["samples"] if source else 0
    asked = source["prompts"].get("max_prompts", count) if source else 0  # prompts dropped as too long aside
    if not source or source["config_hash"] != config_hash(target, replace(data, max_prompts=asked)):
        raise DistillError(f"{source_dir} was not distilled with these settings; distil it with max_prompts ≥ N first")
    if not 0 < data.max_prompts <= count:
        raise DistillError(f"data.max_prompts={data.max_prompts} must be in 1…{count}, the samples {source_dir} holds")
    rows = load_distilled(source_dir).select(range(data.max_prompts))
    tokenizer = load_tokenizer(target)
    writer = ShardWriter(
        Path(out_dir), {"config_hash": config_hash(target, data), "tokenizer": tokenizer_hash(tokenizer)}
    )
    shards = range(0, data.max_prompts, data.shard_size)
    for i, first in enumerate(shards):
        if not writer.done(i):
            writer.write(i, rows.select(range(first, min(first + data.shard_size, data.max_prompts))).to_dict())
    digest = config_hash(target, data)
    dropped, heldout = source["prompts"]["dropped"], source["prompts"]["heldout"]["positions"]
    return write_manifest(
        out_dir,
        target,
        data,
        tokenizer,
        digest=digest,
        num_shards=len(shards),
        dropped=dropped,
        heldout=heldout,
        seconds=0.0,
    )
