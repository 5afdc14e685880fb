"""llama.cpp's converter, run once per content in the suite: its GGUF is kept in $DRAFTHUB_CACHE/test-gguf/, keyed by
the bytes of every file the conversion reads (the drafter's directory and the target's, a test's temporary path in
them read as one), its arguments, the pre-tokenizer declared, drafthub's runner and llama.cpp's pinned source. Each
conversion is a fresh interpreter that imports torch and the converter (~4 s, twice that beside the other xdist
worker), and the suite's fitted drafters are the same bytes from one run to the next: CI's kept cache serves them.
A conversion that fails is never kept, so a refusal is always the converter's own; a changed drafter, target,
argument or llama.cpp is a new key. (A kept GGUF's general.name is the one its first conversion derived from a
staging directory's random name.)"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
from pathlib import Path

from heads.formats import llamacpp

_TMP = re.compile(rb"pytest-\d+(/popen-gw\d+)?")


def _key(args: list[str], pre: str) -> str:
    digest = hashlib.sha256(
        f"{llamacpp.programs._RUNNER}\0{llamacpp.programs.VERSION}\0{llamacpp.programs.SDIST_SHA256}\0{pre}".encode()
    )
    out = args[args.index("--outfile") + 1]
    for arg in args:
        if arg == out:
            continue  # where it is written is not what it is
        path = Path(arg)
        files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else []
        digest.update(b"dir" if files else arg.encode())  # a directory (staged under a random name): its files
        for file in files:
            content = _TMP.sub(b"pytest-N", file.read_bytes())  # a config naming a test's temporary directory
            digest.update(str(file.relative_to(path)).encode() + b"\0" + hashlib.sha256(content).digest())
    return digest.hexdigest()[:32]


def install() -> None:
    """Wrap heads.formats.llamacpp._run_converter with the cache (for this process)."""
    real = llamacpp.programs.run_converter

    def cached(args: list[str], pre: str, out: Path, *, what) -> None:
        kept = Path(os.environ["DRAFTHUB_CACHE"]) / "test-gguf" / f"{_key(args, pre)}.gguf"
        if kept.is_file():
            shutil.copyfile(kept, out)
            return
        real(args, pre, out, what=what)
        kept.parent.mkdir(parents=True, exist_ok=True)
        staged = kept.with_suffix(f".{os.getpid()}.tmp")
        shutil.copyfile(out, staged)
        os.replace(staged, kept)  # whole or absent: the other xdist worker may read it

    llamacpp.programs.run_converter = cached
