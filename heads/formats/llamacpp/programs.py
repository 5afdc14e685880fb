"""llama.cpp's programs, found, never vendored: `llama-server` on PATH (or `$DRAFTHUB_LLAMA_SERVER`), else the build
`scripts/build_llamacpp.py` leaves under `$DRAFTHUB_CACHE/llamacpp/<version>/` from the pinned source package
(llama-cpp-python's sdist carries the whole llama.cpp tree: the converter, the server, llama-tokenize); and its own
converter run on a drafter or a target (convert_hf_to_gguf.py)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Optional

from heads.cache import cache_root, cpu_key
from heads.errors import HeadsError

PACKAGE, VERSION = "llama-cpp-python", "0.3.36"  # its sdist vendors llama.cpp at commit 0c1e57098 (MIT)

SDIST_SHA256 = "832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e"  # checked after each download

BUILD_HINT = "build it once with `python scripts/build_llamacpp.py` (~20 min on 2 cores) or put llama-server on PATH"


def home() -> Path:
    """Where the pinned llama.cpp is built: `$DRAFTHUB_LLAMACPP`, else under drafthub's cache, keyed by the version,
    the source package's digest and the CPU class, so a cache shared between machines never serves a foreign build."""
    if os.environ.get("DRAFTHUB_LLAMACPP"):
        return Path(os.environ["DRAFTHUB_LLAMACPP"])
    return cache_root() / "llamacpp" / f"{VERSION}-{SDIST_SHA256[:12]}-cpu{cpu_key()}"


def source_dir() -> Path:
    return home() / "llama.cpp"


def converter() -> Optional[Path]:
    script = source_dir() / "convert_hf_to_gguf.py"
    return script if script.is_file() else None


def tool(name: str) -> Optional[Path]:
    """A llama.cpp program: `$DRAFTHUB_LLAMA_SERVER` for the server, PATH, then the pinned build."""
    if name == "llama-server" and os.environ.get("DRAFTHUB_LLAMA_SERVER"):
        return Path(os.environ["DRAFTHUB_LLAMA_SERVER"])
    found = shutil.which(name)
    built = home() / "build" / "bin" / name
    return Path(found) if found else (built if built.is_file() else None)


def missing_converter() -> Optional[str]:
    """Why no GGUF can be written here. A llama-server on PATH brings no converter: only the pinned source does."""
    if converter() is None:
        return (
            f"llama.cpp's converter (convert_hf_to_gguf.py) is not in {source_dir()}; unpack the pinned llama.cpp "
            "source with it (and build the server) once with `python scripts/build_llamacpp.py` (~20 min on 2 cores), "
            "or point DRAFTHUB_LLAMACPP at a directory holding such a build"
        )
    return None


def missing() -> Optional[str]:
    """Why drafthub cannot write and serve GGUF exports here (one line), or None."""
    if missing_converter():
        return missing_converter()
    for name in ("llama-server", "llama-tokenize"):
        if tool(name) is None:
            return f"{name} is neither on PATH nor in {home() / 'build' / 'bin'}; {BUILD_HINT}"
    return None


# Runs llama.cpp's converter as llama.cpp ships it; with a declared pre-tokenizer, only a tokenizer the
# converter does not recognize gets the declaration (a recognized one keeps llama.cpp's own choice).
_RUNNER = """
import runpy, sys
src, pre = sys.argv[1], sys.argv[2]
sys.path[:0] = [src, src + "/gguf-py"]
if pre:
    from conversion.base import TextModel
    recognized = TextModel.get_vocab_base_pre
    def get_vocab_base_pre(self, tokenizer):
        try:
            return recognized(self, tokenizer)
        except NotImplementedError:
            return pre
    TextModel.get_vocab_base_pre = get_vocab_base_pre
sys.argv = [src + "/convert_hf_to_gguf.py", *sys.argv[3:]]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def run_converter(args: list[str], pre: str, out: Path, *, what) -> None:
    done = subprocess.run(
        [sys.executable, "-c", _RUNNER, str(source_dir()), pre, *args], capture_output=True, text=True
    )
    if done.returncode != 0 or not out.is_file():
        out.unlink(missing_ok=True)
        lines = [ln for ln in done.stderr.splitlines() if ln.strip() and not ln.startswith("INFO")]
        why = next((ln for ln in reversed(lines) if "rror" in ln), lines[-1] if lines else "no message")
        raise HeadsError(f"llama.cpp's converter refused {what}: {why.strip()}")
