"""Write an export directory (or one file: atomic_write_text) whole or not at all.

Files go to a temporary sibling first; only a complete directory replaces the destination, so
a failed export leaves nothing behind and an existing export is never half-overwritten.
"""

from __future__ import annotations

import os
import secrets
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator


@contextmanager
def staged_directory(out_dir: str | Path) -> Iterator[Path]:
    """Yield an empty temporary directory that replaces `out_dir` when the block succeeds."""
    out = Path(out_dir)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}-", dir=out.parent))
    try:
        yield tmp
        replace_directory(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def replace_directory(src: str | Path, dst: str | Path) -> None:
    """Move the complete directory `src` to `dst`, replacing what was there (renames only)."""
    src, dst = Path(src), Path(dst)
    if dst.exists():
        old = dst.with_name(f".{dst.name}-old")
        shutil.rmtree(old, ignore_errors=True)
        os.replace(dst, old)
        os.replace(src, dst)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(src, dst)


def atomic_write_text(path: Path, text: str) -> None:
    """Write via a temporary sibling and rename, so readers never see a half-written file; the sibling's
    name is the writer's own, so processes writing the same file at once (every rank of a run) never
    rename each other's temporary away."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}-{secrets.token_hex(4)}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)
