"""What the distilled dataset was made from, by content: the prompt files' bytes and the target's weights.

A stage hash over paths alone would reuse an old dataset after the user rewrote a prompt file or replaced
the weights in place. Digests are of the files' contents; a file's digest is cached under
$DRAFTHUB_CACHE keyed by (path, size, mtime), so a 100 GB target is read once, not on every run.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Optional

from heads.cache import cache_root
from heads.formats.staging import atomic_write_text

_CACHE_NAME = "file-digests.json"
_WEIGHT_FILES = ("*.safetensors", "*.safetensors.index.json", "config.json", "generation_config.json")


def _cache_path() -> Path:
    return cache_root() / _CACHE_NAME


def file_digest(path: Path) -> str:
    """sha256 of a file's bytes, cached by (absolute path, size, mtime_ns)."""
    path = path.resolve()
    stat = path.stat()
    key = f"{path}|{stat.st_size}|{stat.st_mtime_ns}"
    cache_file = _cache_path()
    try:
        cache = json.loads(cache_file.read_text())
    except (OSError, ValueError):
        cache = {}
    if key in cache:
        return cache[key]
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    cache = {k: v for k, v in cache.items() if not k.startswith(f"{path}|")} | {key: h.hexdigest()[:16]}
    try:
        cache_file.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(cache_file, json.dumps(cache))
    except OSError:
        pass  # a read-only cache only costs a re-read next time
    return cache[key]


def tree_digest(root: Path, patterns: tuple[str, ...] = ("**/*",)) -> str:
    """One digest over the files under `root` matching `patterns`: their relative names and contents."""
    files = sorted({p for pattern in patterns for p in root.glob(pattern) if p.is_file()})
    h = hashlib.sha256()
    for f in files:
        if not any(part.startswith(".") for part in f.relative_to(root).parts):  # locks, caches, temporaries
            h.update(f"{f.relative_to(root).as_posix()}:{file_digest(f)}\n".encode())
    return h.hexdigest()[:16]


def source_identity(source: str) -> Optional[str]:
    """Content digest of a local prompt file or dataset directory; None for a Hub dataset name (or toyworld)."""
    path = Path(source).expanduser()
    if path.is_file():
        return file_digest(path)
    if path.is_dir():
        return tree_digest(path)
    return None


def target_identity(name_or_path: str) -> Optional[str]:
    """The target's weights, config and generation config by content, for a local directory (None for a Hub id:
    its name and revision are in the settings, and `hub_commit` pins what they resolved to)."""
    path = Path(name_or_path).expanduser()
    return tree_digest(path, _WEIGHT_FILES) if path.is_dir() else None


def hub_commit(name_or_path: str, revision: Optional[str]) -> Optional[str]:
    """The commit a Hub id's revision resolves to in the local HF cache (None: not cached, or not a Hub id).

    Not part of the stage hash (a first run, before the download, could not know it); recorded in the manifest
    and compared on reuse."""
    if Path(name_or_path).expanduser().exists():
        return None
    try:
        from huggingface_hub import snapshot_download

        snapshot = snapshot_download(name_or_path, revision=revision, local_files_only=True)
    except Exception:  # not cached, not a repo id, or offline: nothing to pin
        return None
    return Path(snapshot).name  # the snapshot folder is named by its commit
