"""Write an export directory whole or not at all.

Files go to a temporary sibling first; only a complete directory replaces the destination, so
a failed export leaves nothing behind and an existing export is never half-overwritten.
"""

from __future__ import annotations

import os
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
