"""Offline target features: hidden states at given layer ids (plus the lm_head input) for every
token of a distillation dataset, in bf16 safetensors shards next to it.

Training then needs no target forward, only its lm_head. Shards are written to a temporary file
and renamed, so a killed run resumes from the last complete shard; the disk needed is computed
and printed before the first shard, and a disk without room is refused up front.

    features/<key>/manifest.json              layer ids, bytes per token, shard size, tokens
    features/<key>/shard-00000.safetensors    features_<row> (T, len(ids)·H), last_hidden_<row> (T, H)
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path
from typing import Callable

import torch
from safetensors import safe_open
from safetensors.torch import save_file
from tqdm.auto import tqdm

from distill.errors import DistillError
from distill.features.capture import final_hidden_states, layer_and_final_features
from heads.formats.staging import atomic_write_text

DTYPE = torch.bfloat16


def store_dir(data_dir: str | Path, layer_ids: list[int], target_name: str, source: str = "offline") -> Path:
    """features/<key>: one store per layer ids, target and source (offline: transformers; vllm)."""
    key_parts = [list(layer_ids), target_name] + ([] if source == "offline" else [source])
    key = hashlib.sha256(json.dumps(key_parts).encode()).hexdigest()[:12]
    return Path(data_dir) / "features" / key


def bytes_needed(num_tokens: int, num_layers: int, hidden_size: int) -> int:
    """bf16 features at num_layers ids (0 for EAGLE-1) plus the lm_head input, for every token."""
    return num_tokens * (num_layers + 1) * hidden_size * 2


@torch.no_grad()
def write_features(
    target,
    dataset,
    out: Path,
    layer_ids: list[int],
    *,
    batch_size: int = 8,
    shard_size: int = 64,
    free_bytes: int | None = None,
    save: bool = True,
) -> dict:
    """Write (or finish writing) the offline features of `dataset` (rows with input_ids) from a transformers
    target's forward; return the manifest.

    save=False computes the same forwards without writing: the other processes of a multi-process run
    call it alongside the main one, because a sharded target gathers its weights in every forward.
    """
    device = next(target.parameters()).device

    def compute(ids: list[list[int]]) -> list[tuple[torch.Tensor | None, torch.Tensor]]:
        out_rows = []
        for start in range(0, len(ids), batch_size):
            chunk = ids[start : start + batch_size]
            width = max(map(len, chunk))
            batch = torch.zeros(len(chunk), width, dtype=torch.long)
            mask = torch.zeros_like(batch)
            for j, x in enumerate(chunk):
                batch[j, : len(x)], mask[j, : len(x)] = torch.tensor(x), 1
            if layer_ids:
                feats, last = layer_and_final_features(target, batch.to(device), mask.to(device), layer_ids)
            else:
                feats, last = None, final_hidden_states(target, batch.to(device), mask.to(device))[0]
            out_rows += [
                (None if feats is None else feats[j, : len(x)], last[j, : len(x)]) for j, x in enumerate(chunk)
            ]
        return out_rows

    hidden = target.get_output_embeddings().in_features  # not .weight: a sharded weight holds a part
    return write_shards(
        compute, dataset, out, layer_ids, hidden, shard_size=shard_size, free_bytes=free_bytes, save=save
    )


def write_shards(
    compute: Callable[[list[list[int]]], list[tuple[torch.Tensor | None, torch.Tensor]]],
    dataset,
    out: Path,
    layer_ids: list[int],
    hidden: int,
    *,
    shard_size: int = 64,
    free_bytes: int | None = None,
    save: bool = True,
) -> dict:
    """The feature shards of `dataset`, each written once: `compute` maps a shard's token id lists to per row
    (features at layer_ids (T, len·H) or None when layer_ids is empty, lm_head input (T, H)).

    The disk needed is printed and checked before the first shard; finished shards are kept (resume).
    """
    lengths = [len(ids) for ids in dataset["input_ids"]]
    need = bytes_needed(sum(lengths), len(layer_ids), hidden)
    shards = [list(range(i, min(i + shard_size, len(lengths)))) for i in range(0, len(lengths), shard_size)]
    todo = [i for i, _ in enumerate(shards) if not _shard_path(out, i).exists()]
    remaining = sum(bytes_needed(sum(lengths[r] for r in shards[i]), len(layer_ids), hidden) for i in todo)
    existing = next(p for p in [out, *out.parents] if p.exists())  # the check runs before anything is created
    free = shutil.disk_usage(existing).free if free_bytes is None else free_bytes
    if save:
        print(
            f"offline features: {sum(lengths)} tokens × {need // max(sum(lengths), 1)} bytes = {need / 2**20:.1f} MiB "
            f"in {out} ({remaining / 2**20:.1f} MiB still to write, {free / 2**20:.0f} MiB free)"
        )
    if remaining > free:
        raise DistillError(
            f"offline features need {remaining / 2**30:.2f} GiB more but {out} has {free / 2**30:.2f} GiB free; "
            "free some space, point run_dir elsewhere, or use drafter.features=online"
        )
    out.mkdir(parents=True, exist_ok=True)
    for i in tqdm(todo, desc="features", unit="shard", disable=not save):
        rows = shards[i]
        tensors = {}
        for r, (feats, last) in zip(rows, compute([dataset[r]["input_ids"] for r in rows])):
            if feats is not None:  # EAGLE-1 needs only the lm_head input
                tensors[f"features_{r}"] = feats.to(DTYPE).cpu().contiguous()
            tensors[f"last_hidden_{r}"] = last.to(DTYPE).cpu().contiguous()
        if save:
            tmp = out / f".tmp-{i:05d}.safetensors"
            save_file(tensors, str(tmp))
            os.replace(tmp, _shard_path(out, i))
    manifest = {
        "layer_ids": list(layer_ids),
        "hidden_size": hidden,
        "dtype": "bfloat16",
        "shard_size": shard_size,
        "tokens": sum(lengths),
        "bytes": need,
        "bytes_per_token": need // max(sum(lengths), 1),
        "rows": len(lengths),
    }
    if save:
        atomic_write_text(out / "manifest.json", json.dumps(manifest, indent=2))
    return manifest


def _shard_path(out: Path, index: int) -> Path:
    return out / f"shard-{index:05d}.safetensors"


class FeatureStore:
    """Read the offline features of dataset rows back, padded like the token batch."""

    def __init__(self, root: Path):
        self.root = Path(root)
        manifest = self.root / "manifest.json"
        if not manifest.exists():
            raise DistillError(
                f"no complete offline features in {self.root}; run training with drafter.features=offline "
                "(or vllm) to write them"
            )
        self.manifest = json.loads(manifest.read_text())

    def batch(self, rows: list[int], width: int) -> tuple[torch.Tensor | None, torch.Tensor]:
        """features (B, width, F) — None when no layer ids were stored — and last_hidden (B, width, H),
        float32, zero past each row's end."""
        feats, lasts = [], []
        for r in rows:
            with safe_open(str(_shard_path(self.root, r // self.manifest["shard_size"])), "pt") as f:
                if self.manifest["layer_ids"]:
                    feats.append(f.get_tensor(f"features_{r}")[:width].float())
                lasts.append(f.get_tensor(f"last_hidden_{r}")[:width].float())

        def pad(xs):
            return torch.stack([torch.nn.functional.pad(x, (0, 0, 0, width - x.shape[0])) for x in xs])

        return (pad(feats) if feats else None), pad(lasts)
