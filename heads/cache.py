"""Where drafthub keeps what it builds once per machine, and the CPU class those builds are keyed by.

One place for both (the distill stage's toy worlds and converted targets, llama.cpp's build, the compiled engine's
kernels), so every layer reads the same `$DRAFTHUB_CACHE` and the same key.
"""

from __future__ import annotations

import hashlib
import os
import platform
from pathlib import Path


def cache_root() -> Path:
    """`$DRAFTHUB_CACHE`, else ~/.cache/drafthub: toy worlds, converted targets, builds, file digests."""
    return Path(os.environ.get("DRAFTHUB_CACHE", Path.home() / ".cache" / "drafthub"))


def cpu_key() -> str:
    """This machine's CPU class: its architecture and instruction-set flags, hashed (as .ci/run keys its cache). What
    is compiled for the CPU it runs on (llama.cpp's GGML_NATIVE build, inductor's kernels) is kept per class, so a
    cache shared between machines never serves a foreign build (an AVX-512 one on an AVX2-only machine)."""
    flags = ""
    try:
        with open("/proc/cpuinfo") as info:
            flags = next((line.split(":", 1)[1] for line in info if line.startswith(("flags", "Features"))), "")
    except OSError:
        pass
    return hashlib.sha256(f"{platform.machine()} {' '.join(sorted(flags.split()))}".encode()).hexdigest()[:12]


def use_compile_cache() -> Path:
    """Point torch's inductor at a kernel cache kept between runs, keyed by torch's version and the CPU class, unless
    the user already chose one (TORCHINDUCTOR_CACHE_DIR); returns the directory. A warm cache turns minutes of
    compiling the static engine's graphs into seconds."""
    import torch

    chosen = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    if chosen:
        return Path(chosen)
    path = cache_root() / "inductor" / f"torch{torch.__version__}-cpu{cpu_key()}"
    path.mkdir(parents=True, exist_ok=True)
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(path)
    return path
