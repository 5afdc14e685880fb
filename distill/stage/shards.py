"""Sharded, resumable writing of the distillation dataset (HF `datasets` shards on disk).

A shard is written to a temporary directory and renamed into place, so a killed run leaves only
complete shards; a rerun skips them. A fingerprint file guards against mixing shards from
different settings in one directory.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import datasets

from distill.errors import DistillError
from heads.formats.staging import atomic_write_text

SHARDS = "shards"
FINGERPRINT = "fingerprint.json"


class ShardWriter:
    def __init__(self, data_dir: Path, fingerprint: dict):
        self.root = Path(data_dir)
        self.shard_dir = self.root / SHARDS
        self.shard_dir.mkdir(parents=True, exist_ok=True)
        fp_file = self.root / FINGERPRINT
        if fp_file.exists():
            existing = json.loads(fp_file.read_text())
            if existing != fingerprint:
                raise DistillError(
                    f"{self.root} holds shards made with other settings (fingerprint differs); "
                    "use another output directory or delete it to start over"
                )
        else:
            atomic_write_text(fp_file, json.dumps(fingerprint, indent=2, sort_keys=True))

    def path(self, index: int) -> Path:
        return self.path_in(self.root, index)

    @staticmethod
    def path_in(data_dir: Path, index: int) -> Path:
        return Path(data_dir) / SHARDS / f"shard-{index:05d}"

    def done(self, index: int) -> bool:
        return self.path(index).exists()

    def copy(self, index: int, shard: Path) -> None:
        """Shard `index` copied from another dataset's shard directory (merging a split distillation)."""
        tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=self.shard_dir))
        try:
            shutil.copytree(shard, tmp, dirs_exist_ok=True)
            os.replace(tmp, self.path(index))
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def write(self, index: int, rows: dict[str, list]) -> None:
        tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=self.shard_dir))
        try:
            datasets.Dataset.from_dict(rows, features=FEATURES).save_to_disk(str(tmp))  # bar silenced by the apps
            os.replace(tmp, self.path(index))
        finally:
            shutil.rmtree(tmp, ignore_errors=True)


FEATURES = datasets.Features(
    {
        "prompt_index": datasets.Value("int64"),  # index into the prompt set, for provenance
        "input_ids": datasets.Sequence(datasets.Value("int32")),  # prompt + answer
        "loss_mask": datasets.Sequence(datasets.Value("int8")),  # 1 on assistant-written tokens
        "prompt_length": datasets.Value("int32"),
        "finish_reason": datasets.Value("string"),  # stop | length | dataset
    }
)


def load_distilled(data_dir: str | Path) -> datasets.Dataset:
    """All complete shards of a distillation dataset as one memory-mapped `datasets.Dataset`."""
    shard_dir = Path(data_dir) / SHARDS
    shards = sorted(p for p in shard_dir.glob("shard-*") if p.is_dir()) if shard_dir.exists() else []
    if not shards:
        raise DistillError(f"no distilled shards under {data_dir}; run the distill stage first")
    return datasets.concatenate_datasets([datasets.load_from_disk(str(p)) for p in shards])
