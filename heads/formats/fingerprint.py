"""A hash of the files a serving engine reads from an export directory.

The served check records it, and publishing compares it with the directory it is about to
publish, so what was served is byte for byte what goes out. The provenance files (drafthub.json,
README.md, and eval_samples.jsonl, the evidence behind the lossless claim) carry the eval figures
themselves, are not read by any engine, and are left out.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

SAMPLES_FILE = "eval_samples.jsonl"
PROFILE_FILE = "speculation_profile.json"  # the acceptance profile (eval/profile.py), from drafthub.json's report
LOAD_PLOT_FILE = "serving_load.png"  # the card's serving-under-load plot, drawn from the same report
# Written beside the served files, read by no engine; all derive from (and are bound by) drafthub.json's eval report
PROVENANCE_FILES = ("drafthub.json", "README.md", SAMPLES_FILE, PROFILE_FILE, LOAD_PLOT_FILE)


def served_files_hash(export_dir: str | Path) -> str:
    """sha256 over (relative path, bytes) of every file but the provenance files, in path order."""
    root = Path(export_dir)
    digest = hashlib.sha256()
    for path in sorted(
        p for p in root.rglob("*") if p.is_file() and p.relative_to(root).as_posix() not in PROVENANCE_FILES
    ):
        digest.update(path.relative_to(root).as_posix().encode() + b"\0")
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()
